"""Losses: mse_loss and cross_entropy (PyTorch semantics, ``reduction='mean'|'sum'|'none'``).

cross_entropy fuses log_softmax and the negative log-likelihood: the forward keeps each
row's max and shifted log-sum, and the backward is one pass g_i (softmax(x_i) -
onehot(t_i)).
"""

from __future__ import annotations

import math

import numpy as np

from ..function import Function, Sample, register
from ..kernels import loss as loss_kernels
from ..kernels._jit import for_work
from ..tensor import Tensor, lift
from ._args import float_input
from .activation import softmax

_REDUCTIONS = ("mean", "sum", "none")


# float64 magnitudes from here up round to inf in float32: FLT_MAX plus half an ulp
_F32_OVERFLOW = (2 - 2.0**-24) * 2.0**127


def _scalar_loss(total: float, dtype: np.dtype) -> np.ndarray:
    """A loss reduced in float64 as a 0-d array of ``dtype``: +-inf beyond its range (as
    PyTorch), without NumPy's overflow warning."""
    if dtype == np.float32 and abs(total) >= _F32_OVERFLOW:
        total = math.copysign(math.inf, total)
    return np.array(total, dtype=dtype)


def _reduction(op: str, reduction) -> str:
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{op}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    return reduction


# -- mse_loss ------------------------------------------------------------------------------------


def _mse_samples(rng):
    for reduction in _REDUCTIONS:
        yield Sample(rng.standard_normal((3, 4)), rng.standard_normal((3, 4)),
                     reduction=reduction, label=reduction)
    yield Sample(rng.standard_normal(5), rng.standard_normal(5), reduction="mean",
                 label="1-D")


@register("mse_loss", samples=_mse_samples)
class MSELoss(Function):
    @staticmethod
    def forward(ctx, pred, target, reduction="mean"):
        p, t = np.ascontiguousarray(pred).reshape(-1), np.ascontiguousarray(target).reshape(-1)
        ctx.reduction, ctx.shape = reduction, pred.shape
        ctx.save_for_backward(p, t)
        if reduction == "none":
            out = np.empty(pred.shape, pred.dtype)
            for_work(loss_kernels.squared_error, p.size)(p, t, out.reshape(-1))
            return out
        total = for_work(loss_kernels.squared_error_sum, p.size)(p, t)
        if reduction == "mean":
            total = total / p.size if p.size else np.nan
        return _scalar_loss(total, pred.dtype)

    @staticmethod
    def backward(ctx, g):
        p, t = ctx.saved_tensors
        g = np.ascontiguousarray(g, dtype=p.dtype).reshape(-1)
        scale = 1.0 / p.size if ctx.reduction == "mean" and p.size else 1.0
        gp = np.empty(ctx.shape, p.dtype)
        for_work(loss_kernels.squared_error_backward, p.size)(g, p, t, scale, gp.reshape(-1))
        gt = np.negative(gp) if ctx.needs_input_grad[1] else None
        return (gp if ctx.needs_input_grad[0] else None), gt

    @staticmethod
    def vjp(ctx, g):
        p, t = lift(ctx.inputs[0]), lift(ctx.inputs[1])
        size = p.data.size
        scale = 2.0 / size if ctx.reduction == "mean" and size else 2.0
        gp = (p - t) * (g * scale)
        return ((gp if ctx.needs_input_grad[0] else None),
                (-gp if ctx.needs_input_grad[1] else None))


def mse_loss(pred, target, reduction: str = "mean") -> Tensor:
    """(pred - target)^2, averaged ('mean', default), summed ('sum') or element-wise
    ('none'). pred and target must have the same shape; both can require grad
    (d/dpred = 2 (pred - target) g, d/dtarget = -d/dpred; 'mean' divides by the size)."""
    reduction = _reduction("mse_loss", reduction)
    pred = float_input("mse_loss", pred, "pred")
    target = lift(target, pred)
    if target.shape != pred.shape:
        raise ValueError(f"mse_loss: pred has shape {pred.shape} but target has shape "
                         f"{target.shape}; they must match")
    if target.dtype != pred.dtype:
        if target.requires_grad:
            raise TypeError(f"mse_loss: target is {target.dtype} but pred is {pred.dtype}; "
                            "a target that requires grad must have pred's dtype")
        target = Tensor._wrap(target.data.astype(pred.dtype), None, 0)
    return MSELoss.apply(pred, target, reduction=reduction)


