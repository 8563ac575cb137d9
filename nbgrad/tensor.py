"""Tensor: an ndarray, its gradient, and its place in the graph; operators and methods.

The Tensor itself does no arithmetic: ``nbgrad.ops`` installs its operators and methods,
each the public function of the same name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .autograd import hooks
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
    """A fresh array for ``data``: Python floats become float32, float arrays keep their
    dtype, other float widths become float32, integers int64, booleans bool."""
    if isinstance(data, Tensor):
        data = data.data
    from_python = not isinstance(data, np.ndarray | np.generic)
    arr = np.array(data, dtype=dtype, copy=True)
    if dtype is None:
        if arr.dtype.kind == "f" and (from_python or arr.dtype not in FLOAT_DTYPES):
            arr = arr.astype(DEFAULT_DTYPE)
        elif arr.dtype.kind in "iu":
            arr = arr.astype(np.int64)
        elif arr.dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"tensor: cannot make a tensor from data of dtype {arr.dtype}")
    return arr


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
    def size(self) -> int:
        return self.data.size

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


def _plain(x: Any) -> Any:
    return x.data if isinstance(x, Tensor) else x


def lift(value: Any, like: Tensor | None = None) -> Tensor:
    """The Tensor for an op operand: Tensors pass through; Python numbers take ``like``'s
    dtype (no float64 upcast of a float32 tensor); arrays and lists become constants."""
    if isinstance(value, Tensor):
        return value
    if isinstance(value, bool | int | float) and like is not None:
        dtype = like.dtype if like.dtype in FLOAT_DTYPES or isinstance(value, int) \
            else DEFAULT_DTYPE
        return Tensor._wrap(np.array(value, dtype=dtype), None, 0)
    return Tensor._wrap(_to_array(value, None), None, 0)


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

