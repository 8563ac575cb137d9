"""The classification losses, PyTorch's semantics and ``reduction='mean'|'sum'|'none'``:
binary_cross_entropy_with_logits, nll_loss and cross_entropy. The math of every backward is
in docs/derivations.md#losses and in the docstring of ``nbgrad/kernels/loss.py``; the
reduction they share is ops/_loss_reduction.py.

cross_entropy of [N, C] logits with integer targets (and no class weights, ignored
targets or label smoothing) fuses log_softmax and the negative log-likelihood: the forward
keeps each row's max and shifted log-sum, and the backward is one pass g_i (softmax(x_i) -
onehot(t_i)). Every other case is PyTorch's own composition, nll_loss(log_softmax(x, 1))
plus the label-smoothing term, or -sum(w t log_softmax(x, 1)) for class probabilities.

Class weights and pos_weight are constants (PyTorch does not differentiate them either);
targets are differentiable where PyTorch's are: float targets of
binary_cross_entropy_with_logits and cross_entropy with class probabilities.
"""

from __future__ import annotations

import math

import numpy as np

from ..function import Function, Sample, register
from ..kernels import loss as loss_kernels
from ..runtime.jit import for_work
from ..tensor import Tensor, lift
from ._args import float_input, real
from ._loss_reduction import (
    REDUCTIONS,
    broadcast_weight,
    check_reduction,
    constant_weight,
    float64_sum,
    grad_scale,
    mean_factor,
    reduced,
    target_like,
    upstream,
)
from .activation import log_softmax, sigmoid, softmax, softplus
from .select import where
from .shape import reshape
from .table import flat as _flat

# -- binary_cross_entropy_with_logits -----------------------------------------------------------


def _bce_samples(rng):
    for reduction in REDUCTIONS:
        yield Sample(rng.standard_normal((3, 4)) * 2, rng.uniform(0, 1, (3, 4)),
                     reduction=reduction, label=reduction)
    yield Sample(rng.standard_normal((3, 4)) * 3, rng.uniform(0, 1, (3, 4)),
                 weight=rng.uniform(0.5, 2, 4), pos_weight=rng.uniform(0.5, 3, 4),
                 reduction="mean", label="weight and pos_weight")
    yield Sample(rng.standard_normal((2, 3)), rng.uniform(0, 1, (2, 3)),
                 pos_weight=rng.uniform(0.5, 3, (2, 1)), reduction="none",
                 label="pos_weight per row")
    yield Sample(rng.standard_normal(5), rng.uniform(-0.5, 1.5, 5),
                 weight=rng.uniform(0.5, 2, 5), reduction="sum", label="targets outside [0, 1]")


def _spread(a: np.ndarray | None, x: np.ndarray) -> tuple[np.ndarray, int]:
    """A weight broadcast to ``x``'s elements as a flat array and its step (a missing
    weight is the one element 1, step 0)."""
    if a is None:
        return np.ones(1, x.dtype), 0
    return _flat(np.broadcast_to(np.asarray(a, x.dtype), x.shape)), 1


