"""Vectorisable transcendental functions for Numba kernels: exp, expm1, log, log1p, erf, tanh.

pip's llvmlite has no SVML, so ``math.exp`` and friends inside an ``@njit`` loop stay
scalar libm calls and block vectorisation. The float32 versions here are straight-line
polynomial code (range reduction, Horner or Estrin, bit-level scaling, and ``select``
for the edges), so LLVM turns a loop over them into packed AVX code. Call them from
``@njit`` code on scalars; one name serves float32 and float64
(``numba.extending.overload`` dispatches on the argument type)::

    from nbgrad.runtime.jit import SERIAL
    from nbgrad.kernels.fastmath import exp, tanh

    @njit(**SERIAL)
    def kernel(x, out):
        for i in range(x.size):
            out[i] = tanh(x[i]) * exp(-x[i])

float64 takes the exact libm path (``math.exp`` ...): a polynomial meeting 1e-14 relative
everywhere (notably erf, tanh and log1p near 0) costs more terms than the float64 ops
need (they are for gradchecks, not for speed). Called from Python, the names evaluate
the same function with NumPy/SciPy (a convenience, not the fast path).

Methods (float32, every constant float32 so the loop stays float32):
* exp: k = rint(x / ln2), r = x - k ln2 (ln2 split in two), degree-7 polynomial
  (Estrin's scheme), times 2^k built from exponent bits in two halves (so subnormal
  results and the overflow to inf come out right).
* expm1: x + x^2 P(x) (minimax, degree 6) for |x| < 0.75; exp(x) - 1 beyond.
* log: x = m 2^e with m in [sqrt(1/2), sqrt(2)), log(m) by a degree-10 polynomial in
  m - 1; subnormal inputs are rescaled by 2^23 first.
* log1p: u = 1 + x, log1p(x) = log(u) * x / (u - 1) (exact correction of the rounding
  in u); x where u == 1.
* erf: x P(x^2) (minimax, degree 6 in x^2) for |x| < 0.921875; beyond,
  sign(x) (1 - exp(Q(|x|))) with Q a degree-8 fit of log(erfc(t)) on [0.92, 4];
  |x| >= 4 gives +-1.
* tanh: x + x^3 P(x^2) (minimax, degree 5 in x^2) for |x| < 0.625; beyond,
  sign(x) (1 - e) / (1 + e) with e = exp(-2|x|) (argument clamped at -87).
* erf and tanh call a lean exp (no overflow/underflow handling, one scaling step) since
  their arguments stay in the normal range.

Accuracy, float32: error in units of the float32 result's ulp against the exact value
(float64 NumPy/SciPy), on a dense sweep (every 61st float32 of the range, 1.2e7 to
3.5e7 points per function; tests/kernels/test_fastmath.py repeats it on a coarser sweep):

    function  range swept                  max error (ulp)   with FMA contraction
    exp       [-104, 88.7]                 0.97              1.01
    expm1     [-104, 88.7]                 1.68              1.77
    log       [1e-45, 3.4e38]              0.79              0.79  (subnormals included)
    log1p     [-1 + 2^-24, 3.4e38]         2.38              2.38
    erf       [-10, 10]                    2.41              2.40
    tanh      [-20, 20]                    1.50              1.50

The last column is for a caller compiled with ``fastmath={"contract"}`` (FMA), as
the activation kernels do (tests/kernels/test_fastmath.py checks both). Only ``contract`` is
safe: ``reassoc`` would merge the two parts of ln2 in exp's range reduction (and fold the
rounding trick (t + 1.5 2^23) - 1.5 2^23 of attention's exp weight away), and
``nnan``/``ninf`` would break the edge handling.

All six vectorise (packed AVX ``vfmadd``/``vmulps`` in a loop calling them, checked in the
tests): they are inlined at the Numba IR level and divide through ``_div`` (no
ZeroDivisionError branch).

Edges: NaN -> NaN; exp: overflow -> inf, underflow -> 0 (subnormal results kept),
exp(+-inf) = inf, 0; expm1(-inf) = -1; log(0) = -inf, log(x < 0) = NaN, log(inf) = inf;
log1p(-1) = -inf; erf(+-inf) = +-1; tanh(+-inf) = +-1; odd functions keep the sign of 0.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload, register_jitable

# -- bit casts between float32 and int32 (no libm, no memory round trip) -------------------


@intrinsic
def _f32_from_bits(typingctx, i):
    if i != types.int32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.int32), codegen


@intrinsic
def _bits_of_f32(typingctx, x):
    if x != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.int32(types.float32), codegen


@intrinsic
def _div(typingctx, a, b):
    """a / b without Numba's ZeroDivisionError check (whose raise path blocks vectorisation);
    IEEE semantics: x/0 = +-inf, 0/0 = NaN."""
    if not (isinstance(a, types.Float) and a == b):
        return None

    def codegen(context, builder, signature, args):
        return builder.fdiv(args[0], args[1])

    return a(a, b), codegen


@intrinsic
def fma(typingctx, a, b, c):
    """a * b + c rounded once (LLVM's fma: the FMA instruction), whatever the caller's
    fast-math flags. With ``contract``, whether LLVM fuses a * b + c depends on how many
    other uses the product has, and inlining several ops into one loop can merge equal
    products of different ops (a fused region's tanh and its gradient both square the
    same value): where an op's bits rest on an FMA, it is written with this."""
    if not (isinstance(a, types.Float) and a == b == c):
        return None

    def codegen(context, builder, signature, args):
        return builder.fma(*args)

    return a(a, b, c), codegen


_F = np.float32
_ZERO, _HALF, _ONE, _TWO = _F(0.0), _F(0.5), _F(1.0), _F(2.0)
_INF = _F(np.inf)
_NAN = _F(np.nan)

# exp
_LOG2E = _F(1.4426950408889634)
_LN2_HI = _F(0.693359375)          # 355/512: k * _LN2_HI is exact for |k| < 2^15
_LN2_LO = _F(-2.1219444005469057e-4)
_ROUND = _F(12582912.0)            # 1.5 * 2^23: (t + _ROUND) - _ROUND rounds t to nearest
_EXP_HI = _F(88.72284)             # above: inf
_EXP_LO = _F(-104.0)               # below: 0 (exp(-104) < half the smallest subnormal)
_E2, _E3, _E4, _E5, _E6, _E7 = (_F(c) for c in (
    0.5, 1.6666665459e-1, 4.1665795894e-2, 8.3334519073e-3, 1.3981999507e-3,
    1.9875691500e-4))

# expm1 (x + x^2 * P(x) on |x| < 0.75; minimax for relative error)
_EXPM1_CUT = _F(0.75)
_M0, _M1, _M2, _M3, _M4, _M5, _M6 = (_F(c) for c in (
    0.5, 0.16666676104068756, 0.04166659340262413, 0.008332370780408382,
    0.0013890990521758795, 0.00020138919353485107, 2.4777784346952103e-05))

# log
_SQRTH = _F(0.70710678118654752)
_TWO23 = _F(8388608.0)
_SMALLEST_NORMAL = _F(1.17549435e-38)
_L = tuple(_F(c) for c in (
    7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
    1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
    3.3333331174e-1))
_L0, _L1, _L2, _L3, _L4, _L5, _L6, _L7, _L8 = _L

# erf
_ERF_CUT = _F(0.921875)
_ERF_MAX = _F(4.0)
_S0, _S1, _S2, _S3, _S4, _S5, _S6 = (_F(c) for c in (
    1.128379225730896, -0.37612634897232056, 0.11283695697784424, -0.026859400793910027,
    0.00520103657618165, -0.0008142744190990925, 8.370243449462578e-05))
_Q0, _Q1, _Q2, _Q3, _Q4, _Q5, _Q6, _Q7, _Q8 = (_F(c) for c in (
    0.0002942796272691339, -1.130131483078003, -0.6319953203201294, -0.10992520302534103,
    0.026335550472140312, -0.00473028514534235, 0.0005907159065827727,
    -4.5354656322160736e-05, 1.6024936257963418e-06))

# tanh
_TANH_CUT = _F(0.625)
_T0, _T1, _T2, _T3, _T4, _T5 = (_F(c) for c in (
    -0.3333333134651184, 0.1333320587873459, -0.05394676327705383, 0.021700702607631683,
    -0.008177397772669792, 0.0021429613698273897))


# -- float32 implementations ------------------------------------------------------------------


@register_jitable(inline="always")
def _exp_reduced_f32(x, k):
    """e^r for r = x - k ln2 (ln2 in two parts, |r| <= ln2 / 2): the degree-7 polynomial
    1 + r + r^2 P(r), P by Estrin's scheme (pairs of terms, then powers of r^2): three
    dependent multiply-adds where Horner's rule has five. A fused chain of point-wise ops
    is bound by its longest chain of dependent instructions, not by their count."""
    r = x - k * _LN2_HI - k * _LN2_LO
    r2 = r * r
    p = ((_E7 * r + _E6) * r2 + (_E5 * r + _E4)) * r2 + (_E3 * r + _E2)
    return p * r2 + r + _ONE


@register_jitable(inline="always")
def _exp_core_f32(x):
    """e^x for x in [-87, 88] (normal results) or NaN: no edge handling, one scaling."""
    k = np.rint(x * _LOG2E)
    y = _exp_reduced_f32(x, k)
    k = k if k == k else _ZERO                   # NaN: r carries it; keep the int cast defined
    return y * _f32_from_bits(np.int32((np.int32(k) + 127) << 23))


@register_jitable(inline="always")
def _exp_clamped_f32(x, t):
    """e^x from t = x log2(e) clamped to [-151, 129] (a NaN x clamped too: r carries it):
    k = round(t), e^(x - k ln2) times 2^k built in two halves, so subnormal results and
    the overflow to inf come out right."""
    k = np.rint(t)
    y = _exp_reduced_f32(x, k)
    ki = np.int32(k)
    h = np.int32(ki >> 1)
    s1 = _f32_from_bits(np.int32((h + 127) << 23))
    s2 = _f32_from_bits(np.int32((ki - h + 127) << 23))
    return (y * s1) * s2


@register_jitable(inline="always")
def _exp_f32(x):
    t = x * _LOG2E
    t = t if t > _F(-151.0) else _F(-151.0)     # NaN goes to -151 here but stays in r
    t = t if t < _F(129.0) else _F(129.0)
    y = _exp_clamped_f32(x, t)
    y = _INF if x > _EXP_HI else y
    return _ZERO if x < _EXP_LO else y


@register_jitable(inline="always")
def _exp_nonpos_f32(x):
    """_exp_f32 for x <= 0 (or NaN), bit for bit, without the overflow edge (its upper
    clamp and the inf select): e^-|z| in sigmoid, e^(x - max) in softmax, e^(-x^2/2)."""
    t = x * _LOG2E
    t = t if t > _F(-151.0) else _F(-151.0)     # NaN goes to -151 here but stays in r
    y = _exp_clamped_f32(x, t)
    return _ZERO if x < _EXP_LO else y


@register_jitable
def _expm1_f32(x):
    p = (((((_M6 * x + _M5) * x + _M4) * x + _M3) * x + _M2) * x + _M1) * x + _M0
    small = x + x * x * p
    small = x if x == _ZERO else small           # keeps the sign of -0
    big = _exp_f32(x) - _ONE
    return small if abs(x) < _EXPM1_CUT else big


@register_jitable(inline="always")
def _log_f32(x):
    sub = x < _SMALLEST_NORMAL
    xs = x * _TWO23 if sub else x
    bits = _bits_of_f32(xs)
    e = ((bits >> 23) & 0xFF) - 126 - (23 if sub else 0)
    m = _f32_from_bits(np.int32((bits & 0x007FFFFF) | 0x3F000000))   # m in [0.5, 1)
    low = m < _SQRTH
    f = (m + m - _ONE) if low else (m - _ONE)
    ef = _F(e - 1) if low else _F(e)
    z = f * f
    p = ((((((((_L0 * f + _L1) * f + _L2) * f + _L3) * f + _L4) * f + _L5) * f + _L6) * f
          + _L7) * f + _L8)
    y = p * f * z + ef * _LN2_LO - _HALF * z
    y = f + y + ef * _LN2_HI
    y = _INF if x == _INF else y
    y = -_INF if x == _ZERO else y
    return y if x >= _ZERO else _NAN             # x < 0 and NaN -> NaN


@register_jitable
def _log1p_f32(x):
    u = x + _ONE
    d = u - _ONE
    y = _log_f32(u) * _div(x, d)
    y = x if d == _ZERO else y
    return y if x < _INF else x


@register_jitable
def _erf_f32(x):
    a = abs(x)
    s = x * x
    small = x * ((((((_S6 * s + _S5) * s + _S4) * s + _S3) * s + _S2) * s + _S1) * s + _S0)
    t = _ERF_MAX if a > _ERF_MAX else a
    q = (((((((_Q8 * t + _Q7) * t + _Q6) * t + _Q5) * t + _Q4) * t + _Q3) * t + _Q2) * t
         + _Q1) * t + _Q0
    big = _ONE - _exp_core_f32(q)               # q in [-17, -1.2]
    big = big if x >= _ZERO else -big
    return small if a < _ERF_CUT else big


@register_jitable
def _tanh_f32(x):
    a = abs(x)
    s = x * x
    p = ((((_T5 * s + _T4) * s + _T3) * s + _T2) * s + _T1) * s + _T0
    small = x + x * s * p
    small = x if x == _ZERO else small           # keeps the sign of -0
    z = -_TWO * a
    e = _exp_core_f32(_F(-87.0) if z < _F(-87.0) else z)   # tanh is 1 there anyway
    big = _div(_ONE - e, _ONE + e)
    big = big if x >= _ZERO else -big
    return small if a < _TANH_CUT else big


# -- public names: one per function, dispatching on float32/float64 ------------------------


def _dispatch(f32_impl, libm):
    """An overload typer: ``f32_impl`` for float32, the exact libm function ``libm``
    (``math.exp`` ...) for float64."""

    def f64_impl(x):
        return libm(x)

    def typer(x):
        if isinstance(x, types.Float):
            return f32_impl if x.bitwidth == 32 else f64_impl
        return None
    return typer


def exp(x):
    """e^x (float32: about 1 ulp; float64: libm)."""
    return np.exp(x)


def exp_nonpositive(x):
    """e^x for x <= 0 or NaN (float32: exp's bits there, fewer operations; a positive x
    gives garbage, not inf; float64: libm)."""
    return np.exp(x)


def expm1(x):
    """e^x - 1, accurate near 0 (float32: <= 2 ulp; float64: libm)."""
    return np.expm1(x)


def log(x):
    """Natural logarithm (float32: < 1 ulp; float64: libm)."""
    return np.log(x)


def log1p(x):
    """log(1 + x), accurate near 0 (float32: < 2.5 ulp; float64: libm)."""
    return np.log1p(x)


def erf(x):
    """Error function 2/sqrt(pi) int_0^x exp(-t^2) dt (float32: < 2.5 ulp; float64: libm)."""
    from scipy.special import erf as scipy_erf
    return scipy_erf(x)


def tanh(x):
    """Hyperbolic tangent (float32: <= 2 ulp; float64: libm)."""
    return np.tanh(x)


overload(exp, inline="always")(_dispatch(_exp_f32, math.exp))
overload(exp_nonpositive, inline="always")(_dispatch(_exp_nonpos_f32, math.exp))
overload(expm1, inline="always")(_dispatch(_expm1_f32, math.expm1))
# log is inlined by LLVM, not by Numba's IR inliner: IR-inlining _log_f32 (whose ternaries
# become phi nodes) into the pow loop of kernels/strided_apply.py made Numba's own IR
# checks print NumbaIRAssumptionWarnings on a float32 ``x ** 3``; the speed is the same.
overload(log)(_dispatch(_log_f32, math.log))
overload(log1p, inline="always")(_dispatch(_log1p_f32, math.log1p))
overload(erf, inline="always")(_dispatch(_erf_f32, math.erf))
overload(tanh, inline="always")(_dispatch(_tanh_f32, math.tanh))

__all__ = ["exp", "exp_nonpositive", "expm1", "log", "log1p", "erf", "tanh"]
