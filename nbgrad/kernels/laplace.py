"""The Laplace basis E[m, j] = exp(-mu_m t_j), t_j = j / (n - 1), and its gradient in mu
(docs/derivations.md#laplace-bases).

One row m (one decay rate) is the unit of work, in forward and backward. The serial
drivers run the rows in order; the ``_parallel`` drivers give each prange iteration one
row, so they are race-free and bitwise equal to the serial ones at any thread count (the
ops pick them for large bases only: a 32 x 1024 basis is less work than waking the
threads costs). ``exp`` is the vectorisable one from ``fastmath`` (float32
stays float32).
"""

import numpy as np
from numba import njit, prange

from ..runtime.jit import PARALLEL, SERIAL, SERIAL_REASSOC
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


@njit(**SERIAL)
def laplace_forward(mu, t):
    """E[m, j] = exp(-(mu_m t_j))."""
    E = np.empty((mu.shape[0], t.shape[0]), mu.dtype)
    for m in range(mu.shape[0]):
        _basis_row(mu[m], t, E[m])
    return E


@njit(**PARALLEL)
def laplace_forward_parallel(mu, t):
    """``laplace_forward`` with one prange iteration per row."""
    E = np.empty((mu.shape[0], t.shape[0]), mu.dtype)
    for m in prange(mu.shape[0]):
        _basis_row(mu[m], t, E[m])
    return E


@njit(**SERIAL)
def laplace_backward(g, E, t):
    """dmu[m] = -sum_j g[m, j] t_j E[m, j]."""
    dmu = np.empty(E.shape[0], E.dtype)
    for m in range(E.shape[0]):
        dmu[m] = _rate_grad(g[m], E[m], t)
    return dmu


@njit(**PARALLEL)
def laplace_backward_parallel(g, E, t):
    """``laplace_backward`` with one prange iteration per row."""
    dmu = np.empty(E.shape[0], E.dtype)
    for m in prange(E.shape[0]):
        dmu[m] = _rate_grad(g[m], E[m], t)
    return dmu
