"""Graph neural operator kernels (derivations: docs/derivations.md#graph-neural-operator).

Notation: a CSR graph (``row_ptr``, ``col``, ``edge_id``); entry ``p`` of row ``i`` is an
edge ``j = col[p] -> i`` with features ``x[e]``, ``e = edge_id[p]``. Per edge id

    pre_e = U x_e + b_u,   hidden_e = relu(pre_e),   kappa_e = V hidden_e + b_v

with ``kappa_e`` read as an ``[F_out, F_in]`` matrix (row-major: ``V[o*F_in + f, k]``),
and the aggregation is ``m_i = sum_{p in row i} kappa_{e(p)} @ h_{col[p]}`` (divided by
the row length for ``mean``; empty rows give 0).

Three implementations:

* ``reference_forward`` / ``reference_backward``: the per-edge loop, serial, building
  every kappa; the tests compare the fast paths with it.
* ``kernel_forward/backward`` + ``aggregate_forward/backward``: the unfused pair
  (kappa materialised as ``[E, F_out, F_in]``); the kernel MLP's products are
  register-tiled loop nests (``gemm.gemm_tn_acc``) over fixed row chunks, not BLAS calls.
* ``gno_forward`` / ``gno_backward``: fused and re-associated around the kernel MLP's
  last layer, which is linear. With the augmented hidden vector ``hid_e = [hidden_e, 1]``
  (``augmented_hidden``) and ``Va[o, k*F_in + f] = V[o*F_in + f, k]`` (``b_v`` as the
  weight of the constant unit k = H, ``augmented_v``),

      m_i[o] = sum_{k,f} Va[o, k*F_in + f] Wp_i[k*F_in + f],
      Wp_i[k*F_in + f] = sum_{p in row i} hid_e[k] h_j[f]

  so an entry costs one (H+1)*F_in outer product into its row's ``Wp_i`` instead of
  F_out*F_in*H, and V meets the per-node sums in ONE product ``m = Wp Va^T``. The backward
  is two products, ``dVa = G^T Wp`` and ``dWp = G Va``, and a scatter of ``dWp`` back to
  the entries (dL/dhidden_e and dL/dh_j). ``Wp`` (``[N*B, (H+1)*F_in]``) is kept from the
  forward for the backward; no kappa is built. The products run on gemm.py's AVX2-sized
  register tiles (``gemm_nn_acc``, ``gemm_nt``), on one thread pool (no BLAS call, whose
  own pool would fight Numba's).

Rectangular graphs (``num_source_nodes != num_nodes``): h has one row per source node
(the columns), m one per target node (the rows); nothing else changes.

A batch of examples on one shared graph (``h[B, N_s, F_in]``): the kernel kappa_e is the
same for every example, so ``h'[j] = [h[0, j], ..., h[B-1, j]]`` (``[N_s, B*F_in]``) is
gathered once per entry and a node's sums for all B examples are one product,
``X_i[k, (b, f)] = sum_p hid_e[k] h'_j[(b, f)]`` (``[H+1, B*F_in]``), copied into the B
rows ``Wp[i*B + b]`` (row i*B + b: node i, example b). B = 1 is the unbatched case.

Every parallel loop owns its output rows (gather form through the cached transposed CSR
or edge-id grouping of the Graph) or writes one partial per fixed chunk of rows, summed
in chunk order, and the products split at tile boundaries, so results are bitwise
identical at any thread count. Outputs and per-entry rows are allocated by NumPy outside
the compiled loops, so ``tracemalloc`` sees the memory the ops use (chunk-local buffers
are O((H+1)*B*F_in) per task).
"""

import numpy as np
from numba import njit, prange

from . import gemm
from ._jit import (
    PARALLEL,
    PARALLEL_FUSED,
    PARALLEL_WORK_MIN,
    SERIAL,
    SERIAL_FUSED,
    dot,
    for_work,
)
from .csr import csr_rows
from .gemm import gemm_nn_acc, gemm_nt, gemm_tn_acc

