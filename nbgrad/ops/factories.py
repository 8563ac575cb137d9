"""Factories with PyTorch's names: tensors made from ranges, shapes, fill values and NumPy
arrays (arange, linspace, logspace, eye, empty, empty_like, full_like, from_numpy,
as_tensor, meshgrid), and the Tensor methods new_zeros, new_ones, new_full, new_empty,
new_tensor, type_as, view_as, dim and contiguous.

The ranges follow PyTorch's CPU arithmetic: ``arange`` has ``ceil((end - start) / step)``
elements, ``start + i * step`` (an integer dtype truncates start, end and step first, as
PyTorch does); ``linspace`` computes in the result's dtype from both ends towards the
middle. ``empty`` and ``empty_like`` give zero-filled tensors: never uninitialised
memory. ``from_numpy`` and ``as_tensor`` share the array's memory (writes through
either are seen by both). The factories are leaves outside the graph; ``meshgrid``,
``type_as``, ``view_as`` and ``contiguous`` are compositions of graph ops (reshape,
broadcast_to, to, clone), so gradients flow through them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import dtypes
from ..device import check_device
from ..tensor import FLOAT_DTYPES, Tensor
from ._args import is_int
from .convert import convert
from .inplace import clone
from .shape import broadcast_to, reshape

_INT64 = np.dtype(np.int64)


# -- argument checks -----------------------------------------------------------------------
def _size(op: str, size: tuple) -> tuple[int, ...]:
    """``f(2, 3)`` and ``f((2, 3))`` both give ``(2, 3)``: non-negative ints (TypeError for
    anything else than ints, ValueError for a negative one)."""
    if len(size) == 1 and isinstance(size[0], Sequence | np.ndarray):
        size = tuple(size[0])
    if not all(is_int(s) for s in size):
        raise TypeError(f"{op}: size must be a tuple of ints, got {size!r}")
    if any(s < 0 for s in size):
        bad = next(s for s in size if s < 0)
        raise ValueError(f"{op}: negative dimension {bad} in size {tuple(size)}")
    return tuple(int(s) for s in size)


def _number(op: str, name: str, value: Any) -> int | float:
    """A Python or NumPy number (bool as int, as PyTorch) or a one-element tensor, as a
    Python int or float."""
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise ValueError(f"{op}: {name} must be a number or a one-element tensor, got "
                             f"a tensor of shape {value.shape}")
        value = value.item()
    if isinstance(value, bool | np.bool_ | int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return float(value)
    raise TypeError(f"{op}: {name} must be a number, got {type(value).__name__}")


def _count(op: str, name: str, value: Any) -> int:
    if not is_int(value):
        raise TypeError(f"{op}: {name} must be an int, got {type(value).__name__} {value!r}")
    if value < 0:
        raise ValueError(f"{op}: {name} must be greater or equal to 0, got {name}={value}")
    return int(value)


def _dtype(op: str, dtype: Any, default: np.dtype) -> np.dtype:
    return default if dtype is None else dtypes.to_numpy(dtype, op)


def _no_bool(op: str, dt: np.dtype) -> np.dtype:
    if dt.kind == "b":
        raise TypeError(f"{op}: dtype bool is not supported (as in PyTorch); use an integer "
                        f"or float dtype")
    return dt


def _tensor_arg(op: str, value: Any, name: str = "input") -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"{op}: {name} must be a Tensor, got {type(value).__name__}")
    return value


def _leaf(op: str, array: np.ndarray, requires_grad: bool) -> Tensor:
    """``array`` as a new leaf tensor; ``requires_grad`` only for float32/float64."""
    if requires_grad and array.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{op}: only float32/float64 tensors can require gradients, got "
                        f"dtype {array.dtype}")
    t = Tensor._wrap(array, None, 0)
    t.requires_grad = bool(requires_grad)
    return t


def _fill(op: str, value: Any, dt: np.dtype) -> int | float:
    value = _number(op, "fill_value", value)
    if dt.kind in "iub" and isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{op}: fill_value={value} cannot be converted to {dt}")
    return value


def _finite_for_integers(op: str, dt: np.dtype, **ends: int | float) -> None:
    """An integer dtype truncates the ends to ints: they must be finite."""
    for name, value in ends.items():
        if dt.kind in "iu" and not math.isfinite(value):
            raise ValueError(f"{op}: {name}={value} cannot be converted to {dt}")


# -- ranges ----------------------------------------------------------------------------------
def arange(start: Any = 0, end: Any = None, step: Any = 1, *, dtype: Any = None,
           requires_grad: bool = False, device: Any = None) -> Tensor:
    """``start, start + step, ...`` up to ``end`` (excluded): ``torch.arange``.

    ``arange(end)`` or ``arange(start, end, step)``; ``ceil((end - start) / step)``
    elements. Without ``dtype``: int64 when start, end and step are all ints, else the
    default float dtype. An integer dtype truncates float bounds and step towards zero
    for the values (and, for int64, the length: PyTorch's rules, so
    ``arange(0.5, 3.7, dtype=int64)`` is ``[0, 1, 2]`` and int32 gives ``[0, 1, 2, 3]``);
    values outside a narrow integer dtype wrap, as in PyTorch."""
    check_device(device, "arange")
    if end is None:
        start, end = 0, start
    start = _number("arange", "start", start)
    end = _number("arange", "end", end)
    step = _number("arange", "step", step)
    floats = any(isinstance(v, float) for v in (start, end, step))
    dt = _dtype("arange", dtype, dtypes.default_numpy() if floats else _INT64)
    _no_bool("arange", dt)
    if not (math.isfinite(start) and math.isfinite(end)):
        raise ValueError(f"arange: unsupported range start={start} -> end={end}")
    if not math.isfinite(step):
        raise ValueError(f"arange: step must be finite, got step={step}")
    integral = dt.kind in "iu"
    xs, xe, xp = (int(v) if integral else float(v) for v in (start, end, step))
    if step == 0 or (dt == _INT64 and xp == 0):
        extra = f" (step={step} truncates to 0 for dtype {dt})" if step != 0 else ""
        raise ValueError(f"arange: step must be nonzero{extra}")
    if not ((step > 0 and end >= start) or (step < 0 and end <= start)):
        raise ValueError(f"arange: upper bound and lower bound inconsistent with step sign "
                         f"(start={start}, end={end}, step={step})")
    if dt == _INT64:  # PyTorch sizes int64 ranges in integers, the others in float64
        sign = 1 if xp > 0 else -1
        n = (xe - xs + xp - sign) // xp
    else:
        n = math.ceil((float(end) - float(start)) / float(step))
    if not 0 <= n <= np.iinfo(np.int64).max:
        raise ValueError(f"arange: invalid size {n} for start={start}, end={end}, step={step}")
    if integral:
        values = xs + xp * np.arange(n, dtype=np.int64)
    else:
        values = _fma(xp, np.arange(n, dtype=np.float64), xs)
    return _leaf("arange", values.astype(dt), requires_grad)


def _fma(a: Any, b: Any, c: Any) -> np.ndarray:
    """``a * b + c`` in float64 rounded once, as the fused multiply-add PyTorch's CPU
    kernels compile to: Dekker's exact product ``p + e == a * b`` and Knuth's exact sum
    ``s + r == p + c``, then ``s + (r + e)``."""
    with np.errstate(over="ignore", invalid="ignore"):
        a, b, c = (np.asarray(v, dtype=np.float64) for v in (a, b, c))
        p = a * b
        ah, al = _halves(a)
        bh, bl = _halves(b)
        e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
        s = p + c
        back = s - p
        r = (p - (s - back)) + (c - back)
        return s + (r + e)


def _halves(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dekker's split of float64 ``x`` into a high part of 26 bits and the rest."""
    t = 134217729.0 * x  # 2**27 + 1
    high = t - (t - x)
    return high, x - high


