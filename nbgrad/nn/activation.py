"""Activations and losses as modules: each calls the nbgrad function of the same name.

``inplace=True`` is accepted for code ported from PyTorch and computes out of place (the
values are the same; nbgrad's kernels never write into their inputs)."""

from __future__ import annotations

from typing import Any

from ..ops import activation as act
from ..ops import loss
from ..tensor import Tensor
from .module import Module


class ReLU(Module):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        return act.relu(x)


class Tanh(Module):
    def forward(self, x: Tensor) -> Tensor:
        return act.tanh(x)


class Sigmoid(Module):
    def forward(self, x: Tensor) -> Tensor:
        return act.sigmoid(x)


class SiLU(Module):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        return act.silu(x)


class LeakyReLU(Module):
    def __init__(self, negative_slope: float = 0.01, inplace: bool = False) -> None:
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: Tensor) -> Tensor:
        return act.leaky_relu(x, self.negative_slope)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}"


class ELU(Module):
    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.alpha = alpha

    def forward(self, x: Tensor) -> Tensor:
        return act.elu(x, self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}"


class GELU(Module):
    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return act.gelu(x, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Softplus(Module):
    def __init__(self, beta: float = 1.0, threshold: float = 20.0) -> None:
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, x: Tensor) -> Tensor:
        return act.softplus(x, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class Softmax(Module):
    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return act.softmax(x, -1 if self.dim is None else self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    def forward(self, x: Tensor) -> Tensor:
        return act.log_softmax(x, -1 if self.dim is None else self.dim)


class MSELoss(Module):
    def __init__(self, reduction: str = "mean") -> None:
        super().__init__()
        self.reduction = reduction

    def forward(self, pred: Tensor, target: Any) -> Tensor:
        return loss.mse_loss(pred, target, self.reduction)


class L1Loss(Module):
    def __init__(self, reduction: str = "mean") -> None:
        super().__init__()
        self.reduction = reduction

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return loss.l1_loss(input, target, self.reduction)


class SmoothL1Loss(Module):
    def __init__(self, reduction: str = "mean", beta: float = 1.0) -> None:
        super().__init__()
        self.reduction, self.beta = reduction, beta

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return loss.smooth_l1_loss(input, target, self.reduction, self.beta)

    def extra_repr(self) -> str:
        return f"beta={self.beta}"


class HuberLoss(Module):
    def __init__(self, reduction: str = "mean", delta: float = 1.0) -> None:
        super().__init__()
        self.reduction, self.delta = reduction, delta

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return loss.huber_loss(input, target, self.reduction, self.delta)

    def extra_repr(self) -> str:
        return f"delta={self.delta}"


def _buffer(value: Any) -> Tensor | None:
    """A weight argument as a constant Tensor buffer (None stays None), as PyTorch's
    losses keep ``weight`` and ``pos_weight``: saved in state_dict, cast by ``to``."""
    if value is None:
        return None
    return value.detach() if isinstance(value, Tensor) else Tensor(value)


class BCEWithLogitsLoss(Module):
    """binary_cross_entropy_with_logits; ``weight`` and ``pos_weight`` are buffers."""

    def __init__(self, weight: Any = None, reduction: str = "mean",
                 pos_weight: Any = None) -> None:
        super().__init__()
        self.register_buffer("weight", _buffer(weight))
        self.register_buffer("pos_weight", _buffer(pos_weight))
        self.reduction = reduction

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return loss.binary_cross_entropy_with_logits(input, target, self.weight,
                                                     self.reduction, self.pos_weight)


class NLLLoss(Module):
    """nll_loss; the class ``weight`` is a buffer."""

    def __init__(self, weight: Any = None, ignore_index: int = -100,
                 reduction: str = "mean") -> None:
        super().__init__()
        self.register_buffer("weight", _buffer(weight))
        self.ignore_index, self.reduction = ignore_index, reduction

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return loss.nll_loss(input, target, self.weight, self.ignore_index, self.reduction)

    def extra_repr(self) -> str:
        return f"ignore_index={self.ignore_index}, reduction={self.reduction!r}"


class CrossEntropyLoss(NLLLoss):
    """cross_entropy; the class ``weight`` is a buffer."""

    def __init__(self, weight: Any = None, ignore_index: int = -100, reduction: str = "mean",
                 label_smoothing: float = 0.0) -> None:
        super().__init__(weight, ignore_index, reduction)
        self.label_smoothing = label_smoothing

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return loss.cross_entropy(input, target, self.weight, self.ignore_index,
                                  self.reduction, self.label_smoothing)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, label_smoothing={self.label_smoothing}"
