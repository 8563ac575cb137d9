"""Activation, softmax-family and loss kernels: forward and backward loop nests.

Kernels write into an ``out`` array the caller allocates (NumPy-owned, so the autograd
engine keeps it without a copy, and large ones get transparent huge pages).
Element-wise kernels take flat contiguous arrays and run one ``prange`` over the
elements (Numba hands each thread one contiguous block; the body is straight-line code,
vectorised by LLVM, so the result does not depend on the thread count). Row kernels
(softmax, log_softmax, logsumexp, cross_entropy) take ``[rows, C]`` contiguous arrays and
give each ``prange`` iteration whole rows. Reductions to a scalar (mse) sum fixed-size
blocks in parallel and then the block sums in order, so they are bitwise reproducible.

Every constant is converted to the array's dtype (``t(0.5)`` with ``t = x.dtype.type``);
transcendentals come from ``fastmath`` (vectorised float32). ``error_model="numpy"``
makes division IEEE (no ZeroDivisionError branch), which keeps loops vectorisable, and
``fastmath={"contract"}`` lets LLVM fuse multiply-adds (FMA in both the vector body and
the scalar tail, so results stay bitwise independent of the thread count); no other
fast-math flag, so inf/NaN semantics hold.

Numba 0.68 pitfall met here: tuple unpacking of row views and scalars in a ``prange``
body (``xr, out, gr = x[r], gx[r], g[r]``) made a later store ``out[t] = ...`` vanish;
the kernels assign one name per statement.

Backward formulas (g = upstream gradient, y = output; see REFERENCE.md):
    tanh        g (1 - y^2)                 sigmoid   g y (1 - y)
    relu        g [y > 0]                   leaky     g (x > 0 ? 1 : s)
    elu         g (x > 0 ? 1 : alpha e^x)   softplus  g sigmoid(beta x) (g above threshold)
    gelu        g (Phi(x) + x phi(x))  (float32: the forward saves Phi + x phi)
    gelu-tanh   g (0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2)),  t = tanh(k (x + c x^3))
    gelu_quick  g s (1 + 1.702 x (1 - s))   silu      g s (1 + x (1 - s))
    clamp       g [lo <= x <= hi]
    softmax     y (g - sum(g y))            log_softmax  g - e^y sum(g)
    logsumexp   g e^(x - y)                 cross_entropy  g_i (softmax - onehot)
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, types
from numba.extending import overload

from .fastmath import _f32_from_bits, erf, exp, exp_nonpositive, expm1, log, log1p, tanh

_OPTS = {"cache": True, "parallel": True, "error_model": "numpy", "fastmath": {"contract"}}
_SERIAL = {"cache": True, "error_model": "numpy"}
ROW_BLOCK = 32          # rows per prange iteration in the row kernels that need scratch
SUM_BLOCK = 1 << 14     # elements per partial sum in the reductions to a scalar


# -- helpers: row reductions (fixed order, so thread-count independent) --------------------


@njit(**_SERIAL)
def _max8(a):
    """max of a 1-D array, NaN skipped; -inf when empty."""
    m0 = m1 = m2 = m3 = m4 = m5 = m6 = m7 = a.dtype.type(-np.inf)
    n = a.size
    nb = n - n % 8
    for j in range(0, nb, 8):
        v = a[j]
        m0 = v if v > m0 else m0
        v = a[j + 1]
        m1 = v if v > m1 else m1
        v = a[j + 2]
        m2 = v if v > m2 else m2
        v = a[j + 3]
        m3 = v if v > m3 else m3
        v = a[j + 4]
        m4 = v if v > m4 else m4
        v = a[j + 5]
        m5 = v if v > m5 else m5
        v = a[j + 6]
        m6 = v if v > m6 else m6
        v = a[j + 7]
        m7 = v if v > m7 else m7
    for j in range(nb, n):
        v = a[j]
        m0 = v if v > m0 else m0
    m0 = m1 if m1 > m0 else m0
    m2 = m3 if m3 > m2 else m2
    m4 = m5 if m5 > m4 else m4
    m6 = m7 if m7 > m6 else m6
    m0 = m2 if m2 > m0 else m0
    m4 = m6 if m6 > m4 else m4
    return m4 if m4 > m0 else m0


@njit(**_SERIAL)
def _max_f32(a):
    """max of a 1-D float32 array through order-preserving integer keys of its bits
    (k = b ^ ((b >> 31) & 0x7fffffff) orders floats as signed ints), an integer max that
    LLVM vectorises; -inf when empty. A NaN with the sign bit clear wins (so the row
    turns NaN, as PyTorch); the caller's exp(x - max) turns any other NaN row NaN too."""
    bits = a.view(np.int32)
    m = np.int32(-2139095041)                    # key of -inf (bits 0xff800000)
    for j in range(bits.size):
        b = bits[j]
        k = np.int32(b ^ ((b >> 31) & 0x7FFFFFFF))
        m = k if k > m else m
    return _f32_from_bits(np.int32(m ^ ((m >> 31) & 0x7FFFFFFF)))


