"""Tensor: an ndarray, its gradient, and its place in the graph; operators and methods.

The Tensor itself does no arithmetic: ``nbgrad.ops`` installs its operators and methods,
each the public function of the same name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import dtypes, rng
from .autograd import grad_mode, hooks, tracing
from .autograd.engine import backward
from .autograd.hooks import RemovableHandle
from .autograd.versions import Version
from .device import check_device

FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
# float16, int8, int16 and uint8 are storage dtypes (see nbgrad/dtypes.py)
SUPPORTED_DTYPES = tuple(d.dtype for d in dtypes.ALL)
_dtype_of = dtypes.BY_NUMPY.get  # (array dtype, itself if unsupported) -> DType


def _resolve_dtype(dtype: Any, op: str = "tensor") -> np.dtype | None:
    """NumPy's dtype for a ``dtype=`` argument of ``op`` (None stays None: inferred
    from the data)."""
    return None if dtype is None else dtypes.to_numpy(dtype, op)


def _factory_dtype(dtype: Any, op: str) -> np.dtype:
    """The dtype a factory makes: ``dtype``, or the default float dtype for None."""
    return dtypes.default_numpy() if dtype is None else dtypes.to_numpy(dtype, op)


def _to_array(data: Any, dtype: np.dtype | None) -> np.ndarray:
    """A fresh array for ``data`` in native byte order: Python floats become float32,
    float arrays keep their dtype, other float widths become float32, integers int64,
    booleans bool. Integers that do not fit the integer dtype they go to (uint64 above
    2**63 - 1 to int64) are an OverflowError, never wrapped."""
    if isinstance(data, Tensor):
        data = data._data
    from_python = not isinstance(data, np.ndarray | np.generic)
    arr = np.asarray(data)
    if dtype is None:
        dtype = _default_dtype(arr.dtype, from_python)
    if arr.dtype.kind in "iu" and dtype.kind in "iu":
        _check_fits(arr, dtype)
    return np.array(arr, dtype=dtype, copy=True)


def _default_dtype(source: np.dtype, from_python: bool) -> np.dtype:
    """The dtype ``_to_array`` gives data of dtype ``source`` (any byte order)."""
    native = source if source.isnative else source.newbyteorder("=")
    if native.kind == "f":
        return native if native in FLOAT_DTYPES and not from_python else dtypes.default_numpy()
    if native.kind in "iu":
        return np.dtype(np.int64)
    if native not in SUPPORTED_DTYPES:
        raise TypeError(f"tensor: cannot make a tensor from data of dtype {source}")
    return native


def _check_fits(arr: np.ndarray, dtype: np.dtype) -> None:
    """OverflowError unless every integer in ``arr`` is representable in ``dtype``."""
    if arr.size == 0 or np.can_cast(arr.dtype, dtype):
        return
    info = np.iinfo(dtype)
    low, high = int(arr.min()), int(arr.max())
    if low < info.min or high > info.max:
        bad = high if high > info.max else low
        raise OverflowError(f"tensor: the {arr.dtype} value {bad} does not fit {dtype} "
                            f"(range {info.min} to {info.max})")


class Tensor:
    """An n-dimensional array that records the ops applied to it for reverse-mode autodiff."""

    __slots__ = ("_data", "_grad", "_requires_grad", "_node", "_index", "_counter", "_base",
                 "__weakref__")
    __array_priority__ = 1000
    __array_ufunc__ = None  # `ndarray <op> Tensor` defers to the Tensor's reflected operator

    def __init__(self, data: Any, dtype: Any = None, requires_grad: bool = False):
        self._data = _to_array(data, _resolve_dtype(dtype))
        self._grad: Tensor | None = None
        self._node = None
        self._index = 0
        self._counter: Version | None = None
        self._base: Tensor | None = None
        self._requires_grad = False
        self.requires_grad = requires_grad

    @classmethod
    def _wrap(cls, data: np.ndarray, node, index: int) -> Tensor:
        """Fast constructor for op outputs: no copy, no checks."""
        t = cls.__new__(cls)
        t._data = data
        t._grad = None
        t._node = node
        t._index = index
        t._counter = None
        t._base = None
        t._requires_grad = node is not None
        return t

    @property
    def data(self) -> Tensor:
        """The same storage as a tensor outside the graph (PyTorch's ``.data``): writes
        through it (``p.data.mul_(0.5)``) change this tensor without autograd knowing,
        and with a version counter of its own, so no backward refuses them. Prefer
        ``detach()`` (which shares the counter) or ``with nb.no_grad():``."""
        if tracing.recorder is not None:
            tracing.recorder.event(".data", self)
        return Tensor._wrap(self._data, None, 0)

    @data.setter
    def data(self, value: Tensor | np.ndarray) -> None:
        """Replace this tensor's storage (``p.data = other``: any shape, the same dtype
        kind), keeping its place in the graph and its gradient flag."""
        array = value._data if isinstance(value, Tensor) else value
        if not isinstance(array, np.ndarray):
            raise TypeError(f"data: assigned data must be a Tensor or an ndarray, got "
                            f"{type(value).__name__}")
        if self._requires_grad and array.dtype not in FLOAT_DTYPES:
            raise TypeError(f"data: a tensor that requires grad cannot take data of dtype "
                            f"{array.dtype}")
        self._data = array

    # -- versions ---------------------------------------------------------------------
    def _version_counter(self) -> Version:
        """The counter of this tensor's storage, shared with its views (made on first
        need: a tensor nobody saved, viewed or changed in place never needs one)."""
        counter = self._counter
        if counter is None:
            counter = self._counter = Version()
            if self._node is not None:  # the node may have saved this output
                self._node.watch_output(self._index, self._data, counter)
        return counter

    @property
    def _version(self) -> int:
        """How many in-place writes this tensor's storage has had (PyTorch's name)."""
        return 0 if self._counter is None else self._counter.value

    # -- attributes -------------------------------------------------------------------
    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        if value and self._data.dtype not in FLOAT_DTYPES:
            raise TypeError(f"requires_grad: only float32/float64 tensors can require "
                            f"gradients; this one is {self._data.dtype}")
        if not value and self._node is not None:
            raise RuntimeError("requires_grad: cannot turn it off on a non-leaf tensor; "
                               "use detach()")
        self._requires_grad = bool(value)

    def requires_grad_(self, value: bool = True) -> Tensor:
        self.requires_grad = value
        return self

    @property
    def grad(self) -> Tensor | None:
        """The gradient accumulated by ``backward`` (None until then)."""
        return self._grad

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        if tracing.recorder is not None:
            tracing.recorder.event("a gradient set by hand", self)
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError(f"grad: assigned grad must be a Tensor or None, got "
                                f"{type(value).__name__}")
            mine, theirs = self._data, value._data
            if theirs.shape != mine.shape or theirs.dtype != mine.dtype:
                raise RuntimeError(f"grad: assigned grad of shape {value.shape} and dtype "
                                   f"{value.dtype} to a tensor of shape {self.shape} and "
                                   f"dtype {self.dtype}")
        self._grad = value

    def register_hook(self, hook: Callable[[Tensor], Tensor | None]) -> RemovableHandle:
        """Call ``hook(grad)`` each time this tensor's gradient has been computed; a
        returned tensor replaces the gradient. ``handle.remove()`` unregisters it."""
        return hooks.register(self, hook)

    def retain_grad(self) -> None:
        """Keep this non-leaf tensor's gradient in ``.grad`` after each pass, accumulated
        as a leaf's is (``Tensor.retain_grad``); nothing to do on a leaf."""
        if not self.requires_grad:
            raise RuntimeError("retain_grad: cannot retain the gradient of a tensor that "
                               "does not require grad")
        if self._node is not None:
            hooks.retain(self)

    @property
    def retains_grad(self) -> bool:
        """Whether ``retain_grad`` was called on this non-leaf tensor."""
        return hooks.retains(self)

    def register_post_accumulate_grad_hook(self, hook: Callable[[Tensor], None]
                                           ) -> RemovableHandle:
        """Call ``hook(self)`` on this leaf right after ``backward`` has accumulated the
        pass's gradient into ``self.grad`` (during the pass, once every op that feeds
        ``self`` has run; not by ``nb.grad``). ``handle.remove()`` unregisters it."""
        return hooks.register_post_accumulate(self, hook)

    @property
    def shape(self) -> tuple[int, ...]:
        return self._data.shape

    @property
    def dtype(self) -> dtypes.DType:
        """The dtype object (``nb.float32``...), equal to the array's NumPy dtype."""
        dt = self._data.dtype
        return _dtype_of(dt, dt)

    @property
    def ndim(self) -> int:
        return self._data.ndim

    @property
    def is_leaf(self) -> bool:
        return self._node is None

    @property
    def grad_fn(self):
        return self._node

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        body = np.array2string(self._data, separator=", ", prefix="tensor(")
        extra = "" if self._data.dtype in _repr_implied() else f", dtype={self.dtype}"
        if self._node is not None:
            extra += f", grad_fn={self._node!r}"
        elif self._requires_grad:
            extra += ", requires_grad=True"
        return f"tensor({body}{extra})"

    # -- conversion ---------------------------------------------------------------------
    def numpy(self, force: bool = False) -> np.ndarray:
        """The underlying array (shared, not copied); ``force=True`` gives a writable
        copy, cut from the graph.

        For a tensor that requires grad the array is a read-only view: a graph may have
        saved it for backward, and writing into it would silently change the gradients.
        ``t.detach().numpy()`` is writable; writes through it (or into the array of a
        tensor that does not require grad but was an op's input) before ``backward``
        change what backward computes, so copy first (``np.array(t)``) to modify.
        """
        if tracing.recorder is not None:
            tracing.recorder.event("numpy()", self)
        if force:
            return self._data.copy()
        if not self._requires_grad:
            return self._data
        view = self._data.view()
        view.flags.writeable = False
        return view

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        if copy:
            return np.array(self._data, dtype=dtype, copy=True)
        array = self.numpy()  # read-only when it requires grad, as .numpy()
        return array if dtype is None else array.astype(dtype, copy=False)

    def item(self) -> float | int | bool:
        if self._data.size != 1:
            raise ValueError(f"item: only one-element tensors convert to a Python scalar; "
                             f"this one has shape {self.shape}")
        if tracing.recorder is not None:
            tracing.recorder.event("item()", self)
        return self._data.item()

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __bool__(self) -> bool:
        """The truth of a one-element tensor; any other is ambiguous (PyTorch's error)."""
        if self._data.size != 1:
            count = "no values" if self._data.size == 0 else "more than one value"
            raise RuntimeError(f"Boolean value of Tensor with {count} is ambiguous")
        if tracing.recorder is not None:
            tracing.recorder.event("a tensor's truth value", self)
        return bool(self._data.item())

    def tolist(self) -> Any:
        if tracing.recorder is not None:
            tracing.recorder.event("tolist()", self)
        return self._data.tolist()

    def detach(self) -> Tensor:
        """The same data, cut from the graph (shares memory and the version counter, as
        in PyTorch: writing into it is seen by a backward that saved this tensor)."""
        if tracing.recorder is not None:
            tracing.recorder.event("detach()", self)
        t = Tensor._wrap(self._data, None, 0)
        t._counter = self._version_counter()
        return t

    def astype(self, dtype: Any) -> Tensor:
        """A copy in another dtype, cut from the graph."""
        if tracing.recorder is not None:
            tracing.recorder.event("astype()", self)
        return Tensor(self._data, dtype=dtype)

    def numel(self) -> int:
        """The number of elements (PyTorch's name)."""
        return self._data.size

    # -- in-place updates ------------------------------------------------------------
    def _writable(self, op: str) -> np.ndarray:
        """The array an in-place op that is not recorded in the graph writes, its version
        bumped: not that of a tensor that requires grad while gradients are recorded (the
        ops in ``nbgrad.ops.inplace`` record those), as in PyTorch. Call it after the
        op's arguments are checked and right before writing."""
        if self._requires_grad and grad_mode.state.enabled:
            raise RuntimeError(f"{op}: a tensor that requires grad cannot be modified in "
                               "place here while gradients are recorded; do it inside "
                               "`with nb.no_grad():`")
        self._version_counter().bump()
        return self._data

    def backward(self, grad: Any = None, retain_graph: bool | None = None,
                 create_graph: bool = False) -> None:
        """Accumulate this tensor's gradient into every leaf's ``.grad`` (see
        ``nbgrad.autograd.backward``)."""
        backward(self, grad, retain_graph, create_graph)

    # Operators and the PyTorch-named methods (add, sum, reshape, relu, ...) are installed
    # by ``nbgrad.ops`` next to the functions they call. The comparisons, == and !=
    # included, are element-wise and give bool tensors (``ops/compare.py``), so a tensor
    # hashes by identity, as in PyTorch: compare tensors in lists with ``is``.
    __hash__ = object.__hash__


