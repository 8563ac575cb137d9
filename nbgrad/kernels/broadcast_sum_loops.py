"""The compiled loop nests of the sums over broadcast axes (kernels/broadcast_sum.py plans
the calls: which loop nest, how many chunks).

Every function sums ``f(u, v)`` for the reduction ops COPY (f = u), MUL (u v) and DIV
(u / v) of kernels/strided_apply.py. A task owns a block of output elements, or a
private partial over a fixed chunk of the reduced rows (``part[c]``), which ``combine``
adds in chunk order; the chunks come from the shapes, so results are bitwise identical
at any thread count.
"""

import numpy as np
from numba import njit, prange

from ..runtime.jit import CHUNK, PARALLEL_IEEE_DIV, SERIAL_IEEE_DIV, SERIAL_IEEE_DIV_REASSOC_NSZ
from .strided_apply import BLOCK, COPY, MUL, lanes, operand_offsets

TASK_GROUPS = 64     # reduction tasks are handed to threads in at most this many
                     # runs (each run allocates its lane buffers once; every task
                     # still owns its outputs, so results do not depend on it)


# -- inner loops over contiguous slices ----------------------------------------------------

@njit(**SERIAL_IEEE_DIV, inline="always")
def _accumulate_rows(op, acc, u, v, rows, us, vs):
    """acc[l] += f(u[r, l], v[r, l]) for rows r < rows in order, for the reduction ops
    COPY (u), MUL (u v), DIV (u / v): u, v flat with row strides us, vs (0 for one row
    that every row reads) and rows as long as acc. The op is chosen once per call, not per
    row as ``_accumulate`` would (``strided_apply.binary_rows``)."""
    n = acc.size
    if op == COPY:
        for r in range(rows):
            a = u[r * us:r * us + n]
            for i in range(n):
                acc[i] += a[i]
    elif op == MUL:
        for r in range(rows):
            a, b = u[r * us:r * us + n], v[r * vs:r * vs + n]
            for i in range(n):
                acc[i] += a[i] * b[i]
    else:
        for r in range(rows):
            a, b = u[r * us:r * us + n], v[r * vs:r * vs + n]
            for i in range(n):
                acc[i] += a[i] / b[i]


@njit(**SERIAL_IEEE_DIV, inline="always")
def _accumulate(op, acc, u, v):
    """acc[l] += f(u[l], v[l]) for the reduction ops COPY (u), MUL (u v), DIV (u / v).
    Its own loops rather than ``_accumulate_rows`` of one row: the row loops, inlined
    into every reduction kernel, made them slower to compile (as ``binary_rows`` says)."""
    n = acc.size
    if op == COPY:
        for i in range(n):
            acc[i] += u[i]
    elif op == MUL:
        for i in range(n):
            acc[i] += u[i] * v[i]
    else:
        for i in range(n):
            acc[i] += u[i] / v[i]


@njit(**SERIAL_IEEE_DIV_REASSOC_NSZ)
def _sum_nsz(x):
    """Sum of a short contiguous block, compiled like ``_reduce_block`` (whose COPY case
    it is): reassociated so that LLVM vectorises it (the order is fixed at compile time,
    so the result does not depend on the thread count) and, unlike ``basics.vector_sum``,
    with ``nsz`` (the sign of a zero sum is not significant) and no FMA contraction."""
    s = x.dtype.type(0)
    for i in range(x.size):
        s += x[i]
    return s


@njit(**SERIAL_IEEE_DIV_REASSOC_NSZ)
def _reduce_block(op, u, v):
    """Sum of f(u[l], v[l]) over a short block for COPY, MUL, DIV (as ``_sum_nsz``)."""
    if op == COPY:
        return _sum_nsz(u)
    s = u.dtype.type(0)
    if op == MUL:
        for i in range(u.size):
            s += u[i] * v[i]
    else:
        for i in range(u.size):
            s += u[i] / v[i]
    return s


# -- reductions over broadcast axes ------------------------------------------------------