def _row_max(a):
    """max of a 1-D float array (NaN skipped or propagated as described in the helpers)."""
    return np.max(a)


@overload(_row_max)
def _row_max_dispatch(a):
    if isinstance(a, types.Array) and a.dtype == types.float32:
        return lambda a: _max_f32(a)
    return lambda a: _max8(a)


@njit(cache=True, error_model="numpy", fastmath={"reassoc", "contract"})
def _sum(a):
    """sum of a 1-D array in a's dtype. ``reassoc`` lets LLVM vectorise it (several partial
    sums); the order is fixed at compile time, so results do not depend on threads."""
    s = a.dtype.type(0)
    for j in range(a.size):
        s += a[j]
    return s


@njit(cache=True, error_model="numpy", fastmath={"reassoc", "contract"})
def _dot(a, b):
    """sum of a * b over two 1-D arrays (vectorised like ``_sum``)."""
    s = a.dtype.type(0)
    for j in range(a.size):
        s += a[j] * b[j]
    return s


@njit(**_SERIAL)
def _exp_shifted_sum(x, m, e):
    """e[j] = exp(x[j] - m) and their sum."""
    for j in range(x.size):
        e[j] = exp(x[j] - m)
    return _sum(e)


@njit(**_SERIAL)
def _lse_shift(a):
    """The shift for a log-sum-exp: the row max, or 0 when that is +-inf (so an all -inf
    row gives -inf and a row holding +inf gives +inf, as PyTorch)."""
    m = _row_max(a)
    return m if abs(m) < np.inf else a.dtype.type(0)


@njit(**_SERIAL, inline="always")
def _sigmoid(z, one):
    """1 / (1 + e^-z) through e = e^-|z|, so the negative tail is e / (1 + e): no overflow,
    and subnormal results (z down to -103 in float32) are kept instead of flushed.
    ``one`` is 1 in z's dtype."""
    e = exp_nonpositive(-abs(z))
    return (one if z >= 0 else e) / (one + e)


# -- tanh, sigmoid -----------------------------------------------------------------------


@njit(**_OPTS)
def tanh_forward(x, out):
    for i in prange(x.size):
        out[i] = tanh(x[i])
    return out


@njit(**_OPTS)
def tanh_backward(g, y, out):
    one = y.dtype.type(1)
    for i in prange(y.size):
        out[i] = g[i] * (one - y[i] * y[i])
    return out


@njit(**_OPTS)
def sigmoid_forward(x, out):
    one = x.dtype.type(1)
    for i in prange(x.size):
        out[i] = _sigmoid(x[i], one)
    return out


@njit(**_OPTS)
def sigmoid_backward(g, y, out):
    one = y.dtype.type(1)
    for i in prange(y.size):
        out[i] = g[i] * y[i] * (one - y[i])
    return out


# -- relu family ---------------------------------------------------------------------------


@njit(**_OPTS)
def relu_forward(x, out):
    zero = x.dtype.type(0)
    for i in prange(x.size):
        v = x[i]
        out[i] = zero if v < zero else v       # NaN passes through
    return out


@njit(**_OPTS)
def relu_backward(g, y, out):
    zero = y.dtype.type(0)
    for i in prange(y.size):
        out[i] = g[i] if y[i] > zero else zero
    return out


@njit(**_OPTS)
def leaky_relu_forward(x, negative_slope, out):
    zero = x.dtype.type(0)
    s = x.dtype.type(negative_slope)
    for i in prange(x.size):
        v = x[i]
        out[i] = v if v > zero else v * s
    return out


@njit(**_OPTS)
def leaky_relu_backward(g, x, negative_slope, out):
    zero = x.dtype.type(0)
    s = x.dtype.type(negative_slope)
    for i in prange(x.size):
        out[i] = g[i] if x[i] > zero else g[i] * s
    return out


@njit(**_OPTS)
def elu_forward(x, alpha, out):
    zero = x.dtype.type(0)
    a = x.dtype.type(alpha)
    for i in prange(x.size):
        v = x[i]
        neg = a * expm1(v)
        out[i] = v if v > zero else neg
    return out


@njit(**_OPTS)
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


