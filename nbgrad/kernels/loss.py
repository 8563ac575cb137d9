"""Loss kernels, forward and backward: cross-entropy over the rows of ``[R, C]`` logits,
the squared error of mean-squared-error, the piecewise-quadratic family (l1, smooth l1,
huber), binary cross-entropy with logits and the negative log-likelihood.

    cross_entropy   loss_r = l_r - (x[r, t_r] - m_r),  l_r = log sum_j e^(x[r, j] - m_r)
                    dx[r, j] = g_r (e^((x[r, j] - m_r) - l_r) - [j == t_r])
    squared error   (pred - target)^2,   d/dpred = 2 (pred - target)
    smooth l1       z = |x - t|: z^2 / (2 div) for z < beta, mul (z - beta / 2) otherwise
                    (l1: beta 0, div 1, mul 1; smooth_l1: div = beta, mul 1; huber:
                    beta = delta, div 1, mul = delta); d/dx = -mul, (x - t) / div, mul
                    for x - t < -beta, |x - t| <= beta, x - t > beta (so 0 where x = t
                    for l1, as PyTorch's sign); d/dt = -d/dx
    bce logits      w ((1 - t) x + lw sp(-x)),  sp(z) = log(1 + e^z),  lw = 1 + (pw - 1) t
                    d/dx = w (lw sigmoid(x) - pw t),  d/dt = w (pw sp(-x) - sp(x))
                    (without pos_weight: lw = 1, d/dx = w (sigmoid(x) - t), d/dt = -w x)
    nll             loss[n, d] = -w[t] x[n, t, d] (t = target[n, d]; 0 where ignored)
                    dx[n, t, d] = -w[t] g[n, d], 0 elsewhere

(docs/derivations.md#softmax-log-softmax-logsumexp-and-cross-entropy), m_r the row max:
-log_softmax(x_r)[t_r] as PyTorch computes it (a row holding +inf or only -inf is NaN).
Row kernels give each ``prange`` iteration whole rows; the reduction to a scalar sums
fixed-size blocks in parallel and then the block sums in order, so every result is
bitwise the same at any thread count.
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
from .activation import _sigmoid
from .fastmath import exp, log1p
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


@njit(**SERIAL_IEEE_DIV_FMA)
def cross_entropy_grad_row(gr, xr, m, log_sum, tr, outr):
    """outr[j] = gr (softmax(xr)[j] - [j == tr]), softmax through the row's max m and
    log-sum: one row of ``cross_entropy_backward``, compiled once with its flags (also a
    fused region's epilogue, compiler/row_epilogue.py, which so gives these bits)."""
    softmax_grad_row(gr, xr, m, log_sum, outr)
    outr[tr] = outr[tr] - gr


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def cross_entropy_backward(g, x, target, shift, log_sum, out):
    """out[r, j] = g[r] (softmax(x_r)[j] - [j == t_r]), softmax through the forward's
    m_r and l_r."""
    for r in prange(x.shape[0]):
        cross_entropy_grad_row(g[r], x[r], shift[r], log_sum[r], target[r], out[r])
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def squared_error(pred, target, out):
    """(pred - target)^2, element-wise (flat arrays)."""
    for i in prange(pred.size):
        d = pred[i] - target[i]
        out[i] = d * d
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def block_sum(a, minus):
    """The float64 sum of a flat array's elements (the per-element losses of a reduced
    loss; ``minus`` None), or of (a - minus)^2 (mse_loss's sum, without the per-element
    array): partial sums of fixed blocks of SUM_BLOCK, then the block sums in order.
    ``minus is None`` is settled when the kernel compiles (each form compiles to its own
    loop; None is passed, not defaulted: a call with an omitted argument dispatches more
    slowly)."""
    n = a.size
    nblk = (n + SUM_BLOCK - 1) // SUM_BLOCK
    partial = np.zeros(nblk)
    for b in prange(nblk):
        acc = 0.0
        for i in range(b * SUM_BLOCK, min(n, (b + 1) * SUM_BLOCK)):
            if minus is None:
                acc += np.float64(a[i])
            else:
                d = np.float64(a[i]) - np.float64(minus[i])
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


# -- l1, smooth l1, huber: one piecewise-quadratic loss (docs/derivations.md#losses) --------
# z = |x - t|; below beta the loss is z^2 / (2 div), above it mul (z - beta / 2). The
# three ops are (beta, div, mul) = (0, 1, 1) for l1 (the quadratic piece is empty),
# (beta, beta, 1) for smooth_l1 and (delta, 1, delta) for huber: PyTorch's formulas
# term for term, so the same roundings.


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def smooth_l1_forward(x, target, beta, div, mul, out):
    """out = 0.5 z^2 / div if z < beta else mul (z - 0.5 beta), z = |x - target| (flat
    arrays); a NaN z takes the linear branch (NaN)."""
    t = x.dtype.type
    half = t(0.5)
    b = t(beta)
    dv = t(div)
    m = t(mul)
    for i in prange(x.size):
        z = abs(x[i] - target[i])
        out[i] = half * z * z / dv if z < b else m * (z - half * b)
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def smooth_l1_backward(g, g_step, x, target, beta, div, mul, scale, out):
    """d/dx of the loss above times g scale: -mul for d < -beta, mul for d > beta,
    d / div between (d = x - target). l1 (beta 0) is PyTorch's sign(d): 0 at d = 0 and
    at a NaN d; smooth_l1 and huber give NaN for a NaN d, as PyTorch. g is flat and full
    size (g_step 1) or one element (g_step 0, a reduced loss)."""
    t = x.dtype.type
    b = t(beta)
    dv = t(div)
    m = t(mul)
    s = t(scale)
    quadratic = beta > 0
    for i in prange(x.size):
        d = x[i] - target[i]
        gs = g[i * g_step] * s
        inner = d / dv if quadratic else t(0)
        out[i] = (-m if d < -b else (m if d > b else inner)) * gs
    return out


# -- binary cross-entropy with logits (docs/derivations.md#losses) -------------------------
# Weights are flat arrays read at i * step (step 0: one value for every element).


@njit(**SERIAL_IEEE_DIV, inline="always")
def _softplus_pair(z, zero):
    """(log(1 + e^z), log(1 + e^-z)) through max(+-z, 0) + log1p(e^-|z|): no overflow."""
    tail = log1p(exp(-abs(z)))
    return (z if z > zero else zero) + tail, (-z if -z > zero else zero) + tail


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def bce_logits_forward(x, target, weight, w_step, pos_weight, pw_step, has_pw, out):
    """out = w ((1 - t) x + lw log(1 + e^-x)), lw = 1 + (pw - 1) t (1 without pos_weight):
    PyTorch's (1 - t) x - lw log_sigmoid(x)."""
    zero = x.dtype.type(0)
    one = x.dtype.type(1)
    for i in prange(x.size):
        v = x[i]
        ti = target[i]
        lw = one + (pos_weight[i * pw_step] - one) * ti if has_pw else one
        sp_neg = _softplus_pair(v, zero)[1]
        out[i] = ((one - ti) * v + lw * sp_neg) * weight[i * w_step]
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def bce_logits_backward_input(g, g_step, x, target, weight, w_step, pos_weight, pw_step,
                              has_pw, scale, out):
    """d/dx times g scale: w (lw sigmoid(x) - pw t) (PyTorch's ((pw t + 1 - t) s - pw t)),
    w (sigmoid(x) - t) without pos_weight."""
    one = x.dtype.type(1)
    s_ = x.dtype.type(scale)
    for i in prange(x.size):
        ti = target[i]
        s = _sigmoid(x[i], one)
        if has_pw:
            pt = pos_weight[i * pw_step] * ti
            d = (pt + one - ti) * s - pt
        else:
            d = s - ti
        out[i] = d * (g[i * g_step] * s_) * weight[i * w_step]
    return out


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def bce_logits_backward_target(g, g_step, x, weight, w_step, pos_weight, pw_step, has_pw,
                               scale, out):
    """d/dt times g scale: w (pw log(1 + e^-x) - log(1 + e^x)) (PyTorch's
    log_sigmoid(-x) - pw log_sigmoid(x)), -w x without pos_weight."""
    zero = x.dtype.type(0)
    s_ = x.dtype.type(scale)
    for i in prange(x.size):
        v = x[i]
        if has_pw:
            sp = _softplus_pair(v, zero)
            d = pos_weight[i * pw_step] * sp[1] - sp[0]
        else:
            d = -v
        out[i] = d * (g[i * g_step] * s_) * weight[i * w_step]
    return out


# -- negative log-likelihood over [N, C, D] (docs/derivations.md#losses) -------------------


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def nll_forward(x, target, weight, ignore_index, loss, picked):
    """loss[n, d] = -w[t] x[n, t, d] and picked[n, d] = w[t] (t = target[n, d]); both 0
    where t == ignore_index. x is [N, C, D], target, loss and picked [N, D]; targets are
    validated (0 <= t < C or ignored) by the caller."""
    zero = x.dtype.type(0)
    for n in prange(x.shape[0]):
        for d in range(x.shape[2]):
            t = target[n, d]
            if t == ignore_index:
                loss[n, d] = zero
                picked[n, d] = zero
            else:
                w = weight[t]
                loss[n, d] = -(w * x[n, t, d])
                picked[n, d] = w
    return loss, picked


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def nll_backward(g, g_step, target, weight, ignore_index, scale, out):
    """out[n, t, d] = -w[t] (g[n, d] scale) at t = target[n, d] (not ignored), 0 elsewhere;
    out is [N, C, D], g flat [N D] (g_step 1) or one element (g_step 0)."""
    zero = out.dtype.type(0)
    s = out.dtype.type(scale)
    depth = out.shape[2]
    for n in prange(out.shape[0]):
        out[n] = zero
        for d in range(depth):
            t = target[n, d]
            if t != ignore_index:
                out[n, t, d] = -(weight[t] * (g[(n * depth + d) * g_step] * s))
    return out
