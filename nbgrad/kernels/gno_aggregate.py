"""Aggregation over a CSR graph with materialised per-edge matrices (``gno_aggregate``'s
forward and its two gradients; notation as in kernels/gno.py):

    m[i] = sum_{p in row i} kappa[edge_id[p]] @ h[col[p]]

m is bilinear in (h, kappa); both gradients gather products ``g[row p, o] * (the other
factor)`` over groups of CSR entries: dh through the graph's transposed CSR (group j:
the entries with ``col[p] = j``), dkappa by edge id (group e: ``edge_id[p] = e``). Each
group owns its output rows, so the loops are race-free and bitwise identical at any
thread count. (One loop nest for both, through stride-0 views of dh and h, ran the
aggregation's backward about 30% slower: each keeps its own.)
"""

import numpy as np
from numba import njit, prange

from ..runtime.jit import PARALLEL
from .gno_mlp import CHUNKS


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