@njit(**SERIAL_IEEE_DIV)
def reduce_kept_lane(op, u, v, part, kshape, kstr, rshape, rstr, n, us, vs,
                      rows_per_chunk, t0, t1):
    """Tasks t0..t1 when the lane axis is kept: part[c, ko*n + j] = sum over the reduced
    rows of chunk c of f(u, v) at (kept outer ko, lane j). A task owns one lane block of
    one kept row in one chunk, so no two tasks write the same element."""
    nblk = (n + BLOCK - 1) // BLOCK
    nko = part.shape[1] // n
    rows = 1
    for d in range(rshape.size):
        rows *= rshape[d]
    ubuf = np.empty(BLOCK, part.dtype)
    vbuf = np.empty(BLOCK, part.dtype)
    acc = np.empty(BLOCK, part.dtype)
    for t in range(t0, t1):
        c = t // (nko * nblk)
        rest = t - c * (nko * nblk)
        ko = rest // nblk
        j0 = (rest - ko * nblk) * BLOCK
        m = min(BLOCK, n - j0)
        a = acc[:m]
        for i in range(m):
            a[i] = 0
        ku, kv = operand_offsets(ko, kshape, kstr)
        for r in range(c * rows_per_chunk, min(rows, (c + 1) * rows_per_chunk)):
            ru, rv = operand_offsets(r, rshape, rstr)
            _accumulate(op, a, lanes(u, ku + ru, us, j0, m, ubuf),
                        lanes(v, kv + rv, vs, j0, m, vbuf))
        o = ko * n + j0
        for i in range(m):
            part[c, o + i] = a[i]


@njit(**SERIAL_IEEE_DIV)
def reduce_rows(op, u, v, out, rows, us, vs):
    """out[j] = sum over the rows r of f(u[r, j], v[r, j]) in row order, for u, v flat
    [rows, n] (n = out.size) where an operand of row stride 0 (``us`` / ``vs``) is one
    row that every row reads: a bias's gradient, without the general plan."""
    for j in range(out.size):
        out[j] = 0
    _accumulate_rows(op, out, u, v, rows, us, vs)


@njit(**PARALLEL_IEEE_DIV)
def reduce_rows_parallel(op, u, v, part, rows, us, vs, rows_per_chunk):
    """part[c, j] = sum over the rows of chunk c (``rows_per_chunk`` each, in order) of
    f(u[r, j], v[r, j]): one prange iteration per chunk and block of BLOCK lanes."""
    n = part.shape[1]
    blocks = (n + BLOCK - 1) // BLOCK
    for t in prange(part.shape[0] * blocks):
        c = t // blocks
        j0 = (t - c * blocks) * BLOCK
        r0 = c * rows_per_chunk
        acc = part[c, j0:min(n, j0 + BLOCK)]
        for j in range(acc.size):
            acc[j] = 0
        _accumulate_rows(op, acc, u[r0 * us + j0:], v[r0 * vs + j0:],
                         min(rows, r0 + rows_per_chunk) - r0, us, vs)


@njit(**SERIAL_IEEE_DIV)
def reduce_lane(op, u, v, part, kshape, kstr, rshape, rstr, n, us, vs,
                 rows_per_chunk, lanes_per_chunk, t0, t1):
    """Tasks t0..t1 when the lane axis is reduced: part[c, k] = sum of f(u, v) over the
    rows and lanes of chunk c for kept element k (one task per (chunk, k))."""
    nk = part.shape[1]
    rows = 1
    for d in range(rshape.size):
        rows *= rshape[d]
    nlc = (n + lanes_per_chunk - 1) // lanes_per_chunk
    ubuf = np.empty(BLOCK, part.dtype)
    vbuf = np.empty(BLOCK, part.dtype)
    for t in range(t0, t1):
        c = t // nk
        k = t - c * nk
        cr = c // nlc
        cl = c - cr * nlc
        ku, kv = operand_offsets(k, kshape, kstr)
        s = part.dtype.type(0)
        for r in range(cr * rows_per_chunk, min(rows, (cr + 1) * rows_per_chunk)):
            ru, rv = operand_offsets(r, rshape, rstr)
            for j0 in range(cl * lanes_per_chunk, min(n, (cl + 1) * lanes_per_chunk), BLOCK):
                m = min(BLOCK, n - j0, (cl + 1) * lanes_per_chunk - j0)
                s += _reduce_block(op, lanes(u, ku + ru, us, j0, m, ubuf),
                                   lanes(v, kv + rv, vs, j0, m, vbuf))
        part[c, k] = s