@register("binary_cross_entropy_with_logits", samples=_bce_samples)
class BCEWithLogits(Function):
    @staticmethod
    def forward(ctx, x, target, weight=None, pos_weight=None, reduction="mean"):
        xf, tf = _flat(x), _flat(target)
        ctx.terms = (*_spread(weight, x), *_spread(pos_weight, x), pos_weight is not None)
        ctx.reduction, ctx.weight, ctx.pos_weight = reduction, weight, pos_weight
        ctx.save_for_backward(xf, tf)
        out = np.empty(x.shape, x.dtype)
        for_work(loss_kernels.bce_logits_forward, xf.size)(xf, tf, *ctx.terms,
                                                           out.reshape(-1))
        return reduced(out, reduction, xf.size, x.dtype)

    @staticmethod
    def backward(ctx, g):
        x, t = ctx.saved_tensors
        shape = ctx.input_arrays[0].shape
        gf, step = upstream(g, x.dtype)
        scale = grad_scale(ctx.reduction, x.size)
        gx = gt = None
        if ctx.needs_input_grad[0]:
            gx = np.empty(shape, x.dtype)
            for_work(loss_kernels.bce_logits_backward_input, x.size)(
                gf, step, x, t, *ctx.terms, scale, gx.reshape(-1))
        if ctx.needs_input_grad[1]:
            gt = np.empty(shape, x.dtype)
            for_work(loss_kernels.bce_logits_backward_target, x.size)(
                gf, step, x, *ctx.terms, scale, gt.reshape(-1))
        return gx, gt

    @staticmethod
    def vjp(ctx, g):
        """d/dx = w (lw sigmoid(x) - pw t), lw = 1 + (pw - 1) t; d/dt = w (pw sp(-x) -
        sp(x)), sp = softplus without its linear branch (-w x without pos_weight)."""
        x, t = lift(ctx.inputs[0]), lift(ctx.inputs[1])
        weight, pos_weight = ctx.weight, ctx.pos_weight
        gs = g * grad_scale(ctx.reduction, x._data.size)
        if weight is not None:
            gs = gs * lift(np.asarray(weight, x.dtype))
        if pos_weight is None:
            gx = (sigmoid(x) - t) * gs
            gt = -x * gs
        else:
            pw = lift(np.asarray(pos_weight, x.dtype))
            gx = ((1 + (pw - 1) * t) * sigmoid(x) - pw * t) * gs
            gt = (pw * softplus(-x, threshold=np.inf) - softplus(x, threshold=np.inf)) * gs
        need_x, need_t = ctx.needs_input_grad
        return (gx if need_x else None), (gt if need_t else None)


def binary_cross_entropy_with_logits(input, target, weight=None, reduction: str = "mean",
                                     pos_weight=None) -> Tensor:
    """Binary cross-entropy of sigmoid(input) against target, from the logits:
    w ((1 - t) x + lw log(1 + e^-x)), lw = 1 + (pos_weight - 1) t (lw = 1 without
    pos_weight), which is max(x, 0) - x t + log(1 + e^-|x|) when unweighted: no overflow
    for any logit. weight broadcasts to the input's shape, pos_weight (one per class,
    along the last dim) too; neither is differentiable. target must have the input's
    shape and can require grad (d/dt = -w x without pos_weight)."""
    op = "binary_cross_entropy_with_logits"
    reduction = check_reduction(op, reduction)
    x = float_input(op, input, "input")
    t = target_like(op, x, target)
    w = broadcast_weight(op, "weight", weight, x)
    pw = broadcast_weight(op, "pos_weight", pos_weight, x)
    return BCEWithLogits.apply(x, t, weight=w, pos_weight=pw, reduction=reduction)


# -- nll_loss -------------------------------------------------------------------------------------


def _class_targets(rng, n, c, spatial=(), ignored=0):
    t = rng.integers(0, c, (n, *spatial))
    t.reshape(-1)[rng.permutation(t.size)[:ignored]] = -100
    return t


def _nll_samples(rng):
    for reduction in REDUCTIONS:
        yield Sample(rng.standard_normal((4, 5)), _class_targets(rng, 4, 5),
                     reduction=reduction, label=reduction)
    yield Sample(rng.standard_normal((5, 3)), _class_targets(rng, 5, 3, ignored=2),
                 weight=rng.uniform(0.5, 2, 3), reduction="mean", label="weight, ignored")
    yield Sample(rng.standard_normal((2, 3, 2, 2)), _class_targets(rng, 2, 3, (2, 2), 1),
                 weight=rng.uniform(0.5, 2, 3), reduction="none", label="[N, C, d1, d2]")
    yield Sample(rng.standard_normal((2, 4, 3)), _class_targets(rng, 2, 4, (3,), 1),
                 ignore_index=-100, reduction="mean", label="[N, C, d], ignored")
    yield Sample(rng.standard_normal(4), np.array(2), reduction="none", label="[C]")


