"""2-D pooling: max_pool2d and avg_pool2d (PyTorch semantics, NCHW; no ceil_mode)."""

from __future__ import annotations

import numpy as np

from ..function import Function, Sample, register
from ..kernels import pool as K
from ..tensor import Tensor, lift
from .conv import IntPair, _check_float, _check_rank, _contig, _out_size, _pair


def _pool_params(op: str, shape: tuple, kernel_size, stride, padding, dilation) -> dict:
    """Validated (kernel, stride, padding, dilation, out_hw) as pairs."""
    kernel = _pair(op, "kernel_size", kernel_size, 1)
    stride = kernel if stride is None else _pair(op, "stride", stride, 1)
    pad = _pair(op, "padding", padding, 0)
    dilation = _pair(op, "dilation", dilation, 1)
    if pad[0] > kernel[0] // 2 or pad[1] > kernel[1] // 2:
        raise ValueError(f"{op}: padding {pad} must be at most half the kernel size {kernel}")
    out_hw = _out_size(op, shape[-2:], (pad[0], pad[0], pad[1], pad[1]), kernel, stride,
                       dilation)
    return dict(kernel=kernel, stride=stride, padding=pad, dilation=dilation, out_hw=out_hw)


def _check_input(op: str, x: Tensor) -> None:
    _check_float(op, x=x)
    _check_rank(op, "x", x, (3, 4), "[N, C, H, W] or unbatched [C, H, W]")


def _batched(x: np.ndarray) -> np.ndarray:
    return _contig(x[None] if x.ndim == 3 else x)


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


@register("max_pool2d", samples=_max_pool2d_samples)
class MaxPool2d(Function):
    @staticmethod
    def forward(ctx, x, kernel, stride, padding, dilation, out_hw):
        ctx.x_shape = x.shape
        xb = _batched(x)
        if (kernel == (2, 2) and stride == (2, 2) and padding == (0, 0)
                and dilation == (1, 1)):
            y, idx = K.max_pool2d_2x2_forward(xb)
        else:
            y, idx = K.max_pool2d_forward(xb, *kernel, *stride, *padding, *dilation, *out_hw)
        ctx.save_for_backward(idx)
        return y if x.ndim == 4 else y[0]

    @staticmethod
    def backward(ctx, g):
        (idx,) = ctx.saved_tensors
        g = _batched(g)
        dx = np.empty(g.shape[:2] + (ctx.x_shape[-2] * ctx.x_shape[-1],), g.dtype)
        return K.max_pool2d_backward(g, idx, dx).reshape(ctx.x_shape)


def max_pool2d(x, kernel_size: IntPair, stride: IntPair | None = None, padding: IntPair = 0,
               dilation: IntPair = 1) -> Tensor:
    """2-D max pooling, as ``torch.nn.functional.max_pool2d`` (ceil_mode=False only).

    x[N, C, H, W] or [C, H, W]; y[n, c, i, j] = max over kh < KH, kw < KW of
    x[n, c, i*sh + kh*dh - ph, j*sw + kw*dw - pw], padding counting as -inf;
    H' = (H + 2ph - dh(KH-1) - 1) // sh + 1. ``stride`` defaults to ``kernel_size``;
    padding is at most half the kernel. The gradient of each output goes to one input:
    the first maximum of its window in row-major (kh, kw) order; a NaN in the window is
    the maximum (NaN propagates, as in PyTorch).
    """
    x = lift(x)
    _check_input("max_pool2d", x)
    return MaxPool2d.apply(x, **_pool_params("max_pool2d", x.shape, kernel_size, stride,
                                             padding, dilation))


# -- avg_pool2d ---------------------------------------------------------------------------
def _avg_pool2d_samples(rng):
    yield Sample(rng.standard_normal((2, 3, 6, 7)), label="2x2 stride 2",
                 count_include_pad=True,
                 **_pool_params("avg_pool2d", (2, 3, 6, 7), 2, None, 0, 1))
    yield Sample(rng.standard_normal((1, 2, 7, 6)), label="3x2 overlapping, pad, excluded",
                 count_include_pad=False,
                 **_pool_params("avg_pool2d", (1, 2, 7, 6), (3, 2), (2, 1), 1, 1))
    yield Sample(rng.standard_normal((2, 5, 5)), label="unbatched, pad counted",
                 count_include_pad=True,
                 **_pool_params("avg_pool2d", (2, 5, 5), 3, 2, 1, 1))


@register("avg_pool2d", samples=_avg_pool2d_samples)
class AvgPool2d(Function):
    @staticmethod
    def forward(ctx, x, kernel, stride, padding, dilation, out_hw, count_include_pad):
        ctx.x_shape = x.shape
        ctx.args = (*kernel, *stride, *padding, bool(count_include_pad))
        y = K.avg_pool2d_forward(_batched(x), *kernel, *stride, *padding, *out_hw,
                                 bool(count_include_pad))
        return y if x.ndim == 4 else y[0]

    @staticmethod
    def backward(ctx, g):
        g = _batched(g)
        dx = np.empty(g.shape[:2] + ctx.x_shape[-2:], g.dtype)
        return K.avg_pool2d_backward(g, dx, *ctx.args).reshape(ctx.x_shape)


def avg_pool2d(x, kernel_size: IntPair, stride: IntPair | None = None, padding: IntPair = 0,
               count_include_pad: bool = True) -> Tensor:
    """2-D average pooling, as ``torch.nn.functional.avg_pool2d`` (ceil_mode=False, no
    divisor_override).

    y[n, c, i, j] = (1/D) sum over kh < KH, kw < KW of
    x[n, c, i*sh + kh - ph, j*sw + kw - pw] (zero in the padding), where D = KH*KW if
    ``count_include_pad`` else the number of window positions inside x.
    ``stride`` defaults to ``kernel_size``; padding is at most half the kernel.
    """
    x = lift(x)
    _check_input("avg_pool2d", x)
    params = _pool_params("avg_pool2d", x.shape, kernel_size, stride, padding, 1)
    return AvgPool2d.apply(x, count_include_pad=bool(count_include_pad), **params)


__all__ = ["avg_pool2d", "max_pool2d"]
