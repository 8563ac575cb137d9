"""Point-wise activation kernels, forward and backward: one ``prange`` over the elements
of flat contiguous arrays.

Kernels write into an ``out`` array the caller allocates (NumPy-owned, so the autograd
engine keeps it without a copy, and large ones get transparent huge pages). Numba hands
each thread one contiguous block of elements and the body is straight-line code that
LLVM vectorises, so the result does not depend on the thread count.

Every constant is converted to the array's dtype (``t(0.5)`` with ``t = x.dtype.type``);
transcendentals come from ``fastmath`` (vectorised float32). The kernels compile with
``PARALLEL_IEEE_DIV_FMA`` (runtime/jit.py): IEEE division and fused multiply-adds in
both the vector body and the scalar tail (so the bits stay independent of the thread
count); no other fast-math flag, so inf/NaN semantics hold.

Backward formulas (g = upstream gradient, y = output; derivations in
docs/derivations.md#activations-and-their-kinks):

    tanh        g (1 - y^2)                 sigmoid   g y (1 - y)
    relu        g [not y <= 0]              leaky     g (x > 0 ? 1 : s)
    elu         g (x > 0 ? 1 : alpha e^x)   softplus  g sigmoid(beta x) (g above threshold)
    gelu        g (Phi(x) + x phi(x))  (float32: the forward saves Phi + x phi)
    gelu-tanh   g (0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2)),  t = tanh(k (x + c x^3))
    gelu_quick  g s (1 + 1.702 x (1 - s))   silu      g s (1 + x (1 - s))
    clamp       g [lo <= x <= hi]

At a NaN input: relu passes g through (its test is y <= 0, false for NaN) and leaky_relu
gives g s, as PyTorch; clamp gives 0, and a NaN clamp bound makes the output NaN, as
PyTorch; elu gives NaN (alpha e^NaN), as PyTorch's vectorised loop does.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..runtime.jit import (
    PARALLEL_IEEE_DIV_FMA,
    SERIAL_IEEE_DIV,
    SERIAL_IEEE_DIV_FMA,
    njit_with_serial,
)
from .fastmath import erf, exp, exp_nonpositive, expm1, fma, log1p, tanh
from .gemm import data_pointer


@njit(**SERIAL_IEEE_DIV, inline="always")
def _sigmoid(z, one):
    """1 / (1 + e^-z) through e = e^-|z|, so the negative tail is e / (1 + e): no overflow,
    and subnormal results (z down to -103 in float32) are kept instead of flushed.
    ``one`` is 1 in z's dtype."""
    e = exp_nonpositive(-abs(z))
    return (one if z >= 0 else e) / (one + e)


@njit(**SERIAL_IEEE_DIV, inline="always")
def _within(v, big):
    """v clamped to [-big, big] (NaN stays NaN)."""
    v = big if v > big else v
    return -big if v < -big else v


@njit(**SERIAL_IEEE_DIV, inline="always")
def _swish_slope(z, one):
    """d/dz of z sigmoid(z), s (1 + z (1 - s)) with s = sigmoid(z): silu's derivative, and
    gelu_quick's at z = 1.702 x."""
    s = _sigmoid(z, one)
    return s * (one + z * (one - s))


# -- tanh, sigmoid -----------------------------------------------------------------------


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def tanh_forward(x, out):
    for i in prange(x.size):
        out[i] = tanh(x[i])
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def tanh_backward(g, y, out):
    one = y.dtype.type(1)
    for i in prange(y.size):
        out[i] = g[i] * fma(-y[i], y[i], one)      # 1 - y^2 rounded once
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def sigmoid_forward(x, out):
    one = x.dtype.type(1)
    for i in prange(x.size):
        out[i] = _sigmoid(x[i], one)
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def sigmoid_backward(g, y, out):
    one = y.dtype.type(1)
    for i in prange(y.size):
        out[i] = g[i] * y[i] * (one - y[i])
    return out


