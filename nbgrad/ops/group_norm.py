"""Group and instance normalisation (``torch.nn.functional``'s names and semantics).

group_norm splits the C channels of x [N, C, *] into G groups of C / G channels and
normalises each (sample, group) over its channels and spatial positions:
xhat = (x - mean) / sqrt(var + eps), var biased, then y = xhat * weight[c] + bias[c]. With x
viewed as rows [N * G, (C / G) * S] this is the row normalisation of layer_norm, so the
forward and backward run layer_norm's row kernels (``kernels/norm.py``) with unit weights;
the per-channel affine, the weight gradient sum g * xhat and the bias gradient sum g are
NumPy broadcasts and sums over N and the spatial dims. The ``vjp`` writes the same formulas
with nbgrad ops, so group_norm is twice differentiable.

instance_norm is group_norm with one channel per group, and, given running estimates,
updates them in place as PyTorch does (the per-instance mean and unbiased variance,
averaged over the batch); with ``use_input_stats=False`` it normalises with the running
estimates (batch_norm in evaluation).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..function import Function, Sample, register
from ..kernels import norm as norm_kernels
from ..runtime.jit import for_work
from ..tensor import Tensor, lift
from . import _args
from .norm import (
    _batch_stats_input_grad,
    _like,
    _needed,
    _running,
    _standardized,
    batch_norm,
)
from .reduce import sum as reduce_sum


def _group_norm_samples(rng):
    yield Sample(rng.standard_normal((2, 6, 3)) * 2 + 1, rng.uniform(0.5, 1.5, 6),
                 rng.standard_normal(6), num_groups=3, label="[N, C, L], 3 groups, affine")
    yield Sample(rng.standard_normal((3, 4)), None, None, num_groups=2,
                 label="[N, C], 2 groups, no affine")
    yield Sample(rng.standard_normal((2, 4, 2, 3)), rng.uniform(0.5, 1.5, 4), None,
                 num_groups=1, eps=0.1, label="[N, C, H, W], 1 group, weight only, eps 0.1")
    yield Sample(rng.standard_normal((2, 3, 5)), None, rng.standard_normal(3), num_groups=3,
                 label="one channel per group (instance norm), bias only")


def _per_channel(x_shape: tuple) -> tuple:
    """(C, 1, ..., 1): a per-channel vector's shape against x [N, C, *]."""
    return (x_shape[1],) + (1,) * (len(x_shape) - 2)


