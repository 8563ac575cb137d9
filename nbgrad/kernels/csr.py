"""CSR graphs: construction by radius search (a cell list, kernels/cell_list.py, or
SciPy's k-d tree in higher dimensions), between one point cloud and itself or from a
query cloud to an input cloud, k-nearest search and pruning, grouping of the entries
by a key (CSR transposes, edge-id groups), and index validation. The aggregation over a graph is in
kernels/gno_aggregate.py and, fused with the kernel MLP, kernels/gno.py.

A CSR graph here is ``row_ptr[N+1]`` and ``col[nnz]`` (int64): row ``i`` lists the
columns ``col[row_ptr[i]:row_ptr[i+1]]``. Edge ids ``edge_id[nnz]`` name the edge
each CSR entry belongs to (two entries may share one id).
"""

import itertools

import numpy as np
from numba import njit, prange

from ..runtime.jit import PARALLEL, SERIAL, for_work, njit_with_serial
from .cell_list import group_by, radius_cells

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
# The neighbour test: (query) point i and (input) point j are neighbours when, in float64,
#     sum_a (s (p_j[a] - p_i[a]))^2 <= (s r)^2,
# with s the power of two that puts s r in [0.5, 1) (``distance_scale``). Multiplying by a
# power of two is exact, so for ordinary coordinates this is |p_j - p_i|^2 <= r^2 bit for
# bit; it differs where that would over- or underflow: a difference that overflows to inf
# is farther than any finite radius, and a nonzero difference too small to square (below
# ~1e-154) is not taken for 0. The searches (cell list, k-d tree below) only propose
# candidate pairs; every pair is decided by this one test, so all searches give one graph.


def distance_scale(radius):
    """The power of two ``s`` of the neighbour test: ``s * radius`` in [0.5, 1). For
    radius 0 (and below 2^-1023) s = 2^1023, so any nonzero difference, even 2^-1074,
    scales to at least 2^-51 and squares to more than 0."""
    exponent = int(np.frexp(radius)[1]) if radius > 0 else -1074
    return float(np.ldexp(1.0, min(-exponent, 1023)))


@njit(**SERIAL, inline="always")
def _within(query, i, points, j, scale, scaled_r2):
    """The neighbour test of ``query[i]`` and ``points[j]`` (``scaled_r2 = (scale *
    radius)^2``); ``query`` is ``points`` for a graph on one cloud."""
    d2 = 0.0
    for a in range(points.shape[1]):
        diff = scale * (points[j, a] - query[i, a])
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


def _search_frame(points, radius, query=None):
    """``(q, qq, r_q)``: the points (and the query points, or None) as the searches see
    them -- both clouds scaled by one power of two -- and a search radius such that every
    pair passing the neighbour test is within ``r_q`` of each other in q."""
    k = max(0, _frame_exponent(points, query) - _SEARCH_EXPONENT)
    q, qq = (None if a is None else (np.ldexp(a, -k) if k else a) for a in (points, query))
    return q, qq, float(np.ldexp(radius, -k)) * _SEARCH_WIDENING + _SEARCH_FLOOR


def _frame_exponent(points, query):
    """The binary exponent of the largest |coordinate| of both clouds (0 if empty)."""
    largest = max((float(np.abs(a).max()) for a in (points, query)
                   if a is not None and a.size), default=0.0)
    return int(np.frexp(largest)[1])


# -- radius graph: k-d tree ------------------------------------------------------------


@njit_with_serial(**PARALLEL)
def _pairs_within(query, points, pairs, scale, scaled_r2):
    """The neighbour test of every candidate pair ``pairs[p] = (i, j)`` (query point i,
    input point j)."""
    keep = np.empty(pairs.shape[0], dtype=np.bool_)
    for p in prange(pairs.shape[0]):
        keep[p] = _within(query, pairs[p, 0], points, pairs[p, 1], scale, scaled_r2)
    return keep


def csr_of_entries(rows, cols, num_rows, num_cols):
    """CSR of the entries ``(rows[p], cols[p])`` with every row in increasing column order
    (two stable counting sorts: by column, then by row)."""
    by_col = group_by(cols, num_cols)[1]
    row_ptr, by_row = group_by(rows[by_col], num_rows)
    return row_ptr, cols[by_col[by_row]]


def _csr_of_pairs(pairs, n, loop):
    """CSR of both directions of every pair ``(i, j)``, plus the self loops if ``loop``."""
    loops = np.arange(n if loop else 0, dtype=np.int64)
    rows = np.concatenate([pairs[:, 0], pairs[:, 1], loops])
    cols = np.concatenate([pairs[:, 1], pairs[:, 0], loops])
    return csr_of_entries(rows, cols, n, n)


def _radius_tree(points, q, query, qq, r_q, scale, scaled_r2, loop):
    """CSR by SciPy's k-d tree, a maintained O(N log N) search whose cost does not grow
    like 3^d: ``query_pairs`` (one cloud) or ``sparse_distance_matrix`` (query to input
    cloud) proposes the pairs within ``r_q`` in q."""
    from scipy.spatial import cKDTree  # here, not at the top: scipy.spatial imports in ~0.5 s

    if query is None:
        pairs = np.ascontiguousarray(cKDTree(q).query_pairs(r_q, output_type="ndarray"),
                                     dtype=np.int64)  # [P, 2], i < j
        query = points
    else:
        found = cKDTree(qq).sparse_distance_matrix(cKDTree(q), r_q, output_type="ndarray")
        pairs = np.stack([found["i"], found["j"]], axis=1).astype(np.int64)
    within = for_work(_pairs_within, pairs.size * points.shape[1])
    pairs = pairs[within(query, points, pairs, scale, scaled_r2)]
    if query is points:
        return _csr_of_pairs(pairs, points.shape[0], loop)
    return csr_of_entries(pairs[:, 0], pairs[:, 1], query.shape[0], points.shape[0])


