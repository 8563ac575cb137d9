"""Losses of ``torch.nn.functional`` with PyTorch's semantics: binary_cross_entropy (a
registered Function: PyTorch's clamped logs and its gradient (x - t) / max(x (1 - x),
1e-12)), and as compositions of ops (their gradients, first and second, come from the
ops) kl_div, poisson_nll_loss, gaussian_nll_loss and the margin losses
margin_ranking_loss, hinge_embedding_loss, soft_margin_loss, multilabel_soft_margin_loss,
cosine_embedding_loss and triplet_margin_loss (each PyTorch's own composition).

Where PyTorch's own composition has a 0 * inf in a target's gradient (kl_div and the
Stirling term of poisson_nll_loss at target 0), these give 0 instead of NaN.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from ..function import Function, Sample, register
from ..tensor import Tensor, lift
from ._args import float_input, real
from ._loss_reduction import (
    REDUCTIONS,
    broadcast_weight,
    constant_weight,
    grad_scale,
    reduced,
    target_like,
)
from .activation import softplus
from .elementwise import exp, log, sqrt
from .pointwise_math import clamp_min, log1p
from .reduce import mean, norm
from .reduce import sum as _sum
from .select import minimum, where
from .shape import unsqueeze

__all__ = ["binary_cross_entropy", "cosine_embedding_loss", "gaussian_nll_loss",
           "hinge_embedding_loss", "kl_div", "margin_ranking_loss",
           "multilabel_soft_margin_loss", "poisson_nll_loss", "soft_margin_loss",
           "triplet_margin_loss"]

_BCE_EPS = float(np.float32(1e-12))  # PyTorch's floor on x (1 - x) in the gradient (a float)
_LOG_FLOOR = -100.0   # and on the logs of the loss


def _reduction(op: str, reduction, allowed=REDUCTIONS) -> str:
    """``reduction`` if allowed; PyTorch's ValueError ('... is not a valid value for
    reduction') naming the op and the choices if not."""
    if not isinstance(reduction, str) or reduction not in allowed:
        choices = ", ".join(repr(r) for r in allowed)
        raise ValueError(f"{op}: {reduction!r} is not a valid value for reduction "
                         f"(expected one of {choices})")
    return reduction


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return mean(loss)
    return _sum(loss) if reduction == "sum" else loss


def _broadcast(op: str, x: Tensor, t: Tensor, names=("input", "target")) -> None:
    """PyTorch broadcasts these losses' operands: a RuntimeError naming the op and both
    shapes where they do not broadcast."""
    try:
        np.broadcast_shapes(x.shape, t.shape)
    except ValueError:
        raise RuntimeError(f"{op}: {names[0]} of shape {x.shape} and {names[1]} of shape "
                           f"{t.shape} do not broadcast") from None


def _float_target(op: str, target, x: Tensor) -> Tensor:
    t = lift(target, x)
    if t.dtype.kind not in "biuf":
        raise TypeError(f"{op}: target must be real numbers, got {t.dtype} (shape {t.shape})")
    if t.dtype != x.dtype and not t.requires_grad:
        t = Tensor._wrap(np.asarray(t._data, x.dtype), None, 0)
    return t


# -- binary_cross_entropy -------------------------------------------------------------------------


def _bce_samples(rng):
    for reduction in REDUCTIONS:
        yield Sample(rng.uniform(0.1, 0.9, (3, 4)), rng.uniform(0, 1, (3, 4)),
                     reduction=reduction, label=reduction)
    yield Sample(rng.uniform(0.05, 0.95, (2, 5)), rng.uniform(0, 1, (2, 5)),
                 weight=rng.uniform(0.5, 2, 5), reduction="mean", label="weight")
    yield Sample(rng.uniform(0.2, 0.8, 4), rng.uniform(0, 1, 4),
                 weight=rng.uniform(0.5, 2, 4), reduction="sum", label="1-D sum")


