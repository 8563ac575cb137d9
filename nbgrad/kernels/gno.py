"""The graph neural operator, fused (derivations: docs/derivations.md#graph-neural-operator).

Notation: a CSR graph (``row_ptr``, ``col``, ``edge_id``); entry ``p`` of row ``i`` is an
edge ``j = col[p] -> i`` with features ``x[e]``, ``e = edge_id[p]``; the kernel of edge
id e is ``kappa_e = V relu(U x_e + b_u) + b_v`` as an ``[F_out, F_in]`` matrix
(kernels/gno_mlp.py), and the aggregation is
``m_i = sum_{p in row i} kappa_{e(p)} @ h_{col[p]}`` (divided by the row length for
``mean``; empty rows give 0).

The unfused pair, ``gno_kernel`` and ``gno_aggregate``, builds every kappa
(``[E, F_out, F_in]``: kernels/gno_mlp.py, kernels/gno_aggregate.py);
kernels/gno_reference.py is the per-edge loop the tests compare both with. This module
is the fused and re-associated ``gno`` (``gno_forward`` / ``gno_backward``). With
``V3[o, f, k] = V[o*F_in + f, k]``,

    m_i[o] = sum_{f,k} V3[o, f, k] W_i[f, k] + sum_f b_v[o*F_in + f] Hs_i[f],
    W_i[f, k] = sum_{p in row i} h_j[f] hidden_e[k],   Hs_i[f] = sum_{p in row i} h_j[f]

so an edge costs F_in*H multiply-adds (an outer product into its row's W_i) instead of
F_out*F_in*H, V meets each node's sums once, and no kappa is built. Each row is one
task: hidden_e is recomputed per entry (2*H*d flops) and W_i lives in a chunk-local
buffer, so the forward allocates nothing beyond m and the backward rebuilds W_i instead
of keeping an [N, F_in*H] array. The backward contracts the upstream G_i with V once
per row (``R_i``) and takes every gradient in the same row pass (see ``gno_backward``).
Extra memory: O(nnz*(d + F_in)) per-entry rows and a few parameter-sized partials.
Everything runs in Numba loops on one thread pool (no BLAS call, whose own pool would
fight Numba's).

Rectangular graphs (``num_source_nodes != num_nodes``): h has one row per source node
(the columns), m one per target node (the rows); nothing else changes.

A batch of examples on one shared graph (``h[B, N_s, F_in]``, B > 1): the kernel
kappa_e is the same for every example, so it is folded into the feature dimension,
``h'[j] = [h[0, j], ..., h[B-1, j]]`` (``[N_s, B*F_in]``), and hidden_e is computed once
for all B. Each node then has B*F_in features per entry, enough for the per-node sums
and the products with V to run as register-tiled matrix products
(``_batched_forward``, ``_batched_backward``;
docs/derivations.md#rectangular-graphs-and-batches); the forward's sums give the
backward's dV (ops/gno.py keeps them when V or b_v needs a gradient).

Every parallel loop owns its output rows (gather form through the cached transposed CSR
or edge-id grouping of the Graph) or writes one partial per fixed chunk of rows, summed
in chunk order, so results are bitwise identical at any thread count. The dense kernels
compile with ``SERIAL_FUSED`` / ``PARALLEL_FUSED`` (runtime/jit.py): FMA and
reassociated sums, which let LLVM vectorise the dot products and keep the register tiles
of ``gemm_tn_acc``; the order of every sum is fixed by the compiled loops and the row
chunks. Outputs and per-entry rows are allocated by NumPy outside the compiled loops, so
``tracemalloc`` sees the memory the ops use (chunk-local buffers are O(F_in*H) per task).
"""

import numpy as np
from numba import njit, prange

from ..runtime.jit import PARALLEL, PARALLEL_FUSED, SERIAL, SERIAL_FUSED, plain
from .basics import dot
from .gemm import gemm_tn_acc
from .gno_mlp import CHUNKS, GRAD_CHUNKS, chunk_sum
from .matmul import matrix_product

# -- small dense products ------------------------------------------------------------------