def _repr_implied() -> tuple[np.dtype, ...]:
    """The dtypes a tensor's repr does not print, as PyTorch's: the default float
    dtype, int64 and bool."""
    return (dtypes.default_numpy(), np.dtype(np.int64), np.dtype(np.bool_))


def lift(value: Any, like: Tensor | None = None) -> Tensor:
    """The Tensor for an op operand: Tensors pass through; arrays and lists become
    constants; a Python number next to the tensor ``like`` gets PyTorch's dtype for a
    scalar: ``like``'s dtype (no float64 upcast of a float32 tensor) unless the number is
    of a higher kind (bool < int < float) than the tensor, then the default dtype of its
    kind (an int with a bool tensor: int64; a float with an integer or bool tensor:
    float32)."""
    if isinstance(value, Tensor):
        return value
    if isinstance(value, bool | int | float) and like is not None:
        dtype = like._data.dtype  # NumPy's: the hot path of every `tensor op number`
        if dtype.kind != "f":
            dtype = _scalar_dtype(value, dtype)
        try:
            return Tensor._wrap(np.array(value, dtype=dtype), None, 0)
        except OverflowError:
            raise OverflowError(f"the Python number {value} does not fit the tensor's "
                                f"dtype {dtype}") from None
    return Tensor._wrap(_to_array(value, None), None, 0)