@register("binary_cross_entropy", samples=_bce_samples)
class BinaryCrossEntropy(Function):
    @staticmethod
    def forward(ctx, x, target, weight=None, reduction="mean"):
        ctx.reduction, ctx.weight = reduction, weight
        ctx.save_for_backward(x, target)
        with np.errstate(divide="ignore", invalid="ignore"):
            loss = ((target - 1) * np.maximum(np.log1p(-x), _LOG_FLOOR)
                    - target * np.maximum(np.log(x), _LOG_FLOOR))
        if weight is not None:
            loss = loss * weight
        return reduced(np.asarray(loss, x.dtype), reduction, x.size, x.dtype)

    @staticmethod
    def backward(ctx, g):
        x, t = ctx.saved_tensors
        gs = np.asarray(g, x.dtype) * x.dtype.type(grad_scale(ctx.reduction, x.size))
        if ctx.weight is not None:
            gs = gs * ctx.weight
        gx = gt = None
        with np.errstate(divide="ignore", invalid="ignore"):
            if ctx.needs_input_grad[0]:
                gx = gs * (x - t) / np.maximum(x * (1 - x), x.dtype.type(_BCE_EPS))
            if ctx.needs_input_grad[1]:
                gt = -gs * np.log(x / (1 - x))
        shape = x.shape
        return (None if gx is None else np.broadcast_to(gx, shape).astype(x.dtype),
                None if gt is None else np.broadcast_to(gt, shape).astype(x.dtype))

    @staticmethod
    def vjp(ctx, g):
        """d/dx = g w (x - t) / max(x (1 - x), 1e-12), d/dt = -g w logit(x)."""
        x, t = lift(ctx.inputs[0]), lift(ctx.inputs[1])
        gs = g * grad_scale(ctx.reduction, x._data.size)
        if ctx.weight is not None:
            gs = gs * lift(ctx.weight)
        need_x, need_t = ctx.needs_input_grad
        gx = gt = None
        if need_x:
            gx = (x - t) / (x * (1 - x)).clamp(min=_BCE_EPS) * gs
        if need_t:
            gt = -(log(x) - log1p(-x)) * gs
        return gx, gt


def binary_cross_entropy(input, target, weight=None, reduction: str = "mean") -> Tensor:
    """Binary cross-entropy of probabilities: -w (t log(x) + (1 - t) log(1 - x)), each log
    clamped at -100 (torch.nn.functional.binary_cross_entropy). input must lie in [0, 1]
    (RuntimeError otherwise, as PyTorch) and target must have its shape (ValueError); a
    constant weight broadcasts to it. d/dinput = w (x - t) / max(x (1 - x), 1e-12),
    d/dtarget = -w logit(x)."""
    op = "binary_cross_entropy"
    reduction = _reduction(op, reduction)
    x = float_input(op, input, "input")
    t = lift(target, x)
    if t.shape != x.shape:
        raise ValueError(f"{op}: target of shape {t.shape} differs from input of shape "
                         f"{x.shape}; they must have the same size (as PyTorch)")
    t = target_like(op, x, t)
    w = broadcast_weight(op, "weight", weight, x, RuntimeError)
    xd = x._data
    if not ((xd >= 0) & (xd <= 1)).all():
        raise RuntimeError(f"{op}: all elements of input should be between 0 and 1 "
                           f"(input of shape {x.shape})")
    return BinaryCrossEntropy.apply(x, t, weight=w, reduction=reduction)


# -- kl_div ---------------------------------------------------------------------------------------

_KL_REDUCTIONS = ("mean", "sum", "none", "batchmean")


def kl_div(input, target, reduction: str = "mean", log_target: bool = False) -> Tensor:
    """Kullback-Leibler divergence with input in log space: t (log t - x) (0 where t = 0),
    or e^t (t - x) with ``log_target`` (torch.nn.functional.kl_div). input and target
    broadcast. 'batchmean' divides the sum by input's first size (the true KL divergence
    of a batch); 'mean' by the number of elements, with PyTorch's warning."""
    op = "kl_div"
    reduction = _reduction(op, reduction, _KL_REDUCTIONS)
    x = float_input(op, input, "input")
    t = _float_target(op, target, x)
    _broadcast(op, x, t)
    if reduction == "mean":
        warnings.warn("kl_div: reduction 'mean' divides the total loss by both the batch size "
                      "and the support size; 'batchmean' divides only by the batch size, and "
                      "aligns with the KL div math definition", UserWarning, stacklevel=2)
    if log_target:
        loss = exp(t) * (t - x)
    else:
        td = t._data
        safe = where(lift(td == 0), lift(np.ones((), td.dtype)), t)   # xlogy(t, t): 0 at 0
        loss = t * log(safe) - t * x
    if reduction == "batchmean":
        total = _sum(loss)
        return total / x.shape[0] if x.ndim else total
    return _reduce(loss, reduction)