@register("group_norm", samples=_group_norm_samples)
class GroupNorm(Function):
    @staticmethod
    def forward(ctx, x, weight, bias, num_groups=1, eps=1e-5):
        n, c = x.shape[:2]
        rows, features = n * num_groups, (c // num_groups) * math.prod(x.shape[2:])
        x2 = np.ascontiguousarray(x).reshape(rows, features)
        y = np.empty(x.shape, x.dtype)
        mean_, rstd = np.empty(rows, x.dtype), np.empty(rows, x.dtype)
        for_work(norm_kernels.layer_norm_forward, x.size)(
            x2, np.ones(features, x.dtype), np.zeros(features, x.dtype), eps,
            y.reshape(rows, features), mean_, rstd)
        y3 = y.reshape(n, c, -1) if y.size else y.reshape(n, c, 0)
        if weight is not None:
            y3 *= weight[:, None]
        if bias is not None:
            y3 += bias[:, None]
        ctx.num_groups, ctx.eps = num_groups, eps
        ctx.save_for_backward(x2, weight, mean_, rstd)
        return y

    @staticmethod
    def backward(ctx, g):
        x2, weight, mean_, rstd = ctx.saved_tensors
        shape = g.shape
        n, c = shape[:2]
        g3 = np.ascontiguousarray(g, dtype=x2.dtype).reshape(n, c, x2.size // max(n * c, 1))
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            gw = g3 if weight is None else g3 * weight[:, None]
            dx = np.empty(shape, x2.dtype)
            empty = np.empty(0, x2.dtype)
            for_work(norm_kernels.layer_norm_backward, x2.size)(
                _like(gw, x2), x2, np.ones(x2.shape[1], x2.dtype), mean_, rstd, False,
                dx.reshape(x2.shape), empty, empty)
        if ctx.needs_input_grad[1]:
            xhat = ((x2 - mean_[:, None]) * rstd[:, None]).reshape(g3.shape)
            dw = np.einsum("ncs,ncs->c", g3, xhat)
        if ctx.needs_input_grad[2]:
            db = g3.sum(axis=(0, 2))
        return _needed(ctx, dx, dw, db)

    @staticmethod
    def vjp(ctx, g):
        x, weight, _ = ctx.inputs
        x = lift(x)
        shape = tuple(x.shape)
        n, groups = shape[0], ctx.num_groups
        grouped = (n, groups, math.prod(shape[1:]) // groups)
        xhat, rstd = _standardized(x.reshape(grouped), (2,), ctx.eps)
        need_x, need_w, need_b = ctx.needs_input_grad
        gw = g if weight is None else g * weight.reshape(_per_channel(shape))
        others = (0,) + tuple(range(2, len(shape)))
        dx = None
        if need_x:
            dx = _batch_stats_input_grad(xhat, rstd, gw.reshape(grouped), (2,)).reshape(shape)
        return (dx, reduce_sum(g * xhat.reshape(shape), others) if need_w else None,
                reduce_sum(g, others) if need_b else None)


def _param(op: str, name: str, p: Any, x: Tensor) -> Tensor | None:
    """weight or bias: None, or a vector of x's channel count (dim 1)."""
    if p is None:
        return None
    p = lift(p)
    c = x.shape[1]
    if tuple(p.shape) != (c,):
        raise ValueError(f"{op}: {name} has shape {tuple(p.shape)} but x of shape "
                         f"{tuple(x.shape)} has {c} channels (dim 1); it needs shape ({c},)")
    return p


def group_norm(input: Any, num_groups: int, weight: Any = None, bias: Any = None,
               eps: float = 1e-5) -> Tensor:
    """Group normalisation of x [N, C, *]: the C channels split into ``num_groups``
    groups, each (sample, group) normalised over its channels and spatial positions,
    (x - mean) / sqrt(var + eps) with the biased var, then * weight[c] + bias[c] (both
    optional, of shape (C,)). As ``torch.nn.functional.group_norm``."""
    x = _args.float_input("group_norm", input, "input")
    if x.ndim < 2:
        raise ValueError(f"group_norm: expected input with at least 2 dimensions [N, C, *], "
                         f"got shape {tuple(x.shape)}")
    if not _args.is_int(num_groups):
        raise TypeError(f"group_norm: num_groups must be an int, got {num_groups!r}")
    if num_groups <= 0:
        raise ValueError(f"group_norm: num_groups must be positive, got {num_groups}")
    if x.shape[1] % num_groups:
        raise ValueError(f"group_norm: the number of channels of input (dim 1 of shape "
                         f"{tuple(x.shape)}) must be divisible by num_groups={num_groups}")
    if x.shape[0] * (x.shape[1] // num_groups) * math.prod(x.shape[2:]) == 1:
        raise ValueError(f"group_norm: expected more than 1 value per channel when "
                         f"training, got input of shape {tuple(x.shape)} with "
                         f"num_groups={num_groups} (as PyTorch)")
    weight = _param("group_norm", "weight", weight, x)
    bias = _param("group_norm", "bias", bias, x)
    _args.float_operands("group_norm", input=x, weight=weight, bias=bias)
    return GroupNorm.apply(x, weight, bias, num_groups=int(num_groups),
                           eps=_args.real("group_norm", "eps", eps))


def instance_norm(input: Any, running_mean: Any = None, running_var: Any = None,
                  weight: Any = None, bias: Any = None, use_input_stats: bool = True,
                  momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Instance normalisation of x [N, C, *]: each (sample, channel) normalised over its
    spatial positions, (x - mean) / sqrt(var + eps) * weight[c] + bias[c]. With
    ``use_input_stats`` and running estimates given, these are updated in place:
    running <- (1 - momentum) running + momentum * (the batch average of the per-instance
    mean, and of the unbiased per-instance variance). Without ``use_input_stats`` the
    running estimates normalise. As ``torch.nn.functional.instance_norm``."""
    x = _args.float_input("instance_norm", input, "input")
    spatial = math.prod(x.shape[2:])
    if use_input_stats and (x.ndim < 2 or spatial == 1):
        raise ValueError(f"instance_norm: expected more than 1 spatial element when "
                         f"training, got input of shape {tuple(x.shape)}")
    if x.ndim < 2:
        raise ValueError(f"instance_norm: expected input with at least 2 dimensions "
                         f"[N, C, *], got shape {tuple(x.shape)}")
    c = x.shape[1]
    running_mean = _running("instance_norm", "running_mean", running_mean, c)
    running_var = _running("instance_norm", "running_var", running_var, c)
    if (running_mean is None) != (running_var is None):
        raise ValueError("instance_norm: running_mean and running_var must either both be "
                         "None or neither be None")
    momentum = _args.real("instance_norm", "momentum", momentum)
    eps = _args.real("instance_norm", "eps", eps)
    weight = _param("instance_norm", "weight", weight, x)
    bias = _param("instance_norm", "bias", bias, x)
    _args.float_operands("instance_norm", input=x, weight=weight, bias=bias)
    if not use_input_stats:
        if running_mean is None:
            raise ValueError("instance_norm: expected running_mean and running_var to be "
                             "given when use_input_stats is False")
        return batch_norm(x, running_mean, running_var, weight, bias, False, momentum, eps)
    y = GroupNorm.apply(x, weight, bias, num_groups=c, eps=eps)
    if running_mean is not None and x.shape[0] > 0:
        x3 = x._data.reshape(x.shape[0], c, spatial)
        batch_mean = x3.mean(axis=2).mean(axis=0)
        batch_var = x3.var(axis=2, ddof=1).mean(axis=0) if spatial > 1 else np.nan
        running_mean[...] = (1 - momentum) * running_mean + momentum * batch_mean
        running_var[...] = (1 - momentum) * running_var + momentum * batch_var
    return y


__all__ = ["group_norm", "instance_norm"]
