"""Resampling: interpolation, adaptive pooling, pixel shuffle (PyTorch semantics).

``interpolate`` covers 3-D [N, C, L], 4-D [N, C, H, W] and 5-D [N, C, D, H, W] inputs in
the modes 'nearest', 'nearest-exact', 'linear' / 'bilinear' / 'trilinear' / 'bicubic'
(align_corners True or False) and 'area'. Every mode is separable: per spatial axis a
table of source indices and weights (computed with PyTorch's CPU rounding: the ratio, the
source index and the cubic coefficients in the input's float type, the nearest modes in
float32), applied by one kernel (kernels/resample.py); 5-D inputs take two passes, (H, W)
on the [N*D, H, W] planes, then D on [N, D, OH*OW] (an identity column table). The output is
linear in the input, so the backward (the transpose of the tables) is an op of its own
(``interpolate_grad``) whose adjoint is the forward: second derivatives come for free.
Adaptive pooling uses PyTorch's windows [floor(i L / O), ceil((i + 1) L / O)).
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any

import numpy as np

from ..function import Function, Sample, register
from ..kernels import broadcast_sum, strided_apply
from ..kernels import resample as K
from ..runtime.jit import POOL_PARALLEL_MIN, for_work
from ..tensor import Tensor, lift
from ._args import float_input, is_int
from .pool import MaxPool2dGrad, _max_pool2d_scatter

_MODES = ("nearest", "nearest-exact", "linear", "bilinear", "bicubic", "trilinear", "area")


def _sized(kernel, work: int):
    return for_work(kernel, work, POOL_PARALLEL_MIN)


def _planes(shape: tuple, spatial: int) -> tuple[int, int, int]:
    """(P, H, W): the planes of the last ``spatial`` (1 or 2) dims (1-D: H = 1)."""
    H = shape[-2] if spatial == 2 else 1
    return math.prod(shape[:-spatial]), H, shape[-1]


def _out_shape(shape: tuple, out: tuple) -> tuple:
    return tuple(shape[:-len(out)]) + tuple(out)


# -- interpolation tables -----------------------------------------------------------------
def _source(n_in: int, n_out: int, align_corners: bool, scale: float | None, dtype: str,
            cubic: bool) -> np.ndarray:
    """PyTorch's real source positions (area_pixel_compute_source_index) in ``dtype``;
    clamped at 0 except for cubic."""
    ft = np.dtype(dtype).type
    i = np.arange(n_out)
    if align_corners:
        ratio = ft(n_in - 1) / ft(n_out - 1) if n_out > 1 else ft(0)
        return (ratio * i.astype(dtype)).astype(dtype)
    ratio = ft(1.0 / scale) if scale is not None and scale > 0 else ft(n_in) / ft(n_out)
    real = (ratio * (i.astype(dtype) + ft(0.5)) - ft(0.5)).astype(dtype)
    return real if cubic else np.where(real < 0, ft(0), real).astype(dtype)


def _cubic_weights(t: np.ndarray) -> np.ndarray:
    """PyTorch's get_cubic_upsample_coefficients (A = -0.75) in t's float type: the
    weights [n, 4] of the taps floor - 1 .. floor + 2 at fraction t. As written in C++;
    PyTorch's AVX2/AVX512 builds contract some multiply-adds (the source index, a step of
    ``far``) into FMAs: their weights differ from these by a few ulps."""
    ft = t.dtype.type
    a = ft(-0.75)

    def near(x):  # |x| <= 1: ((A + 2) x - (A + 3)) x^2 + 1
        return ((a + ft(2)) * x - (a + ft(3))) * x * x + ft(1)

    def far(x):  # 1 < |x| < 2: ((A x - 5 A) x + 8 A) x - 4 A
        return ((a * x - ft(5) * a) * x + ft(8) * a) * x - ft(4) * a

    s = ft(1) - t
    return np.stack([far(t + ft(1)), near(t), near(s), far(s + ft(1))], axis=1).astype(t.dtype)


@functools.lru_cache(maxsize=256)
def _axis_taps(mode: str, n_in: int, n_out: int, align_corners: bool, scale: float | None,
               dtype: str, copy_equal: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(index, weight)[n_out, taps] for one axis, with PyTorch's CPU rounding.
    ``copy_equal``: 'nearest' ignores a given scale on an axis of n_out == n_in or 2 n_in
    (the ratio n_in / n_out: a copy, a doubling), as PyTorch's 2-D kernel does (its 1-D and
    3-D ones, and 'nearest-exact', use the scale)."""
    ft = np.dtype(dtype).type
    i = np.arange(n_out)
    if mode == "nearest" and copy_equal and n_out in (n_in, 2 * n_in):
        scale = None
    if mode in ("nearest", "nearest-exact"):
        f32 = np.float32
        ratio = (f32(1.0 / scale) if scale is not None and scale > 0
                 else f32(n_in) / f32(n_out))
        if mode == "nearest":
            src = np.floor(i.astype(f32) * ratio)
        else:  # (i + 0.5) in double times the float ratio, rounded to float by floorf
            src = np.floor(((i + 0.5) * np.float64(ratio)).astype(f32))
        index = np.minimum(src.astype(np.int64), n_in - 1)
        return index[:, None].copy(), np.ones((n_out, 1), dtype)
    cubic = mode == "bicubic"
    if n_out == n_in and not cubic:  # PyTorch copies: both taps on i, weights (1, 0)
        index = np.stack([i, i], axis=1)
        return index, np.array([[1, 0]], dtype).repeat(n_out, axis=0)
    real = _source(n_in, n_out, align_corners, scale, dtype, cubic)
    # guard_index_and_lambda: floorf (in float32 even for double), the fraction in [0, 1]
    i0 = np.minimum(np.floor(real.astype(np.float32)).astype(np.int64), n_in - 1)
    lam1 = np.minimum(np.maximum(real - i0.astype(dtype), ft(0)), ft(1)).astype(dtype)
    if cubic:  # 4 taps floor - 1 .. floor + 2, each access index clamped to [0, n_in - 1]
        index = np.clip(i0[:, None] + np.arange(-1, 3), 0, n_in - 1)
        return index, _cubic_weights(lam1)
    i1 = i0 + (i0 < n_in - 1)
    return np.stack([i0, i1], axis=1), np.stack([ft(1) - lam1, lam1], axis=1).astype(dtype)


