"""Loss modules for the losses of ops/loss_extra.py, with PyTorch's constructor arguments:
BCELoss, KLDivLoss, PoissonNLLLoss, GaussianNLLLoss, MarginRankingLoss,
HingeEmbeddingLoss, SoftMarginLoss, MultiLabelSoftMarginLoss, CosineEmbeddingLoss and
TripletMarginLoss. Each calls the function of the
same name; the deprecated ``size_average`` / ``reduce`` pair is mapped to ``reduction``
as PyTorch does (with its warning)."""

from __future__ import annotations

import warnings
from typing import Any

from ..ops import loss_extra
from ..tensor import Tensor
from .activation import _buffer
from .module import Module


def _legacy_reduction(size_average: bool | None, reduce: bool | None, reduction: str) -> str:
    """PyTorch's ``_Reduction.legacy_get_string``: either legacy flag given overrides
    ``reduction`` (reduce=False: 'none'; else size_average=False: 'sum'; else 'mean')."""
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    new = "none" if not reduce else ("mean" if size_average else "sum")
    warnings.warn(f"size_average and reduce args will be deprecated, please use "
                  f"reduction='{new}' instead.", UserWarning, stacklevel=3)
    return new


class _WeightedLoss(Module):
    """A loss of (input, target) with a ``weight`` buffer: the function in ``loss``."""

    loss: Any

    def __init__(self, weight: Any = None, size_average: bool | None = None,
                 reduce: bool | None = None, reduction: str = "mean") -> None:
        super().__init__()
        self.register_buffer("weight", _buffer(weight))
        self.reduction = _legacy_reduction(size_average, reduce, reduction)

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return type(self).loss(input, target, self.weight, self.reduction)


class BCELoss(_WeightedLoss):
    """binary_cross_entropy; ``weight`` is a buffer."""

    loss = staticmethod(loss_extra.binary_cross_entropy)


class KLDivLoss(Module):
    def __init__(self, size_average: bool | None = None, reduce: bool | None = None,
                 reduction: str = "mean", log_target: bool = False) -> None:
        super().__init__()
        self.reduction = _legacy_reduction(size_average, reduce, reduction)
        self.log_target = log_target

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return loss_extra.kl_div(input, target, self.reduction, self.log_target)


class PoissonNLLLoss(Module):
    def __init__(self, log_input: bool = True, full: bool = False,
                 size_average: bool | None = None, eps: float = 1e-8,
                 reduce: bool | None = None, reduction: str = "mean") -> None:
        super().__init__()
        self.log_input, self.full, self.eps = log_input, full, eps
        self.reduction = _legacy_reduction(size_average, reduce, reduction)

    def forward(self, log_input: Tensor, target: Any) -> Tensor:
        return loss_extra.poisson_nll_loss(log_input, target, self.log_input, self.full,
                                           self.eps, self.reduction)


class GaussianNLLLoss(Module):
    def __init__(self, *, full: bool = False, eps: float = 1e-6,
                 reduction: str = "mean") -> None:
        super().__init__()
        self.full, self.eps, self.reduction = full, eps, reduction

    def forward(self, input: Tensor, target: Any, var: Any) -> Tensor:
        return loss_extra.gaussian_nll_loss(input, target, var, self.full, self.eps,
                                            self.reduction)


class _PairMarginLoss(Module):
    """A loss of (input1, input2, target) with a margin: the function in ``loss``."""

    loss: Any

    def __init__(self, margin: float = 0.0, size_average: bool | None = None,
                 reduce: bool | None = None, reduction: str = "mean") -> None:
        super().__init__()
        self.margin = margin
        self.reduction = _legacy_reduction(size_average, reduce, reduction)

    def forward(self, input1: Tensor, input2: Any, target: Any) -> Tensor:
        return type(self).loss(input1, input2, target, self.margin, self.reduction)


class MarginRankingLoss(_PairMarginLoss):
    loss = staticmethod(loss_extra.margin_ranking_loss)


class HingeEmbeddingLoss(Module):
    def __init__(self, margin: float = 1.0, size_average: bool | None = None,
                 reduce: bool | None = None, reduction: str = "mean") -> None:
        super().__init__()
        self.margin = margin
        self.reduction = _legacy_reduction(size_average, reduce, reduction)

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return loss_extra.hinge_embedding_loss(input, target, self.margin, self.reduction)


class SoftMarginLoss(Module):
    def __init__(self, size_average: bool | None = None, reduce: bool | None = None,
                 reduction: str = "mean") -> None:
        super().__init__()
        self.reduction = _legacy_reduction(size_average, reduce, reduction)

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return loss_extra.soft_margin_loss(input, target, self.reduction)


class MultiLabelSoftMarginLoss(_WeightedLoss):
    """multilabel_soft_margin_loss; ``weight`` is a buffer."""

    loss = staticmethod(loss_extra.multilabel_soft_margin_loss)


class CosineEmbeddingLoss(_PairMarginLoss):
    loss = staticmethod(loss_extra.cosine_embedding_loss)


class TripletMarginLoss(Module):
    def __init__(self, margin: float = 1.0, p: float = 2.0, eps: float = 1e-6,
                 swap: bool = False, size_average: bool | None = None,
                 reduce: bool | None = None, reduction: str = "mean") -> None:
        super().__init__()
        self.margin, self.p, self.eps, self.swap = margin, p, eps, swap
        self.reduction = _legacy_reduction(size_average, reduce, reduction)

    def forward(self, anchor: Tensor, positive: Any, negative: Any) -> Tensor:
        return loss_extra.triplet_margin_loss(anchor, positive, negative, self.margin,
                                              self.p, self.eps, self.swap, self.reduction)
