"""The argument checks of ``ops/`` (and ``nn/``), one spelling each, every error naming the
op, the argument and the shapes: integers (``is_int``, ``int_tuple``), dims (``dim_arg``,
``keepdim_arg``, ``one_dim``, ``axes``), float inputs and dtypes (``float_input``,
``float_operands``, ``float_dtype``), dtype promotion (``promoted_dtype``, ``promoted``)
and real-number parameters (``real``)."""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from ..dtypes import to_numpy
from ..tensor import FLOAT_DTYPES, Tensor, lift


def is_int(v: Any) -> bool:
    """Whether ``v`` is a Python or NumPy integer (bools are not)."""
    return isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_)


def dim_arg(op: str, dim: Any, axis: Any, default: Any = None) -> Any:
    """The reduction axis from PyTorch's ``dim`` or NumPy's ``axis`` (either spelling;
    giving both is a TypeError)."""
    if dim is not None and axis is not None:
        raise TypeError(f"{op}: got both dim={dim!r} and axis={axis!r}; pass one of them")
    return default if dim is None and axis is None else (axis if dim is None else dim)


def keepdim_arg(op: str, keepdim: Any, keepdims: Any) -> bool:
    """PyTorch's ``keepdim`` or NumPy's ``keepdims`` (both given: TypeError)."""
    if keepdim is not None and keepdims is not None:
        raise TypeError(f"{op}: got both keepdim={keepdim!r} and keepdims={keepdims!r}; "
                        "pass one of them")
    return bool(keepdims if keepdim is None else keepdim)


def one_dim(op: str, dim: Any, shape: tuple, name: str = "dim",
            ndim: int | None = None) -> int:
    """``dim`` as an index in [0, ndim) (ndim = len(shape) unless given: unsqueeze and
    stack index a dim more); PyTorch's range [-ndim, ndim), where a 0-d tensor takes -1
    and 0. Out of range is an ``AxisError``, both a ValueError and an IndexError."""
    if not is_int(dim):
        raise TypeError(f"{op}: {name} must be an int, got {dim!r}")
    span = builtins.max(len(shape) if ndim is None else ndim, 1)
    if not -span <= dim < span:
        raise np.exceptions.AxisError(
            f"{op}: {name}={dim} is out of range for x of shape {shape} "
            f"(expected a dim in [{-span}, {span - 1}])")
    return int(dim) % span


def axes(op: str, axis: Any, shape: tuple, name: str = "axis") -> tuple[int, ...]:
    """``axis`` (int, tuple of ints, or None for all) as a sorted tuple of non-negative
    ints, each normalised by ``one_dim`` (a 0-d tensor reduces nothing); ValueError
    naming the op, the axis and the shape where one repeats."""
    if axis is None:
        return tuple(range(len(shape)))
    items = axis if isinstance(axis, tuple | list) else (axis,)
    if not builtins.all(is_int(a) for a in items):
        raise TypeError(f"{op}: {name} must be an int, a tuple of ints or None, got {axis!r}")
    out = [one_dim(op, a, shape, name) for a in items]
    if len(set(out)) != len(out):
        raise ValueError(f"{op}: {name} {axis!r} repeats an axis (shape {shape})")
    return tuple(sorted(a for a in out if a < len(shape)))


def float_input(op: str, x: Any, name: str = "x") -> Tensor:
    """``x`` as a Tensor (``lift``), which must be float32 or float64 (TypeError naming the
    op, the argument, the dtype and the shape)."""
    x = lift(x)
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{op}: {name} must be float32 or float64, got {x.dtype} "
                        f"(shape {x.shape})")
    return x


def float_operands(op: str, **named: Tensor | None) -> np.dtype | None:
    """The one float dtype that every given operand (None skipped) has; TypeError naming
    the operand that is not float, or listing every operand's dtype when they differ."""
    given = {k: t for k, t in named.items() if t is not None}
    for name, t in given.items():
        if t.dtype not in FLOAT_DTYPES:
            raise TypeError(f"{op}: {name} must be float32 or float64, got {t.dtype} "
                            f"(shape {t.shape})")
    dtypes = {t.dtype for t in given.values()}
    if len(dtypes) > 1:
        desc = ", ".join(f"{k} is {t.dtype}" for k, t in given.items())
        raise TypeError(f"{op}: inputs must share one dtype ({desc})")
    return dtypes.pop() if dtypes else None


def float_dtype(op: str, dtype: Any, name: str = "dtype") -> np.dtype:
    """``dtype`` (any spelling ``to_numpy`` takes) as a NumPy dtype, which must be
    float32 or float64 (TypeError naming the op and the argument)."""
    dt = to_numpy(dtype, op, name)
    if dt not in FLOAT_DTYPES:
        raise TypeError(f"{op}: {name} must be float32 or float64, got {dt}")
    return dt


def promoted_dtype(*dtypes: np.dtype) -> np.dtype:
    """The common dtype the PyTorch way: float64 if any is float64, else float32 if any
    is a float; all-integer (or all-bool) dtypes keep NumPy's promotion."""
    floats = [d for d in dtypes if d.kind == "f"]
    return np.result_type(*floats) if floats else np.result_type(*dtypes)


def promoted(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """a and b in their common dtype (``promoted_dtype``; no copy where they have it)."""
    dtype = promoted_dtype(a.dtype, b.dtype)
    return a.astype(dtype, copy=False), b.astype(dtype, copy=False)


def int_tuple(op: str, name: str, value: Any, n: int, minimum: int) -> tuple[int, ...]:
    """An int (repeated) or a sequence of ``n`` ints, each >= ``minimum``, as an n-tuple:
    conv and pool parameters (``stride=2`` or ``stride=(2, 1)``; ``(2,)`` for 1-D)."""
    if type(value) is int and value >= minimum:  # the common case, checked in one step
        return (value,) * n
    items = (value,) * n if isinstance(value, int | np.integer) else value
    if (not isinstance(items, tuple | list) or len(items) != n
            or not builtins.all(is_int(v) for v in items)):
        kind = "a pair of ints" if n == 2 else f"a {n}-element tuple" if n != 1 \
            else "a one-element tuple"
        raise TypeError(f"{op}: {name} must be an int or {kind}, got {value!r}")
    if min(items) < minimum:
        kind = "positive" if minimum == 1 else "non-negative"
        raise ValueError(f"{op}: {name} must be {kind}, got {value!r}")
    return tuple(int(v) for v in items)


def real(op: str, name: str, value: Any) -> float:
    """A real-number parameter (Python or NumPy int/float, not bool) as a float."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise TypeError(f"{op}: {name} must be a real number, got {type(value).__name__}")
    return float(value)
