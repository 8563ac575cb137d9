"""Sums over broadcast axes: the backward of broadcasting, fused with the product or
quotient that precedes it (derivations:
docs/derivations.md#broadcasting-and-the-reduction-of-gradients).

* ``sum_to_shape(g, shape)``: ``g`` summed over the axes broadcast to reach ``g.shape``
  from ``shape``; the result has exactly ``shape``.
* ``reduce_term(op, u, v, shape, scale)``: ``scale * sum_to_shape(op(u, v), shape)``
  for op COPY, MUL or DIV, without materialising ``op(u, v)`` (e.g. mul's grad_a = sum
  of g*b over the broadcast axes).
* ``mul_grads(g, u, w)``: both gradients of ``u * w`` when ``u`` is broadcast over the
  leading axes of ``w`` (a bias-like vector), in one pass over ``w`` that writes
  ``g * u`` and accumulates the partial sums of ``g * w``.

The operands are planned as in kernels/strided_apply.py (flat buffers, per-dimension
strides, coalesced dimensions, contiguous lane blocks).

Reductions are race-free and deterministic: each parallel task owns a block of output
elements, or, when there are too few output elements to share out, a private partial
over a fixed chunk of the reduced rows; partials are then summed in chunk order. Chunk
counts depend only on the shapes, never on the thread count, so results are bitwise
identical at 1 and 2 threads.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import njit, prange

from ..runtime.jit import (
    CHUNK,
    PARALLEL_IEEE_DIV,
    PARALLEL_MIN,
    SERIAL_IEEE_DIV,
    SERIAL_IEEE_DIV_REASSOC_NSZ,
)
from .strided_apply import (
    BLOCK,
    COPY,
    DIV,
    MUL,
    broadcast_shapes,
    coalesce,
    flat_operand,
    lanes,
    leading_rows_nest,
    operand_offsets,
)

MAX_CHUNKS = 16      # reduction partials at most (fixed: independent of threads)
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
def _reduce_kept_lane(op, u, v, part, kshape, kstr, rshape, rstr, n, us, vs,
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
def _reduce_rows(op, u, v, out, rows, us, vs):
    """out[j] = sum over the rows r of f(u[r, j], v[r, j]) in row order, for u, v flat
    [rows, n] (n = out.size) where an operand of row stride 0 (``us`` / ``vs``) is one
    row that every row reads: a bias's gradient, without the general plan."""
    for j in range(out.size):
        out[j] = 0
    _accumulate_rows(op, out, u, v, rows, us, vs)