@njit(**_SERIAL, inline="always")
def _erfcx_f32(a):
    """erfcx(a) = e^(a^2) erfc(a) for float32 a >= 0 (or NaN)."""
    t = np.float32(1) / (np.float32(1) + _CDF_P * a)
    p = (((((((((_C10 * t + _C9) * t + _C8) * t + _C7) * t + _C6) * t + _C5) * t + _C4) * t
            + _C3) * t + _C2) * t + _C1) * t + _C0
    return t * p


# -- gelu family, silu ----------------------------------------------------------------------


@njit(**_OPTS)
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


@njit(**_OPTS)
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
        out[i] = g[i] * (cdf + v * pdf)
    return out


@njit(**_OPTS)
def gelu_forward_f32(x, out):
    """float32 fast path: Phi = erfc(-x / sqrt 2) / 2 = 1 - tail or tail, with
    tail = e^(-x^2/2) erfcx(|x| / sqrt 2) / 2."""
    half = np.float32(0.5)
    one = np.float32(1)
    inv_sqrt2 = np.float32(0.7071067811865476)
    for i in prange(x.size):
        v = x[i]
        tail = half * exp_nonpositive(-half * v * v) * _erfcx_f32(abs(v) * inv_sqrt2)
        out[i] = v * (one - tail if v > 0 else tail)
    return out


@njit(**_OPTS)
def gelu_backward_f32(g, x, out):
    """float32 fast path: Phi(x) + x phi(x), one exp for both (see gelu_forward_f32)."""
    half = np.float32(0.5)
    one = np.float32(1)
    inv_sqrt2 = np.float32(0.7071067811865476)
    inv_sqrt2pi = np.float32(0.3989422804014327)
    for i in prange(x.size):
        v = x[i]
        e = exp_nonpositive(-half * v * v)
        tail = half * e * _erfcx_f32(abs(v) * inv_sqrt2)
        cdf = one - tail if v > 0 else tail
        out[i] = g[i] * (cdf + v * (e * inv_sqrt2pi))
    return out


@njit(**_OPTS)
def gelu_forward_grad_f32(x, out, dout):
    """gelu_forward_f32 that also stores the derivative dout = Phi(x) + x phi(x) (the
    value gelu_backward_f32 computes, bit for bit): the forward is compute-bound, so the
    extra store is nearly free, and the backward becomes one multiply, g * dout
    (``mul_saved``), instead of a second exp and erfcx."""
    half = np.float32(0.5)
    one = np.float32(1)
    inv_sqrt2 = np.float32(0.7071067811865476)
    inv_sqrt2pi = np.float32(0.3989422804014327)
    for i in prange(x.size):
        v = x[i]
        e = exp_nonpositive(-half * v * v)                       # e = e^(-x^2/2)
        tail = half * e * _erfcx_f32(abs(v) * inv_sqrt2)         # Phi(-|x|)
        cdf = one - tail if v > 0 else tail                      # Phi(x)
        out[i] = v * cdf                                         # y = x Phi(x)
        dout[i] = cdf + v * (e * inv_sqrt2pi)                    # Phi(x) + x phi(x)
    return out, dout


@njit(**_OPTS)
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


@njit(**_OPTS)
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


@njit(**_OPTS)
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
        v = x[i]
        v = big if v > big else v
        v = -big if v < -big else v
        th = tanh(k * (v + c * v * v * v))
        d = half * (one + th) + half * v * (one - th * th) * k * (one + c3 * v * v)
        out[i] = g[i] * d
    return out


@njit(**_OPTS)
def gelu_quick_forward(x, out):
    t = x.dtype.type
    one = t(1)
    a = t(1.702)
    for i in prange(x.size):
        v = x[i]
        out[i] = v * _sigmoid(a * v, one)
    return out


@njit(**_OPTS)
def gelu_quick_backward(g, x, out):
    t = x.dtype.type
    one = t(1)
    a = t(1.702)
    big = t(100)
    for i in prange(x.size):
        # s(1 + a x (1 - s)) through s, never ggml's (..)/(1 + e)^2 (inf/inf below -49.5);
        # beyond |x| = 100 the derivative is exactly 0 or 1 and the clamp keeps a x finite
        v = x[i]
        v = big if v > big else v
        v = -big if v < -big else v
        s = _sigmoid(a * v, one)
        out[i] = g[i] * (s * (one + a * v * (one - s)))
    return out


@njit(**_OPTS)
def silu_forward(x, out):
    one = x.dtype.type(1)
    for i in prange(x.size):
        v = x[i]
        out[i] = v * _sigmoid(v, one)
    return out


