"""Function: the base class of every differentiable op, its per-call Context, and the registry.

An op is a ``Function`` subclass with two static methods on plain ndarrays::

    @nb.register("cube", samples=lambda rng: [nb.Sample(rng.standard_normal((3, 4)))])
    class Cube(nb.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 3 * x * x * g          # one gradient per positional input

        @staticmethod
        def vjp(ctx, g):                  # the same, in differentiable ops (create_graph)
            (x,) = ctx.inputs
            return 3 * x * x * g

    y = Cube.apply(t)                     # a Tensor wired into the graph

Positional inputs of ``apply`` are differentiable candidates (Tensors, arrays, or None);
keyword arguments are parameters handed to ``forward`` unchanged (ints, tuples, graphs)
and kept on the node as ``ctx.params``. A gradient may be returned with the shape of the
broadcast result: the engine sums it to the input's shape and casts it to its dtype.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from . import dtypes
from .autograd import grad_mode, tracing, versions
from .autograd.anomaly import check_forward, user_stack
from .autograd.anomaly import state as anomaly
from .autograd.versions import same_memory
from .runtime.compile_ahead import compile_hook
from .tensor import Tensor


class Context:
    """Per-call state of an op: what forward saved for backward, and the graph node itself.

    Attributes set by the op (``ctx.stride = 2``) live in ``__dict__`` and are dropped,
    together with the saved arrays, when the graph is released after backward. ``seq``
    numbers the nodes in creation order: a node's inputs were made before it, so visiting
    nodes by decreasing ``seq`` visits every consumer before what it consumes.
    """

    __slots__ = ("fn", "inputs", "needs_input_grad", "input_arrays", "params",
                 "saved_tensors", "saved_versions", "output_meta", "released", "seq", "ahead",
                 "__dict__")

    def __init__(self, fn: type[Function], inputs: tuple, needs_input_grad: tuple[bool, ...],
                 input_arrays: list, params: dict):
        self.fn = fn
        self.inputs = inputs
        self.needs_input_grad = needs_input_grad
        self.input_arrays = input_arrays  # what forward received: gradients take their shapes
        self.params = params
        self.saved_tensors: tuple = ()
        self.saved_versions: tuple = ()  # (counter, k, shape, dtype) per saved output k
        self.output_meta: tuple | None = None
        self.released = False
        self.seq = next(versions.clock)
        self.ahead = 0  # the ticket of this call's backward in the compile helper, if sent

    def save_for_backward(self, *arrays: Any) -> None:
        self.saved_tensors = arrays

    def watch_output(self, index: int, array: np.ndarray, counter: Any) -> None:
        """Output ``index`` (whose array is ``array``) got its version ``counter``: keep
        the counter if this node saved that array (or a view of it), so that backward
        sees writes into it (``autograd/versions.py``)."""
        if self.released:
            return
        for s in self.saved_tensors:
            if type(s) is np.ndarray and same_memory(s, array):
                self.saved_versions += ((counter, index, array.shape, array.dtype),)
                return

    def output(self, array: np.ndarray, index: int = 0) -> Tensor:
        """Output ``index`` of this node as a Tensor in the graph, from the array forward
        saved: a ``vjp`` that uses the output (tanh's 1 - y^2) differentiates through it."""
        return Tensor._wrap(array, self, index)

    def release(self) -> None:
        """Free every buffer this node holds; a later backward through it is an error."""
        self.saved_tensors = ()
        self.saved_versions = ()
        self.inputs = ()
        self.input_arrays = []
        self.params = {}
        self.__dict__.clear()
        self.released = True

    @property
    def name(self) -> str:
        return self.fn.op_name or self.fn.__name__

    def __repr__(self) -> str:
        return f"<{self.name}Backward>"


class Function:
    """Base class of differentiable ops; subclasses define ``forward`` and ``backward``."""

    op_name: str = ""
    samples: Callable[[np.random.Generator], Iterable[Sample]] | None = None

    @staticmethod
    def forward(ctx: Context, *arrays: Any, **params: Any) -> Any:
        raise NotImplementedError

    @staticmethod
    def backward(ctx: Context, *grads: np.ndarray) -> Any:
        raise NotImplementedError

    @staticmethod
    def vjp(ctx: Context, *grads: Tensor) -> Any:
        """The backward written with differentiable nbgrad ops on Tensors (``ctx.inputs``,
        ``ctx.output(...)``, ``ctx.params``): what the engine calls when the backward pass
        is itself recorded (``create_graph=True``). Ops without it have no second
        derivative."""
        raise NotImplementedError

    @classmethod
    def has_vjp(cls) -> bool:
        return cls.vjp is not Function.vjp

    @classmethod
    def apply(cls, *inputs: Any, **params: Any) -> Any:
        """Run ``forward`` on the inputs' arrays and, if any input needs a gradient, record
        the call as a graph node. Returns a Tensor, or a tuple of Tensors."""
        recorder = tracing.recorder
        if recorder is not None and recorder.recording():  # nb.compile is tracing
            return recorder.apply(cls, inputs, params)
        grad_on = grad_mode.state.enabled
        arrays = []
        needs = []
        for x in inputs:
            if isinstance(x, Tensor):
                arrays.append(x._data)
                needs.append(grad_on and x._requires_grad)
            else:
                arrays.append(x)
                needs.append(False)
        record = True in needs
        ctx = Context(cls, inputs if record else (), tuple(needs), arrays, params)
        compiled = compile_hook.compiles.started
        try:
            out = cls.forward(ctx, *arrays, **params)
        except (NotImplementedError, TypeError) as err:
            dtypes.raise_if_storage_only(cls.op_name, arrays, err)  # float16 met a kernel
            raise
        # (``done < sent`` first: a plain comparison while the helper has nothing pending,
        # where a method call and a lookup cost W9 5% of its forward pass)
        if (record and (compile_hook.compiles.started != compiled
                        or (compile_hook.done < compile_hook.sent
                            and compile_hook.busy_with(cls.op_name)))
                and _is_nbgrad_op(cls)):
            # a first use (or a call like one the helper is still on, whose forward kernels
            # this call reused but whose backward may need others): the helper compiles this
            # backward while the forward goes on
            ctx.ahead = compile_hook.submit(cls.op_name, arrays, ctx.needs_input_grad, params)
        if anomaly.enabled:
            check_forward(ctx.name, arrays, out if isinstance(out, tuple) else (out,))
            if record:
                ctx.creation_stack = user_stack()
        if isinstance(out, tuple):
            return _outputs(ctx, out, inputs, record)
        t = Tensor._wrap(out, ctx if record else None, 0)
        if type(out.base) is np.ndarray:  # a view: of an input's memory, perhaps
            _share_storage(t, inputs)
        return t


def _outputs(ctx: Context, out: tuple, inputs: tuple, record: bool) -> tuple:
    """The tensors of an op with several outputs (``apply``'s tail for a tuple)."""
    if record:
        ctx.output_meta = tuple([(o.shape, o.dtype) for o in out])
    outs = tuple([Tensor._wrap(o, ctx if record else None, i if record else 0)
                  for i, o in enumerate(out)])
    for t in outs:
        if type(t._data.base) is np.ndarray:
            _share_storage(t, inputs)
    return outs


def _is_nbgrad_op(fn: type[Function]) -> bool:
    """Whether ``fn`` is registered by nbgrad's own modules (what a fresh interpreter that
    imports nbgrad knows by name)."""
    return REGISTRY.get(fn.op_name) is fn and fn.__module__.startswith("nbgrad.")


def _share_storage(out: Tensor, inputs: tuple) -> None:
    """Give an output that views an input's memory (reshape, transpose, basic indexing)
    that input's version counter and base, as PyTorch's views have. NumPy gives a view
    the array that owns the memory as its base, so comparing with each input's array
    and that array's base is enough."""
    base = out._data.base
    for x in inputs:
        if isinstance(x, Tensor) and (x._data is base or x._data.base is base):
            out._counter = x._version_counter()
            out._base = x if x._base is None else x._base
            return


class Sample:
    """One small input set for gradchecking an op: ``Op.apply(*inputs, **params)``.

    Floating-point array inputs are differentiated (in float64); anything else (integer
    targets, None) is passed through unchanged. ``atol``/``rtol`` loosen the check for
    samples that need it (state why where you use them).
    """

    __slots__ = ("inputs", "params", "label", "atol", "rtol")

    def __init__(self, *inputs: Any, label: str = "", atol: float | None = None,
                 rtol: float | None = None, **params: Any):
        self.inputs = inputs
        self.params = params
        self.label = label
        self.atol = atol
        self.rtol = rtol

    def __repr__(self) -> str:
        shapes = ", ".join(str(getattr(x, "shape", type(x).__name__)) for x in self.inputs)
        extra = f" {self.params}" if self.params else ""
        return f"Sample({self.label + ': ' if self.label else ''}{shapes}{extra})"


REGISTRY: dict[str, type[Function]] = {}


def register(name: str, samples: Callable[[np.random.Generator], Iterable[Sample]]):
    """Class decorator: add a Function to the registry under ``name``.

    ``samples(rng)`` returns small inputs (``Sample`` objects) away from kinks; the test
    suite and ``python -m nbgrad check`` gradcheck the op through every one of them.
    """
    if not callable(samples):
        raise TypeError(f"register({name!r}): samples must be a callable rng -> [Sample, ...]")

    def decorate(cls: type[Function]) -> type[Function]:
        if not (isinstance(cls, type) and issubclass(cls, Function)):
            raise TypeError(f"register({name!r}) decorates Function subclasses, got {cls!r}")
        if name in REGISTRY and REGISTRY[name] is not cls:
            raise ValueError(f"register: an op named {name!r} is already registered "
                             f"({REGISTRY[name].__qualname__})")
        cls.op_name = name
        cls.samples = staticmethod(samples)
        REGISTRY[name] = cls
        return cls

    return decorate