@njit(**SERIAL_FUSED)
def _dots4(v, S, t0, out, i0, o):
    """``out[i0 + t, o] = sum_r v[r] S[t0 + t, r]`` for t < 4: four dot products that
    share every load of v."""
    s0 = s1 = s2 = s3 = v.dtype.type(0)
    S0 = S[t0]
    S1 = S[t0 + 1]
    S2 = S[t0 + 2]
    S3 = S[t0 + 3]
    for r in range(v.shape[0]):
        vr = v[r]
        s0 += vr * S0[r]
        s1 += vr * S1[r]
        s2 += vr * S2[r]
        s3 += vr * S3[r]
    out[i0, o] = s0
    out[i0 + 1, o] = s1
    out[i0 + 2, o] = s2
    out[i0 + 3, o] = s3


@njit(**SERIAL_FUSED)
def _dots(v, S, n, out, i0, o):
    """``out[i0 + t, o] = sum_r v[r] S[t, r]`` for t < n (``_dots4`` by fours)."""
    full = n - n % 4
    for t0 in range(0, full, 4):
        _dots4(v, S, t0, out, i0 + t0, o)
    for t in range(full, n):
        out[i0 + t, o] = dot(v, S[t], v.shape[0])


# -- fused, re-associated graph neural operator -------------------------------------------

NODE_BLOCK = 8  # nodes whose products with V share one pass over V
ENTRY_BLOCK = 8  # CSR entries of a row gathered together (h rows and hidden vectors)


