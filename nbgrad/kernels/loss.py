"""Loss kernels: cross-entropy over the rows of ``[R, C]`` logits and the squared error
of mean-squared-error, forward and backward.

    cross_entropy   loss_r = l_r - (x[r, t_r] - m_r),  l_r = log sum_j e^(x[r, j] - m_r)
                    dx[r, j] = g_r (e^((x[r, j] - m_r) - l_r) - [j == t_r])
    squared error   (pred - target)^2,   d/dpred = 2 (pred - target)

(docs/derivations.md#softmax-log-softmax-logsumexp-and-cross-entropy), m_r the row max:
-log_softmax(x_r)[t_r] as PyTorch computes it (a row holding +inf or only -inf is NaN).
Row kernels give each ``prange`` iteration whole rows; the reduction to a scalar sums
fixed-size blocks in parallel and then the block sums in order, so every result is
bitwise the same at any thread count.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ._jit import PARALLEL_IEEE_DIV_FMA, njit_with_serial
from .softmax import ROW_BLOCK, log_softmax_terms_block, softmax_grad_row

SUM_BLOCK = 1 << 14  # elements per partial sum in the reductions to a scalar


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def cross_entropy_forward(x, target):
    """Per-row loss l_r - (x[r, target_r] - m_r), and the row max m_r and log-sum l_r
    (saved for the backward). Targets are validated (0 <= target < C) by the caller."""
    rows = x.shape[0]
    shift = np.empty(rows, x.dtype)
    log_sum = np.empty(rows, x.dtype)
    loss = np.empty(rows, x.dtype)
    for blk in prange((rows + ROW_BLOCK - 1) // ROW_BLOCK):
        log_softmax_terms_block(x, blk, shift, log_sum)
        for r in range(blk * ROW_BLOCK, min(rows, (blk + 1) * ROW_BLOCK)):
            loss[r] = log_sum[r] - (x[r, target[r]] - shift[r])
    return loss, shift, log_sum


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def cross_entropy_backward(g, x, target, shift, log_sum, out):
    """out[r, j] = g[r] (softmax(x_r)[j] - [j == t_r]), softmax through the forward's
    m_r and l_r."""
    for r in prange(x.shape[0]):
        softmax_grad_row(g[r], x[r], shift[r], log_sum[r], out[r])
        tr = target[r]
        out[r, tr] = out[r, tr] - g[r]
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def squared_error(pred, target, out):
    """(pred - target)^2, element-wise (flat arrays)."""
    for i in prange(pred.size):
        d = pred[i] - target[i]
        out[i] = d * d
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
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


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def squared_error_backward(g, pred, target, scale, out):
    """d/dpred of scale * (pred - target)^2 times g: 2 scale g (pred - target); g flat
    and full size ('none') or of size 1 (a reduced loss)."""
    t = pred.dtype.type
    two_s = t(2) * t(scale)
    # (2 scale (pred - target)) g, PyTorch's order (so the same overflows)
    if g.size == 1:
        gs = g[0]
        for i in prange(pred.size):
            out[i] = two_s * (pred[i] - target[i]) * gs
    else:
        for i in prange(pred.size):
            out[i] = two_s * (pred[i] - target[i]) * g[i]
    return out
