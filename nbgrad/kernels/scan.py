"""Scans along the middle axis of a C-contiguous ``x[A, N, B]``: the scanned dim is N, A
the dims before it and B the dims after it, so no transpose is needed (B = 1 scans rows).

Each task owns the outputs ``[a, :, b0:b1]`` of one a and one block of B (the split
depends on the shapes alone) and walks N in order, so every output element is the same
sequence of roundings at any thread count; the inner loop over b runs along contiguous
memory and vectorises (each lane its own recurrence, no reassociation).
"""

import numpy as np
from numba import prange

from ..runtime.jit import PARALLEL, PARALLEL_IEEE_DIV, njit_with_serial

#: Elements of B per task.
BLOCK = 512


@njit_with_serial(**PARALLEL)
def scan(x, out, zero, product, reverse):
    """out[a, i, b] = x[a, 0, b] (+ or *) ... x[a, i, b] (``product`` multiplies), or from
    the end (``reverse``: x[a, i, b] + ... + x[a, N-1, b]), accumulated in the type of
    ``zero`` (float64 or int64) and rounded to out's dtype once per element."""
    A, N, B = x.shape
    blocks = (B + BLOCK - 1) // BLOCK
    start = zero + 1 if product else zero
    for task in prange(A * blocks):
        a = task // blocks
        b0 = (task % blocks) * BLOCK
        b1 = min(b0 + BLOCK, B)
        if B == 1:  # a row: one accumulator
            acc = start
            for s in range(N):
                i = N - 1 - s if reverse else s
                if product:
                    acc *= x[a, i, 0]
                else:
                    acc += x[a, i, 0]
                out[a, i, 0] = acc
            continue
        accs = np.full(b1 - b0, start)
        for s in range(N):
            i = N - 1 - s if reverse else s
            if product:
                for b in range(b0, b1):
                    accs[b - b0] *= x[a, i, b]
                    out[a, i, b] = accs[b - b0]
            else:
                for b in range(b0, b1):
                    accs[b - b0] += x[a, i, b]
                    out[a, i, b] = accs[b - b0]


@njit_with_serial(**PARALLEL_IEEE_DIV)
def cumprod_backward(x, y, g, gx):
    """gx[a, i, b] = sum_{j >= i} g[a, j, b] * prod_{k <= j, k != i} x[a, k, b], the
    gradient of y = cumprod(x) along N, in O(N) per (a, b) and exact with zeros: before the
    first zero z of a line it is sum_{j >= i} g_j y_j / x_i (x_i != 0 there); at z,
    y_{z-1} * sum_{j >= z} g_j prod_{z < k <= j} x_k; after z, 0."""
    A, N, B = x.shape
    blocks = (B + BLOCK - 1) // BLOCK
    for task in prange(A * blocks):
        a = task // blocks
        b0 = (task % blocks) * BLOCK
        b1 = min(b0 + BLOCK, B)
        for b in range(b0, b1):
            z = N
            for i in range(N):
                if x[a, i, b] == 0:
                    z = i
                    break
            for i in range(z + 1, N):
                gx[a, i, b] = 0
            if z < N:  # the zero's own gradient
                before = y[a, z - 1, b] if z > 0 else x.dtype.type(1)
                tail = x.dtype.type(0)
                for j in range(N - 1, z, -1):  # tail_z = g_z + x_{z+1} (g_{z+1} + ...)
                    tail = (tail + g[a, j, b]) * x[a, j, b]
                gx[a, z, b] = before * (tail + g[a, z, b])
            acc = x.dtype.type(0)
            for i in range(z - 1, -1, -1):
                acc += g[a, i, b] * y[a, i, b]
                gx[a, i, b] = acc / x[a, i, b]


def three_d(shape: tuple, dim: int) -> tuple[int, int, int]:
    """(A, N, B): the dims before ``dim`` flattened, ``dim``, the dims after it."""
    return (int(np.prod(shape[:dim], dtype=np.int64)), shape[dim],
            int(np.prod(shape[dim + 1:], dtype=np.int64)))