def _tables(mode: str, in_size: tuple, out_size: tuple, scales: tuple, align_corners: bool,
            dtype: np.dtype, copy_equal: bool) -> tuple:
    """(ih, wh, iw, ww) for the planes of ``_planes``: 1-D gets a one-row H table."""
    taps = [_axis_taps(mode, n, o, align_corners, s, dtype.str, copy_equal)
            for n, o, s in zip(in_size, out_size, scales)]
    if len(taps) == 1:
        taps.insert(0, (np.zeros((1, 1), np.int64), np.ones((1, 1), dtype)))
    (ih, wh), (iw, ww) = taps
    return ih, wh, iw, ww


def _identity_taps(m: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    return np.arange(m)[:, None], np.ones((m, 1), dtype)


def _interp(x: np.ndarray, mode, out_size, scales, align_corners,
            copy_equal: bool = True) -> np.ndarray:
    spatial = len(out_size)
    if spatial == 3:  # (H, W) on the [N*D, H, W] planes, then D on [N, D, OH*OW]
        D, H, W = x.shape[-3:]
        N = math.prod(x.shape[:-3])
        y = _interp(np.ascontiguousarray(x).reshape(N * D, H, W), mode, out_size[1:],
                    scales[1:], align_corners, copy_equal=False)
        m = out_size[1] * out_size[2]
        tabs = (*_axis_taps(mode, D, out_size[0], align_corners, scales[0], x.dtype.str),
                *_identity_taps(m, x.dtype))
        y = _sized(K.separable_forward, N * out_size[0] * m)(y.reshape(N, D, m), *tabs)
        return y.reshape(_out_shape(x.shape, out_size))
    P, H, W = _planes(x.shape, spatial)
    tabs = _tables(mode, x.shape[-spatial:], out_size, scales, align_corners, x.dtype,
                   copy_equal and spatial == 2)
    y = _sized(K.separable_forward, P * tabs[0].shape[0] * tabs[2].shape[0])(
        np.ascontiguousarray(x).reshape(P, H, W), *tabs)
    return y.reshape(_out_shape(x.shape, out_size))


def _interp_adjoint(g: np.ndarray, mode, out_size, scales, align_corners,
                    x_shape: tuple, copy_equal: bool = True) -> np.ndarray:
    spatial = len(out_size)
    if spatial == 3:  # the transpose of _interp's two passes, in reverse order
        D, H, W = x_shape[-3:]
        N = math.prod(x_shape[:-3])
        m = out_size[1] * out_size[2]
        tabs = (*_axis_taps(mode, D, out_size[0], align_corners, scales[0], g.dtype.str),
                *_identity_taps(m, g.dtype))
        gd = _sized(K.separable_adjoint, N * D * m)(
            np.ascontiguousarray(g).reshape(N, out_size[0], m), *tabs, D, m)
        dx = _interp_adjoint(gd.reshape(N * D, *out_size[1:]), mode, out_size[1:],
                             scales[1:], align_corners, (N * D, H, W), copy_equal=False)
        return dx.reshape(x_shape)
    P, H, W = _planes(x_shape, spatial)
    tabs = _tables(mode, x_shape[-spatial:], out_size, scales, align_corners, g.dtype,
                   copy_equal and spatial == 2)
    g3 = np.ascontiguousarray(g).reshape(P, tabs[0].shape[0], tabs[2].shape[0])
    runs = _nearest_runs(mode, tuple(x_shape[-spatial:]), tuple(out_size), tuple(scales),
                         g.dtype.str, copy_equal and spatial == 2) \
        if mode in ("nearest", "nearest-exact") else None
    if runs is not None:
        return _sized(K.nearest_adjoint, P * H * W)(g3, *runs, W).reshape(x_shape)
    return _sized(K.separable_adjoint, P * H * W)(g3, *tabs, H, W).reshape(x_shape)


@functools.lru_cache(maxsize=256)
def _nearest_runs(mode: str, in_size: tuple, out_size: tuple, scales: tuple, dtype: str,
                  copy_equal: bool) -> tuple | None:
    """(row starts, row stops, r): ``nearest_adjoint``'s arguments for a nearest mode
    whose column taps have an integer factor r, else None. Kept per arguments, as the
    taps are: working them out costs a few microseconds a backward. (The nearest taps do
    not depend on align_corners.)"""
    ih, _, iw, _ = _tables(mode, in_size, out_size, scales, False, np.dtype(dtype),
                           copy_equal)
    r = _column_factor(iw, in_size[-1])
    return None if r is None else (*_row_runs(ih, in_size[-2] if len(in_size) == 2 else 1),
                                   r)


def _column_factor(iw: np.ndarray, W: int) -> int | None:
    """r where nearest's column taps send output column ow to input column ow // r (each
    input column takes r consecutive output columns: an integer factor), else None."""
    r = iw.shape[0] // W
    if r < 1 or r * W != iw.shape[0] or not np.array_equal(iw[:, 0], np.arange(r * W) // r):
        return None
    return r


def _row_runs(ih: np.ndarray, H: int) -> tuple[np.ndarray, np.ndarray]:
    """(start, stop)[H]: the output rows that nearest's row taps send to input row h, a
    run since the taps never decrease (empty where a downsampling skips h)."""
    rows = np.arange(H)
    return (np.searchsorted(ih[:, 0], rows, "left"), np.searchsorted(ih[:, 0], rows, "right"))


def _interp_samples(rng):
    def s(shape, mode, out, scales=None, align=False, label=""):
        scales = scales or (None,) * len(out)
        return Sample(rng.standard_normal(shape), mode=mode, out_size=out, scales=scales,
                      align_corners=align, label=label)

    yield s((2, 3, 5), "linear", (8,), label="linear 5->8")
    yield s((1, 2, 7), "linear", (3,), align=True, label="linear down, align_corners")
    yield s((2, 2, 3, 4), "bilinear", (5, 7), label="bilinear up")
    yield s((1, 2, 6, 5), "bilinear", (4, 9), align=True, label="bilinear, align_corners")
    yield s((1, 2, 4, 3), "bilinear", (6, 4), scales=(1.6, 1.5), label="given scales")
    yield s((2, 2, 3, 4), "nearest", (7, 5), label="nearest")
    yield s((1, 3, 5), "nearest-exact", (3,), label="nearest-exact down")
    yield s((1, 2, 4, 3), "nearest", (4, 5), scales=(1.1, 1.7), label="nearest, H copied")
    yield s((2, 2, 4, 5), "bicubic", (7, 3), label="bicubic")
    yield s((1, 2, 5, 3), "bicubic", (3, 6), align=True, label="bicubic, align_corners")
    yield s((1, 1, 3, 4), "bicubic", (5, 4), scales=(1.7, 1.1), label="bicubic, scales")
    yield s((1, 2, 3, 4, 2), "trilinear", (5, 3, 4), label="trilinear")
    yield s((1, 1, 2, 3, 4), "trilinear", (3, 5, 2), align=True, label="trilinear, align")
    yield s((2, 1, 3, 2, 4), "nearest", (4, 5, 3), label="nearest 3-D")


@register("interpolate", samples=_interp_samples)
class Interpolate(Function):
    """y = A x for the interpolation matrix A of (mode, sizes, scales, align_corners)."""

    @staticmethod
    def forward(ctx, x, mode, out_size, scales, align_corners):
        ctx.input_shape = x.shape
        return _interp(x, mode, out_size, scales, align_corners)

    @staticmethod
    def backward(ctx, g):
        return _interp_adjoint(g, x_shape=ctx.input_shape, **ctx.params)

    @staticmethod
    def vjp(ctx, g):
        return InterpolateGrad.apply(g, x_shape=ctx.input_shape, **ctx.params)


def _interp_grad_samples(rng):
    for s in _interp_samples(rng):
        x = s.inputs[0]
        g_shape = _out_shape(x.shape, s.params["out_size"])
        yield Sample(rng.standard_normal(g_shape), x_shape=x.shape, label=s.label, **s.params)


@register("interpolate_grad", samples=_interp_grad_samples)
class InterpolateGrad(Function):
    """interpolate's backward, dx = A^T g, as an op; its adjoint is interpolate."""

    @staticmethod
    def forward(ctx, g, mode, out_size, scales, align_corners, x_shape):
        ctx.input_shape = g.shape
        return _interp_adjoint(g, mode, out_size, scales, align_corners, x_shape)

    @staticmethod
    def backward(ctx, h):
        p = ctx.params
        return _interp(h, p["mode"], p["out_size"], p["scales"], p["align_corners"])

    @staticmethod
    def vjp(ctx, h):
        p = dict(ctx.params)
        del p["x_shape"]
        return Interpolate.apply(h, **p)


# -- interpolate: arguments -----------------------------------------------------------------
def _spatial_sizes(op: str, name: str, value: Any, dim: int, shape: tuple, kind: type) -> list:
    items = list(value) if isinstance(value, tuple | list) else [value] * dim
    if isinstance(value, tuple | list) and len(items) != dim:
        raise ValueError(
            f"{op}: input and output must have the same number of spatial dimensions, but "
            f"got input with spatial dimensions of {list(shape[2:])} and {name} {value!r}")
    ok = is_int if kind is int else (lambda v: isinstance(v, int | float | np.integer
                                                         | np.floating)
                                     and not isinstance(v, bool))
    if not all(ok(v) for v in items):
        raise TypeError(f"{op}: {name} must be {'an int' if kind is int else 'a float'} or "
                        f"a tuple of them, got {value!r}")
    return [kind(v) for v in items]


def interpolate(input, size: int | tuple | None = None,
                scale_factor: float | tuple | None = None, mode: str = "nearest",
                align_corners: bool | None = None, recompute_scale_factor: bool | None = None,
                antialias: bool = False) -> Tensor:
    """Resize [N, C, L], [N, C, H, W] or [N, C, D, H, W], as
    ``torch.nn.functional.interpolate``.

    Output size ``size``, or floor(in * scale_factor) per axis. Output position o reads
    source position s = (o + 0.5) r - 0.5 (clamped at 0 except for bicubic), r = 1 /
    scale_factor when a scale is given and ``recompute_scale_factor`` is not True, else
    in / out; with ``align_corners`` s = o (in - 1) / (out - 1). 'linear'/'bilinear'/
    'trilinear' weight the two neighbours of s per axis; 'bicubic' the four taps
    floor(s) - 1 .. floor(s) + 2 (clamped to [0, in - 1]) with the cubic convolution
    weights of A = -0.75 at t = s - floor(s); 'nearest' takes floor(o r), 'nearest-exact'
    floor((o + 0.5) r) (both clamped to in - 1); 'area' is adaptive average pooling.
    Also [N, C, D, H, W] for 'nearest', 'nearest-exact', 'trilinear' and 'area'.
    Not supported: ``antialias=True``.
    """
    op = "interpolate"
    x = float_input(op, input, "input")
    if mode not in _MODES:
        raise NotImplementedError(f"{op}: mode {mode!r} is not one of {', '.join(_MODES)}")
    if mode in ("nearest", "area", "nearest-exact"):
        if align_corners is not None:
            raise ValueError(f"{op}: align_corners option can only be set with the "
                             f"interpolating modes: linear | bilinear | bicubic | trilinear "
                             f"(got mode={mode!r}, align_corners={align_corners!r})")
    else:
        align_corners = bool(align_corners) if align_corners is not None else False
    dim = x.ndim - 2
    if size is not None and scale_factor is not None:
        raise ValueError(f"{op}: only one of size or scale_factor should be defined "
                         f"(got size={size!r}, scale_factor={scale_factor!r})")
    if size is None and scale_factor is None:
        raise ValueError(f"{op}: either size or scale_factor should be defined")
    if x.ndim not in (3, 4, 5):
        raise NotImplementedError(
            f"{op}: only 3-D [N, C, L], 4-D [N, C, H, W] and 5-D [N, C, D, H, W] inputs are "
            f"supported, got input of shape {x.shape} ({x.ndim}-D) for mode {mode!r}")
    need = {"linear": 3, "bilinear": 4, "trilinear": 5, "bicubic": 4}.get(mode)
    if need is not None and need != x.ndim:
        raise NotImplementedError(f"{op}: got {x.ndim}D input (shape {x.shape}), but {mode} "
                                  f"mode needs {need}D input")
    if antialias:
        if mode not in ("bilinear", "bicubic"):
            raise ValueError(f"{op}: anti-alias option is restricted to bilinear and bicubic "
                             f"modes and requires a 4-D tensor as input (got mode={mode!r})")
        raise NotImplementedError(f"{op}: antialias=True is not supported by nbgrad")
    in_size = tuple(x.shape[2:])
    if size is not None:
        out = _spatial_sizes(op, "output size", size, dim, x.shape, int)
        scales = [None] * dim
        if recompute_scale_factor:
            raise ValueError(f"{op}: recompute_scale_factor is not meaningful with an "
                             f"explicit size (size={size!r})")
    else:
        scales = _spatial_sizes(op, "scale_factor", scale_factor, dim, x.shape, float)
        out = [math.floor(float(n) * s) for n, s in zip(in_size, scales)]
        if recompute_scale_factor or mode == "area":
            scales = [None] * dim
    if min(out) <= 0 or min(in_size) <= 0:
        raise ValueError(f"{op}: input and output sizes should be greater than 0, but got "
                         f"input {in_size} and output {tuple(out)} (input shape {x.shape}, "
                         f"size={size!r}, scale_factor={scale_factor!r})")
    if mode == "area":
        return AdaptiveAvgPool.apply(x, out_size=tuple(out))
    return Interpolate.apply(x, mode=mode, out_size=tuple(out), scales=tuple(scales),
                             align_corners=bool(align_corners))


def upsample(input, size: int | tuple | None = None, scale_factor: float | tuple | None = None,
             mode: str = "nearest", align_corners: bool | None = None) -> Tensor:
    """Deprecated alias of ``interpolate`` (as ``torch.nn.functional.upsample``)."""
    warnings.warn("nn.functional.upsample is deprecated. Use nn.functional.interpolate "
                  "instead.", stacklevel=2)
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size: int | tuple | None = None,
                     scale_factor: float | tuple | None = None) -> Tensor:
    """Deprecated: ``interpolate(input, size, scale_factor, mode='nearest')``."""
    warnings.warn("nn.functional.upsample_nearest is deprecated. Use "
                  "nn.functional.interpolate instead.", stacklevel=2)
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size: int | tuple | None = None,
                      scale_factor: float | tuple | None = None) -> Tensor:
    """Deprecated: ``interpolate(input, size, scale_factor, mode='bilinear',
    align_corners=True)``."""
    warnings.warn("nn.functional.upsample_bilinear is deprecated. Use "
                  "nn.functional.interpolate instead.", stacklevel=2)
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


