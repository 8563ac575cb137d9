"""2-D pooling: max_pool2d and avg_pool2d (PyTorch semantics, NCHW, ceil_mode,
max_pool2d's return_indices, avg_pool2d's count_include_pad and divisor_override), and
their 1-D forms max_pool1d and avg_pool1d (the 2-D ops over x[N, C, 1, L]).

Their backwards are linear maps of g, registered as ops of their own so that the vjps are
differentiable again: max_pool2d_grad (g scattered to the selected positions; its adjoint
gathers there) and avg_pool2d_grad (g spread over the windows; its adjoint is avg_pool2d).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..function import Function, Sample, register
from ..kernels import pool as pool_kernels
from ..runtime.jit import POOL_PARALLEL_MIN, for_work
from ..tensor import Tensor, lift
from ._args import float_operands, int_tuple, is_int
from .conv import IntPair, _check_rank, _contig
from .shape import squeeze, unsqueeze


def _out_len(size: int, kernel: int, stride: int, pad: int, dilation: int,
             ceil_mode: bool) -> int:
    """PyTorch's number of windows along one axis:
    floor_or_ceil((size + 2 pad - dilation (kernel - 1) - 1) / stride) + 1, and with
    ceil_mode one less if the last window would start in the right padding, i.e. if
    (out - 1) stride >= size + pad (every window starts inside x or its left padding)."""
    span = size + 2 * pad - dilation * (kernel - 1) - 1
    out = (span + (stride - 1 if ceil_mode else 0)) // stride + 1  # // floors, as div_rtn
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def _empty(value: Any) -> bool:
    """Whether a stride is PyTorch's ``()``/``[]``, which means the kernel size."""
    return isinstance(value, tuple | list) and len(value) == 0


def _pair(op: str, name: str, value: Any, minimum: int) -> tuple[int, int]:
    """A 2-D pooling parameter as a pair: an int, a pair, or (as PyTorch) a 1-tuple
    standing for both dims."""
    if isinstance(value, tuple | list) and len(value) == 1:
        value = tuple(value) * 2
    return int_tuple(op, name, value, 2, minimum)


def _pool_params(op: str, shape: tuple, kernel_size, stride, padding, dilation,
                 ceil_mode: bool = False) -> dict:
    """Validated (kernel, stride, padding, dilation, out_hw) as pairs (an int or a
    1-tuple stands for both dims; ``stride`` None or ``()`` is the kernel size, as in
    PyTorch); ``ceil_mode`` only changes out_hw (the kernels clip the windows it adds)."""
    kernel = _pair(op, "kernel_size", kernel_size, 1)
    stride = kernel if stride is None or _empty(stride) else _pair(op, "stride", stride, 1)
    pad = _pair(op, "padding", padding, 0)
    dilation = _pair(op, "dilation", dilation, 1)
    if pad[0] > kernel[0] // 2 or pad[1] > kernel[1] // 2:
        raise ValueError(f"{op}: padding {pad} must be at most half the kernel size {kernel}")
    size = tuple(shape[-2:])
    out_hw = tuple(_out_len(*a, bool(ceil_mode))
                   for a in zip(size, kernel, stride, pad, dilation))
    if min(out_hw) < 1:
        extent = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilation))
        padded = tuple(n + 2 * p for n, p in zip(size, pad))
        raise ValueError(f"{op}: the dilated kernel {extent} is larger than the padded input "
                         f"{padded} (input {size}, padding {pad}, stride {stride}, "
                         f"ceil_mode={bool(ceil_mode)}): the output size {out_hw} is below 1")
    return dict(kernel=kernel, stride=stride, padding=pad, dilation=dilation, out_hw=out_hw)


def _check_input(op: str, x: Tensor) -> None:
    float_operands(op, x=x)
    _check_rank(op, "x", x, (3, 4), "[N, C, H, W] or unbatched [C, H, W]")
    if 0 in x.shape[-3:]:
        raise ValueError(f"{op}: x must have channels, rows and columns (only the batch may "
                         f"be empty), got shape {x.shape}")


def _batched(x: np.ndarray) -> np.ndarray:
    return _contig(x[None] if x.ndim == 3 else x)


def _sized(kernel, work: int):
    """The pooling kernel's parallel form for ``work`` (elements of x read, forward, or
    of dx written, backward) at or above POOL_PARALLEL_MIN, else its serial form."""
    return for_work(kernel, work, POOL_PARALLEL_MIN)


