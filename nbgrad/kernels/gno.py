"""Graph neural operator kernels (seed 000).

Notation: a CSR graph (``row_ptr``, ``col``, ``edge_id``); entry ``p`` of row ``i`` is an
edge ``j = col[p] -> i`` with features ``x[e]``, ``e = edge_id[p]``. Per edge id

    pre_e = U x_e + b_u,   hidden_e = relu(pre_e),   kappa_e = V hidden_e + b_v

with ``kappa_e`` read as an ``[F_out, F_in]`` matrix (row-major: ``V[o*F_in + f, k]``),
and the aggregation is ``m_i = sum_{p in row i} kappa_{e(p)} @ h_{col[p]}`` (divided by
the row length for ``mean``; empty rows give 0).

Three implementations:

* ``reference_forward`` / ``reference_backward``: the per-edge loop of seed 000, serial,
  building every kappa; the tests compare the fast paths with it.
* ``kernel_forward/backward`` + ``aggregate_forward/backward``: the unfused pair
  (kappa materialised as ``[E, F_out, F_in]``).
* ``gno_forward`` / ``gno_backward``: fused and re-associated. With ``V3[o, f, k] =
  V[o*F_in + f, k]``,

      m_i[o] = sum_{f,k} V3[o, f, k] W_i[f, k] + sum_f b_v[o*F_in + f] Hs_i[f],
      W_i[f, k] = sum_{p in row i} h_j[f] hidden_e[k],   Hs_i[f] = sum_{p in row i} h_j[f]

  so an edge costs F_in*H multiply-adds (an outer product into its row's W_i) instead of
  F_out*F_in*H, V meets the per-node sums once in an [N, F_in*H] x [F_in*H, F_out] BLAS
  product, and no kappa is built. This is the issue's "contract V with each node once"
  with V applied on the aggregated side: every edge then reads h_j (F_in numbers) and
  hidden_e, instead of a V-contracted [F_out, H] block per source node, which keeps the
  random memory traffic per edge small. The backward groups the upstream gradient the
  same way (see ``gno_backward``). Extra memory O(E*H + E*F_in + N*F_in*H); the
  forward's W (N*F_in*H) is kept for the backward only when V needs a gradient.

Every parallel loop owns its output rows (gather form through the cached transposed CSR
or edge-id grouping of the Graph), so results are bitwise identical at any thread count.
Parallel loops run over a fixed number of chunks of rows. Outputs are allocated by
NumPy outside the compiled loops, so ``tracemalloc`` sees the memory the ops use.
"""

import numpy as np
from numba import njit, prange

CHUNKS = 256  # parallel loops split their rows into this many fixed chunks


# -- kernel MLP ------------------------------------------------------------------------


def hidden_forward(x, U, b_u):
    """``hidden[E, H] = relu(x @ U.T + b_u)`` (relu'(0) = 0, as in PyTorch)."""
    hidden = np.zeros((x.shape[0], U.shape[0]), dtype=x.dtype)
    _hidden_forward(x, U, b_u, hidden)
    return hidden


@njit(cache=True, parallel=True)
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
                if s > 0:
                    hidden[e, k] = s


