"""CSR graphs: construction by radius search (a cell list, or SciPy's k-d tree in higher
dimensions) and k-nearest pruning, grouping of the entries by a key (CSR transposes,
edge-id groups), and index validation. The aggregation over a graph is in kernels/gno.py.

A CSR graph here is ``row_ptr[N+1]`` and ``col[nnz]`` (int64): row ``i`` lists the
columns ``col[row_ptr[i]:row_ptr[i+1]]``. Edge ids ``edge_id[nnz]`` name the edge
each CSR entry belongs to (two entries may share one id).
"""

import itertools

import numpy as np
from numba import njit, prange

from ._jit import PARALLEL, SERIAL, for_work, njit_with_serial

# -- validation ------------------------------------------------------------------------


@njit(**SERIAL)
def first_decrease(a):
    """Index ``k`` of the first ``a[k] < a[k-1]``, or -1 when ``a`` is non-decreasing."""
    for k in range(1, a.shape[0]):
        if a[k] < a[k - 1]:
            return k
    return -1


@njit(**SERIAL)
def first_outside(a, lo, hi):
    """Index of the first element of ``a`` outside ``[lo, hi)``, or -1 when there is none."""
    for k in range(a.shape[0]):
        if a[k] < lo or a[k] >= hi:
            return k
    return -1


# -- CSR -------------------------------------------------------------------------------


@njit(**SERIAL)
def group_by(keys, num_groups):
    """Counting sort of positions ``0..len(keys)-1`` by ``keys`` (each in ``[0, num_groups)``).

    Returns ``(ptr[num_groups+1], pos[len(keys)])``: the positions with key ``g`` are
    ``pos[ptr[g]:ptr[g+1]]``, in increasing order (the sort is stable).
    """
    ptr = np.zeros(num_groups + 1, dtype=np.int64)
    for k in range(keys.shape[0]):
        ptr[keys[k] + 1] += 1
    for g in range(num_groups):
        ptr[g + 1] += ptr[g]
    fill = ptr[:-1].copy()
    pos = np.empty(keys.shape[0], dtype=np.int64)
    for k in range(keys.shape[0]):
        g = keys[k]
        pos[fill[g]] = k
        fill[g] += 1
    return ptr, pos


@njit(**SERIAL)
def csr_rows(row_ptr):
    """The row index of every CSR entry (``np.repeat(arange(N), row lengths)``)."""
    n = row_ptr.shape[0] - 1
    rows = np.empty(row_ptr[n], dtype=np.int64)
    for i in range(n):
        for p in range(row_ptr[i], row_ptr[i + 1]):
            rows[p] = i
    return rows


# -- radius graph ----------------------------------------------------------------------
#
# The neighbour test: points i and j are neighbours when, in float64,
#     sum_a (s (p_j[a] - p_i[a]))^2 <= (s r)^2,
# with s the power of two that puts s r in [0.5, 1) (``distance_scale``). Multiplying by a
# power of two is exact, so for ordinary coordinates this is |p_j - p_i|^2 <= r^2 bit for
# bit; it differs where that would over- or underflow: a difference that overflows to inf
# is farther than any finite radius, and a nonzero difference too small to square (below
# ~1e-154) is not taken for 0. The searches below (cell list, k-d tree) only propose
# candidate pairs; every pair is decided by this one test, so all searches give one graph.


def distance_scale(radius):
    """The power of two ``s`` of the neighbour test: ``s * radius`` in [0.5, 1). For
    radius 0 (and below 2^-1023) s = 2^1023, so any nonzero difference, even 2^-1074,
    scales to at least 2^-51 and squares to more than 0."""
    exponent = int(np.frexp(radius)[1]) if radius > 0 else -1074
    return float(np.ldexp(1.0, min(-exponent, 1023)))


@njit(**SERIAL, inline="always")
def _within(points, i, j, scale, scaled_r2):
    """The neighbour test of points i and j (``scaled_r2 = (scale * radius)^2``)."""
    d2 = 0.0
    for a in range(points.shape[1]):
        diff = scale * (points[j, a] - points[i, a])
        d2 += diff * diff
    return d2 <= scaled_r2