# -- max_pool2d ---------------------------------------------------------------------------
def _max_pool2d_samples(rng):
    # A permutation of distinct values: no ties, so finite differences are well defined.
    def distinct(shape):
        return rng.permutation(np.prod(shape)).reshape(shape) / 7.0

    yield Sample(distinct((2, 3, 6, 7)), label="2x2 stride 2 (fast path), odd width",
                 **_pool_params("max_pool2d", (2, 3, 6, 7), 2, None, 0, 1))
    yield Sample(distinct((1, 2, 7, 6)), label="3x2 overlapping, padding, dilation",
                 **_pool_params("max_pool2d", (1, 2, 7, 6), (3, 2), (2, 1), 1, (1, 2)))
    yield Sample(distinct((2, 5, 5)), label="unbatched",
                 **_pool_params("max_pool2d", (2, 5, 5), 3, 2, 1, 1))
    yield Sample(distinct((1, 2, 6, 7)), label="ceil_mode: last windows clipped",
                 **_pool_params("max_pool2d", (1, 2, 6, 7), 3, 2, 0, 1, ceil_mode=True))
    yield Sample(distinct((1, 2, 5, 3)), label="ceil_mode, kernel wider than x",
                 **_pool_params("max_pool2d", (1, 2, 5, 3), (2, 4), (2, 2), (1, 0), 1,
                                ceil_mode=True))


