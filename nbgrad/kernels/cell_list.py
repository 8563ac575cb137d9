"""Radius search by a cell list (kernels/csr.py picks it or SciPy's k-d tree, and holds
the neighbour test).

The input points are bucketed into a grid of cells of side ``h`` (a stable counting
sort by cell, so each cell lists its points in increasing index), and each query point
tests the input points of the cells within ``reach = ceil(r / h)`` cells of its own
along every axis. The last coordinate varies fastest in the linear cell index, so the
``2 reach + 1`` cells along it are one contiguous run of the sorted points:
``(2 reach + 1)^(d-1)`` runs per query point, shared by the query points of one cell.
Cells of side r (reach 1) test (3 r)^d around a point; side r / 2 (reach 2) only
(2.5 r)^d but in more, shorter runs, which costs more than it saves
(docs/benchmarks.md#radius-graph).

Both clouds are stored dimension-major (``[d, N]``), so the test of a run is one
streaming loop. The query points are swept in cell order (neighbouring points read
the same cells); each row is found and sorted by one iteration, staged, and copied to
its place in the CSR, so the CSR does not depend on the thread count.
"""

import numpy as np
from numba import njit, prange

from ..runtime.jit import PARALLEL, SERIAL

# Chunks of query points per parallel sweep: a prange over single points compiles to a
# much slower loop body.
_CHUNKS = 256


