"""Element-wise kernels on flat contiguous arrays: unary ops (exp, log, sqrt, abs, neg)
and the fast paths of the binary ops that need no broadcasting plan: two arrays of one
shape, or an array with a scalar; and both gradients of a same-shape product in one
parallel pass (smaller products are NumPy's: ``ops/binary.py: _mul_grads_same``).
Also the point-wise table's sin, cos, erf, square, the op-coded log1p, expm1, reciprocal,
rsqrt, floor, ceil, trunc, frac, sign and round (forward and backward), rounded division
(``div(..., rounding_mode='trunc'|'floor')``) and fmod/remainder.

Binary op codes and their formulas are those of ``strided_apply.binary_block``;
broadcasting operands go through ``strided_apply.broadcast_apply`` instead. The callers
run arrays below ``jit.PARALLEL_MIN`` elements serially (thread start-up would cost more
than the loop), larger ones in fixed chunks of ``jit.CHUNK`` elements (the ``_parallel``
kernels). Derivatives: docs/derivations.md#element-wise-arithmetic.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange, types
from numba.extending import overload

from ..runtime.jit import (
    CHUNK,
    PARALLEL_IEEE_DIV,
    SERIAL_IEEE_DIV,
    SERIAL_IEEE_DIV_FMA,
    njit_with_serial,
)
from .fastmath import erf, exp, log
from .strided_apply import BLOCK, binary_block

# Unary op codes.
EXP, LOG, SQRT, ABS, NEG = range(5)


@njit(**SERIAL_IEEE_DIV_FMA)
def _unary_block(op, x, out):
    """out[i] = f(x[i]) for EXP (fastmath exp), LOG (fastmath log), SQRT (the sqrt
    instruction, not libm), ABS, NEG. Compiled with FMA contraction: exp's and log's
    polynomials take one FMA per term (fastmath's error bounds hold either way)."""
    if op == EXP:
        for i in range(x.size):
            out[i] = exp(x[i])
    elif op == LOG:
        for i in range(x.size):
            out[i] = log(x[i])
    elif op == SQRT:
        for i in range(x.size):
            out[i] = np.sqrt(x[i])
    elif op == ABS:
        for i in range(x.size):
            out[i] = abs(x[i])
    elif op == NEG:
        for i in range(x.size):
            out[i] = -x[i]


@njit(**SERIAL_IEEE_DIV)
def unary(op, x, out):
    """Serial unary kernel on 1-D contiguous ``x`` and ``out``."""
    _unary_block(op, x, out)


@njit(**PARALLEL_IEEE_DIV)
def unary_parallel(op, x, out):
    """``unary`` in fixed chunks of CHUNK elements, one prange iteration each."""
    nchunks = (x.size + CHUNK - 1) // CHUNK
    for c in prange(nchunks):
        s = c * CHUNK
        e = min(x.size, s + CHUNK)
        _unary_block(op, x[s:e], out[s:e])


@njit(**SERIAL_IEEE_DIV)
def binary(op, u, v, out):
    """Serial same-shape binary kernel on 1-D contiguous arrays (op codes of strided_apply)."""
    binary_block(op, out, u, v)


@njit(**PARALLEL_IEEE_DIV)
def binary_parallel(op, u, v, out):
    """``binary`` in fixed chunks of CHUNK elements, one prange iteration each."""
    nchunks = (u.size + CHUNK - 1) // CHUNK
    for c in prange(nchunks):
        s = c * CHUNK
        e = min(u.size, s + CHUNK)
        binary_block(op, out[s:e], u[s:e], v[s:e])


@njit(**SERIAL_IEEE_DIV)
def _mul_grads_block(g, a, b, grad_a, grad_b):
    for i in range(g.size):
        grad_a[i] = g[i] * b[i]
        grad_b[i] = g[i] * a[i]


@njit(**PARALLEL_IEEE_DIV)
def mul_grads_parallel(g, a, b, grad_a, grad_b):
    """Both gradients of a * b for operands of the output's shape, in one pass:
    grad_a = g * b, grad_b = g * a (1-D contiguous arrays of one dtype), in fixed chunks
    of CHUNK elements, one prange iteration each."""
    nchunks = (g.size + CHUNK - 1) // CHUNK
    for c in prange(nchunks):
        s = c * CHUNK
        e = min(g.size, s + CHUNK)
        _mul_grads_block(g[s:e], a[s:e], b[s:e], grad_a[s:e], grad_b[s:e])


@njit(**SERIAL_IEEE_DIV)
def _scalar_range(op, x, s, out, scalar_first, i0, i1):
    """out[i] = f(x[i], s) (or f(s, x[i]) when ``scalar_first``) for i in [i0, i1): the
    scalar fills one block buffer once, then every block runs the two-array loop."""
    buf = np.empty(min(BLOCK, i1 - i0), out.dtype)
    for i in range(buf.size):
        buf[i] = s
    for j0 in range(i0, i1, BLOCK):
        m = min(BLOCK, i1 - j0)
        if scalar_first:
            binary_block(op, out[j0:j0 + m], buf[:m], x[j0:j0 + m])
        else:
            binary_block(op, out[j0:j0 + m], x[j0:j0 + m], buf[:m])


@njit(**SERIAL_IEEE_DIV)
def binary_scalar(op, x, s, out, scalar_first):
    """Serial binary kernel of 1-D contiguous ``x`` with the scalar ``s``."""
    _scalar_range(op, x, s, out, scalar_first, 0, x.size)


@njit(**PARALLEL_IEEE_DIV)
def binary_scalar_parallel(op, x, s, out, scalar_first):
    """``binary_scalar`` in fixed chunks of CHUNK elements, one prange iteration each."""
    nchunks = (x.size + CHUNK - 1) // CHUNK
    for c in prange(nchunks):
        s0 = c * CHUNK
        _scalar_range(op, x, s, out, scalar_first, s0, min(x.size, s0 + CHUNK))


# -- sin, cos ------------------------------------------------------------------------------
# float32: x is reduced in float64 by Cody-Waite, r = x - k pi/2 with k = rint(x 2/pi) and
# pi/2 split in three 33-bit parts (fdlibm's pio2_1, pio2_2, pio2_3: k * part is exact for
# |k| < 2^20) plus a tail, so r is accurate to ~1e-16 relative for |x| <= 2^19; sin and cos
# of r in [-pi/4, pi/4] are fdlibm's degree-13/14 polynomials (error < 1e-16), and the
# quadrant k mod 4 picks and signs one of them:
#     k mod 4:   0      1      2      3
#     sin x:     s(r)   c(r)  -s(r)  -c(r)
#     cos x:     c(r)  -s(r)  -c(r)   s(r)
# Rounding that double to float32 gives the correctly rounded result except in rare double
# rounding cases (< 0.501 ulp). The loop is straight-line float64 code, so it vectorises;
# |x| > 2^19, inf and NaN are redone with libm afterwards (``_trig_fixup``). float64 takes
# libm's sin/cos (as fastmath's float64 functions: exact, for gradchecks, not speed).
# Derivatives: sin' = cos, cos' = -sin (docs/derivations.md#element-wise-arithmetic).
_TRIG_MAX = 524288.0                        # 2^19: beyond, libm
_TWO_OVER_PI = 0.6366197723675814
_PIO2_1 = 1.57079632673412561417e+00
_PIO2_2 = 6.07710050630396597660e-11
_PIO2_3 = 2.02226624871116645580e-21
_PIO2_3T = 8.47842766036889956997e-32
_RINT = 6755399441055744.0                  # 1.5 * 2^52: (t + _RINT) - _RINT rounds t
_SIN1, _SIN2, _SIN3, _SIN4, _SIN5, _SIN6 = (
    -1.66666666666666324348e-01, 8.33333333332248946124e-03, -1.98412698298579493134e-04,
    2.75573137070700676789e-06, -2.50507602534068634195e-08, 1.58969099521155010221e-10)
_COS1, _COS2, _COS3, _COS4, _COS5, _COS6 = (
    4.16666666666666019037e-02, -1.38888888888741095749e-03, 2.48015872894767294178e-05,
    -2.75573143513906633035e-07, 2.08757232129817482790e-09, -1.13596475577881948265e-11)


@njit(**SERIAL_IEEE_DIV, inline="always")
def _trig_f32(x, want_cos):
    """sin(x) (or cos(x)) of a float32 x with |x| <= 2^19, computed in float64."""
    xd = np.float64(x)
    xd = xd if abs(xd) <= _TRIG_MAX else 0.0         # NaN, inf, huge: redone by the fixup
    k = (xd * _TWO_OVER_PI + _RINT) - _RINT
    r = ((xd - k * _PIO2_1) - k * _PIO2_2) - k * _PIO2_3 - k * _PIO2_3T
    z = r * r
    s = r + z * r * (_SIN1 + z * (_SIN2 + z * (_SIN3 + z * (_SIN4 + z * (_SIN5 + z * _SIN6)))))
    s = s if z != 0.0 else r                           # keeps the sign of -0
    c = 1.0 - 0.5 * z + z * z * (_COS1 + z * (_COS2 + z * (_COS3 + z * (_COS4 + z * (
        _COS5 + z * _COS6)))))
    n = np.int64(k) + (1 if want_cos else 0)          # cos x = sin(x + pi/2)
    v = c if n & 1 else s
    return np.float32(-v if n & 2 else v)


def _trig(x, want_cos):
    """sin(x), or cos(x) when ``want_cos``, in x's dtype (Python: NumPy)."""
    return np.cos(x) if want_cos else np.sin(x)


@overload(_trig, inline="always")
def _trig_impl(x, want_cos):
    if x == types.float32:
        return lambda x, want_cos: _trig_f32(x, want_cos)
    if x == types.float64:
        return lambda x, want_cos: math.cos(x) if want_cos else math.sin(x)
    return None


@njit(**SERIAL_IEEE_DIV)
def _trig_fixup(x, g, want_cos, sign, out):
    """out[i] = sign * g[i] * sin(x[i]) (or cos) by libm where |x[i]| > 2^19 or x[i] is
    not finite (g of size 1: no factor); elsewhere the vectorised loop's value stays.
    A count of such elements comes first: a loop with the libm calls in it compiles, with
    512-bit vectors preferred (runtime/startup.py), to code 20 times slower than the
    vectorised count, which is all that most calls need."""
    beyond = 0
    for i in range(x.size):
        beyond += not abs(x[i]) <= _TRIG_MAX
    if beyond == 0:
        return
    for i in range(x.size):
        if not abs(x[i]) <= _TRIG_MAX:
            xd = np.float64(x[i])
            v = sign * (math.cos(xd) if want_cos else math.sin(xd))
            out[i] = v if g.size == 1 else g[i] * v


@njit_with_serial(**PARALLEL_IEEE_DIV)
def trig_forward(x, cosine, out):
    """sin(x), or cos(x) when ``cosine``."""
    for i in prange(x.size):
        out[i] = _trig(x[i], cosine)
    _trig_fixup(x, x[:1], cosine, 1.0, out)
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV)
def trig_backward(g, x, cosine, out):
    """sin's g cos(x), or cos's -(g sin(x)) when ``cosine``."""
    for i in prange(x.size):
        v = g[i] * _trig(x[i], not cosine)
        out[i] = -v if cosine else v
    _trig_fixup(x, g, not cosine, -1.0 if cosine else 1.0, out)
    return out