# -- relu family ---------------------------------------------------------------------------


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def relu_forward(x, out):
    zero = x.dtype.type(0)
    for i in prange(x.size):
        v = x[i]
        out[i] = zero if v < zero else v       # NaN passes through
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def relu_backward(g, y, out):
    zero = y.dtype.type(0)
    for i in prange(y.size):
        out[i] = zero if y[i] <= zero else g[i]  # NaN: g
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def leaky_relu_forward(x, negative_slope, out):
    zero = x.dtype.type(0)
    s = x.dtype.type(negative_slope)
    for i in prange(x.size):
        v = x[i]
        out[i] = v if v > zero else v * s
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def leaky_relu_backward(g, x, negative_slope, out):
    zero = x.dtype.type(0)
    s = x.dtype.type(negative_slope)
    for i in prange(x.size):
        out[i] = g[i] if x[i] > zero else g[i] * s
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def elu_forward(x, alpha, out):
    zero = x.dtype.type(0)
    a = x.dtype.type(alpha)
    for i in prange(x.size):
        v = x[i]
        neg = a * expm1(v)
        out[i] = v if v > zero else neg
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def elu_backward(g, x, alpha, out):
    zero = x.dtype.type(0)
    a = x.dtype.type(alpha)
    for i in prange(x.size):
        v = x[i]
        neg = g[i] * (a * exp(v))
        out[i] = g[i] if v > zero else neg
    return out


# Phi(x) = erfc(-x / sqrt 2) / 2 for float32 through erfc(a) = e^(-a^2) erfcx(a), with
# erfcx(a) = t P(t), t = 1 / (1 + 0.3275911 a), P a degree-10 minimax fit (relative error
# 1.6e-8 with float32 coefficients, over all a >= 0). One exp, shared with the gelu
# derivative's phi(x) = e^(-x^2/2) / sqrt(2 pi), and relative accuracy in the negative
# tail (where 1 + erf(x / sqrt 2) cancels: gelu(-6) is -6e-9, not 0).
_CDF_P = np.float32(0.3275911)
_CDF_C = tuple(np.float32(c) for c in (
    0.18482348322868347, 0.18482375144958496, 0.17490032315254211, 0.15509207546710968,
    0.12740422785282135, 0.08780127763748169, 0.08871496468782425, -0.050980910658836365,
    0.135844424366951, -0.11800968647003174, 0.02958608791232109))
_C0, _C1, _C2, _C3, _C4, _C5, _C6, _C7, _C8, _C9, _C10 = _CDF_C


@njit(**SERIAL_IEEE_DIV, inline="always")
def _erfcx_f32(a):
    """erfcx(a) = e^(a^2) erfc(a) for float32 a >= 0 (or NaN)."""
    t = np.float32(1) / (np.float32(1) + _CDF_P * a)
    p = (((((((((_C10 * t + _C9) * t + _C8) * t + _C7) * t + _C6) * t + _C5) * t + _C4) * t
            + _C3) * t + _C2) * t + _C1) * t + _C0
    return t * p


_INV_SQRT2PI_F32 = np.float32(0.3989422804014327)


@njit(**SERIAL_IEEE_DIV, inline="always")
def _cdf_f32(v):
    """(Phi(v), e^(-v^2/2)) for float32 v: Phi = erfc(-v / sqrt 2) / 2 = 1 - tail or tail,
    with tail = Phi(-|v|) = e^(-v^2/2) erfcx(|v| / sqrt 2) / 2."""
    half = np.float32(0.5)
    e = exp_nonpositive(-half * v * v)
    tail = half * e * _erfcx_f32(abs(v) * np.float32(0.7071067811865476))
    return (np.float32(1) - tail if v > 0 else tail), e