@njit(**PARALLEL)
def bounds(q):
    """Per-coordinate ``(min, max)`` of ``q[N, d]`` (N >= 1)."""
    n, d = q.shape
    chunks = min(n, _CHUNKS)
    lo = np.empty((chunks, d))
    hi = np.empty((chunks, d))
    for c in prange(chunks):
        first = c * n // chunks
        for a in range(d):
            lo[c, a] = q[first, a]
            hi[c, a] = q[first, a]
        for i in range(first + 1, (c + 1) * n // chunks):
            for a in range(d):
                lo[c, a] = min(lo[c, a], q[i, a])
                hi[c, a] = max(hi[c, a], q[i, a])
    out_lo = lo[0].copy()
    out_hi = hi[0].copy()
    for c in range(1, chunks):
        for a in range(d):
            out_lo[a] = min(out_lo[a], lo[c, a])
            out_hi[a] = max(out_hi[a], hi[c, a])
    return out_lo, out_hi


@njit(**PARALLEL)
def _cells_of(q, origin, side, dims):
    """Cell coordinates ``[N, d]`` and linear cell index ``[N]`` of every point of ``q``
    on the grid (cell ``floor((q - origin) / side)``, clipped into the grid)."""
    n, d = q.shape
    coords = np.empty((n, d), dtype=np.int64)
    keys = np.empty(n, dtype=np.int64)
    for i in prange(n):
        key = 0
        for a in range(d):
            c = np.int64((q[i, a] - origin[a]) / side)
            c = min(max(c, 0), dims[a] - 1)
            coords[i, a] = c
            key = key * dims[a] + c
        keys[i] = key
    return coords, keys


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


@njit(**PARALLEL)
def _gather(points, coords, order):
    """``points[order]`` dimension-major (``[d, N]``) and ``coords[order]``."""
    n, d = points.shape
    xyz = np.empty((d, n))
    sorted_coords = np.empty((n, d), dtype=np.int64)
    for s in prange(n):
        i = order[s]
        for a in range(d):
            xyz[a, s] = points[i, a]
            sorted_coords[s, a] = coords[i, a]
    return xyz, sorted_coords


@njit(**SERIAL, inline="always")
def _run(s, o, q_coords, cell_ptr, dims, reach):
    """Sorted positions ``[lo, hi)`` of the ``o``-th run of query point ``s``: the cells
    ``(c_0 + e_0, ..., c_{d-2} + e_{d-2}, c_{d-1} - reach .. c_{d-1} + reach)``, with the
    offsets ``e`` in ``[-reach, reach]`` the base-(2 reach + 1) digits of ``o``; empty
    where a cell coordinate leaves the grid."""
    last = dims.shape[0] - 1
    width = 2 * reach + 1
    base = 0
    rest = o
    step = 1
    for _ in range(last):
        step *= width
    for a in range(last):
        step //= width
        c = q_coords[s, a] + rest // step - reach
        rest %= step
        if c < 0 or c >= dims[a]:
            return 0, 0
        base = base * dims[a] + c
    base *= dims[last]
    first = base + max(q_coords[s, last] - reach, 0)
    final = base + min(q_coords[s, last] + reach, dims[last] - 1)
    return cell_ptr[first], cell_ptr[final + 1]


@njit(**SERIAL)
def _spans(s, q_coords, cell_ptr, dims, reach, span, near):
    """Every run of query point ``s`` (``_run``) into ``span[o] = (lo, hi)``; returns
    ``near``, or a longer buffer when it cannot hold every candidate of the runs plus one
    (``_keep_near`` writes one past the kept points). Query points in one cell share
    the runs: the sweeps in cell order fill them once a cell."""
    candidates = 0
    for o in range(span.shape[0]):
        span[o, 0], span[o, 1] = _run(s, o, q_coords, cell_ptr, dims, reach)
        candidates += span[o, 1] - span[o, 0]
    if candidates < near.shape[0]:
        return near
    return np.empty(2 * candidates + 1, dtype=np.int64)


@njit(**SERIAL, inline="always")
def _new_cell(q_coords, s, first):
    """Whether query point ``s`` is the first of a chunk or of its cell."""
    if s == first:
        return True
    for a in range(q_coords.shape[1]):
        if q_coords[s, a] != q_coords[s - 1, a]:
            return True
    return False


@njit(**SERIAL, inline="always")
def _keep_near(s, q_xyz, xyz, idx, lo, hi, scale, scaled_r2, d2, near, count):
    """Append to ``near[count:]`` the input points of the run ``[lo, hi)`` that pass the
    neighbour test with query point ``s``; returns the new count. The test's sum
    ``sum_a (scale (x_a - q_a))^2`` (kernels/csr.py:_within) is taken term by term in
    the same order (0 + x = x for the first square), so with the same float64 bits; it
    is written out for d = 2 and 3, where the loop over the run vectorises. Every
    candidate is written at ``near[count]`` and kept by advancing ``count`` (no
    branch), so ``near`` needs one slot past the kept points."""
    d = xyz.shape[0]
    n = hi - lo
    ids = idx[lo:hi]
    if d == 2:
        qx, qy = q_xyz[0, s], q_xyz[1, s]
        xs, ys = xyz[0, lo:hi], xyz[1, lo:hi]
        for k in range(n):
            dx = scale * (xs[k] - qx)
            dy = scale * (ys[k] - qy)
            near[count] = ids[k]
            count += dx * dx + dy * dy <= scaled_r2
        return count
    if d == 3:
        qx, qy, qz = q_xyz[0, s], q_xyz[1, s], q_xyz[2, s]
        xs, ys, zs = xyz[0, lo:hi], xyz[1, lo:hi], xyz[2, lo:hi]
        for k in range(n):
            dx = scale * (xs[k] - qx)
            dy = scale * (ys[k] - qy)
            dz = scale * (zs[k] - qz)
            near[count] = ids[k]
            count += dx * dx + dy * dy + dz * dz <= scaled_r2
        return count
    for k in range(n):
        d2[k] = 0.0
    for a in range(d):
        qa = q_xyz[a, s]
        xa = xyz[a, lo:hi]
        for k in range(n):
            diff = scale * (xa[k] - qa)
            d2[k] += diff * diff
    for k in range(n):
        near[count] = ids[k]
        count += d2[k] <= scaled_r2
    return count


@njit(**SERIAL, inline="always")
def _near(s, q_xyz, xyz, idx, span, scale, scaled_r2, skip, d2, near):
    """The number ``count`` of input points that pass the neighbour test with query
    point ``s``, written to ``near[:count]`` run by run (``span``: a run is a few cells,
    each listing its points in increasing index), except the input point at sorted
    position ``skip`` (-1: none), which is left out of its run. ``near`` holds every
    candidate plus one (``_spans``)."""
    count = 0
    for o in range(span.shape[0]):
        lo, hi = span[o, 0], span[o, 1]
        if lo <= skip < hi:
            count = _keep_near(s, q_xyz, xyz, idx, lo, skip, scale, scaled_r2, d2, near,
                               count)
            lo = skip + 1
        count = _keep_near(s, q_xyz, xyz, idx, lo, hi, scale, scaled_r2, d2, near, count)
    return count


# Rows up to this long are sorted by rank counting (n^2 compares without a branch),
# longer ones by merging.
_RANK_SORT_MAX = 64


@njit(**SERIAL, inline="always")
def _place_by_rank(values, n, out, at, low):
    """Write the distinct ``values[:n]`` in increasing order to ``out[at:at+n]``: each
    value goes to ``at`` plus the number of values below it. The compares run on int32
    copies in ``low`` (twice as many to a vector as int64) when it has room (the caller
    gives it none unless every value is below 2^31)."""
    if low.shape[0] < n:
        for k in range(n):
            v = values[k]
            rank = 0
            for m in range(n):
                rank += values[m] < v
            out[at + rank] = v
        return
    for k in range(n):
        low[k] = values[k]
    for k in range(n):
        v = low[k]
        rank = np.int32(0)
        for m in range(n):
            rank += low[m] < v
        out[at + rank] = values[k]


@njit(**SERIAL, inline="always")
def _merge(src, lo, mid, hi, dst):
    """Merge the sorted ``src[lo:mid]`` and ``src[mid:hi]`` into ``dst[lo:hi]``; each
    step takes the smaller head without a branch on the comparison."""
    p, q, out = lo, mid, lo
    while p < mid and q < hi:
        x, y = src[p], src[q]
        take = y < x
        dst[out] = y if take else x
        q += take
        p += 1 - take
        out += 1
    for k in range(p, mid):
        dst[out] = src[k]
        out += 1
    for k in range(q, hi):
        dst[out] = src[k]
        out += 1


@njit(**SERIAL)
def _sort_runs(a, b, n):
    """Sort ``a[:n]``, made of a few increasing runs (one per cell: a cell lists its
    points in increasing index), by natural merge sort: each sweep merges neighbouring
    runs pairwise from one buffer into the other. Returns the buffer holding the result."""
    src, dst = a, b
    while True:
        lo = 0
        merged = 0
        while lo < n:
            mid = lo + 1
            while mid < n and src[mid - 1] <= src[mid]:
                mid += 1
            hi = mid + 1 if mid < n else n
            while hi < n and src[hi - 1] <= src[hi]:
                hi += 1
            _merge(src, lo, mid, hi, dst)
            merged += 1
            lo = hi
        if merged <= 1:
            return dst
        src, dst = dst, src


@njit(**SERIAL, inline="always")
def _write_sorted(near, n, spare, low, out, at):
    """The distinct ``near[:n]`` in increasing order to ``out[at:at+n]`` (``low``:
    ``_place_by_rank``)."""
    if n <= _RANK_SORT_MAX:
        _place_by_rank(near, n, out, at, low)
        return
    if spare.shape[0] < n:
        spare = np.empty(n, dtype=np.int64)
    row = _sort_runs(near, spare, n)
    out[at:at + n] = row[:n]


@njit(**SERIAL, inline="always")
def _int32_keys(idx):
    """``_place_by_rank``'s int32 buffer: none if an index may not fit in int32."""
    return np.empty(_RANK_SORT_MAX if idx.shape[0] <= 2**31 else 0, dtype=np.int32)


@njit(**SERIAL)
def _longest_run(cell_ptr, dims, reach):
    """An upper bound on a run's length: the most points in ``2 reach + 1`` consecutive
    cells."""
    width = min(2 * reach + 1, dims[dims.shape[0] - 1])
    ncells = cell_ptr.shape[0] - 1
    longest = 0
    for c in range(ncells - width + 1):
        longest = max(longest, cell_ptr[c + width] - cell_ptr[c])
    return longest


# The rows are found in one sweep in cell order (neighbouring query points read the same
# cells), each chunk of rows written to its own part of a staging buffer sized from
# every _SAMPLE-th row's count times _ROOM, then copied to their places in the CSR, read
# in staging order (the writes scattered: cheaper than scattered reads). A chunk whose
# part fills up (clustered points) leaves its remaining rows to be counted and written
# in place later.
_SAMPLE = 8
_ROOM = 1.25


@njit(**SERIAL, inline="always")
def _chunk(c, m, chunks):
    """The positions ``[first, end)`` of chunk ``c``."""
    return c * m // chunks, (c + 1) * m // chunks


@njit(**PARALLEL)
def _staging_room(q_xyz, q_coords, xyz, idx, cell_ptr, dims, reach, scale, scaled_r2):
    """``room[chunks+1]``: chunk c stages its rows in ``[room[c], room[c+1])``, sized
    from every _SAMPLE-th row's count (``radius_rows`` has the arguments)."""
    m = q_xyz.shape[1]
    runs = (2 * reach + 1) ** (dims.shape[0] - 1)
    chunks = min(m, _CHUNKS)
    longest = _longest_run(cell_ptr, dims, reach)
    cells = (q_coords, cell_ptr, dims, reach)
    room = np.zeros(chunks + 1, dtype=np.int64)
    for c in prange(chunks):
        d2, near = np.empty(longest), np.empty(64, dtype=np.int64)
        span = np.empty((runs, 2), dtype=np.int64)
        first, end = _chunk(c, m, chunks)
        sampled = 0
        for s in range(first, end, _SAMPLE):
            near = _spans(s, *cells, span, near)
            sampled += _near(s, q_xyz, xyz, idx, span, scale, scaled_r2, -1, d2, near)
        room[c + 1] = np.int64(sampled * _SAMPLE * _ROOM) + 64
    for c in range(chunks):
        room[c + 1] += room[c]
    return room


@njit(**PARALLEL)
def _stage_rows(q_xyz, q_coords, q_order, xyz, idx, cell_ptr, dims, reach, scale,
                scaled_r2, skip_self, room, staging, staged_at, row_ptr, stop):
    """Each chunk's rows, sorted, into its part of ``staging`` (row at position s from
    ``staged_at[s]``) and their lengths into ``row_ptr[q_order[s] + 1]``, up to the
    first row that does not fit (``stop[c]``, the chunk's end if all fit); the rows
    from ``stop[c]`` on are only counted."""
    m = q_xyz.shape[1]
    runs = (2 * reach + 1) ** (dims.shape[0] - 1)
    chunks = room.shape[0] - 1
    longest = _longest_run(cell_ptr, dims, reach)
    cells = (q_coords, cell_ptr, dims, reach)
    for c in prange(chunks):
        d2, near = np.empty(longest), np.empty(64, dtype=np.int64)
        spare = np.empty(64, dtype=np.int64)
        low = _int32_keys(idx)
        span = np.empty((runs, 2), dtype=np.int64)
        first, end = _chunk(c, m, chunks)
        at = room[c]
        stop[c] = end
        for s in range(first, end):
            if _new_cell(q_coords, s, first):
                near = _spans(s, *cells, span, near)
            skip = s if skip_self else -1
            count = _near(s, q_xyz, xyz, idx, span, scale, scaled_r2, skip, d2, near)
            if at + count > room[c + 1]:
                stop[c] = s
                break
            _write_sorted(near, count, spare, low, staging, at)
            staged_at[s] = at
            row_ptr[q_order[s] + 1] = count
            at += count
        for s in range(stop[c], end):
            near = _spans(s, *cells, span, near)
            skip = s if skip_self else -1
            row_ptr[q_order[s] + 1] = _near(s, q_xyz, xyz, idx, span, scale, scaled_r2, skip,
                                            d2, near)


@njit(**PARALLEL)
def _place_rows(q_xyz, q_coords, q_order, xyz, idx, cell_ptr, dims, reach, scale,
                scaled_r2, skip_self, staging, staged_at, row_ptr, stop, col):
    """Every row to its place ``col[row_ptr[q_order[s]]:]``: the staged ones copied
    (read in staging order, the writes scattered), the rest found again."""
    m = q_xyz.shape[1]
    runs = (2 * reach + 1) ** (dims.shape[0] - 1)
    chunks = stop.shape[0]
    longest = _longest_run(cell_ptr, dims, reach)
    cells = (q_coords, cell_ptr, dims, reach)
    for c in prange(chunks):
        d2, near = np.empty(longest), np.empty(64, dtype=np.int64)
        spare = np.empty(64, dtype=np.int64)
        low = _int32_keys(idx)
        span = np.empty((runs, 2), dtype=np.int64)
        first, end = _chunk(c, m, chunks)
        for s in range(first, stop[c]):
            at = staged_at[s]
            out = row_ptr[q_order[s]]
            for k in range(row_ptr[q_order[s] + 1] - out):
                col[out + k] = staging[at + k]
        for s in range(stop[c], end):
            near = _spans(s, *cells, span, near)
            skip = s if skip_self else -1
            count = _near(s, q_xyz, xyz, idx, span, scale, scaled_r2, skip, d2, near)
            _write_sorted(near, count, spare, low, col, row_ptr[q_order[s]])


def radius_rows(q_xyz, q_coords, q_order, xyz, idx, cell_ptr, dims, reach, scale,
                scaled_r2, skip_self):
    """CSR ``(row_ptr, col)`` of the neighbours of every query point: the query point at
    cell-order position s is ``q_order[s]``, with test coordinates ``q_xyz[:, s]`` and
    cell ``q_coords[s]``; input point ``idx[t]`` has ``xyz[:, t]``. For a graph on one
    cloud the query arrays are the input arrays and ``skip_self`` drops the pair of a
    point with itself (the input point at the same position s). Each row is found by
    one iteration, columns increasing.

    The large arrays are allocated here by NumPy, which asks Linux for huge pages from
    4 MiB on (Numba's allocator does not): the rows' scattered writes then miss the TLB
    far less often."""
    search = (q_xyz, q_coords, q_order, xyz, idx, cell_ptr, dims, reach, scale, scaled_r2,
              skip_self)
    m = q_xyz.shape[1]
    room = _staging_room(q_xyz, q_coords, xyz, idx, cell_ptr, dims, reach, scale,
                         scaled_r2)
    staging = np.empty(room[-1], dtype=np.int64)
    staged_at = np.empty(m, dtype=np.int64)
    row_ptr = np.zeros(m + 1, dtype=np.int64)
    stop = np.empty(room.shape[0] - 1, dtype=np.int64)
    _stage_rows(*search, room, staging, staged_at, row_ptr, stop)
    np.cumsum(row_ptr, out=row_ptr)
    col = np.empty(row_ptr[-1], dtype=np.int64)
    _place_rows(*search, staging, staged_at, row_ptr, stop, col)
    return row_ptr, col


def grid(q, r_q, reach):
    """``(cells, origin, side, dims)`` of the cell grid over ``q``: cells of side
    ``>= r_q / reach``, coarsened until there are at most ``max(4 N, 64)`` of them
    (memory O(N))."""
    origin, top = bounds(q)
    extent = top - origin
    max_cells = max(4 * q.shape[0], 64)
    side = max(r_q / reach, float(extent.max()) / max_cells)
    while True:
        dims = np.floor(extent / side).astype(np.int64) + 1
        if float(np.prod(dims.astype(np.float64))) <= max_cells:
            return int(np.prod(dims)), origin, side, dims
        side *= 1.5


def radius_cells(points, q, query, qq, r_q, scale, scaled_r2, loop, reach=1):
    """CSR by the cell list of cells of side ``r_q / reach`` (or coarser): ``points``
    (and ``query``) are tested, ``q`` (and ``qq``) are the same clouds in the search
    frame, where pairs are within ``r_q``."""
    both = q if qq is None else np.concatenate([q, qq])
    ncells, origin, side, dims = grid(both, r_q, reach)
    # side * reach >= r_q (a radius that overflows the search frame makes both inf: one
    # cell holding every point, reach 1)
    reach = 1 if r_q <= side else int(np.ceil(r_q / side))
    coords, keys = _cells_of(q, origin, side, dims)
    cell_ptr, order = group_by(keys, ncells)
    xyz, sorted_coords = _gather(points, coords, order)
    if query is None:
        q_xyz, q_coords, q_order = xyz, sorted_coords, order
    else:
        q_coords, q_keys = _cells_of(qq, origin, side, dims)
        q_order = group_by(q_keys, ncells)[1]
        q_xyz, q_coords = _gather(query, q_coords, q_order)
    return radius_rows(q_xyz, q_coords, q_order, xyz, order, cell_ptr, dims, reach, scale,
                       scaled_r2, query is None and not loop)
