"""The kernel MLP of the graph neural operator on every edge, unfused (``gno_kernel``'s
forward and backward; derivations: docs/derivations.md#graph-neural-operator).

Per edge id ``e`` with features ``x[e]``:

    pre_e = U x_e + b_u,   hidden_e = relu(pre_e),   kappa_e = V hidden_e + b_v

with ``kappa_e`` read as an ``[F_out, F_in]`` matrix (row-major: ``V[o*F_in + f, k]``).
The products are register-tiled loop nests (``gemm.gemm_tn_acc``) over fixed row chunks,
not BLAS calls (whose own thread pool would fight Numba's). The parameter gradients are
one partial per fixed chunk of rows, added in chunk order (``chunk_sum``), so results
are bitwise identical at any thread count; the dense kernels compile with
``PARALLEL_FUSED`` (runtime/jit.py: FMA and reassociated sums in a compile-time order).
The chunking (``CHUNKS``, ``GRAD_CHUNKS``, ``chunk_sum``) is shared by every GNO kernel.
"""

import numpy as np
from numba import njit, prange

from ..runtime.jit import PARALLEL, PARALLEL_FUSED
from .basics import copy_into, dot
from .gemm import gemm_tn_acc

CHUNKS = 256  # parallel loops split their rows into this many fixed chunks
GRAD_CHUNKS = 16  # parameter gradients: one partial per chunk of rows, summed in order
ROW_BLOCK = 64  # rows of a chunk whose products share the partial's tiles in cache


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
            copy_into(out[e], bias)
        gemm_tn_acc(A[lo:hi].T, B, out[lo:hi])


def chunk_sum(parts):
    """parts[0] + parts[1] + ...: the row chunks' partial gradients added in chunk order,
    where inf + -inf gives NaN without a warning, as in PyTorch."""
    with np.errstate(invalid="ignore", over="ignore"):
        return parts.sum(axis=0)


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
    return (dx, np.ascontiguousarray(chunk_sum(dUt_c).T), chunk_sum(dbu_c), chunk_sum(dV_c),
            chunk_sum(dbv_c))


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
