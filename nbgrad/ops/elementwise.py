"""Element-wise ops with NumPy broadcasting: add sub mul div pow neg exp log sqrt abs, and
the point-wise table ops sin cos erf square.

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

sin, cos, erf (float32 or float64; an integer or bool input gives float32, as PyTorch)
and square (integers stay integers, bool gives int64, as PyTorch) are ``pointwise``
table entries (``ops/table.py``); kernels in ``kernels/elementwise.py``.

The gradient of a broadcast operand is the full-size gradient summed over its broadcast
axes (``kernels/broadcast_sum.py``): fused, so mul's ``grad_a = sum(g * b)`` never
materialises ``g * b``, and a 0-stride upstream ``g`` (from ``sum().backward()``) is read
in place. When both operands of mul need a gradient and one is broadcast over the
other's leading axes, both gradients come from one pass over the full-size operand
(``kernels/broadcast_sum.py: mul_grads``). div's and pow's less common gradient terms
materialise one full-size array.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import default_numpy, to_numpy
from ..function import Function, Sample, register
from ..kernels import broadcast_sum, strided_apply
from ..kernels import elementwise as elementwise_kernels
from ..runtime.jit import PARALLEL_MIN, for_work
from ..tensor import FLOAT_DTYPES, Tensor, lift
from . import _args
from .table import flat as _flat
from .table import pointwise

_F64 = np.dtype(np.float64)


# -- helpers -------------------------------------------------------------------------------
def _operands(a: Any, b: Any) -> tuple[Tensor, Tensor]:
    """Both operands as Tensors; a Python number takes the other operand's dtype."""
    if isinstance(a, Tensor):
        return a, b if isinstance(b, Tensor) else lift(b, like=a)
    if isinstance(b, Tensor):
        return lift(a, like=b), b
    return lift(a), lift(b)


def _float_dtype(da: np.dtype, db: np.dtype) -> np.dtype:
    """The dtype a binary op with at least one float operand computes in: the wider float
    (PyTorch)."""
    if da.kind == "f":
        return da if db.kind != "f" or da.itemsize >= db.itemsize else db
    return db