def _spaced(start: int | float, end: int | float, steps: int, dt: np.dtype) -> np.ndarray:
    """PyTorch's linspace points: ``start + step * i`` for the first half,
    ``end - step * (steps - 1 - i)`` for the rest, ``step = (end - start) / (steps - 1)``,
    each one multiply-add rounded once. In float64 from the ends truncated to ints for an
    integer dtype; for float32 (and float16) from float32 ends and step."""
    if dt.kind in "iu":
        s, e = float(int(start)), float(int(end))
    elif dt == np.float64:
        s, e = float(start), float(end)
    else:
        s, e = float(np.float32(start)), float(np.float32(end))
    if steps == 1:
        return np.array([s])
    with np.errstate(over="ignore", invalid="ignore"):
        step = (e - s) / (steps - 1)
        if dt.kind == "f" and dt != np.float64:
            step = float(np.float32(np.float32(e) - np.float32(s)) / np.float32(steps - 1))
    idx = np.arange(steps, dtype=np.float64)
    first = idx < steps // 2
    return np.where(first, _fma(step, idx, s), _fma(-step, steps - 1 - idx, e))


def linspace(start: Any, end: Any, steps: int, *, dtype: Any = None,
             requires_grad: bool = False, device: Any = None) -> Tensor:
    """``steps`` evenly spaced points from ``start`` to ``end`` (both included):
    ``torch.linspace``. The default float dtype unless ``dtype`` is given (an integer dtype
    truncates the points towards zero)."""
    check_device(device, "linspace")
    start = _number("linspace", "start", start)
    end = _number("linspace", "end", end)
    steps = _count("linspace", "steps", steps)
    dt = _no_bool("linspace", _dtype("linspace", dtype, dtypes.default_numpy()))
    _finite_for_integers("linspace", dt, start=start, end=end)
    with np.errstate(over="ignore", invalid="ignore"):
        values = _spaced(start, end, steps, dt).astype(dt)
    return _leaf("linspace", values, requires_grad)