@njit(**_OPTS)
def silu_backward(g, x, out):
    one = x.dtype.type(1)
    for i in prange(x.size):
        v = x[i]
        s = _sigmoid(v, one)
        out[i] = g[i] * (s * (one + v * (one - s)))
    return out


# -- softplus, clamp -------------------------------------------------------------------------


@njit(**_OPTS)
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


@njit(**_OPTS)
def softplus_backward(g, x, beta, threshold, out):
    t = x.dtype.type
    one = t(1)
    b = t(beta)
    thr = t(threshold)
    for i in prange(x.size):
        z = b * x[i]
        out[i] = g[i] if z > thr else g[i] * _sigmoid(z, one)
    return out


@njit(**_OPTS)
def clamp_forward(x, lo, hi, out):
    t = x.dtype.type
    lo = t(lo)
    hi = t(hi)
    for i in prange(x.size):
        v = x[i]
        v = lo if v < lo else v          # min(max(x, lo), hi): hi wins when lo > hi;
        out[i] = hi if v > hi else v       # NaN passes through
    return out


@njit(**_OPTS)
def clamp_backward(g, x, lo, hi, out):
    t = x.dtype.type
    zero = t(0)
    lo = t(lo)
    hi = t(hi)
    for i in prange(x.size):
        v = x[i]
        out[i] = g[i] if (v >= lo and v <= hi) else zero
    return out


@njit(**_OPTS)
def clamp_tensor_forward(x, lo, hi, out):
    """clamp with element-wise bounds (all three flat, same size)."""
    for i in prange(x.size):
        v = x[i]
        v = lo[i] if v < lo[i] else v
        out[i] = hi[i] if v > hi[i] else v
    return out


@njit(**_OPTS)
def clamp_tensor_backward(g, x, lo, hi, gx, glo, ghi):
    """PyTorch's split of g among x, min and max: x where lo <= x <= hi; min where
    x < lo < hi; max where x > hi or hi < lo (absent bounds come in as -inf/+inf)."""
    zero = x.dtype.type(0)
    for i in prange(x.size):
        v = x[i]
        a = lo[i]
        b = hi[i]
        gi = g[i]
        gx[i] = gi if (v >= a and v <= b) else zero
        glo[i] = gi if (v < a and a < b) else zero
        ghi[i] = gi if (v > b or b < a) else zero
    return gx, glo, ghi


# -- softmax family (rows of a [R, C] C-contiguous array; ``out`` has x's shape) ------------


@njit(**_OPTS)
def softmax_forward(x, out):
    one = x.dtype.type(1)
    for r in prange(x.shape[0]):
        yr = out[r]
        s = _exp_shifted_sum(x[r], _row_max(x[r]), yr)
        inv = one / s
        for j in range(yr.size):
            yr[j] *= inv
    return out


