"""Kernels of the shape ops: the scatter-add that is the backward of integer indexing.

Reshape, transpose, permute, broadcast_to, concat and stack move no arithmetic: NumPy
views and copies serve their forward and backward (see ``nbgrad/ops/shape.py``). The one
loop nest of the family is the adjoint of a row gather, ``y[r, :] = x[rows[r], :]``::

    dx[i, :] = sum of dy[r, :] over every r with rows[r] == i

Integer indices may repeat (``x[[0, 0, 2]]``), so two rows of dy can feed one row of dx.
(Element-wise indexing is the case of rows of length 1.) Derivations:
docs/derivations.md#shape-ops-and-indexing.
"""

import numpy as np
from numba import njit, prange

from ._jit import PARALLEL

COLUMN_BLOCK = 16  # columns per parallel iteration: a 64-byte cache line of float32


@njit(**PARALLEL)
def scatter_add_rows(values, rows, n_rows):
    """``out[rows[r], :] += values[r, :]`` for r = 0, 1, ... in that order, into zeros.

    values: [R, T] float array, any strides (a 0-stride broadcast is read in place);
    rows: [R] int64, every entry in
    [0, n_rows) (checked by the caller: this loop does no bounds checks). Returns
    out[n_rows, T].

    Race-free: each parallel iteration owns a block of columns of
    ``out``, and within it adds the rows in the order of ``r``. So every element sums its
    contributions in the same order whatever the thread count or block width: the result
    is bitwise equal to ``np.add.at(np.zeros((n_rows, T)), rows, values)``. With T = 1
    (element-wise gathers) there is one block and the loop is serial.
    """
    n_cols = values.shape[1]
    out = np.zeros((n_rows, n_cols), dtype=values.dtype)
    n_blocks = (n_cols + COLUMN_BLOCK - 1) // COLUMN_BLOCK
    for block in prange(n_blocks):
        lo = block * COLUMN_BLOCK
        hi = min(lo + COLUMN_BLOCK, n_cols)
        for r in range(rows.shape[0]):
            dst = rows[r]
            for j in range(lo, hi):
                out[dst, j] += values[r, j]
    return out