def _scalar_dtype(value: bool | int | float, tensor_dtype: np.dtype) -> np.dtype:
    """The dtype of a Python number next to an integer or bool tensor (see ``lift``)."""
    if isinstance(value, float):
        return dtypes.default_numpy()
    if tensor_dtype.kind == "b" and not isinstance(value, bool):
        return np.dtype(np.int64)
    return tensor_dtype


# -- construction ------------------------------------------------------------------------
def tensor(data: Any, dtype: Any = None, requires_grad: bool = False,
           device: Any = None) -> Tensor:
    """A new tensor holding a copy of ``data`` (see ``_to_array`` for the dtype rules);
    ``device`` is the CPU or None (see ``nbgrad.device``)."""
    check_device(device, "tensor")
    return Tensor(data, dtype=dtype, requires_grad=requires_grad)


def _shape_arg(shape: tuple) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], Sequence):
        shape = tuple(shape[0])
    if any(not isinstance(s, int | np.integer) or s < 0 for s in shape):
        raise ValueError(f"shape must be non-negative integers, got {shape}")
    return tuple(int(s) for s in shape)


def _new(array: np.ndarray, requires_grad: bool) -> Tensor:
    t = Tensor._wrap(array, None, 0)
    t.requires_grad = requires_grad
    return t


