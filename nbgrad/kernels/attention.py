"""Fused scaled dot-product attention in the FlashAttention style, for ops/attention.py.

For one batch-head b with queries q [L, E], keys k [S, E] and values v [S, Ev]:

    s_ij = scale q_i . k_j + mask_ij        (-inf where masked; causal: j > i masked)
    p_ij = exp(s_ij - lse_i),  lse_i = log sum_j exp(s_ij)
    o_i  = sum_j p_ij z_ij v_j              (z_ij = keep_ij / (1 - dropout_p), or 1)

Forward: blocks of FBQ queries against blocks of FBK keys with an online softmax (a
running max m_i and sum l_i per row; the partial output is rescaled by exp(m_old - m_new)
when the max grows), so no [L, S] buffer exists: the forward keeps the output and lse
only. A row with every key masked gets o_i = 0 and lse_i = +inf (PyTorch's CPU kernel
gives 0 there, and its gradient 0).

Backward (FlashAttention-2): with D_i = sum_c do_ic o_ic,

    dv_j = sum_i p_ij z_ij do_i,   dp_ij = z_ij do_i . v_j,   ds_ij = p_ij (dp_ij - D_i)
    dq_i = scale sum_j ds_ij k_j,  dk_j = scale sum_i ds_ij q_i

recomputing p block by block from lse, in blocks of BQ queries by BK keys.

Products: kernels/matmul.py's register tile (MR x NR sums in vector registers) over
operands packed once per batch-head (``_gemm``, see "block products" below); the score
product also keeps the row maxima the online softmax needs (``_gemm_scores``), and the
sums of o, dq, dk and dv accumulate in place. The weights exp(s - m) take a lean exp
(``_exp_weight``).

Work split: the forward runs one task per (batch-head, chunk of QC queries); the backward
one task per batch-head (it sweeps the key blocks in order, and accumulates dq over them
in that order), so every sum has a fixed order and the bits do not depend on the thread
count. Dropout draws keep_ij from a hash of (seed, b, i, j) (splitmix64), so the
backward regenerates the forward's mask without storing it.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, types
from numba.extending import overload

from ..runtime.jit import (
    PARALLEL_IEEE_DIV_FMA,
    SERIAL,
    SERIAL_IEEE_DIV_FMA,
    njit_with_serial,
)
from .basics import vector_sum
from .fastmath import (
    _LOG2E,
    _ROUND,
    _bits_of_f32,
    _exp_reduced_f32,
    _f32_from_bits,
    exp,
    log,
)
from .gemm import data_pointer
from .matmul import MR, MR_U, _tile
from .softmax import _row_max
from .tiles import panel_cols

BQ = 128  # queries per block of the backward
BK = 256  # keys per block of the backward, a multiple of every NR (BQ x BK: measured
# against 64 x 128 ... 256 x 256)
# Queries and keys per block of the forward: long rows of keys mean fewer rescalings of
# the output rows and fewer per-row steps, few queries a smaller block of scores (128 KB
# at 32 x 1024). Measured at L = 1024, d = 64 against 32 ... 128 x 256 ... 1024: 32 x 1024
# about 10% faster than 128 x 256.
FBQ = 32
FBK = 1024
QC = 1024  # queries per forward task (one packing of k and v per chunk)
L1_PANEL = np.uint64(32 << 10)  # bytes of a panel of b that stays in L1 (_gemm)

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


_EXP_FLOOR = np.float32(-87.0)  # exp's results below e^-87 (not normal floats) are 0 here


def _exp_weight(y):
    """e^y for y <= 0 (or NaN): an attention weight relative to its row's max. float32:
    fastmath's polynomial, 0 below -87 (a weight below 1e-38 of the max, and exact 0 for
    masked scores); float64: libm."""
    return np.exp(y)


@overload(_exp_weight, inline="always")
def _exp_weight_jit(y):
    if y == types.float32:
        def impl(y):
            # t = y log2(e) + 1.5 2^23 rounds k = t - 1.5 2^23 to an integer (in -126..0)
            # held in t's low mantissa bits, so 2^k is built from t's bits with no
            # float -> int conversion: exponent field (k + 127) & 0xff. A NaN y gives a
            # garbage 2^k but a NaN polynomial, so NaN.
            x = _EXP_FLOOR if y < _EXP_FLOOR else y  # NaN passes through
            t = x * _LOG2E + _ROUND
            k = t - _ROUND
            two_k = _f32_from_bits(np.int32(((_bits_of_f32(t) + 127) & 0xFF) << 23))
            e = _exp_reduced_f32(x, k) * two_k
            return np.float32(0) if y < _EXP_FLOOR else e
        return impl
    return lambda y: np.exp(y)


@njit(**SERIAL_IEEE_DIV_FMA)
def _exp_sum(x, scale, shift, e):
    """e[j] = exp(x[j] scale - shift) (<= 0: shift is the max of x scale, or 0 when
    that is -inf) and their sum. Not in place: LLVM vectorises the loop only for
    distinct x and e."""
    zero = e.dtype.type(0)
    for j in range(x.size):
        y = x[j] * scale - shift
        e[j] = _exp_weight(zero if y > zero else y)  # a rounding above 0 (FMA)
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
        p = _exp_weight(zero if y > zero else y)  # a rounding above 0 (FMA)
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


# -- block products on panels packed once per batch-head --------------------------------
#
# Every product of the kernels runs kernels/matmul.py's register tile (``_tile``: MR x NR
# sums in vector registers) over a b operand packed once per batch-head (or per chunk of
# queries) into zero-padded panels of NR columns, each ``b_panel`` values apart and NR
# values per step of k, so no block is packed again per block of queries or keys (a
# row-major operand exactly one panel wide, as v, k, q, do at d = 64 in float32, is read
# in place):
#
#   kt  [ceil(S / NR)][E][NR]   k^T  (s = q k^T)      kp  [ceil(E / NR)][S][NR]   k   (dq += ds k)
#   vt  [ceil(S / NR)][Ev][NR]  v^T  (dp = do v^T)    vp  [ceil(Ev / NR)][S][NR]  v   (o += p v)
#   qp  [ceil(E / NR)][L][NR]   q    (dk += ds^T q)   dop [ceil(Ev / NR)][L][NR]  do  (dv += p^T do)
#
# a is read in place with its row and k strides; a tile reads MR rows of a even past M
# (their sums are discarded), so every a lives in a buffer with room for them.


@njit(**SERIAL)
def _pack_transposed(x, x0, n, c, xp, nr):
    """xp[(j // nr) c nr + i nr + j % nr] = x[x0 + j c + i] for i < c, j < n rounded up
    to a multiple of nr (zeros past n): x [n, c] transposed, in panels of nr rows of x."""
    for j in range(n):
        dst = (j // nr) * c * nr + j % nr
        src = x0 + j * c
        for i in range(c):
            xp[dst + i * nr] = x[src + i]
    for j in range(n, (n + nr - 1) // nr * nr):
        dst = (j // nr) * c * nr + j % nr
        for i in range(c):
            xp[dst + i * nr] = 0


@njit(**SERIAL)
def _pack_panels(x, x0, n, c, xp, nr):
    """xp[(i // nr) n nr + j nr + i % nr] = x[x0 + j c + i] for j < n, i < c rounded up
    to a multiple of nr (zeros past c): x [n, c] in panels of nr columns."""
    for i0 in range(0, c, nr):
        width = min(nr, c - i0)
        for j in range(n):
            dst = (i0 // nr) * n * nr + j * nr
            src = x0 + j * c + i0
            for i in range(width):
                xp[dst + i] = x[src + i]
            for i in range(width, nr):
                xp[dst + i] = 0


@njit(**SERIAL)
def _gemm(a, a0, a_row, a_step, bp, b0, b_panel, b_step, out, o0, ldo, M, N, K, first):
    """out[o0 + i ldo + j] (+)= sum_{k < K} a[a0 + i a_row + k a_step]
    bp[b0 + (j // NR) b_panel + k b_step + j % NR] for i < M, j < N (k ascending; from
    zero where ``first``, else onto out), b in panels (packed: b_step = NR; or a
    row-major b of NR columns read in place). k is cut into runs whose piece of a panel
    fits in L1 (L1_PANEL); each piece is swept by all the slivers of MR rows of a, so it
    is read from L2 once. A run after the first continues the sums stored in out (a
    stored float reloads unchanged: one FMA chain per element, k ascending).
    Rows of a up to the next multiple of MR are read (not used)."""
    u = np.uint64
    nr = panel_cols(out)
    a_ptr, b_ptr, out_ptr = data_pointer(a), data_pointer(bp), data_pointer(out)
    M, N, K, a_row, a_step, ldo = u(M), u(N), u(K), u(a_row), u(a_step), u(ldo)
    depth = max(u(1), L1_PANEL // (nr * u(out.itemsize)))  # k per pass: a panel in L1
    for k0 in range(u(0), K, depth):
        kc = min(depth, K - k0)
        for j0 in range(u(0), N, nr):
            bj = u(b0) + j0 // nr * u(b_panel) + k0 * u(b_step)
            for i0 in range(u(0), M, MR_U):
                _tile(a_ptr, u(a0) + i0 * a_row + k0 * a_step, a_row, a_step, b_ptr, bj,
                      u(b_step), kc, out_ptr, u(o0) + i0 * ldo + j0, ldo, min(MR_U, M - i0),
                      min(nr, N - j0), first and k0 == 0)


@njit(**SERIAL)
def _gemm_scores(a, a0, a_row, bp, b0, b_panel, out, ldo, M, N, K, rm):
    """``_gemm`` from zero into out[i ldo + j] with a's k stride 1 and b packed, and the
    running maxima of each tile's rows while it is in L1: rm[i NR + c] = max of row i of
    out over the columns j = c mod NR (rm starts at -inf), so the score block's row max
    takes a pass over NR values per row instead of over the row."""
    u = np.uint64
    nr = panel_cols(out)
    a_ptr, b_ptr, out_ptr = data_pointer(a), data_pointer(bp), data_pointer(out)
    M, N, K, a_row, ldo = u(M), u(N), u(K), u(a_row), u(ldo)
    for j0 in range(u(0), N, nr):
        for i0 in range(u(0), M, MR_U):  # (panel-outer: the panel stays in L1)
            rows, cols = min(MR_U, M - i0), min(nr, N - j0)
            _tile(a_ptr, u(a0) + i0 * a_row, a_row, u(1), b_ptr,
                  u(b0) + j0 // nr * u(b_panel), nr, K, out_ptr, i0 * ldo + j0, ldo, rows,
                  cols, True)
            for r in range(rows):
                o, m = (i0 + r) * ldo + j0, (i0 + r) * nr
                for j in range(cols):
                    x, y = out[o + j], rm[m + j]
                    rm[m + j] = y if y > x else x


@njit(**SERIAL, inline="always")
def _padded(n, nr):
    """n rounded up to a multiple of nr."""
    return (n + nr - 1) // nr * nr


@njit(**SERIAL)
def _as_panels(x, x0, n, c, nr):
    """x [n, c] at offset x0 as a b operand of ``_gemm``: (array, offset, panel stride,
    k step); x itself when it is one panel wide (c = nr), else ``_pack_panels``' copy."""
    if c == nr:
        return x, x0, 0, c
    xp = np.empty(_padded(c, nr) * n, x.dtype)
    _pack_panels(x, x0, n, c, xp, nr)
    return xp, 0, n * nr, nr


@njit(**SERIAL)
def _whole_slivers(x, x0, n, c):
    """x [n, c] at offset x0 as an a operand of ``_gemm`` (array, offset), which reads
    slivers of MR whole rows: x itself when n is a multiple of MR, else a copy with rows
    up to the next multiple (their values unused)."""
    if n % MR == 0:
        return x, x0
    xh = np.empty(_padded(n, MR) * c, x.dtype)
    for i in range(n * c):
        xh[i] = x[x0 + i]
    return xh, 0


@njit(**SERIAL_IEEE_DIV_FMA)
def _forward_task(t, q, k, v, mask, has_mask, causal, scale, p_drop, seed, out, lse,
                  n_l, n_s, e, ev, kt, vp, qb, s, p, acc, m, l, rm):
    """Task t: queries [i_lo, i_hi) (a chunk of QC) of batch-head b = t // chunks, in
    blocks of FBQ queries against blocks of FBK keys (online softmax)."""
    nr = np.int64(panel_cols(q))
    chunks = (n_l + QC - 1) // QC
    b = t // chunks
    i_lo = (t % chunks) * QC
    i_hi = min(n_l, i_lo + QC)
    s_end = min(n_s, i_hi) if causal else n_s
    # k^T of the keys this chunk sees in panels (read by every block of queries); v too,
    # unless it is one panel wide (then it is read in place)
    _pack_transposed(k, b * n_s * e, s_end, e, kt, nr)
    v_in_place = ev == nr
    if v_in_place:
        vb, v0, v_panel = v, b * n_s * ev, 0
    else:
        _pack_panels(v, b * n_s * ev, s_end, ev, vp, nr)
        vb, v0, v_panel = vp, 0, s_end * nr
    for i0 in range(i_lo, i_hi, FBQ):
        rows = min(FBQ, i_hi - i0)
        q0 = (b * n_l + i0) * e
        for x in range(rows * e):
            qb[x] = q[q0 + x]
        acc[: rows * ev] = 0
        m[:rows] = -np.inf
        l[:rows] = 0
        j_end = min(n_s, i0 + rows) if causal else n_s
        for j0 in range(0, j_end, FBK):
            cols = min(FBK, j_end - j0)
            # s = q_block k_block^T  [rows, cols], and its row maxima by lanes in rm
            rm[: _padded(rows, MR) * nr] = -np.inf
            _gemm_scores(qb, 0, e, kt, j0 * e, e * nr, s, cols, rows, cols, e, rm)
            s_scale = _raw_scores(s, rows, cols, i0, j0, b, scale, mask, has_mask, causal)
            for r in range(rows):
                # m_new = max(m, max_j s_rj), l = l exp(m - m_new) + sum_j exp(s_rj - m_new),
                # acc_r *= exp(m - m_new), p_rj = exp(s_rj - m_new) (z_rj)
                base = r * cols
                srow = s[base: base + cols]
                if s_scale == 1:  # s was rescaled or masked after the product
                    row_max = _row_max(srow)
                else:
                    row_max = _row_max(rm[r * nr: (r + 1) * nr])
                mx = max(m[r], row_max * s_scale)
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
            # acc += p v_block  [rows, ev]
            _gemm(p, 0, cols, 1, vb, v0 + j0 * (ev if v_in_place else nr), v_panel,
                  ev if v_in_place else nr, acc, 0, ev, rows, ev, cols, False)
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
    (additive, any strides) where ``has_mask``. One task per batch-head and chunk of QC
    queries."""
    nr = panel_cols(q)
    chunks = (n_l + QC - 1) // QC
    s_pad = _padded(n_s, nr)
    for t in prange(n_b * chunks):
        kt = np.empty(s_pad * e, q.dtype)
        vp = np.empty(_padded(ev, nr) * n_s, q.dtype)
        qb = np.empty((FBQ + MR) * e, q.dtype)
        s = np.empty(FBQ * FBK + MR, q.dtype)
        p = np.empty(FBQ * FBK + MR, q.dtype)
        acc = np.empty((FBQ + MR) * ev, q.dtype)
        m = np.empty(FBQ, q.dtype)
        l = np.empty(FBQ, q.dtype)
        rm = np.empty((FBQ + MR) * nr, q.dtype)
        _forward_task(np.int64(t), q, k, v, mask, has_mask, causal, scale, p_drop, seed,
                      out, lse, n_l, n_s, e, ev, kt, vp, qb, s, p, acc, m, l, rm)


@njit(**SERIAL_IEEE_DIV_FMA)
def _backward_task(b, q, k, v, o, do, lse, mask, has_mask, causal, scale, p_drop, seed,
                   dq, dk, dv, n_l, n_s, e, ev):
    nr = np.int64(panel_cols(q))
    s_pad = _padded(n_s, nr)
    kt = np.empty(s_pad * e, q.dtype)
    vt = np.empty(s_pad * ev, q.dtype)
    s = np.empty(BQ * BK + MR, q.dtype)
    dp = np.empty(BQ * BK + MR, q.dtype)
    d = np.empty(n_l, q.dtype)
    _pack_transposed(k, b * n_s * e, n_s, e, kt, nr)
    _pack_transposed(v, b * n_s * ev, n_s, ev, vt, nr)
    kp, kp0, kp_panel, kp_step = _as_panels(k, b * n_s * e, n_s, e, nr)
    qp, qp0, qp_panel, qp_step = _as_panels(q, b * n_l * e, n_l, e, nr)
    dop, dop0, dop_panel, dop_step = _as_panels(do, b * n_l * ev, n_l, ev, nr)
    qh, qh0 = _whole_slivers(q, b * n_l * e, n_l, e)
    doh, doh0 = _whole_slivers(do, b * n_l * ev, n_l, ev)
    for i in range(n_l):
        acc = scale - scale
        r0 = (b * n_l + i) * ev
        for c in range(ev):
            acc += do[r0 + c] * o[r0 + c]
        d[i] = acc
    dq[b * n_l * e: (b + 1) * n_l * e] = 0
    dk[b * n_s * e: (b + 1) * n_s * e] = 0
    dv[b * n_s * ev: (b + 1) * n_s * ev] = 0
    for j0 in range(0, n_s, BK):
        cols = min(BK, n_s - j0)
        k0 = (b * n_s + j0) * e
        v0 = (b * n_s + j0) * ev
        start = (j0 // BQ) * BQ if causal else 0
        for i0 in range(start, n_l, BQ):
            rows = min(BQ, n_l - i0)
            # s = q_i k_j^T, dp = do_i v_j^T  [rows, cols]
            _gemm(qh, qh0 + i0 * e, e, 1, kt, j0 * e, e * nr, nr, s, 0, cols, rows, cols, e,
                  True)
            s_scale = _raw_scores(s, rows, cols, i0, j0, b, scale, mask, has_mask, causal)
            _gemm(doh, doh0 + i0 * ev, ev, 1, vt, j0 * ev, ev * nr, nr, dp, 0, cols, rows, cols, ev,
                  True)
            for r in range(rows):
                # p = exp(s - lse) (z), ds = p (dp z - D) scale
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
            _gemm(s, 0, 1, cols, dop, dop0 + i0 * dop_step, dop_panel, dop_step, dv, v0, ev,
                  cols, ev, rows, False)
            _gemm(dp, 0, 1, cols, qp, qp0 + i0 * qp_step, qp_panel, qp_step, dk, k0, e, cols,
                  e, rows, False)
            _gemm(dp, 0, cols, 1, kp, kp0 + j0 * kp_step, kp_panel, kp_step, dq,
                  (b * n_l + i0) * e, e, rows, e, cols, False)


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def flash_backward(q, k, v, o, do, lse, mask, has_mask, causal, scale, p_drop, seed,
                   dq, dk, dv, n_b, n_l, n_s, e, ev):
    """dq, dk, dv (flat, shaped as q, k, v) of attention from the output o, its gradient
    do and the saved lse; one task per batch-head."""
    for b in prange(n_b):
        _backward_task(np.int64(b), q, k, v, o, do, lse, mask, has_mask, causal, scale,
                       p_drop, seed, dq, dk, dv, n_l, n_s, e, ev)