def _class_shape(shape: tuple) -> tuple[int, int, int]:
    """[N, C, d1, ...] (or [C]) as [N, C, D], D = d1 d2 ... (1 without spatial dims)."""
    if len(shape) == 1:
        return 1, shape[0], 1
    return shape[0], shape[1], math.prod(shape[2:])


def _class_view(x: np.ndarray) -> np.ndarray:
    """``x`` of shape [N, C, d1, ...] (or [C]) as a C-contiguous [N, C, D] array."""
    return np.ascontiguousarray(x).reshape(_class_shape(x.shape))


@register("nll_loss", samples=_nll_samples)
class NLLLoss(Function):
    @staticmethod
    def forward(ctx, x, target, weight=None, ignore_index=-100, reduction="mean"):
        x3 = _class_view(x)
        t2 = np.ascontiguousarray(target, dtype=np.int64).reshape(x3.shape[0], x3.shape[2])
        w = np.ones(x3.shape[1], x.dtype) if weight is None else np.ascontiguousarray(
            weight, dtype=x.dtype)
        loss = np.empty(t2.shape, x.dtype)
        picked = np.empty(t2.shape, x.dtype)
        for_work(loss_kernels.nll_forward, x3.size)(x3, t2, w, ignore_index, loss, picked)
        ctx.reduction, ctx.ignore_index = reduction, ignore_index
        ctx.total_weight = float64_sum(picked)
        ctx.save_for_backward(t2, w)
        return reduced(loss.reshape(np.shape(target)), reduction, ctx.total_weight, x.dtype)

    @staticmethod
    def _unit_grad(ctx, g: np.ndarray) -> np.ndarray:
        """The gradient for upstream g: -w[t] g scale at each target, 0 elsewhere."""
        t2, w = ctx.saved_tensors
        shape = ctx.input_arrays[0].shape
        out = np.empty(_class_shape(shape), w.dtype)
        gf, step = upstream(g, w.dtype)
        for_work(loss_kernels.nll_backward, out.size)(
            gf, step, t2, w, ctx.ignore_index,
            grad_scale(ctx.reduction, ctx.total_weight), out)
        return out.reshape(shape)

    @staticmethod
    def backward(ctx, g):
        return NLLLoss._unit_grad(ctx, g), None

    @staticmethod
    def vjp(ctx, g):
        """Linear in x: g (in the class layout) times the constant gradient for g = 1."""
        shape = ctx.input_arrays[0].shape
        unit = lift(NLLLoss._unit_grad(ctx, np.ones((), ctx.saved_tensors[1].dtype)))
        if ctx.reduction == "none" and len(shape) >= 2:
            g = reshape(g, (shape[0], 1, *shape[2:]))
        return g * unit, None


def _class_weight(op: str, weight, x: Tensor, x_name: str) -> np.ndarray | None:
    """Class weights: None, or C values (C = the class dim of ``x``)."""
    w = constant_weight(op, "weight", weight, x)
    c = x.shape[1] if x.ndim >= 2 else x.shape[0]
    if w is not None and w.shape != (c,):
        raise ValueError(f"{op}: weight must hold one value per class, shape ({c},) for "
                         f"{x_name} of shape {x.shape}, got shape {w.shape}")
    return w


def _index_targets(op: str, x: Tensor, target: Tensor, ignore_index: int,
                   x_name: str) -> np.ndarray:
    """Integer class targets for ``x`` [N, C, d1, ...] ([N, d1, ...]) or [C] (0-d), each in
    [0, C) or equal to ignore_index; errors name the first bad target."""
    if target.dtype.kind not in "iu":
        raise TypeError(f"{op}: target must hold integer class indices, got {target.dtype} "
                        f"(shape {target.shape})")
    need = () if x.ndim == 1 else (x.shape[0], *x.shape[2:])
    if target.shape != need:
        raise ValueError(f"{op}: target has shape {target.shape} but {x_name} {x.shape} "
                         f"needs {need}")
    t = target._data
    c = x.shape[1] if x.ndim >= 2 else x.shape[0]
    bad = np.flatnonzero(((t < 0) | (t >= c)) & (t != ignore_index))
    if bad.size:
        at = np.unravel_index(int(bad[0]), t.shape)
        raise ValueError(f"{op}: target[{', '.join(str(int(i)) for i in at)}] = "
                         f"{int(t[at])} is out of range for C = {c} classes ({x_name} shape "
                         f"{x.shape}, ignore_index {ignore_index})")
    return t