# -- erf, square ---------------------------------------------------------------------------
@njit_with_serial(**PARALLEL_IEEE_DIV)
def erf_forward(x, out):
    """erf(x) = 2/sqrt(pi) int_0^x e^(-t^2) dt (fastmath: float32 < 2.5 ulp, float64 libm)."""
    for i in prange(x.size):
        out[i] = erf(x[i])
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV)
def erf_backward(g, x, out):
    """g 2/sqrt(pi) e^(-x^2)."""
    c = x.dtype.type(1.1283791670955126)
    for i in prange(x.size):
        out[i] = g[i] * (c * exp(-(x[i] * x[i])))
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV)
def square_forward(x, out):
    for i in prange(x.size):
        out[i] = x[i] * x[i]
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV)
def square_backward(g, x, out):
    """2 g x."""
    two = x.dtype.type(2)
    for i in prange(x.size):
        out[i] = g[i] * (two * x[i])
    return out


# -- rounded division -------------------------------------------------------------------------
@njit(**SERIAL_IEEE_DIV, inline="always")
def _floor_div(a, b, one):
    """floor(a / b) as PyTorch's ``div_floor_floating`` (Python's float //): from the
    remainder fmod(a, b), so a quotient that rounds up to an integer is not floored past
    the true one; b == 0 gives a / b (+-inf or NaN). ``one`` is 1 in a's dtype."""
    if b == 0:
        return a / b
    mod = np.fmod(a, b)
    q = (a - mod) / b
    if mod != 0 and (b < 0) != (mod < 0):
        q -= one
    if q == 0:
        return math.copysign(0.0, a / b) * one     # a signed zero
    f = np.floor(q)
    return f + one if q - f > one / (one + one) else f


