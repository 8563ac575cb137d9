"""The Laplace basis E[m, j] = exp(-mu_m t_j), t_j = j / (n - 1), and its gradient in mu.

Each prange iteration owns one row m (one decay rate), in forward and backward, so the
kernels are race-free and bitwise identical at any thread count. ``exp`` is the
vectorisable one from ``fastmath`` (float32 stays float32).
"""

import numpy as np
from numba import njit, prange

from .fastmath import exp


@njit(cache=True)
def laplace_grid(n, dtype_like):
    """t_j = j / (n - 1) for j < n (t = [0] when n = 1), in the dtype of ``dtype_like``:
    each t_j is the correctly rounded quotient of two exact integers."""
    t = np.zeros(n, dtype_like.dtype)
    last = dtype_like.dtype.type(n - 1)
    for j in range(1, n):
        t[j] = dtype_like.dtype.type(j) / last
    return t


@njit(cache=True, parallel=True)
def laplace_forward(mu, t):
    """E[m, j] = exp(-(mu_m t_j))."""
    M, n = mu.shape[0], t.shape[0]
    E = np.empty((M, n), mu.dtype)
    for m in prange(M):
        a = -mu[m]
        for j in range(n):
            E[m, j] = exp(a * t[j])
    return E


@njit(cache=True, parallel=True, fastmath={"reassoc"})
def laplace_backward(g, E, t):
    """dL/dmu_m = sum_j g[m, j] dE[m, j]/dmu_m = -sum_j g[m, j] t_j E[m, j] (each row's
    sum vectorised in a fixed order)."""
    M, n = E.shape
    dmu = np.empty(M, E.dtype)
    for m in prange(M):
        s = E.dtype.type(0)
        for j in range(n):
            s += g[m, j] * t[j] * E[m, j]
        dmu[m] = -s
    return dmu