def _ignore_index(op: str, ignore_index) -> int:
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int | np.integer):
        raise TypeError(f"{op}: ignore_index must be an int, got {ignore_index!r}")
    return int(ignore_index)


def nll_loss(input, target, weight=None, ignore_index: int = -100,
             reduction: str = "mean") -> Tensor:
    """Negative log-likelihood: -weight[t] input[n, t, d...] for each target t =
    target[n, d...], from log-probabilities ``input`` of shape [N, C], [N, C, d1, ...]
    (class dim 1) or [C] (a 0-d target). Targets equal to ``ignore_index`` contribute 0;
    'mean' divides by the summed weight of the other targets (NaN when every target is
    ignored, as PyTorch). ``weight``: one constant per class."""
    op = "nll_loss"
    reduction = check_reduction(op, reduction)
    x = float_input(op, input, "input")
    if x.ndim == 0:
        raise ValueError(f"{op}: input must be [N, C], [N, C, d1, ...] or [C], got shape ()")
    ignore_index = _ignore_index(op, ignore_index)
    t = _index_targets(op, x, lift(target), ignore_index, "input")
    w = _class_weight(op, weight, x, "input")
    return NLLLoss.apply(x, t, weight=w, ignore_index=ignore_index, reduction=reduction)


# -- cross_entropy --------------------------------------------------------------------------


def _ce_samples(rng):
    for reduction in REDUCTIONS:
        yield Sample(rng.standard_normal((4, 5)) * 2, rng.integers(0, 5, 4),
                     reduction=reduction, label=reduction)
    yield Sample(rng.standard_normal((1, 3)), np.array([2]), reduction="mean",
                 label="one row")


@register("cross_entropy", samples=_ce_samples)
class CrossEntropy(Function):
    """The fused [N, C] case: integer targets, no weights, ignored targets or smoothing."""

    @staticmethod
    def forward(ctx, logits, target, reduction="mean"):
        x = np.ascontiguousarray(logits)
        t = np.ascontiguousarray(target, dtype=np.int64)
        check_classes(t, x.shape)
        loss, shift, log_sum = for_work(loss_kernels.cross_entropy_forward, x.size)(x, t)
        ctx.reduction = reduction
        ctx.save_for_backward(x, t, shift, log_sum)
        return reduced(loss, reduction, loss.size, logits.dtype)

    @staticmethod
    def backward(ctx, g):
        x, t, shift, log_sum = ctx.saved_tensors
        rows = cross_entropy_rows(g, ctx.reduction, x.shape[0], x.dtype)
        gx = np.empty_like(x)
        for_work(loss_kernels.cross_entropy_backward, x.size)(rows, x, t, shift, log_sum, gx)
        return gx, None

    @staticmethod
    def vjp(ctx, g):
        """g (softmax(x) - onehot(t)) per row, with nb.softmax of the input: differentiable
        again (the Hessian of each row is diag(p) - p p^T)."""
        x, t = lift(ctx.inputs[0]), ctx.inputs[1]
        t = np.asarray(t._data if isinstance(t, Tensor) else t, dtype=np.int64)
        n, c = x.shape
        d = softmax(x, axis=1) - lift(np.eye(c, dtype=x.dtype)[t])
        if ctx.reduction == "none":
            return g.reshape((n, 1)) * d, None
        return d * (g * mean_factor(ctx.reduction, n)), None



