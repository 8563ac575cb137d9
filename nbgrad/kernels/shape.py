"""Kernels of the shape ops: the scatter-add that is the backward of integer indexing.

Reshape, transpose, permute, broadcast_to, concat and stack move no arithmetic: NumPy
views and copies serve their forward and backward (see ``nbgrad/ops/shape.py``). The one
loop nest of the family is the adjoint of a gather, ``y[p] = x[positions[p]]``::

    dx[t] = sum of dy[p] over every p with positions[p] == t

Integer indices may repeat (``x[[0, 0, 2]]``), so two outputs can feed one input.
"""

import numpy as np
from numba import njit


@njit(cache=True)
def scatter_add(values, positions, size):
    """``out[positions[p]] += values[p]`` for p = 0, 1, ... in that order, into zeros(size).

    values: 1-D float array; positions: 1-D int64 array of the same length, every entry
    in [0, size) (checked by the caller: this loop does no bounds checks).

    Serial on purpose (kernel rule 2): each output element sums its contributions in the
    order of ``p``, so the result is independent of the thread count and bitwise equal to
    ``np.add.at(np.zeros(size), positions, values)``. A parallel gather form would need a
    counting sort of ``positions`` first, which costs as much as this loop itself.
    """
    out = np.zeros(size, dtype=values.dtype)
    for p in range(positions.shape[0]):
        out[positions[p]] += values[p]
    return out
