"""Normalisation and dropout: layer_norm, batch_norm, dropout
(``torch.nn.functional``'s names and semantics).

Both normalisations compute xhat = (x - mean) / sqrt(var + eps), with the biased variance,
and y = xhat * weight + bias. layer_norm takes the statistics over the trailing
``normalized_shape`` dims of each sample, batch_norm over every dim but the channel dim 1
(in training; in evaluation it uses the running estimates). The forward kernels save the
mean and 1 / sqrt(var + eps) of each row or channel, and one backward kernel gives all
three gradients (docs/derivations.md#normalisation-and-dropout). The ``vjp`` of each op
writes the same formulas with nbgrad ops, so both are twice differentiable.

dropout zeroes each element with probability p and scales the rest by 1 / (1 - p); the
mask is a parameter of the op, drawn by the public function from a numpy Generator.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import rng
from ..function import Function, Sample, register
from ..kernels import norm as norm_kernels
from ..runtime.jit import for_work
from ..tensor import Tensor, lift
from . import _args
from .elementwise import sqrt
from .reduce import mean
from .reduce import sum as reduce_sum
from .table import flat, into

# -- shared: the backward of a normalisation, written with nbgrad ops (the vjps) -----------


def _standardized(x: Tensor, axes: tuple, eps: float) -> tuple[Tensor, Tensor]:
    """(xhat, rstd): xhat = (x - mean) * rstd, rstd = 1 / sqrt(var + eps), statistics over
    ``axes`` (kept as size-1 dims), as differentiable functions of x."""
    centered = x - mean(x, axes, keepdim=True)
    rstd = 1 / sqrt(mean(centered * centered, axes, keepdim=True) + eps)
    return centered * rstd, rstd


def _batch_stats_input_grad(xhat: Tensor, rstd: Tensor, gw: Tensor, axes: tuple) -> Tensor:
    """dx = rstd (gw - mean(gw) - xhat mean(gw xhat)), means over ``axes``: the gradient
    through xhat when the statistics are those of x itself (gw = g * weight)."""
    return rstd * (gw - mean(gw, axes, keepdim=True)
                   - xhat * mean(gw * xhat, axes, keepdim=True))


def _param_or(param: np.ndarray | None, size: int, fill: float, dtype: Any) -> np.ndarray:
    """A weight or bias as a flat contiguous array, or ``fill`` repeated when it is None
    (the kernels always take both)."""
    return np.full(size, fill, dtype) if param is None else flat(param)


def _check_param(op: str, name: str, p: Tensor | None, shape: tuple, what: str) -> None:
    if p is not None and tuple(p.shape) != shape:
        raise ValueError(f"{op}: {name} has shape {tuple(p.shape)} but {what} needs "
                         f"shape {shape}")


def _like(g: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The upstream gradient as a contiguous array of the saved input's dtype and shape."""
    return np.ascontiguousarray(g, dtype=x.dtype).reshape(x.shape)


def _needed(ctx, *grads: np.ndarray) -> tuple[np.ndarray | None, ...]:
    """The gradients of the inputs that need one (None for the others)."""
    return tuple(g if need else None for g, need in zip(grads, ctx.needs_input_grad))


# -- layer_norm ----------------------------------------------------------------------------------


def _layer_norm_samples(rng):
    yield Sample(rng.standard_normal((3, 5)), rng.uniform(0.5, 1.5, 5),
                 rng.standard_normal(5), dims=1, label="rows, affine")
    yield Sample(rng.standard_normal((2, 3, 4)) * 2 + 1, rng.uniform(0.5, 1.5, (3, 4)),
                 rng.standard_normal((3, 4)), dims=2, eps=0.1, label="two dims, eps 0.1")
    yield Sample(rng.standard_normal((4, 6)), None, None, dims=1, label="no affine")
    yield Sample(rng.standard_normal(4) * 3, rng.uniform(0.5, 1.5, 4), None, dims=1,
                 label="one sample, weight only")


