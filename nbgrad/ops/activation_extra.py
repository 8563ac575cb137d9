"""The activations of ``torch.nn.functional`` beyond ops/activation.py: hardswish,
hardsigmoid, mish, selu, celu, softsign, tanhshrink and glu, each a composition of ops
(their first and second derivatives come from the ops). Piecewise ones select their
branches with constant masks, so the gradient at a kink is PyTorch's: hardswish's is 0 at
x = -3 and 1 at x = 3, hardsigmoid's 0 at both.

PyTorch's F versions also take ``inplace=``; these compute out of place.
"""

from __future__ import annotations

import numpy as np

from ..tensor import Tensor, lift
from ._args import float_input, one_dim, real
from .activation import clamp, elu, sigmoid, softplus, tanh
from .elementwise import abs as _abs
from .pointwise_math import expm1
from .select import where
from .shape import chunk

__all__ = ["celu", "glu", "hardsigmoid", "hardswish", "mish", "selu", "softsign",
           "tanhshrink"]

# PyTorch's SELU constants (Klambauer et al. 2017)
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _constant(mask: np.ndarray, value: float, dtype) -> Tensor:
    return lift(np.where(mask, value, 0).astype(dtype))


def hardswish(input) -> Tensor:
    """x relu6(x + 3) / 6: 0 for x <= -3, x for x >= 3, x (x + 3) / 6 between
    (torch.nn.functional.hardswish; gradient 0 at -3 and 1 at 3, as PyTorch)."""
    x = float_input("hardswish", input, "input")
    xd = x._data
    middle = x * (x + 3) / 6
    return where(lift(xd >= 3), x, where(lift(xd <= -3), _constant(xd, 0.0, xd.dtype), middle))


def hardsigmoid(input) -> Tensor:
    """relu6(x + 3) / 6: 0 for x <= -3, 1 for x >= 3, x / 6 + 1/2 between
    (torch.nn.functional.hardsigmoid; gradient 1/6 strictly between, 0 at the kinks)."""
    x = float_input("hardsigmoid", input, "input")
    xd = x._data
    inside = (xd > -3) & (xd < 3)
    return where(lift(inside), x / 6 + 0.5, _constant(xd >= 3, 1.0, xd.dtype))


def mish(input) -> Tensor:
    """x tanh(softplus(x)) (torch.nn.functional.mish)."""
    x = float_input("mish", input, "input")
    return x * tanh(softplus(x))


def _elu_like(x: Tensor, alpha: float, input_scale: float) -> Tensor:
    """x for x > 0, alpha expm1(x input_scale) for x <= 0 (PyTorch's elu kernel; the
    negative branch reads min(x, 0), so it never overflows where it is not selected)."""
    negative = alpha * expm1(clamp(x, max=0.0) * input_scale)
    return where(lift(x._data > 0), x, negative)


def selu(input) -> Tensor:
    """scale (max(0, x) + min(0, alpha (e^x - 1))) with PyTorch's constants
    alpha = 1.6732632..., scale = 1.0507009... (torch.nn.functional.selu)."""
    x = float_input("selu", input, "input")
    return SELU_SCALE * elu(x, SELU_ALPHA)


def celu(input, alpha: float = 1.0) -> Tensor:
    """x for x > 0, alpha (e^(x / alpha) - 1) for x <= 0 (torch.nn.functional.celu);
    alpha = 0 is a RuntimeError, as PyTorch."""
    alpha = real("celu", "alpha", alpha)
    if alpha == 0:
        raise RuntimeError("celu: alpha cannot be 0 (ZeroDivisionError in PyTorch's CELU)")
    x = float_input("celu", input, "input")
    return _elu_like(x, alpha, 1.0 / alpha)


def softsign(input) -> Tensor:
    """x / (1 + |x|) (torch.nn.functional.softsign)."""
    x = float_input("softsign", input, "input")
    return x / (_abs(x) + 1)


def tanhshrink(input) -> Tensor:
    """x - tanh(x) (torch.nn.functional.tanhshrink)."""
    x = float_input("tanhshrink", input, "input")
    return x - tanh(x)


def glu(input, dim: int = -1) -> Tensor:
    """The gated linear unit a sigmoid(b), a and b the two halves of input along ``dim``
    (torch.nn.functional.glu). A 0-d input or an odd size along dim is a RuntimeError, as
    PyTorch; a dim out of range an IndexError."""
    x = float_input("glu", input, "input")
    if x.ndim == 0:
        raise RuntimeError("glu: glu does not support scalars because halving size must be "
                           "even (input of shape ())")
    d = one_dim("glu", dim, x.shape)
    if x.shape[d] % 2:
        raise RuntimeError(f"glu: Halving dimension must be even, but dimension {d} is size "
                           f"{x.shape[d]} (input of shape {x.shape})")
    a, b = chunk(x, 2, d)
    return a * sigmoid(b)
