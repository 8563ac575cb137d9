"""Kernels of the shape ops: the scatter-add that is the backward of integer indexing.

Reshape, transpose, permute, broadcast_to, concat and stack move no arithmetic: NumPy
views and copies serve their forward and backward (see ``nbgrad/ops/shape.py``). The one
loop nest of the family is the adjoint of a row gather, ``y[r, :] = x[rows[r], :]``::

    dx[i, :] = sum of dy[r, :] over every r with rows[r] == i

Integer indices may repeat (``x[[0, 0, 2]]``), so two rows of dy can feed one row of dx.
(Element-wise indexing is the case of rows of length 1.) It is the one-batch case of
``kernels/indexing.py: scatter_add_along``. Derivations:
docs/derivations.md#shape-ops-and-indexing.
"""

import numpy as np

from ..runtime.jit import for_work
from .indexing import scatter_add_along


def scatter_add_rows(values, rows, n_rows):
    """``out[rows[r], :] += values[r, :]`` for r = 0, 1, ... in that order, into zeros.

    values: [R, T] float array, any strides (a 0-stride broadcast is read in place);
    rows: [R] int64, every entry in [0, n_rows) (checked by the caller: the loop does no
    bounds checks). Returns out[n_rows, T].

    Race-free (``scatter_add_along``): each parallel task owns a block of columns of
    ``out`` and adds the rows in the order of ``r``, so the result is bitwise equal to
    ``np.add.at(np.zeros((n_rows, T)), rows, values)`` at any thread count.
    """
    out = np.zeros((1, n_rows, values.shape[1]), dtype=values.dtype)
    index = np.broadcast_to(rows.reshape(1, -1, 1), (1,) + values.shape)
    for_work(scatter_add_along, values.size)(out, index, values[None])
    return out[0]