def cross_entropy_rows(g: np.ndarray, reduction: str, n: int, dtype: np.dtype) -> np.ndarray:
    """Each row's factor on its gradient softmax(x_r) - onehot(t_r), from the loss's
    gradient ``g``: g itself for 'none', g / n for 'mean', g for 'sum'."""
    if reduction == "none":
        return np.ascontiguousarray(g, dtype=dtype)
    return np.full(n, float(g.reshape(())) * mean_factor(reduction, n), dtype=dtype)


def check_classes(t: np.ndarray, shape: tuple) -> None:
    """Every target a class of the [N, C] logits: ``cross_entropy`` sends only such
    targets here, but a step compiled by nb.compile calls the op again with new ones
    (one equal to ignore_index included), and the kernel reads x[n, t[n]]."""
    bad = np.flatnonzero((t < 0) | (t >= shape[1]))
    if bad.size:
        raise ValueError(f"cross_entropy: target[{int(bad[0])}] = {int(t[bad[0]])} is out of "
                         f"range for C = {shape[1]} classes (logits shape {shape}); a step "
                         "compiled with every target a class takes them all to be (run it "
                         "eagerly for targets equal to ignore_index)")


def _ce_general(x: Tensor, target, weight: np.ndarray | None, ignore_index: int,
                reduction: str, label_smoothing: float) -> Tensor:
    """PyTorch's composition for x [N, C, d1, ...]: nll_loss(log_softmax(x, 1)) mixed with
    the label-smoothing term for class indices (a Tensor ``target`` holds probabilities)."""
    c = x.shape[1]
    logp = log_softmax(x, 1)
    w = None if weight is None else lift(weight.reshape((1, c) + (1,) * (x.ndim - 2)))
    if isinstance(target, Tensor):
        # -sum_c w_c t_c log p_c per position; 'mean' divides by the number of positions
        t = target if label_smoothing == 0 else target * (1 - label_smoothing) + \
            label_smoothing / c
        terms = logp * t if w is None else logp * t * w
        per = -terms.sum(1)
        return _reduced_tensor(per, reduction, per.numel())
    nll = NLLLoss.apply(logp, target, weight=weight, ignore_index=ignore_index,
                        reduction=reduction)
    if label_smoothing == 0:
        return nll
    # the smoothing term -sum_c w_c log p_c, 0 at ignored targets; 'mean' divides by the
    # summed weight of the targets kept, as the nll term does
    kept = target != ignore_index
    smooth = where(kept, -(logp if w is None else logp * w).sum(1), 0.0)
    count = kept.sum() if weight is None else float64_sum(weight[target[kept]])
    smooth = _reduced_tensor(smooth, reduction, float(count))
    return (1 - label_smoothing) * nll + smooth * (label_smoothing / c)


def _reduced_tensor(loss: Tensor, reduction: str, count: float) -> Tensor:
    """``loss`` reduced with nbgrad ops (differentiable any number of times): itself, its
    sum, or its sum / count (0 / 0 is NaN)."""
    if reduction == "none":
        return loss
    total = loss.sum()
    return total if reduction == "sum" else total / float(count)


def _ce_targets(x: Tensor, target, ignore_index: int):
    """cross_entropy's target as class indices (an ndarray) or as probabilities (a Tensor
    of ``x``'s shape and dtype)."""
    t = lift(target)
    if t.dtype.kind == "f":
        if t.shape != x.shape:
            need = () if x.ndim == 1 else (x.shape[0], *x.shape[2:])
            raise TypeError(f"cross_entropy: target must hold integer class indices of shape "
                            f"{need} or class probabilities of the logits' shape {x.shape}, "
                            f"got {t.dtype} of shape {t.shape}")
        if ignore_index != -100:
            raise ValueError("cross_entropy: ignore_index is not supported for class "
                             "probabilities (a float target), as in PyTorch")
        return target_like("cross_entropy", x, t, "logits")
    return _index_targets("cross_entropy", x, t, ignore_index, "logits")


