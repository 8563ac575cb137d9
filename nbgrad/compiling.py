"""Compiling nbgrad's kernels by running its ops: ``warmup``, which compiles ahead of
time in worker processes, ``check_op`` for ``python -m nbgrad check``, and the loop of the
helper process that compiles an op's backward while the user's process goes on with the
forward (runtime/compile_ahead.py starts it; docs/compiling.md).

Numba compiles a kernel for each new combination of argument types the first time it
is called and keeps the machine code in its disk cache; a later process loads it in
milliseconds. This module sits above the ops it runs; the runtime below it only counts
and announces compiles (runtime/notices.py).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import pickle
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
from numba.core.registry import CPUDispatcher

from .runtime import startup
from .runtime.compile_ahead import compile_hook, default_jobs


def _compile_backwards() -> None:
    """The helper's loop (``compile_ahead.BackwardAhead``): read each call from stdin,
    run it (``_op_backward``, ``_optimizer_step``, ``_early_functions`` or
    ``_check_op``), write a line to stdout; ends at the end of stdin."""
    run = {"op": _op_backward, "step": _optimizer_step, "early": _early_functions,
           "check": _check_op}
    calls = sys.stdin.buffer
    while size := int.from_bytes(calls.read(8), "little"):
        kind, *call = pickle.loads(calls.read(size))
        with contextlib.suppress(Exception):  # the parent's own call reports any error
            run[kind](*call)
        print(kind, flush=True)


def _op_backward(name: str, arrays: list, needs: tuple[bool, ...], params: dict) -> None:
    """The op ``name`` forward on ``arrays`` and backward with all-ones gradients."""
    from .function import REGISTRY
    from .tensor import Tensor

    inputs = [Tensor(a, requires_grad=True) if need else a for a, need in zip(arrays, needs)]
    backward_of_ones(REGISTRY[name].apply(*inputs, **params), inputs)


def _early_functions(functions: list[tuple[str, str]], dtype: str) -> None:
    """Compile the C functions ``(module, name)`` (``runtime.jit.compiled_once`` with
    ``early``) for ``dtype`` into the cache."""
    import importlib

    from numba import from_dtype

    for module, name in functions:
        getattr(importlib.import_module(module), name).provide(from_dtype(np.dtype(dtype)))


def _check_op(name: str) -> None:
    """Gradcheck the registered op ``name`` through its samples (the report is dropped:
    the parent runs the same check and reports it)."""
    from .testing import check_registered

    check_registered(name)


def _optimizer_step(optimizer: str, groups: list[tuple[list, dict]]) -> None:
    """One step of ``nbgrad.optim.<optimizer>`` over the param groups (arrays, options)
    with all-ones gradients: the same sizes and dtypes select the same kernels."""
    from . import optim
    from .tensor import Tensor

    param_groups = []
    for arrays, options in groups:
        params = [Tensor(a, requires_grad=True) for a in arrays]
        for p in params:
            p.grad = Tensor(np.ones_like(p._data))
        param_groups.append({"params": params, **options})
    getattr(optim, optimizer)(param_groups).step()


def backward_of_ones(result: Any, inputs: list) -> None:
    """The gradients of ``result`` (an op's Tensor or tuple of Tensors) with respect to
    the Tensors among ``inputs``, for all-ones output gradients: what compiles an op's
    backward kernels."""
    from .autograd import grad
    from .tensor import Tensor

    outputs = [r for r in (result if isinstance(result, tuple) else (result,))
               if isinstance(r, Tensor) and r.requires_grad]
    leaves = [x for x in inputs if isinstance(x, Tensor)]
    if outputs:
        grad(outputs, leaves, [np.ones(o.shape, o.dtype) for o in outputs])


# -- warm-up ------------------------------------------------------------------------------


def _nbgrad_dispatchers() -> list[CPUDispatcher]:
    """The module-level kernels of nbgrad.kernels (and their serial twins)."""
    from . import kernels

    found = []
    for name, module in list(sys.modules.items()):
        if not name.startswith(kernels.__name__ + "."):
            continue
        for value in vars(module).values():
            if isinstance(value, CPUDispatcher) and value.py_func.__module__ == name:
                found.append(value)
    return found


def compile_twins() -> int:
    """Compile the parallel form of every ``njit_with_serial`` kernel for the argument
    types its serial form was compiled for, and the other way round: small inputs run
    the serial forms, training-size inputs the parallel ones. Returns the number of
    signatures compiled."""
    compiled = 0
    for kernel in _nbgrad_dispatchers():
        twin = getattr(kernel, "serial", None)
        if not isinstance(twin, CPUDispatcher):
            continue
        for a, b in ((kernel, twin), (twin, kernel)):
            for signature in set(a.signatures) - set(b.signatures):
                b.compile(signature)
                compiled += 1
    return compiled


def _as_input(x: Any, dtype: np.dtype) -> Any:
    """A floating-point sample array as a Tensor of ``dtype`` that requires grad; anything
    else unchanged."""
    from .tensor import Tensor

    arr = x._data if isinstance(x, Tensor) else x
    if isinstance(arr, np.ndarray) and arr.dtype.kind == "f":
        return Tensor(arr.astype(dtype), requires_grad=True)
    return x


def warm_op(name: str, dtypes: Sequence[str], twins: bool = True) -> tuple[str, float]:
    """Run the registered op ``name`` forward and backward through its samples in each of
    ``dtypes``, then (``twins``) compile the kernels' other forms (``compile_twins``).
    Returns the op name and the seconds it took."""
    from .function import REGISTRY
    from .testing.gradcheck import sample_rng

    start = time.perf_counter()
    op = REGISTRY[name]
    for dtype in dtypes:
        for sample in op.samples(sample_rng(name)):
            inputs = [_as_input(x, np.dtype(dtype)) for x in sample.inputs]
            backward_of_ones(op.apply(*inputs, **sample.params), inputs)
    if twins:
        compile_twins()
    return name, time.perf_counter() - start


def _progress(total: int, desc: str) -> Any:
    """A tqdm bar on stderr, or None when tqdm is not installed."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=desc, unit="op", file=sys.stderr)


def map_in_workers(fn: Callable, items: Sequence, jobs: int, desc: str | None) -> Iterator:
    """``fn(item)`` for every item, in ``jobs`` fresh worker processes (one item at a
    time each, results in the order of ``items``), with a progress bar named ``desc``
    (None: none). ``jobs`` 1 runs in this process. Workers are spawned, not forked: a
    forked child would inherit Numba's running thread pool."""
    bar = None if desc is None else _progress(len(items), desc)
    if jobs == 1:
        results: Iterable = map(fn, items)
        pool = None
    else:
        with startup.numba_target_environ():  # the workers compile for this process's CPU
            pool = multiprocessing.get_context("spawn").Pool(jobs, _no_backward_ahead)
        results = pool.imap(fn, items, chunksize=1)
    try:
        for done, result in enumerate(results, 1):
            if bar is not None:
                bar.update(1)
            elif desc is not None:
                print(f"{desc}: {done}/{len(items)}", file=sys.stderr, flush=True)
            yield result
    finally:
        if pool is not None:
            pool.terminate()
        if bar is not None:
            bar.close()


def _no_backward_ahead() -> None:
    """Worker initialiser: the workers compile side by side already, without helpers."""
    compile_hook.enabled = False


def workers_for(names: Sequence[str], jobs: int) -> int:
    """How many worker processes to run ``names`` (registered ops) in: at most ``jobs``
    and one per op, and none besides this process (1) if an op was registered outside
    nbgrad's modules: a fresh process, which imports only nbgrad, would not know it."""
    from .function import REGISTRY

    if any(not REGISTRY[n].__module__.startswith("nbgrad.") for n in names):
        return 1
    return max(1, min(jobs, len(names)))


def _warm_one(args: tuple[str, tuple[str, ...]]) -> tuple[str, float]:
    return warm_op(*args)


def check_op(name: str) -> tuple[str, Any, Any, float]:
    """``python -m nbgrad check``'s work for one op (in a worker process): the op name,
    its gradcheck and gradgradcheck reports, and the seconds they took."""
    from .testing import check_registered

    start = time.perf_counter()
    first = check_registered(name)
    second = check_registered(name, second_order=True)
    return name, first, second, time.perf_counter() - start


def warmup(ops: Sequence[str] | None = None, dtypes: Sequence[str] = ("float32", "float64"),
           jobs: int | None = None) -> list[tuple[str, float]]:
    """Compile the kernels of ``ops`` (default: every registered op) for ``dtypes`` ahead
    of time, in ``jobs`` worker processes (default: one per core), into the disk cache
    that later processes load from. Returns ``(op, seconds)`` per op."""
    from .function import REGISTRY

    names = sorted(REGISTRY) if ops is None else list(ops)
    unknown = [n for n in names if n not in REGISTRY]
    if unknown:
        raise ValueError(f"warmup: unknown op(s) {', '.join(unknown)} "
                         f"(see `python -m nbgrad ops`)")
    for dtype in dtypes:
        if np.dtype(dtype).kind != "f":
            raise ValueError(f"warmup: dtypes must be floating-point, got {dtype!r}")
    jobs = default_jobs() if jobs is None else jobs
    if jobs < 1:
        raise ValueError(f"warmup: jobs must be at least 1, got {jobs}")
    items = [(name, tuple(dtypes)) for name in names]
    return list(map_in_workers(_warm_one, items, workers_for(names, jobs), "compiling"))
