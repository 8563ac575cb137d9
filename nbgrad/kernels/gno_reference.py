"""The graph neural operator as the per-edge loop, serial, building every kernel matrix:
the reference the tests compare the fused kernels (kernels/gno.py) and the unfused pair
(kernels/gno_mlp.py, kernels/gno_aggregate.py) with. Notation as in kernels/gno.py.
"""

import numpy as np
from numba import njit

from ..runtime.jit import SERIAL


@njit(**SERIAL)
def _edge_kernel(x, e, U, b_u, V, b_v, pre, hidden, kappa):
    """For edge id e: ``pre = U x_e + b_u``, ``hidden = relu(pre)``, ``kappa = V hidden +
    b_v`` (flat ``[F_out*F_in]``)."""
    H, d = U.shape
    zero = pre.dtype.type(0)
    for k in range(H):
        s = b_u[k]
        for a in range(d):
            s += U[k, a] * x[e, a]
        pre[k] = s
        hidden[k] = zero if s <= 0 else s
    for r in range(kappa.shape[0]):
        s = b_v[r]
        for k in range(H):
            s += V[r, k] * hidden[k]
        kappa[r] = s


@njit(**SERIAL)
def reference_forward(h, x, U, b_u, V, b_v, row_ptr, col, edge_id, f_out, mean):
    """``m[N, F_out]`` by building kappa for every CSR entry and multiplying it with h_j."""
    n = row_ptr.shape[0] - 1
    f_in = h.shape[1]
    H = U.shape[0]
    m = np.zeros((n, f_out), dtype=h.dtype)
    pre = np.zeros(H, dtype=h.dtype)
    hidden = np.zeros(H, dtype=h.dtype)
    kappa = np.zeros(f_out * f_in, dtype=h.dtype)
    for i in range(n):
        for p in range(row_ptr[i], row_ptr[i + 1]):
            j = col[p]
            _edge_kernel(x, edge_id[p], U, b_u, V, b_v, pre, hidden, kappa)
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
            _edge_kernel(x, e, U, b_u, V, b_v, pre, hidden, kappa)
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
