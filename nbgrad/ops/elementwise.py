"""Element-wise ops with NumPy broadcasting: add sub mul div pow neg exp log sqrt abs, and
the point-wise table ops sin cos erf square log1p expm1 reciprocal rsqrt floor ceil trunc
round frac sign; fmod, remainder and floor_divide; clamp_min and clamp_max (``clamp``).

Binary ops broadcast both operands the NumPy way (any rank, size-1 axes anywhere, 0-d
arrays and Python scalars). Dtypes promote as in PyTorch: float32 with float64 computes in
float64, an integer or bool operand takes the float operand's dtype, and each input's
gradient is cast back to that input's dtype; a Python number takes the tensor's dtype
unless it is of a higher kind (``tensor.lift``: bool tensor + 2 is int64, int tensor + 0.5
float32). Integer and bool operands without a float are computed in integers by NumPy
(exact; they have no gradient) and give NumPy's integer dtype (int32 with int32 stays
int32; bool with bool is bool for add and mul, as in PyTorch); ``div`` of integers is true
division and returns float32, and integers to negative integer powers and subtraction of
bools are errors, as in PyTorch. ``add``/``sub`` take PyTorch's ``alpha`` (a + alpha b);
``div`` takes ``rounding_mode='trunc'|'floor'`` (integers: exact integer division, and a
zero divisor is a ZeroDivisionError; floats: +-inf/NaN at 0; zero gradient).

Every op here is an entry of the op table (``ops/table.py``): add, sub, mul, div (and its
rounded form, ``div_rounded``) and pow are ``broadcasting`` entries (forward, what it
saves, each operand's gradient rule and vjp); neg, exp, log, sqrt, abs, sin, cos, erf and
square are ``pointwise`` entries, and so are log1p, expm1, reciprocal, rsqrt, floor, ceil,
trunc, round, frac and sign (one op-coded kernel pair; integer inputs as PyTorch: the
float ops promote to the default float dtype, the rounding ops return integers as they
are); fmod and remainder are ``broadcasting`` entries. What an entry cannot declare
(alpha, rounding_mode, Python numbers, integer inputs) is the public function's. sin,
cos, erf (float32 or float64; an integer or bool input gives float32, as PyTorch) and
square (integers stay integers, bool gives int64, as PyTorch) have their kernels in
``kernels/elementwise.py``; the array-level evaluation of the op-coded ops is
``ops/binary.py``.

The gradient of a broadcast operand is the full-size gradient summed over its broadcast
axes (``ops/binary.py: grad``, ``kernels/broadcast_sum.py``): fused, so mul's
``grad_a = sum(g * b)`` never materialises ``g * b``, and a 0-stride upstream ``g`` (from
``sum().backward()``) is read in place. When both operands of mul need a gradient and one
is broadcast over the other's leading axes, both gradients come from one pass over the
full-size operand (``ops/binary.py: mul_grads``). div's and pow's less common gradient
terms materialise one full-size array.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..dtypes import default_numpy, to_numpy
from ..function import Function, Sample, register
from ..kernels import elementwise as elementwise_kernels
from ..kernels import strided_apply
from ..runtime.jit import for_work
from ..tensor import FLOAT_DTYPES, Tensor, lift
from . import _args, binary
from .table import broadcasting, pointwise, upstream
from .table import flat as _flat

_F64 = np.dtype(np.float64)


def _operands(a: Any, b: Any) -> tuple[Tensor, Tensor]:
    """Both operands as Tensors; a Python number takes the other operand's dtype."""
    if isinstance(a, Tensor):
        return a, b if isinstance(b, Tensor) else lift(b, like=a)
    if isinstance(b, Tensor):
        return lift(a, like=b), b
    return lift(a), lift(b)


# -- samples -------------------------------------------------------------------------------
_PAIRS = [((3, 4), (3, 4)), ((1, 3), (4, 3)), ((3, 1), (1, 4)), ((2, 1, 4), (3, 1)),
          ((), (2, 3)), ((2, 3, 1, 2), (1, 3, 2, 1))]


def _pair_samples(rng):
    """Both operand orders of each shape pair: either side broadcast, 0-d included."""
    for sa, sb in _PAIRS:
        a = np.asarray(rng.standard_normal(sa))
        b = np.asarray(rng.standard_normal(sb))
        yield Sample(a, b, label=f"{sa} with {sb}")
        yield Sample(b, a, label=f"{sb} with {sa}")