def cross_entropy(input, target, weight=None, ignore_index: int = -100,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """Cross-entropy of logits ``input`` [N, C], [N, C, d1, ...] (class dim 1) or [C],
    PyTorch's ``F.cross_entropy``:

    * integer class targets [N] ([N, d1, ...], or 0-d for [C]):
      -w[t] log_softmax(input, 1)[n, t, ...], 0 where t == ignore_index; 'mean' divides
      by the summed weight w[t] of the targets not ignored (NaN if all are ignored);
    * class probabilities (a float target of the input's shape, differentiable):
      -sum_c w[c] t[n, c, ...] log_softmax(input, 1)[n, c, ...]; 'mean' divides by the
      number of positions N d1 ...;
    * ``label_smoothing`` eps in [0, 1] mixes in the uniform distribution: probabilities
      become t (1 - eps) + eps / C; for indices the loss is (1 - eps) nll + eps / C times
      -sum_c w[c] log_softmax(input, 1)[n, c, ...] (reduced like the nll term).

    ``weight`` (one constant per class) is not differentiated. [N, C] logits with integer
    targets and no weight, smoothing or ignored target take one fused kernel (forward
    log sum_j e^(x_ij - m_i) - (x_it - m_i), backward g_i (softmax(x_i) - onehot(t_i)));
    the rest is log_softmax, nll_loss and nbgrad ops, as PyTorch composes it."""
    reduction = check_reduction("cross_entropy", reduction)
    x = float_input("cross_entropy", input, "logits")
    ignore_index = _ignore_index("cross_entropy", ignore_index)
    if weight is None and label_smoothing == 0 and x.ndim == 2:
        t = target._data if isinstance(target, Tensor) else np.asarray(target)
        if t.dtype.kind in "iu" and t.shape == (x.shape[0],):
            c = x.shape[1]
            out = (t < 0) | (t >= c)
            if not out.any():
                if not 0 <= ignore_index < c or not (t == ignore_index).any():
                    # the tensor itself when there is one: nb.compile then reads each
                    # call's targets from it
                    return CrossEntropy.apply(x, target if isinstance(target, Tensor) else t,
                                              reduction=reduction)
            elif not (t[out] == ignore_index).all():
                _index_targets("cross_entropy", x, lift(t), ignore_index, "logits")
    if x.ndim == 0 or x.ndim == 1 and not _unbatched_target(target):
        raise ValueError(f"cross_entropy: logits must be [N, C], got shape {x.shape} with "
                         f"target shape {np.shape(_plain_data(target))} ([N, C, d1, ...] "
                         "works too, and [C] with a 0-d class index or [C] probabilities)")
    label_smoothing = real("cross_entropy", "label_smoothing", label_smoothing)
    if not 0 <= label_smoothing <= 1:
        raise ValueError(f"cross_entropy: label_smoothing must be between 0 and 1, got "
                         f"{label_smoothing}")
    w = _class_weight("cross_entropy", weight, x, "logits")
    t = _ce_targets(x, target, ignore_index)
    if x.ndim == 1:      # unbatched [C]: a batch of one, the loss of 'none' 0-d
        t = reshape(t, (1, -1)) if isinstance(t, Tensor) else t.reshape(1)
        loss = _ce_general(reshape(x, (1, -1)), t, w, ignore_index, reduction,
                           label_smoothing)
        return reshape(loss, ()) if reduction == "none" else loss
    return _ce_general(x, t, w, ignore_index, reduction, label_smoothing)


def _plain_data(value):
    return value._data if isinstance(value, Tensor) else value


def _unbatched_target(target) -> bool:
    """A target for unbatched [C] logits: a 0-d class index or 1-D probabilities."""
    t = np.asarray(_plain_data(target))
    return (t.ndim == 0 and t.dtype.kind in "iu") or (t.ndim == 1 and t.dtype.kind == "f")


__all__ = ["binary_cross_entropy_with_logits", "cross_entropy", "nll_loss"]
