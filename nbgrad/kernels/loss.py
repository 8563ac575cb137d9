"""Loss kernels: cross-entropy over the rows of ``[R, C]`` logits and the squared error
of mean-squared-error, forward and backward.

    cross_entropy   loss_r = lse_r - x[r, t_r],  lse_r = log sum_j e^(x[r, j])
                    dx[r, j] = g_r (e^(x[r, j] - lse_r) - [j == t_r])
    squared error   (pred - target)^2,   d/dpred = 2 (pred - target)

(docs/derivations.md#softmax-log-softmax-logsumexp-and-cross-entropy); lse_r is
``softmax.logsumexp_forward``. Row kernels give each ``prange`` iteration whole rows; the
reduction to a scalar sums fixed-size blocks in parallel and then the block sums in
order, so every result is bitwise the same at any thread count.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ._jit import PARALLEL_IEEE_DIV_FMA, njit_with_serial
from .softmax import ROW_BLOCK, lse_block, lse_grad_row

SUM_BLOCK = 1 << 14  # elements per partial sum in the reductions to a scalar


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def cross_entropy_forward(x, target):
    """Per-row loss lse_r - x[r, target_r] and the row log-sum-exp lse_r (saved for the
    backward). Targets are validated (0 <= target < C) by the caller."""
    rows = x.shape[0]
    lse = np.empty(rows, x.dtype)
    loss = np.empty(rows, x.dtype)
    for blk in prange((rows + ROW_BLOCK - 1) // ROW_BLOCK):
        lse_block(x, blk, lse)
        for r in range(blk * ROW_BLOCK, min(rows, (blk + 1) * ROW_BLOCK)):
            loss[r] = lse[r] - x[r, target[r]]
    return loss, lse


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def cross_entropy_backward(g, x, target, lse, out):
    """out[r, j] = g[r] (exp(x[r, j] - lse[r]) - [j == t_r]): the logsumexp backward
    g[r] exp(x[r, j] - lse[r]), less g[r] at the target."""
    for r in prange(x.shape[0]):
        lse_grad_row(g[r], x[r], lse[r], out[r])
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
    if g.size == 1:
        gs = g[0] * two_s
        for i in prange(pred.size):
            out[i] = gs * (pred[i] - target[i])
    else:
        for i in prange(pred.size):
            out[i] = g[i] * two_s * (pred[i] - target[i])
    return out