# The searches see the points scaled by 2^-k, with k the smallest k >= 0 that makes every
# |q| < 2^500: then no coordinate difference, squared distance or cell coordinate of q
# overflows (cKDTree refuses data whose squared distances overflow). The search radius in
# q is the radius times 2^-k, widened by 2^-20 relative, which covers the rounding of the
# squared distances (d 2^-53 for d < 2^30 dimensions) and of the cell coordinates (below
# 2^31 cells: 2^-21 of a cell), plus 2^-500 absolute, which covers the bits lost where
# 2^-k q underflows and keeps the search radius's square a normal number.
_SEARCH_EXPONENT = 500
_SEARCH_WIDENING = 1.0 + 2.0 ** -20
_SEARCH_FLOOR = 2.0 ** -500


def _search_frame(points, radius):
    """``(q, r_q)``: the points as the searches see them, and a search radius such that
    every pair passing the neighbour test is within ``r_q`` of each other in q."""
    k = max(0, int(np.frexp(np.abs(points).max())[1]) - _SEARCH_EXPONENT)
    q = np.ldexp(points, -k) if k else points
    return q, float(np.ldexp(radius, -k)) * _SEARCH_WIDENING + _SEARCH_FLOOR


# -- radius graph: cell list -----------------------------------------------------------


@njit(**SERIAL)
def _cell_coords(points, origin, cell, dims):
    """Cell coordinates ``[N, d]`` and linear cell index ``[N]`` of every point on a grid
    of ``dims`` cells of side ``cell``."""
    n, d = points.shape
    coords = np.empty((n, d), dtype=np.int64)
    keys = np.empty(n, dtype=np.int64)
    for i in range(n):
        key = 0
        for a in range(d):
            c = np.int64((points[i, a] - origin[a]) / cell)
            c = min(max(c, 0), dims[a] - 1)
            coords[i, a] = c
            key = key * dims[a] + c
        keys[i] = key
    return coords, keys


@njit(**SERIAL)
def _sort_segment(a, lo, hi):
    """Sort ``a[lo:hi]`` in place (insertion sort for the short rows of a radius graph)."""
    if hi - lo > 128:
        a[lo:hi] = np.sort(a[lo:hi])
        return
    for k in range(lo + 1, hi):
        v = a[k]
        m = k - 1
        while m >= lo and a[m] > v:
            a[m + 1] = a[m]
            m -= 1
        a[m + 1] = v


@njit(**SERIAL)
def _scan_cells(s, sorted_pts, sorted_idx, cell_ptr, coords, dims, offsets, scale,
                scaled_r2, loop, col, out):
    """Neighbours of the point at sorted position ``s``: their count, and, when
    ``out >= 0``, their indices written to ``col[out:out+count]``.

    The last coordinate varies fastest in the linear cell index, so the three cells
    ``c-1, c, c+1`` along it are one contiguous run of ``sorted_pts``: ``offsets`` only
    enumerates the first d-1 coordinates (3^(d-1) runs per point).
    """
    last = sorted_pts.shape[1] - 1
    count = 0
    for o in range(offsets.shape[0]):
        base = 0
        inside = True
        for a in range(last):
            c = coords[s, a] + offsets[o, a]
            if c < 0 or c >= dims[a]:
                inside = False
                break
            base = base * dims[a] + c
        if not inside:
            continue
        base *= dims[last]
        lo = base + max(coords[s, last] - 1, 0)
        hi = base + min(coords[s, last] + 1, dims[last] - 1)
        for t in range(cell_ptr[lo], cell_ptr[hi + 1]):
            if (loop or t != s) and _within(sorted_pts, s, t, scale, scaled_r2):
                if out >= 0:
                    col[out + count] = sorted_idx[t]
                count += 1
    return count