# Factories: ``dtype=None`` is the default float dtype (``*_like``: the tensor's);
# ``device`` is the CPU or None (see ``nbgrad.device``).
def zeros(*shape, dtype: Any = None, requires_grad: bool = False,
          device: Any = None) -> Tensor:
    check_device(device, "zeros")
    return _new(np.zeros(_shape_arg(shape), _factory_dtype(dtype, "zeros")), requires_grad)


def ones(*shape, dtype: Any = None, requires_grad: bool = False,
         device: Any = None) -> Tensor:
    check_device(device, "ones")
    return _new(np.ones(_shape_arg(shape), _factory_dtype(dtype, "ones")), requires_grad)


def full(shape: Sequence[int] | int, fill_value: float, dtype: Any = None,
         requires_grad: bool = False, device: Any = None) -> Tensor:
    check_device(device, "full")
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    return _new(np.full(_shape_arg(shape), fill_value, _factory_dtype(dtype, "full")),
                requires_grad)


def zeros_like(t: Tensor, dtype: Any = None, requires_grad: bool = False,
               device: Any = None) -> Tensor:
    check_device(device, "zeros_like")
    return zeros(*t.shape, dtype=t.dtype if dtype is None else dtype,
                 requires_grad=requires_grad)


def ones_like(t: Tensor, dtype: Any = None, requires_grad: bool = False,
              device: Any = None) -> Tensor:
    check_device(device, "ones_like")
    return ones(*t.shape, dtype=t.dtype if dtype is None else dtype,
                requires_grad=requires_grad)


def randn(*size, generator: Any = None, seed: int | None = None, dtype: Any = None,
          requires_grad: bool = False, device: Any = None) -> Tensor:
    """Samples of the standard normal N(0, 1), of shape ``size`` (float32 or float64).

    Drawn from ``generator`` (an ``nb.Generator``, which the draw advances) or, without
    one, from the default generator that ``nb.manual_seed`` seeds: a seeded script draws
    the same numbers in every run. ``seed=s`` draws from a fresh generator seeded with
    ``s`` instead (the numbers of ``generator=nb.Generator().manual_seed(s)``) and leaves
    the default generator alone."""
    check_device(device, "randn")
    shape = _shape_arg(size)
    source, dtype = _draw_source("randn", generator, seed, dtype)
    return _new(source.standard_normal(shape).astype(dtype, copy=False), requires_grad)


def rand(*size, generator: Any = None, seed: int | None = None, dtype: Any = None,
         requires_grad: bool = False, device: Any = None) -> Tensor:
    """Samples of the uniform distribution on [0, 1), of shape ``size``; ``generator`` and
    ``seed`` as for ``randn``. Drawn in the tensor's dtype, so a float32 sample is never
    1.0 (a float64 one rounded to float32 could be)."""
    check_device(device, "rand")
    shape = _shape_arg(size)
    source, dtype = _draw_source("rand", generator, seed, dtype)
    return _new(source.random(shape, dtype=dtype), requires_grad)


def _draw_source(op: str, generator: Any, seed: Any, dtype: Any) -> tuple[Any, np.dtype]:
    """The NumPy generator a float draw of ``op`` takes (``rng.source``) and its dtype,
    checked before anything is drawn, so a refused call leaves the generator as it was."""
    dt = _factory_dtype(dtype, op)
    if dt not in FLOAT_DTYPES:
        raise TypeError(f"{op}: dtype must be float32 or float64, got {dt}")
    return rng.source(op, generator, seed), dt

