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

* var/std: ``torch.var``/``torch.std`` with ``correction`` (or the older ``unbiased``):
  sum (x - mean)^2 / max(N - correction, 0); N - correction <= 0 gives inf (NaN for a
  constant slice), as PyTorch. std's gradient is 0 where std is 0 (PyTorch's convention).
* norm: ``torch.linalg.vector_norm`` (``torch.norm`` for vectors) for p = 2 ('fro'), 1,
  inf, -inf, 0 and any other real p, with PyTorch's gradients at 0 (0 for a zero vector).
* argmax/argmin: int64 indices without a gradient; the first extremum wins ties and a NaN
  counts as the extremum (the first NaN's index), as PyTorch.
var, std and norm run on x with the reduced axes moved last, ``x2[K, R]``, one row per
output element (``kernels/reduce.py``).
"""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from .. import return_types
from ..dtypes import default_numpy
from ..function import Function, Sample, register
from ..kernels import broadcast_sum, strided_apply
from ..kernels import reduce as reduce_kernels
from ..runtime.jit import for_work
from ..tensor import Tensor, lift
from . import select
from ._args import axes, dim_arg, float_input, keepdim_arg, one_dim, real


def _shapes(shape: tuple, axes: tuple, keepdims: bool) -> tuple[tuple, tuple]:
    """(the result's shape with reduced axes kept as 1, the returned shape)."""
    if len(axes) == len(shape):
        kept = (1,) * len(shape)
        return kept, kept if keepdims else ()
    kept = tuple(1 if d in axes else n for d, n in enumerate(shape))
    out = kept if keepdims else tuple(n for d, n in enumerate(shape) if d not in axes)
    return kept, out


def _kept_shape(ctx) -> tuple:
    """The result's shape with the reduced axes ``ctx.dim`` of ``ctx.input_shape`` kept
    as 1: the shape the upstream gradient broadcasts back from."""
    return _shapes(ctx.input_shape, ctx.dim, True)[0]


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
    return np.array(view, order="C") if view.size <= _SMALL else view


def _rows(x: np.ndarray, reduced: tuple) -> tuple[np.ndarray, tuple, tuple]:
    """(x2, moved shape, perm): ``x`` with the ``reduced`` axes moved last (the axis order
    ``perm``) as a contiguous [K, R] array, R the number of reduced elements per row."""
    rest = tuple(d for d in range(x.ndim) if d not in reduced)
    moved = np.transpose(x, rest + reduced)
    x2 = np.ascontiguousarray(moved).reshape(_size(moved.shape[:len(rest)]),
                                             _size(moved.shape[len(rest):]))
    return x2, moved.shape, rest + reduced


def _unrows(gx2: np.ndarray, moved_shape: tuple, perm: tuple) -> np.ndarray:
    """The inverse of ``_rows``: [K, R] back to x's axis order (a view)."""
    return np.transpose(gx2.reshape(moved_shape), np.argsort(perm))


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
                                      scale, x.shape).astype(default_numpy())
    return y.reshape(out_shape)


@register("sum", samples=_reduce_samples)
class Sum(Function):
    @staticmethod
    def forward(ctx, x, axis=None, keepdims=False):
        ctx.input_shape, ctx.dim = x.shape, axes("sum", axis, x.shape)
        kept, out_shape = _shapes(x.shape, ctx.dim, keepdims)
        return _sum_forward(x, kept, out_shape, None)

    @staticmethod
    def backward(ctx, g):
        return _broadcast_grad(g.reshape(_kept_shape(ctx)), ctx.input_shape)

    @staticmethod
    def vjp(ctx, g):
        return g.reshape(_kept_shape(ctx)).broadcast_to(ctx.input_shape)


@register("mean", samples=_reduce_samples)
class Mean(Function):
    @staticmethod
    def forward(ctx, x, axis=None, keepdims=False):
        ctx.input_shape, ctx.dim = x.shape, axes("mean", axis, x.shape)
        kept, out_shape = _shapes(x.shape, ctx.dim, keepdims)
        return _sum_forward(x, kept, out_shape, _mean_scale(ctx))

    @staticmethod
    def backward(ctx, g):
        gs = np.empty(_kept_shape(ctx), g.dtype)
        reduce_kernels.scaled(np.ascontiguousarray(g).reshape(-1),
                              g.dtype.type(_mean_scale(ctx)), gs.reshape(-1))
        return _broadcast_grad(gs, ctx.input_shape)

    @staticmethod
    def vjp(ctx, g):
        return (g.reshape(_kept_shape(ctx)) * _mean_scale(ctx)).broadcast_to(ctx.input_shape)


def _mean_scale(ctx) -> float:
    """1 / n for the n elements a mean over ``ctx.dim`` reduces (NaN for n = 0: the mean
    of nothing is NaN, as PyTorch)."""
    n = 1
    for d in ctx.dim:
        n *= ctx.input_shape[d]
    return 1.0 / n if n else float("nan")


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
        x2, moved_shape, perm = _rows(x, reduced)
        m = reduce_kernels.extremum_rows(x2, cls.is_min)
        ctx.save_for_backward(x2, m)
        ctx.geometry = (moved_shape, perm, kept)
        ctx.spread_nan = spread_nan
        return m.reshape(out_shape)

    @staticmethod
    def backward(ctx, g):
        x2, m = ctx.saved_tensors
        moved_shape, perm, _ = ctx.geometry
        gx = reduce_kernels.extremum_rows_backward(x2, m, np.ascontiguousarray(g).reshape(-1),
                                                   ctx.spread_nan)
        return _unrows(gx, moved_shape, perm)

    @staticmethod
    def vjp(ctx, g):
        # g times the constant tie weights (1 / n_ties on the extrema): linear in g; a NaN
        # extremum without spread_nan has no ties, and its weights 0 / 0 are NaN
        x2, m = ctx.saved_tensors
        moved_shape, perm, kept = ctx.geometry
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


def _selected(op: str, x: Tensor, dim: Any, keepdim: bool, pick, result: type) -> Any:
    """``result(values, indices)`` (a ``return_types`` named tuple) of ``pick``
    (np.argmax/np.argmin) along one dim: the values are ``x`` indexed at the indices, so
    the gradient goes to that one element (PyTorch's ``max(dim=)``: the first extremum; a
    NaN is the extremum and its index is taken)."""
    d = one_dim(op, dim, x.shape)
    if x.ndim and x.shape[d] == 0:
        raise ValueError(f"{op}: cannot reduce over the empty dim {dim} of a tensor of "
                         f"shape {x.shape}")
    data = x._data.reshape(1) if x.ndim == 0 else x._data
    idx = pick(data, axis=d)  # NumPy's argmax/argmin also stop at the first NaN
    grid = list(np.indices(idx.shape, sparse=True))
    grid.insert(d, idx)
    values = x.reshape(data.shape)[tuple(np.broadcast_arrays(*grid))]
    if x.ndim == 0:  # with or without keepdim, as PyTorch
        values, idx = values.reshape(()), idx.reshape(())
    elif keepdim:
        values = values.reshape(idx.shape[:d] + (1,) + idx.shape[d:])
        idx = np.expand_dims(idx, d)
    return result(values, Tensor._wrap(idx.astype(np.int64), None, 0))


def _binary(op: str, x: Any, dim: Any, other: Any, given: tuple, pair: Any) -> Tensor:
    """PyTorch's ``max(x, other)``/``min(x, other)``: a tensor second argument (or
    ``other=``) is the element-wise ``maximum``/``minimum`` (``pair``), broadcast."""
    if isinstance(dim, Tensor) and other is not None:
        raise TypeError(f"{op}: other is given twice (as dim, a tensor of shape "
                        f"{dim.shape}, and as other=)")
    other = dim if isinstance(dim, Tensor) else other
    if not isinstance(other, Tensor):
        raise TypeError(f"{op}: other must be a Tensor, got {type(other).__name__}")
    if any(v is not None for v in given):
        raise TypeError(f"{op}: keepdim/axis/keepdims cannot be given with other (x of "
                        f"shape {lift(x).shape}, other of shape {other.shape})")
    return pair(x, other)


def max(x: Any, dim: Any = None, keepdim: bool | None = None, *, axis: Any = None,
        keepdims: bool | None = None, other: Any = None) -> Tensor | return_types.max:
    """With no dim, the maximum of all elements (as ``amax``, but a NaN maximum sends the
    gradient evenly to the NaN entries). With ``dim`` (one int), the named tuple
    ``(values, indices)`` (``return_types.max``, as PyTorch's); the gradient goes to the
    index. With a tensor second argument (``max(x, other)``, or ``other=``), the
    element-wise ``maximum(x, other)``, broadcast, as in PyTorch."""
    if isinstance(dim, Tensor) or other is not None:
        return _binary("max", x, dim, other, (keepdim, axis, keepdims), select.maximum)
    d = dim_arg("max", dim, axis)
    keep = keepdim_arg("max", keepdim, keepdims)
    if d is None:
        return Max.apply(lift(x), axis=None, keepdims=keep, spread_nan=True)
    return _selected("max", lift(x), d, keep, np.argmax, return_types.max)


def min(x: Any, dim: Any = None, keepdim: bool | None = None, *, axis: Any = None,
        keepdims: bool | None = None, other: Any = None) -> Tensor | return_types.min:
    """With no dim, the minimum of all elements (a NaN minimum sends the gradient evenly
    to the NaN entries); with ``dim``, the named tuple ``(values, indices)``
    (``return_types.min``); with a tensor second argument (``min(x, other)``, or
    ``other=``), the element-wise ``minimum(x, other)``, broadcast."""
    if isinstance(dim, Tensor) or other is not None:
        return _binary("min", x, dim, other, (keepdim, axis, keepdims), select.minimum)
    d = dim_arg("min", dim, axis)
    keep = keepdim_arg("min", keepdim, keepdims)
    if d is None:
        return Min.apply(lift(x), axis=None, keepdims=keep, spread_nan=True)
    return _selected("min", lift(x), d, keep, np.argmin, return_types.min)


# -- var, std ------------------------------------------------------------------------------
def _moment_samples(rng):
    for s in _reduce_samples(rng):
        if s.params["axis"] is None and s.inputs[0].ndim == 0:
            continue  # one element: var is NaN
        yield s
    yield Sample(rng.standard_normal((3, 5)), axis=1, keepdims=False, correction=0,
                 label="correction 0")
    yield Sample(rng.standard_normal((4, 3)), axis=0, keepdims=True, correction=2.5,
                 label="correction 2.5")


class _Moment(Function):
    """var (take_sqrt=False) or std over axes with ``correction`` (see the module
    docstring and ``kernels/reduce.py``: moment_rows)."""

    take_sqrt = False

    @classmethod
    def forward(cls, ctx, x, axis=None, keepdims=False, correction=1.0):
        name = "std" if cls.take_sqrt else "var"
        reduced = axes(name, axis, x.shape)
        kept, out_shape = _shapes(x.shape, reduced, keepdims)
        x2, moved_shape, perm = _rows(x, reduced)
        mean = np.empty(x2.shape[0], np.float64)
        y = np.empty(x2.shape[0], x.dtype)
        for_work(reduce_kernels.moment_rows, x2.size)(x2, _dof(x2, correction), cls.take_sqrt,
                                                      mean, y)
        y = y.reshape(out_shape)
        ctx.save_for_backward(x2, mean, y)
        ctx.geometry, ctx.dim, ctx.correction = (moved_shape, perm, kept), reduced, correction
        return y

    @classmethod
    def backward(cls, ctx, g):
        x2, mean, y = ctx.saved_tensors
        moved_shape, perm, _ = ctx.geometry
        gx = np.empty(x2.shape, g.dtype)
        for_work(reduce_kernels.moment_rows_backward, x2.size)(
            x2, mean, np.ascontiguousarray(g).reshape(-1), y.reshape(-1),
            _dof(x2, ctx.correction), cls.take_sqrt, gx)
        return _unrows(gx, moved_shape, perm)

    @classmethod
    def vjp(cls, ctx, g):
        # d var / dx = (2 / dof) (x - mean x); std: g / (2 std), 0 where std = 0
        x2, _, y = ctx.saved_tensors
        kept = ctx.geometry[2]
        gv = g.reshape(kept)
        if cls.take_sqrt:
            zero = y.reshape(kept) == 0
            std = ctx.output(y).reshape(kept)
            gv = gv * lift((~zero).astype(y.dtype)) / (2 * (std + lift(zero.astype(y.dtype))))
        x = ctx.inputs[0]
        with np.errstate(divide="ignore"):
            scale = float(np.float64(2.0) / np.float64(_dof(x2, ctx.correction)))
        return gv * (x - mean(x, dim=ctx.dim, keepdim=True)) * scale


def _dof(x2: np.ndarray, correction: float) -> float:
    """The divisor N - correction of a moment over the rows of ``x2[K, N]`` (0 at least)."""
    return builtins.max(float(x2.shape[1]) - correction, 0.0)


@register("var", samples=_moment_samples)
class Var(_Moment):
    take_sqrt = False


@register("std", samples=_moment_samples)
class Std(_Moment):
    take_sqrt = True


def _moment(name: str, cls: type, x: Any, dim: Any, unbiased: Any, keepdim: Any,
            correction: Any, axis: Any, keepdims: Any) -> Tensor:
    if isinstance(dim, bool):  # the old positional form var(x, unbiased)
        if unbiased is not None:
            raise TypeError(f"{name}: got unbiased twice (dim={dim!r}, unbiased={unbiased!r})")
        dim, unbiased = None, dim
    if unbiased is not None and correction is not None:
        raise TypeError(f"{name}: got both unbiased={unbiased!r} and correction="
                        f"{correction!r}; pass one of them")
    if unbiased is not None:
        if not isinstance(unbiased, bool | np.bool_):
            raise TypeError(f"{name}: unbiased must be a bool, got {unbiased!r}")
        c = 1.0 if unbiased else 0.0
    else:
        c = 1.0 if correction is None else real(name, "correction", correction)
    x = float_input(name, x)
    return cls.apply(x, axis=dim_arg(name, dim, axis),
                     keepdims=keepdim_arg(name, keepdim, keepdims), correction=c)


def var(x: Any, dim: Any = None, unbiased: bool | None = None, keepdim: bool | None = None,
        *, correction: float | None = None, axis: Any = None,
        keepdims: bool | None = None) -> Tensor:
    """Variance over ``dim`` (int, tuple or None for all): sum (x - mean)^2 / (N -
    correction), ``correction=1`` by default (Bessel's); ``unbiased=False`` is
    ``correction=0`` (PyTorch's older signature, also ``var(x, False)``). N - correction
    <= 0 gives inf, or NaN where the slice is constant (as PyTorch, which warns).
    Gradient: 2 (x - mean) / (N - correction) times g. float32/float64 only."""
    return _moment("var", Var, x, dim, unbiased, keepdim, correction, axis, keepdims)


def std(x: Any, dim: Any = None, unbiased: bool | None = None, keepdim: bool | None = None,
        *, correction: float | None = None, axis: Any = None,
        keepdims: bool | None = None) -> Tensor:
    """Standard deviation sqrt(var) (same arguments as ``var``). Gradient:
    (x - mean) / ((N - correction) std) times g, and 0 where std = 0 (a constant slice),
    as PyTorch."""
    return _moment("std", Std, x, dim, unbiased, keepdim, correction, axis, keepdims)


# -- norm ------------------------------------------------------------------------------------
def _norm_samples(rng):
    for s in _reduce_samples(rng):
        x = s.inputs[0]
        x = np.where(np.abs(x) < 0.2, 0.2 + np.abs(x), x)  # away from the kink at 0
        yield Sample(x, label=s.label + " p=2", **s.params)
    x = rng.standard_normal((3, 4))
    x = np.where(np.abs(x) < 0.2, 0.3, x)
    yield Sample(x, ord=1.0, axis=1, keepdims=False, label="p=1")
    yield Sample(x, ord=3.0, axis=0, keepdims=False, label="p=3")
    yield Sample(x, ord=0.5, axis=None, keepdims=False, label="p=0.5")
    yield Sample(x, ord=1.5, axis=(0, 1), keepdims=True, label="p=1.5")
    yield Sample(x, ord=-2.0, axis=1, keepdims=False, label="p=-2")
    distinct = (rng.permutation(12).reshape(3, 4) + 1.0) * rng.choice([-1.0, 1.0], (3, 4)) * 0.1
    yield Sample(distinct, ord=np.inf, axis=1, keepdims=False, label="p=inf")
    yield Sample(distinct, ord=-np.inf, axis=0, keepdims=True, label="p=-inf")
    yield Sample(x, ord=0.0, axis=1, keepdims=False, label="p=0")


def _norm_mode(p: float) -> int:
    if p == 2:
        return reduce_kernels.P2
    if p == 1:
        return reduce_kernels.P1
    if p == np.inf:
        return reduce_kernels.PINF
    if p == -np.inf:
        return reduce_kernels.NINF
    return reduce_kernels.P0 if p == 0 else reduce_kernels.PGEN


@register("norm", samples=_norm_samples)
class Norm(Function):
    """The vector p-norm over axes (``kernels/reduce.py``: norm_rows)."""

    @staticmethod
    def forward(ctx, x, ord=2.0, axis=None, keepdims=False):
        reduced = axes("norm", axis, x.shape)
        kept, out_shape = _shapes(x.shape, reduced, keepdims)
        x2, moved_shape, perm = _rows(x, reduced)
        mode = _norm_mode(ord)
        if x2.shape[1] == 0 and mode in (reduce_kernels.PINF, reduce_kernels.NINF):
            raise ValueError(f"norm: the {ord} norm of an empty slice is undefined (x of shape "
                             f"{x.shape}, dim {axis!r}), as in PyTorch")
        y = np.empty(x2.shape[0], x.dtype)
        for_work(reduce_kernels.norm_rows, x2.size)(x2, mode, float(ord), y)
        y = y.reshape(out_shape)
        ctx.save_for_backward(x2, y)
        ctx.geometry, ctx.ord = (moved_shape, perm, kept), float(ord)
        return y

    @staticmethod
    def backward(ctx, g):
        x2, y = ctx.saved_tensors
        moved_shape, perm, _ = ctx.geometry
        gx = np.empty(x2.shape, g.dtype)
        for_work(reduce_kernels.norm_rows_backward, x2.size)(
            x2, y.reshape(-1), np.ascontiguousarray(g).reshape(-1), _norm_mode(ctx.ord),
            ctx.ord, gx)
        return _unrows(gx, moved_shape, perm)

    @staticmethod
    def vjp(ctx, g):
        # the backward's table (kernels/reduce.py) in nbgrad ops; the masks are constants
        x2, y = ctx.saved_tensors
        kept, p = ctx.geometry[2], ctx.ord
        mode = _norm_mode(p)
        x = ctx.inputs[0]
        xd = x._data
        dt = xd.dtype
        gk = g.reshape(kept)
        if mode in (reduce_kernels.P1, reduce_kernels.PINF, reduce_kernels.NINF,
                    reduce_kernels.P0):  # piecewise linear: g times constant weights
            weights = Norm.backward(ctx, np.ones(y.shape, dt))
            return gk * lift(np.ascontiguousarray(weights))
        n0 = y.reshape(kept) == 0
        n = ctx.output(y).reshape(kept)
        n_safe = n + lift(n0.astype(dt))          # 1 where the norm is 0 (masked anyway)
        keep = lift((~n0).astype(dt))
        if mode == reduce_kernels.P2:
            return gk * keep * x / n_safe
        x0 = xd == 0
        a = (abs(x) + lift(x0.astype(dt))) ** (p - 1)  # |x|^(p-1), 1 at x = 0 (masked)
        term = lift((np.sign(xd) * ~x0).astype(dt)) * a
        return gk * keep * term / n_safe ** (p - 1)


def norm(x: Any, p: Any = 2, dim: Any = None, keepdim: bool | None = None, *,
         axis: Any = None, keepdims: bool | None = None) -> Tensor:
    """The vector p-norm (sum |x|^p)^(1/p) over ``dim`` (int, tuple or None for all), as
    ``torch.linalg.vector_norm``: p = 2 (also 'fro'), 1, inf (max |x|), -inf (min |x|), 0
    (the count of non-zeros) or any other real number. Gradients as PyTorch:
    p = 2: g x / ||x|| (0 for a zero vector); p = 1: g sign(x) (0 at 0); +-inf: g sign(x)
    shared evenly among the entries with |x| = the norm; p = 0: 0; other p:
    g sign(x) |x|^(p-1) / ||x||^(p-1) (0 at x = 0 and for a zero vector). float32/float64
    only; the inf norms of an empty slice are a ValueError. 'nuc' (a matrix norm) is not
    supported."""
    if isinstance(p, str):
        if p != "fro":
            raise ValueError(f"norm: p must be a real number or 'fro', got {p!r} (matrix "
                             "norms such as 'nuc' are not supported)")
        p = 2.0
    p = real("norm", "p", p)
    if p != p:
        raise ValueError("norm: p must not be NaN")
    x = float_input("norm", x)
    return Norm.apply(x, ord=p, axis=dim_arg("norm", dim, axis),
                      keepdims=keepdim_arg("norm", keepdim, keepdims))


# -- argmax, argmin --------------------------------------------------------------------------
def _arg_extremum(op: str, pick, x: Any, dim: Any, keepdim: Any, axis: Any,
                  keepdims: Any) -> Tensor:
    x = lift(x)
    d = dim_arg(op, dim, axis)
    keep = keepdim_arg(op, keepdim, keepdims)
    if x.dtype.kind == "b":
        raise TypeError(f"{op}: not supported for a bool tensor (shape {x.shape}), as in "
                        "PyTorch; convert it to an integer dtype first")
    data = x._data
    if d is None:
        if data.size == 0:
            raise ValueError(f"{op}: cannot take the {op} of an empty tensor (shape "
                             f"{x.shape}) without a dim")
        idx = np.asarray(pick(data.reshape(-1)))  # NumPy's argmax/argmin stop at a NaN
        idx = idx.reshape((1,) * data.ndim) if keep else idx.reshape(())
    else:
        a = one_dim(op, d, x.shape)
        if data.ndim == 0:
            idx = np.zeros((), np.int64)
        else:
            if data.shape[a] == 0:
                raise ValueError(f"{op}: cannot reduce over the empty dim {d} of a tensor "
                                 f"of shape {x.shape}")
            idx = np.asarray(pick(data, axis=a))
            if keep:
                idx = np.expand_dims(idx, a)
    return Tensor._wrap(idx.astype(np.int64), None, 0)


def argmax(x: Any, dim: Any = None, keepdim: bool | None = None, *, axis: Any = None,
           keepdims: bool | None = None) -> Tensor:
    """The index of the maximum along ``dim`` (one int), or into the flattened tensor when
    ``dim`` is None (``keepdim`` then gives shape (1, ..., 1), as PyTorch). int64, no
    gradient. Ties: the first index; a NaN is the maximum (the first NaN's index)."""
    return _arg_extremum("argmax", np.argmax, x, dim, keepdim, axis, keepdims)


def argmin(x: Any, dim: Any = None, keepdim: bool | None = None, *, axis: Any = None,
           keepdims: bool | None = None) -> Tensor:
    """The index of the minimum along ``dim`` (see ``argmax``); a NaN counts as the
    minimum (the first NaN's index), as PyTorch."""
    return _arg_extremum("argmin", np.argmin, x, dim, keepdim, axis, keepdims)


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


__all__ = ["sum", "mean", "max", "min", "amax", "amin", "sum_to_size", "var", "std", "norm",
           "argmax", "argmin"]