def logspace(start: Any, end: Any, steps: int, base: float = 10.0, *, dtype: Any = None,
             requires_grad: bool = False, device: Any = None) -> Tensor:
    """``base ** linspace(start, end, steps)``: ``torch.logspace`` (the powers taken in
    float64, then converted to the dtype; the default float dtype unless given)."""
    check_device(device, "logspace")
    start = _number("logspace", "start", start)
    end = _number("logspace", "end", end)
    steps = _count("logspace", "steps", steps)
    base = float(_number("logspace", "base", base))
    dt = _no_bool("logspace", _dtype("logspace", dtype, dtypes.default_numpy()))
    _finite_for_integers("logspace", dt, start=start, end=end)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if steps == 1:
            exponents = np.array([float(start)])
        else:
            exponents = _spaced(start, end, steps, dt)
            if dt.kind == "f" and dt != np.float64:
                exponents = exponents.astype(np.float32).astype(np.float64)
        values = np.power(base, exponents).astype(dt)
    return _leaf("logspace", values, requires_grad)


# -- shapes and fill values ------------------------------------------------------------------
def eye(n: int, m: int | None = None, *, dtype: Any = None, requires_grad: bool = False,
        device: Any = None) -> Tensor:
    """The ``n x m`` identity (ones on the diagonal, ``m = n`` unless given):
    ``torch.eye``; the default float dtype unless ``dtype`` is given."""
    check_device(device, "eye")
    n = _count("eye", "n", n)
    m = n if m is None else _count("eye", "m", m)
    dt = _dtype("eye", dtype, dtypes.default_numpy())
    return _leaf("eye", np.eye(n, m, dtype=dt), requires_grad)


def empty(*size: Any, dtype: Any = None, requires_grad: bool = False, device: Any = None,
          memory_format: Any = None) -> Tensor:
    """A tensor of shape ``size`` (``torch.empty``); zero-filled, never uninitialised
    memory. The default float dtype unless ``dtype`` is given."""
    check_device(device, "empty")
    dt = _dtype("empty", dtype, dtypes.default_numpy())
    return _leaf("empty", np.zeros(_size("empty", size), dt), requires_grad)


def empty_like(input: Any, *, dtype: Any = None, requires_grad: bool = False,
               device: Any = None, memory_format: Any = None) -> Tensor:
    """``empty`` of ``input``'s shape and (unless ``dtype`` is given) dtype; zero-filled."""
    check_device(device, "empty_like")
    input = _tensor_arg("empty_like", input)
    dt = _dtype("empty_like", dtype, input._data.dtype)
    return _leaf("empty_like", np.zeros(input.shape, dt), requires_grad)


