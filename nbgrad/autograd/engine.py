"""The backward engine: the order nodes run in, gradient accumulation, the reduction of
broadcast gradients, and ``backward``/``grad``.

A graph node is the ``Context`` of one op call (``function.py``). A tensor made by an op
points at its node (``t._node``) and at which of the node's outputs it is (``t._index``);
a node points back at its inputs and keeps the arrays they held (``input_arrays``), whose
shapes and dtypes the gradients must have. Backward runs nodes newest first (by creation
number), so every node has all its consumers' gradients before it runs.

The engine knows nodes and arrays, not the Tensor class: without ``create_graph`` the
gradients are ndarrays and each node's ``backward`` runs its kernels; with it they are
tensors, each node's ``vjp`` is called instead (written with differentiable ops, so the
backward pass is itself recorded), and the engine's own steps use the tensors' methods
(``sum_to_size``, ``to``). See docs/derivations.md#second-derivatives.

``backward`` hands a leaf that has post-accumulate-grad hooks its gradient during the pass:
the leaf's gradient is complete once every node that consumes it has run, and since nodes
run by decreasing ``seq`` that is when the next node to run is older than the leaf's
oldest consumer (a consumer that never receives a gradient never runs, and is passed all
the same). A walk of the graph before the pass finds those consumers; without such hooks
there is no walk and leaves get their gradients after the pass.

``backward`` and ``grad`` run with NumPy's floating-point warnings off, as PyTorch's
backward runs: a gradient that overflows is inf and 0 * inf is NaN, without a warning,
whether a kernel or NumPy (a leaf's sum of gradients, mul's small products) computes it.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from heapq import heappop, heappush
from typing import Any

import numpy as np

from ..kernels import buffers
from ..kernels.broadcast_sum import sum_to_shape
from ..runtime.compile_ahead import compile_hook
from . import hooks, tracing, versions
from .anomaly import check_backward
from .anomaly import state as anomaly
from .grad_mode import enable_grad


def _freed_graph_error(node) -> RuntimeError:
    return RuntimeError(
        f"backward: the graph through {node.name} was already freed by an earlier "
        "backward; pass retain_graph=True to the first backward to go through it twice")


def as_consumed(t, seq: int):
    """``t`` as the node numbered ``seq`` consumed it. A node's inputs are older than it,
    unless an in-place op recorded later made the tensor the output of a newer node
    (``ops/inplace.py``): that node keeps the value it replaced as ``replaced``, which
    is what the older consumer saw (followed back through every later in-place op)."""
    while t._node is not None and t._node.seq > seq:
        t = t._node.replaced
    return t


def _broadcastable_to(shape: tuple, target: tuple) -> bool:
    """True if an array of ``shape`` broadcasts to ``target``."""
    if len(shape) > len(target):
        return False
    for s, t in zip(reversed(shape), reversed(target)):  # (a loop: all() of a generator
        if s != 1 and s != t:                            # cost a bias gradient 1 us)
            return False
    return True


def fit_gradient(node, position: int, g: Any, like: np.ndarray, create_graph: bool) -> Any:
    """The gradient ``g`` of input ``position`` (the array ``like``) brought to the input's
    shape and dtype: summed over the axes the input was broadcast along, cast to its
    dtype. A gradient of a shape the input cannot broadcast to is the op's error."""
    shape, dtype = like.shape, like.dtype
    if not (create_graph or isinstance(g, np.ndarray)):
        g = np.asarray(g, dtype=dtype)
    if g.shape != shape:
        if not _broadcastable_to(shape, g.shape):
            raise RuntimeError(
                f"{node.name}.backward returned a gradient of shape {g.shape} for input "
                f"{position}, whose shape {shape} does not broadcast to it")
        g = g.sum_to_size(shape) if create_graph else sum_to_shape(g, shape)
    if g.dtype != dtype:
        g = g.to(dtype) if create_graph else g.astype(dtype)
    return g


def _call_backward(node, grads: list, create_graph: bool, like: Any) -> tuple:
    """The node's input gradients for its output gradients ``grads`` (None where no
    consumer sent one: zeros of that output's shape)."""
    if node.output_meta is not None:
        grads = [g if g is not None else _zeros(shape, dtype, create_graph, like)
                 for g, (shape, dtype) in zip(grads, node.output_meta)]
    if not create_graph:
        if node.ahead:
            compile_hook.join(node.ahead)
        in_grads = node.fn.backward(node, *grads)
    else:
        if not node.fn.has_vjp():
            raise RuntimeError(
                f"backward(create_graph=True): {node.name} has no second derivative (no "
                f"differentiable vjp); `python -m nbgrad ops` lists the ops that have one")
        in_grads = node.fn.vjp(node, *grads)  # run_backward has turned grad mode on
    if not isinstance(in_grads, tuple):
        in_grads = (in_grads,)
    if len(in_grads) != len(node.inputs):
        raise gradient_count_error(node, in_grads)
    return in_grads