@register("layer_norm", samples=_layer_norm_samples)
class LayerNorm(Function):
    @staticmethod
    def forward(ctx, x, weight, bias, dims=1, eps=1e-5):
        features = math.prod(x.shape[x.ndim - dims:])
        rows = math.prod(x.shape[:x.ndim - dims])
        x2 = np.ascontiguousarray(x).reshape(rows, features)
        w = _param_or(weight, features, 1, x.dtype)
        y = np.empty(x.shape, x.dtype)
        mean_, rstd = np.empty(rows, x.dtype), np.empty(rows, x.dtype)
        for_work(norm_kernels.layer_norm_forward, x.size)(
            x2, w, _param_or(bias, features, 0, x.dtype), eps, y.reshape(rows, features),
            mean_, rstd)
        ctx.dim, ctx.eps = tuple(range(x.ndim - dims, x.ndim)), eps
        ctx.save_for_backward(x2, w, mean_, rstd)
        return y

    @staticmethod
    def backward(ctx, g):
        x2, w, mean_, rstd = ctx.saved_tensors
        g2 = _like(g, x2)
        # allocated in their final shapes, so the engine keeps them without copying views
        params_shape = g.shape[ctx.dim[0]:]
        dx = np.empty(g.shape, x2.dtype)
        dw, db = np.empty(params_shape, x2.dtype), np.empty(params_shape, x2.dtype)
        for_work(norm_kernels.layer_norm_backward, x2.size)(
            g2, x2, w, mean_, rstd, any(ctx.needs_input_grad[1:]), dx.reshape(x2.shape),
            dw.reshape(-1), db.reshape(-1))
        return _needed(ctx, dx, dw, db)

    @staticmethod
    def vjp(ctx, g):
        x, weight, _ = ctx.inputs
        x = lift(x)
        axes = ctx.dim
        xhat, rstd = _standardized(x, axes, ctx.eps)
        need_x, need_w, need_b = ctx.needs_input_grad
        gw = g if weight is None else g * weight
        # the engine sums the weight and bias gradients over the leading (sample) dims
        return (_batch_stats_input_grad(xhat, rstd, gw, axes) if need_x else None,
                g * xhat if need_w else None,
                g if need_b else None)


def _normalized_shape(shape: Any) -> tuple[int, ...]:
    items = (shape,) if _args.is_int(shape) else shape
    if (not isinstance(items, tuple | list) or not items
            or not all(_args.is_int(s) for s in items)):
        raise TypeError(f"layer_norm: normalized_shape must be an int or a non-empty "
                        f"sequence of ints, got {shape!r}")
    return tuple(int(s) for s in items)


def layer_norm(x: Any, normalized_shape: int | tuple[int, ...] | list[int],
               weight: Any = None, bias: Any = None, eps: float = 1e-5) -> Tensor:
    """Normalise over the trailing dims ``normalized_shape`` of x: per sample,
    (x - mean) / sqrt(var + eps) * weight + bias, var biased; weight and bias (optional)
    have shape ``normalized_shape``. As ``torch.nn.functional.layer_norm``."""
    x = _args.float_input("layer_norm", x)
    dims = _normalized_shape(normalized_shape)
    if tuple(x.shape[x.ndim - len(dims):]) != dims:
        raise ValueError(f"layer_norm: normalized_shape {dims} does not match the last "
                         f"dims of x with shape {tuple(x.shape)}")
    weight = None if weight is None else lift(weight)
    bias = None if bias is None else lift(bias)
    _args.float_operands("layer_norm", x=x, weight=weight, bias=bias)
    _check_param("layer_norm", "weight", weight, dims, "normalized_shape")
    _check_param("layer_norm", "bias", bias, dims, "normalized_shape")
    return LayerNorm.apply(x, weight, bias, dims=len(dims),
                           eps=_args.real("layer_norm", "eps", eps))


# -- batch_norm --------------------------------------------------------------------------------


def _batch_norm_samples(rng):
    c = 3

    def running():  # each sample its own buffers: training updates them in place
        return {"running_mean": rng.standard_normal(c), "running_var": rng.uniform(0.5, 2, c)}

    yield Sample(rng.standard_normal((4, c)), rng.uniform(0.5, 1.5, c), rng.standard_normal(c),
                 training=True, **running(), label="[N, C] training")
    yield Sample(rng.standard_normal((2, c, 2, 3)) * 2, rng.uniform(0.5, 1.5, c),
                 rng.standard_normal(c), training=True, eps=0.1, label="[N, C, H, W] training")
    yield Sample(rng.standard_normal((3, c, 4)), None, None, training=True,
                 label="[N, C, L] training, no affine, no running stats")
    yield Sample(rng.standard_normal((2, c, 2, 2)), rng.uniform(0.5, 1.5, c),
                 rng.standard_normal(c), training=False, **running(), label="evaluation")


def _channel_shape(x: Any) -> tuple[int, ...]:
    """The shape (C, 1, ..., 1) that broadcasts a per-channel vector against x [N, C, *]."""
    return (x.shape[1],) + (1,) * (x.ndim - 2)