# -- gelu family, silu ----------------------------------------------------------------------


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def gelu_forward(x, out):
    """Reference form, y = x (1 + erf(x / sqrt 2)) / 2 (used for float64: libm erf)."""
    t = x.dtype.type
    half = t(0.5)
    one = t(1)
    inv_sqrt2 = t(0.7071067811865476)
    for i in prange(x.size):
        v = x[i]
        out[i] = half * v * (one + erf(v * inv_sqrt2))
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def gelu_backward(g, x, out):
    """Reference form, Phi(x) + x phi(x) with Phi through erf (used for float64)."""
    t = x.dtype.type
    half = t(0.5)
    one = t(1)
    inv_sqrt2 = t(0.7071067811865476)
    inv_sqrt2pi = t(0.3989422804014327)
    for i in prange(x.size):
        v = x[i]
        cdf = half * (one + erf(v * inv_sqrt2))
        pdf = exp(-half * v * v) * inv_sqrt2pi
        out[i] = g[i] * fma(v, pdf, cdf)         # both terms are products: one FMA, chosen
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def gelu_forward_f32(x, out):
    """float32 fast path: Phi = erfc(-x / sqrt 2) / 2 = 1 - tail or tail, with
    tail = e^(-x^2/2) erfcx(|x| / sqrt 2) / 2."""
    for i in prange(x.size):
        v = x[i]
        out[i] = v * _cdf_f32(v)[0]
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def gelu_backward_f32(g, x, out):
    """float32 fast path: Phi(x) + x phi(x), one exp for both (see gelu_forward_f32)."""
    for i in prange(x.size):
        v = x[i]
        cdf, e = _cdf_f32(v)
        out[i] = g[i] * (cdf + v * (e * _INV_SQRT2PI_F32))
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def gelu_forward_grad_f32(x, out, dout):
    """gelu_forward_f32 that also stores the derivative dout = Phi(x) + x phi(x) (the
    value gelu_backward_f32 computes, bit for bit): the forward is compute-bound, so the
    extra store is nearly free, and the backward becomes one multiply, g * dout
    (``mul_saved``), instead of a second exp and erfcx."""
    for i in prange(x.size):
        v = x[i]
        cdf, e = _cdf_f32(v)
        out[i] = v * cdf                                         # y = x Phi(x)
        dout[i] = cdf + v * (e * _INV_SQRT2PI_F32)               # Phi(x) + x phi(x)
    return out, dout


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def mul_saved(g, d, out):
    """out = g * d: the backward of an op whose forward saved its derivative d. ``g`` is
    flat and full size, or of size 1 (a broadcast scalar upstream, never materialised)."""
    if g.size == 1:
        gs = g[0]
        for i in prange(d.size):
            out[i] = gs * d[i]
    else:
        for i in prange(d.size):
            out[i] = g[i] * d[i]
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def gelu_tanh_forward(x, out):
    t = x.dtype.type
    half = t(0.5)
    one = t(1)
    k = t(0.7978845608028654)
    c = t(0.044715)
    for i in prange(x.size):
        v = x[i]
        out[i] = half * v * (one + tanh(k * (v + c * v * v * v)))
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def gelu_tanh_backward(g, x, out):
    t = x.dtype.type
    half = t(0.5)
    one = t(1)
    k = t(0.7978845608028654)
    c = t(0.044715)
    c3 = t(3 * 0.044715)
    big = t(20)
    for i in prange(x.size):
        # beyond |x| = 20, tanh(v) is +-1 exactly and the derivative exactly 1 or 0; the
        # clamp keeps x^2 finite so that (1 - tanh^2) * x^2 is never 0 * inf
        v = _within(x[i], big)
        th = tanh(k * (v + c * v * v * v))
        d = half * (one + th) + half * v * (one - th * th) * k * (one + c3 * v * v)
        out[i] = g[i] * d
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def gelu_quick_forward(x, out):
    t = x.dtype.type
    one = t(1)
    a = t(1.702)
    for i in prange(x.size):
        v = x[i]
        out[i] = v * _sigmoid(a * v, one)
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def gelu_quick_backward(g, x, out):
    t = x.dtype.type
    one = t(1)
    a = t(1.702)
    big = t(1e4)
    for i in prange(x.size):
        # s(1 + a x (1 - s)) through s, never ggml's (..)/(1 + e)^2 (inf/inf below -49.5);
        # beyond |x| = 1e4 the derivative is exactly 0 or 1 in float32 and float64 (s
        # underflows to 0 or rounds to 1) and the clamp keeps a x finite
        v = _within(x[i], big)
        out[i] = g[i] * _swish_slope(a * v, one)
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def silu_forward(x, out):
    one = x.dtype.type(1)
    for i in prange(x.size):
        v = x[i]
        out[i] = v * _sigmoid(v, one)
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def silu_backward(g, x, out):
    one = x.dtype.type(1)
    for i in prange(x.size):
        out[i] = g[i] * _swish_slope(x[i], one)
    return out


