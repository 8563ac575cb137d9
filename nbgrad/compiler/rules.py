"""The point-wise ops ``nb.compile`` fuses: each op's value and the gradient rule of each
operand, one element at a time, as the eager kernels compute them.

A fused loop (``compiler/fusion.py``) calls these functions where the eager op would
have run its kernel over the whole array. Each is compiled with the preset of the eager
kernel it mirrors (``runtime/jit.py``): the arithmetic of ``kernels/elementwise.py`` and
``strided_apply`` has no fast-math flags, that of ``kernels/activation.py`` may contract
a * b + c into one FMA. LLVM keeps the flags per instruction when it inlines a function,
so the fused loop gives the eager op's bits (``tests/compiler`` checks it op by op).

Signatures: ``<op>_value(*operands, one)`` and ``<op>_grad<k>(g, *operands, y, one)`` for
the gradient of operand k, with ``y`` the op's value and ``one`` 1 in the dtype. The
formulas are those of the op's table entry (docs/derivations.md). An op whose eager
kernel differs by dtype (gelu: float32 has a fast path) has a function per dtype, named
with ``{dtype}`` in its rule.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from ..kernels.activation import _INV_SQRT2PI_F32, _cdf_f32, _sigmoid, _swish_slope
from ..kernels.fastmath import erf, exp, log, tanh
from ..runtime.jit import SERIAL_IEEE_DIV, SERIAL_IEEE_DIV_FMA

PLAIN = SERIAL_IEEE_DIV        # kernels/elementwise.py, strided_apply: no fast-math flags
CONTRACT = SERIAL_IEEE_DIV_FMA  # kernels/activation.py: a * b + c may be one FMA


@dataclass(frozen=True)
class Rule:
    """The value and the per-operand gradient functions of one op (by name in this
    module, as the generated source calls them; ``{dtype}`` in a name stands for the
    region's dtype), and the parameters a call must have to fuse (``params``: sorted
    (name, value) pairs). ``from_output``: the gradient reads the output and not the
    operand (which a step program then need not keep: step_graph.py)."""
    arity: int
    value: str
    grads: tuple[str, ...]
    params: tuple = ()
    from_output: bool = False

    def fuses(self, params: dict) -> bool:
        return tuple(sorted(params.items())) == self.params

    def value_for(self, dtype: np.dtype) -> str:
        return self.value.format(dtype=np.dtype(dtype).name)

    def grad_for(self, position: int, dtype: np.dtype) -> str:
        return self.grads[position].format(dtype=np.dtype(dtype).name)


# -- binary arithmetic -----------------------------------------------------------------------

@njit(**PLAIN)
def add_value(a, b, one):
    return a + b


@njit(**PLAIN)
def pass_grad(g, a, b, y, one):
    return g


@njit(**PLAIN)
def sub_value(a, b, one):
    return a - b


@njit(**PLAIN)
def negated_grad(g, a, b, y, one):
    return -g


@njit(**PLAIN)
def mul_value(a, b, one):
    return a * b


@njit(**PLAIN)
def mul_grad0(g, a, b, y, one):
    return g * b


@njit(**PLAIN)
def mul_grad1(g, a, b, y, one):
    return g * a


@njit(**PLAIN)
def div_value(a, b, one):
    return a / b


@njit(**PLAIN)
def div_grad0(g, a, b, y, one):
    return g / b


@njit(**PLAIN)
def div_grad1(g, a, b, y, one):
    """d(a/b)/db = -(a/b)/b: the eager rule's -(g * (y / b))."""
    return -(g * (y / b))


# -- unary ops of kernels/elementwise.py ------------------------------------------------------

@njit(**PLAIN)
def neg_value(x, one):
    return -x


@njit(**PLAIN)
def neg_grad0(g, x, y, one):
    return -g


@njit(**PLAIN)
def exp_value(x, one):
    return exp(x)


@njit(**PLAIN)
def exp_grad0(g, x, y, one):
    return g * y


@njit(**PLAIN)
def log_value(x, one):
    return log(x)


@njit(**PLAIN)
def log_grad0(g, x, y, one):
    return g / x


# -- activations of kernels/activation.py -----------------------------------------------------

@njit(**CONTRACT)
def tanh_value(x, one):
    return tanh(x)


@njit(**CONTRACT)
def tanh_grad0(g, x, y, one):
    return g * (one - y * y)


@njit(**CONTRACT)
def sigmoid_value(x, one):
    return _sigmoid(x, one)


@njit(**CONTRACT)
def sigmoid_grad0(g, x, y, one):
    return g * y * (one - y)


@njit(**CONTRACT)
def relu_value(x, one):
    zero = one - one
    return zero if x < zero else x  # NaN passes through


@njit(**CONTRACT)
def relu_grad0(g, x, y, one):
    zero = one - one
    return zero if y <= zero else g


@njit(**CONTRACT)
def silu_value(x, one):
    return x * _sigmoid(x, one)


@njit(**CONTRACT)
def silu_grad0(g, x, y, one):
    return g * _swish_slope(x, one)


# gelu (approximate='none'): float32 through erfcx, as gelu_forward_grad_f32 (its
# backward multiplies g by the derivative that forward saved); float64 through libm's
# erf, as gelu_forward and gelu_backward. The same expressions in the same order.
_HALF = np.float64(0.5)
_INV_SQRT2 = np.float64(0.7071067811865476)
_INV_SQRT2PI = np.float64(0.3989422804014327)


@njit(**CONTRACT)
def gelu_value_float32(x, one):
    return x * _cdf_f32(x)[0]


@njit(**CONTRACT)
def gelu_grad0_float32(g, x, y, one):
    cdf, e = _cdf_f32(x)
    return g * (cdf + x * (e * _INV_SQRT2PI_F32))


@njit(**CONTRACT)
def gelu_value_float64(x, one):
    return _HALF * x * (one + erf(x * _INV_SQRT2))


@njit(**CONTRACT)
def gelu_grad0_float64(g, x, y, one):
    cdf = _HALF * (one + erf(x * _INV_SQRT2))
    pdf = exp(-_HALF * x * x) * _INV_SQRT2PI
    return g * (cdf + x * pdf)


RULES: dict[str, Rule] = {
    "add": Rule(2, "add_value", ("pass_grad", "pass_grad")),
    "sub": Rule(2, "sub_value", ("pass_grad", "negated_grad")),
    "mul": Rule(2, "mul_value", ("mul_grad0", "mul_grad1")),
    "div": Rule(2, "div_value", ("div_grad0", "div_grad1")),
    "neg": Rule(1, "neg_value", ("neg_grad0",)),
    "exp": Rule(1, "exp_value", ("exp_grad0",), from_output=True),
    "log": Rule(1, "log_value", ("log_grad0",)),
    "tanh": Rule(1, "tanh_value", ("tanh_grad0",), from_output=True),
    "sigmoid": Rule(1, "sigmoid_value", ("sigmoid_grad0",), from_output=True),
    "relu": Rule(1, "relu_value", ("relu_grad0",), from_output=True),
    "silu": Rule(1, "silu_value", ("silu_grad0",)),
    "gelu": Rule(1, "gelu_value_{dtype}", ("gelu_grad0_{dtype}",),
                 (("approximate", "none"),)),
}