@njit(**_OPTS)
def softmax_forward_f32(x, out):
    """softmax_forward for float32, bit for bit, with the row max software-pipelined: the
    loop computing row r's exponentials also takes the max of row r + 1 (the integer-key
    max of ``_max_f32``), so reading the next row from memory overlaps the exp arithmetic
    instead of being a separate memory-bound pass. prange runs over blocks of ROW_BLOCK
    rows; each block starts with one plain row max."""
    rows = x.shape[0]
    cols = x.shape[1]
    one = np.float32(1)
    for blk in prange((rows + ROW_BLOCK - 1) // ROW_BLOCK):
        lo = blk * ROW_BLOCK
        hi = min(rows, lo + ROW_BLOCK)
        m = _max_f32(x[lo])
        for r in range(lo, hi):
            xr = x[r]
            yr = out[r]
            nxt = r + 1 if r + 1 < hi else r
            keys = x[nxt].view(np.int32)          # float bits, ordered as in _max_f32
            km = np.int32(-2139095041)            # key of -inf
            for j in range(cols):
                yr[j] = exp_nonpositive(xr[j] - m)  # e_j = e^(x_j - max), x_j - max <= 0
                b = keys[j]
                k = np.int32(b ^ ((b >> 31) & 0x7FFFFFFF))
                km = k if k > km else km          # next row's max key
            inv = one / _sum(yr)                  # 1 / sum_j e_j
            for j in range(cols):
                yr[j] *= inv
            m = _f32_from_bits(np.int32(km ^ ((km >> 31) & 0x7FFFFFFF)))
    return out


@njit(**_OPTS)
def softmax_backward(g, y, out):
    for r in prange(y.shape[0]):
        gr = g[r]
        yr = y[r]
        outr = out[r]
        d = _dot(gr, yr)
        for j in range(yr.size):
            outr[j] = yr[j] * (gr[j] - d)
    return out


@njit(**_OPTS)
def log_softmax_forward(x, out):
    for r in prange(x.shape[0]):
        xr = x[r]
        yr = out[r]
        m = _row_max(xr)
        shift = m + log(_exp_shifted_sum(xr, m, yr))
        for j in range(yr.size):
            yr[j] = xr[j] - shift
    return out


@njit(**_OPTS)
def log_softmax_backward(g, y, out):
    for r in prange(y.shape[0]):
        gr = g[r]
        yr = y[r]
        outr = out[r]
        sg = _sum(gr)
        for j in range(yr.size):
            outr[j] = gr[j] - exp(yr[j]) * sg
    return out


@njit(**_OPTS)
def logsumexp_forward(x):
    """y[r] = log(sum_j exp(x[r, j])), shifted by the row max."""
    rows = x.shape[0]
    cols = x.shape[1]
    y = np.empty(rows, x.dtype)
    for blk in prange((rows + ROW_BLOCK - 1) // ROW_BLOCK):
        scratch = np.empty(cols, x.dtype)
        for r in range(blk * ROW_BLOCK, min(rows, (blk + 1) * ROW_BLOCK)):
            m = _lse_shift(x[r])
            y[r] = m + log(_exp_shifted_sum(x[r], m, scratch))
    return y


@njit(**_OPTS)
def logsumexp_backward(g, x, y, out):
    """out[r, j] = g[r] exp(x[r, j] - y[r])."""
    for r in prange(x.shape[0]):
        xr = x[r]
        outr = out[r]
        gr = g[r]
        yr = y[r]
        for j in range(xr.size):
            outr[j] = gr * exp(xr[j] - yr)
    return out


# -- losses -------------------------------------------------------------------------------


@njit(**_OPTS)
def cross_entropy_forward(x, target):
    """Per-row loss lse_r - x[r, target_r] and the row log-sum-exp lse_r (saved for the
    backward). Targets are validated (0 <= target < C) by the caller."""
    rows = x.shape[0]
    cols = x.shape[1]
    loss = np.empty(rows, x.dtype)
    lse = np.empty(rows, x.dtype)
    for blk in prange((rows + ROW_BLOCK - 1) // ROW_BLOCK):
        scratch = np.empty(cols, x.dtype)
        for r in range(blk * ROW_BLOCK, min(rows, (blk + 1) * ROW_BLOCK)):
            m = _lse_shift(x[r])
            lse[r] = m + log(_exp_shifted_sum(x[r], m, scratch))
            loss[r] = lse[r] - x[r, target[r]]
    return loss, lse


@njit(**_OPTS)
def cross_entropy_backward(g, x, target, lse, out):
    """Fused log-softmax backward: out[r, j] = g[r] (exp(x[r, j] - lse[r]) - [j == t_r])."""
    for r in prange(x.shape[0]):
        xr = x[r]
        outr = out[r]
        gr = g[r]
        lr = lse[r]
        tr = target[r]
        for j in range(xr.size):
            outr[j] = gr * exp(xr[j] - lr)
        outr[tr] = outr[tr] - gr
    return out


@njit(**_OPTS)
def squared_error(pred, target, out):
    """(pred - target)^2, element-wise (flat arrays)."""
    for i in prange(pred.size):
        d = pred[i] - target[i]
        out[i] = d * d
    return out


@njit(**_OPTS)
def squared_error_sum(pred, target):
    """sum of (pred - target)^2: float64 partial sums of fixed blocks, added in order."""
    n = pred.size
    nblk = (n + SUM_BLOCK - 1) // SUM_BLOCK
    partial = np.zeros(nblk)
    for b in prange(nblk):
        acc = 0.0
        for i in range(b * SUM_BLOCK, min(n, (b + 1) * SUM_BLOCK)):
            d = np.float64(pred[i]) - np.float64(target[i])
            acc += d * d
        partial[b] = acc
    total = 0.0
    for b in range(nblk):
        total += partial[b]
    return total


@njit(**_OPTS)
def squared_error_backward(g, pred, target, scale, out):
    """d/dpred of scale * (pred - target)^2 times g: 2 scale g (pred - target); g flat
    and full size ('none') or of size 1 (a reduced loss)."""
    t = pred.dtype.type
    two_s = t(2) * t(scale)
    if g.size == 1:
        gs = g[0] * two_s
        for i in prange(pred.size):
            out[i] = gs * (pred[i] - target[i])
    else:
        for i in prange(pred.size):
            out[i] = g[i] * two_s * (pred[i] - target[i])
    return out