@njit(**PARALLEL_IEEE_DIV)
def reduce_kept_lane_parallel(op, u, v, part, kshape, kstr, rshape, rstr, n, us, vs,
                               rows_per_chunk):
    ntasks = part.shape[0] * (part.shape[1] // n) * ((n + BLOCK - 1) // BLOCK)
    per = (ntasks + TASK_GROUPS - 1) // TASK_GROUPS
    for grp in prange((ntasks + per - 1) // per):
        reduce_kept_lane(op, u, v, part, kshape, kstr, rshape, rstr, n, us, vs,
                          rows_per_chunk, grp * per, min(ntasks, (grp + 1) * per))


@njit(**PARALLEL_IEEE_DIV)
def reduce_lane_parallel(op, u, v, part, kshape, kstr, rshape, rstr, n, us, vs,
                          rows_per_chunk, lanes_per_chunk):
    ntasks = part.shape[0] * part.shape[1]
    per = (ntasks + TASK_GROUPS - 1) // TASK_GROUPS
    for grp in prange((ntasks + per - 1) // per):
        reduce_lane(op, u, v, part, kshape, kstr, rshape, rstr, n, us, vs,
                     rows_per_chunk, lanes_per_chunk, grp * per, min(ntasks, (grp + 1) * per))


@njit(**SERIAL_IEEE_DIV_REASSOC_NSZ)
def lane_sums(op, u, v, out, n, r0, r1):
    """out[r] = sum over the n lanes of row r of f(u[r, :], v[r, :]) for r0 <= r < r1,
    for u and v flat C-contiguous [rows, n]: blocks of BLOCK lanes, each summed like
    ``_reduce_block`` (reassociated at compile time), added in order, as ``reduce_lane``
    adds them (a sum has its bits; a product or quotient can round differently, since
    LLVM vectorises each kernel's block sums on its own). The op is chosen once per call,
    each with its own loop nest, and every row summed here: calling ``_reduce_block`` for
    each row is a call per row that costs more than a short row's sum, and choosing the
    op per block inside one loop nest kept LLVM from vectorising the sums
    (docs/benchmarks.md#reductions)."""
    zero = out.dtype.type(0)
    if op == COPY:
        for r in range(r0, r1):
            total = zero
            for j0 in range(r * n, (r + 1) * n, BLOCK):
                a = u[j0:min(j0 + BLOCK, (r + 1) * n)]
                s = zero
                for i in range(a.size):
                    s += a[i]
                total += s
            out[r] = total
    elif op == MUL:
        for r in range(r0, r1):
            total = zero
            for j0 in range(r * n, (r + 1) * n, BLOCK):
                j1 = min(j0 + BLOCK, (r + 1) * n)
                a, b = u[j0:j1], v[j0:j1]
                s = zero
                for i in range(a.size):
                    s += a[i] * b[i]
                total += s
            out[r] = total
    else:
        for r in range(r0, r1):
            total = zero
            for j0 in range(r * n, (r + 1) * n, BLOCK):
                j1 = min(j0 + BLOCK, (r + 1) * n)
                a, b = u[j0:j1], v[j0:j1]
                s = zero
                for i in range(a.size):
                    s += a[i] / b[i]
                total += s
            out[r] = total


@njit(**PARALLEL_IEEE_DIV)
def lane_sums_parallel(op, u, v, out, n, rows_per_run):
    """``lane_sums`` in fixed runs of ``rows_per_run`` rows, one prange iteration each."""
    for c in prange((out.size + rows_per_run - 1) // rows_per_run):
        r0 = c * rows_per_run
        lane_sums(op, u, v, out, n, r0, min(out.size, r0 + rows_per_run))


@njit(**SERIAL_IEEE_DIV)
def _flat_chunk(op, u, v, c):
    s = c * CHUNK
    e = min(u.size, s + CHUNK)
    return _reduce_block(op, u[s:e], v[s:e])


@njit(**SERIAL_IEEE_DIV)
def _ordered_total(part, scale, out):
    total = part[0]
    for c in range(1, part.size):
        total += part[c]
    out[0] = total * scale


@njit(**SERIAL_IEEE_DIV)
def reduce_flat(op, u, v, scale, out):
    """out[0] = scale * sum of f(u, v) over contiguous 1-D u, v (size >= 1): partial sums
    over fixed chunks of CHUNK elements, added in chunk order."""
    part = np.empty((u.size + CHUNK - 1) // CHUNK, out.dtype)
    for c in range(part.size):
        part[c] = _flat_chunk(op, u, v, c)
    _ordered_total(part, scale, out)


@njit(**PARALLEL_IEEE_DIV)
def reduce_flat_parallel(op, u, v, scale, out):
    """``reduce_flat`` with the chunks shared among threads (same chunks, same order)."""
    part = np.empty((u.size + CHUNK - 1) // CHUNK, out.dtype)
    for c in prange(part.size):
        part[c] = _flat_chunk(op, u, v, c)
    _ordered_total(part, scale, out)


@njit(**SERIAL_IEEE_DIV)
def combine(part, out, scale):
    """out[k] = scale * sum over chunks c (in order) of part[c, k]."""
    one = out.dtype.type(1)
    for k in range(out.size):
        s = part[0, k]
        for c in range(1, part.shape[0]):
            s += part[c, k]
        out[k] = s if scale == one else s * scale


@njit(**SERIAL_IEEE_DIV)
def rows_sum(op, u, v, out, rows, us, vs, chunks, rows_per_chunk, scale):
    """out[j] = scale * sum over the rows r of f(u[r, j], v[r, j]) (row strides us, vs):
    in one pass row by row (``chunks`` 0), or in ``chunks`` runs of ``rows_per_chunk``
    rows on the thread pool whose partials are then added in order (kernels/
    broadcast_sum.py: ``bias_rows_plan``)."""
    n = out.size
    if chunks == 0:
        reduce_rows(op, u, v, out, rows, us, vs)
    elif chunks == 1:
        reduce_rows_parallel(op, u, v, out.reshape((1, n)), rows, us, vs, rows_per_chunk)
    else:
        part = np.empty((chunks, n), out.dtype)
        reduce_rows_parallel(op, u, v, part, rows, us, vs, rows_per_chunk)
        combine(part, out, scale)
        return
    if scale != 1:
        scale_in_place(out, scale)


@njit(**SERIAL_IEEE_DIV)
def scale_in_place(x, scale):
    for i in range(x.size):
        x[i] *= scale


# -- mul's backward, both gradients in one pass --------------------------------------------

@njit(**SERIAL_IEEE_DIV)
def mul_grads_rows(g, full_g, a, b, gb, part, rows_per_chunk, c0, c1):
    """Chunks c0..c1 of mul's backward for a vector ``a[n]`` broadcast over the rows of
    ``b[rows, n]`` (both flat, contiguous), upstream ``g`` full-size (``full_g``) or the
    scalar ``g[0]`` of a 0-stride broadcast:

        gb[r, j]      = g[r, j] * a[j]                 (grad_b, chunk c owns its rows)
        part[c, j]    = sum over rows r of chunk c of g[r, j] * b[r, j]   (grad_a partial)

    For a scalar g the partial is the plain sum of b (g is applied by ``combine``), as
    in ``reduce_term``, so the two paths agree bit for bit."""
    n = a.size
    rows = b.size // n
    for c in range(c0, c1):
        acc = part[c]
        for j in range(n):
            acc[j] = 0
        for r in range(c * rows_per_chunk, min(rows, (c + 1) * rows_per_chunk)):
            o = r * n
            br = b[o:o + n]
            gr = gb[o:o + n]
            if full_g:
                ur = g[o:o + n]
                for j in range(n):
                    gr[j] = ur[j] * a[j]
                    acc[j] += ur[j] * br[j]
            else:
                s = g[0]
                for j in range(n):
                    gr[j] = s * a[j]
                    acc[j] += br[j]


@njit(**PARALLEL_IEEE_DIV)
def mul_grads_rows_parallel(g, full_g, a, b, gb, part, rows_per_chunk):
    for c in prange(part.shape[0]):
        mul_grads_rows(g, full_g, a, b, gb, part, rows_per_chunk, c, c + 1)
