"""Reductions: sum, mean, max, min over ``axis`` (int, tuple of ints, or None for all),
negative axes allowed, ``keepdims`` as in NumPy/PyTorch.

* sum: the backward of broadcasting in reverse: forward is ``sum_to_shape`` (the race-free
  broadcast reduction of ``kernels/broadcast.py``), backward broadcasts g back (a view).
* mean: sum / n with n the number of reduced elements; an integer input gives float32.
* max/min: ``torch.amax``/``amin`` semantics: values only, and the gradient is split
  evenly among tied extrema (g / n_ties to each). NaN propagates.
Integer (and bool) sums are int64, computed in float64 (exact below 2**53).
"""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from ..function import Function, Sample, register
from ..kernels import broadcast as B
from ..kernels import reduce as K
from ..tensor import DEFAULT_DTYPE, Tensor, lift


def _axes(op: str, axis: Any, shape: tuple) -> tuple[int, ...]:
    """``axis`` as a sorted tuple of non-negative ints; ValueError/TypeError naming the
    op, the axis and the shape."""
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


def _shapes(shape: tuple, axes: tuple, keepdims: bool) -> tuple[tuple, tuple]:
    """(the result's shape with reduced axes kept as 1, the returned shape)."""
    if len(axes) == len(shape):
        kept = (1,) * len(shape)
        return kept, kept if keepdims else ()
    kept = tuple(1 if d in axes else n for d, n in enumerate(shape))
    out = kept if keepdims else tuple(n for d, n in enumerate(shape) if d not in axes)
    return kept, out


def _reduce_samples(rng):
    for shape, axis, keepdims in [((3, 4), None, False), ((3, 4), 0, False),
                                  ((3, 4), -1, True), ((2, 3, 4), (0, 2), False),
                                  ((2, 3, 4), 1, True), ((5,), 0, False), ((), None, False),
                                  ((2, 1, 3, 2), (1, 3), True)]:
        yield Sample(np.asarray(rng.standard_normal(shape)), axis=axis, keepdims=keepdims,
                     label=f"{shape} axis={axis} keepdims={keepdims}")


def _extremum_samples(rng):
    # distinct values (a permutation) so no ties sit inside the finite-difference step
    for s in _reduce_samples(rng):
        x = s.inputs[0]
        vals = np.asarray(rng.permutation(x.size).reshape(x.shape) * 0.1
                          + 0.01 * rng.random(x.shape))
        yield Sample(vals, label=s.label, **s.params)


_SMALL = 4096


def _broadcast_grad(g: np.ndarray, shape: tuple) -> np.ndarray:
    """g (reduced axes kept as 1) broadcast back to ``shape``: a 0-stride view, read in
    place downstream; a small result is materialised instead, since a contiguous array
    takes the element-wise ops' fast path (planning a strided loop costs more)."""
    if g.size == 1 and _size(shape) <= _SMALL:
        out = np.empty(shape, g.dtype)
        out[...] = g
        return out
    view = np.broadcast_to(g, shape)
    return np.array(view) if view.size <= _SMALL else view


def _size(shape: tuple) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _sum_forward(x: np.ndarray, kept: tuple, out_shape: tuple, scale: float) -> np.ndarray:
    if x.dtype.kind != "f":
        y = B.reduce_term(B.COPY, x.astype(np.float64), None, kept, scale, x.shape)
        y = y.astype(np.int64 if scale == 1.0 else DEFAULT_DTYPE)
    else:  # a new array even when no axis is reduced
        y = B.reduce_term(B.COPY, x, None, kept, scale, x.shape)
    return y.reshape(out_shape)


@register("sum", samples=_reduce_samples)
class Sum(Function):
    @staticmethod
    def forward(ctx, x, axis=None, keepdims=False):
        kept, out_shape = _shapes(x.shape, _axes("sum", axis, x.shape), keepdims)
        ctx.shapes = (x.shape, kept)
        return _sum_forward(x, kept, out_shape, 1.0)

    @staticmethod
    def backward(ctx, g):
        shape, kept = ctx.shapes
        return _broadcast_grad(g.reshape(kept), shape)


@register("mean", samples=_reduce_samples)
class Mean(Function):
    @staticmethod
    def forward(ctx, x, axis=None, keepdims=False):
        axes = _axes("mean", axis, x.shape)
        n = 1
        for d in axes:
            n *= x.shape[d]
        scale = 1.0 / n if n else float("nan")  # the mean of nothing is NaN (PyTorch)
        kept, out_shape = _shapes(x.shape, axes, keepdims)
        ctx.shapes = (x.shape, kept, scale)
        return _sum_forward(x, kept, out_shape, scale)

    @staticmethod
    def backward(ctx, g):
        shape, kept, scale = ctx.shapes
        gs = np.empty(kept, g.dtype)
        K.scaled(np.ascontiguousarray(g).reshape(-1), g.dtype.type(scale), gs.reshape(-1))
        return _broadcast_grad(gs, shape)


class _Extremum(Function):
    """max (is_min=False) or min over axes; the gradient is split evenly among ties."""

    is_min = False

    @classmethod
    def forward(cls, ctx, x, axis=None, keepdims=False):
        name = "min" if cls.is_min else "max"
        axes = _axes(name, axis, x.shape)
        if any(x.shape[d] == 0 for d in axes):
            raise ValueError(f"{name}: cannot reduce over the empty axis {axis!r} of a "
                             f"tensor of shape {x.shape}")
        kept, out_shape = _shapes(x.shape, axes, keepdims)
        rest = tuple(d for d in range(x.ndim) if d not in axes)
        moved = np.transpose(x, rest + axes)  # reduced axes last
        r = 1
        for d in axes:
            r *= x.shape[d]
        x2 = np.ascontiguousarray(moved).reshape(-1, r)
        m = K.extremum_rows(x2, cls.is_min)
        ctx.save_for_backward(x2, m)
        ctx.layout = (moved.shape, rest + axes)
        return m.reshape(out_shape)

    @staticmethod
    def backward(ctx, g):
        x2, m = ctx.saved_tensors
        moved_shape, perm = ctx.layout
        gx = K.extremum_rows_backward(x2, m, np.ascontiguousarray(g).reshape(-1))
        return np.transpose(gx.reshape(moved_shape), np.argsort(perm))


@register("max", samples=_extremum_samples)
class Max(_Extremum):
    is_min = False


@register("min", samples=_extremum_samples)
class Min(_Extremum):
    is_min = True


def sum(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Sum over ``axis`` (int, tuple, or None for all axes; ``()`` reduces nothing, as in
    NumPy); grad: g broadcast back over the reduced axes."""
    return Sum.apply(lift(x), axis=axis, keepdims=keepdims)


def mean(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Mean over ``axis`` = sum / n (n reduced elements; NaN when n = 0, as PyTorch);
    grad: g / n broadcast back."""
    return Mean.apply(lift(x), axis=axis, keepdims=keepdims)


def max(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Maximum over ``axis`` (``torch.amax``): values only. Gradient: g split evenly
    among the tied maxima of each reduced slice (g / n_ties to each, 0 elsewhere)."""
    return Max.apply(lift(x), axis=axis, keepdims=keepdims)


def min(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Minimum over ``axis`` (``torch.amin``): values only. Gradient: g split evenly
    among the tied minima of each reduced slice (g / n_ties to each, 0 elsewhere)."""
    return Min.apply(lift(x), axis=axis, keepdims=keepdims)


__all__ = ["sum", "mean", "max", "min"]