# -- poisson_nll_loss -----------------------------------------------------------------------------


def poisson_nll_loss(input, target, log_input: bool = True, full: bool = False,
                     eps: float = 1e-8, reduction: str = "mean") -> Tensor:
    """Poisson negative log-likelihood (torch.nn.functional.poisson_nll_loss): e^x - t x
    for a log-rate input (``log_input``), else x - t log(x + eps); ``full`` adds the
    Stirling term t log t - t + log(2 pi t) / 2 where t > 1. input and target broadcast.
    (The deprecated size_average and reduce arguments are not taken.)"""
    op = "poisson_nll_loss"
    reduction = _reduction(op, reduction)
    eps = real(op, "eps", eps)
    x = float_input(op, input, "input")
    t = _float_target(op, target, x)
    _broadcast(op, x, t)
    loss = exp(x) - t * x if log_input else x - t * log(x + eps)
    if full:
        above = lift(t._data > 1)
        safe = where(above, t, lift(np.full((), 2.0, t.dtype)))
        stirling = safe * log(safe) - safe + 0.5 * log(2 * math.pi * safe)
        loss = loss + where(above, stirling, lift(np.zeros((), t.dtype)))
    return _reduce(loss, reduction)


# -- gaussian_nll_loss ----------------------------------------------------------------------------


def _variance(op: str, var, x: Tensor) -> Tensor:
    """var as a tensor that broadcasts against input by PyTorch's rules: input's shape,
    input's shape without its last dim (then a dim of 1 is added), or input's ndim with
    one dim of size 1 where input's differs; ValueError for any other shape or for a
    negative entry."""
    if isinstance(var, int | float) and not isinstance(var, bool):
        if var < 0:
            raise ValueError(f"{op}: var has negative entry/entries (var={var})")
        return lift(np.full(x.shape, var, x.dtype))
    v = lift(var, x)
    if v.dtype.kind not in "biuf":
        raise TypeError(f"{op}: var must be real numbers, got {v.dtype} (shape {v.shape})")
    if (v._data < 0).any():
        raise ValueError(f"{op}: var has negative entry/entries (var of shape {v.shape})")
    if v.shape != x.shape:
        if x.shape[:-1] == v.shape:
            v = unsqueeze(v, -1)
        elif not (x.ndim == v.ndim
                  and sum(b for a, b in zip(x.shape, v.shape) if a != b) == 1):
            raise ValueError(f"{op}: var is of incorrect size: var of shape {v.shape} for "
                             f"input of shape {x.shape} (expected input's shape, input's "
                             f"shape without its last dim, or one dim of size 1)")
    if v.dtype != x.dtype and not v.requires_grad:
        v = Tensor._wrap(np.asarray(v._data, x.dtype), None, 0)
    return v


def gaussian_nll_loss(input, target, var, full: bool = False, eps: float = 1e-6,
                      reduction: str = "mean") -> Tensor:
    """Gaussian negative log-likelihood (torch.nn.functional.gaussian_nll_loss):
    (log v + (x - t)^2 / v) / 2, v = max(var, eps) (the clamp is outside autograd, as
    PyTorch: var's gradient is taken at v as if unclamped); ``full`` adds log(2 pi) / 2.
    var has input's shape, or broadcasts by PyTorch's rules (see ``_variance``)."""
    op = "gaussian_nll_loss"
    x = float_input(op, input, "input")
    t = _float_target(op, target, x)
    v = _variance(op, var, x)
    if not isinstance(reduction, str) or reduction not in REDUCTIONS:
        raise ValueError(f"{op}: {reduction!r} is not valid (expected 'none', 'mean' or "
                         "'sum')")
    _broadcast(op, x, t)
    eps = real(op, "eps", eps)
    vd = v._data
    clamped = np.maximum(vd, vd.dtype.type(eps))
    if (clamped != vd).any():   # var + (max(var, eps) - var): the clamp, var's gradient 1
        v = v + lift(np.where(clamped != vd, clamped - vd, 0).astype(vd.dtype))
    loss = 0.5 * (log(v) + (x - t) ** 2 / v)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)