# -- softplus, clamp -------------------------------------------------------------------------


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def softplus_forward(x, beta, threshold, out):
    t = x.dtype.type
    zero = t(0)
    b = t(beta)
    thr = t(threshold)
    inv_b = t(1) / b
    for i in prange(x.size):
        v = x[i]
        z = b * v
        # log(1 + e^z) = max(z, 0) + log1p(e^-|z|): no overflow for any z
        soft = ((z if z > zero else zero) + log1p(exp(-abs(z)))) * inv_b
        out[i] = v if z > thr else soft
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def softplus_backward(g, x, beta, threshold, out):
    t = x.dtype.type
    one = t(1)
    b = t(beta)
    thr = t(threshold)
    for i in prange(x.size):
        z = b * x[i]
        out[i] = g[i] if z > thr else g[i] * _sigmoid(z, one)
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def clamp_forward(x, lo, hi, out):
    t = x.dtype.type
    lo = t(lo)
    hi = t(hi)
    for i in prange(x.size):
        # min(max(x, lo), hi): hi wins when lo > hi; a NaN x or bound gives NaN
        v = x[i]
        v = lo if (v < lo or lo != lo) else v
        out[i] = hi if (v > hi or hi != hi) else v
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def clamp_backward(g, x, lo, hi, out):
    t = x.dtype.type
    zero = t(0)
    lo = t(lo)
    hi = t(hi)
    for i in prange(x.size):
        v = x[i]
        out[i] = g[i] if (v >= lo and v <= hi) else zero
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def clamp_tensor_forward(x, lo, hi, out):
    """clamp with element-wise bounds (all three flat, same size); NaN where x or a bound
    is NaN."""
    for i in prange(x.size):
        v = x[i]
        a = lo[i]
        b = hi[i]
        v = a if (v < a or a != a) else v
        out[i] = b if (v > b or b != b) else v
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def clamp_tensor_backward(g, x, lo, hi, has_max, gx, glo, ghi):
    """PyTorch's split of g among x, min and max: x where lo <= x <= hi; min where
    x < lo < hi; max where x > hi or hi < lo. Absent bounds come in as -inf/+inf, which
    gives clamp_max's rule (max where x > hi) unchanged; clamp_min's (min where x < lo)
    has no "lo < hi" (``has_max`` False): with lo = +inf, x < lo still passes g to min."""
    zero = x.dtype.type(0)
    for i in prange(x.size):
        v = x[i]
        a = lo[i]
        b = hi[i]
        gi = g[i]
        gx[i] = gi if (v >= a and v <= b) else zero
        glo[i] = gi if (v < a and (a < b or not has_max)) else zero
        ghi[i] = gi if (v > b or b < a) else zero
    return gx, glo, ghi


# -- a matrix product's epilogue (kernels/matmul.py) -------------------------------------------
#
# linear's bias add and a following relu, tanh or sigmoid run on each sliver of rows of
# the product once its tiles are stored (its last block of k), while it is in L1, instead
# of as two more passes over the output. The same expressions as the bias add
# (kernels/elementwise.py) and the kernels above, compiled with their flags, give the same
# bits. Only activations whose backward reads their output: the product's value before
# the activation is not kept. The tile functions take pointers (gemm.data_pointer): an
# array argument would cost two atomic reference-count updates per tile.

NO_ACTIVATION, RELU, TANH, SIGMOID = 0, 1, 2, 3
ACTIVATIONS = {"relu": RELU, "tanh": TANH, "sigmoid": SIGMOID}   # op name -> code
# where a bias runs: none, along the output's columns (one value per column), or its rows
NO_BIAS, BIAS_ALONG_COLUMNS, BIAS_ALONG_ROWS = 0, 1, 2


@njit(**SERIAL_IEEE_DIV)
def add_bias_tile(out, o, ldo, rows, cols, bias, b0, along):
    """out[o + r ldo + j] += bias[b0 + j] for r < rows, j < cols (bias[b0 + r] if
    ``along`` is BIAS_ALONG_ROWS); out and bias are pointers."""
    for r in range(rows):
        row = o + r * ldo
        if along == BIAS_ALONG_ROWS:
            b = bias[b0 + r]
            for j in range(cols):
                out[row + j] = out[row + j] + b
        else:
            for j in range(cols):
                out[row + j] = out[row + j] + bias[b0 + j]


@njit(**SERIAL_IEEE_DIV_FMA)
def activate_tile(out, o, ldo, rows, cols, activation, one):
    """out[o + r ldo + j] = f(out[o + r ldo + j]) for r < rows, j < cols, f the
    code's function (``ACTIVATIONS``) as relu_forward, tanh_forward and sigmoid_forward
    compute it; out is a pointer, ``one`` 1 in its dtype."""
    zero = one - one
    for r in range(rows):
        row = o + r * ldo
        if activation == RELU:
            for j in range(cols):
                v = out[row + j]
                out[row + j] = zero if v < zero else v
        elif activation == TANH:
            for j in range(cols):
                out[row + j] = tanh(out[row + j])
        elif activation == SIGMOID:
            for j in range(cols):
                out[row + j] = _sigmoid(out[row + j], one)


@njit(**SERIAL_IEEE_DIV)
def apply_epilogue(out, rows, cols, bias, along, activation):
    """The epilogue over a whole flat [rows, cols] ``out`` (a product that skips the
    GEMM), bias an array."""
    if along != NO_BIAS:
        add_bias_tile(data_pointer(out), 0, cols, rows, cols, data_pointer(bias), 0, along)
    if activation:
        activate_tile(data_pointer(out), 0, cols, rows, cols, activation, out.dtype.type(1))