# -- adaptive pooling -----------------------------------------------------------------------
@functools.lru_cache(maxsize=256)
def _windows(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
    """PyTorch's adaptive windows [floor(i n_in / n_out), ceil((i + 1) n_in / n_out))."""
    i = np.arange(n_out, dtype=np.int64)
    return (i * n_in) // n_out, ((i + 1) * n_in + n_out - 1) // n_out


def _window_tables(in_size: tuple, out_size: tuple) -> tuple:
    if len(in_size) == 1:
        in_size, out_size = (1,) + tuple(in_size), (1,) + tuple(out_size)
    return (*_windows(in_size[0], out_size[0]), *_windows(in_size[1], out_size[1]))


def _identity_windows(m: int) -> tuple[np.ndarray, np.ndarray]:
    return np.arange(m, dtype=np.int64), np.arange(1, m + 1, dtype=np.int64)


def _avg(x: np.ndarray, out_size: tuple) -> np.ndarray:
    spatial = len(out_size)
    if spatial == 3:  # (H, W) windows on the [N*D, H, W] planes, then D on [N, D, OH*OW]
        D, H, W = x.shape[-3:]
        N = math.prod(x.shape[:-3])
        m = out_size[1] * out_size[2]
        y = _avg(np.ascontiguousarray(x).reshape(N * D, H, W), out_size[1:])
        y = _sized(K.adaptive_avg_forward, N * D * m)(
            y.reshape(N, D, m), *_windows(D, out_size[0]), *_identity_windows(m))
        return y.reshape(_out_shape(x.shape, out_size))
    P, H, W = _planes(x.shape, spatial)
    if all(o == 1 for o in out_size):  # global pooling: the mean of each plane (sum's kernel)
        planes = np.ascontiguousarray(x).reshape(P, H * W)
        y = broadcast_sum.reduce_term(strided_apply.COPY, planes, None, (P, 1), 1.0 / (H * W),
                                      planes.shape)
        return y.reshape(_out_shape(x.shape, out_size))
    y = _sized(K.adaptive_avg_forward, x.size)(
        np.ascontiguousarray(x).reshape(P, H, W),
        *_window_tables(x.shape[-spatial:], out_size))
    return y.reshape(_out_shape(x.shape, out_size))


def _avg_adjoint(g: np.ndarray, out_size: tuple, x_shape: tuple) -> np.ndarray:
    spatial = len(out_size)
    if spatial == 3:  # the transpose of _avg's two passes, in reverse order
        D, H, W = x_shape[-3:]
        N = math.prod(x_shape[:-3])
        m = out_size[1] * out_size[2]
        gd = _sized(K.adaptive_avg_adjoint, N * D * m)(
            np.ascontiguousarray(g).reshape(N, out_size[0], m), *_windows(D, out_size[0]),
            *_identity_windows(m), D, m)
        dx = _avg_adjoint(gd.reshape(N * D, *out_size[1:]), out_size[1:], (N * D, H, W))
        return dx.reshape(x_shape)
    P, H, W = _planes(x_shape, spatial)
    if all(o == 1 for o in out_size):
        ft = g.dtype.type
        v = np.ascontiguousarray(g).reshape(P, 1) / ft(H) / ft(W)
        return np.broadcast_to(v, (P, H * W)).reshape(x_shape)  # reshape copies
    g3 = np.ascontiguousarray(g).reshape((P,) + ((1,) if spatial == 1 else ()) + out_size)
    dx = _sized(K.adaptive_avg_adjoint, P * H * W)(
        g3, *_window_tables(x_shape[-spatial:], out_size), H, W)
    return dx.reshape(x_shape)


def _avg_samples(rng):
    yield Sample(rng.standard_normal((2, 3, 7, 5)), out_size=(3, 4), label="overlapping")
    yield Sample(rng.standard_normal((2, 4, 6)), out_size=(1, 1), label="unbatched global")
    yield Sample(rng.standard_normal((2, 3, 10)), out_size=(4,), label="1-D")
    yield Sample(rng.standard_normal((1, 2, 3, 4)), out_size=(5, 6), label="out > in")
    yield Sample(rng.standard_normal((1, 2, 5, 3, 4)), out_size=(3, 2, 5), label="3-D")


@register("adaptive_avg_pool2d", samples=_avg_samples)
class AdaptiveAvgPool(Function):
    """Adaptive average pooling over the last len(out_size) (1, 2 or 3) dims."""

    @staticmethod
    def forward(ctx, x, out_size):
        ctx.input_shape = x.shape
        return _avg(x, out_size)

    @staticmethod
    def backward(ctx, g):
        return _avg_adjoint(g, ctx.params["out_size"], ctx.input_shape)

    @staticmethod
    def vjp(ctx, g):
        return AdaptiveAvgPoolGrad.apply(g, out_size=ctx.params["out_size"],
                                         x_shape=ctx.input_shape)


def _avg_grad_samples(rng):
    for s in _avg_samples(rng):
        x, out = s.inputs[0], s.params["out_size"]
        yield Sample(rng.standard_normal(_out_shape(x.shape, out)), out_size=out,
                     x_shape=x.shape, label=s.label)


@register("adaptive_avg_pool2d_grad", samples=_avg_grad_samples)
class AdaptiveAvgPoolGrad(Function):
    """Adaptive average pooling's backward as an op; its adjoint is the pooling."""

    @staticmethod
    def forward(ctx, g, out_size, x_shape):
        ctx.input_shape = g.shape
        return _avg_adjoint(g, out_size, x_shape)

    @staticmethod
    def backward(ctx, h):
        return _avg(h, ctx.params["out_size"])

    @staticmethod
    def vjp(ctx, h):
        return AdaptiveAvgPool.apply(h, out_size=ctx.params["out_size"])


def _max_samples(rng):
    def distinct(shape):
        return rng.permutation(math.prod(shape)).reshape(shape) / 7.0

    yield Sample(distinct((2, 3, 7, 5)), out_size=(3, 4), label="overlapping")
    yield Sample(distinct((2, 5, 6)), out_size=(2, 2), label="unbatched")
    yield Sample(distinct((2, 3, 9)), out_size=(4,), label="1-D")


@register("adaptive_max_pool2d", samples=_max_samples)
class AdaptiveMaxPool(Function):
    """Adaptive max pooling; the gradient goes to each window's selected position, routed
    by max_pool2d's scatter (whose adjoint gathers)."""

    @staticmethod
    def forward(ctx, x, out_size, indices_out=None):
        ctx.input_shape = x.shape
        spatial = len(out_size)
        P, H, W = _planes(x.shape, spatial)
        y, idx = _sized(K.adaptive_max_forward, x.size)(
            np.ascontiguousarray(x).reshape(P, H, W),
            *_window_tables(x.shape[-spatial:], out_size))
        ctx.save_for_backward(idx)
        if indices_out is not None:
            indices_out.append(idx)
        return y.reshape(_out_shape(x.shape, out_size))

    @staticmethod
    def backward(ctx, g):
        (idx,) = ctx.saved_tensors
        P, H, W = _planes(ctx.input_shape, len(ctx.params["out_size"]))
        g4 = np.ascontiguousarray(g).reshape((1,) + idx.shape)
        return _max_pool2d_scatter(g4, idx[None], (1, P, H, W)).reshape(ctx.input_shape)

    @staticmethod
    def vjp(ctx, g):
        (idx,) = ctx.saved_tensors
        P, H, W = _planes(ctx.input_shape, len(ctx.params["out_size"]))
        dx = MaxPool2dGrad.apply(g.reshape((1,) + idx.shape), idx=idx[None],
                                 x_shape=(1, P, H, W))
        return dx.reshape(ctx.input_shape)


def _output_size(op: str, output_size: Any, x: Tensor, spatial: int) -> tuple:
    """``output_size`` as a ``spatial``-tuple of ints >= 0, None entries taking the
    input's size."""
    items = (list(output_size) if isinstance(output_size, tuple | list)
             else [output_size] * spatial)
    if len(items) != spatial:
        raise ValueError(f"{op}: output_size must have {spatial} element(s), got "
                         f"{output_size!r} (input shape {x.shape})")
    out = tuple(x.shape[-spatial + k] if v is None else v for k, v in enumerate(items))
    if not all(is_int(v) for v in out):
        raise TypeError(f"{op}: output_size must be an int or a tuple of ints or None, got "
                        f"{output_size!r}")
    if min(out) < 0:
        raise ValueError(f"{op}: elements of output_size must be greater than or equal to 0 "
                         f"but received {output_size!r} (input shape {x.shape})")
    return tuple(int(v) for v in out)


def _pool_input(op: str, input: Any, spatial: int) -> Tensor:
    x = float_input(op, input, "input")
    if x.ndim not in (spatial + 1, spatial + 2):
        raise ValueError(f"{op}: expected {spatial + 1}-D or {spatial + 2}-D input, but got "
                         f"input of shape {x.shape}")
    if 0 in x.shape[1:]:
        raise ValueError(f"{op}: expected input to have non-zero size for non-batch "
                         f"dimensions, but input has shape {x.shape}")
    return x


def adaptive_avg_pool1d(input, output_size: int | tuple) -> Tensor:
    """Adaptive average pooling of [N, C, L] or [C, L] to length ``output_size``, as
    ``torch.nn.functional.adaptive_avg_pool1d``: y[i] = mean of x[floor(i L / O) :
    ceil((i + 1) L / O)]."""
    x = _pool_input("adaptive_avg_pool1d", input, 1)
    return AdaptiveAvgPool.apply(x, out_size=_output_size("adaptive_avg_pool1d", output_size,
                                                          x, 1))


def adaptive_avg_pool2d(input, output_size: int | tuple) -> Tensor:
    """Adaptive average pooling of [N, C, H, W] or [C, H, W] to ``output_size`` (an int or
    a pair; None keeps the input's size), as ``torch.nn.functional.adaptive_avg_pool2d``:
    windows [floor(i H / OH), ceil((i + 1) H / OH)) per axis."""
    x = _pool_input("adaptive_avg_pool2d", input, 2)
    return AdaptiveAvgPool.apply(x, out_size=_output_size("adaptive_avg_pool2d", output_size,
                                                          x, 2))


def adaptive_avg_pool3d(input, output_size: int | tuple) -> Tensor:
    """Adaptive average pooling of [N, C, D, H, W] or [C, D, H, W] to ``output_size`` (an
    int or a triple; None keeps the input's size), as
    ``torch.nn.functional.adaptive_avg_pool3d``: windows [floor(i L / O), ceil((i + 1) L /
    O)) per axis (pooled over (H, W), then over D)."""
    x = _pool_input("adaptive_avg_pool3d", input, 3)
    return AdaptiveAvgPool.apply(x, out_size=_output_size("adaptive_avg_pool3d", output_size,
                                                          x, 3))


def _adaptive_max(op: str, input: Any, output_size: Any, return_indices: bool,
                  spatial: int) -> Tensor | tuple[Tensor, Tensor]:
    x = _pool_input(op, input, spatial)
    out = _output_size(op, output_size, x, spatial)
    if not return_indices:
        return AdaptiveMaxPool.apply(x, out_size=out)
    indices: list = []
    y = AdaptiveMaxPool.apply(x, out_size=out, indices_out=indices)
    return y, Tensor._wrap(indices[0].reshape(y.shape).copy(), None, 0)


def adaptive_max_pool1d(input, output_size: int | tuple,
                        return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """Adaptive max pooling of [N, C, L] or [C, L], as
    ``torch.nn.functional.adaptive_max_pool1d`` (indices: positions along L)."""
    return _adaptive_max("adaptive_max_pool1d", input, output_size, return_indices, 1)


def adaptive_max_pool2d(input, output_size: int | tuple,
                        return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """Adaptive max pooling of [N, C, H, W] or [C, H, W], as
    ``torch.nn.functional.adaptive_max_pool2d``: each window's maximum (the first in
    row-major order; a NaN wins), with ``return_indices`` also its flat position i W + j
    in the plane (int64)."""
    return _adaptive_max("adaptive_max_pool2d", input, output_size, return_indices, 2)


# -- pixel shuffle --------------------------------------------------------------------------
def _factor(op: str, name: str, value: Any) -> int:
    if not is_int(value):
        raise TypeError(f"{op}: {name} must be an int, got {value!r}")
    if value <= 0:
        raise ValueError(f"{op}: expects a positive {name}, but got {value}")
    return int(value)


def pixel_shuffle(input, upscale_factor: int) -> Tensor:
    """[*, C r^2, H, W] -> [*, C, H r, W r], y[c, h r + i, w r + j] = x[c r^2 + i r + j, h,
    w], as ``torch.nn.functional.pixel_shuffle``."""
    op = "pixel_shuffle"
    x = lift(input)
    r = _factor(op, "upscale_factor", upscale_factor)
    if x.ndim < 3:
        raise ValueError(f"{op}: expects input to have at least 3 dimensions, but got input "
                         f"of shape {x.shape}")
    *batch, c, h, w = x.shape
    if c % (r * r):
        raise ValueError(f"{op}: expects its input's 'channel' dimension to be divisible by "
                         f"the square of upscale_factor, but input.size(-3)={c} is not "
                         f"divisible by {r * r} (input shape {x.shape})")
    b = len(batch)
    y = x.reshape(*batch, c // (r * r), r, r, h, w)
    y = y.permute(*range(b), b, b + 3, b + 1, b + 4, b + 2)
    return y.reshape(*batch, c // (r * r), h * r, w * r)


def pixel_unshuffle(input, downscale_factor: int) -> Tensor:
    """[*, C, H r, W r] -> [*, C r^2, H, W], the inverse of ``pixel_shuffle``, as
    ``torch.nn.functional.pixel_unshuffle``."""
    op = "pixel_unshuffle"
    x = lift(input)
    r = _factor(op, "downscale_factor", downscale_factor)
    if x.ndim < 3:
        raise ValueError(f"{op}: expects input to have at least 3 dimensions, but got input "
                         f"of shape {x.shape}")
    *batch, c, h, w = x.shape
    if h % r or w % r:
        raise ValueError(f"{op}: expects height and width to be divisible by "
                         f"downscale_factor={r}, got input of shape {x.shape}")
    b = len(batch)
    y = x.reshape(*batch, c, h // r, r, w // r, r)
    y = y.permute(*range(b), b, b + 2, b + 4, b + 1, b + 3)
    return y.reshape(*batch, c * r * r, h // r, w // r)


# torch's top-level names among these; the rest are nbgrad.nn.functional's
__all__ = ["adaptive_avg_pool1d", "adaptive_max_pool1d", "pixel_shuffle", "pixel_unshuffle"]
