"""Softmax, log-softmax and log-sum-exp over the rows of a ``[R, C]`` C-contiguous array,
forward and backward (``out`` has x's shape). Each ``prange`` iteration takes whole rows,
and every row reduction runs in a fixed order, so results do not depend on the thread
count. Derivations: docs/derivations.md#softmax-log-softmax-logsumexp-and-cross-entropy.

    softmax      y_j = e^(x_j - m) / sum_k e^(x_k - m)       dx = y (g - sum(g y))
    log_softmax  y_j = (x_j - m) - log sum_k e^(x_k - m)     dx = g - e^y sum(g)
    logsumexp    y = m + log sum_k e^(x_k - m)                dx = g e^(x - y)

with m the row max (logsumexp shifts by ``_lse_shift``: the row max, or 0 when that is
+-inf). log_softmax subtracts m before the log-sum, as PyTorch: m + log sum would round
away the log-sum where |m| is large (log_softmax of [1e30, 1e30] is -log 2, not 0).

Numba 0.68 drops a store ``out[t] = ...`` that follows tuple unpacking of row views and
scalars in a ``prange`` body (``xr, out, gr = x[r], gx[r], g[r]``), so the kernels
assign one name per statement.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, types
from numba.extending import overload

from ..runtime.jit import (
    PARALLEL_IEEE_DIV_FMA,
    SERIAL_IEEE_DIV,
    SERIAL_IEEE_DIV_FMA,
    njit_with_serial,
)
from .basics import dot, vector_sum
from .fastmath import _f32_from_bits, exp, exp_nonpositive, log

ROW_BLOCK = 32  # rows per prange iteration in the row kernels that need scratch


# -- helpers: row reductions (fixed order, so thread-count independent) --------------------


@njit(**SERIAL_IEEE_DIV, inline="always")
def _larger(v, m):
    """v if v > m, else m: a running max that skips NaN (and keeps the first of equal
    values, so the sign of a zero max depends on the order)."""
    return v if v > m else m


@njit(**SERIAL_IEEE_DIV)
def _max8(a):
    """max of a 1-D array, NaN skipped; -inf when empty. Eight running maxima (lane k
    takes a[j] for j = k mod 8 below the last multiple of 8, lane 0 the tail), then a
    pairwise tree: lanes 0-1, 2-3, 4-5, 6-7, then 0-2, 4-6, then 0-4."""
    lanes = np.full(8, -np.inf, a.dtype)
    n = a.size
    nb = n - n % 8
    for j in range(0, nb, 8):
        for k in range(8):
            lanes[k] = _larger(a[j + k], lanes[k])
    for j in range(nb, n):
        lanes[0] = _larger(a[j], lanes[0])
    for step in (1, 2, 4):
        for k in range(0, 8, 2 * step):
            lanes[k] = _larger(lanes[k + step], lanes[k])
    return lanes[0]


@njit(**SERIAL_IEEE_DIV)
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


@njit(**SERIAL_IEEE_DIV)
def _exp_shifted_sum(x, m, e):
    """e[j] = exp(x[j] - m) and their sum."""
    for j in range(x.size):
        e[j] = exp(x[j] - m)
    return vector_sum(e)


@njit(**SERIAL_IEEE_DIV)
def _lse_shift(a):
    """The shift for a log-sum-exp: the row max, or 0 when that is +-inf (so an all -inf
    row gives -inf and a row holding +inf gives +inf, as PyTorch)."""
    m = _row_max(a)
    return m if abs(m) < np.inf else a.dtype.type(0)


# -- softmax family (rows of a [R, C] C-contiguous array; ``out`` has x's shape) ------------


@njit(**SERIAL_IEEE_DIV_FMA)
def softmax_row(xr, yr):
    """yr = softmax(xr): one row of ``softmax_forward`` (also a fused region's epilogue,
    compiler/row_epilogue.py, which so gives this kernel's bits)."""
    m = _row_max(xr)
    for j in range(xr.size):
        yr[j] = exp_nonpositive(xr[j] - m)   # x_j - max <= 0: exp's bits, fewer operations
    inv = xr.dtype.type(1) / vector_sum(yr)
    for j in range(yr.size):
        yr[j] *= inv


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def softmax_forward(x, out):
    for r in prange(x.shape[0]):
        softmax_row(x[r], out[r])
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
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
            inv = one / vector_sum(yr)            # 1 / sum_j e_j
            for j in range(cols):
                yr[j] *= inv
            m = _f32_from_bits(np.int32(km ^ ((km >> 31) & 0x7FFFFFFF)))
    return out


@njit(**SERIAL_IEEE_DIV_FMA)
def softmax_backward_row(gr, yr, outr):
    """outr = yr (gr - sum(gr yr)): one row of the softmax backward."""
    d = dot(gr, yr, yr.size)
    for j in range(yr.size):
        outr[j] = yr[j] * (gr[j] - d)


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def softmax_backward(g, y, out):
    for r in prange(y.shape[0]):
        softmax_backward_row(g[r], y[r], out[r])
    return out


@njit(**SERIAL_IEEE_DIV_FMA)
def log_softmax_row(xr, yr):
    """yr = log_softmax(xr): one row of ``log_softmax_forward`` (as ``softmax_row``)."""
    m = _row_max(xr)
    log_sum = log(_exp_shifted_sum(xr, m, yr))
    for j in range(yr.size):
        yr[j] = (xr[j] - m) - log_sum


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def log_softmax_forward(x, out):
    for r in prange(x.shape[0]):
        log_softmax_row(x[r], out[r])
    return out


@njit(**SERIAL_IEEE_DIV_FMA)
def log_softmax_terms_row(xr, scratch):
    """(m, log sum_j e^(xr[j] - m)) with m the row max: log_softmax(xr) = (xr - m) - the
    log-sum (``scratch``: xr's size, overwritten). Also the row terms of a fused
    cross-entropy (compiler/row_epilogue.py)."""
    m = _row_max(xr)
    return m, log(_exp_shifted_sum(xr, m, scratch))


@njit(**SERIAL_IEEE_DIV_FMA)
def log_softmax_terms_block(x, blk, shift, log_sum):
    """shift[r] = m_r, the row max, and log_sum[r] = log sum_j e^(x[r, j] - m_r) for the
    rows of block ``blk`` (ROW_BLOCK rows): log_softmax(x_r) = (x_r - m_r) - log_sum[r]."""
    scratch = np.empty(x.shape[1], x.dtype)
    for r in range(blk * ROW_BLOCK, min(x.shape[0], (blk + 1) * ROW_BLOCK)):
        shift[r], log_sum[r] = log_softmax_terms_row(x[r], scratch)


@njit(**SERIAL_IEEE_DIV_FMA, inline="always")
def softmax_grad_row(gr, xr, m, log_sum, outr):
    """outr[j] = gr softmax(xr)[j] = gr e^((xr[j] - m) - log_sum) (terms of
    ``log_softmax_terms_block``)."""
    for j in range(xr.size):
        outr[j] = gr * exp((xr[j] - m) - log_sum)


@njit(**SERIAL_IEEE_DIV_FMA)
def log_softmax_backward_row(gr, yr, outr):
    """outr = gr - e^yr sum(gr): one row of the log-softmax backward."""
    sg = vector_sum(gr)
    for j in range(yr.size):
        outr[j] = gr[j] - exp(yr[j]) * sg


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def log_softmax_backward(g, y, out):
    for r in prange(y.shape[0]):
        log_softmax_backward_row(g[r], y[r], out[r])
    return out


@njit(**SERIAL_IEEE_DIV_FMA)
def lse_block(x, blk, y):
    """y[r] = log(sum_j exp(x[r, j])), shifted by the row max, for the rows of block
    ``blk`` (ROW_BLOCK rows)."""
    scratch = np.empty(x.shape[1], x.dtype)
    for r in range(blk * ROW_BLOCK, min(x.shape[0], (blk + 1) * ROW_BLOCK)):
        m = _lse_shift(x[r])
        y[r] = m + log(_exp_shifted_sum(x[r], m, scratch))


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def logsumexp_forward(x):
    """y[r] = log(sum_j exp(x[r, j])) (``lse_block`` over blocks of rows)."""
    y = np.empty(x.shape[0], x.dtype)
    for blk in prange((x.shape[0] + ROW_BLOCK - 1) // ROW_BLOCK):
        lse_block(x, blk, y)
    return y


@njit(**SERIAL_IEEE_DIV_FMA, inline="always")
def lse_grad_row(gr, xr, yr, outr):
    """outr[j] = gr exp(xr[j] - yr): one row of the logsumexp backward."""
    for j in range(xr.size):
        outr[j] = gr * exp(xr[j] - yr)


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def logsumexp_backward(g, x, y, out):
    """out[r, j] = g[r] exp(x[r, j] - y[r])."""
    for r in prange(x.shape[0]):
        lse_grad_row(g[r], x[r], y[r], out[r])
    return out