# -- margin losses (PyTorch's compositions) -------------------------------------------------------


def _zeros_like(x: Tensor) -> Tensor:
    return lift(np.zeros((), x.dtype))


def margin_ranking_loss(input1, input2, target, margin: float = 0.0,
                        reduction: str = "mean") -> Tensor:
    """max(0, -y (x1 - x2) + margin) (torch.nn.functional.margin_ranking_loss): the three
    tensors must have one ndim (RuntimeError, as PyTorch) and broadcast."""
    op = "margin_ranking_loss"
    reduction = _reduction(op, reduction)
    x1 = float_input(op, input1, "input1")
    x2, y = _float_target(op, input2, x1), _float_target(op, target, x1)
    if not x1.ndim == x2.ndim == y.ndim:
        raise RuntimeError(f"{op}: all input tensors should have the same dimension but got "
                           f"sizes: input1: {x1.shape}, input2: {x2.shape}, target: {y.shape}")
    _broadcast(op, x1, x2, ("input1", "input2"))
    _broadcast(op, x1 - x2, y, ("input1 - input2", "target"))
    return _reduce(clamp_min(-y * (x1 - x2) + real(op, "margin", margin), 0.0), reduction)


def hinge_embedding_loss(input, target, margin: float = 1.0, reduction: str = "mean") -> Tensor:
    """x where y = 1, max(0, margin - x) where y = -1 (both terms where y is neither:
    PyTorch's where(y != 1, ...) + where(y != -1, ...)); input and target broadcast
    (torch.nn.functional.hinge_embedding_loss)."""
    op = "hinge_embedding_loss"
    reduction = _reduction(op, reduction)
    x = float_input(op, input, "input")
    y = _float_target(op, target, x)
    _broadcast(op, x, y)
    yd, zero = y._data, _zeros_like(x)
    margin_term = where(lift(yd != 1), clamp_min(real(op, "margin", margin) - x, 0.0), zero)
    return _reduce(margin_term + where(lift(yd != -1), x, zero), reduction)


def soft_margin_loss(input, target, reduction: str = "mean") -> Tensor:
    """log(1 + e^(-y x)) (torch.nn.functional.soft_margin_loss); input and target
    broadcast."""
    op = "soft_margin_loss"
    reduction = _reduction(op, reduction)
    x = float_input(op, input, "input")
    y = _float_target(op, target, x)
    _broadcast(op, x, y)
    return _reduce(softplus(-y * x, threshold=np.inf), reduction)


def multilabel_soft_margin_loss(input, target, weight=None, reduction: str = "mean") -> Tensor:
    """-(t log sigmoid(x) + (1 - t) log sigmoid(-x)), times a constant weight, averaged
    over the last (class) dim (torch.nn.functional.multilabel_soft_margin_loss)."""
    op = "multilabel_soft_margin_loss"
    x = float_input(op, input, "input")
    t = _float_target(op, target, x)
    _broadcast(op, x, t)
    loss = t * softplus(-x, threshold=np.inf) + (1 - t) * softplus(x, threshold=np.inf)
    w = constant_weight(op, "weight", weight, x)
    if w is not None:
        _broadcast(op, loss, lift(w), ("loss", "weight"))
        loss = loss * lift(w)
    loss = _sum(loss, x.ndim - 1) / x.shape[-1] if x.ndim else loss
    if not isinstance(reduction, str) or reduction not in REDUCTIONS:
        raise ValueError(f"{op}: {reduction!r} is not valid (expected 'none', 'mean' or "
                         "'sum')")
    return _reduce(loss, reduction)


