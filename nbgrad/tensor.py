"""Tensor: an ndarray, its gradient, and its place in the graph; operators and methods.

The Tensor itself does no arithmetic: ``nbgrad.ops`` installs its operators and methods,
each the public function of the same name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .autograd import grad_mode, hooks
from .autograd.engine import backward
from .autograd.hooks import RemovableHandle

FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
SUPPORTED_DTYPES = FLOAT_DTYPES + tuple(np.dtype(t) for t in (np.int32, np.int64, np.bool_))
DEFAULT_DTYPE = np.dtype(np.float32)


def _resolve_dtype(dtype: Any) -> np.dtype | None:
    if dtype is None:
        return None
    dt = np.dtype(dtype)
    if dt not in SUPPORTED_DTYPES:
        raise TypeError(f"tensor: dtype {dt} is not supported; use one of "
                        f"{', '.join(str(d) for d in SUPPORTED_DTYPES)}")
    return dt


def _to_array(data: Any, dtype: np.dtype | None) -> np.ndarray:
    """A fresh array for ``data`` in native byte order: Python floats become float32,
    float arrays keep their dtype, other float widths become float32, integers int64,
    booleans bool. Integers that do not fit the integer dtype they go to (uint64 above
    2**63 - 1 to int64) are an OverflowError, never wrapped."""
    if isinstance(data, Tensor):
        data = data.data
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
        return native if native in FLOAT_DTYPES and not from_python else DEFAULT_DTYPE
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

    __slots__ = ("data", "_grad", "_requires_grad", "_node", "_index", "__weakref__")
    __array_priority__ = 1000
    __array_ufunc__ = None  # `ndarray <op> Tensor` defers to the Tensor's reflected operator

    def __init__(self, data: Any, dtype: Any = None, requires_grad: bool = False):
        self.data = _to_array(data, _resolve_dtype(dtype))
        self._grad: Tensor | None = None
        self._node = None
        self._index = 0
        self._requires_grad = False
        self.requires_grad = requires_grad

    @classmethod
    def _wrap(cls, data: np.ndarray, node, index: int) -> Tensor:
        """Fast constructor for op outputs: no copy, no checks."""
        t = cls.__new__(cls)
        t.data = data
        t._grad = None
        t._node = node
        t._index = index
        t._requires_grad = node is not None
        return t

    # -- attributes -------------------------------------------------------------------
    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        if value and self.data.dtype not in FLOAT_DTYPES:
            raise TypeError(f"requires_grad: only float32/float64 tensors can require "
                            f"gradients; this one is {self.data.dtype}")
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
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError(f"grad: assigned grad must be a Tensor or None, got "
                                f"{type(value).__name__}")
            if value.shape != self.shape or value.dtype != self.dtype:
                raise RuntimeError(f"grad: assigned grad of shape {value.shape} and dtype "
                                   f"{value.dtype} to a tensor of shape {self.shape} and "
                                   f"dtype {self.dtype}")
        self._grad = value

    def register_hook(self, hook: Callable[[Tensor], Tensor | None]) -> RemovableHandle:
        """Call ``hook(grad)`` each time this tensor's gradient has been computed; a
        returned tensor replaces the gradient. ``handle.remove()`` unregisters it."""
        return hooks.register(self, hook)

    def register_post_accumulate_grad_hook(self, hook: Callable[[Tensor], None]
                                           ) -> RemovableHandle:
        """Call ``hook(self)`` on this leaf right after ``backward`` has accumulated the
        pass's gradient into ``self.grad`` (during the pass, once every op that feeds
        ``self`` has run; not by ``nb.grad``). ``handle.remove()`` unregisters it."""
        return hooks.register_post_accumulate(self, hook)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @property
    def ndim(self) -> int:
        return self.data.ndim

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
        body = np.array2string(self.data, separator=", ", prefix="tensor(")
        extra = f", dtype={self.dtype}" if self.dtype != DEFAULT_DTYPE else ""
        if self._node is not None:
            extra += f", grad_fn={self._node!r}"
        elif self._requires_grad:
            extra += ", requires_grad=True"
        return f"tensor({body}{extra})"

    # -- conversion ---------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """The underlying array (shared, not copied).

        For a tensor that requires grad the array is a read-only view: a graph may have
        saved it for backward, and writing into it would silently change the gradients.
        ``t.detach().numpy()`` is writable; writes through it (or into the array of a
        tensor that does not require grad but was an op's input) before ``backward``
        change what backward computes, so copy first (``np.array(t)``) to modify.
        """
        if not self._requires_grad:
            return self.data
        view = self.data.view()
        view.flags.writeable = False
        return view

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        if copy:
            return np.array(self.data, dtype=dtype, copy=True)
        array = self.numpy()  # read-only when it requires grad, as .numpy()
        return array if dtype is None else array.astype(dtype, copy=False)

    def item(self) -> float | int | bool:
        if self.data.size != 1:
            raise ValueError(f"item: only one-element tensors convert to a Python scalar; "
                             f"this one has shape {self.shape}")
        return self.data.item()

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __bool__(self) -> bool:
        return bool(self.item())

    def tolist(self) -> Any:
        return self.data.tolist()

    def detach(self) -> Tensor:
        """The same data, cut from the graph (shares memory, as in PyTorch)."""
        return Tensor._wrap(self.data, None, 0)

    def astype(self, dtype: Any) -> Tensor:
        """A copy in another dtype, cut from the graph."""
        return Tensor(self.data, dtype=dtype)

    def numel(self) -> int:
        """The number of elements (PyTorch's name)."""
        return self.data.size

    # -- in-place updates (optimisers, initialisation, user code under no_grad) --------
    def _writable(self, op: str) -> np.ndarray:
        """The array an in-place op may write: not while it would change a recorded graph
        (a tensor that requires grad, outside no_grad), as in PyTorch."""
        if self._requires_grad and grad_mode.state.enabled:
            kind = "a leaf tensor" if self._node is None else "a tensor in a graph"
            raise RuntimeError(f"{op}: {kind} that requires grad cannot be modified in "
                               "place while gradients are recorded; do it inside "
                               "`with nb.no_grad():`")
        return self.data

    def _update(self, op: str, ufunc: np.ufunc, other: Any) -> Tensor:
        """self = ufunc(self, other) in place, ``other`` broadcast to self's shape."""
        data = self._writable(op)
        value = other.data if isinstance(other, Tensor) else np.asarray(other)
        try:
            ufunc(data, value, out=data, casting="same_kind")
        except (ValueError, TypeError) as err:
            raise _same_kind(err)(f"{op}: cannot apply a value of shape {value.shape} and dtype "
                            f"{value.dtype} in place to a tensor of shape {self.shape} and "
                            f"dtype {self.dtype}") from None
        return self

    def add_(self, other: Any, alpha: float = 1) -> Tensor:
        """self += alpha * other, in place."""
        return self._update("add_", np.add, other if alpha == 1 else _scaled(other, alpha))

    def sub_(self, other: Any, alpha: float = 1) -> Tensor:
        """self -= alpha * other, in place."""
        return self._update("sub_", np.subtract,
                            other if alpha == 1 else _scaled(other, alpha))

    def mul_(self, other: Any) -> Tensor:
        """self *= other, in place."""
        return self._update("mul_", np.multiply, other)

    def div_(self, other: Any) -> Tensor:
        """self /= other, in place (true division)."""
        return self._update("div_", np.true_divide, other)

    def copy_(self, src: Any) -> Tensor:
        """Copy ``src`` (broadcast to self's shape, cast to self's dtype) into self."""
        data = self._writable("copy_")
        value = src.data if isinstance(src, Tensor) else np.asarray(src)
        try:
            np.copyto(data, value, casting="same_kind")
        except (ValueError, TypeError) as err:
            raise _same_kind(err)(f"copy_: cannot copy a value of shape {value.shape} and dtype "
                            f"{value.dtype} into a tensor of shape {self.shape} and dtype "
                            f"{self.dtype}") from None
        return self

    def fill_(self, value: float) -> Tensor:
        self._writable("fill_")[...] = value
        return self

    def zero_(self) -> Tensor:
        return self.fill_(0)

    def backward(self, grad: Any = None, retain_graph: bool | None = None,
                 create_graph: bool = False) -> None:
        """Accumulate this tensor's gradient into every leaf's ``.grad`` (see
        ``nbgrad.autograd.backward``)."""
        backward(self, grad, retain_graph, create_graph)

    # Operators and the PyTorch-named methods (add, sum, reshape, relu, ...) are installed
    # by ``nbgrad.ops`` next to the functions they call. Comparisons give boolean tensors
    # outside the graph (masks); == stays identity so tensors remain hashable.
    def __lt__(self, other): return Tensor._wrap(self.data < _plain(other), None, 0)
    def __le__(self, other): return Tensor._wrap(self.data <= _plain(other), None, 0)
    def __gt__(self, other): return Tensor._wrap(self.data > _plain(other), None, 0)
    def __ge__(self, other): return Tensor._wrap(self.data >= _plain(other), None, 0)
    __hash__ = object.__hash__


def _same_kind(err: Exception) -> type:
    """ValueError or TypeError, whichever ``err`` is (NumPy raises subclasses of them)."""
    return TypeError if isinstance(err, TypeError) else ValueError


def _scaled(other: Any, alpha: float) -> np.ndarray:
    return (other.data if isinstance(other, Tensor) else np.asarray(other)) * alpha


def _plain(x: Any) -> Any:
    return x.data if isinstance(x, Tensor) else x


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
        dtype = like.dtype
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
        return DEFAULT_DTYPE
    if tensor_dtype.kind == "b" and not isinstance(value, bool):
        return np.dtype(np.int64)
    return tensor_dtype


# -- construction ------------------------------------------------------------------------
def tensor(data: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    """A new tensor holding a copy of ``data`` (see ``_to_array`` for the dtype rules)."""
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


def zeros(*shape, dtype: Any = DEFAULT_DTYPE, requires_grad: bool = False) -> Tensor:
    return _new(np.zeros(_shape_arg(shape), _resolve_dtype(dtype)), requires_grad)


def ones(*shape, dtype: Any = DEFAULT_DTYPE, requires_grad: bool = False) -> Tensor:
    return _new(np.ones(_shape_arg(shape), _resolve_dtype(dtype)), requires_grad)


def full(shape: Sequence[int] | int, fill_value: float, dtype: Any = DEFAULT_DTYPE,
         requires_grad: bool = False) -> Tensor:
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    return _new(np.full(_shape_arg(shape), fill_value, _resolve_dtype(dtype)), requires_grad)


def zeros_like(t: Tensor, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    return zeros(*t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)


def ones_like(t: Tensor, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    return ones(*t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)


def randn(*shape, seed: int | None = None, dtype: Any = DEFAULT_DTYPE,
          requires_grad: bool = False) -> Tensor:
    """Standard normal samples; ``seed`` makes them reproducible."""
    rng = np.random.default_rng(seed)
    data = rng.standard_normal(_shape_arg(shape)).astype(_resolve_dtype(dtype))
    return _new(data, requires_grad)


def rand(*shape, seed: int | None = None, dtype: Any = DEFAULT_DTYPE,
         requires_grad: bool = False) -> Tensor:
    """Uniform samples on [0, 1); ``seed`` makes them reproducible."""
    rng = np.random.default_rng(seed)
    data = rng.random(_shape_arg(shape)).astype(_resolve_dtype(dtype))
    return _new(data, requires_grad)