# -- cross_entropy --------------------------------------------------------------------------


def _ce_samples(rng):
    for reduction in _REDUCTIONS:
        yield Sample(rng.standard_normal((4, 5)) * 2, rng.integers(0, 5, 4),
                     reduction=reduction, label=reduction)
    yield Sample(rng.standard_normal((1, 3)), np.array([2]), reduction="mean",
                 label="one row")


@register("cross_entropy", samples=_ce_samples)
class CrossEntropy(Function):
    @staticmethod
    def forward(ctx, logits, target, reduction="mean"):
        x = np.ascontiguousarray(logits)
        t = np.ascontiguousarray(target, dtype=np.int64)
        loss, shift, log_sum = for_work(loss_kernels.cross_entropy_forward, x.size)(x, t)
        ctx.reduction = reduction
        ctx.save_for_backward(x, t, shift, log_sum)
        if reduction == "none":
            return loss
        total = loss.sum(dtype=np.float64)
        if reduction == "mean":
            total = total / loss.size if loss.size else np.nan
        return _scalar_loss(total, logits.dtype)

    @staticmethod
    def backward(ctx, g):
        x, t, shift, log_sum = ctx.saved_tensors
        n = x.shape[0]
        if ctx.reduction == "none":
            rows = np.ascontiguousarray(g, dtype=x.dtype)
        else:
            scale = 1.0 / n if ctx.reduction == "mean" and n else 1.0
            rows = np.full(n, float(g.reshape(())) * scale, dtype=x.dtype)
        gx = np.empty_like(x)
        for_work(loss_kernels.cross_entropy_backward, x.size)(rows, x, t, shift, log_sum, gx)
        return gx, None

    @staticmethod
    def vjp(ctx, g):
        """g (softmax(x) - onehot(t)) per row, with nb.softmax of the input: differentiable
        again (the Hessian of each row is diag(p) - p p^T)."""
        x, t = lift(ctx.inputs[0]), ctx.inputs[1]
        t = np.asarray(t.data if isinstance(t, Tensor) else t, dtype=np.int64)
        n, c = x.shape
        d = softmax(x, axis=1) - lift(np.eye(c, dtype=x.dtype)[t])
        if ctx.reduction == "none":
            return g.reshape((n, 1)) * d, None
        return d * (g * (1.0 / n if ctx.reduction == "mean" and n else 1.0)), None


def cross_entropy(logits, target, reduction: str = "mean") -> Tensor:
    """-log softmax(logits)[i, target[i]] per row of logits [N, C], with integer class
    targets [N] in [0, C); reduced by 'mean' (default), 'sum' or 'none'.

    Computed as log sum_j e^(logits_i[j] - m_i) - (logits_i[target_i] - m_i), m_i the row
    max (as PyTorch's log_softmax); the backward is g_i (softmax(logits_i) -
    onehot(target_i)). Unlike PyTorch there is no ignore_index, class weights or label
    smoothing: every target must be a valid class."""
    reduction = _reduction("cross_entropy", reduction)
    logits = float_input("cross_entropy", logits, "logits")
    target = lift(target)
    if logits.ndim != 2:
        raise ValueError(f"cross_entropy: logits must be [N, C], got shape {logits.shape}")
    if target.dtype.kind not in "iu":
        raise TypeError(f"cross_entropy: target must hold integer class indices, got "
                        f"{target.dtype} (shape {target.shape})")
    n, c = logits.shape
    if target.shape != (n,):
        raise ValueError(f"cross_entropy: target has shape {target.shape} but logits "
                         f"{logits.shape} needs ({n},)")
    t = target.data
    bad = np.flatnonzero((t < 0) | (t >= c))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"cross_entropy: target[{i}] = {int(t[i])} is out of range for "
                         f"C = {c} classes (logits shape {logits.shape})")
    return CrossEntropy.apply(logits, t, reduction=reduction)


__all__ = ["cross_entropy", "mse_loss"]