def _div_samples(rng):
    for s in _pair_samples(rng):
        a, b = s.inputs
        yield Sample(a, np.where(np.abs(b) < 0.5, np.copysign(0.5, b), b), label=s.label)


def _pow_samples(rng):
    for sa, sb in _PAIRS:
        yield Sample(np.asarray(0.5 + rng.random(sa)), np.asarray(rng.standard_normal(sb)),
                     label=f"{sa} ** {sb}")
        yield Sample(np.asarray(0.5 + rng.random(sb)), np.asarray(rng.standard_normal(sa)),
                     label=f"{sb} ** {sa}")
    yield Sample(np.asarray(0.5 + rng.random((3, 4))), np.asarray(2.0), label="squared")


def _unary_samples(rng, positive: bool = False):
    for shape in [(), (5,), (3, 4), (2, 3, 2)]:
        x = np.asarray(rng.standard_normal(shape))
        if positive:
            x = np.asarray(0.2 + 2 * rng.random(shape))
        else:
            x = np.where(np.abs(x) < 0.1, 0.3, x)  # away from abs's kink
        yield Sample(x, label=str(shape))


# -- binary ops: broadcasting table entries (ops/table.py) ------------------------------------

Add = broadcasting(
    "add", forward=binary.forward_of("add", strided_apply.ADD),
    saves="nothing", grads=(upstream, upstream), vjps=(upstream, upstream),
    samples=_pair_samples)

Sub = broadcasting(
    "sub", forward=binary.forward_of("sub", strided_apply.SUB),
    saves="nothing", grads=(upstream, lambda g, a, b: binary.negated(g, b.shape)),
    vjps=(upstream, lambda g, a, b: -g), samples=_pair_samples)

Mul = broadcasting(
    "mul", forward=binary.forward_of("mul", strided_apply.MUL),
    saves="inputs", both=binary.mul_grads,
    grads=(lambda g, a, b: binary.grad(strided_apply.MUL, g, b, a),
           lambda g, a, b: binary.grad(strided_apply.MUL, g, a, b)),
    vjps=(lambda g, a, b: g * b, lambda g, a, b: g * a), samples=_pair_samples)