@njit_with_serial(**PARALLEL_IEEE_DIV)
def div_trunc(a, b, out):
    """out = trunc(a / b) (floats: the true quotient rounded, then truncated)."""
    for i in prange(out.size):
        out[i] = np.trunc(a[i] / b[i])
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV)
def div_floor(a, b, out):
    """out = floor(a / b), PyTorch's floating floor division (``_floor_div``)."""
    one = out.dtype.type(1)
    for i in prange(out.size):
        out[i] = _floor_div(a[i], b[i], one)
    return out


# -- log1p expm1 reciprocal rsqrt, rounding, sign, frac -----------------------------------------
# One forward and one backward kernel for the point-wise table's op-coded math, the op code
# a constant kernel argument (one loop per op, so each loop is straight-line code). log1p
# and expm1 go through libm in float64 (float32: the float64 result rounded once, so
# correctly rounded but for rare double roundings); reciprocal and rsqrt are IEEE divisions
# (rsqrt = 1 / sqrt(x), two roundings, as PyTorch). Derivatives, as PyTorch's
# derivatives.yaml: log1p' = 1 / (1 + x), expm1' = y + 1, reciprocal' = -y^2,
# rsqrt' = -0.5 y^3 (y the saved output), frac' = 1; floor ceil trunc round sign: 0.
LOG1P, EXPM1, RECIPROCAL, RSQRT, FLOOR, CEIL, TRUNC, FRAC, SIGN = range(10, 19)


