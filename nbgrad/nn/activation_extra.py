"""Modules for the activations of ops/activation_extra.py, with PyTorch's constructor
arguments and reprs. ``inplace=True`` is accepted for code ported from PyTorch and computes
out of place (the values are the same)."""

from __future__ import annotations

from ..ops import activation_extra as act
from ..tensor import Tensor
from .module import Module


class _Inplace(Module):
    """An activation with PyTorch's ``inplace`` flag (shown in the repr when set)."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class Hardswish(_Inplace):
    def forward(self, input: Tensor) -> Tensor:
        return act.hardswish(input)

    def extra_repr(self) -> str:   # PyTorch's Hardswish shows no arguments
        return ""


class Hardsigmoid(_Inplace):
    def forward(self, input: Tensor) -> Tensor:
        return act.hardsigmoid(input)

    def extra_repr(self) -> str:   # nor does its Hardsigmoid
        return ""


class Mish(_Inplace):
    def forward(self, input: Tensor) -> Tensor:
        return act.mish(input)


class SELU(_Inplace):
    def forward(self, input: Tensor) -> Tensor:
        return act.selu(input)


class CELU(Module):
    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, input: Tensor) -> Tensor:
        return act.celu(input, self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class Softsign(Module):
    def forward(self, input: Tensor) -> Tensor:
        return act.softsign(input)


class Tanhshrink(Module):
    def forward(self, input: Tensor) -> Tensor:
        return act.tanhshrink(input)


class GLU(Module):
    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Tensor) -> Tensor:
        return act.glu(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"
