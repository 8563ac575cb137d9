"""The regression (distance) losses, PyTorch's semantics and ``reduction='mean'|'sum'|
'none'``: mse_loss, and l1_loss, smooth_l1_loss and huber_loss as one piecewise-quadratic
Function. pred/input and target have one shape and both are differentiable. The math of
every backward is in docs/derivations.md#losses and in the docstring of
``nbgrad/kernels/loss.py``; the reduction they share is ops/_loss_reduction.py.
"""

from __future__ import annotations

import numpy as np

from ..function import Function, Sample, register
from ..kernels import loss as loss_kernels
from ..runtime.jit import for_work
from ..tensor import Tensor, lift
from ._args import float_input, real
from ._loss_reduction import (
    REDUCTIONS,
    check_reduction,
    grad_scale,
    mean_factor,
    mean_or_sum,
    reduced,
    target_like,
    upstream,
)
from .select import where
from .table import flat as _flat

# -- mse_loss ------------------------------------------------------------------------------------


def _mse_samples(rng):
    for reduction in REDUCTIONS:
        yield Sample(rng.standard_normal((3, 4)), rng.standard_normal((3, 4)),
                     reduction=reduction, label=reduction)
    yield Sample(rng.standard_normal(5), rng.standard_normal(5), reduction="mean",
                 label="1-D")


@register("mse_loss", samples=_mse_samples)
class MSELoss(Function):
    @staticmethod
    def forward(ctx, pred, target, reduction="mean"):
        p, t = np.ascontiguousarray(pred).reshape(-1), np.ascontiguousarray(target).reshape(-1)
        ctx.reduction, ctx.input_shape = reduction, pred.shape
        ctx.save_for_backward(p, t)
        if reduction == "none":
            out = np.empty(pred.shape, pred.dtype)
            for_work(loss_kernels.squared_error, p.size)(p, t, out.reshape(-1))
            return out
        total = for_work(loss_kernels.block_sum, p.size)(p, t)
        return mean_or_sum(total, reduction, p.size, pred.dtype)

    @staticmethod
    def backward(ctx, g):
        p, t = ctx.saved_tensors
        g = np.ascontiguousarray(g, dtype=p.dtype).reshape(-1)
        gp = np.empty(ctx.input_shape, p.dtype)
        for_work(loss_kernels.squared_error_backward, p.size)(
            g, p, t, mean_factor(ctx.reduction, p.size), gp.reshape(-1))
        gt = np.negative(gp) if ctx.needs_input_grad[1] else None
        return (gp if ctx.needs_input_grad[0] else None), gt

    @staticmethod
    def vjp(ctx, g):
        p, t = lift(ctx.inputs[0]), lift(ctx.inputs[1])
        size = p._data.size
        scale = 2.0 / size if ctx.reduction == "mean" and size else 2.0
        gp = (p - t) * (g * scale)
        return ((gp if ctx.needs_input_grad[0] else None),
                (-gp if ctx.needs_input_grad[1] else None))


def mse_loss(pred, target, reduction: str = "mean") -> Tensor:
    """(pred - target)^2, averaged ('mean', default), summed ('sum') or element-wise
    ('none'). pred and target must have the same shape; both can require grad
    (d/dpred = 2 (pred - target) g, d/dtarget = -d/dpred; 'mean' divides by the size)."""
    reduction = check_reduction("mse_loss", reduction)
    pred = float_input("mse_loss", pred, "pred")
    target = target_like("mse_loss", pred, target, "pred")
    return MSELoss.apply(pred, target, reduction=reduction)


# -- l1_loss, smooth_l1_loss, huber_loss ---------------------------------------------------------


def _regression_samples(rng, shape, **params):
    """x, t with |x - t| in 0.2..0.4, 0.5..0.7, 1.6..1.8 or 2.4..2.6: away from the kinks
    at 0 and at the beta / delta values the samples use (1, 1.2, 2)."""
    t = rng.standard_normal(shape)
    d = rng.choice([0.3, 0.6, 1.7, 2.5], shape) + rng.uniform(-0.1, 0.1, shape)
    for reduction in REDUCTIONS:
        yield Sample(t + d * rng.choice([-1.0, 1.0], shape), t, reduction=reduction,
                     label=f"{reduction} {params}", **params)


def _l1_samples(rng):
    yield from _regression_samples(rng, (3, 4))
    yield Sample(np.array([0.5, -1.0, 2.0]), np.array([0.1, 0.2, 1.0]), reduction="mean",
                 label="1-D")


def _smooth_l1_samples(rng):
    yield from _regression_samples(rng, (3, 4), beta=1.0)
    yield from _regression_samples(rng, (5,), beta=1.2)
    yield Sample(rng.standard_normal((2, 3)) + 1.0, rng.standard_normal((2, 3)) - 1.0,
                 reduction="sum", beta=0.0, label="beta 0 (l1)")


def _huber_samples(rng):
    yield from _regression_samples(rng, (3, 4), delta=1.0)
    yield from _regression_samples(rng, (2, 3), delta=2.0)


