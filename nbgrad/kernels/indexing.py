"""Kernels that pick elements: one of two operands per element (where, maximum,
minimum), or positions along one dim (gather, scatter_add, index_select, embedding,
pad).

**Choosing between operands.** The operands broadcast the NumPy way and are read in
place through their strides. A call is planned as in ``kernels/strided_apply.py``: each
operand becomes a flat buffer with one stride per dim, the dims are coalesced, and the
output is walked as rows of its last coalesced dim. Per element::

    where(c, a, b)    y = a if c else b
    maximum(a, b)     y = b if b > a or b is NaN, else a     (NaN wins; a tie keeps a)
    minimum(a, b)     y = b if b < a or b is NaN, else a

The backward gives each operand a share of g. An operand's share is 1, 1/2 or 0:

    where             (1, 0) where c, else (0, 1)
    maximum           a > b: (1, 0);  a < b: (0, 1);  a == b: (1/2, 1/2);  a or b NaN: (1, 1)
    minimum           the same with < and > exchanged

A share of 0 is an exact 0, not 0 * g, which would be NaN for an infinite g. A share of
1/2 is g * 0.5, which is g / 2 exactly. All of this is PyTorch's convention (see
docs/derivations.md#selection-and-indexing-along-a-dim). Each output row has one owner,
so the results do not depend on the thread count.

**Indexing along a dim.** Arrays are viewed as [A, N, B]: the dims before ``dim``, the
dim, the dims after. An index [A, K, B] holds positions in [0, N), or -1 for "none"::

    gather_along        y[a, k, b] = x[a, index[a, k, b], b]          (fill where -1)
    scatter_add_along   out[a, index[a, k, b], b] += src[a, k, b]      (skipped where -1)

Each is the other's adjoint. The index may be a 0-stride broadcast view; index_select,
embedding and pad's position maps use one position per k. Several k may name the same
position, so the scatter splits the work by ownership. Each parallel task owns one a and
a block of b columns, and adds k = 0, 1, ... in order. Every element thus sums its
contributions in index order at any thread count, bitwise equal to ``np.add.at``.
Indices are checked by the ops before a kernel runs; the loops do no bounds checks.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from ..runtime.jit import PARALLEL, SERIAL, for_work, njit_with_serial
from .strided_apply import coalesce, flat_operand

WHERE, MAXIMUM, MINIMUM = range(3)

COLUMN_BLOCK = 16  # b columns per scatter task: a 64-byte cache line of float32


# -- choosing between operands ----------------------------------------------------------------

@njit(**SERIAL, inline="always")
def _pick(op, c, a, b):
    """The selected element: ``a if c else b`` (WHERE), else the larger (MAXIMUM) or the
    smaller (MINIMUM) of a and b, NaN if either is NaN, a on a tie."""
    if op == WHERE:
        return a if c else b
    if op == MAXIMUM:
        return b if b > a or b != b else a
    return b if b < a or b != b else a


@njit(**SERIAL, inline="always")
def _shares(op, c, a, b, one):
    """(share of a, share of b) of the upstream gradient: 1, 1/2 or 0 (module docstring),
    in the dtype of ``one``."""
    zero = one - one
    if op == WHERE:
        return (one, zero) if c else (zero, one)
    a_wins = a > b if op == MAXIMUM else a < b
    b_wins = a < b if op == MAXIMUM else a > b
    if a_wins:
        return one, zero
    if b_wins:
        return zero, one
    if a == b:
        half = one / (one + one)
        return half, half
    return one, one  # a or b is NaN: both get g, as in PyTorch


@njit(**SERIAL)  # not inlined: inside a prange body its `row` would be the loop index
def _row_offsets(row, outer, strides):
    """Offsets of the first element of output row ``row`` (row-major over the dims
    ``outer``) in each of the four operands, whose strides are ``strides[k, d]``."""
    o0 = o1 = o2 = o3 = 0
    rest = np.int64(row)  # a prange index may arrive unsigned: uint64 // int64 is a float
    for d in range(outer.size - 1, -1, -1):
        q = rest // outer[d]
        i = rest - q * outer[d]
        rest = q
        o0 += i * strides[0, d]
        o1 += i * strides[1, d]
        o2 += i * strides[2, d]
        o3 += i * strides[3, d]
    return o0, o1, o2, o3


@njit_with_serial(**PARALLEL)
def select_rows(op, c, a, b, out, outer, strides, inner):
    """out[r, j] = _pick(op, c, a, b) at row r, lane j. ``c``, ``a``, ``b`` are flat
    buffers read at their row offset + j * inner[k] (operand order c, a, b, -)."""
    rows, n = out.shape
    for r in prange(rows):
        oc, oa, ob, _ = _row_offsets(r, outer, strides)
        for j in range(n):
            out[r, j] = _pick(op, c[oc + j * inner[0]], a[oa + j * inner[1]],
                              b[ob + j * inner[2]])


@njit_with_serial(**PARALLEL)
def select_grads(op, c, a, b, g, grad_a, grad_b, want_a, want_b, outer, strides, inner):
    """grad_a[r, j] = share_a * g and grad_b[r, j] = share_b * g (``_shares``), an exact
    0 where the share is 0; only the wanted ones are written (an unwanted one may be a
    [1, 1] stand-in). Operand order c, a, b, g."""
    rows, n = grad_a.shape if want_a else grad_b.shape
    one = grad_a.dtype.type(1)
    zero = one - one
    for r in prange(rows):
        oc, oa, ob, og = _row_offsets(r, outer, strides)
        for j in range(n):
            share_a, share_b = _shares(op, c[oc + j * inner[0]], a[oa + j * inner[1]],
                                       b[ob + j * inner[2]], one)
            gj = g[og + j * inner[3]]
            if want_a:
                grad_a[r, j] = zero if share_a == zero else gj * share_a
            if want_b:
                grad_b[r, j] = zero if share_b == zero else gj * share_b


def _plan(operands: list, shape: tuple, dtype: np.dtype) -> tuple:
    """The four operands (c, a, b, g; None for one that a call does not read) over the
    broadcast ``shape``: their flat buffers, the outer dims, the outer strides [4, d], the
    inner strides [4] and the row length. A missing operand is a one-element stand-in
    with stride 0 (bool for c, ``dtype`` otherwise)."""
    if all(x is None or (x.shape == shape and x.flags.c_contiguous) for x in operands):
        return _flat_plan(operands, dtype, math.prod(shape))
    nd = len(shape)
    flats, columns = [], []
    for k, x in enumerate(operands):
        if x is None:
            x = np.zeros(1, np.bool_ if k == 0 else dtype)
            flats.append(x)
            columns.append([0] * nd)
        else:
            flat, stride = flat_operand(x, nd)
            flats.append(flat)
            columns.append(stride)
    sizes, merged = coalesce(shape, columns)
    if not sizes:  # every dim has size 1
        sizes, merged = [1], [[0] for _ in columns]
    outer = np.array(sizes[:-1], np.int64)
    strides = np.array([m[:-1] for m in merged], np.int64).reshape(4, len(sizes) - 1)
    inner = np.array([m[-1] for m in merged], np.int64)
    return flats, outer, strides, inner, sizes[-1]


def _flat_plan(operands: list, dtype: np.dtype, size: int) -> tuple:
    """``_plan`` when every operand given is C-contiguous of the full shape (``size``
    elements): one row of them all (planning the general loop was most of a small
    ``where``)."""
    flats = [np.zeros(1, np.bool_ if k == 0 else dtype) if x is None else x.reshape(-1)
             for k, x in enumerate(operands)]
    inner = np.array([0 if x is None else 1 for x in operands], np.int64)
    return flats, np.empty(0, np.int64), np.empty((4, 0), np.int64), inner, size


def select(op: int, c: np.ndarray | None, a: np.ndarray, b: np.ndarray,
           shape: tuple) -> np.ndarray:
    """``op`` (WHERE, MAXIMUM, MINIMUM) over the broadcast ``shape`` of the condition
    ``c`` (bool; None for MAXIMUM and MINIMUM) and ``a``, ``b`` (one dtype): a new
    C-contiguous array of that dtype. Broadcast operands are read in place."""
    out = np.empty(shape, a.dtype)
    if out.size == 0:
        return out
    (fc, fa, fb, _), outer, strides, inner, n = _plan([c, a, b, None], shape, a.dtype)
    for_work(select_rows, out.size)(op, fc, fa, fb, out.reshape(-1, n), outer, strides,
                                    inner)
    return out


def select_backward(op: int, c: np.ndarray | None, a: np.ndarray | None,
                    b: np.ndarray | None, g: np.ndarray, want_a: bool, want_b: bool
                    ) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The gradients of ``select(op, c, a, b)`` for upstream ``g`` (of the broadcast
    shape), each of g's shape (the engine sums them to the operands' shapes), None where
    not wanted. WHERE reads c and g (a, b may be None); MAXIMUM and MINIMUM read a, b
    and g (c None)."""
    shape = g.shape
    grads = [np.empty(shape, g.dtype) if want else None for want in (want_a, want_b)]
    if g.size == 0:
        return grads[0], grads[1]
    flats, outer, strides, inner, n = _plan([c, a, b, g], shape, g.dtype)
    stand_in = np.empty((1, 1), g.dtype)
    rows = [stand_in if x is None else x.reshape(-1, n) for x in grads]
    for_work(select_grads, g.size)(op, *flats, rows[0], rows[1], want_a, want_b, outer,
                                   strides, inner)
    return grads[0], grads[1]


