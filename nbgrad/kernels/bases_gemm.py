"""Matrix products of the orthogonal-basis ops (``u @ Q``, ``g @ Q^T``, ``g^T u``) on
Numba's threads, over the register-tiled micro-kernel of kernels/gemm.py.

``matmul(a, b)`` computes ``a[M, K] @ b[K, P]`` in a buffer padded to whole micro-tiles,
``[M', P']`` with M' and P' the multiples of MR and NR at or above M and P, and returns
its ``[:M, :P]`` view (C-contiguous when P is a multiple of NR; returned from Numba, so
the autograd engine takes it as an array of its own, not a view to copy). The padding
rows of a read row 0 and the padding columns of b read past the end of its rows (into
the next row, or zeros after the last); their results are never used.

The work is split into tasks of ROW_TILES micro-tile rows by one NR-column panel, run by a
``prange`` panel by panel (so the tasks of one thread share b's panels in cache). Every
element is one sum over k in ascending order (gemm.py), whichever task computes it, so
the result does not depend on the thread count. Unlike a BLAS call, the product runs on
Numba's own pool, so it neither starts a second pool that competes with Numba's nor
waits for one.
"""

import numpy as np
from numba import njit, prange

from .gemm import MR, NR, panel_tiles, round_up

ROW_TILES = 2  # micro-tiles (of MR rows) per task: small tasks balance the two cores


@njit(cache=True)
def _row_offsets(rows, width, padded_rows):
    """Start of row i of a [rows, width] row-major matrix, as gemm.py wants them; the
    padding rows (i >= rows) start at row 0."""
    offsets = np.zeros(padded_rows, np.uint64)
    for i in range(rows):
        offsets[i] = i * width
    return offsets


@njit(cache=True)
def _flat_with_tail(b, tail):
    """b's elements in row-major order followed by ``tail`` zeros (a view when tail = 0),
    so that the last row's padding columns stay inside the buffer."""
    if tail == 0:
        return b.ravel()
    flat = np.zeros(b.size + tail, b.dtype)
    flat[: b.size] = b.ravel()
    return flat


@njit(cache=True)
def padded_operands(a, b):
    """gemm.py's operands for a[M, K] @ b[K, P]: the padded [M', P'] output buffer, a and
    b as flat buffers (b with its tail) and their row offsets."""
    M, K = a.shape
    P = b.shape[1]
    Mp = round_up(M, MR)
    Pp = round_up(P, NR)
    out = np.empty((Mp, Pp), a.dtype)
    b_flat = _flat_with_tail(b, Pp - P)
    return out, a.ravel(), _row_offsets(M, K, Mp), b_flat, _row_offsets(K, P, K)


@njit(cache=True, parallel=True)
def matmul(a, b):
    """out[i, j] = sum_{k < K} a[i, k] b[k, j] (k ascending) for C-contiguous a[M, K] and
    b[K, P]: a new [M, P] array (a view of the padded buffer, see the module doc)."""
    M, K = a.shape
    P = b.shape[1]
    out, a_flat, a_row, b_flat, b_row = padded_operands(a, b)
    Mp, Pp = out.shape
    block = ROW_TILES * MR
    panels = Pp // NR
    blocks = (Mp + block - 1) // block
    for t in prange(blocks * panels):
        r0 = t % blocks * block
        r1 = min(r0 + block, Mp)
        j0 = np.uint64(t // blocks * NR)
        panel_tiles(a_flat, a_row[r0:r1], b_flat, b_row, np.uint64(K), out[r0:r1], j0)
    return out[:M, :P]


# Blocks of ``transpose``: TI rows of x (read down a column, TI cache lines at a time:
# few enough that rows a power of two apart do not evict each other) by TJ columns.
TI = 8
TJ = 16
# Up to this many rows, ``transpose`` copies each row of x into a column of the result
# instead (contiguous reads; the strided writes land on result rows short enough to stay
# in cache): [64, 1024] in 26 us instead of 41.
SHORT = 64


@njit(cache=True)
def transpose(x):
    """x.T as a new C-contiguous array: row by row into the result's columns when x has at
    most SHORT rows, else block by block (NumPy's copy of the transposed view is ~4x
    slower on a [64, 1024] x, whose rows map to the same cache sets). Serial: a prange
    over blocks of result rows ran slower at 1 thread and no faster at 2."""
    m, n = x.shape
    out = np.empty((n, m), x.dtype)
    if m <= SHORT:
        columns = out.T
        for i in range(m):
            columns[i] = x[i]
        return out
    for i0 in range(0, m, TI):
        i1 = min(i0 + TI, m)
        for j0 in range(0, n, TJ):
            for j in range(j0, min(j0 + TJ, n)):
                for i in range(i0, i1):
                    out[j, i] = x[i, j]
    return out