@njit_with_serial(**PARALLEL_IEEE_DIV)
def math_forward(x, op, out):
    """out = f(x) for the op code ``op`` (sign(NaN) = 0 and sign(-0) = +0, as PyTorch's
    (0 < x) - (x < 0); frac(x) = x - trunc(x))."""
    one = out.dtype.type(1)
    if op == LOG1P:
        for i in prange(x.size):
            out[i] = math.log1p(np.float64(x[i]))
    elif op == EXPM1:
        for i in prange(x.size):
            out[i] = math.expm1(np.float64(x[i]))
    elif op == RECIPROCAL:
        for i in prange(x.size):
            out[i] = one / x[i]
    elif op == RSQRT:
        for i in prange(x.size):
            out[i] = one / np.sqrt(x[i])
    elif op == FLOOR:
        for i in prange(x.size):
            out[i] = np.floor(x[i])
    elif op == CEIL:
        for i in prange(x.size):
            out[i] = np.ceil(x[i])
    elif op == TRUNC:
        for i in prange(x.size):
            out[i] = np.trunc(x[i])
    elif op == FRAC:
        for i in prange(x.size):
            out[i] = x[i] - np.trunc(x[i])
    elif op == SIGN:
        for i in prange(x.size):
            out[i] = (one if x[i] > 0 else 0) - (one if x[i] < 0 else 0)
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV)
def math_backward(g, s, op, out):
    """The gradient of ``math_forward``'s op from upstream ``g`` and the saved array ``s``
    (x for log1p and frac, y for expm1, reciprocal and rsqrt; the rounding ops' zeros
    ignore it)."""
    one = out.dtype.type(1)
    if op == LOG1P:
        for i in prange(g.size):
            out[i] = g[i] / (s[i] + one)
    elif op == EXPM1:
        for i in prange(g.size):
            out[i] = g[i] * (s[i] + one)
    elif op == RECIPROCAL:
        for i in prange(g.size):
            out[i] = -g[i] * (s[i] * s[i])
    elif op == RSQRT:
        half = out.dtype.type(-0.5)
        for i in prange(g.size):
            out[i] = (half * g[i]) * (s[i] * s[i] * s[i])
    elif op == FRAC:
        for i in prange(g.size):
            out[i] = g[i]
    else:
        for i in prange(g.size):
            out[i] = 0
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV)
def round_forward(x, decimals, out):
    """out = x rounded half to even, at ``decimals`` decimal places (a float holding an
    integer) as PyTorch: rint(x * 10^d) / 10^d, or rint(x / 10^-d) * 10^-d for d < 0,
    in x's dtype."""
    if decimals == 0:
        for i in prange(x.size):
            out[i] = np.rint(x[i])
    else:
        scale = out.dtype.type(10.0 ** abs(decimals))
        if decimals > 0:
            for i in prange(x.size):
                out[i] = np.rint(x[i] * scale) / scale
        else:
            for i in prange(x.size):
                out[i] = np.rint(x[i] / scale) * scale
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV)
def round_backward(g, x, decimals, out):
    """round's gradient: zero (piecewise constant)."""
    for i in prange(g.size):
        out[i] = 0
    return out


# -- fmod, remainder ------------------------------------------------------------------------------
@njit_with_serial(**PARALLEL_IEEE_DIV)
def remainder_forward(a, b, floored, out):
    """out = fmod(a, b) (C's, the sign of a; exact), or with ``floored`` PyTorch's
    remainder: fmod(a, b) + b where that is non-zero and its sign differs from b's (the
    sign of b, as Python's %). b == 0 gives NaN."""
    if floored:
        for i in prange(out.size):
            m = np.fmod(a[i], b[i])
            out[i] = m + b[i] if m != 0 and (b[i] < 0) != (m < 0) else m
    else:
        for i in prange(out.size):
            out[i] = np.fmod(a[i], b[i])
    return out