# -- indexing along a dim ---------------------------------------------------------------------

@njit_with_serial(**PARALLEL)
def gather_along(x, index, fill):
    """y[a, k, b] = x[a, index[a, k, b], b], or ``fill`` (x's dtype) where the index is
    -1. x: [A, N, B]; index: [A, K, B] int64, any strides (a 0-stride broadcast view is
    read in place), entries in [-1, N). Returns y [A, K, B]. Each task owns a row (a, k)
    of y."""
    n_a, n_k, n_b = index.shape
    out = np.empty((n_a, n_k, n_b), x.dtype)
    for t in prange(n_a * n_k):
        a = t // n_k
        k = t - a * n_k
        for b in range(n_b):
            i = index[a, k, b]
            out[a, k, b] = x[a, i, b] if i >= 0 else fill
    return out


@njit_with_serial(**PARALLEL)
def scatter_add_along(out, index, src):
    """out[a, index[a, k, b], b] += src[a, k, b] in place, for k = 0, 1, ... in that
    order; an index of -1 adds nothing. out: [A, N, B] C-contiguous; index (int64, entries
    in [-1, N)) and src: [A, K, B], any strides.

    Race-free: each task owns one a and a block of COLUMN_BLOCK columns b of ``out``, so
    every element adds its contributions in the order of k whatever the thread count
    (bitwise ``np.add.at``)."""
    n_a, n_k, n_b = index.shape
    n_blocks = (n_b + COLUMN_BLOCK - 1) // COLUMN_BLOCK
    for t in prange(n_a * n_blocks):
        a = t // n_blocks
        lo = (t - a * n_blocks) * COLUMN_BLOCK
        hi = min(lo + COLUMN_BLOCK, n_b)
        for k in range(n_k):
            for b in range(lo, hi):
                i = index[a, k, b]
                if i >= 0:
                    out[a, i, b] += src[a, k, b]