# -- radius graph: choice of search ----------------------------------------------------


# The cell list tests the points of 3^d cells around each point, the k-d tree descends
# about log N levels per point, so the tree wins as d grows and the cell list as N does.
# The crossings below (d <= 2 always cells; d <= 4 cells from 5000 points) are where the
# two met in one thread; with 2 threads the cell list (parallel) gains and the tree
# (serial) does not (docs/benchmarks.md#radius-graph).
_CELLS_MAX_D = 2        # the cell list at any N
_CELLS_MAX_D_LARGE = 4  # the cell list from _CELLS_MIN_N points on
_CELLS_MIN_N = 5000


def radius_search(n, d):
    """``"cells"`` or ``"tree"``: the faster search for n points in d dimensions."""
    if d <= _CELLS_MAX_D or (d <= _CELLS_MAX_D_LARGE and n >= _CELLS_MIN_N):
        return "cells"
    return "tree"


_SEARCHES = {"cells": radius_cells, "tree": _radius_tree}


def radius_csr(points, radius, loop, query=None):
    """CSR ``(row_ptr, col)`` of every pair of float64 points (``[N, d]``, finite) that
    passes the neighbour test for ``radius`` (see above), self pairs only if ``loop``;
    with ``query`` ([M, d]), row i lists the points near query point i (every pair,
    ``loop`` unused). Rows list their columns in increasing order, whichever search
    (``radius_search``) found them."""
    n, d = points.shape
    rows = n if query is None else query.shape[0]
    if n == 0 or rows == 0:
        return np.zeros(rows + 1, dtype=np.int64), np.empty(0, dtype=np.int64)
    scale = distance_scale(radius)
    scaled_r2 = (scale * radius) ** 2
    q, qq, r_q = _search_frame(points, radius, query)
    search = _SEARCHES[radius_search(n + (0 if query is None else rows), d)]
    return search(points, q, query, qq, r_q, scale, scaled_r2, loop or query is not None)


@njit(**PARALLEL)
def nearest_in_rows(query, points, row_ptr, col, k, new_ptr, scale):
    """Keep in every row i the ``k`` columns j nearest to the row's point ``query[i]``
    (``points[j]`` the column's; distance ties go to the smaller index), listed in
    increasing column order. Distances are compared as in the neighbour test (differences
    scaled by ``scale``). ``new_ptr`` holds the kept row lengths' prefix sums; returns the
    new ``col``."""
    n, d = query.shape
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
                diff = scale * (points[col[p], c] - query[i, c])
                s += diff * diff
            dist2[p - a] = s
        # columns are increasing, so a stable sort by distance breaks ties by index
        nearest = np.argsort(dist2, kind="mergesort")[:k]
        kept = np.sort(nearest)
        for q in range(k):
            new_col[out + q] = col[a + kept[q]]
    return new_col


# -- k nearest neighbours --------------------------------------------------------------


def prune_rows(query, points, row_ptr, col, k, scale):
    """``(row_ptr, col)`` keeping the ``k`` nearest columns of every row
    (``nearest_in_rows``)."""
    kept = np.minimum(np.diff(row_ptr), k)
    new_ptr = np.zeros_like(row_ptr)
    np.cumsum(kept, out=new_ptr[1:])
    return new_ptr, nearest_in_rows(query, points, row_ptr, col, k, new_ptr, scale)


def knn_csr(points, k, loop, query=None):
    """CSR of the ``k`` nearest input points (``[N, d]`` float64, finite) of every query
    point (every input point when ``query`` is None; then without itself unless
    ``loop``): by the squared distance of the neighbour test with s = 1 (for coordinates
    below 2^500; the searches' power-of-two frame otherwise), ties to the smaller index,
    rows in increasing column order; fewer than k where there are fewer points.

    SciPy's k-d tree proposes the candidates: the k(+1) nearest in the search frame give
    each row a reach (widened as the radius search's), every point within it is a
    candidate, and ``nearest_in_rows`` decides exactly -- so ties at the k-th distance go
    to the smaller index whatever order the tree found them in."""
    from scipy.spatial import cKDTree

    n = points.shape[0]
    rows = n if query is None else query.shape[0]
    extra = 1 if query is None and not loop else 0
    kk = min(k + extra, n)
    if kk == 0 or rows == 0:
        return np.zeros(rows + 1, dtype=np.int64), np.empty(0, dtype=np.int64)
    shift = max(0, _frame_exponent(points, query) - _SEARCH_EXPONENT)
    q, qq, _ = _search_frame(points, 0.0, query)
    qq = q if qq is None else qq
    tree = cKDTree(q)
    dist = tree.query(qq, k=kk)[0].reshape(rows, kk)[:, -1]
    reach = dist * _SEARCH_WIDENING + _SEARCH_FLOOR
    found = tree.query_ball_point(qq, reach, return_sorted=True)
    row_ptr = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum([len(r) for r in found], out=row_ptr[1:])
    col = np.fromiter(itertools.chain.from_iterable(found), dtype=np.int64,
                      count=row_ptr[-1])
    if extra:  # drop the point itself
        entry_rows = csr_rows(row_ptr)
        keep = col != entry_rows
        np.cumsum(np.bincount(entry_rows[keep], minlength=rows), out=row_ptr[1:])
        col = col[keep]
    query = points if query is None else query
    return prune_rows(query, points, row_ptr, col, k, float(np.ldexp(1.0, -shift)))