class _PiecewiseQuadratic(Function):
    """l1_loss, smooth_l1_loss and huber_loss: with z = |x - t|, z^2 / (2 div) for
    z < beta and mul (z - beta / 2) above; each subclass maps its parameter to
    (beta, div, mul) in ``coefficients``."""

    @staticmethod
    def coefficients(params: dict) -> tuple[float, float, float]:
        raise NotImplementedError

    @classmethod
    def forward(cls, ctx, x, target, reduction="mean", **params):
        ctx.coef = cls.coefficients(params)
        ctx.reduction = reduction
        xf, tf = _flat(x), _flat(target)
        ctx.save_for_backward(xf, tf)
        out = np.empty(x.shape, x.dtype)
        for_work(loss_kernels.smooth_l1_forward, xf.size)(xf, tf, *ctx.coef, out.reshape(-1))
        return reduced(out, reduction, xf.size, x.dtype)

    @staticmethod
    def backward(ctx, g):
        x, t = ctx.saved_tensors
        gf, step = upstream(g, x.dtype)
        gx = np.empty(ctx.input_arrays[0].shape, x.dtype)
        for_work(loss_kernels.smooth_l1_backward, x.size)(
            gf, step, x, t, *ctx.coef, grad_scale(ctx.reduction, x.size), gx.reshape(-1))
        need_x, need_t = ctx.needs_input_grad
        return (gx if need_x else None), (np.negative(gx) if need_t else None)

    @staticmethod
    def vjp(ctx, g):
        """g d / div where |d| <= beta (beta > 0; a NaN d counts as inside, as in the
        kernel), g mul sign(d) elsewhere (d = x - t; 0 at d = 0 or NaN for l1): selected
        by constant masks, so the second derivative is 1 / div inside and 0 outside."""
        x, t = lift(ctx.inputs[0]), lift(ctx.inputs[1])
        beta, div, mul = ctx.coef
        d = x - t
        dd = d._data
        b = dd.dtype.type(beta)
        inside = ~((dd < -b) | (dd > b)) & (beta > 0)
        outside = (np.where(dd > b, mul, 0.0) - np.where(dd < -b, mul, 0.0)).astype(dd.dtype)
        slope = where(inside, d / div, lift(outside))
        gx = slope * (g * grad_scale(ctx.reduction, dd.size))
        need_x, need_t = ctx.needs_input_grad
        return (gx if need_x else None), (-gx if need_t else None)


@register("l1_loss", samples=_l1_samples)
class L1Loss(_PiecewiseQuadratic):
    @staticmethod
    def coefficients(params: dict) -> tuple[float, float, float]:
        return 0.0, 1.0, 1.0


@register("smooth_l1_loss", samples=_smooth_l1_samples)
class SmoothL1Loss(_PiecewiseQuadratic):
    @staticmethod
    def coefficients(params: dict) -> tuple[float, float, float]:
        beta = params.get("beta", 1.0)
        return (beta, beta, 1.0) if beta > 0 else (0.0, 1.0, 1.0)   # beta 0: l1, as PyTorch


@register("huber_loss", samples=_huber_samples)
class HuberLoss(_PiecewiseQuadratic):
    @staticmethod
    def coefficients(params: dict) -> tuple[float, float, float]:
        delta = params.get("delta", 1.0)
        return delta, 1.0, delta


def _regression_operands(op: str, input, target, reduction) -> tuple[Tensor, Tensor, str]:
    reduction = check_reduction(op, reduction)
    x = float_input(op, input, "input")
    return x, target_like(op, x, target), reduction


def l1_loss(input, target, reduction: str = "mean") -> Tensor:
    """|input - target|, averaged ('mean', default), summed ('sum') or element-wise
    ('none'). input and target must have the same shape; both can require grad
    (d/dinput = sign(input - target), 0 where they are equal, as PyTorch;
    d/dtarget = -d/dinput)."""
    x, t, reduction = _regression_operands("l1_loss", input, target, reduction)
    return L1Loss.apply(x, t, reduction=reduction)


def smooth_l1_loss(input, target, reduction: str = "mean", beta: float = 1.0) -> Tensor:
    """0.5 z^2 / beta for z = |input - target| < beta, z - 0.5 beta otherwise (l1_loss for
    beta = 0, as PyTorch); derivative (input - target) / beta inside, the sign outside.
    beta must be >= 0."""
    x, t, reduction = _regression_operands("smooth_l1_loss", input, target, reduction)
    beta = real("smooth_l1_loss", "beta", beta)
    if not beta >= 0:
        raise ValueError(f"smooth_l1_loss: beta must be non-negative, got {beta}")
    return SmoothL1Loss.apply(x, t, reduction=reduction, beta=beta)


def huber_loss(input, target, reduction: str = "mean", delta: float = 1.0) -> Tensor:
    """0.5 z^2 for z = |input - target| < delta, delta (z - 0.5 delta) otherwise (delta
    times smooth_l1_loss with beta = delta); derivative input - target inside, delta
    times the sign outside. delta must be positive."""
    x, t, reduction = _regression_operands("huber_loss", input, target, reduction)
    delta = real("huber_loss", "delta", delta)
    if not delta > 0:
        raise ValueError(f"huber_loss: delta must be positive, got {delta}")
    return HuberLoss.apply(x, t, reduction=reduction, delta=delta)


__all__ = ["huber_loss", "l1_loss", "mse_loss", "smooth_l1_loss"]