def gradient_count_error(node, in_grads: tuple) -> RuntimeError:
    return RuntimeError(f"{node.name}.backward returned {len(in_grads)} gradients for "
                        f"{len(node.inputs)} inputs")


def _zeros(shape: tuple, dtype: np.dtype, create_graph: bool, like: Any) -> Any:
    z = np.zeros(shape, dtype)
    return type(like)._wrap(z, None, 0) if create_graph else z


_ROOT = -1  # the "last consumer" of a root leaf, which no node feeds: after every node
_END = -2  # below every seq: the traversal is over


def _last_consumers(roots: Sequence) -> list:
    """``(seq, leaf)`` for each leaf with post-accumulate hooks that a gradient from
    ``roots`` can reach, ``seq`` the smallest creation number among the leaf's consumers
    (the last of them to run), sorted so that ``pop()`` gives the first to complete."""
    last = {t: _ROOT for t in roots if t._node is None}
    stack = [t._node for t in roots if t._node is not None]
    seen = set(stack)
    while stack:
        node = stack.pop()
        seq = node.seq
        for needed, t in zip(node.needs_input_grad, node.inputs):
            if not needed:
                continue
            child = t._node
            if child is not None and child.seq > seq:
                t = as_consumed(t, seq)
                child = t._node
            if child is None:
                if last.get(t, seq) >= seq:
                    last[t] = seq
            elif child not in seen:
                seen.add(child)
                stack.append(child)
    # hooks looked up once per leaf, after the walk: a weak-dictionary lookup costs more
    # than a step of the walk
    return sorted(((seq, leaf) for leaf, seq in last.items() if hooks.has_post_hooks(leaf)),
                  key=_first)


def _first(pair: tuple) -> Any:
    return pair[0]