_COSINE_EPS = float(np.float32(1e-12))   # PyTorch's EPSILON on the squared norms (a float)


def cosine_embedding_loss(input1, input2, target, margin: float = 0.0,
                          reduction: str = "mean") -> Tensor:
    """1 - cos(x1, x2) where y = 1, max(0, cos(x1, x2) - margin) where y = -1, 0
    elsewhere, the cosine along the last dim with 1e-12 added to each squared norm
    (torch.nn.functional.cosine_embedding_loss). A 1-D target takes [N, D] inputs, a 0-d
    one [D] inputs (RuntimeError otherwise, as PyTorch)."""
    op = "cosine_embedding_loss"
    reduction = _reduction(op, reduction)
    x1 = float_input(op, input1, "input1")
    x2, y = _float_target(op, input2, x1), _float_target(op, target, x1)
    if y.ndim > 1:
        raise RuntimeError(f"{op}: 0D or 1D target tensor expected, multi-target not "
                           f"supported (target of shape {y.shape})")
    if x1.ndim != y.ndim + 1 or x2.ndim != y.ndim + 1:
        raise RuntimeError(f"{op}: {y.ndim}D target tensor expects {y.ndim + 1}D input "
                           f"tensors, but found inputs with sizes {x1.shape} and {x2.shape}")
    _broadcast(op, x1, x2, ("input1", "input2"))
    dim = y.ndim
    prod = _sum(x1 * x2, dim)
    denom = sqrt((_sum(x1 * x1, dim) + _COSINE_EPS) * (_sum(x2 * x2, dim) + _COSINE_EPS))
    cos = prod / denom
    _broadcast(op, cos, y, ("the cosines", "target"))
    yd, zero = y._data, _zeros_like(x1)
    loss = (where(lift(yd == 1), 1 - cos, zero)
            + where(lift(yd == -1), clamp_min(cos - real(op, "margin", margin), 0.0), zero))
    return _reduce(loss, reduction)


def _pairwise_distance(a: Tensor, b: Tensor, p: float, eps: float) -> Tensor:
    """PyTorch's pairwise_distance: the p-norm of a - b + eps along the last dim."""
    return norm(a - b + eps, p, max(a.ndim, b.ndim) - 1)


def triplet_margin_loss(anchor, positive, negative, margin: float = 1.0, p: float = 2,
                        eps: float = 1e-6, swap: bool = False,
                        reduction: str = "mean") -> Tensor:
    """max(0, margin + d(a, p) - d(a, n)), d the p-norm distance of pairwise_distance
    along the last dim; ``swap`` takes min(d(a, n), d(p, n)) for the negative distance
    (torch.nn.functional.triplet_margin_loss). margin must be > 0 (ValueError) and the
    three tensors must have one ndim (RuntimeError), as PyTorch."""
    op = "triplet_margin_loss"
    reduction = _reduction(op, reduction)
    margin = real(op, "margin", margin)
    if margin <= 0:
        raise ValueError(f"{op}: margin must be greater than 0, got {margin}")
    a = float_input(op, anchor, "anchor")
    pos, neg = _float_target(op, positive, a), _float_target(op, negative, a)
    if not a.ndim == pos.ndim == neg.ndim:
        raise RuntimeError(f"{op}: the anchor, positive, and negative tensors are expected to "
                           f"have the same number of dimensions, but got: anchor {a.ndim}D "
                           f"{a.shape}, positive {pos.ndim}D {pos.shape}, and negative "
                           f"{neg.ndim}D {neg.shape} inputs")
    _broadcast(op, a, pos, ("anchor", "positive"))
    _broadcast(op, a, neg, ("anchor", "negative"))
    p, eps = real(op, "p", p), real(op, "eps", eps)
    d_pos = _pairwise_distance(a, pos, p, eps)
    d_neg = _pairwise_distance(a, neg, p, eps)
    if swap:
        d_neg = minimum(d_neg, _pairwise_distance(pos, neg, p, eps))
    return _reduce(clamp_min(margin + d_pos - d_neg, 0.0), reduction)
