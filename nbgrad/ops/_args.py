"""The argument checks of ``ops/``: one spelling each, every error naming the op, the
argument and the shapes."""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np


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


_TENSOR_API: list = []   # [lift, FLOAT_DTYPES] from ..tensor, imported on first use


def float_input(op: str, x: Any):
    """``x`` as a Tensor (``tensor.lift``), which must be float32 or float64 (TypeError
    naming the op, the dtype and the shape)."""
    if not _TENSOR_API:
        from ..tensor import FLOAT_DTYPES, lift
        _TENSOR_API[:] = [lift, FLOAT_DTYPES]
    lift, float_dtypes = _TENSOR_API
    x = lift(x)
    if x.dtype not in float_dtypes:
        raise TypeError(f"{op}: x must be float32 or float64, got {x.dtype} (shape {x.shape})")
    return x


def real(op: str, name: str, value: Any) -> float:
    """A real-number parameter (Python or NumPy int/float, not bool) as a float."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise TypeError(f"{op}: {name} must be a real number, got {type(value).__name__}")
    return float(value)