def run_backward(roots: Sequence, root_grads: Sequence, retain_graph: bool,
                 create_graph: bool, wanted: Sequence = (),
                 store: Callable | None = None) -> tuple[dict, list]:
    """Propagate ``root_grads`` from ``roots`` through the graph.

    Nodes run in decreasing creation order (``Context.seq``) from a heap that holds each
    node once, from the moment its first gradient arrives: every consumer of a node was
    made after it, so all of a node's gradients have arrived when it runs.

    Returns ``(leaf_grads, wanted_grads)``: ``{leaf: grad}`` for every leaf reached, and
    the gradient of each tensor in ``wanted`` (None where none arrived). Gradients are
    ndarrays, or tensors when ``create_graph`` is set. With ``store`` (``backward``'s), a
    leaf that has post-accumulate hooks is not in ``leaf_grads``: as soon as its gradient
    is complete, ``store(leaf, grad, shared)`` accumulates it and the hooks run.
    """
    node_grads: dict = {}  # node -> its outputs' gradients so far
    leaf_grads: dict = {}
    ready: list = []  # heap of (-seq, node)
    waiting = _last_consumers(roots) if store and hooks.any_post_registered else []

    def accumulate(t, g):
        node = t._node
        if node is None:
            previous = leaf_grads.get(t)
            leaf_grads[t] = g if previous is None else previous + g
            return
        slots = node_grads.get(node)
        if slots is None:
            slots = node_grads[node] = [None] * (len(node.output_meta) if node.output_meta
                                                 else 1)
            heappush(ready, (-node.seq, node))
        i = t._index
        slots[i] = g if slots[i] is None else slots[i] + g

    def finish(below: int) -> None:
        """Store the gradient of each waiting leaf whose last consumer has run (its seq
        is above ``below``, the next node's) and call the leaf's post-accumulate hooks."""
        while waiting and waiting[-1][0] > below:
            leaf = waiting.pop()[1]
            g = leaf_grads.pop(leaf, None)
            if g is None:  # no gradient reached it in this pass: no hook (as in PyTorch)
                continue
            if run_hooks:
                g = hooks.run_leaf_hook(leaf, g, create_graph, like)
            # References besides ``g`` and getrefcount's argument mean that the engine
            # still holds the array (a pending node's gradient, another leaf's, a root's),
            # so the leaf, whose hooks may change its .grad in place, gets a copy.
            shared = sys.getrefcount(g) > 2
            store(leaf, g, shared)
            hooks.run_post_hooks(leaf)

    with enable_grad() if create_graph else _NO_CONTEXT:
        for t, g in zip(roots, root_grads):
            accumulate(t, g)

        wanted_at: dict = {}
        for i, t in enumerate(wanted):
            if t._node is not None:
                wanted_at.setdefault(t._node, []).append((i, t._index))
        wanted_grads: list = [None] * len(wanted)

        like = roots[0]
        run_hooks, check = hooks.any_registered, anomaly.enabled
        writes = versions.writes
        if not ready:
            finish(_END)  # the root is a leaf: no node runs
        while ready:
            node = heappop(ready)[1]
            grads = node_grads.pop(node)
            if node.released:
                raise _freed_graph_error(node)
            # A write since this node was made: a saved tensor may have changed, and an
            # input may have become the output of a newer (in-place) node.
            stale = node.seq < writes.last
            if stale:
                versions.check(node)
            if run_hooks:
                grads = hooks.run_output_hooks(node, grads, create_graph, like)
            if wanted_at:
                for i, out_index in wanted_at.get(node, ()):
                    wanted_grads[i] = grads[out_index]
            if create_graph or node.output_meta is not None or node.ahead:
                in_grads = _call_backward(node, grads, create_graph, like)
            else:  # _call_backward's common case, in line: W9's step 2% shorter
                in_grads = node.fn.backward(node, *grads)
                if not isinstance(in_grads, tuple):
                    in_grads = (in_grads,)
                if len(in_grads) != len(node.inputs):
                    raise gradient_count_error(node, in_grads)
            if check:
                check_backward(node, grads, in_grads)
            needs, arrays = node.needs_input_grad, node.input_arrays
            for position, t in enumerate(node.inputs):
                g = in_grads[position]
                if g is None or not needs[position]:
                    continue
                a = arrays[position]
                if stale and t._node is not None and t._node.seq > node.seq:
                    t = as_consumed(t, node.seq)
                if create_graph:
                    if not hasattr(g, "_node"):
                        g = type(like)._wrap(np.asarray(g, a.dtype), None, 0)
                    g = fit_gradient(node, position, g, a, True)
                elif type(g) is not np.ndarray or g.shape != a.shape or g.dtype != a.dtype:
                    g = fit_gradient(node, position, g, a, False)
                accumulate(t, g)
            if not retain_graph:
                node.release()
            if waiting:
                grads = in_grads = g = None  # the loop's references, which finish counts
                finish(-ready[0][0] if ready else _END)

    if run_hooks:
        hooks.run_leaf_hooks(leaf_grads, create_graph, like)
    for i, t in enumerate(wanted):
        if t._node is None and t in leaf_grads:
            wanted_grads[i] = leaf_grads[t]
    return leaf_grads, wanted_grads


class _NoContext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc) -> None:
        return None


_NO_CONTEXT = _NoContext()


def _root_grad(t, grad, caller: str, create_graph: bool) -> Any:
    """The gradient a root starts with: ones for a one-element output, else ``grad``
    (a tensor stays a tensor under ``create_graph``, so the result depends on it)."""
    if grad is None:
        if t._data.size != 1:
            raise RuntimeError(
                f"{caller}: grad can be implicitly created only for scalar outputs; this "
                f"output has shape {t.shape}, so pass grad= of that shape")
        g = np.ones(t.shape, dtype=t.dtype)
        return type(t)._wrap(g, None, 0) if create_graph else g
    is_tensor = hasattr(grad, "_node")
    if create_graph and is_tensor:
        if grad.shape != t.shape:
            raise ValueError(f"{caller}: grad has shape {grad.shape} but the output has "
                             f"shape {t.shape}")
        return grad if grad.dtype == t.dtype else grad.to(t.dtype)
    g = np.asarray(grad._data if is_tensor else grad, dtype=t.dtype)
    if g.shape != t.shape:
        raise ValueError(f"{caller}: grad has shape {g.shape} but the output has shape "
                         f"{t.shape}")
    return type(t)._wrap(g, None, 0) if create_graph else g


def _owned(g: np.ndarray, handed_out: set, shared: bool) -> np.ndarray:
    """A gradient array a leaf may keep: not ``shared`` (referenced elsewhere, as the
    engine judged), not a view of an array that anything else still references (arrays
    that Numba returns carry a non-array base, its memory owner, and are kept), not
    read-only, not shared with another leaf."""
    if (shared or _views_a_shared_array(g) or not g.flags.writeable
            or id(g) in handed_out):
        g = g.copy()
    handed_out.add(id(g))
    return g