def _batch_norm_layout(x3: np.ndarray, blocked: Any, columns: Any) -> tuple[Any, tuple]:
    """The kernel for x [N, C, S] (serial or parallel form by size) and the shape its
    arrays take: ``columns`` on [N, C] when S = 1, where a block of channels would read
    one element per row; ``blocked`` (blocks of channels) on [N, C, S] otherwise."""
    if x3.shape[2] == 1:
        return for_work(columns, x3.size), x3.shape[:2]
    return for_work(blocked, x3.size), x3.shape


@register("batch_norm", samples=_batch_norm_samples)
class BatchNorm(Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean=None, running_var=None, training=False,
                momentum=0.1, eps=1e-5):
        n, c = x.shape[:2]
        x3 = np.ascontiguousarray(x).reshape(n, c, math.prod(x.shape[2:]))
        w = _param_or(weight, c, 1, x.dtype)
        if training:
            mean_, var = np.empty(c, x.dtype), np.empty(c, x.dtype)
        else:
            mean_, var = running_mean.astype(x.dtype), running_var.astype(x.dtype)
        rstd = np.empty(c, x.dtype)
        y = np.empty(x.shape, x.dtype)
        kernel, shape = _batch_norm_layout(x3, norm_kernels.batch_norm_forward,
                                           norm_kernels.batch_norm_forward_columns)
        kernel(x3.reshape(shape), w, _param_or(bias, c, 0, x.dtype), training, eps, mean_,
               var, rstd, y.reshape(shape))
        if training and running_mean is not None:
            _update_running(running_mean, running_var, mean_, var, momentum, n * x3.shape[2])
        ctx.training, ctx.eps = training, eps
        ctx.save_for_backward(x3, w, mean_, rstd)
        return y

    @staticmethod
    def backward(ctx, g):
        x3, w, mean_, rstd = ctx.saved_tensors
        g3 = _like(g, x3)
        dx = np.empty(g.shape, x3.dtype)
        dw, db = np.empty(x3.shape[1], x3.dtype), np.empty(x3.shape[1], x3.dtype)
        kernel, shape = _batch_norm_layout(x3, norm_kernels.batch_norm_backward,
                                           norm_kernels.batch_norm_backward_columns)
        kernel(g3.reshape(shape), x3.reshape(shape), w, mean_, rstd, ctx.training,
               dx.reshape(shape), dw, db)
        return _needed(ctx, dx, dw, db)

    @staticmethod
    def vjp(ctx, g):
        x, weight, _ = ctx.inputs
        x = lift(x)
        axes = (0,) + tuple(range(2, x.ndim))
        per_channel = _channel_shape(x)
        if ctx.training:
            xhat, rstd = _standardized(x, axes, ctx.eps)
        else:  # running statistics: constants
            _, _, mean_, rstd_ = ctx.saved_tensors
            rstd = lift(rstd_.reshape(per_channel))
            xhat = (x - lift(mean_.reshape(per_channel))) * rstd
        need_x, need_w, need_b = ctx.needs_input_grad
        gw = g if weight is None else g * weight.reshape(per_channel)
        dx = None
        if need_x:
            dx = _batch_stats_input_grad(xhat, rstd, gw, axes) if ctx.training else gw * rstd
        return (dx, reduce_sum(g * xhat, axes) if need_w else None,
                reduce_sum(g, axes) if need_b else None)


def _update_running(running_mean: np.ndarray, running_var: np.ndarray, batch_mean: np.ndarray,
                    batch_var: np.ndarray, momentum: float, count: int) -> None:
    """In place: running <- (1 - momentum) running + momentum batch, with the unbiased
    variance (biased * count / (count - 1)) for running_var, as PyTorch."""
    running_mean[...] = (1 - momentum) * running_mean + momentum * batch_mean
    running_var[...] = ((1 - momentum) * running_var
                        + momentum * (batch_var * (count / (count - 1))))


def _running(op: str, name: str, value: Any, channels: int) -> np.ndarray | None:
    """A running-statistics buffer of ``op`` as the float array that is updated in
    place."""
    if value is None:
        return None
    array = value._data if isinstance(value, Tensor) else value
    if not isinstance(array, np.ndarray) or array.dtype.kind != "f":
        raise TypeError(f"{op}: {name} must be a float tensor or array, got "
                        f"{getattr(array, 'dtype', type(array).__name__)}")
    if array.shape != (channels,):
        raise ValueError(f"{op}: {name} has shape {array.shape} but x has "
                         f"{channels} channels (dim 1); it needs shape ({channels},)")
    return array


