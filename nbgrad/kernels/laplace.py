"""The Laplace basis E[m, j] = exp(-mu_m t_j), t_j = j / (n - 1), and its gradient in mu
(docs/derivations.md#laplace-bases).

One row m (one decay rate) is the unit of work, in forward and backward. The
``_parallel`` drivers give each prange iteration one row, so they are race-free and
bitwise equal to their serial forms (``laplace_forward``, ``laplace_backward``: the same
loop nests, rows in order) at any thread count (the ops pick them for large bases only:
a 32 x 1024 basis is less work than waking the threads costs). ``exp`` is the
vectorisable one from ``fastmath`` (float32 stays float32).
"""

import numpy as np
from numba import njit, prange

from ..runtime.jit import PARALLEL, SERIAL, SERIAL_REASSOC, njit_with_serial
from .fastmath import exp


@njit(**SERIAL)
def laplace_grid(n, dtype_like):
    """t_j = j / (n - 1) for j < n (t = [0] when n = 1), in the dtype of ``dtype_like``:
    each t_j is the correctly rounded quotient of two exact integers."""
    t = np.zeros(n, dtype_like.dtype)
    last = dtype_like.dtype.type(n - 1)
    for j in range(1, n):
        t[j] = dtype_like.dtype.type(j) / last
    return t


@njit(**SERIAL)
def _basis_row(mu_m, t, out):
    """out[j] = exp(-(mu_m t_j))."""
    a = -mu_m
    for j in range(t.shape[0]):
        out[j] = exp(a * t[j])


@njit(**SERIAL_REASSOC)
def _rate_grad(g, E, t):
    """dL/dmu_m = sum_j g_j dE_j/dmu_m = -sum_j g_j t_j E_j (one row; the sum vectorised
    in a fixed order)."""
    s = E.dtype.type(0)
    for j in range(t.shape[0]):
        s += g[j] * t[j] * E[j]
    return -s


@njit_with_serial(**PARALLEL)
def laplace_forward_parallel(mu, t):
    """E[m, j] = exp(-(mu_m t_j)), one prange iteration per row."""
    E = np.empty((mu.shape[0], t.shape[0]), mu.dtype)
    for m in prange(mu.shape[0]):
        _basis_row(mu[m], t, E[m])
    return E


@njit_with_serial(**PARALLEL)
def laplace_backward_parallel(g, E, t):
    """dmu[m] = -sum_j g[m, j] t_j E[m, j], one prange iteration per row."""
    dmu = np.empty(E.shape[0], E.dtype)
    for m in prange(E.shape[0]):
        dmu[m] = _rate_grad(g[m], E[m], t)
    return dmu


#: the same loop nests with the rows in order (``njit_with_serial``'s serial forms)
laplace_forward = laplace_forward_parallel.serial
laplace_backward = laplace_backward_parallel.serial