@njit(**PARALLEL)
def _radius_pass(sorted_pts, sorted_idx, cell_ptr, coords, dims, offsets, scale, scaled_r2,
                 loop, row_ptr, col):
    """One sweep over all points in cell order (``sorted_pts[s]`` is point
    ``sorted_idx[s]``, so consecutive points scan the same cells). With ``col`` empty it
    counts the neighbours of point ``i`` into ``row_ptr[i + 1]``; otherwise it writes
    them, sorted, to ``col[row_ptr[i]:row_ptr[i+1]]``. Each point owns its row: race-free.
    The parallel loop runs over fixed chunks of points (a prange over single points
    compiles to a much slower loop body here)."""
    n = sorted_pts.shape[0]
    chunks = min(n, 256)
    fill = col.shape[0] > 0
    for c in prange(chunks):
        for s in range(c * n // chunks, (c + 1) * n // chunks):
            i = sorted_idx[s]
            if fill:
                out = row_ptr[i]
                count = _scan_cells(s, sorted_pts, sorted_idx, cell_ptr, coords, dims,
                                    offsets, scale, scaled_r2, loop, col, out)
                _sort_segment(col, out, out + count)
            else:
                row_ptr[i + 1] = _scan_cells(s, sorted_pts, sorted_idx, cell_ptr, coords,
                                             dims, offsets, scale, scaled_r2, loop, col, -1)


def _grid(q, r_q):
    """Side and ``dims`` of the cell grid over ``q``: cells of side ``>= r_q``, coarsened
    until there are at most ``max(4 N, 64)`` of them (memory O(N))."""
    origin = q.min(axis=0)
    extent = q.max(axis=0) - origin
    max_cells = max(4 * q.shape[0], 64)
    cell = max(r_q, float(extent.max()) / max_cells)
    while True:
        dims = np.floor(extent / cell).astype(np.int64) + 1
        if float(np.prod(dims.astype(np.float64))) <= max_cells:
            return origin, cell, dims
        cell *= 1.5


def _radius_cells(points, q, r_q, scale, scaled_r2, loop):
    """CSR by a cell list: the points are bucketed into the grid (counting sort by cell)
    and each one tests the points of the 3^d cells around its own."""
    n, d = points.shape
    origin, cell, dims = _grid(q, r_q)
    coords, keys = _cell_coords(q, origin, cell, dims)
    cell_ptr, order = group_by(keys, int(np.prod(dims)))
    sorted_pts = np.ascontiguousarray(points[order])
    coords = np.ascontiguousarray(coords[order])
    offsets = np.array(list(itertools.product((-1, 0, 1), repeat=d - 1)),
                       dtype=np.int64).reshape(3 ** (d - 1), d - 1)
    row_ptr = np.zeros(n + 1, dtype=np.int64)
    empty = np.empty(0, dtype=np.int64)
    _radius_pass(sorted_pts, order, cell_ptr, coords, dims, offsets, scale, scaled_r2, loop,
                 row_ptr, empty)
    np.cumsum(row_ptr, out=row_ptr)
    col = np.empty(row_ptr[-1], dtype=np.int64)
    _radius_pass(sorted_pts, order, cell_ptr, coords, dims, offsets, scale, scaled_r2, loop,
                 row_ptr, col)
    return row_ptr, col


# -- radius graph: k-d tree ------------------------------------------------------------


@njit_with_serial(**PARALLEL)
def _pairs_within(points, pairs, scale, scaled_r2):
    """The neighbour test of every candidate pair ``pairs[p] = (i, j)``."""
    keep = np.empty(pairs.shape[0], dtype=np.bool_)
    for p in prange(pairs.shape[0]):
        keep[p] = _within(points, pairs[p, 0], pairs[p, 1], scale, scaled_r2)
    return keep


def _csr_of_pairs(pairs, n, loop):
    """CSR of both directions of every pair ``(i, j)``, plus the self loops if ``loop``,
    with every row in increasing column order (two stable counting sorts: by column, then
    by row)."""
    loops = np.arange(n if loop else 0, dtype=np.int64)
    rows = np.concatenate([pairs[:, 0], pairs[:, 1], loops])
    cols = np.concatenate([pairs[:, 1], pairs[:, 0], loops])
    by_col = group_by(cols, n)[1]
    row_ptr, by_row = group_by(rows[by_col], n)
    return row_ptr, cols[by_col[by_row]]


def _radius_tree(points, q, r_q, scale, scaled_r2, loop):
    """CSR by SciPy's k-d tree, a maintained O(N log N) search whose cost does not grow
    like 3^d: ``query_pairs`` proposes the pairs within ``r_q`` in q."""
    from scipy.spatial import cKDTree  # here, not at the top: scipy.spatial imports in ~0.5 s

    pairs = np.ascontiguousarray(cKDTree(q).query_pairs(r_q, output_type="ndarray"),
                                 dtype=np.int64)  # [P, 2], i < j
    within = for_work(_pairs_within, pairs.size * points.shape[1])
    pairs = pairs[within(points, pairs, scale, scaled_r2)]
    return _csr_of_pairs(pairs, points.shape[0], loop)


# -- radius graph: choice of search ----------------------------------------------------


# The cell list tests the points of 3^d cells around each point, the k-d tree descends
# about log N levels per point, so the tree wins as d grows and the cell list as N does.
# Median milliseconds, cell list / tree, at 1 thread (uniform points in [0, 1]^d, radius
# for ~10 neighbours per point; 7-9 alternating runs on a 2-core machine shared with
# other jobs, so +-30%):
#   d    N = 100     1000       5000      10^4       10^5
#   1    0.28/0.26   0.81/0.88            5.6/10.9   67/142
#   2    0.32/0.26   1.11/1.11            15/20      259/373
#   3    0.22/0.17   1.36/1.10  6.9/7.0   24/29      282/396
#   4    0.25/0.15   2.9/1.8    17/18     41/46      442/607
#   5    0.53/0.27                        64/51      1063/882
#   8    2.5/0.30                         587/352
#   16   -/0.19                           -/774      (cells: 3^15 runs per point)
# With 2 threads the cell list (parallel) gains and the tree (serial) does not.
_CELLS_MAX_D = 2        # the cell list at any N
_CELLS_MAX_D_LARGE = 4  # the cell list from _CELLS_MIN_N points on
_CELLS_MIN_N = 5000


def radius_search(n, d):
    """``"cells"`` or ``"tree"``: the faster search for n points in d dimensions."""
    if d <= _CELLS_MAX_D or (d <= _CELLS_MAX_D_LARGE and n >= _CELLS_MIN_N):
        return "cells"
    return "tree"


_SEARCHES = {"cells": _radius_cells, "tree": _radius_tree}


def radius_csr(points, radius, loop):
    """CSR ``(row_ptr, col)`` of every pair of float64 points (``[N, d]``, finite) that
    passes the neighbour test for ``radius`` (see above), self pairs only if ``loop``.
    Rows list their columns in increasing order, whichever search (``radius_search``)
    found them."""
    n, d = points.shape
    if n == 0:
        return np.zeros(1, dtype=np.int64), np.empty(0, dtype=np.int64)
    scale = distance_scale(radius)
    scaled_r2 = (scale * radius) ** 2
    q, r_q = _search_frame(points, radius)
    search = _SEARCHES[radius_search(n, d)]
    return search(points, q, r_q, scale, scaled_r2, loop)


@njit(**PARALLEL)
def nearest_in_rows(points, row_ptr, col, k, new_ptr, scale):
    """Keep in every row the ``k`` columns nearest to the row's point (distance ties go to
    the smaller index), listed in increasing column order. Distances are compared as in
    the neighbour test (differences scaled by ``scale``). ``new_ptr`` holds the kept row
    lengths' prefix sums; returns the new ``col``."""
    n, d = points.shape
    new_col = np.empty(new_ptr[n], dtype=np.int64)
    for i in prange(n):
        a, b = row_ptr[i], row_ptr[i + 1]
        out = new_ptr[i]
        if b - a <= k:
            for p in range(a, b):
                new_col[out + p - a] = col[p]
            continue
        dist2 = np.empty(b - a, dtype=np.float64)
        for p in range(a, b):
            s = 0.0
            for c in range(d):
                diff = scale * (points[col[p], c] - points[i, c])
                s += diff * diff
            dist2[p - a] = s
        # columns are increasing, so a stable sort by distance breaks ties by index
        nearest = np.argsort(dist2, kind="mergesort")[:k]
        kept = np.sort(nearest)
        for q in range(k):
            new_col[out + q] = col[a + kept[q]]
    return new_col
