"""Matrix products over BLAS: ``np.dot`` inside njit calls SciPy's GEMM.

BLAS wants same-dtype float operands that are C- or F-contiguous 2-D arrays; a transposed
view of a C-contiguous matrix is F-contiguous, so ``a @ b.T`` needs no copy (Numba passes
the transpose flag to GEMM). BLAS threads itself, so the batch loop is serial: a
``prange`` around GEMM calls would oversubscribe the cores. The BLAS-free products on
Numba's threads are in kernels/gemm.py. Derivations: docs/derivations.md#matrix-product.
"""

import numpy as np
from numba import njit

from ._jit import SERIAL


@njit(**SERIAL)
def mm(a, b, out):
    """``out = a @ b`` for 2-D a[M, K], b[K, N], out[M, N] (a, b C- or F-contiguous)."""
    np.dot(a, b, out)


@njit(**SERIAL)
def bmm(a, b, a_map, b_map, trans_a, trans_b, out):
    """``out[i] = op(a[a_map[i]]) @ op(b[b_map[i]])`` for every batch i, where op
    transposes the matrix when ``trans_a`` / ``trans_b`` is set (at most one of them:
    the forward and the two backward products never transpose both).

    a[Ba, ., .], b[Bb, ., .] and out[B, M, N] are C-contiguous; the maps send each of the
    B output batches to the (broadcast) batch of each operand it reads.
    """
    for i in range(out.shape[0]):
        x = a[a_map[i]]
        y = b[b_map[i]]
        if trans_a:
            np.dot(x.T, y, out[i])
        elif trans_b:
            np.dot(x, y.T, out[i])
        else:
            np.dot(x, y, out[i])