@register("max_pool2d", samples=_max_pool2d_samples)
class MaxPool2d(Function):
    """max_pool2d as an op: the window maxima y, and their flat positions idx, saved to
    route the gradient. ``indices_out`` (a list, given by ``max_pool2d(...,
    return_indices=True)``) receives idx, batched [N, C, OH, OW]."""

    @staticmethod
    def forward(ctx, x, kernel, stride, padding, dilation, out_hw, indices_out=None):
        ctx.input_shape = x.shape
        xb = _batched(x)
        if (kernel == (2, 2) and stride == (2, 2) and padding == (0, 0)
                and dilation == (1, 1) and out_hw == (xb.shape[2] // 2, xb.shape[3] // 2)):
            y, idx = _sized(pool_kernels.max_pool2d_2x2_forward, xb.size)(xb)
        else:
            y, idx = _sized(pool_kernels.max_pool2d_forward, xb.size)(
                xb, *kernel, *stride, *padding, *dilation, *out_hw)
        ctx.save_for_backward(idx)
        if indices_out is not None:
            indices_out.append(idx)
        return y if x.ndim == 4 else y[0]

    @staticmethod
    def backward(ctx, g):
        return _max_pool2d_scatter(g, ctx.saved_tensors[0], ctx.input_shape)

    @staticmethod
    def vjp(ctx, g):
        (idx,) = ctx.saved_tensors
        return MaxPool2dGrad.apply(g, idx=idx, x_shape=ctx.input_shape)


def _max_pool2d_grad_samples(rng):
    def sample(x, label, **params):
        xb = _batched(x)
        p = _pool_params("max_pool2d", x.shape, **params)
        _, idx = pool_kernels.max_pool2d_forward(xb, *p["kernel"], *p["stride"], *p["padding"],
                                                 *p["dilation"], *p["out_hw"])
        g = rng.standard_normal(idx.shape if x.ndim == 4 else idx.shape[1:])
        return Sample(g, idx=idx, x_shape=x.shape, label=label)

    yield sample(rng.standard_normal((2, 3, 6, 7)), "2x2 stride 2", kernel_size=2,
                 stride=None, padding=0, dilation=1)
    yield sample(np.round(rng.standard_normal((1, 2, 7, 6))), "overlapping windows, ties",
                 kernel_size=(3, 2), stride=(2, 1), padding=1, dilation=(1, 2))
    yield sample(rng.standard_normal((2, 5, 5)), "unbatched", kernel_size=3, stride=2,
                 padding=1, dilation=1)
    yield sample(rng.standard_normal((1, 2, 2, 3)), "dilated windows that miss x (idx -1)",
                 kernel_size=2, stride=1, padding=1, dilation=(3, 1))
    yield sample(rng.standard_normal((1, 2, 6, 7)), "ceil_mode", kernel_size=3, stride=2,
                 padding=0, dilation=1, ceil_mode=True)


def _max_pool2d_scatter(g: np.ndarray, idx: np.ndarray, x_shape: tuple) -> np.ndarray:
    """max_pool2d's backward: g added at the selected flat positions idx of zero planes."""
    g = _batched(g)
    dx = np.empty(g.shape[:2] + (x_shape[-2] * x_shape[-1],), g.dtype)
    return _sized(pool_kernels.max_pool2d_backward, dx.size)(g, _contig(idx), dx).reshape(
        x_shape)


def _gather(h: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """h[n, c].flat[idx[n, c, i, j]] for batched 4-D h, 0 where idx is -1."""
    N, C = idx.shape[:2]
    out = np.take_along_axis(h.reshape(N, C, -1), np.maximum(idx, 0).reshape(N, C, -1),
                             axis=2).reshape(idx.shape)
    out[idx < 0] = 0
    return out


@register("max_pool2d_grad", samples=_max_pool2d_grad_samples)
class MaxPool2dGrad(Function):
    """max_pool2d's backward as an op: g[N, C, OH, OW] (or unbatched) added at the selected
    flat positions idx (-1: none) of zero planes of x_shape. Linear in g, with constant
    indices: its adjoint gathers h at idx (so max_pool2d's second derivative in x is 0)."""

    @staticmethod
    def forward(ctx, g, idx, x_shape):
        ctx.input_shape = g.shape
        return _max_pool2d_scatter(g, idx, x_shape)

    @staticmethod
    def backward(ctx, h):
        return _gather(_batched(h), ctx.params["idx"]).reshape(ctx.input_shape)

    @staticmethod
    def vjp(ctx, h):
        idx = ctx.params["idx"]
        N, C = idx.shape[:2]
        planes = h.reshape((N, C, -1))
        out = planes[np.arange(N)[:, None, None, None], np.arange(C)[None, :, None, None],
                     np.maximum(idx, 0)]
        if (idx < 0).any():
            out = out * lift((idx >= 0).astype(h.dtype))
        return out.reshape(ctx.input_shape)


def max_pool2d(x, kernel_size: IntPair, stride: IntPair | None = None, padding: IntPair = 0,
               dilation: IntPair = 1, ceil_mode: bool = False,
               return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """2-D max pooling, as ``torch.nn.functional.max_pool2d``.

    x[N, C, H, W] or [C, H, W]; y[n, c, i, j] = max over kh < KH, kw < KW of
    x[n, c, i*sh + kh*dh - ph, j*sw + kw*dw - pw], padding counting as -inf;
    H' = floor((H + 2ph - dh(KH-1) - 1) / sh) + 1, or with ``ceil_mode`` the ceiling,
    less one if the last window would start in the right padding (PyTorch's rule; the
    extra windows are clipped to x). ``stride`` defaults to ``kernel_size``; padding is
    at most half the kernel. The gradient of each output goes to one input: the first
    maximum of its window in row-major (kh, kw) order; a NaN in the window is the
    maximum, the last NaN taking the gradient (NaN propagates, as in PyTorch).

    With ``return_indices``, ``(y, indices)``: indices (int64, no gradient) are the flat
    positions ih*W + iw in each (n, c) plane of the inputs that gradient goes to, as
    PyTorch's. A window that dilation makes miss x entirely gives -inf and index -1
    (PyTorch gives an index past the window's last tap there).
    """
    x = lift(x)
    _check_input("max_pool2d", x)
    params = _pool_params("max_pool2d", x.shape, kernel_size, stride, padding, dilation,
                          ceil_mode)
    if not return_indices:
        return MaxPool2d.apply(x, **params)
    indices: list = []
    y = MaxPool2d.apply(x, indices_out=indices, **params)
    idx = indices[0] if x.ndim == 4 else indices[0][0]
    # A copy: the node keeps idx for the backward, which a caller's edit must not change.
    return y, Tensor._wrap(idx.copy(), None, 0)


# -- avg_pool2d ---------------------------------------------------------------------------
def _avg_geometry(kernel: tuple, stride: tuple, padding: tuple, count_include_pad: bool,
              divisor_override: int | None) -> tuple:
    """The kernels' window arguments: KH, KW, sh, sw, ph, pw, count_include_pad and
    divisor_override (0: none)."""
    return (*kernel, *stride, *padding, bool(count_include_pad),
            0 if divisor_override is None else int(divisor_override))


def _divisor_override(value) -> int | None:
    """None or a non-zero int, as PyTorch's avg_pool2d."""
    if value is None:
        return None
    if not is_int(value):
        raise TypeError(f"avg_pool2d: divisor_override must be None or an int, got {value!r}")
    if value == 0:
        raise ValueError("avg_pool2d: divisor_override must be non-zero, got 0")
    return int(value)


def _avg_pool2d_spread(g: np.ndarray, geometry: tuple, x_shape: tuple) -> np.ndarray:
    """avg_pool2d's backward: each window's g spread over the window (``geometry`` from
    ``_avg_geometry``)."""
    g = _batched(g)
    dx = np.empty(g.shape[:2] + tuple(x_shape[-2:]), g.dtype)
    return _sized(pool_kernels.avg_pool2d_backward, dx.size)(g, dx, *geometry).reshape(
        x_shape)


def _avg_pool2d_samples(rng):
    def sample(shape, label, kernel, stride, padding, include, ceil_mode=False,
               divisor_override=None):
        return Sample(rng.standard_normal(shape), label=label, count_include_pad=include,
                      divisor_override=divisor_override,
                      **_pool_params("avg_pool2d", shape, kernel, stride, padding, 1,
                                     ceil_mode))

    yield sample((2, 3, 6, 7), "2x2 stride 2", 2, None, 0, True)
    yield sample((1, 2, 7, 6), "3x2 overlapping, pad, excluded", (3, 2), (2, 1), 1, False)
    yield sample((2, 5, 5), "unbatched, pad counted", 3, 2, 1, True)
    yield sample((1, 2, 6, 7), "ceil_mode, pad counted: clipped divisors", 3, 2, 1, True,
                 ceil_mode=True)
    yield sample((1, 2, 5, 6), "ceil_mode, pad excluded", (2, 3), (2, 2), (1, 0), False,
                 ceil_mode=True)
    yield sample((1, 2, 5, 6), "ceil_mode, divisor_override", 3, 2, 1, False,
                 ceil_mode=True, divisor_override=5)


@register("avg_pool2d", samples=_avg_pool2d_samples)
class AvgPool2d(Function):
    @staticmethod
    def forward(ctx, x, kernel, stride, padding, dilation, out_hw, count_include_pad,
                divisor_override=None):
        ctx.input_shape = x.shape
        ctx.geometry = _avg_geometry(kernel, stride, padding, count_include_pad, divisor_override)
        KH, KW, sh, sw, ph, pw, include, divisor = ctx.geometry
        xb = _batched(x)
        y = _sized(pool_kernels.avg_pool2d_forward, xb.size)(xb, KH, KW, sh, sw, ph, pw,
                                                             *out_hw, include, divisor)
        return y if x.ndim == 4 else y[0]

    @staticmethod
    def backward(ctx, g):
        return _avg_pool2d_spread(g, ctx.geometry, ctx.input_shape)

    @staticmethod
    def vjp(ctx, g):
        p = ctx.params
        return AvgPool2dGrad.apply(g, kernel=p["kernel"], stride=p["stride"],
                                   padding=p["padding"],
                                   count_include_pad=bool(p["count_include_pad"]),
                                   divisor_override=p.get("divisor_override"),
                                   x_shape=ctx.input_shape)


def _avg_pool2d_grad_samples(rng):
    for s in _avg_pool2d_samples(rng):
        x, p = s.inputs[0], s.params
        g_shape = x.shape[:-2] + p["out_hw"]
        yield Sample(rng.standard_normal(g_shape), kernel=p["kernel"], stride=p["stride"],
                     padding=p["padding"], count_include_pad=p["count_include_pad"],
                     divisor_override=p["divisor_override"], x_shape=x.shape, label=s.label)


@register("avg_pool2d_grad", samples=_avg_pool2d_grad_samples)
class AvgPool2dGrad(Function):
    """avg_pool2d's backward as an op: each g[n, c, i, j] / divisor spread over its window
    of zero planes of x_shape. Linear in g; its adjoint is avg_pool2d itself (the same
    kernel, stride, padding, count_include_pad and divisor_override, and g's number of
    windows, which carries ceil_mode)."""

    @staticmethod
    def forward(ctx, g, kernel, stride, padding, count_include_pad, x_shape,
                divisor_override=None):
        ctx.input_shape = g.shape
        ctx.geometry = _avg_geometry(kernel, stride, padding, count_include_pad, divisor_override)
        return _avg_pool2d_spread(g, ctx.geometry, x_shape)

    @staticmethod
    def backward(ctx, h):
        KH, KW, sh, sw, ph, pw, include, divisor = ctx.geometry
        hb = _batched(h)
        y = _sized(pool_kernels.avg_pool2d_forward, hb.size)(
            hb, KH, KW, sh, sw, ph, pw, *ctx.input_shape[-2:], include, divisor)
        return y.reshape(ctx.input_shape)

    @staticmethod
    def vjp(ctx, h):
        p = ctx.params
        return AvgPool2d.apply(h, kernel=p["kernel"], stride=p["stride"],
                               padding=p["padding"], dilation=(1, 1),
                               out_hw=tuple(ctx.input_shape[-2:]),
                               count_include_pad=bool(p["count_include_pad"]),
                               divisor_override=p.get("divisor_override"))


def avg_pool2d(x, kernel_size: IntPair, stride: IntPair | None = None, padding: IntPair = 0,
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Tensor:
    """2-D average pooling, as ``torch.nn.functional.avg_pool2d``.

    y[n, c, i, j] = (1/D) sum over kh < KH, kw < KW of
    x[n, c, i*sh + kh - ph, j*sw + kw - pw] (zero in the padding). The number of windows
    is max_pool2d's (with ``ceil_mode``, last windows that run past the padded input).
    D is ``divisor_override`` if given (a non-zero int); else, with
    ``count_include_pad``, the size of the window clipped to the padded input
    [-ph, H + ph) x [-pw, W + pw) (KH*KW but for ceil_mode's last windows); else the
    number of its positions inside x. ``stride`` defaults to ``kernel_size``; padding is
    at most half the kernel.
    """
    x = lift(x)
    _check_input("avg_pool2d", x)
    params = _pool_params("avg_pool2d", x.shape, kernel_size, stride, padding, 1, ceil_mode)
    return AvgPool2d.apply(x, count_include_pad=bool(count_include_pad),
                           divisor_override=_divisor_override(divisor_override), **params)


# -- 1-D: the 2-D ops on one row ---------------------------------------------------------
def _one_row(op: str, x, kernel_size, stride, padding, dilation, ceil_mode: bool
             ) -> tuple[Tensor, dict]:
    """x[N, C, L] (or [C, L]) as x[N, C, 1, L], and the 2-D arguments of a [1, K] window,
    checked under the 1-D op's name."""
    x = lift(x)
    float_operands(op, x=x)
    _check_rank(op, "x", x, (2, 3), "[N, C, L] or unbatched [C, L]")
    if 0 in x.shape[-2:]:
        raise ValueError(f"{op}: x must have channels and length (only the batch may be "
                         f"empty), got shape {x.shape}")
    kernel = (1,) + int_tuple(op, "kernel_size", kernel_size, 1, 1)
    pairs = dict(kernel_size=kernel,
                 stride=kernel if stride is None or _empty(stride)
                 else (1,) + int_tuple(op, "stride", stride, 1, 1),
                 padding=(0,) + int_tuple(op, "padding", padding, 1, 0),
                 ceil_mode=ceil_mode)
    rows = unsqueeze(x, -2)
    _pool_params(op, rows.shape, dilation=(1,) + int_tuple(op, "dilation", dilation, 1, 1),
                 **pairs)
    return rows, pairs


def max_pool1d(x, kernel_size: int | tuple[int], stride: int | tuple[int] | None = None,
               padding: int | tuple[int] = 0, dilation: int | tuple[int] = 1,
               ceil_mode: bool = False,
               return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """1-D max pooling, as ``torch.nn.functional.max_pool1d``: ``max_pool2d`` of
    x[N, C, 1, L] with a [1, K] window (the same windows, gradient and NaN rule);
    indices are positions along L."""
    rows, pairs = _one_row("max_pool1d", x, kernel_size, stride, padding, dilation,
                           ceil_mode)
    dilation = (1,) + int_tuple("max_pool1d", "dilation", dilation, 1, 1)
    result = max_pool2d(rows, dilation=dilation, return_indices=return_indices, **pairs)
    if not return_indices:
        return squeeze(result, -2)
    y, idx = result
    return squeeze(y, -2), Tensor._wrap(idx._data[..., 0, :], None, 0)


def avg_pool1d(x, kernel_size: int | tuple[int], stride: int | tuple[int] | None = None,
               padding: int | tuple[int] = 0, ceil_mode: bool = False,
               count_include_pad: bool = True) -> Tensor:
    """1-D average pooling, as ``torch.nn.functional.avg_pool1d``: ``avg_pool2d`` of
    x[N, C, 1, L] with a [1, K] window."""
    rows, pairs = _one_row("avg_pool1d", x, kernel_size, stride, padding, 1, ceil_mode)
    return squeeze(avg_pool2d(rows, count_include_pad=count_include_pad, **pairs), -2)


__all__ = ["avg_pool1d", "avg_pool2d", "max_pool1d", "max_pool2d"]