def _same(op: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """f(u, v) for operands of one shape and float dtype: the flat kernels when both
    are contiguous, else the broadcasting kernel, which reads strided and 0-stride views
    in place."""
    if not (u.flags.c_contiguous and v.flags.c_contiguous):
        u, v = _c_order(u), _c_order(v)
        if not (u.flags.c_contiguous and v.flags.c_contiguous):
            return strided_apply.broadcast_apply(op, u, v, u.shape)
    out = np.empty(u.shape, u.dtype)
    flat = out
    if u.ndim != 1:
        u, v, flat = u.reshape(-1), v.reshape(-1), out.reshape(-1)
    (elementwise_kernels.binary if u.size < PARALLEL_MIN
     else elementwise_kernels.binary_parallel)(op, u, v, flat)
    return out


def _with_scalar(op: int, x: np.ndarray, s: np.ndarray, scalar_first: bool) -> np.ndarray:
    """f(x, s) (or f(s, x)) for contiguous ``x`` and a one-element ``s``."""
    out = np.empty(x.shape, x.dtype)
    (elementwise_kernels.binary_scalar if x.size < PARALLEL_MIN
     else elementwise_kernels.binary_scalar_parallel)(
        op, x.reshape(-1), s.reshape(-1)[0], out.reshape(-1), scalar_first)
    return out


def _binary(op: int, u: np.ndarray, v: np.ndarray, shape: tuple) -> np.ndarray:
    """f(u, v) over the broadcast ``shape`` (u, v of one float dtype): the flat kernels
    for equal shapes or a scalar operand, else the broadcasting kernel."""
    if not (u.flags.c_contiguous and v.flags.c_contiguous):
        if _one_value(u) or _one_value(v):
            return _with_one_value(op, u, v, shape)
        u, v = _c_order(u), _c_order(v)
    if u.shape == shape:
        if v.shape == shape:
            return _same(op, u, v)
        if v.size == 1 and u.size and u.flags.c_contiguous:
            return _with_scalar(op, u, v, False)
    elif v.shape == shape and u.size == 1 and v.size and v.flags.c_contiguous:
        return _with_scalar(op, v, u, True)
    return strided_apply.broadcast_apply(op, u, v, shape)


# Strided views (a transpose, a slice) of at most this many elements are copied into C
# order before an element-wise op, which then takes a flat kernel: below this size
# planning the strided loop (in Python, once per call) costs more than the copy; from
# about 128K elements the strided kernel is faster (docs/benchmarks.md#element-wise).
COPY_VIEW_MAX = 1 << 15


def _c_order(a: np.ndarray) -> np.ndarray:
    """``a``, or a C-order copy of it when it is a small strided view that repeats no
    value (a broadcast is read in place: copying it would write every repeat)."""
    if a.flags.c_contiguous or a.size > COPY_VIEW_MAX:
        return a
    for n, stride in zip(a.shape, a.strides):
        if stride == 0 and n > 1:
            return a
    return np.ascontiguousarray(a)


def _one_value(a: np.ndarray) -> bool:
    """Whether ``a`` is one value repeated (every stride 0, more than one element): the
    gradient a full sum or mean hands its input (a 0-stride view)."""
    return a.size > 1 and not any(a.strides)


def _with_one_value(op: int, u: np.ndarray, v: np.ndarray, shape: tuple) -> np.ndarray:
    """f(u, v) where u or v is one value repeated (its own shape broadcasting to
    ``shape``): f of that value and the other operand at the other operand's own shape,
    then repeated over ``shape``. Each element is the same IEEE operation as over the
    broadcast, without planning a strided loop over a 0-stride operand (the gradient a
    full ``sum`` hands its input is such a value; docs/benchmarks.md#element-wise)."""
    ones = (1,) * len(shape)
    if _one_value(u):
        u = u[(0,) * u.ndim].reshape(ones)
    else:
        v = v[(0,) * v.ndim].reshape(ones)
    part = _binary(op, u, v, np.broadcast_shapes(u.shape, v.shape))
    return part if part.shape == shape else np.array(np.broadcast_to(part, shape), order="C")


def _unary(op: int, x: np.ndarray) -> np.ndarray:
    if not x.flags.c_contiguous:
        x = np.array(x, order="C")
    out = np.empty(x.shape, x.dtype)
    if x.size >= PARALLEL_MIN:
        elementwise_kernels.unary_parallel(op, x.reshape(-1), out.reshape(-1))
    else:
        elementwise_kernels.unary(op, x.reshape(-1), out.reshape(-1))
    return out


def _grad(op: int, g: np.ndarray, w: np.ndarray | None, x: np.ndarray,
          scale: float = 1.0) -> np.ndarray:
    """Gradient of input ``x``: scale * f(g, w) summed over the axes ``x`` was broadcast
    along (f = COPY ignores ``w``), in ``x``'s dtype."""
    if w is not None and w.dtype != g.dtype:
        w = w.astype(g.dtype)
    if x.shape == g.shape and scale == 1.0:
        r = g if w is None else _binary(op, g, w, g.shape)
    else:
        r = broadcast_sum.reduce_term(op, g, w, x.shape, scale, g.shape)
    return r if r.dtype == x.dtype else r.astype(x.dtype)


def _mul_grads_same(g: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple | None:
    """(g * b, g * a) when g, a, b share one shape and one dtype; None otherwise.

    Below ``PARALLEL_MIN`` elements these are NumPy's two products (the engine runs
    backward with NumPy's warnings off): from 16K elements its two vectorised passes
    take as long as one fused serial pass, and below that a call costs less than the
    fused kernel's checks and allocations (docs/benchmarks.md#element-wise). Larger
    contiguous operands take one parallel pass."""
    if not g.dtype == a.dtype == b.dtype:
        return None
    if g.size < PARALLEL_MIN:
        return g * b, g * a
    if not (g.flags.c_contiguous and a.flags.c_contiguous and b.flags.c_contiguous):
        return None
    grad_a = np.empty(g.shape, g.dtype)
    grad_b = np.empty(g.shape, g.dtype)
    elementwise_kernels.mul_grads_parallel(g.reshape(-1), a.reshape(-1), b.reshape(-1),
                                           grad_a.reshape(-1), grad_b.reshape(-1))
    return grad_a, grad_b


def _negated(g: np.ndarray, shape: tuple) -> np.ndarray:
    """-g summed to ``shape`` in one pass (the engine casts the dtype)."""
    if g.shape == shape and g.flags.c_contiguous:
        return _unary(elementwise_kernels.NEG, g)
    return broadcast_sum.reduce_term(strided_apply.COPY, g, None, shape, -1.0, g.shape)


def _forward_pair(name: str, op: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype == b.dtype and a.dtype.kind == "f":
        if a.shape == b.shape:
            return _same(op, a, b)
        return _binary(op, a, b, strided_apply.broadcast_shapes(name, a.shape, b.shape))
    shape = strided_apply.broadcast_shapes(name, a.shape, b.shape)
    if op == strided_apply.SUB and "b" in (a.dtype.kind, b.dtype.kind):
        raise TypeError(f"sub: subtraction with a bool operand ({a.dtype} - {b.dtype}) is "
                        "not supported (as in PyTorch); use logical operations on masks")
    if a.dtype.kind == "f" or b.dtype.kind == "f":
        dt = _float_dtype(a.dtype, b.dtype)
        return _binary(op, a.astype(dt, copy=False), b.astype(dt, copy=False), shape)
    if op == strided_apply.DIV:  # true division: float64 quotient in the default dtype
        return _binary(op, a.astype(_F64), b.astype(_F64), shape).astype(default_numpy())
    return _integer_pair(name, op, a, b)


_INTEGER_UFUNCS = {strided_apply.ADD: np.add, strided_apply.SUB: np.subtract,
                   strided_apply.MUL: np.multiply, strided_apply.POW: np.power}


def _integer_pair(name: str, op: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """f(a, b) for integer or bool operands, in integers (wrapping on overflow, as
    PyTorch), in NumPy's result dtype."""
    if op == strided_apply.POW:
        if a.dtype.kind == b.dtype.kind == "b":
            raise TypeError(f"{name}: not supported for two bool operands (as in PyTorch)")
        if b.size and b.min() < 0:
            raise ValueError(f"{name}: integers to negative integer powers are not allowed "
                             f"(the exponent holds {b.min()}); use a float base or exponent")
    return np.asarray(_INTEGER_UFUNCS[op](a, b))


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


# -- binary ops ------------------------------------------------------------------------------
@register("add", samples=_pair_samples)
class Add(Function):
    @staticmethod
    def forward(ctx, a, b):
        return _forward_pair("add", strided_apply.ADD, a, b)

    @staticmethod
    def backward(ctx, g):
        return g, g  # the engine sums each over its operand's broadcast axes

    @staticmethod
    def vjp(ctx, g):
        return g, g


@register("sub", samples=_pair_samples)
class Sub(Function):
    @staticmethod
    def forward(ctx, a, b):
        return _forward_pair("sub", strided_apply.SUB, a, b)

    @staticmethod
    def backward(ctx, g):
        return g, _negated(g, ctx.input_arrays[1].shape) if ctx.needs_input_grad[1] else None

    @staticmethod
    def vjp(ctx, g):
        return g, -g


@register("mul", samples=_pair_samples)
class Mul(Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return _forward_pair("mul", strided_apply.MUL, a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        need_a, need_b = ctx.needs_input_grad
        if need_a and need_b:
            # both gradients in one pass: over same-shape operands, or over the full-size
            # operand when the other is broadcast over its leading axes (a bias, a scale)
            if a.shape == b.shape == g.shape:
                fused = _mul_grads_same(g, a, b)
            else:
                fused = broadcast_sum.mul_grads(g, a, b)
                if fused is None:
                    swapped = broadcast_sum.mul_grads(g, b, a)
                    fused = None if swapped is None else swapped[::-1]
            if fused is not None:
                return fused
        return (_grad(strided_apply.MUL, g, b, a) if need_a else None,
                _grad(strided_apply.MUL, g, a, b) if need_b else None)

    @staticmethod
    def vjp(ctx, g):
        a, b = ctx.inputs
        return g * b, g * a


@register("div", samples=_div_samples)
class Div(Function):
    @staticmethod
    def forward(ctx, a, b):
        out = _forward_pair("div", strided_apply.DIV, a, b)
        ctx.save_for_backward(a, b, out)
        return out

    @staticmethod
    def backward(ctx, g):
        # d(a/b)/da = 1/b; d(a/b)/db = -a/b^2 = -(a/b)/b, summed over broadcast axes
        a, b, out = ctx.saved_tensors
        need_a, need_b = ctx.needs_input_grad
        bg = b.astype(g.dtype, copy=False)
        ga = _grad(strided_apply.DIV, g, bg, a) if need_a else None
        gb = None
        if need_b:
            gb = _grad(strided_apply.MUL, g,
                       strided_apply.broadcast_apply(strided_apply.DIV, out, bg, g.shape), b, -1.0)
        return ga, gb

    @staticmethod
    def vjp(ctx, g):
        a, b = ctx.inputs
        return g / b, -(g * a) / (b * b)


def _squares(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a ** b`` is ``a`` squared: a float ``a`` and a single exponent 2 of its
    dtype that does not add dims. Computed as a * a, with gradient g * (a + a) (both
    exact doublings), as PyTorch computes it, instead of pow per element: pow costs a
    logarithm and an exponential per element, a square one multiply."""
    return (a.dtype.kind == "f" and b.dtype == a.dtype and b.size == 1
            and b.ndim <= a.ndim and b.reshape(-1)[0] == 2)


@register("pow", samples=_pow_samples)
class Pow(Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        if _squares(a, b):
            return _same(strided_apply.MUL, a, a)
        return _forward_pair("pow", strided_apply.POW, a, b)

    @staticmethod
    def backward(ctx, g):
        # d(a^b)/da = b a^(b-1) (0 where b == 0); d(a^b)/db = a^b log(a) (0 where a == 0
        # and b >= 0, as PyTorch); each a full-size array, then summed over broadcast axes
        a, b = ctx.saved_tensors
        need_a, need_b = ctx.needs_input_grad
        a2 = a.astype(g.dtype, copy=False)
        b2 = b.astype(g.dtype, copy=False)
        if need_a and _squares(a, b):
            ga = _grad(strided_apply.MUL, g, _same(strided_apply.ADD, a2, a2), a)
        elif need_a:
            ga = _grad(strided_apply.MUL, g, strided_apply.broadcast_apply(
                strided_apply.POW_DBASE, a2, b2, g.shape), a)
        else:
            ga = None
        gb = _grad(strided_apply.MUL, g,
                   strided_apply.broadcast_apply(strided_apply.POW_DEXP, a2, b2, g.shape), b) \
            if need_b else None
        return ga, gb

    @staticmethod
    def vjp(ctx, g):
        # where a == 0 the base is shifted to 1 in the terms that would be 0 * inf: the
        # conventions above (0 where b == 0; 0 where a == 0 and b >= 0) then hold
        a, b = ctx.inputs
        a0 = a._data == 0
        ga = gb = None
        if ctx.needs_input_grad[0]:
            ga = g * b * (a + lift(a0 & (b._data == 0))) ** (b - 1)
        if ctx.needs_input_grad[1]:
            gb = g * a ** b * log(a + lift(a0 & (b._data >= 0)))
        return ga, gb


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
        b = lift(b._data.astype(_float_dtype(a.dtype, b.dtype)))
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


@register("div_rounded", samples=_rounded_samples)
class DivRounded(Function):
    """div(a, b, rounding_mode=...): piecewise constant, so both gradients are zero."""

    @staticmethod
    def forward(ctx, a, b, mode):
        shape = strided_apply.broadcast_shapes("div", a.shape, b.shape)
        if a.dtype.kind != "f" and b.dtype.kind != "f":
            return _integer_rounded_div(mode, a, b, shape)
        dt = _float_dtype(a.dtype, b.dtype)
        out = np.empty(shape, dt)
        kernel = elementwise_kernels.div_floor if mode == "floor" \
            else elementwise_kernels.div_trunc
        for_work(kernel, out.size)(_flat(np.broadcast_to(a.astype(dt, copy=False), shape)),
                                   _flat(np.broadcast_to(b.astype(dt, copy=False), shape)),
                                   out.reshape(-1))
        return out

    @staticmethod
    def backward(ctx, g):
        return tuple(np.zeros(x.shape, x.dtype) if need else None
                     for x, need in zip(ctx.input_arrays, ctx.needs_input_grad))

    @staticmethod
    def vjp(ctx, g):
        return tuple(lift(np.zeros(x.shape, x.dtype)) if need else None
                     for x, need in zip(ctx.input_arrays, ctx.needs_input_grad))


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
    return np.asarray(np.broadcast_to(q, shape)).astype(np.result_type(a, b), copy=False)


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
        return _unary(op, x)
    if op == elementwise_kernels.NEG or op == elementwise_kernels.ABS:
        name = "neg" if op == elementwise_kernels.NEG else "abs"
        if x.dtype.kind == "b":
            raise TypeError(f"{name}: not supported for a bool tensor (shape {x.shape}), as "
                            "in PyTorch; use logical_not / ~ to invert a mask")
        return np.asarray(np.negative(x) if op == elementwise_kernels.NEG else np.abs(x))
    return _unary(op, x.astype(_F64)).astype(default_numpy())


@register("neg", samples=_unary_samples)
class Neg(Function):
    @staticmethod
    def forward(ctx, x):
        return _unary_forward(elementwise_kernels.NEG, x)

    @staticmethod
    def backward(ctx, g):
        return _negated(g, g.shape)

    @staticmethod
    def vjp(ctx, g):
        return -g


@register("exp", samples=_unary_samples)
class Exp(Function):
    @staticmethod
    def forward(ctx, x):
        y = _unary_forward(elementwise_kernels.EXP, x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return _binary(strided_apply.MUL, g, y, y.shape)

    @staticmethod
    def vjp(ctx, g):
        return g * ctx.output(ctx.saved_tensors[0])


@register("log", samples=lambda rng: _unary_samples(rng, positive=True))
class Log(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return _unary_forward(elementwise_kernels.LOG, x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return _binary(strided_apply.DIV, g, x, x.shape)

    @staticmethod
    def vjp(ctx, g):
        return g / ctx.inputs[0]


@register("sqrt", samples=lambda rng: _unary_samples(rng, positive=True))
class Sqrt(Function):
    @staticmethod
    def forward(ctx, x):
        y = _unary_forward(elementwise_kernels.SQRT, x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return _binary(strided_apply.HALF_DIV, g, y, y.shape)

    @staticmethod
    def vjp(ctx, g):
        return g / (2 * ctx.output(ctx.saved_tensors[0]))


@register("abs", samples=_unary_samples)
class Abs(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return _unary_forward(elementwise_kernels.ABS, x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return _binary(strided_apply.SIGN_MUL, g, x, x.shape)

    @staticmethod
    def vjp(ctx, g):
        return g * lift(np.sign(ctx.inputs[0]._data))  # piecewise linear: |x|'' = 0


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
    "sin", cls_name="Sin", forward=elementwise_kernels.sin_forward,
    backward=elementwise_kernels.sin_backward, saves="input",
    derivative=lambda x, y: cos(x), samples=_smooth_samples,
    doc="sin(x); derivative cos(x).")

_cos = pointwise(
    "cos", cls_name="Cos", forward=elementwise_kernels.cos_forward,
    backward=elementwise_kernels.cos_backward, saves="input",
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
