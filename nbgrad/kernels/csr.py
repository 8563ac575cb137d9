"""CSR graphs: construction by cell-list radius search and k-nearest pruning, grouping of
the entries by a key (CSR transposes, edge-id groups), and index validation. The
aggregation over a graph is in kernels/gno.py.

A CSR graph here is ``row_ptr[N+1]`` and ``col[nnz]`` (int64): row ``i`` lists the
columns ``col[row_ptr[i]:row_ptr[i+1]]``. Edge ids ``edge_id[nnz]`` name the edge
each CSR entry belongs to (two entries may share one id).
"""

import itertools

import numpy as np
from numba import njit, prange

from ._jit import PARALLEL, SERIAL

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
def _scan_cells(s, sorted_pts, sorted_idx, cell_ptr, coords, dims, offsets, r2, loop, col,
                out):
    """Neighbours of the point at sorted position ``s`` within ``sqrt(r2)``: their count,
    and, when ``out >= 0``, their indices written to ``col[out:out+count]``.

    The last coordinate varies fastest in the linear cell index, so the three cells
    ``c-1, c, c+1`` along it are one contiguous run of ``sorted_pts``: ``offsets`` only
    enumerates the first d-1 coordinates (3^(d-1) runs per point).
    """
    d = sorted_pts.shape[1]
    last = d - 1
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
            dist2 = 0.0
            for a in range(d):
                diff = sorted_pts[t, a] - sorted_pts[s, a]
                dist2 += diff * diff
            if dist2 <= r2 and (loop or t != s):
                if out >= 0:
                    col[out + count] = sorted_idx[t]
                count += 1
    return count


@njit(**PARALLEL)
def _radius_pass(sorted_pts, sorted_idx, cell_ptr, coords, dims, offsets, r2, loop,
                 row_ptr, col):
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
                                    offsets, r2, loop, col, out)
                _sort_segment(col, out, out + count)
            else:
                row_ptr[i + 1] = _scan_cells(s, sorted_pts, sorted_idx, cell_ptr, coords,
                                             dims, offsets, r2, loop, col, -1)


_SMALLEST_CELL = 1e-150


def radius_csr(points, radius, loop):
    """CSR ``(row_ptr, col)`` of all pairs with ``|p_i - p_j| <= radius`` (float64 points).

    Cell-list search: points are bucketed into a grid of cells of side ``>= radius``
    (counting sort by cell), and each point scans the 3^d cells around its own. The
    grid is coarsened when it would have many more cells than points, so memory stays
    O(N). Rows list their columns in increasing order.
    """
    n, d = points.shape
    row_ptr = np.zeros(n + 1, dtype=np.int64)
    if n == 0:
        return row_ptr, np.empty(0, dtype=np.int64)
    origin = points.min(axis=0)
    extent = points.max(axis=0) - origin
    max_cells = max(4 * n, 64)
    cell = float(radius)
    widest = float(extent.max())
    if cell <= 0.0 or widest / cell > max_cells:
        cell = max(widest / max_cells, float(radius)) if widest > 0 else 1.0
    # A coordinate difference below ~1.5e-154 squares to 0 (underflow) and so passes
    # d2 <= r2 even for radius 0: cells at least this wide keep such pairs adjacent.
    cell = max(cell, _SMALLEST_CELL)
    while True:
        dims = (np.floor(extent / cell).astype(np.int64) + 1)
        if float(np.prod(dims.astype(np.float64))) <= max_cells:
            break
        cell *= 1.5
    coords, keys = _cell_coords(points, origin, cell, dims)
    cell_ptr, order = group_by(keys, int(np.prod(dims)))
    sorted_pts = np.ascontiguousarray(points[order])
    coords = np.ascontiguousarray(coords[order])
    offsets = np.array(list(itertools.product((-1, 0, 1), repeat=d - 1)),
                       dtype=np.int64).reshape(3 ** (d - 1), d - 1)
    r2 = float(radius) ** 2
    empty = np.empty(0, dtype=np.int64)
    _radius_pass(sorted_pts, order, cell_ptr, coords, dims, offsets, r2, loop, row_ptr, empty)
    np.cumsum(row_ptr, out=row_ptr)
    col = np.empty(row_ptr[-1], dtype=np.int64)
    _radius_pass(sorted_pts, order, cell_ptr, coords, dims, offsets, r2, loop, row_ptr, col)
    return row_ptr, col


@njit(**PARALLEL)
def nearest_in_rows(points, row_ptr, col, k, new_ptr):
    """Keep in every row the ``k`` columns nearest to the row's point (distance ties go to
    the smaller index), listed in increasing column order. ``new_ptr`` holds the kept row
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
                diff = points[col[p], c] - points[i, c]
                s += diff * diff
            dist2[p - a] = s
        # columns are increasing, so a stable sort by distance breaks ties by index
        nearest = np.argsort(dist2, kind="mergesort")[:k]
        kept = np.sort(nearest)
        for q in range(k):
            new_col[out + q] = col[a + kept[q]]
    return new_col