def row_chunks(row_ptr, chunks):
    """Node bounds ``[c + 1]`` cutting the rows into ``c = min(chunks, N)`` runs of about
    equal entry counts (a function of the graph only, so the split and every partial sum
    are the same at any thread count)."""
    n = row_ptr.shape[0] - 1
    c = max(1, min(chunks, n))
    bounds = np.searchsorted(row_ptr, np.arange(c + 1) * row_ptr[-1] // c)
    bounds[-1] = n
    return bounds


@njit(**SERIAL_FUSED)
def _edge_hidden(x, e, Ut, b_u, hid):
    """``hid = relu(U x[e] + b_u)`` with ``Ut = U^T`` ([d, H]); relu(NaN) = NaN and
    relu'(0) = 0, so ``hid[k] > 0`` is the relu mask (0 at a NaN)."""
    for k in range(hid.shape[0]):
        hid[k] = b_u[k]
    for a in range(Ut.shape[0]):
        xa = x[e, a]
        for k in range(hid.shape[0]):
            hid[k] += Ut[a, k] * xa
    for k in range(hid.shape[0]):
        if hid[k] <= 0:
            hid[k] = 0


@njit(**SERIAL_FUSED)
def _gather_entries(h, x, Ut, b_u, col, edge_id, p0, ne, Hj, Hid):
    """For the CSR entries p0 + t, t < ne: ``Hj[t] = h[col p]`` and ``Hid[t] =
    hidden_{edge_id p}`` (recomputed)."""
    for t in range(ne):
        j = col[p0 + t]
        for f in range(Hj.shape[1]):
            Hj[t, f] = h[j, f]
        _edge_hidden(x, edge_id[p0 + t], Ut, b_u, Hid[t])


@njit(**SERIAL_FUSED)
def _add_node_sums(Hj, Hid, ne, W, hs):
    """``W[f, k] += sum_{t < ne} Hj[t, f] Hid[t, k]``, ``hs[f] += sum_t Hj[t, f]``."""
    gemm_tn_acc(Hj[:ne], Hid[:ne], W)
    for t in range(ne):
        for f in range(hs.shape[0]):
            hs[f] += Hj[t, f]


@njit(**SERIAL_FUSED)
def _node_sums(h, x, Ut, b_u, row_ptr, col, edge_id, i, Hj, Hid, W, hs):
    """Row i's sums ``W[f, k] = sum_{p in row i} h[col p, f] hidden_{edge_id p}[k]`` and
    ``hs[f] = sum_p h[col p, f]``, ENTRY_BLOCK entries at a time."""
    W[:] = 0
    hs[:] = 0
    for p0 in range(row_ptr[i], row_ptr[i + 1], ENTRY_BLOCK):
        ne = min(ENTRY_BLOCK, row_ptr[i + 1] - p0)
        _gather_entries(h, x, Ut, b_u, col, edge_id, p0, ne, Hj, Hid)
        _add_node_sums(Hj, Hid, ne, W, hs)


@njit(**PARALLEL_FUSED)
def _fused_forward(h, x, Ut, b_u, Vf, Bv, row_ptr, col, edge_id, bounds, m):
    """Per node i, from the sums W_i, Hs_i (``_node_sums``, chunk-local buffers):
    ``m[i, o] = sum_r Vf[o, r] W_i[r] + sum_f Bv[o, f] Hs_i[f]``
    (``Vf = V.reshape(F_out, F_in*H)``, ``Bv = b_v.reshape(F_out, F_in)``). Nodes go in
    blocks of NODE_BLOCK, so each row of Vf serves the whole block from L1 (and four
    nodes each load of it, ``_dots``). Rows without entries give 0."""
    f_in = h.shape[1]
    H = Ut.shape[1]
    for c in prange(bounds.shape[0] - 1):
        W = np.empty((NODE_BLOCK, f_in * H), dtype=m.dtype)
        hs = np.empty((NODE_BLOCK, f_in), dtype=m.dtype)
        Hj = np.empty((ENTRY_BLOCK, f_in), dtype=m.dtype)
        Hid = np.empty((ENTRY_BLOCK, H), dtype=m.dtype)
        for i0 in range(bounds[c], bounds[c + 1], NODE_BLOCK):
            nb = min(NODE_BLOCK, bounds[c + 1] - i0)
            for t in range(nb):
                _node_sums(h, x, Ut, b_u, row_ptr, col, edge_id, i0 + t, Hj, Hid,
                           W[t].reshape((f_in, H)), hs[t])
            for o in range(m.shape[1]):
                _dots(Vf[o], W, nb, m, i0, o)
                for t in range(nb):
                    m[i0 + t, o] += dot(Bv[o], hs[t], Bv.shape[1])
            for t in range(nb):
                if row_ptr[i0 + t] == row_ptr[i0 + t + 1]:
                    m[i0 + t] = 0


@njit(**SERIAL_FUSED)
def _entry_mlp_grads(x, Ut, edge_id, p0, ne, Hid, GH, DX, dUt, db_u):
    """Kernel-MLP gradients of the entries p0 + t from ``GH[t] = R_i^T h_j`` (the
    gradient of hidden_e for this entry): ``gh = GH[t] * [Hid[t] > 0]``, then
    ``DX[p, a] = sum_k U[k, a] gh[k]``, ``dUt[a, k] += x[e, a] gh[k]``, ``db_u += gh``."""
    for t in range(ne):
        gh = GH[t]
        for k in range(gh.shape[0]):
            if not Hid[t, k] > 0:
                gh[k] = 0
            db_u[k] += gh[k]
        for a in range(Ut.shape[0]):
            DX[p0 + t, a] = dot(Ut[a], gh, Ut.shape[1])
            xa = x[edge_id[p0 + t], a]
            for k in range(gh.shape[0]):
                dUt[a, k] += xa * gh[k]


@njit(**SERIAL_FUSED)
def _node_entry_grads(h, x, Ut, b_u, row_ptr, col, edge_id, i, R, gb, Hj, Hid, GH,
                      want_mlp, want_h, dUt, db_u, DX, C):
    """Per entry p = (j -> i) of row i, from the row's ``R[f, k] = sum_o G_i[o] V3[o,
    f, k]`` and ``gb = G_i B_v``, ENTRY_BLOCK entries at a time: the kernel-MLP
    gradients (``_entry_mlp_grads`` with ``GH[t] = R^T h_j``, one small product per
    block) and the message gradient ``C[p, f] = (kappa_e^T G_i)[f] = gb[f] + sum_k
    R[f, k] hidden_e[k]``."""
    for p0 in range(row_ptr[i], row_ptr[i + 1], ENTRY_BLOCK):
        ne = min(ENTRY_BLOCK, row_ptr[i + 1] - p0)
        _gather_entries(h, x, Ut, b_u, col, edge_id, p0, ne, Hj, Hid)
        if want_mlp:
            GH[:] = 0
            gemm_tn_acc(Hj[:ne].T, R, GH[:ne])
            _entry_mlp_grads(x, Ut, edge_id, p0, ne, Hid, GH, DX, dUt, db_u)
        if want_h:
            for t in range(ne):
                for f in range(gb.shape[0]):
                    C[p0 + t, f] = gb[f] + dot(R[f], Hid[t], R.shape[1])


@njit(**PARALLEL_FUSED)
def _fused_backward(G, h, x, Ut, b_u, Vf, Bv, row_ptr, col, edge_id, bounds, want_v,
                    want_mlp, want_h, dV_c, dbv_c, dUt_c, dbu_c, DX, C):
    """The fused backward, NODE_BLOCK rows at a time. With ``G_b = G[i0:i0 + nb]``:

    * ``R = G_b Vf``, ``gb = G_b Bv`` (``want_mlp`` or ``want_h``): each node's
      upstream contracted with V and b_v once, for ``_node_entry_grads``;
    * ``want_v``: W_i, Hs_i rebuilt (``_node_sums``), then chunk c's partials
      ``dV_c[c] += G_b^T W``, ``dbv_c[c] += G_b^T Hs``;
    * ``want_mlp``: ``DX[p]`` and chunk partials ``dUt_c[c]``, ``dbu_c[c]``;
      ``want_h``: ``C[p]`` (see ``_node_entry_grads``).
    """
    f_in = h.shape[1]
    H = Ut.shape[1]
    for c in prange(bounds.shape[0] - 1):
        R = np.empty((NODE_BLOCK, f_in * H), dtype=G.dtype)
        gb = np.empty((NODE_BLOCK, f_in), dtype=G.dtype)
        W = np.empty((NODE_BLOCK, f_in * H), dtype=G.dtype)
        hs = np.empty((NODE_BLOCK, f_in), dtype=G.dtype)
        Hj = np.empty((ENTRY_BLOCK, f_in), dtype=G.dtype)
        Hid = np.empty((ENTRY_BLOCK, H), dtype=G.dtype)
        GH = np.empty((ENTRY_BLOCK, H), dtype=G.dtype)
        for i0 in range(bounds[c], bounds[c + 1], NODE_BLOCK):
            nb = min(NODE_BLOCK, bounds[c + 1] - i0)
            Gb = G[i0:i0 + nb]
            if want_mlp or want_h:
                R[:] = 0
                gb[:] = 0
                gemm_tn_acc(Gb.T, Vf, R[:nb])
                gemm_tn_acc(Gb.T, Bv, gb[:nb])
            for t in range(nb):
                if want_v:
                    _node_sums(h, x, Ut, b_u, row_ptr, col, edge_id, i0 + t, Hj, Hid,
                               W[t].reshape((f_in, H)), hs[t])
                if want_mlp or want_h:
                    _node_entry_grads(h, x, Ut, b_u, row_ptr, col, edge_id, i0 + t,
                                      R[t].reshape((f_in, H)), gb[t], Hj, Hid, GH,
                                      want_mlp, want_h, dUt_c[c], dbu_c[c], DX, C)
            if want_v:
                gemm_tn_acc(Gb, W[:nb], dV_c[c])
                gemm_tn_acc(Gb, hs[:nb], dbv_c[c])


# -- fused, batched: the per-node products as GEMMs ----------------------------------------
#
# A batch (nbatch > 1) gives every node nbatch*F_in features per entry, enough to run the
# per-node sums and the products with V as register-tiled matrix products
# (kernels/matmul.py: matrix_product). b_v joins V as one more hidden unit whose value is
# 1 on every edge (``hid_e[H] = 1``), so with H1 = H + 1 and
# ``Vp[o, k, f] = V3[o, f, k]`` for k < H, ``Vp[o, H, f] = b_v[o*F_in + f]``:
#
#     Wt_i[k, (b, f)] = sum_{p in row i} hid_e[k] h[b, j, f]     (Hs_i is the row k = H)
#     m[i, b, o]      = sum_{k, f} Vp[o, k, f] Wt_i[k, (b, f)]
#
# The second line is a product over a block of NODE_BLOCK nodes once the rows of Wt_i
# are regrouped by example (``Wrows[(i, b), (k, f)]``).


@njit(**SERIAL_FUSED)
def _gather_node(h, x, Ut, b_u, col, edge_id, p0, deg, Hj, Hid):
    """For the entries p0 + q, q < deg, of one row (flat row-major buffers):
    ``Hj[q] = h[col p]`` ([deg, fw]) and ``Hid[q] = [hidden_{edge_id p}, 1]``
    ([deg, H + 1], hidden recomputed)."""
    fw = h.shape[1]
    H = Ut.shape[1]
    H1 = H + 1
    for q in range(deg):
        src = h[col[p0 + q]]
        for f in range(fw):
            Hj[q * fw + f] = src[f]
        _edge_hidden(x, edge_id[p0 + q], Ut, b_u, Hid[q * H1: q * H1 + H])
        Hid[q * H1 + H] = 1


@njit(**SERIAL_FUSED)
def _regroup(src, dst, H1, nbatch, f_in, to_rows):
    """``Wt[k, (b, f)]`` ([H1, nbatch*F_in]) <-> ``Wrows[(b, k, f)]`` ([nbatch, H1*F_in]):
    into ``dst`` as rows per example when ``to_rows``, else back."""
    fw = nbatch * f_in
    K = H1 * f_in
    for k in range(H1):
        for b in range(nbatch):
            t = k * fw + b * f_in
            r = b * K + k * f_in
            for f in range(f_in):
                if to_rows:
                    dst[r + f] = src[t + f]
                else:
                    dst[t + f] = src[r + f]


@njit(**SERIAL_FUSED)
def _node_rows(h, x, Ut, b_u, row_ptr, col, edge_id, i, nbatch, Hj, Hid, Wt, Wrows):
    """Row i's sums ``Wt_i`` (gathered entries ``Hj``, ``Hid``), regrouped into
    ``Wrows`` ([nbatch, H1*F_in])."""
    fw = h.shape[1]
    H1 = Ut.shape[1] + 1
    p0 = row_ptr[i]
    deg = row_ptr[i + 1] - p0
    _gather_node(h, x, Ut, b_u, col, edge_id, p0, deg, Hj, Hid)
    matrix_product(Hid, True, Hj, False, Wt, H1, fw, deg)
    _regroup(Wt, Wrows, H1, nbatch, fw // nbatch, plain(True))


@njit(**SERIAL)
def _zero_empty_rows(row_ptr, i0, nb, nbatch, out, width):
    """Rows without entries give 0 whatever V holds (0 * inf would be NaN)."""
    for t in range(nb):
        if row_ptr[i0 + t] == row_ptr[i0 + t + 1]:
            lo = (i0 + t) * nbatch * width
            out[lo: lo + nbatch * width] = 0


@njit(**PARALLEL_FUSED)
def _batched_forward(h, x, Ut, b_u, Vp, row_ptr, col, edge_id, bounds, nbatch, max_deg, f_out,
                     m, W):
    """``W[(i*nbatch + b)*K + k*F_in + f] = Wt_i[k, (b, f)]`` (every node's ``Wrows``, K =
    H1*F_in, kept for the backward) and ``m[(i*nbatch + b)*F_out + o] = sum_{k, f}
    Vp[o, k, f] Wt_i[k, (b, f)]`` (flat m; ``h`` folded ``[N_s, nbatch*F_in]``): per chunk
    of rows, NODE_BLOCK nodes at a time, their rows of W multiplied with Vp (read
    transposed) in one product."""
    fw = h.shape[1]
    f_in = fw // nbatch
    H1 = Ut.shape[1] + 1
    K = H1 * f_in
    for c in prange(bounds.shape[0] - 1):
        Hj = np.empty(max_deg * fw, m.dtype)
        Hid = np.empty(max_deg * H1, m.dtype)
        Wt = np.empty(H1 * fw, m.dtype)
        for i0 in range(bounds[c], bounds[c + 1], NODE_BLOCK):
            nb = min(NODE_BLOCK, bounds[c + 1] - i0)
            r0 = i0 * nbatch
            nr = nb * nbatch
            for t in range(nb):
                _node_rows(h, x, Ut, b_u, row_ptr, col, edge_id, i0 + t, nbatch, Hj, Hid, Wt,
                           W[(r0 + t * nbatch) * K: (r0 + (t + 1) * nbatch) * K])
            matrix_product(W[r0 * K: (r0 + nr) * K], False, Vp, True,
                           m[r0 * f_out: (r0 + nr) * f_out], nr, f_out, K)
            _zero_empty_rows(row_ptr, i0, nb, nbatch, m, f_out)


@njit(**PARALLEL_FUSED)
def _batched_backward(G, h, x, Ut, b_u, Vp, W, row_ptr, col, edge_id, bounds, nbatch, max_deg,
                      f_out, want_v, want_mlp, want_h, dVp_c, dUt_c, dbu_c, DX, C):
    """The batched backward, NODE_BLOCK rows at a time (flat ``G`` and ``C``; row
    ``i*nbatch + b`` of G is node i, example b). With ``G_b`` the block's rows:

    * ``R = G_b Vp`` (``R[(i, b), (k, f)] = dm/dWt_i[k, (b, f)]``), regrouped per node
      into ``Rt_i[k, (b, f)]``; then per entry q of row i
      ``GH[q, k] = sum_{(b,f)} Hj[q, (b,f)] Rt_i[k, (b,f)]`` (k < H: the kernel-MLP
      gradients, ``_entry_mlp_grads``) and ``C[p] = sum_k Hid[q, k] Rt_i[k]`` (the
      message gradient, ``kappa_e^T G_i`` per example; k = H brings b_v's part);
    * ``want_v``: ``dVp_c[c] = G_c^T W_c`` over the chunk's rows of G and of the
      forward's W (``_batched_forward``).
    """
    fw = h.shape[1]
    f_in = fw // nbatch
    H = Ut.shape[1]
    H1 = H + 1
    K = H1 * f_in
    for c in prange(bounds.shape[0] - 1):
        Hj = np.empty(max_deg * fw, G.dtype)
        Hid = np.empty(max_deg * H1, G.dtype)
        GH = np.empty(max_deg * H, G.dtype)
        Rt = np.empty(H1 * fw, G.dtype)
        R = np.empty(NODE_BLOCK * nbatch * K, G.dtype)
        if want_v:
            lo, hi = bounds[c] * nbatch, bounds[c + 1] * nbatch
            matrix_product(G[lo * f_out: hi * f_out], True, W[lo * K: hi * K], False, dVp_c[c],
                           f_out, K, hi - lo)
        stop = bounds[c + 1] if want_mlp or want_h else bounds[c]
        for i0 in range(bounds[c], stop, NODE_BLOCK):
            nb = min(NODE_BLOCK, stop - i0)
            r0 = i0 * nbatch
            nr = nb * nbatch
            matrix_product(G[r0 * f_out: (r0 + nr) * f_out], False, Vp, False, R, nr, K, f_out)
            for t in range(nb):
                i = i0 + t
                p0 = row_ptr[i]
                deg = row_ptr[i + 1] - p0
                _gather_node(h, x, Ut, b_u, col, edge_id, p0, deg, Hj, Hid)
                _regroup(R[t * nbatch * K: (t + 1) * nbatch * K], Rt, H1, nbatch, f_in,
                         plain(False))
                if want_mlp:
                    matrix_product(Hj, False, Rt, True, GH, deg, H, fw)
                    _entry_mlp_grads(x, Ut, edge_id, p0, deg, Hid[: deg * H1].reshape(deg, H1),
                                     GH[: deg * H].reshape(deg, H), DX, dUt_c[c], dbu_c[c])
                if want_h:
                    matrix_product(Hid, False, Rt, False, C[p0 * fw: (p0 + deg) * fw], deg,
                                   fw, H1)


@njit(**PARALLEL)
def _gather_groups(C, g_ptr, g_pos, out):
    """``out[j] = sum_{q in group j} C[g_pos[q]]`` in increasing position (groups: the
    transposed CSR's columns, or the CSR entries sharing an edge id)."""
    n = g_ptr.shape[0] - 1
    f = C.shape[1]
    chunks = min(n, CHUNKS)
    for c in prange(chunks):
        for j in range(c * n // chunks, (c + 1) * n // chunks):
            for q in range(g_ptr[j], g_ptr[j + 1]):
                p = g_pos[q]
                for a in range(f):
                    out[j, a] += C[p, a]


def fold_batch(a):
    """``a[B, N, F] -> (a'[N, B*F], B)`` with ``a'[j] = [a[0, j], ..., a[B-1, j]]`` (a
    copy); ``a[N, F] -> (a, 1)``."""
    if a.ndim == 2:
        return a, 1
    B, n, f = a.shape
    return np.ascontiguousarray(a.transpose(1, 0, 2)).reshape(n, B * f), B


def unfold_batch(a, n, nbatch, f, batched):
    """Inverse of ``fold_batch``: ``a`` of n nodes and f features, as ``[N, B*F]`` or
    ``[N*B, F]`` (the same memory), to ``[B, N, F]`` if ``batched``; else ``a`` itself."""
    if not batched:
        return a
    return np.ascontiguousarray(a.reshape(n, nbatch, f).transpose(1, 0, 2))


def batched_v(V, b_v, f_out, f_in):
    """``Vp[o, k, f] = V[o*F_in + f, k]`` for k < H and ``Vp[o, H, f] = b_v[o*F_in + f]``,
    flat (``_batched_forward``)."""
    H = V.shape[1]
    Vp = np.empty((f_out, H + 1, f_in), dtype=V.dtype)
    Vp[:, :H] = V.reshape(f_out, f_in, H).transpose(0, 2, 1)
    Vp[:, H] = b_v.reshape(f_out, f_in)
    return Vp.reshape(-1)


def max_degree(row_ptr):
    """The longest row of the CSR graph (0 without rows)."""
    return int(np.diff(row_ptr).max()) if row_ptr.shape[0] > 1 else 0


def gno_forward(h, x, U, b_u, V, b_v, row_ptr, col, edge_id, f_out):
    """Fused GNO forward (sum over each row): ``m[N, F_out] = W V_flat^T + Hs B_v^T`` with
    the per-node sums ``W_i``, ``Hs_i`` of ``_fused_forward`` (never stored: the backward
    rebuilds them), ``V_flat = V.reshape(F_out, F_in*H)``, ``B_v = b_v.reshape(F_out,
    F_in)``. ``h[N_s, F_in]`` -> ``[N, F_out]`` (N = the graph's rows), or a batch on the
    shared graph, ``h[B, N_s, F_in]`` -> ``[B, N, F_out]``. Returns ``(m, W)``: W is None
    for one example (no extra memory beyond m); for a batch (``_batched_forward``) it is
    the per-node sums ``[N*B*(H+1)*F_in]``, which ``gno_backward`` takes for dV."""
    hf, nbatch = fold_batch(h)
    f_in = h.shape[-1]
    n = row_ptr.shape[0] - 1
    m = np.zeros((n * nbatch, f_out), dtype=h.dtype)
    if nbatch > 1:
        W = np.empty(n * nbatch * (U.shape[0] + 1) * f_in, dtype=h.dtype)
        _batched_forward(hf, x, np.ascontiguousarray(U.T), b_u, batched_v(V, b_v, f_out, f_in),
                         row_ptr, col, edge_id, row_chunks(row_ptr, GRAD_CHUNKS), nbatch,
                         max_degree(row_ptr), f_out, m.reshape(-1), W)
        return unfold_batch(m, n, nbatch, f_out, True), W
    _fused_forward(hf, x, np.ascontiguousarray(U.T), b_u, V.reshape(f_out, f_in * V.shape[1]),
                   b_v.reshape(f_out, f_in), row_ptr, col, edge_id,
                   row_chunks(row_ptr, CHUNKS), m)
    return unfold_batch(m, n, nbatch, f_out, h.ndim == 3), None


def gno_backward(G, h, x, U, b_u, V, b_v, row_ptr, col, edge_id, by_edge_id, transpose,
                 needs, W=None):
    """Fused GNO backward for the upstream ``G[N, F_out]`` (``G[B, N, F_out]`` for a batch
    ``h[B, N_s, F_in]``; already divided by the row length for 'mean').
    ``by_edge_id() -> (e_ptr, e_pos)`` and ``transpose() -> (t_ptr, t_pos)`` give the CSR
    entries grouped by edge id and by column (called only when needed). ``needs`` = which
    of (h, x, U, b_u, V, b_v) want a gradient; ``W``: ``gno_forward``'s (for a batch, else
    None; recomputed when not given). Returns those six gradients (None where
    not needed), from one pass of ``_fused_backward``:

    * ``dV3[o, f, k] = sum_i G_i[o] W_i[f, k]``, ``db_v[o, f] = sum_i G_i[o] Hs_i[f]``
      and ``dU``, ``db_u``: partials of GRAD_CHUNKS fixed row chunks, summed in order;
    * ``dx_e = sum_{p: id e} U^T gh_p`` gathered by edge id from per-entry rows;
    * ``dh_j = sum_{p: col j} C_p`` gathered through the transposed CSR.

    Extra memory: ``[nnz, d + B*F_in]`` per-entry rows and GRAD_CHUNKS parameter-sized
    partials (plus the folded copies of h, G and dh for a batch).
    """
    f_in = h.shape[-1]
    f_out = G.shape[-1]
    d, H = x.shape[1], U.shape[0]
    empty_rows = row_ptr[1:] == row_ptr[:-1]
    if empty_rows.any():
        # m_i = 0 for a row without entries whatever the inputs, so G_i reaches nothing
        # (not even through G_i W_i with W_i = 0, which is NaN for an inf or NaN G_i)
        G = np.where(empty_rows[:, None], G.dtype.type(0), G)
    hf, nbatch = fold_batch(h)
    G = fold_batch(G)[0].reshape(G.shape[-2] * nbatch, f_out)  # row i*B + b: node i, example b
    want_v, want_mlp, want_h = needs[4] or needs[5], any(needs[1:4]), needs[0]
    bounds = row_chunks(row_ptr, GRAD_CHUNKS)
    chunks = bounds.shape[0] - 1
    dUt_c = np.zeros((chunks if want_mlp else 0, d, H), dtype=G.dtype)
    dbu_c = np.zeros((chunks if want_mlp else 0, H), dtype=G.dtype)
    DX = np.empty((col.shape[0] if want_mlp else 0, d), dtype=G.dtype)
    C = np.empty((col.shape[0] if want_h else 0, hf.shape[1]), dtype=G.dtype)
    dh = dx = dU = db_u = dV = db_v = None
    if nbatch > 1:
        if W is None and want_v:
            W = gno_forward(h, x, U, b_u, V, b_v, row_ptr, col, edge_id, f_out)[1]
        # every chunk's product writes its whole row of dVp_c
        dVp_c = np.empty((chunks if want_v else 0, f_out * (H + 1) * f_in), dtype=G.dtype)
        sums = W if want_v else np.empty(0, G.dtype)
        _batched_backward(G.reshape(-1), hf, x, np.ascontiguousarray(U.T), b_u,
                          batched_v(V, b_v, f_out, f_in), sums, row_ptr,
                          col, edge_id, bounds, nbatch, max_degree(row_ptr), f_out, want_v,
                          want_mlp, want_h, dVp_c, dUt_c, dbu_c, DX, C.reshape(-1))
        if want_v:
            dVp = chunk_sum(dVp_c).reshape(f_out, H + 1, f_in)  # Vp's layout (batched_v)
            dV = dVp[:, :H].transpose(0, 2, 1).reshape(f_out * f_in, H)
            db_v = dVp[:, H].reshape(f_out * f_in)
    else:
        dV_c = np.zeros((chunks if want_v else 0, f_out, f_in * H), dtype=G.dtype)
        dbv_c = np.zeros((chunks if want_v else 0, f_out, f_in), dtype=G.dtype)
        _fused_backward(G, hf, x, np.ascontiguousarray(U.T), b_u, V.reshape(f_out, f_in * H),
                        b_v.reshape(f_out, f_in), row_ptr, col, edge_id, bounds, want_v,
                        want_mlp, want_h, dV_c, dbv_c, dUt_c, dbu_c, DX, C)
        if want_v:
            dV = chunk_sum(dV_c).reshape(f_out * f_in, H)
            db_v = chunk_sum(dbv_c).reshape(f_out * f_in)
    dV = dV if needs[4] else None
    db_v = db_v if needs[5] else None
    if needs[1]:
        dx = np.zeros_like(x)
        _gather_groups(DX, *by_edge_id(), dx)
    if needs[2]:
        dU = np.ascontiguousarray(chunk_sum(dUt_c).T)
    if needs[3]:
        db_u = chunk_sum(dbu_c)
    if needs[0]:
        dh = np.zeros_like(hf)
        _gather_groups(C, *transpose(), dh)
        dh = unfold_batch(dh, hf.shape[0], nbatch, f_in, h.ndim == 3)
    return dh, dx, dU, db_u, dV, db_v
