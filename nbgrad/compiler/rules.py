"""The point-wise ops ``nb.compile`` fuses: each op's value and the gradient rule of each
operand, one element at a time, as the eager kernels compute them.

A fused loop (``compiler/fusion.py``) calls these functions where the eager op would
have run its kernel over the whole array. Each is compiled with the preset of the eager
kernel it mirrors (``runtime/jit.py``): the binary arithmetic of ``strided_apply`` has no
fast-math flags; the unary kernel of ``kernels/elementwise.py`` (exp, log) and those of
``kernels/activation.py`` may contract a * b + c into one FMA. LLVM keeps the flags per
instruction when it inlines a function, so the fused loop gives the eager op's bits
(``tests/compiler`` checks it op by op).

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
from ..kernels.fastmath import erf, exp, exp_nonpositive, fma, log, tanh
from ..runtime.jit import SERIAL_IEEE_DIV, SERIAL_IEEE_DIV_FMA

PLAIN = SERIAL_IEEE_DIV        # strided_apply's binary ops: no fast-math flags
CONTRACT = SERIAL_IEEE_DIV_FMA  # the unary kernel, activation.py: a * b + c may be one FMA


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


@njit(**CONTRACT)
def exp_value(x, one):
    return exp(x)


@njit(**CONTRACT)
def exp_nonpositive_value(x, one):
    """exp of an operand known to be <= 0 (or NaN): exp's bits, without its overflow edge
    (``Signs``)."""
    return exp_nonpositive(x)


@njit(**PLAIN)
def exp_grad0(g, x, y, one):
    return g * y


@njit(**CONTRACT)
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
    return g * fma(-y, y, one)


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
    return g * fma(x, pdf, cdf)


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


_NONNEGATIVE_OUTPUTS = frozenset({"exp", "sigmoid", "relu"})
_SIGN_KEEPING = frozenset({"tanh"})


class Signs:
    """What a loop body knows of the signs of its values from how they are made, NaN
    aside (every rule passes NaN on): exp, sigmoid, relu and a * a are >= 0, -a * a is
    <= 0, tanh keeps its operand's sign, a negation flips it, and a product or a sum of
    known signs has one. Values are keyed by their text in the generated body, which
    names one value throughout it.

    ``value_for`` names the value function of an op: exp of an operand known <= 0 (a
    Gaussian's exp(-x * x)) is ``exp_nonpositive_value``, exp's bits with fewer
    operations (``tests/kernels/test_fastmath.py`` checks the bits)."""

    def __init__(self) -> None:
        self._sign: dict[str, int] = {}       # +1: >= 0, -1: <= 0
        self._negation_of: dict[str, str] = {}

    def constant(self, text: str, value: float) -> None:
        if value == 0 or value != value:
            return
        self._sign[text] = 1 if value > 0 else -1

    def note(self, prim: str, operands: list[str], out: str) -> None:
        """Note what is known of ``out``, made by ``prim`` from ``operands``."""
        sign = self._sign_of(prim, operands)
        if sign:
            self._sign[out] = sign
        if prim == "neg":
            self._negation_of[out] = operands[0]

    def sign(self, text: str) -> int:
        """+1 if the value ``text`` is known to be >= 0, -1 if <= 0, else 0."""
        return self._sign.get(text, 0)

    def value_for(self, prim: str, dtype: np.dtype, operands: list[str]) -> str:
        """The rule's value function for ``prim`` on ``operands``."""
        if prim == "exp" and self.sign(operands[0]) == -1:
            return "exp_nonpositive_value"
        return RULES[prim].value_for(dtype)

    def _sign_of(self, prim: str, operands: list[str]) -> int:
        if prim in _NONNEGATIVE_OUTPUTS:
            return 1
        signs = [self.sign(a) for a in operands]
        if prim in _SIGN_KEEPING:
            return signs[0]
        if prim == "neg":
            return -signs[0]
        if prim == "square":
            return 1
        if prim == "mul":
            a, b = operands
            if a == b:
                return 1
            if self._negation_of.get(a) == b or self._negation_of.get(b) == a:
                return -1
            return signs[0] * signs[1]
        if prim == "add" and signs[0] == signs[1]:
            return signs[0]
        if prim == "sub" and signs[0] == -signs[1]:
            return signs[0]
        return 0