def batch_norm(x: Any, running_mean: Any, running_var: Any, weight: Any = None,
               bias: Any = None, training: bool = False, momentum: float = 0.1,
               eps: float = 1e-5) -> Tensor:
    """Normalise each channel (dim 1) of x [N, C, *]: (x - mean) / sqrt(var + eps) *
    weight[c] + bias[c]. In training, mean and the biased var are the batch statistics
    over every dim but 1, and the running estimates (if given) are updated in place:
    running <- (1 - momentum) running + momentum batch, with the unbiased variance. In
    evaluation the running estimates are used. As ``torch.nn.functional.batch_norm``
    (which also returns an empty 1-D x unchanged, as a copy here)."""
    x = _args.float_input("batch_norm", x)
    if x.ndim == 1 and x.shape[0] == 0 and weight is None and bias is None:
        return x.clone()  # PyTorch returns an empty 1-D input as it is, whatever the stats
    if x.ndim < 2:
        raise ValueError(f"batch_norm: x must be [N, C, *] (at least 2 dims), got shape "
                         f"{tuple(x.shape)}")
    c = x.shape[1]
    running_mean = _running("batch_norm", "running_mean", running_mean, c)
    running_var = _running("batch_norm", "running_var", running_var, c)
    if (running_mean is None) != (running_var is None):
        raise ValueError("batch_norm: give both running_mean and running_var, or neither")
    if not training and running_mean is None:
        raise ValueError("batch_norm: running_mean and running_var must be given in "
                         "evaluation mode (training=False)")
    if training and x.numel() // c <= 1:
        raise ValueError(f"batch_norm: expected more than 1 value per channel when "
                         f"training, got x of shape {tuple(x.shape)}")
    weight = None if weight is None else lift(weight)
    bias = None if bias is None else lift(bias)
    _args.float_operands("batch_norm", x=x, weight=weight, bias=bias)
    _check_param("batch_norm", "weight", weight, (c,), "x's channel count")
    _check_param("batch_norm", "bias", bias, (c,), "x's channel count")
    return BatchNorm.apply(x, weight, bias, running_mean=running_mean,
                           running_var=running_var, training=bool(training),
                           momentum=_args.real("batch_norm", "momentum", momentum),
                           eps=_args.real("batch_norm", "eps", eps))


# -- dropout -------------------------------------------------------------------------------------


def _dropout_samples(rng):
    yield Sample(rng.standard_normal((3, 4)), keep=rng.random((3, 4)) >= 0.5, scale=2.0,
                 label="p 0.5")
    yield Sample(rng.standard_normal(6), keep=rng.random(6) >= 0.2, scale=1.25, label="p 0.2")


@register("dropout", samples=_dropout_samples)
class Dropout(Function):
    """x * keep * scale for a fixed boolean mask ``keep`` (of x's shape)."""

    @staticmethod
    def forward(ctx, x, keep=None, scale=1.0):
        keep = flat(keep)
        ctx.scale = scale
        ctx.save_for_backward(keep)
        return into(norm_kernels.masked_scale, x.shape, x.dtype, flat(x), keep, scale)

    @staticmethod
    def backward(ctx, g):
        (keep,) = ctx.saved_tensors
        return into(norm_kernels.masked_scale, g.shape, g.dtype, flat(g), keep, ctx.scale)

    @staticmethod
    def vjp(ctx, g):
        # linear in x: g times the constant keep * scale
        (keep,) = ctx.saved_tensors
        return g * lift((keep * ctx.scale).astype(g.dtype).reshape(g.shape))


def dropout(x: Any, p: float = 0.5, training: bool = True, generator: Any = None) -> Tensor:
    """Inverted dropout: in training, each element is zeroed with probability p and the
    others are scaled by 1 / (1 - p) (p = 1 zeroes everything); otherwise x itself.

    The mask is drawn from ``generator`` (an ``nb.Generator``, advanced by the draw, a
    numpy Generator or an int seed); without it, from the default generator that
    ``nb.manual_seed`` seeds, so a seeded run drops the same elements. A dropped inf or NaN
    gives NaN (x * 0), as in PyTorch."""
    x = _args.float_input("dropout", x)
    p = _args.real("dropout", "p", p)
    if not 0 <= p <= 1:
        raise ValueError(f"dropout: dropout probability has to be between 0 and 1, but got {p}")
    if not training:
        return x
    keep = rng.resolve(generator, "dropout").random(x.shape, dtype=np.float32) >= p
    return Dropout.apply(x, keep=keep, scale=0.0 if p == 1 else 1 / (1 - p))


__all__ = ["batch_norm", "dropout", "layer_norm"]
