"""Reduction kernels: max/min over the trailing axis of a [K, R] array and their
tie-splitting backward, plus a small scaling kernel for mean's backward.

sum and mean are ``broadcast_sum.reduce_term(COPY, ...)``: summing over axes is the
backward of broadcasting, so they share its race-free, thread-count independent loop
nest (a whole contiguous array takes its flat chunked path). max/min take x with the
reduced axes moved last and flattened, ``x2[K, R]``.

max/min forward: each row is cut into fixed chunks of ``CHUNK`` elements (a count that
depends on R only); every (row, chunk) task writes its own partial extremum, and the
partials are combined per row. NaN propagates (as ``torch.amax``): a row holding a NaN
has extremum NaN. Max is exact, so the result never depends on the chunking anyway.
Derivations: docs/derivations.md#reductions.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ._jit import CHUNK, PARALLEL_IEEE_DIV, PARALLEL_MIN, SERIAL_IEEE_DIV


@njit(**SERIAL_IEEE_DIV)
def _extremum(x, is_min):
    """max (or min) of a contiguous 1-D block; NaN if the block holds a NaN."""
    m = x[0]
    if is_min:
        for i in range(1, x.size):
            v = x[i]
            if v < m or v != v:
                m = v
                if v != v:
                    return v
    else:
        for i in range(1, x.size):
            v = x[i]
            if v > m or v != v:
                m = v
                if v != v:
                    return v
    return m


@njit(**SERIAL_IEEE_DIV, inline="always")
def _extremum_task(x2, is_min, part, t):
    nch = part.shape[1]
    k = t // nch
    c = t - k * nch
    s = c * CHUNK
    part[k, c] = _extremum(x2[k, s:min(x2.shape[1], s + CHUNK)], is_min)


@njit(**PARALLEL_IEEE_DIV)
def _extremum_tasks_parallel(x2, is_min, part):
    for t in prange(part.size):
        _extremum_task(x2, is_min, part, t)


def extremum_rows(x2: np.ndarray, is_min: bool) -> np.ndarray:
    """max (or min) of every row of contiguous ``x2[K, R]`` (R >= 1), shape [K]."""
    nrow, ncol = x2.shape
    part = np.empty((nrow, (ncol + CHUNK - 1) // CHUNK), x2.dtype)
    if x2.size >= PARALLEL_MIN:
        _extremum_tasks_parallel(x2, is_min, part)
    else:
        _extremum_tasks(x2, is_min, part)
    if part.shape[1] == 1:
        return part.reshape(nrow)
    out = np.empty(nrow, x2.dtype)
    _combine_rows(part, is_min, out)
    return out


@njit(**SERIAL_IEEE_DIV)
def _extremum_tasks(x2, is_min, part):
    for t in range(part.size):
        _extremum_task(x2, is_min, part, t)


@njit(**SERIAL_IEEE_DIV)
def _combine_rows(part, is_min, out):
    for k in range(out.size):
        out[k] = _extremum(part[k], is_min)


@njit(**SERIAL_IEEE_DIV, inline="always")
def _extremum_backward_rows(x2, m, g, out, k, spread_nan):
    """Row k: out[k, j] = g[k] / n_k where x2[k, j] is the extremum m[k], else 0, n_k being
    the number of tied extrema in row k (the gradient is split evenly among ties).

    A NaN extremum: with ``spread_nan`` the NaN entries are the ties (torch.max() without
    dim); without, the whole row is NaN (torch.amax: g / 0 ties * 0)."""
    ncol = x2.shape[1]
    zero = out.dtype.type(0)
    mk = m[k]
    if mk != mk and not spread_nan:
        for j in range(ncol):
            out[k, j] = mk
        return
    n = 0
    for j in range(ncol):
        v = x2[k, j]
        if v == mk or (v != v and mk != mk):
            n += 1
    share = g[k] / out.dtype.type(n)  # n >= 1: m[k] is an entry of row k
    for j in range(ncol):
        v = x2[k, j]
        out[k, j] = share if (v == mk or (v != v and mk != mk)) else zero


@njit(**PARALLEL_IEEE_DIV)
def _extremum_backward_parallel(x2, m, g, out, spread_nan):
    for k in prange(x2.shape[0]):
        _extremum_backward_rows(x2, m, g, out, k, spread_nan)


@njit(**SERIAL_IEEE_DIV)
def _extremum_backward_serial(x2, m, g, out, spread_nan):
    for k in range(x2.shape[0]):
        _extremum_backward_rows(x2, m, g, out, k, spread_nan)


def extremum_rows_backward(x2: np.ndarray, m: np.ndarray, g: np.ndarray,
                           spread_nan: bool) -> np.ndarray:
    """Gradient of ``extremum_rows`` for upstream ``g[K]``: out[k, j] = g[k] / n_k where
    x2[k, j] == m[k], else 0 (n_k tied extrema in row k; each row owned by one task). A
    row whose extremum is NaN: g[k] / n_k to its n_k NaNs with ``spread_nan``, else NaN
    throughout (see ``_extremum_backward_rows``)."""
    out = np.empty(x2.shape, g.dtype)
    if x2.size >= PARALLEL_MIN:
        _extremum_backward_parallel(x2, m, g, out, spread_nan)
    else:
        _extremum_backward_serial(x2, m, g, out, spread_nan)
    return out


@njit(**SERIAL_IEEE_DIV)
def scaled(x, s, out):
    """out[i] = x[i] * s (contiguous 1-D)."""
    for i in range(x.size):
        out[i] = x[i] * s