@njit(cache=True, parallel=True)
def relu_mask_(grad_hidden, hidden):
    """``grad_hidden *= [hidden > 0]`` in place (the relu backward; hidden > 0 iff pre > 0)."""
    n, H = hidden.shape
    chunks = min(n, CHUNKS)
    for c in prange(chunks):
        for e in range(c * n // chunks, (c + 1) * n // chunks):
            for k in range(H):
                if not hidden[e, k] > 0:
                    grad_hidden[e, k] = 0


def mlp_input_grads(grad_hidden, x, U):
    """``(dx, dU, db_u)`` from the masked hidden gradient ``gh[E, H]``:
    dx = gh @ U, dU = gh^T x, db_u = sum_e gh (seed 000's accumulation, as products)."""
    return grad_hidden @ U, grad_hidden.T @ x, grad_hidden.sum(axis=0)


def kernel_forward(x, U, b_u, V, b_v):
    """``(kappa[E, F_out*F_in], hidden[E, H])``: kappa = relu(x U^T + b_u) V^T + b_v."""
    hidden = hidden_forward(x, U, b_u)
    kappa = hidden @ V.T
    kappa += b_v
    return kappa, hidden


def kernel_backward(g, x, hidden, U, V):
    """Gradients ``(dx, dU, db_u, dV, db_v)`` of the kernel MLP for upstream
    ``g[E, F_out*F_in]``: db_v = sum_e g, dV = g^T hidden, gh = (g V) * [pre > 0]."""
    grad_hidden = g @ V
    relu_mask_(grad_hidden, hidden)
    dx, dU, db_u = mlp_input_grads(grad_hidden, x, U)
    return dx, dU, db_u, g.T @ hidden, g.sum(axis=0)


# -- aggregation with materialised kernels ----------------------------------------------


def aggregate_forward(h, kappa, row_ptr, col, edge_id):
    """``m[i, o] = sum_{p in row i} sum_f kappa[edge_id[p], o, f] h[col[p], f]``."""
    m = np.zeros((row_ptr.shape[0] - 1, kappa.shape[1]), dtype=h.dtype)
    _aggregate_forward(h, kappa, row_ptr, col, edge_id, m)
    return m


@njit(cache=True, parallel=True)
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


@njit(cache=True, parallel=True)
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


@njit(cache=True, parallel=True)
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


@njit(cache=True, parallel=True)
def _fused_edges_forward(h, hidden, row_ptr, col, edge_id, W, Hs):
    """Per destination node i, over its in-edges p (CSR row i):
    ``W[i, f, k] = sum_p h[col p, f] hidden[edge_id p, k]``, ``Hs[i, f] = sum_p h[col p, f]``."""
    n = row_ptr.shape[0] - 1
    f_in, H = W.shape[1], W.shape[2]
    chunks = min(n, CHUNKS)
    for c in prange(chunks):
        for i in range(c * n // chunks, (c + 1) * n // chunks):
            for p in range(row_ptr[i], row_ptr[i + 1]):
                j = col[p]
                e = edge_id[p]
                for f in range(f_in):
                    hf = h[j, f]
                    for k in range(H):
                        W[i, f, k] += hf * hidden[e, k]
                for f in range(f_in):
                    Hs[i, f] += h[j, f]


@njit(cache=True, parallel=True)
def _fused_edges_grad_hidden(h, R, hidden, row, col, e_ptr, e_pos, gh):
    """``gh[e, k] = [hidden[e, k] > 0] sum_{p: edge_id[p] = e} sum_f h[col p, f]
    R[row p, f, k]``, gathered by edge id."""
    num_e, H = hidden.shape
    f_in = R.shape[1]
    chunks = min(num_e, CHUNKS)
    for c in prange(chunks):
        for e in range(c * num_e // chunks, (c + 1) * num_e // chunks):
            for q in range(e_ptr[e], e_ptr[e + 1]):
                p = e_pos[q]
                i = row[p]
                j = col[p]
                for f in range(f_in):
                    hf = h[j, f]
                    for k in range(H):
                        gh[e, k] += hf * R[i, f, k]
            for k in range(H):
                if not hidden[e, k] > 0:
                    gh[e, k] = 0


@njit(cache=True, parallel=True)
def _fused_edges_messages_grad(G, Vt, Bv, hidden, row_ptr, edge_id, C):
    """Per CSR entry p = (j -> i), the gradient of the message kappa_e h_j w.r.t. h_j:
    ``C[p, f] = sum_o G[i, o] (b_v[o, f] + sum_k V3[o, f, k] hidden[e, k])``.

    Rows run in parallel; each row first contracts its G_i with V into a small
    ``Rt_i[k, f]`` (``Vt[o, k*F_in + f] = V3[o, f, k]``), which then serves all the row's
    entries (relu zeros in ``hidden`` are skipped)."""
    n = row_ptr.shape[0] - 1
    f_out, f_in = Bv.shape
    H = hidden.shape[1]
    chunks = min(n, CHUNKS)
    for c in prange(chunks):
        Rt = np.empty(H * f_in, dtype=C.dtype)
        gb = np.empty(f_in, dtype=C.dtype)
        for i in range(c * n // chunks, (c + 1) * n // chunks):
            if row_ptr[i] == row_ptr[i + 1]:
                continue
            Rt[:] = 0
            gb[:] = 0
            for o in range(f_out):
                go = G[i, o]
                for r in range(H * f_in):
                    Rt[r] += go * Vt[o, r]
                for f in range(f_in):
                    gb[f] += go * Bv[o, f]
            for p in range(row_ptr[i], row_ptr[i + 1]):
                e = edge_id[p]
                for f in range(f_in):
                    C[p, f] = gb[f]
                for k in range(H):
                    hk = hidden[e, k]
                    if hk != 0:
                        for f in range(f_in):
                            C[p, f] += hk * Rt[k * f_in + f]


@njit(cache=True, parallel=True)
def _gather_columns(C, t_ptr, t_pos, dh):
    """``dh[j] = sum_{p: col[p] = j} C[p]`` through the transposed CSR."""
    n = t_ptr.shape[0] - 1
    f_in = C.shape[1]
    chunks = min(n, CHUNKS)
    for c in prange(chunks):
        for j in range(c * n // chunks, (c + 1) * n // chunks):
            for q in range(t_ptr[j], t_ptr[j + 1]):
                p = t_pos[q]
                for f in range(f_in):
                    dh[j, f] += C[p, f]


def gno_forward(h, x, U, b_u, V, b_v, row_ptr, col, edge_id, f_out):
    """Fused GNO forward (sum over each row). Returns ``(m[N, F_out], hidden[E, H], W, Hs)``.

    ``m = W V_flat^T + Hs B_v^T`` with the per-node sums ``W[N, F_in, H]``, ``Hs[N, F_in]``
    of ``_fused_edges_forward``, ``V_flat = V.reshape(F_out, F_in*H)`` and
    ``B_v = b_v.reshape(F_out, F_in)``; the backward uses W for dV and Hs for db_v.
    """
    n, f_in = h.shape
    H = V.shape[1]
    hidden = hidden_forward(x, U, b_u)
    W = np.zeros((n, f_in, H), dtype=h.dtype)
    Hs = np.zeros((n, f_in), dtype=h.dtype)
    _fused_edges_forward(h, hidden, row_ptr, col, edge_id, W, Hs)
    m = W.reshape(n, f_in * H) @ V.reshape(f_out, f_in * H).T
    m += Hs @ b_v.reshape(f_out, f_in).T
    return m, hidden, W, Hs


def gno_backward(G, h, x, hidden, W, Hs, U, V, b_v, row_ptr, row, col, edge_id, by_edge_id,
                 transpose, needs):
    """Fused GNO backward for the upstream ``G[N, F_out]`` (already divided by the row
    length for 'mean'). ``W``, ``Hs`` are the forward's per-node sums (None when V, b_v
    need no gradient). ``row[nnz]`` is the row of every CSR entry; ``by_edge_id() ->
    (e_ptr, e_pos)`` and ``transpose() -> (t_ptr, t_pos)`` give the CSR entries grouped by
    edge id and by column (called only when needed). ``needs`` = which of
    (h, x, U, b_u, V, b_v) want a gradient. Returns those six gradients (None where not
    needed). With ``R_i[f, k] = sum_o G_i[o] V3[o, f, k]`` (``R = G V_flat``, one BLAS
    product):

    * ``dV3[o, f, k] = sum_i G_i[o] W_i[f, k]`` and ``db_v[o, f] = sum_i G_i[o] Hs_i[f]``
      (BLAS products over nodes);
    * ``gh_e = relu' * sum_{p: id e} sum_f h_j[f] R_i[f, k]`` (gathered by edge id), then
      dx, dU, db_u from gh as for the kernel MLP;
    * ``dh_j = sum_{p: col j} C_p`` (gathered through the transposed CSR) with the
      per-entry ``C_p[f] = sum_k hidden_e[k] R_i[f, k] + sum_o G_i[o] b_v[o, f]``,
      computed row by row with R_i rebuilt in a small per-row buffer.
    """
    n, f_in = h.shape
    f_out = G.shape[1]
    H = V.shape[1]
    dh = dx = dU = db_u = dV = db_v = None
    if needs[4]:
        dV = (G.T @ W.reshape(n, f_in * H)).reshape(f_out * f_in, H)
    if needs[5]:
        db_v = (G.T @ Hs).reshape(f_out * f_in)
    if needs[1] or needs[2] or needs[3]:
        R = (G @ V.reshape(f_out, f_in * H)).reshape(n, f_in, H)
        gh = np.zeros_like(hidden)
        _fused_edges_grad_hidden(h, R, hidden, row, col, *by_edge_id(), gh)
        del R
        dx, dU, db_u = mlp_input_grads(gh, x, U)
    if needs[0]:
        Vt = np.ascontiguousarray(
            V.reshape(f_out, f_in, H).transpose(0, 2, 1)).reshape(f_out, H * f_in)
        C = np.empty((col.shape[0], f_in), dtype=G.dtype)
        _fused_edges_messages_grad(G, Vt, b_v.reshape(f_out, f_in), hidden, row_ptr, edge_id,
                                   C)
        dh = np.zeros_like(h)
        _gather_columns(C, *transpose(), dh)
    return dh, dx, dU, db_u, dV, db_v


# -- reference: the per-edge loop of seed 000 ---------------------------------------------


@njit(cache=True)
def reference_forward(h, x, U, b_u, V, b_v, row_ptr, col, edge_id, f_out, mean):
    """``m[N, F_out]`` by building kappa for every CSR entry and multiplying it with h_j."""
    n, f_in = h.shape
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
                hidden[k] = s if s > 0 else zero
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


@njit(cache=True)
def reference_backward(g, h, x, U, b_u, V, b_v, row_ptr, col, edge_id, f_out, mean):
    """Gradients ``(dh, dx, dU, db_u, dV, db_v)`` by seed 000's per-edge accumulation:
    with g_kappa = g_i h_j^T for the entry: db_v += g_kappa; dV += g_kappa hidden^T;
    gh = (V^T g_kappa) * [pre > 0]; db_u += gh; dU += gh x_e^T; dx_e += U^T gh;
    dh_j += kappa^T g_i."""
    n, f_in = h.shape
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
                hidden[k] = s if s > 0 else zero
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