def full_like(input: Any, fill_value: Any, *, dtype: Any = None, requires_grad: bool = False,
              device: Any = None, memory_format: Any = None) -> Tensor:
    """A tensor of ``input``'s shape and (unless ``dtype`` is given) dtype, every element
    ``fill_value`` (``torch.full_like``; a float into an integer dtype truncates)."""
    check_device(device, "full_like")
    input = _tensor_arg("full_like", input)
    dt = _dtype("full_like", dtype, input._data.dtype)
    value = _fill("full_like", fill_value, dt)
    return _leaf("full_like", np.full(input.shape, value, dt), requires_grad)


# -- from NumPy --------------------------------------------------------------------------------
def _shared(op: str, array: np.ndarray) -> Tensor:
    """A tensor on ``array``'s memory, under PyTorch's conditions for sharing it."""
    if not array.dtype.isnative:
        raise ValueError(f"{op}: the array's byte order ({array.dtype.str}) differs from the "
                         f"native byte order; convert it with array.astype(array.dtype."
                         f"newbyteorder('='))")
    if array.dtype not in dtypes.BY_NUMPY:
        raise TypeError(f"{op}: can't convert np.ndarray of dtype {array.dtype}; the "
                        f"supported dtypes are {', '.join(d.name for d in dtypes.ALL)}")
    if any(s < 0 for s in array.strides):
        raise ValueError(f"{op}: at least one stride of the array is negative (strides "
                         f"{array.strides}); tensors with negative strides are not supported, "
                         f"make a copy with array.copy()")
    return Tensor._wrap(array, None, 0)


def from_numpy(ndarray: np.ndarray) -> Tensor:
    """A tensor sharing ``ndarray``'s memory, shape and dtype (``torch.from_numpy``):
    writes through either are seen by both."""
    if not isinstance(ndarray, np.ndarray):
        raise TypeError(f"from_numpy: expected np.ndarray (got {type(ndarray).__name__})")
    return _shared("from_numpy", ndarray)