@njit(**PARALLEL_IEEE_DIV)
def _reduce_rows_parallel(op, u, v, part, rows, us, vs, rows_per_chunk):
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
def _reduce_lane(op, u, v, part, kshape, kstr, rshape, rstr, n, us, vs,
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
def _reduce_kept_lane_parallel(op, u, v, part, kshape, kstr, rshape, rstr, n, us, vs,
                               rows_per_chunk):
    ntasks = part.shape[0] * (part.shape[1] // n) * ((n + BLOCK - 1) // BLOCK)
    per = (ntasks + TASK_GROUPS - 1) // TASK_GROUPS
    for grp in prange((ntasks + per - 1) // per):
        _reduce_kept_lane(op, u, v, part, kshape, kstr, rshape, rstr, n, us, vs,
                          rows_per_chunk, grp * per, min(ntasks, (grp + 1) * per))


@njit(**PARALLEL_IEEE_DIV)
def _reduce_lane_parallel(op, u, v, part, kshape, kstr, rshape, rstr, n, us, vs,
                          rows_per_chunk, lanes_per_chunk):
    ntasks = part.shape[0] * part.shape[1]
    per = (ntasks + TASK_GROUPS - 1) // TASK_GROUPS
    for grp in prange((ntasks + per - 1) // per):
        _reduce_lane(op, u, v, part, kshape, kstr, rshape, rstr, n, us, vs,
                     rows_per_chunk, lanes_per_chunk, grp * per, min(ntasks, (grp + 1) * per))


@njit(**SERIAL_IEEE_DIV_REASSOC_NSZ)
def _lane_sums(op, u, v, out, n, r0, r1):
    """out[r] = sum over the n lanes of row r of f(u[r, :], v[r, :]) for r0 <= r < r1,
    for u and v flat C-contiguous [rows, n]: blocks of BLOCK lanes, each summed like
    ``_reduce_block`` (reassociated at compile time), added in order, as ``_reduce_lane``
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
def _lane_sums_parallel(op, u, v, out, n, rows_per_run):
    """``_lane_sums`` in fixed runs of ``rows_per_run`` rows, one prange iteration each."""
    for c in prange((out.size + rows_per_run - 1) // rows_per_run):
        r0 = c * rows_per_run
        _lane_sums(op, u, v, out, n, r0, min(out.size, r0 + rows_per_run))


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
def _reduce_flat(op, u, v, scale, out):
    """out[0] = scale * sum of f(u, v) over contiguous 1-D u, v (size >= 1): partial sums
    over fixed chunks of CHUNK elements, added in chunk order."""
    part = np.empty((u.size + CHUNK - 1) // CHUNK, out.dtype)
    for c in range(part.size):
        part[c] = _flat_chunk(op, u, v, c)
    _ordered_total(part, scale, out)


@njit(**PARALLEL_IEEE_DIV)
def _reduce_flat_parallel(op, u, v, scale, out):
    """``_reduce_flat`` with the chunks shared among threads (same chunks, same order)."""
    part = np.empty((u.size + CHUNK - 1) // CHUNK, out.dtype)
    for c in prange(part.size):
        part[c] = _flat_chunk(op, u, v, c)
    _ordered_total(part, scale, out)


@njit(**SERIAL_IEEE_DIV)
def _combine(part, out, scale):
    """out[k] = scale * sum over chunks c (in order) of part[c, k]."""
    one = out.dtype.type(1)
    for k in range(out.size):
        s = part[0, k]
        for c in range(1, part.shape[0]):
            s += part[c, k]
        out[k] = s if scale == one else s * scale


@njit(**SERIAL_IEEE_DIV)
def _scale(x, scale):
    for i in range(x.size):
        x[i] *= scale


# -- mul's backward, both gradients in one pass --------------------------------------------

@njit(**SERIAL_IEEE_DIV)
def _mul_grads_rows(g, full_g, a, b, gb, part, rows_per_chunk, c0, c1):
    """Chunks c0..c1 of mul's backward for a vector ``a[n]`` broadcast over the rows of
    ``b[rows, n]`` (both flat, contiguous), upstream ``g`` full-size (``full_g``) or the
    scalar ``g[0]`` of a 0-stride broadcast:

        gb[r, j]      = g[r, j] * a[j]                 (grad_b, chunk c owns its rows)
        part[c, j]    = sum over rows r of chunk c of g[r, j] * b[r, j]   (grad_a partial)

    For a scalar g the partial is the plain sum of b (g is applied by ``_combine``), as
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
def _mul_grads_rows_parallel(g, full_g, a, b, gb, part, rows_per_chunk):
    for c in prange(part.shape[0]):
        _mul_grads_rows(g, full_g, a, b, gb, part, rows_per_chunk, c, c + 1)


# -- planning (Python) ------------------------------------------------------------------

def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _row_chunks(rows: int, tasks: int, want: int) -> tuple[int, int]:
    """(chunks, rows per chunk) of the reduced rows when the lane axis is kept: one chunk
    when there are enough output tasks (lane blocks) to keep the threads busy, else up
    to ``want`` (from the shapes only, so the sum order does not depend on threads)."""
    nchunks = 1 if tasks >= MAX_CHUNKS // 2 else min(rows, want)
    rpc = _ceil_div(rows, nchunks)
    return _ceil_div(rows, rpc), rpc


@functools.lru_cache(maxsize=512)
def _trailing_lanes(full_shape: tuple, pshape: tuple) -> int:
    """n when ``pshape`` keeps the leading axes of ``full_shape`` and sums all the axes
    after them, so that a C-contiguous operand is [rows, n] summed along each row (rows,
    n > 1); else 0."""
    k = 0
    while k < len(full_shape) and pshape[k] == full_shape[k]:
        k += 1
    if any(p != 1 for p in pshape[k:]):
        return 0
    n, rows = math.prod(full_shape[k:]), math.prod(full_shape[:k])
    return n if n > 1 and rows > 1 else 0


@functools.lru_cache(maxsize=512)
def _middle_block(full_shape: tuple, pshape: tuple) -> tuple | None:
    """(a, b, n) when ``pshape`` keeps a block of middle axes of ``full_shape`` and sums
    the a leading and n trailing elements around it ([N, C, H, W] to [1, C, 1, 1]: a
    C-contiguous operand is [a, b, n]; a, n > 1); else None."""
    nd = len(full_shape)
    j = 0
    while j < nd and pshape[j] == 1:
        j += 1
    k = j
    while k < nd and pshape[k] == full_shape[k] != 1:
        k += 1
    if j == k or pshape[k:].count(1) != nd - k:
        return None
    a, b, n = math.prod(full_shape[:j]), math.prod(full_shape[j:k]), math.prod(full_shape[k:])
    return (a, b, n) if a > 1 and n > 1 else None


def _middle_sums(op: int, fu: np.ndarray, fv: np.ndarray, out: np.ndarray, a: int, b: int,
                 n: int, scale: float) -> np.ndarray:
    """out[j] = scale * sum over i < a, l < n of f(u[i, j, l], v[i, j, l]) for flat
    C-contiguous u, v of [a, b, n]: each of the a b rows summed along its n lanes
    (``_lane_sums``), then the a rows of b sums added (``_bias_rows_sum``). Deterministic
    at any thread count; the general plan adds the same terms in another order. Used for
    a per-channel scale's gradient ([16, 8, 8, 8] to [1, 8, 1, 1]), which the general
    plan computes several times slower (docs/benchmarks.md#reductions)."""
    sums = np.empty(a * b, out.dtype)
    _rows_along_lanes(op, fu, fv, sums, n)
    return _bias_rows_sum(COPY, sums, sums, out, a, b, b, scale)


def _rows_along_lanes(op: int, fu: np.ndarray, fv: np.ndarray, out: np.ndarray,
                      n: int) -> None:
    """``_lane_sums`` of every row of flat C-contiguous [out.size, n] u and v into flat
    ``out``, in parallel runs of rows from PARALLEL_MIN elements."""
    if out.size * n >= PARALLEL_MIN:
        _lane_sums_parallel(op, fu, fv, out, n, max(1, CHUNK // n))
    else:
        _lane_sums(op, fu, fv, out, n, 0, out.size)


def _loop_nest(u: np.ndarray, v: np.ndarray, pshape: tuple, full_shape: tuple) -> tuple:
    """(sizes, u's buffer, v's buffer, [u's, v's, the result's strides]): the coalesced
    loop nest of a reduction of u, v over ``full_shape`` to ``pshape`` (same length; the
    result's strides are 0 along the summed axes)."""
    if u.flags.c_contiguous and v.flags.c_contiguous:
        nest = leading_rows_nest(full_shape, (u.shape, v.shape, pshape))
        if nest is not None:  # e.g. a bias gradient: a sum over leading rows
            return nest[0], u.reshape(-1), v.reshape(-1), nest[1]
    nd = len(full_shape)
    fu, su = flat_operand(u, nd)
    fv, sv = flat_operand(v, nd)
    # the result's own strides: contiguous over its dims, 0 where it is broadcast
    sx = [0] * nd
    step = 1
    for d in range(nd - 1, -1, -1):
        if pshape[d] != 1:
            sx[d] = step
            step *= pshape[d]
    sizes, strides = coalesce(full_shape, [su, sv, sx])
    return sizes, fu, fv, strides


def _bias_rows_sum(op: int, fu: np.ndarray, fv: np.ndarray, out: np.ndarray, rows: int,
                   us: int, vs: int, scale: float) -> np.ndarray:
    """out[j] = scale * sum over the rows r of f(u[r, j], v[r, j]) for flat u, v of row
    strides us, vs (0: one row that every row reads): chunks of rows as the general
    plan's kept-lane reduction cuts them, each summed row by row."""
    n = out.size
    flat_out = out.reshape(-1)
    want = min(MAX_CHUNKS, max(1, rows * n // CHUNK))
    if want == 1:  # fewer than 2 CHUNK = PARALLEL_MIN elements: one chunk, this thread
        _reduce_rows(op, fu, fv, flat_out, rows, us, vs)
    else:
        nchunks, rpc = _row_chunks(rows, _ceil_div(n, BLOCK), want)
        part = flat_out.reshape(1, n) if nchunks == 1 else np.empty((nchunks, n), out.dtype)
        _reduce_rows_parallel(op, fu, fv, part, rows, us, vs, rpc)
        if nchunks > 1:
            _combine(part, flat_out, out.dtype.type(scale))
            return out
    if scale != 1:
        _scale(flat_out, out.dtype.type(scale))
    return out


def reduce_term(op: int, u: np.ndarray, v: np.ndarray | None, shape: tuple,
                scale: float = 1.0, full_shape: tuple | None = None) -> np.ndarray:
    """``scale * sum_to_shape(f(u, v), shape)`` without materialising ``f(u, v)``, for
    ``op`` one of COPY (f = u), MUL (u v) and DIV (u / v).

    ``u`` and ``v`` broadcast to ``full_shape`` (default: their broadcast shape), and
    ``shape`` must broadcast to it too; the sum runs over the axes along which ``shape``
    was broadcast. With ``op == COPY``, ``v`` is ignored (may be None). The result has
    exactly ``shape`` and ``u``'s dtype.
    """
    if op not in (COPY, MUL, DIV):
        raise ValueError(f"reduce_term: op must be COPY, MUL or DIV, got {op}")
    if v is None:
        v = u
    if full_shape is None:
        full_shape = broadcast_shapes("reduce_term", u.shape, v.shape)
    if op == MUL and v.size and not any(v.strides):
        # linear in a scalar broadcast factor (e.g. the g of sum().backward()):
        # sum(u * c) = c * sum(u), which skips a multiply per element
        op, scale, v = COPY, scale * v.flat[0], u
    elif op == MUL and u.size and not any(u.strides):
        op, scale, u = COPY, scale * u.flat[0], v
    if (u.shape == full_shape and v.shape == full_shape and u.size
            and u.flags.c_contiguous and v.flags.c_contiguous
            and shape.count(1) == len(shape)):
        # everything summed into one element: a flat chunked reduction, no planning
        out = np.empty(shape, u.dtype)
        (_reduce_flat if u.size < PARALLEL_MIN else _reduce_flat_parallel)(
            op, u.reshape(-1), v.reshape(-1), u.dtype.type(scale), out.reshape(-1))
        return out
    nd = len(full_shape)
    if len(shape) > nd:
        raise ValueError(f"sum_to_shape: shape {shape} has more dims than {full_shape}")
    out = np.empty(shape, u.dtype)
    pshape = (1,) * (nd - len(shape)) + tuple(shape)
    for s, f in zip(pshape, full_shape):
        if s != 1 and s != f:
            raise ValueError(f"sum_to_shape: shape {shape} does not broadcast to "
                             f"{full_shape}")
    if out.size == 0:
        return out
    if 0 in full_shape:
        out[...] = out.dtype.type(0) * out.dtype.type(scale)  # scale * (empty sum)
        return out
    contiguous = u.flags.c_contiguous and v.flags.c_contiguous
    if contiguous and u.shape == v.shape == full_shape:
        n = _trailing_lanes(full_shape, pshape)
        if n and (out.size >= MAX_CHUNKS // 2 or n <= BLOCK):
            # each row summed along its lanes (what the general plan does for these
            # shapes, where it takes one chunk, without its per-row calls)
            flat_out = out.reshape(-1)
            _rows_along_lanes(op, u.reshape(-1), v.reshape(-1), flat_out, n)
            if scale != 1:
                _scale(flat_out, out.dtype.type(scale))
            return out
        middle = _middle_block(full_shape, pshape)
        if middle:
            return _middle_sums(op, u.reshape(-1), v.reshape(-1), out, *middle, scale)
    sizes, fu, fv, (su, sv, sx) = _loop_nest(u, v, pshape, full_shape)
    if (len(sizes) == 2 and sx == [0, 1] and su[1] == sv[1] == 1
            and su[0] in (0, sizes[1]) and sv[0] in (0, sizes[1])):
        # rows summed into one row: the gradient of a bias (u, v whole rows or one row),
        # in the general plan's chunks without its per-row calls
        return _bias_rows_sum(op, fu, fv, out, sizes[0], su[0], sv[0], scale)
    if not sizes:
        sizes, su, sv, sx = [1], [0], [0], [1]
    n = sizes[-1]
    lane_kept = sx[-1] != 0
    kept = [d for d in range(len(sizes) - 1) if sx[d] != 0]
    red = [d for d in range(len(sizes) - 1) if sx[d] == 0]
    kshape = np.array([sizes[d] for d in kept], np.int64)
    kstr = np.array([[su[d] for d in kept], [sv[d] for d in kept]], np.int64).reshape(2, -1)
    rshape = np.array([sizes[d] for d in red], np.int64)
    rstr = np.array([[su[d] for d in red], [sv[d] for d in red]], np.int64).reshape(2, -1)
    rows = 1
    for d in red:
        rows *= sizes[d]
    nk = out.size
    total = rows * nk * (1 if lane_kept else n)
    flat_out = out.reshape(-1)
    scale = out.dtype.type(scale)
    parallel = total >= PARALLEL_MIN
    # chunk the reduced rows (and, if the lane axis is reduced, the lanes) only when there
    # are too few output tasks to keep the threads busy; counts depend on shapes only
    want = min(MAX_CHUNKS, max(1, total // CHUNK))
    if lane_kept:
        tasks = (nk // n) * ((n + BLOCK - 1) // BLOCK)
        nchunks, rpc = _row_chunks(rows, tasks, want)
        part = flat_out.reshape(1, nk) if nchunks == 1 else np.empty((nchunks, nk), out.dtype)
        if parallel:
            _reduce_kept_lane_parallel(op, fu, fv, part, kshape, kstr, rshape, rstr, n,
                                       su[-1], sv[-1], rpc)
        else:
            _reduce_kept_lane(op, fu, fv, part, kshape, kstr, rshape, rstr, n,
                              su[-1], sv[-1], rpc, 0, nchunks * tasks)
    else:
        if nk >= MAX_CHUNKS // 2:
            crow, clane = 1, 1
        else:
            crow = min(rows, want)
            clane = min(_ceil_div(n, BLOCK), _ceil_div(want, crow))
        rpc = _ceil_div(rows, crow)
        crow = _ceil_div(rows, rpc)
        lpc = _ceil_div(_ceil_div(n, clane), BLOCK) * BLOCK
        clane = _ceil_div(n, lpc)
        nchunks = crow * clane
        part = flat_out.reshape(1, nk) if nchunks == 1 else np.empty((nchunks, nk), out.dtype)
        if parallel:
            _reduce_lane_parallel(op, fu, fv, part, kshape, kstr, rshape, rstr, n,
                                  su[-1], sv[-1], rpc, lpc)
        else:
            _reduce_lane(op, fu, fv, part, kshape, kstr, rshape, rstr, n,
                         su[-1], sv[-1], rpc, lpc, 0, nchunks * nk)
    if nchunks > 1:
        _combine(part, flat_out, scale)
    elif scale != 1:
        _scale(flat_out, scale)
    return out


def sum_to_shape(g: np.ndarray, shape: tuple) -> np.ndarray:
    """``g`` summed over the axes broadcast to reach ``g.shape`` from ``shape`` (leading
    axes ``shape`` lacks, and axes where ``shape`` has size 1): the gradient of an operand
    of shape ``shape`` that was broadcast to ``g.shape``. The result has exactly
    ``shape`` and ``g``'s dtype; it is ``g`` itself when the shapes already match.
    ``g`` may be any strided view, including a 0-stride broadcast (read in place)."""
    shape = tuple(shape)
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    if (lead > 0 and shape and shape[-1] > 1 and g.shape[lead:] == shape
            and g.flags.c_contiguous and g.size):
        # a bias's gradient: g's leading axes summed, as reduce_term would, without its
        # planning (most of the call's time for a small g)
        out = np.empty(shape, g.dtype)
        flat = g.reshape(-1)
        return _bias_rows_sum(COPY, flat, flat, out, g.size // out.size, out.size, out.size,
                              1.0)
    return reduce_term(COPY, g, None, shape, 1.0, g.shape)


def mul_grads(g: np.ndarray, u: np.ndarray, w: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray] | None:
    """Both gradients of ``u * w`` in one pass over ``w``, when ``w`` is the full-size
    operand (C-contiguous, ``w.shape == g.shape``) and ``u`` is broadcast over leading
    axes only (``u`` C-contiguous, its shape a suffix of ``w``'s after dropping leading
    1s), with ``g`` C-contiguous of that shape or a 0-stride scalar broadcast, all of one
    float dtype: returns ``(grad_u, grad_w)`` with

        grad_w = g * u                 (full size)
        grad_u = sum over the broadcast rows of g * w       (u's shape)

    bitwise equal to ``reduce_term(MUL, g, w, u.shape)`` and ``broadcast_apply(MUL, g,
    u)``. Returns None when the shapes do not fit (the caller takes the two-pass path).
    """
    shape = g.shape
    if not (w.shape == shape and g.dtype == u.dtype == w.dtype and u.size and w.size
            and u.dtype.kind == "f" and u.flags.c_contiguous and w.flags.c_contiguous):
        return None
    full_g = g.flags.c_contiguous
    if not full_g and any(g.strides):
        return None
    ushape = tuple(u.shape)
    while ushape and ushape[0] == 1:
        ushape = ushape[1:]
    if len(ushape) > len(shape) or shape[len(shape) - len(ushape):] != ushape:
        return None
    n = u.size
    rows = w.size // n
    if rows == 1 or n == 1:  # nothing broadcast, or a scalar u (reduce_term's flat sum)
        return None
    scale = 1.0
    if not full_g:
        scale = g.flat[0]
        g = np.full(1, scale, g.dtype)
    # the chunking of reduce_term's kept-lane path (shapes only, never the thread count)
    total = rows * n
    want = min(MAX_CHUNKS, max(1, total // CHUNK))
    nchunks = 1 if _ceil_div(n, BLOCK) >= MAX_CHUNKS // 2 else min(rows, want)
    rpc = _ceil_div(rows, nchunks)
    nchunks = _ceil_div(rows, rpc)
    gu = np.empty(u.shape, u.dtype)
    gw = np.empty(shape, w.dtype)
    flat_gu = gu.reshape(-1)
    part = flat_gu.reshape(1, n) if nchunks == 1 else np.empty((nchunks, n), u.dtype)
    args = (g.reshape(-1), full_g, u.reshape(-1), w.reshape(-1), gw.reshape(-1), part, rpc)
    if total >= PARALLEL_MIN:
        _mul_grads_rows_parallel(*args)
    else:
        _mul_grads_rows(*args, 0, nchunks)
    scale = u.dtype.type(scale)
    if nchunks > 1:
        _combine(part, flat_gu, scale)
    elif scale != 1:
        _scale(flat_gu, scale)
    return gu, gw
