"""Reductions: sum, mean, max, min over ``axis`` (int, tuple of ints, or None for all),
negative axes allowed, ``keepdims`` as in NumPy/PyTorch.

* sum: the backward of broadcasting in reverse: forward is ``sum_to_shape`` (the race-free
  broadcast reduction of ``kernels/broadcast_sum.py``), backward broadcasts g back (a view).
* mean: sum / n with n the number of reduced elements; an integer input gives float32.
* max/min: ``torch.amax``/``amin`` semantics: values only, and the gradient is split
  evenly among tied extrema (g / n_ties to each). NaN propagates, and the gradient of a
  slice whose extremum is NaN is as in PyTorch: NaN throughout for ``amax``/``amin``
  (their g / n_ties * [x == m] with no entry equal to NaN), shared evenly among the NaN
  entries for ``max()``/``min()`` without ``dim``; ``max(dim=)`` and ``min(dim=)`` pick
  the first NaN and send it the gradient.
Integer (and bool) sums are int64, computed in integers (exact, wrapping on overflow).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..function import Function, Sample, register
from ..kernels import broadcast_sum, strided_apply
from ..kernels import reduce as reduce_kernels
from ..tensor import DEFAULT_DTYPE, Tensor, lift
from ._args import axes, dim_arg, keepdim_arg, one_axis


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


def _sum_forward(x: np.ndarray, kept: tuple, out_shape: tuple,
                 scale: float | None) -> np.ndarray:
    """scale * (x summed to the shape ``kept``), reshaped to ``out_shape``. ``scale`` None
    is the sum itself: of an integer or bool x, an exact int64 sum (NumPy's)."""
    if x.dtype.kind == "f":  # a new array even when no axis is reduced
        y = broadcast_sum.reduce_term(strided_apply.COPY, x, None, kept,
                                      1.0 if scale is None else scale, x.shape)
    elif scale is None:
        y = np.asarray(np.sum(x, axis=tuple(d for d, n in enumerate(kept) if n == 1),
                              dtype=np.int64))
    else:
        y = broadcast_sum.reduce_term(strided_apply.COPY, x.astype(np.float64), None, kept,
                                      scale, x.shape).astype(DEFAULT_DTYPE)
    return y.reshape(out_shape)


@register("sum", samples=_reduce_samples)
class Sum(Function):
    @staticmethod
    def forward(ctx, x, axis=None, keepdims=False):
        kept, out_shape = _shapes(x.shape, axes("sum", axis, x.shape), keepdims)
        ctx.shapes = (x.shape, kept)
        return _sum_forward(x, kept, out_shape, None)

    @staticmethod
    def backward(ctx, g):
        shape, kept = ctx.shapes
        return _broadcast_grad(g.reshape(kept), shape)

    @staticmethod
    def vjp(ctx, g):
        shape, kept = ctx.shapes
        return g.reshape(kept).broadcast_to(shape)


@register("mean", samples=_reduce_samples)
class Mean(Function):
    @staticmethod
    def forward(ctx, x, axis=None, keepdims=False):
        reduced = axes("mean", axis, x.shape)
        n = 1
        for d in reduced:
            n *= x.shape[d]
        scale = 1.0 / n if n else float("nan")  # the mean of nothing is NaN (PyTorch)
        kept, out_shape = _shapes(x.shape, reduced, keepdims)
        ctx.shapes = (x.shape, kept, scale)
        return _sum_forward(x, kept, out_shape, scale)

    @staticmethod
    def backward(ctx, g):
        shape, kept, scale = ctx.shapes
        gs = np.empty(kept, g.dtype)
        reduce_kernels.scaled(np.ascontiguousarray(g).reshape(-1), g.dtype.type(scale),
                              gs.reshape(-1))
        return _broadcast_grad(gs, shape)

    @staticmethod
    def vjp(ctx, g):
        shape, kept, scale = ctx.shapes
        return (g.reshape(kept) * scale).broadcast_to(shape)


class _Extremum(Function):
    """max (is_min=False) or min over axes; the gradient is split evenly among ties (the
    NaN entries are the ties of a NaN extremum with ``spread_nan``; without, a NaN
    extremum's slice gets NaN)."""

    is_min = False

    @classmethod
    def forward(cls, ctx, x, axis=None, keepdims=False, spread_nan=False):
        name = "amin" if cls.is_min else "amax"
        reduced = axes(name, axis, x.shape)
        if any(x.shape[d] == 0 for d in reduced):
            raise ValueError(f"{name}: cannot reduce over the empty axis {axis!r} of a "
                             f"tensor of shape {x.shape}")
        kept, out_shape = _shapes(x.shape, reduced, keepdims)
        rest = tuple(d for d in range(x.ndim) if d not in reduced)
        moved = np.transpose(x, rest + reduced)  # reduced axes last
        r = 1
        for d in reduced:
            r *= x.shape[d]
        x2 = np.ascontiguousarray(moved).reshape(-1, r)
        m = reduce_kernels.extremum_rows(x2, cls.is_min)
        ctx.save_for_backward(x2, m)
        ctx.layout = (moved.shape, rest + reduced, kept)
        ctx.spread_nan = spread_nan
        return m.reshape(out_shape)

    @staticmethod
    def backward(ctx, g):
        x2, m = ctx.saved_tensors
        moved_shape, perm, _ = ctx.layout
        gx = reduce_kernels.extremum_rows_backward(x2, m, np.ascontiguousarray(g).reshape(-1),
                                                   ctx.spread_nan)
        return np.transpose(gx.reshape(moved_shape), np.argsort(perm))

    @staticmethod
    def vjp(ctx, g):
        # g times the constant tie weights (1 / n_ties on the extrema): linear in g; a NaN
        # extremum without spread_nan has no ties, and its weights 0 / 0 are NaN
        x2, m = ctx.saved_tensors
        moved_shape, perm, kept = ctx.layout
        ties = x2 == m[:, None]
        if ctx.spread_nan:
            ties |= np.isnan(x2) & np.isnan(m)[:, None]
        with np.errstate(invalid="ignore"):
            weights = ties / ties.sum(axis=1, keepdims=True)
        weights = np.transpose(weights.reshape(moved_shape), np.argsort(perm))
        return g.reshape(kept).broadcast_to(weights.shape) * lift(weights.astype(x2.dtype))


@register("max", samples=_extremum_samples)
class Max(_Extremum):
    is_min = False


@register("min", samples=_extremum_samples)
class Min(_Extremum):
    is_min = True


def sum(x: Any, dim: Any = None, keepdim: bool | None = None, *, axis: Any = None,
        keepdims: bool | None = None) -> Tensor:
    """Sum over ``dim`` (int, tuple, or None for all dims; ``()`` reduces nothing, as in
    NumPy); grad: g broadcast back over the reduced dims. ``axis``/``keepdims`` are the
    NumPy spellings of ``dim``/``keepdim``."""
    return Sum.apply(lift(x), axis=dim_arg("sum", dim, axis),
                     keepdims=keepdim_arg("sum", keepdim, keepdims))


def mean(x: Any, dim: Any = None, keepdim: bool | None = None, *, axis: Any = None,
         keepdims: bool | None = None) -> Tensor:
    """Mean over ``dim`` = sum / n (n reduced elements; NaN when n = 0, as PyTorch);
    grad: g / n broadcast back."""
    return Mean.apply(lift(x), axis=dim_arg("mean", dim, axis),
                      keepdims=keepdim_arg("mean", keepdim, keepdims))


def amax(x: Any, dim: Any = None, keepdim: bool | None = None, *, axis: Any = None,
         keepdims: bool | None = None) -> Tensor:
    """Maximum over ``dim`` (int, tuple or None), values only (``torch.amax``). Gradient:
    g split evenly among the tied maxima of each reduced slice (g / n_ties to each); NaN
    over a slice whose maximum is NaN (as ``torch.amax``)."""
    return Max.apply(lift(x), axis=dim_arg("amax", dim, axis),
                     keepdims=keepdim_arg("amax", keepdim, keepdims))


def amin(x: Any, dim: Any = None, keepdim: bool | None = None, *, axis: Any = None,
         keepdims: bool | None = None) -> Tensor:
    """Minimum over ``dim`` (``torch.amin``); ties share the gradient evenly."""
    return Min.apply(lift(x), axis=dim_arg("amin", dim, axis),
                     keepdims=keepdim_arg("amin", keepdim, keepdims))


def _selected(op: str, x: Tensor, dim: Any, keepdim: bool, pick) -> tuple[Tensor, Tensor]:
    """(values, indices) of ``pick`` (np.argmax/np.argmin) along one dim: the values are
    ``x`` indexed at the indices, so the gradient goes to that one element (PyTorch's
    ``max(dim=)``: the first extremum; a NaN is the extremum and its index is taken)."""
    d = one_axis(op, dim, x.shape)
    if x.ndim and x.shape[d] == 0:
        raise ValueError(f"{op}: cannot reduce over the empty dim {dim} of a tensor of "
                         f"shape {x.shape}")
    data = x.data.reshape(1) if x.ndim == 0 else x.data
    idx = pick(data, axis=d)  # NumPy's argmax/argmin also stop at the first NaN
    grid = list(np.indices(idx.shape, sparse=True))
    grid.insert(d, idx)
    values = x.reshape(data.shape)[tuple(np.broadcast_arrays(*grid))]
    if x.ndim == 0:  # with or without keepdim, as PyTorch
        values, idx = values.reshape(()), idx.reshape(())
    elif keepdim:
        values = values.reshape(idx.shape[:d] + (1,) + idx.shape[d:])
        idx = np.expand_dims(idx, d)
    return values, Tensor._wrap(idx.astype(np.int64), None, 0)


def max(x: Any, dim: Any = None, keepdim: bool | None = None, *, axis: Any = None,
        keepdims: bool | None = None) -> Tensor | tuple[Tensor, Tensor]:
    """With no dim, the maximum of all elements (as ``amax``, but a NaN maximum sends the
    gradient evenly to the NaN entries). With ``dim`` (one int), the PyTorch pair
    ``(values, indices)``; the gradient goes to the index."""
    d = dim_arg("max", dim, axis)
    keep = keepdim_arg("max", keepdim, keepdims)
    if d is None:
        return Max.apply(lift(x), axis=None, keepdims=keep, spread_nan=True)
    return _selected("max", lift(x), d, keep, np.argmax)


def min(x: Any, dim: Any = None, keepdim: bool | None = None, *, axis: Any = None,
        keepdims: bool | None = None) -> Tensor | tuple[Tensor, Tensor]:
    """With no dim, the minimum of all elements (a NaN minimum sends the gradient evenly
    to the NaN entries); with ``dim``, ``(values, indices)``."""
    d = dim_arg("min", dim, axis)
    keep = keepdim_arg("min", keepdim, keepdims)
    if d is None:
        return Min.apply(lift(x), axis=None, keepdims=keep, spread_nan=True)
    return _selected("min", lift(x), d, keep, np.argmin)


# -- sum_to_size -------------------------------------------------------------------------
def _sum_to_size_samples(rng):
    yield Sample(rng.standard_normal((4, 3)), shape=(1, 3), label="rows")
    yield Sample(rng.standard_normal((2, 3, 4)), shape=(3, 1), label="leading and size-1")
    yield Sample(rng.standard_normal((2, 3)), shape=(), label="to 0-d")


@register("sum_to_size", samples=_sum_to_size_samples)
class SumToSize(Function):
    @staticmethod
    def forward(ctx, x, shape):
        return np.array(broadcast_sum.sum_to_shape(x, shape))

    @staticmethod
    def backward(ctx, g):
        return np.broadcast_to(g, ctx.input_arrays[0].shape)

    @staticmethod
    def vjp(ctx, g):
        return g.broadcast_to(ctx.input_arrays[0].shape)


def sum_to_size(x: Any, *shape: int) -> Tensor:
    """``x`` summed over the dims along which ``shape`` broadcasts to ``x.shape`` (the
    gradient of a broadcast operand); ``torch.Tensor.sum_to_size``."""
    x = lift(x)
    shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], tuple | list) \
        else tuple(shape)
    lead = x.ndim - len(shape)
    if lead < 0 or any(s not in (1, n) for s, n in zip(shape, x.shape[lead:])):
        raise ValueError(f"sum_to_size: shape {shape} does not broadcast to x's shape "
                         f"{x.shape}")
    return x if shape == x.shape else SumToSize.apply(x, shape=shape)


__all__ = ["sum", "mean", "max", "min", "amax", "amin", "sum_to_size"]