def as_tensor(data: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """``data`` as a tensor, sharing memory where it can (``torch.as_tensor``): a Tensor of
    that dtype is returned as is (another dtype: converted as by ``to``, float32 <->
    float64 in the graph); an ndarray of a supported dtype shares its memory when
    ``dtype`` is None or its own; anything else is copied (``nb.tensor``'s dtype rules)."""
    check_device(device, "as_tensor")
    dt = None if dtype is None else dtypes.to_numpy(dtype, "as_tensor")
    if isinstance(data, Tensor):
        return data if dt is None else convert(data, dt, "as_tensor")
    if (isinstance(data, np.ndarray) and data.dtype in dtypes.BY_NUMPY
            and (dt is None or dt == data.dtype)):
        return _shared("as_tensor", data)
    return Tensor(data, dtype=dt)


# -- meshgrid --------------------------------------------------------------------------------
def meshgrid(*tensors: Any, indexing: str = "ij") -> tuple[Tensor, ...]:
    """Coordinate grids of 0-d/1-D tensors (``torch.meshgrid``): output ``i`` repeats
    ``tensors[i]`` along its own dim of the shape ``(len(t0), len(t1), ...)``
    (``indexing='ij'``, PyTorch's default), or with the first two dims swapped
    (``'xy'``, as NumPy's default). Each output is ``tensors[i]`` reshaped and broadcast
    (a read-only view), so gradients flow back summed over the repeats."""
    if len(tensors) == 1 and isinstance(tensors[0], list | tuple):
        tensors = tuple(tensors[0])
    if not tensors:
        raise ValueError("meshgrid: expects a non-empty list of tensors")
    if indexing not in ("ij", "xy"):
        raise ValueError(f"meshgrid: indexing must be one of 'xy' or 'ij', got {indexing!r}")
    for i, t in enumerate(tensors):
        _tensor_arg("meshgrid", t, f"tensors[{i}]")
        if t.ndim > 1:
            raise ValueError(f"meshgrid: expected 0-D or 1-D tensors, got tensors[{i}] of "
                             f"shape {t.shape}")
    if len({t._data.dtype for t in tensors}) > 1:
        listed = ", ".join(f"tensors[{i}] is {t.dtype}" for i, t in enumerate(tensors))
        raise TypeError(f"meshgrid: expects all tensors to have the same dtype ({listed})")
    place = list(range(len(tensors)))
    if indexing == "xy" and len(tensors) > 1:
        place[0], place[1] = 1, 0
    shape = [0] * len(tensors)
    for i, t in enumerate(tensors):
        shape[place[i]] = t.numel()
    out = []
    for i, t in enumerate(tensors):
        view = [1] * len(tensors)
        view[place[i]] = t.numel()
        out.append(broadcast_to(reshape(t, tuple(view)), tuple(shape)))
    return tuple(out)


# -- Tensor methods ----------------------------------------------------------------------------
def new_zeros(self: Tensor, *size: Any, dtype: Any = None, requires_grad: bool = False,
              device: Any = None) -> Tensor:
    """Zeros of shape ``size`` in ``self``'s dtype unless ``dtype`` is given
    (``Tensor.new_zeros``)."""
    check_device(device, "new_zeros")
    dt = _dtype("new_zeros", dtype, self._data.dtype)
    return _leaf("new_zeros", np.zeros(_size("new_zeros", size), dt), requires_grad)


def new_ones(self: Tensor, *size: Any, dtype: Any = None, requires_grad: bool = False,
             device: Any = None) -> Tensor:
    """Ones of shape ``size`` in ``self``'s dtype unless ``dtype`` is given."""
    check_device(device, "new_ones")
    dt = _dtype("new_ones", dtype, self._data.dtype)
    return _leaf("new_ones", np.ones(_size("new_ones", size), dt), requires_grad)


def new_empty(self: Tensor, *size: Any, dtype: Any = None, requires_grad: bool = False,
              device: Any = None) -> Tensor:
    """``new_zeros`` under PyTorch's name for uninitialised memory: zero-filled."""
    check_device(device, "new_empty")
    dt = _dtype("new_empty", dtype, self._data.dtype)
    return _leaf("new_empty", np.zeros(_size("new_empty", size), dt), requires_grad)


def new_full(self: Tensor, size: Any, fill_value: Any, *, dtype: Any = None,
             requires_grad: bool = False, device: Any = None) -> Tensor:
    """``fill_value`` everywhere in shape ``size``, in ``self``'s dtype unless ``dtype``
    is given (``Tensor.new_full``)."""
    check_device(device, "new_full")
    dt = _dtype("new_full", dtype, self._data.dtype)
    shape = _size("new_full", (size,))
    value = _fill("new_full", fill_value, dt)
    return _leaf("new_full", np.full(shape, value, dt), requires_grad)


def new_tensor(self: Tensor, data: Any, *, dtype: Any = None, requires_grad: bool = False,
               device: Any = None) -> Tensor:
    """A copy of ``data`` in ``self``'s dtype unless ``dtype`` is given, a new leaf outside
    the graph (``Tensor.new_tensor``)."""
    check_device(device, "new_tensor")
    dt = _dtype("new_tensor", dtype, self._data.dtype)
    return _leaf("new_tensor", Tensor(data, dtype=dt)._data, requires_grad)


def type_as(self: Tensor, other: Any) -> Tensor:
    """``self`` in ``other``'s dtype (``self.to(other.dtype)``): ``self`` itself when it
    has it; float32 <-> float64 in the graph."""
    other = _tensor_arg("type_as", other, "other")
    return convert(self, other._data.dtype, "type_as")


def view_as(self: Tensor, other: Any) -> Tensor:
    """``self`` reshaped to ``other``'s shape (``self.view(other.size())``), in the graph."""
    other = _tensor_arg("view_as", other, "other")
    if self.numel() != math.prod(other.shape):
        raise ValueError(f"view_as: x of shape {self.shape} (size {self.numel()}) cannot be "
                         f"viewed as other's shape {other.shape} (size "
                         f"{math.prod(other.shape)})")
    return reshape(self, other.shape)


def dim(self: Tensor) -> int:
    """The number of dims (``Tensor.dim``, ``ndim``)."""
    return self._data.ndim


def contiguous(self: Tensor, memory_format: Any = None) -> Tensor:
    """``self`` when its elements are in row-major order in memory, else a row-major
    copy in the graph (``clone``; the gradient passes unchanged)."""
    return self if self._data.flags.c_contiguous else clone(self)


__all__ = ["arange", "linspace", "logspace", "eye", "empty", "empty_like", "full_like",
           "from_numpy", "as_tensor", "meshgrid"]