def _div_grad_b(g: np.ndarray, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    """d(a/b)/db = -a/b^2 = -(a/b)/b, summed over b's broadcast axes."""
    bg = b.astype(g.dtype, copy=False)
    return binary.grad(strided_apply.MUL, g,
                       strided_apply.broadcast_apply(strided_apply.DIV, out, bg, g.shape), b,
                       -1.0)


Div = broadcasting(
    "div", forward=binary.forward_of("div", strided_apply.DIV),
    saves="inputs and output",
    grads=(lambda g, a, b, out: binary.grad(strided_apply.DIV, g,
                                            b.astype(g.dtype, copy=False), a),
           _div_grad_b),
    vjps=(lambda g, a, b: g / b, lambda g, a, b: -(g * a) / (b * b)), samples=_div_samples)


def _squares(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a ** b`` is ``a`` squared: a float ``a`` and a single exponent 2 of its
    dtype that does not add dims. Computed as a * a, with gradient g * (a + a) (both
    exact doublings), as PyTorch computes it, instead of pow per element: pow costs a
    logarithm and an exponential per element, a square one multiply."""
    return (a.dtype.kind == "f" and b.dtype == a.dtype and b.size == 1
            and b.ndim <= a.ndim and b.reshape(-1)[0] == 2)


_pow = binary.forward_of("pow", strided_apply.POW)


def _pow_forward(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if _squares(a, b):
        return binary.same_shape(strided_apply.MUL, a, a)
    return _pow(a, b)


def _pow_grad_a(g: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """d(a^b)/da = b a^(b-1) (0 where b == 0), a full-size array summed over a's
    broadcast axes; a * a's is a + a."""
    a2 = a.astype(g.dtype, copy=False)
    if _squares(a, b):
        return binary.grad(strided_apply.MUL, g, binary.same_shape(strided_apply.ADD, a2, a2), a)
    return binary.grad(strided_apply.MUL, g, strided_apply.broadcast_apply(
        strided_apply.POW_DBASE, a2, b.astype(g.dtype, copy=False), g.shape), a)


def _pow_grad_b(g: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """d(a^b)/db = a^b log(a) (0 where a == 0 and b >= 0, as PyTorch), a full-size array
    summed over b's broadcast axes."""
    return binary.grad(strided_apply.MUL, g, strided_apply.broadcast_apply(
        strided_apply.POW_DEXP, a.astype(g.dtype, copy=False), b.astype(g.dtype, copy=False),
        g.shape), b)


# The vjps shift the base to 1 where a == 0 in the terms that would be 0 * inf: the
# conventions above (0 where b == 0; 0 where a == 0 and b >= 0) then hold.
Pow = broadcasting(
    "pow", forward=_pow_forward, saves="inputs", grads=(_pow_grad_a, _pow_grad_b),
    vjps=(lambda g, a, b: g * b * (a + lift((a._data == 0) & (b._data == 0))) ** (b - 1),
          lambda g, a, b: g * a ** b * log(a + lift((a._data == 0) & (b._data >= 0)))),
    samples=_pow_samples)


def _scaled_operand(name: str, a: Tensor, b: Tensor, alpha: Any) -> Tensor:
    """alpha * b for ``add``/``sub`` (``b`` itself when alpha is 1), in the dtype the op
    computes in: an integer result refuses a float alpha and a non-bool result a bool
    alpha (PyTorch's rules); b is converted to a float result dtype before scaling."""
    if type(alpha) is int and alpha == 1:  # the default, fine for every dtype
        return b
    if isinstance(alpha, bool | np.bool_):
        if not (a.dtype.kind == b.dtype.kind == "b"):
            raise TypeError(f"{name}: a bool alpha ({alpha!r}) is only supported for bool "
                            f"operands (got {a.dtype} and {b.dtype}), as in PyTorch")
        return b if alpha else lift(np.zeros_like(b._data))
    _args.real(name, "alpha", alpha)
    floating = a.dtype.kind == "f" or b.dtype.kind == "f"
    if not floating and isinstance(alpha, float | np.floating):
        raise TypeError(f"{name}: alpha must not be a float ({alpha!r}) for integer or bool "
                        f"operands ({a.dtype} and {b.dtype}), as in PyTorch")
    if alpha == 1:
        return b
    if floating and b.dtype.kind != "f":
        b = lift(b._data.astype(binary.float_dtype(a.dtype, b.dtype)))
    if a.dtype.kind == b.dtype.kind == "b":
        return b if alpha else lift(np.zeros_like(b._data))  # bool: alpha is truthiness
    return mul(b, alpha)


def _rounded_samples(rng):
    """Quotients a / b at least 0.1 away from an integer (drawn until they are), so finite
    differences never cross a jump of the piecewise-constant result."""
    for sa, sb in [((3, 4), (3, 4)), ((1, 3), (4, 3)), ((2, 1), (1, 3)), ((), (2, 2))]:
        while True:
            a = np.asarray(rng.uniform(-6.0, 6.0, sa))
            b = np.asarray(rng.uniform(0.5, 2.0, sb) * rng.choice([-1.0, 1.0], sb))
            q = a / b
            if np.all(np.abs(q - np.round(q)) > 0.1):
                break
        for mode in ("trunc", "floor"):
            yield Sample(a, b, mode=mode, label=f"{sa} // {sb} {mode}")


def _rounded_quotient(a: np.ndarray, b: np.ndarray, mode: str) -> np.ndarray:
    shape = strided_apply.broadcast_shapes("div", a.shape, b.shape)
    if a.dtype.kind != "f" and b.dtype.kind != "f":
        return _integer_rounded_div(mode, a, b, shape)
    dt = binary.float_dtype(a.dtype, b.dtype)
    out = np.empty(shape, dt)
    kernel = elementwise_kernels.div_floor if mode == "floor" else elementwise_kernels.div_trunc
    for_work(kernel, out.size)(_flat(np.broadcast_to(a.astype(dt, copy=False), shape)),
                               _flat(np.broadcast_to(b.astype(dt, copy=False), shape)),
                               out.reshape(-1))
    return out


def _zeros(x: np.ndarray) -> np.ndarray:
    return np.zeros(x.shape, x.dtype)


# div(a, b, rounding_mode=...): piecewise constant, so both gradients are zero
DivRounded = broadcasting(
    "div_rounded", cls_name="DivRounded", forward=_rounded_quotient, params=True,
    saves="nothing",
    grads=(lambda g, a, b: _zeros(a), lambda g, a, b: _zeros(b)),
    vjps=(lambda g, a, b: lift(_zeros(a._data)), lambda g, a, b: lift(_zeros(b._data))),
    samples=_rounded_samples)


def _integer_rounded_div(mode: str, a: np.ndarray, b: np.ndarray, shape: tuple) -> np.ndarray:
    """trunc or floor of a / b for integer operands, exactly, in NumPy's integer result
    dtype (wrapping on overflow: INT_MIN // -1 is INT_MIN, as PyTorch)."""
    if a.dtype.kind == "b" or b.dtype.kind == "b":
        raise TypeError(f"div: rounding_mode={mode!r} is not supported for bool operands "
                        f"({a.dtype}, {b.dtype}; shapes {a.shape}, {b.shape}), as in PyTorch")
    if b.size and not b.all():
        raise ZeroDivisionError(f"div: integer division by zero (rounding_mode={mode!r}; b of "
                                f"shape {b.shape} holds a 0)")
    with np.errstate(all="ignore"):
        q = np.floor_divide(a, b)
        if mode == "trunc":  # floor rounds a negative inexact quotient one below trunc
            q = q + ((q * b != a) & ((a < 0) != (b < 0)))
    dtype = _args.promoted_dtype(a.dtype, b.dtype)
    return np.asarray(np.broadcast_to(q, shape)).astype(dtype, copy=False)


def add(a: Any, b: Any, *, alpha: Any = 1) -> Tensor:
    """a + alpha * b with NumPy broadcasting (``torch.add``); grad_a = sum of g, grad_b =
    alpha * sum of g over each operand's broadcast axes. A float alpha with integer
    operands is a TypeError, as in PyTorch."""
    if not (isinstance(a, Tensor) and isinstance(b, Tensor)):
        a, b = _operands(a, b)
    if not (type(alpha) is int and alpha == 1):  # not the default
        b = _scaled_operand("add", a, b, alpha)
    return Add.apply(a, b)


def sub(a: Any, b: Any, *, alpha: Any = 1) -> Tensor:
    """a - alpha * b with NumPy broadcasting (``torch.sub``); grad_a = sum(g),
    grad_b = -alpha sum(g) over each operand's broadcast axes."""
    a, b = _operands(a, b)
    if "b" in (a.dtype.kind, b.dtype.kind):  # the bool error before alpha's checks
        return Sub.apply(a, b)
    return Sub.apply(a, _scaled_operand("sub", a, b, alpha))


def mul(a: Any, b: Any) -> Tensor:
    """a * b with NumPy broadcasting; grad_a = sum(g * b), grad_b = sum(g * a) over each
    operand's broadcast axes (fused: g * b is never materialised)."""
    if not (isinstance(a, Tensor) and isinstance(b, Tensor)):
        a, b = _operands(a, b)
    return Mul.apply(a, b)


def div(a: Any, b: Any, *, rounding_mode: str | None = None) -> Tensor:
    """a / b with NumPy broadcasting (``torch.div``). ``rounding_mode=None``: true
    division; grad_a = sum(g / b), grad_b = -sum(g * a / b^2) over each operand's
    broadcast axes. ``'trunc'``: the quotient rounded toward zero; ``'floor'``: rounded
    down (Python's ``//``). Rounded division keeps integer dtypes (exact; a zero divisor
    is a ZeroDivisionError, as PyTorch's RuntimeError), gives +-inf/NaN for a float zero
    divisor, and has zero gradient (piecewise constant, as in PyTorch)."""
    a, b = _operands(a, b)
    if rounding_mode is None:
        return Div.apply(a, b)
    if rounding_mode not in ("trunc", "floor"):
        raise ValueError(f"div: rounding_mode must be None, 'trunc' or 'floor', got "
                         f"{rounding_mode!r}")
    return DivRounded.apply(a, b, mode=rounding_mode)


def pow(a: Any, b: Any) -> Tensor:
    """a ** b with NumPy broadcasting; grad_a = sum(g * b * a^(b-1)) (0 where b == 0),
    grad_b = sum(g * a^b * log a), taken as 0 where a == 0 and b >= 0 (PyTorch). A
    negative base with a non-integer exponent gives NaN, as in PyTorch. A float base
    squared (a single exponent 2) is a * a with grad_a = g * (a + a), PyTorch's bits."""
    a, b = _operands(a, b)
    return Pow.apply(a, b)


# -- unary ops ------------------------------------------------------------------------------
def _unary_forward(op: int, x: np.ndarray) -> np.ndarray:
    """f(x); an integer or bool ``x`` gives float32 (computed in float64) for exp, log and
    sqrt, and keeps its dtype for neg and abs (computed in integers; bool is refused, as
    in PyTorch)."""
    if x.dtype.kind == "f":
        return binary.unary(op, x)
    if op == elementwise_kernels.NEG or op == elementwise_kernels.ABS:
        name = "neg" if op == elementwise_kernels.NEG else "abs"
        if x.dtype.kind == "b":
            raise TypeError(f"{name}: not supported for a bool tensor (shape {x.shape}), as "
                            "in PyTorch; use logical_not / ~ to invert a mask")
        return np.asarray(np.negative(x) if op == elementwise_kernels.NEG else np.abs(x))
    return binary.unary(op, x.astype(_F64)).astype(default_numpy())


def _unary_entry(name: str, op: int, saves: str, backward: Callable, vjp: Callable,
                 samples: Callable = _unary_samples) -> type[Function]:
    """The point-wise table entry of the op-coded unary op ``name`` (any input dtype:
    ``_unary_forward``); its public function calls the class."""
    return pointwise(name, forward=lambda x: _unary_forward(op, x), backward=backward,
                     saves=saves, vjp=vjp, samples=samples, on_arrays=True,
                     doc=f"{name}: see ``nbgrad.{name}``.").function


def _positive_samples(rng):
    return _unary_samples(rng, positive=True)


Neg = _unary_entry("neg", elementwise_kernels.NEG, "nothing",
                   backward=lambda g: binary.negated(g, g.shape), vjp=lambda g, x, y: -g)
Exp = _unary_entry("exp", elementwise_kernels.EXP, "output",
                   backward=lambda g, y: binary.apply(strided_apply.MUL, g, y, y.shape),
                   vjp=lambda g, x, y: g * y)
Log = _unary_entry("log", elementwise_kernels.LOG, "input",
                   backward=lambda g, x: binary.apply(strided_apply.DIV, g, x, x.shape),
                   vjp=lambda g, x, y: g / x, samples=_positive_samples)
Sqrt = _unary_entry("sqrt", elementwise_kernels.SQRT, "output",
                    backward=lambda g, y: binary.apply(strided_apply.HALF_DIV, g, y, y.shape),
                    vjp=lambda g, x, y: g / (2 * y), samples=_positive_samples)
# piecewise linear: |x|'' = 0, so the vjp's sign(x) is a constant
Abs = _unary_entry("abs", elementwise_kernels.ABS, "input",
                   backward=lambda g, x: binary.apply(strided_apply.SIGN_MUL, g, x, x.shape),
                   vjp=lambda g, x, y: g * lift(np.sign(x._data)))


def neg(x: Any) -> Tensor:
    """-x; grad = -g."""
    return Neg.apply(lift(x))


def exp(x: Any) -> Tensor:
    """e^x (fastmath exp: 1 ulp in float32); grad = g * e^x. Integer input gives float32."""
    return Exp.apply(lift(x))


def log(x: Any) -> Tensor:
    """Natural log (fastmath log; log 0 = -inf, log of a negative = NaN); grad = g / x."""
    return Log.apply(lift(x))


def sqrt(x: Any) -> Tensor:
    """Square root; grad = g / (2 sqrt x), which is inf at x = 0 as in PyTorch."""
    return Sqrt.apply(lift(x))


def abs(x: Any) -> Tensor:
    """|x|; grad = g * sign(x) with sign(0) = 0 (PyTorch's convention at the kink)."""
    return Abs.apply(lift(x))


# -- sin, cos, erf, square: point-wise table entries -------------------------------------------
def _smooth_samples(rng):
    yield Sample(rng.standard_normal((3, 4)), label="2-D")
    yield Sample(rng.standard_normal(5) * 3, label="1-D wide range")
    yield Sample(rng.standard_normal((2, 1, 3)), label="3-D")
    yield Sample(np.array(0.7), label="0-d")


_TWO_OVER_SQRT_PI = 1.1283791670955126

_sin = pointwise(
    "sin", cls_name="Sin", forward=elementwise_kernels.trig_forward,
    backward=elementwise_kernels.trig_backward, kernel_args=(False,), saves="input",
    derivative=lambda x, y: cos(x), samples=_smooth_samples,
    doc="sin(x); derivative cos(x).")

_cos = pointwise(
    "cos", cls_name="Cos", forward=elementwise_kernels.trig_forward,
    backward=elementwise_kernels.trig_backward, kernel_args=(True,), saves="input",
    derivative=lambda x, y: -sin(x), samples=_smooth_samples,
    doc="cos(x); derivative -sin(x).")

_erf = pointwise(
    "erf", cls_name="Erf", forward=elementwise_kernels.erf_forward,
    backward=elementwise_kernels.erf_backward, saves="input",
    derivative=lambda x, y: _TWO_OVER_SQRT_PI * exp(-(x * x)), samples=_smooth_samples,
    doc="erf(x); derivative 2/sqrt(pi) exp(-x^2).")

_square = pointwise(
    "square", cls_name="Square", forward=elementwise_kernels.square_forward,
    backward=elementwise_kernels.square_backward, saves="input",
    derivative=lambda x, y: 2 * x, samples=_smooth_samples,
    doc="x * x; derivative 2x.")


def _as_float64(x: Tensor) -> Tensor:
    """An integer or bool ``x`` (never requiring grad) as a float64 constant: the
    integer-input ops compute in float64 and round the result to float32."""
    return lift(x._data.astype(_F64))


def sin(x: Any) -> Tensor:
    """sin(x); grad = g cos(x). float32 is correctly rounded (< 0.501 ulp: a float64
    polynomial after Cody-Waite reduction, libm beyond |x| = 2^19), float64 is libm's.
    An integer or bool input gives float32, as PyTorch."""
    x = lift(x)
    if x.dtype.kind in "biu":
        return Tensor._wrap(_sin(_as_float64(x))._data.astype(default_numpy()), None, 0)
    return _sin(x)


def cos(x: Any) -> Tensor:
    """cos(x); grad = -g sin(x). Accuracy and integer inputs as ``sin``."""
    x = lift(x)
    if x.dtype.kind in "biu":
        return Tensor._wrap(_cos(_as_float64(x))._data.astype(default_numpy()), None, 0)
    return _cos(x)


def erf(x: Any) -> Tensor:
    """The error function erf(x) = 2/sqrt(pi) int_0^x exp(-t^2) dt; grad =
    g 2/sqrt(pi) exp(-x^2). float32: fastmath's polynomial (< 2.5 ulp); float64: libm's
    erf (within 3 ulp of SciPy, and closer than SciPy to the exact value where they
    differ). An integer or bool input gives float32, as PyTorch."""
    x = lift(x)
    if x.dtype.kind in "biu":
        return Tensor._wrap(_erf(_as_float64(x))._data.astype(default_numpy()), None, 0)
    return _erf(x)


def square(x: Any) -> Tensor:
    """x * x; grad = 2 g x. Integer input stays integer (wrapping on overflow) and bool
    gives int64, as ``torch.square``."""
    x = lift(x)
    if x.dtype.kind in "biu":
        data = x._data.astype(np.int64) if x.dtype.kind == "b" else x._data
        return Tensor._wrap(np.asarray(np.multiply(data, data)), None, 0)
    return _square(x)


for _public, _entry in ((sin, _sin), (cos, _cos), (erf, _erf), (square, _square)):
    _public.function = _entry.function


# -- dtype conversion -----------------------------------------------------------------------
def _to_samples(rng):
    yield Sample(rng.standard_normal((3, 4)), dtype=np.float64, label="float64 to float64")


@register("to", samples=_to_samples)
class To(Function):
    @staticmethod
    def forward(ctx, x, dtype):
        return x.astype(dtype)

    @staticmethod
    def backward(ctx, g):
        return g.astype(ctx.input_arrays[0].dtype)

    @staticmethod
    def vjp(ctx, g):
        return to(g, ctx.input_arrays[0].dtype)


def to(x: Any, dtype: Any) -> Tensor:
    """``x`` converted to ``dtype`` (a copy; ``x`` itself when it already has it), in the
    graph: the gradient is converted back to ``x``'s dtype."""
    x = lift(x)
    dtype = to_numpy(dtype, "to")
    if dtype not in FLOAT_DTYPES and x.requires_grad:
        raise TypeError(f"to: x (shape {x.shape}) requires grad, so its dtype must stay "
                        f"float32 or float64, got {dtype}")
    return x if x.dtype == dtype else To.apply(x, dtype=dtype)


__all__ = ["add", "sub", "mul", "div", "pow", "neg", "exp", "log", "sqrt", "abs", "to", "sin",
           "cos", "erf", "square"]
