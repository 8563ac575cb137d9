"""The argument checks of ``ops/``: one spelling each, every error naming the op, the
argument and the shapes."""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from ..tensor import FLOAT_DTYPES, Tensor, lift


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


def axes(op: str, axis: Any, shape: tuple) -> tuple[int, ...]:
    """``axis`` (int, tuple of ints, or None for all) as a sorted tuple of non-negative
    ints; ValueError/TypeError naming the op, the axis and the shape."""
    nd = len(shape)
    if axis is None:
        return tuple(range(nd))
    items = axis if isinstance(axis, tuple | list) else (axis,)
    out = []
    for a in items:
        if not isinstance(a, int | np.integer) or isinstance(a, bool | np.bool_):
            raise TypeError(f"{op}: axis must be an int, a tuple of ints or None, "
                            f"got {axis!r}")
        if not -builtins.max(nd, 1) <= a < builtins.max(nd, 1):
            raise ValueError(f"{op}: axis {axis!r} is out of range for a tensor of shape "
                             f"{shape} (ndim {nd})")
        out.append(int(a) % builtins.max(nd, 1))
    if len(set(out)) != len(out):
        raise ValueError(f"{op}: axis {axis!r} repeats an axis (shape {shape})")
    return tuple(sorted(a for a in out if a < nd))


def one_axis(op: str, axis: Any, shape: tuple) -> int:
    """A single axis as a non-negative int (a 0-d tensor has the one axis 0)."""
    if isinstance(axis, bool) or not isinstance(axis, int | np.integer):
        raise TypeError(f"{op}: axis must be an int, got {type(axis).__name__}")
    n = builtins.max(len(shape), 1)
    if not -n <= axis < n:
        raise ValueError(f"{op}: axis {axis} is out of range for shape {shape}")
    return int(axis) % n


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


def int_tuple(op: str, name: str, value: Any, n: int, minimum: int) -> tuple[int, ...]:
    """An int (repeated) or a sequence of ``n`` ints, each >= ``minimum``, as an n-tuple:
    conv and pool parameters (``stride=2`` or ``stride=(2, 1)``; ``(2,)`` for 1-D)."""
    if type(value) is int and value >= minimum:  # the common case, checked in one step
        return (value,) * n
    items = (value,) * n if isinstance(value, int | np.integer) else value
    if (not isinstance(items, tuple | list) or len(items) != n
            or not all(isinstance(v, int | np.integer) and not isinstance(v, bool)
                       for v in items)):
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
