"""Fused scaled dot-product attention in the FlashAttention style, for ops/attention.py.

For one batch-head b with queries q [L, E], keys k [S, E] and values v [S, Ev]:

    s_ij = scale q_i . k_j + mask_ij        (-inf where masked; causal: j > i masked)
    p_ij = exp(s_ij - lse_i),  lse_i = log sum_j exp(s_ij)
    o_i  = sum_j p_ij z_ij v_j              (z_ij = keep_ij / (1 - dropout_p), or 1)

Forward: blocks of BQ queries against blocks of BK keys with an online softmax (a running
max m_i and sum l_i per row; the partial output is rescaled by exp(m_old - m_new) when
the max grows), so no [L, S] buffer exists: the forward keeps the output and lse only.
A row with every key masked gets o_i = 0 and lse_i = +inf (PyTorch's CPU kernel gives
0 there, and its gradient 0).

Backward (FlashAttention-2): with D_i = sum_c do_ic o_ic,

    dv_j = sum_i p_ij z_ij do_i,   dp_ij = z_ij do_i . v_j,   ds_ij = p_ij (dp_ij - D_i)
    dq_i = scale sum_j ds_ij k_j,  dk_j = scale sum_i ds_ij q_i

recomputing p block by block from lse. The products are kernels/matmul.py's serial
register-tiled GEMM (``matrix_product``) on contiguous blocks.

Work split: the forward runs one task per (batch-head, block of queries); the backward
one task per batch-head (it sweeps the key blocks in order, and accumulates dq over them
in that order), so every sum has a fixed order and the bits do not depend on the thread
count. Dropout draws keep_ij from a hash of (seed, b, i, j) (splitmix64), so the
backward regenerates the forward's mask without storing it.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..runtime.jit import PARALLEL_IEEE_DIV_FMA, SERIAL_IEEE_DIV_FMA, njit_with_serial
from .basics import vector_sum
from .fastmath import exp, exp_nonpositive, log
from .matmul import matrix_product
from .softmax import _row_max

BQ = 128  # queries per block
BK = 256  # keys per block (BQ x BK: measured against 64 x 128 ... 256 x 256)

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)
_UNIT = 1.0 / 9007199254740992.0  # 2^-53


@njit(**SERIAL_IEEE_DIV_FMA, inline="always")
def uniform_at(seed, index):
    """A uniform draw in [0, 1) for position ``index`` of the stream ``seed``
    (splitmix64 of seed + (index + 1) * golden ratio)."""
    z = np.uint64(seed) + (np.uint64(index) + np.uint64(1)) * _GOLDEN
    z = (z ^ (z >> _S30)) * _MIX1
    z = (z ^ (z >> _S27)) * _MIX2
    z = z ^ (z >> _S31)
    return np.float64(z >> _S11) * _UNIT


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def dropout_keep(seed, p, out):
    """out[b, i, j] = 1 / (1 - p) where the element is kept, else 0: the dropout factors
    z of the fused kernels, as an array (for the second-order path only)."""
    n_b, n_l, n_s = out.shape
    inv = 1.0 / (1.0 - p)
    for b in prange(n_b):
        for i in range(n_l):
            for j in range(n_s):
                keep = uniform_at(seed, (b * n_l + i) * n_s + j) >= p
                out[b, i, j] = inv if keep else 0.0


@njit(**SERIAL_IEEE_DIV_FMA)
def _scores(s, rows, cols, i0, j0, b, scale, mask, has_mask, causal):
    """s[r cols + j] = scale s[r cols + j] + mask[b, i0 + r, j0 + j] (-inf where causal
    masks it) in place; returns nothing."""
    for r in range(rows):
        i = i0 + r
        base = r * cols
        for j in range(cols):
            x = s[base + j] * scale
            if has_mask:
                x += mask[b, i, j0 + j]
            s[base + j] = x
            if causal and j0 + j > i:
                s[base + j] = -np.inf


@njit(**SERIAL_IEEE_DIV_FMA)
def _drop(x, seed, index, p):
    """x[j] *= 1 / (1 - p) where position index + j of the dropout stream is kept, else
    x[j] = 0."""
    inv = 1.0 / (1.0 - p)
    for j in range(x.size):
        x[j] = x[j] * inv if uniform_at(seed, index + j) >= p else 0.0


@njit(**SERIAL_IEEE_DIV_FMA)
def _exp_sum(x, scale, shift, e):
    """e[j] = exp(x[j] scale - shift) (<= 0: shift is the max of x scale, or 0 when
    that is -inf) and their sum. Not in place: LLVM vectorises the loop only for
    distinct x and e."""
    zero = e.dtype.type(0)
    for j in range(x.size):
        y = x[j] * scale - shift
        e[j] = exp_nonpositive(zero if y > zero else y)  # a rounding above 0 (FMA)
    return vector_sum(e)


@njit(**SERIAL_IEEE_DIV_FMA)
def _scale(x, c):
    """x *= c."""
    for j in range(x.size):
        x[j] *= c


@njit(**SERIAL_IEEE_DIV_FMA)
def _score_grads(s, s_scale, dp, lse, d, scale):
    """p = exp(s s_scale - lse) into s, ds = p (dp - d) scale into dp (dp: dropped dP;
    s s_scale <= lse)."""
    zero = s.dtype.type(0)
    for j in range(s.size):
        y = s[j] * s_scale - lse
        p = exp_nonpositive(zero if y > zero else y)  # a rounding above 0 (FMA)
        dp[j] = p * (dp[j] - d) * scale
        s[j] = p


@njit(**SERIAL_IEEE_DIV_FMA)
def _raw_scores(s, rows, cols, i0, j0, b, scale, mask, has_mask, causal):
    """The factor still to apply to the block of q k^T in s: ``scale`` when s is left
    as it is (no mask, scale > 0: the max commutes with the scaling, which the exp then
    applies), else 1 after ``_scores`` applied the scale and the masks."""
    if has_mask or causal or not scale > 0:
        _scores(s, rows, cols, i0, j0, b, scale, mask, has_mask, causal)
        return s.dtype.type(1)
    return scale


@njit(**SERIAL_IEEE_DIV_FMA)
def _forward_task(t, q, k, v, mask, has_mask, causal, scale, p_drop, seed, out, lse,
                  n_l, n_s, e, ev, s, p, tmp, acc, m, l):
    nqb = (n_l + BQ - 1) // BQ
    b = t // nqb
    i0 = (t % nqb) * BQ
    rows = min(BQ, n_l - i0)
    q0 = (b * n_l + i0) * e
    qb = q[q0: q0 + rows * e]
    acc[: rows * ev] = 0
    m[:rows] = -np.inf
    l[:rows] = 0
    j_end = min(n_s, i0 + rows) if causal else n_s
    for j0 in range(0, j_end, BK):
        cols = min(BK, j_end - j0)
        k0 = (b * n_s + j0) * e
        matrix_product(qb, False, k[k0: k0 + cols * e], True, s, rows, cols, e)
        s_scale = _raw_scores(s, rows, cols, i0, j0, b, scale, mask, has_mask, causal)
        for r in range(rows):
            base = r * cols
            srow = s[base: base + cols]
            mx = max(m[r], _row_max(srow) * s_scale)
            zero = l[r] - l[r]  # 0 in the dtype of the data (a literal would be float64)
            shift = mx if mx > -np.inf else zero
            c = exp(m[r] - shift)
            prow = p[base: base + cols]
            total = _exp_sum(srow, s_scale, shift, prow)
            if p_drop > 0:
                _drop(prow, seed, (b * n_l + i0 + r) * n_s + j0, p_drop)
            l[r] = l[r] * c + total
            m[r] = mx
            _scale(acc[r * ev: (r + 1) * ev], c)
        v0 = (b * n_s + j0) * ev
        matrix_product(p, False, v[v0: v0 + cols * ev], False, tmp, rows, ev, cols)
        for c_i in range(rows * ev):
            acc[c_i] += tmp[c_i]
    o0 = (b * n_l + i0) * ev
    for r in range(rows):
        i = b * n_l + i0 + r
        if l[r] > 0:
            lse[i] = m[r] + log(l[r])
            inv_l = 1.0 / l[r]
            for ci in range(ev):
                out[o0 + r * ev + ci] = acc[r * ev + ci] * inv_l
        else:
            lse[i] = np.inf
            for ci in range(ev):
                out[o0 + r * ev + ci] = 0


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def flash_forward(q, k, v, mask, has_mask, causal, scale, p_drop, seed, out, lse,
                  n_b, n_l, n_s, e, ev):
    """out (flat [n_b, n_l, ev]) and lse (flat [n_b, n_l]) of attention over flat
    C-contiguous q [n_b, n_l, e], k [n_b, n_s, e], v [n_b, n_s, ev]; mask [n_b, n_l, n_s]
    (additive, any strides) where ``has_mask``."""
    nqb = (n_l + BQ - 1) // BQ
    for t in prange(n_b * nqb):
        s = np.empty(BQ * BK, q.dtype)
        p = np.empty(BQ * BK, q.dtype)
        tmp = np.empty(BQ * ev, q.dtype)
        acc = np.empty(BQ * ev, q.dtype)
        m = np.empty(BQ, q.dtype)
        l = np.empty(BQ, q.dtype)
        _forward_task(np.int64(t), q, k, v, mask, has_mask, causal, scale, p_drop, seed,
                      out, lse, n_l, n_s, e, ev, s, p, tmp, acc, m, l)


@njit(**SERIAL_IEEE_DIV_FMA)
def _backward_task(b, q, k, v, o, do, lse, mask, has_mask, causal, scale, p_drop, seed,
                   dq, dk, dv, n_l, n_s, e, ev):
    s = np.empty(BQ * BK, q.dtype)
    dp = np.empty(BQ * BK, q.dtype)
    tmp = np.empty(max(BQ, BK) * max(e, ev), q.dtype)
    d = np.empty(n_l, q.dtype)
    for i in range(n_l):
        acc = scale - scale
        r0 = (b * n_l + i) * ev
        for c in range(ev):
            acc += do[r0 + c] * o[r0 + c]
        d[i] = acc
    dq[b * n_l * e: (b + 1) * n_l * e] = 0
    for j0 in range(0, n_s, BK):
        cols = min(BK, n_s - j0)
        k0 = (b * n_s + j0) * e
        v0 = (b * n_s + j0) * ev
        kb = k[k0: k0 + cols * e]
        vb = v[v0: v0 + cols * ev]
        dkb = dk[k0: k0 + cols * e]
        dvb = dv[v0: v0 + cols * ev]
        dkb[:] = 0
        dvb[:] = 0
        start = (j0 // BQ) * BQ if causal else 0
        for i0 in range(start, n_l, BQ):
            rows = min(BQ, n_l - i0)
            q0 = (b * n_l + i0) * e
            d0 = (b * n_l + i0) * ev
            qb = q[q0: q0 + rows * e]
            dob = do[d0: d0 + rows * ev]
            matrix_product(qb, False, kb, True, s, rows, cols, e)
            s_scale = _raw_scores(s, rows, cols, i0, j0, b, scale, mask, has_mask, causal)
            matrix_product(dob, False, vb, True, dp, rows, cols, ev)
            for r in range(rows):
                base = r * cols
                li = lse[b * n_l + i0 + r]
                di = d[i0 + r]
                srow = s[base: base + cols]
                dprow = dp[base: base + cols]
                if p_drop > 0:
                    _drop(dprow, seed, (b * n_l + i0 + r) * n_s + j0, p_drop)
                _score_grads(srow, s_scale, dprow, li, di, scale)
                if p_drop > 0:
                    _drop(srow, seed, (b * n_l + i0 + r) * n_s + j0, p_drop)
            # dv_j += sum_i p_ij z_ij do_i ; dk_j += sum_i ds_ij q_i ; dq_i += sum_j ds_ij k_j
            matrix_product(s, True, dob, False, tmp, cols, ev, rows)
            for x in range(cols * ev):
                dvb[x] += tmp[x]
            matrix_product(dp, True, qb, False, tmp, cols, e, rows)
            for x in range(cols * e):
                dkb[x] += tmp[x]
            matrix_product(dp, False, kb, False, tmp, rows, e, cols)
            dqb = dq[q0: q0 + rows * e]
            for x in range(rows * e):
                dqb[x] += tmp[x]


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def flash_backward(q, k, v, o, do, lse, mask, has_mask, causal, scale, p_drop, seed,
                   dq, dk, dv, n_b, n_l, n_s, e, ev):
    """dq, dk, dv (flat, shaped as q, k, v) of attention from the output o, its gradient
    do and the saved lse; one task per batch-head."""
    for b in prange(n_b):
        _backward_task(np.int64(b), q, k, v, o, do, lse, mask, has_mask, causal, scale,
                       p_drop, seed, dq, dk, dv, n_l, n_s, e, ev)