def _views_a_shared_array(g: np.ndarray) -> bool:
    """Whether ``g`` is a view of an ndarray referenced by more than ``g``. A view that is
    the only way to its base (a reshaped or sliced kernel output, ``out[:M, :P]`` of a
    padded buffer) can be kept as it is; copying it cost W4 and W2e a pass over their
    gradients. CPython counts three references to a base only ``g`` holds: ``g``'s,
    ``base`` here, and getrefcount's argument, and one more for a base of the pool of
    large arrays (kernels/buffers.py), which hands it out again only once ``g`` is gone."""
    base = g.base
    if not isinstance(base, np.ndarray):
        return False
    if isinstance(base.base, np.ndarray):
        return True
    references = sys.getrefcount(base)  # (the pool is looked at only when it matters)
    return references > 3 and references > 3 + buffers.pool_references(base)


_leaf_lock = threading.Lock()  # one read-add-write of a leaf's .grad at a time


def backward(t, grad: Any = None, retain_graph: bool | None = None,
             create_graph: bool = False) -> None:
    """Accumulate d(t)/d(leaf) (times ``grad``) into ``leaf.grad`` for every leaf that
    requires grad, and call each leaf's post-accumulate hooks right after its own. With
    ``create_graph`` the accumulated gradients are themselves differentiable (and the
    graph is kept unless ``retain_graph=False``)."""
    recorder = tracing.recorder
    if recorder is not None and recorder.recording():  # nb.compile is tracing
        return recorder.backward(t, grad, retain_graph, create_graph)
    if not t._requires_grad:
        raise RuntimeError("backward: this tensor does not require grad and has no grad_fn "
                           "(did you create it under no_grad, or forget requires_grad=True?)")
    retain_graph = create_graph if retain_graph is None else retain_graph
    root_grad = _root_grad(t, grad, "backward", create_graph)
    wrap = type(t)._wrap
    handed_out = {id(root_grad)}  # the caller's array: a leaf gets a copy, never it

    def store(leaf, g: Any, shared: bool = False) -> None:
        """leaf.grad += g: the leaves with post-accumulate hooks during the pass, the
        others after it. Under a lock: threads may run backward into shared leaves."""
        if create_graph:
            with enable_grad(), _leaf_lock:
                leaf.grad = g if leaf.grad is None else leaf.grad + g
            return
        g = _owned(g, handed_out, shared)
        with _leaf_lock:
            leaf.grad = wrap(g if leaf.grad is None else leaf.grad._data + g, None, 0)

    with np.errstate(all="ignore"):
        leaf_grads, _ = run_backward([t], [root_grad], retain_graph, create_graph,
                                     store=store)
        for leaf, g in leaf_grads.items():
            store(leaf, g)


def grad(outputs, inputs, grad_outputs=None, retain_graph: bool | None = None,
         create_graph: bool = False) -> tuple:
    """Gradients of ``outputs`` w.r.t. ``inputs``, returned rather than accumulated into
    ``.grad``. An input the outputs do not depend on gets ``None``. With ``create_graph``
    the results are differentiable (``nb.grad(nb.grad(y, x, create_graph=True)[0].sum(),
    x)`` is a second derivative)."""
    recorder = tracing.recorder
    if recorder is not None and recorder.recording():  # nb.compile is tracing
        return recorder.grad(outputs, inputs, grad_outputs, retain_graph, create_graph)
    single = hasattr(outputs, "_node")
    outputs = [outputs] if single else list(outputs)
    inputs = [inputs] if hasattr(inputs, "_node") else list(inputs)
    if grad_outputs is None:
        grad_outputs = [None] * len(outputs)
    elif hasattr(grad_outputs, "_node") or isinstance(grad_outputs, np.ndarray):
        grad_outputs = [grad_outputs]
    if len(grad_outputs) != len(outputs):
        raise ValueError(f"grad: {len(outputs)} outputs but {len(grad_outputs)} grad_outputs")
    for i, t in enumerate(inputs):
        if not t._requires_grad:
            raise RuntimeError(f"grad: input {i} (shape {t.shape}) does not require grad")
    for t in outputs:
        if not t._requires_grad:
            raise RuntimeError(f"grad: an output (shape {t.shape}) does not require grad")
    retain_graph = create_graph if retain_graph is None else retain_graph
    root_grads = [_root_grad(t, g, "grad", create_graph) for t, g in zip(outputs, grad_outputs)]
    with np.errstate(all="ignore"):
        _, found = run_backward(outputs, root_grads, retain_graph, create_graph,
                                wanted=inputs)
    wrap = type(outputs[0])._wrap
    if create_graph:
        return tuple(found)
    return tuple(None if g is None else wrap(np.array(g), None, 0) for g in found)