CHUNKS = 256  # parallel loops split their rows into this many fixed chunks
GRAD_CHUNKS = 16  # parameter gradients: one partial per chunk of rows, summed in order
ROW_BLOCK = 64  # rows of a chunk whose products share the partial's tiles in cache


# -- kernel MLP ------------------------------------------------------------------------


def hidden_forward(x, U, b_u):
    """``hidden[E, H] = relu(x @ U.T + b_u)`` (relu(NaN) = NaN and relu'(0) = 0, as in
    PyTorch; the backward's mask ``hidden > 0`` is 0 at a NaN, unlike nb.relu's:
    docs/derivations.md#graph-neural-operator)."""
    hidden = np.zeros((x.shape[0], U.shape[0]), dtype=x.dtype)
    _hidden_forward(x, U, b_u, hidden)
    return hidden


@njit(**PARALLEL)
def _hidden_forward(x, U, b_u, hidden):
    n, d = x.shape
    H = U.shape[0]
    chunks = min(n, CHUNKS)
    for c in prange(chunks):
        for e in range(c * n // chunks, (c + 1) * n // chunks):
            for k in range(H):
                s = b_u[k]
                for a in range(d):
                    s += U[k, a] * x[e, a]
                if not s <= 0:  # NaN stays
                    hidden[e, k] = s


def kernel_forward(x, U, b_u, V, b_v):
    """``(kappa[E, F_out*F_in], hidden[E, H])``: kappa = relu(x U^T + b_u) V^T + b_v."""
    hidden = hidden_forward(x, U, b_u)
    kappa = np.empty((x.shape[0], V.shape[0]), dtype=x.dtype)
    _bias_plus_product(hidden, np.ascontiguousarray(V.T), b_v, kappa)
    return kappa, hidden


@njit(**PARALLEL_FUSED)
def _bias_plus_product(A, B, bias, out):
    """``out[e] = bias + sum_k A[e, k] B[k]`` for every row e, by fixed row chunks (each a
    product of register tiles, ``gemm_tn_acc``)."""
    n = A.shape[0]
    chunks = min(n, CHUNKS)
    for c in prange(chunks):
        lo = c * n // chunks
        hi = (c + 1) * n // chunks
        for e in range(lo, hi):
            out[e] = bias
        gemm_tn_acc(A[lo:hi].T, B, out[lo:hi])


def kernel_backward(g, x, hidden, U, V):
    """Gradients ``(dx, dU, db_u, dV, db_v)`` of the kernel MLP for upstream
    ``g[E, F_out*F_in]``: gh = (g V) * [pre > 0], then the per-edge accumulations as
    products, dx = gh U, dU = gh^T x, db_u = sum_e gh, dV = g^T hidden, db_v = sum_e g
    (the sums over edges as GRAD_CHUNKS partials, added in chunk order)."""
    E, H = hidden.shape
    grad_hidden = np.empty_like(hidden)
    _bias_plus_product(g, V, np.zeros(H, dtype=g.dtype), grad_hidden)
    chunks = max(1, min(E, GRAD_CHUNKS))
    dx = np.empty_like(x)
    dUt_c = np.zeros((chunks, x.shape[1], H), dtype=g.dtype)
    dbu_c = np.zeros((chunks, H), dtype=g.dtype)
    dV_c = np.zeros((chunks, *V.shape), dtype=g.dtype)
    dbv_c = np.zeros((chunks, V.shape[0]), dtype=g.dtype)
    _mlp_backward_rows(g, grad_hidden, hidden, x, np.ascontiguousarray(U.T), dx, dUt_c,
                       dbu_c, dV_c, dbv_c)
    return (dx, np.ascontiguousarray(dUt_c.sum(axis=0).T), dbu_c.sum(axis=0),
            dV_c.sum(axis=0), dbv_c.sum(axis=0))


@njit(**PARALLEL_FUSED)
def _mlp_backward_rows(g, gh, hidden, x, Ut, dx, dUt_c, dbu_c, dV_c, dbv_c):
    """Over the edge rows of fixed chunk c, ROW_BLOCK rows at a time: the relu backward
    ``gh *= [hidden > 0]``, ``dx[e, a] = sum_k U[k, a] gh[e, k]`` and chunk c's partials
    ``dUt_c[c] += x^T gh``, ``dbu_c[c] += sum_e gh[e]``, ``dV_c[c] += g^T hidden``,
    ``dbv_c[c] += sum_e g[e]``."""
    n = g.shape[0]
    chunks = dV_c.shape[0]
    for c in prange(chunks):
        for lo in range(c * n // chunks, (c + 1) * n // chunks, ROW_BLOCK):
            hi = min(lo + ROW_BLOCK, (c + 1) * n // chunks)
            for e in range(lo, hi):
                for k in range(gh.shape[1]):
                    if not hidden[e, k] > 0:
                        gh[e, k] = 0
                    dbu_c[c, k] += gh[e, k]
                for a in range(Ut.shape[0]):
                    dx[e, a] = dot(Ut[a], gh[e], Ut.shape[1])
                for r in range(g.shape[1]):
                    dbv_c[c, r] += g[e, r]
            gemm_tn_acc(x[lo:hi], gh[lo:hi], dUt_c[c])
            gemm_tn_acc(g[lo:hi], hidden[lo:hi], dV_c[c])


# -- aggregation with materialised kernels ----------------------------------------------


def aggregate_forward(h, kappa, row_ptr, col, edge_id):
    """``m[i, o] = sum_{p in row i} sum_f kappa[edge_id[p], o, f] h[col[p], f]``."""
    m = np.zeros((row_ptr.shape[0] - 1, kappa.shape[1]), dtype=h.dtype)
    _aggregate_forward(h, kappa, row_ptr, col, edge_id, m)
    return m


@njit(**PARALLEL)
def _aggregate_forward(h, kappa, row_ptr, col, edge_id, m):
    n = row_ptr.shape[0] - 1
    f_out, f_in = kappa.shape[1], kappa.shape[2]
    chunks = min(n, CHUNKS)
    for c in prange(chunks):
        for i in range(c * n // chunks, (c + 1) * n // chunks):
            for p in range(row_ptr[i], row_ptr[i + 1]):
                j = col[p]
                e = edge_id[p]
                for o in range(f_out):
                    s = m[i, o]
                    for f in range(f_in):
                        s += kappa[e, o, f] * h[j, f]
                    m[i, o] = s


def aggregate_grad_h(g, kappa, row, edge_id, t_ptr, t_pos):
    """``dh[j, f] = sum_{p: col[p] = j} sum_o kappa[edge_id[p], o, f] g[row[p], o]``,
    gathered through the transposed CSR (each j owns its row of dh)."""
    dh = np.zeros((t_ptr.shape[0] - 1, kappa.shape[2]), dtype=g.dtype)
    _aggregate_grad_h(g, kappa, row, edge_id, t_ptr, t_pos, dh)
    return dh


@njit(**PARALLEL)
def _aggregate_grad_h(g, kappa, row, edge_id, t_ptr, t_pos, dh):
    n = t_ptr.shape[0] - 1
    f_out, f_in = kappa.shape[1], kappa.shape[2]
    chunks = min(n, CHUNKS)
    for c in prange(chunks):
        for j in range(c * n // chunks, (c + 1) * n // chunks):
            for q in range(t_ptr[j], t_ptr[j + 1]):
                p = t_pos[q]
                i = row[p]
                e = edge_id[p]
                for o in range(f_out):
                    go = g[i, o]
                    for f in range(f_in):
                        dh[j, f] += kappa[e, o, f] * go


def aggregate_grad_kappa(g, h, row, col, e_ptr, e_pos):
    """``dkappa[e, o, f] = sum_{p: edge_id[p] = e} g[row[p], o] h[col[p], f]``, gathered
    by edge id (entries sharing an id add up in CSR order; unused ids get 0)."""
    dk = np.zeros((e_ptr.shape[0] - 1, g.shape[1], h.shape[1]), dtype=g.dtype)
    _aggregate_grad_kappa(g, h, row, col, e_ptr, e_pos, dk)
    return dk


@njit(**PARALLEL)
def _aggregate_grad_kappa(g, h, row, col, e_ptr, e_pos, dk):
    num_e = e_ptr.shape[0] - 1
    f_out, f_in = g.shape[1], h.shape[1]
    chunks = min(num_e, CHUNKS)
    for c in prange(chunks):
        for e in range(c * num_e // chunks, (c + 1) * num_e // chunks):
            for q in range(e_ptr[e], e_ptr[e + 1]):
                p = e_pos[q]
                i = row[p]
                j = col[p]
                for o in range(f_out):
                    go = g[i, o]
                    for f in range(f_in):
                        dk[e, o, f] += go * h[j, f]


# -- fused, re-associated graph neural operator -------------------------------------------

ENTRY_BLOCK = 32  # CSR entries of a row gathered together (h rows and hidden vectors)


def row_chunks(row_ptr, chunks):
    """Node bounds ``[c + 1]`` cutting the rows into ``c = min(chunks, N)`` runs of about
    equal entry counts (a function of the graph only, so the split and every partial sum
    are the same at any thread count)."""
    n = row_ptr.shape[0] - 1
    c = max(1, min(chunks, n))
    bounds = np.searchsorted(row_ptr, np.arange(c + 1) * row_ptr[-1] // c)
    bounds[-1] = n
    return bounds


def augmented_hidden(x, U, b_u):
    """``hid[E, H+1] = [relu(x U^T + b_u), 1]``: the kernel MLP's hidden layer and the
    constant unit that carries b_v (docs/derivations.md#graph-neural-operator)."""
    hid = np.zeros((x.shape[0], U.shape[0] + 1), dtype=x.dtype)
    hid[:, -1] = 1
    _hidden_forward(x, U, b_u, hid[:, :-1])
    return hid


def augmented_v(V, b_v, f_out, f_in):
    """``Va[F_out, (H+1)*F_in]``, ``Va[o, k*F_in + f] = V[o*F_in + f, k]`` for k < H and
    ``b_v[o*F_in + f]`` for k = H: the last layer of the kernel MLP with its bias as the
    weight of the constant hidden unit, columns in the order of ``node_sums``' rows."""
    V3 = np.concatenate([V, b_v[:, None]], axis=1).reshape(f_out, f_in, V.shape[1] + 1)
    return np.ascontiguousarray(V3.transpose(0, 2, 1)).reshape(f_out, V3.shape[2] * f_in)


def split_augmented_v(dVa, f_in):
    """Inverse of ``augmented_v``'s layout: ``dVa[F_out, (H+1)*F_in] -> (dV, db_v)``."""
    f_out, hidden = dVa.shape[0], dVa.shape[1] // f_in  # hidden = H + 1
    dV3 = dVa.reshape(f_out, hidden, f_in).transpose(0, 2, 1).reshape(f_out * f_in, hidden)
    return np.ascontiguousarray(dV3[:, :-1]), np.ascontiguousarray(dV3[:, -1])


@njit(**SERIAL)
def _gather_entries(hf, hid, col, edge_id, p0, ne, Hj, Hid):
    """``Hj[t] = hf[col p]``, ``Hid[t] = hid[edge_id p]`` for the entries p = p0 + t < p0 +
    ne."""
    for t in range(ne):
        Hj[t] = hf[col[p0 + t]]
        Hid[t] = hid[edge_id[p0 + t]]


@njit(**SERIAL)
def _node_block(X, nbatch, f_in, Wp, i, to_rows):
    """Copy between a node's block ``X[k, b*F_in + f]`` and its rows ``Wp[i*B + b,
    k*F_in + f]``: into the rows if ``to_rows``, else out of them."""
    for k in range(X.shape[0]):
        for b in range(nbatch):
            block = X[k, b * f_in:(b + 1) * f_in]
            rows = Wp[i * nbatch + b, k * f_in:(k + 1) * f_in]
            if to_rows:
                rows[:] = block
            else:
                block[:] = rows


@njit(**PARALLEL)
def _node_sums(hf, hid, row_ptr, col, edge_id, bounds, nbatch, Wp):
    """``Wp[i*B + b, k*F_in + f] = sum_{p in row i} hid[e_p, k] h[b, col p, f]`` from the
    folded ``hf[N_s, B*F_in]``: per node ``X = sum_p hid_p h'_p^T`` (``[H+1, B*F_in]``,
    ENTRY_BLOCK entries per product ``gemm_nn_acc``), copied into its B rows."""
    fw = hf.shape[1]
    for c in prange(bounds.shape[0] - 1):
        Hj = np.empty((ENTRY_BLOCK, fw), dtype=Wp.dtype)
        Hid = np.empty((ENTRY_BLOCK, hid.shape[1]), dtype=Wp.dtype)
        X = np.empty((hid.shape[1], fw), dtype=Wp.dtype)
        for i in range(bounds[c], bounds[c + 1]):
            X[:] = 0
            for p0 in range(row_ptr[i], row_ptr[i + 1], ENTRY_BLOCK):
                ne = min(ENTRY_BLOCK, row_ptr[i + 1] - p0)
                _gather_entries(hf, hid, col, edge_id, p0, ne, Hj, Hid)
                gemm_nn_acc(Hid[:ne].T, Hj[:ne], X)
            _node_block(X, nbatch, fw // nbatch, Wp, i, True)


@njit(**SERIAL_FUSED)
def _entry_mlp_grads(x, Ut, edge_id, p0, ne, Hid, GH, DX, dUt, db_u):
    """Kernel-MLP gradients of the entries p0 + t from ``GH[t]`` (the gradient of
    hidden_e for this entry): ``gh = GH[t] * [Hid[t] > 0]``, then
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


@njit(**PARALLEL)
def _entry_mlp_rows(dWp, hf, hid, x, Ut, row_ptr, col, edge_id, bounds, nbatch, dUt_c,
                    dbu_c, DX):
    """Per node i, from its rows of ``dWp = dL/dWp`` as ``dX[k, b*F_in + f]``, per entry
    p = (j -> i, e), ENTRY_BLOCK entries at a time: ``GH_p[k] = dX[k] . h'_j`` for k < H
    (dL/dhidden_e through this entry, ``gemm_nt``), then ``_entry_mlp_grads`` (``DX[p]``
    and chunk c's partials ``dUt_c[c]``, ``dbu_c[c]``)."""
    fw = hf.shape[1]
    H = Ut.shape[1]
    for c in prange(bounds.shape[0] - 1):
        Hj = np.empty((ENTRY_BLOCK, fw), dtype=dWp.dtype)
        Hid = np.empty((ENTRY_BLOCK, H + 1), dtype=dWp.dtype)
        GH = np.empty((ENTRY_BLOCK, H), dtype=dWp.dtype)
        dX = np.empty((H + 1, fw), dtype=dWp.dtype)
        for i in range(bounds[c], bounds[c + 1]):
            _node_block(dX, nbatch, fw // nbatch, dWp, i, False)
            for p0 in range(row_ptr[i], row_ptr[i + 1], ENTRY_BLOCK):
                ne = min(ENTRY_BLOCK, row_ptr[i + 1] - p0)
                _gather_entries(hf, hid, col, edge_id, p0, ne, Hj, Hid)
                gemm_nt(Hj[:ne], dX[:H], GH[:ne])
                _entry_mlp_grads(x, Ut, edge_id, p0, ne, Hid, GH, DX, dUt_c[c], dbu_c[c])


@njit(**PARALLEL_FUSED)
def _grad_h(dWp, hid, row, edge_id, t_ptr, t_pos, nbatch, dh):
    """``dh[j, b*F_in + f] = sum_{p: col p = j} sum_k hid[e_p, k] dWp[i_p*B + b, k*F_in +
    f]`` (dL/dh'_j = sum_p hid_e^T dX_i), gathered through the transposed CSR: each j owns
    its row, entries in increasing position."""
    n = t_ptr.shape[0] - 1
    f_in = dh.shape[1] // nbatch
    chunks = min(n, CHUNKS)
    for c in prange(chunks):
        for j in range(c * n // chunks, (c + 1) * n // chunks):
            for q in range(t_ptr[j], t_ptr[j + 1]):
                p = t_pos[q]
                e = edge_id[p]
                for b in range(nbatch):
                    out = dh[j, b * f_in:(b + 1) * f_in]
                    rows = dWp[row[p] * nbatch + b]
                    for k in range(hid.shape[1]):
                        w = hid[e, k]
                        for f in range(f_in):
                            out[f] += w * rows[k * f_in + f]


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


def _product(kernel, a, b, out, work):
    """``kernel`` (``gemm.nn_acc_blocks`` or ``gemm.nt_blocks``) in parallel from
    PARALLEL_WORK_MIN multiply-adds, else its serial form (the same bits)."""
    for_work(kernel, work, PARALLEL_WORK_MIN)(a, b, out)
    return out


def gno_forward(h, x, U, b_u, V, b_v, row_ptr, col, edge_id, f_out):
    """Fused GNO forward (sum over each row) as one product with V:
    ``m[(i, b), o] = sum_c Wp[(i, b), c] Va[o, c]`` with the per-node sums ``Wp =
    node_sums`` (``[N*B, (H+1)*F_in]``) and ``Va = augmented_v(V, b_v)``; rows without
    entries give 0. ``h[N_s, F_in]`` -> ``m[N, F_out]`` (N = the graph's rows), or a batch
    on the shared graph, ``h[B, N_s, F_in]`` -> ``[B, N, F_out]``.

    Returns ``(m, Wp, hid, Va)``; the backward takes the last three (``hid`` =
    ``augmented_hidden``, one row per edge id)."""
    hf, nbatch = fold_batch(h)
    f_in = h.shape[-1]
    n = row_ptr.shape[0] - 1
    hid = augmented_hidden(x, U, b_u)
    Va = augmented_v(V, b_v, f_out, f_in)
    Wp = np.empty((n * nbatch, Va.shape[1]), dtype=h.dtype)
    _node_sums(hf, hid, row_ptr, col, edge_id, row_chunks(row_ptr, CHUNKS), nbatch, Wp)
    m = _product(gemm.nt_blocks, Wp, Va, np.empty((n * nbatch, f_out), dtype=h.dtype),
                 Wp.size * f_out)
    # m_i = 0 for a row without entries, whatever V holds (0 * inf would be NaN)
    m.reshape(n, nbatch * f_out)[row_ptr[1:] == row_ptr[:-1]] = 0
    return unfold_batch(m, n, nbatch, f_out, h.ndim == 3), Wp, hid, Va


def gno_backward(G, h, x, U, Va, Wp, hid, row_ptr, col, edge_id, by_edge_id, transpose,
                 needs):
    """Fused GNO backward for the upstream ``G[N, F_out]`` (``G[B, N, F_out]`` for a batch
    ``h[B, N_s, F_in]``; already divided by the row length for 'mean'), from the forward's
    ``Va``, ``Wp``, ``hid``. ``by_edge_id() -> (e_ptr, e_pos)`` and ``transpose() ->
    (t_ptr, t_pos)`` give the CSR entries grouped by edge id and by column (called only
    when needed). ``needs`` = which of (h, x, U, b_u, V, b_v) want a gradient. Returns
    those six gradients (None where not needed):

    * ``dVa = G^T Wp`` (one product), split into dV and db_v;
    * ``dWp = G Va`` (one product), from which ``_mlp_grads`` gives dx, dU, db_u and
      ``_grad_h`` gives dh.

    Extra memory: ``dWp`` (the size of ``Wp``), ``[nnz, d]`` per-entry rows and
    GRAD_CHUNKS parameter-sized partials (plus the folded copies of h, G and dh).
    """
    f_in = h.shape[-1]
    f_out = G.shape[-1]
    n = row_ptr.shape[0] - 1
    hf, nbatch = fold_batch(h)
    # row i*B + b: node i, example b. m_i = 0 for a row without entries whatever the
    # inputs, so G_i reaches nothing (not even through G_i Wp_i with Wp_i = 0, which is
    # NaN for an inf or NaN G_i)
    empty = (row_ptr[1:] == row_ptr[:-1])[:, None]
    G = np.where(empty, G.dtype.type(0), fold_batch(G)[0].reshape(n, nbatch * f_out))
    G = G.reshape(n * nbatch, f_out)
    dh = dx = dU = db_u = dV = db_v = None
    if needs[4] or needs[5]:
        dVa = _product(gemm.nn_acc_blocks, G.T, Wp, np.zeros((f_out, Wp.shape[1]), G.dtype),
                       Wp.size * f_out)
        dV, db_v = split_augmented_v(dVa, f_in)
        dV, db_v = (dV if needs[4] else None), (db_v if needs[5] else None)
    if not any(needs[:4]):
        return dh, dx, dU, db_u, dV, db_v
    dWp = _product(gemm.nn_acc_blocks, G, Va, np.zeros_like(Wp), Wp.size * f_out)
    if any(needs[1:4]):
        dx, dU, db_u = _mlp_grads(dWp, hf, hid, x, U, row_ptr, col, edge_id, by_edge_id,
                                  nbatch, needs)
    if needs[0]:
        dh = np.zeros_like(hf)
        _grad_h(dWp, hid, csr_rows(row_ptr), edge_id, *transpose(), nbatch, dh)
        dh = unfold_batch(dh, hf.shape[0], nbatch, f_in, h.ndim == 3)
    return dh, dx, dU, db_u, dV, db_v


def _mlp_grads(dWp, hf, hid, x, U, row_ptr, col, edge_id, by_edge_id, nbatch, needs):
    """``(dx, dU, db_u)`` (None where ``needs[1:4]`` says so) from ``dWp``: per entry
    ``_entry_mlp_rows``, then ``dx_e = sum_{p: id e} DX_p`` gathered by edge id and the
    GRAD_CHUNKS partials of dU, db_u summed in chunk order."""
    d, H = x.shape[1], U.shape[0]
    bounds = row_chunks(row_ptr, GRAD_CHUNKS)
    chunks = bounds.shape[0] - 1
    dUt_c = np.zeros((chunks, d, H), dtype=dWp.dtype)
    dbu_c = np.zeros((chunks, H), dtype=dWp.dtype)
    DX = np.empty((col.shape[0], d), dtype=dWp.dtype)
    _entry_mlp_rows(dWp, hf, hid, x, np.ascontiguousarray(U.T), row_ptr, col, edge_id,
                    bounds, nbatch, dUt_c, dbu_c, DX)
    dx = dU = db_u = None
    if needs[1]:
        dx = np.zeros_like(x)
        _gather_groups(DX, *by_edge_id(), dx)
    if needs[2]:
        dU = np.ascontiguousarray(dUt_c.sum(axis=0).T)
    if needs[3]:
        db_u = dbu_c.sum(axis=0)
    return dx, dU, db_u


# -- reference: the per-edge loop ----------------------------------------------------------


@njit(**SERIAL)
def reference_forward(h, x, U, b_u, V, b_v, row_ptr, col, edge_id, f_out, mean):
    """``m[N, F_out]`` by building kappa for every CSR entry and multiplying it with h_j."""
    n = row_ptr.shape[0] - 1
    f_in = h.shape[1]
    H, d = U.shape
    m = np.zeros((n, f_out), dtype=h.dtype)
    hidden = np.zeros(H, dtype=h.dtype)
    kappa = np.zeros(f_out * f_in, dtype=h.dtype)
    zero = h.dtype.type(0)
    for i in range(n):
        for p in range(row_ptr[i], row_ptr[i + 1]):
            j = col[p]
            e = edge_id[p]
            for k in range(H):
                s = b_u[k]
                for a in range(d):
                    s += U[k, a] * x[e, a]
                hidden[k] = zero if s <= 0 else s
            for r in range(f_out * f_in):
                s = b_v[r]
                for k in range(H):
                    s += V[r, k] * hidden[k]
                kappa[r] = s
            for o in range(f_out):
                for f in range(f_in):
                    m[i, o] += kappa[o * f_in + f] * h[j, f]
        if mean and row_ptr[i + 1] > row_ptr[i]:
            for o in range(f_out):
                m[i, o] /= row_ptr[i + 1] - row_ptr[i]
    return m


@njit(**SERIAL)
def reference_backward(g, h, x, U, b_u, V, b_v, row_ptr, col, edge_id, f_out, mean):
    """Gradients ``(dh, dx, dU, db_u, dV, db_v)`` by per-edge accumulation:
    with g_kappa = g_i h_j^T for the entry: db_v += g_kappa; dV += g_kappa hidden^T;
    gh = (V^T g_kappa) * [pre > 0]; db_u += gh; dU += gh x_e^T; dx_e += U^T gh;
    dh_j += kappa^T g_i."""
    n = row_ptr.shape[0] - 1
    f_in = h.shape[1]
    H, d = U.shape
    F = f_out * f_in
    dh = np.zeros_like(h)
    dx = np.zeros_like(x)
    dU = np.zeros_like(U)
    db_u = np.zeros_like(b_u)
    dV = np.zeros_like(V)
    db_v = np.zeros_like(b_v)
    pre = np.zeros(H, dtype=h.dtype)
    hidden = np.zeros(H, dtype=h.dtype)
    kappa = np.zeros(F, dtype=h.dtype)
    gk = np.zeros(F, dtype=h.dtype)
    gi = np.zeros(f_out, dtype=h.dtype)
    zero = h.dtype.type(0)
    for i in range(n):
        deg = row_ptr[i + 1] - row_ptr[i]
        if deg == 0:
            continue
        for o in range(f_out):
            gi[o] = g[i, o] / deg if mean else g[i, o]
        for p in range(row_ptr[i], row_ptr[i + 1]):
            j = col[p]
            e = edge_id[p]
            for k in range(H):
                s = b_u[k]
                for a in range(d):
                    s += U[k, a] * x[e, a]
                pre[k] = s
                hidden[k] = zero if s <= 0 else s
            for r in range(F):
                s = b_v[r]
                for k in range(H):
                    s += V[r, k] * hidden[k]
                kappa[r] = s
            for o in range(f_out):
                for f in range(f_in):
                    gk[o * f_in + f] = gi[o] * h[j, f]
                    dh[j, f] += kappa[o * f_in + f] * gi[o]
            for r in range(F):
                db_v[r] += gk[r]
                for k in range(H):
                    dV[r, k] += gk[r] * hidden[k]
            for k in range(H):
                if pre[k] > 0:
                    s = zero
                    for r in range(F):
                        s += V[r, k] * gk[r]
                    db_u[k] += s
                    for a in range(d):
                        dU[k, a] += s * x[e, a]
                        dx[e, a] += U[k, a] * s
    return dh, dx, dU, db_u, dV, db_v
