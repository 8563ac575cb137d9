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
strides, coalesced dimensions, contiguous lane blocks); this module chooses the loop nest
and the chunks, kernels/broadcast_sum_loops.py holds the loop nests.

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

from ..runtime.jit import CHUNK, PARALLEL_MIN
from .broadcast_sum_loops import (
    combine,
    lane_sums,
    lane_sums_parallel,
    mul_grads_rows,
    mul_grads_rows_parallel,
    reduce_flat,
    reduce_flat_parallel,
    reduce_kept_lane,
    reduce_kept_lane_parallel,
    reduce_lane,
    reduce_lane_parallel,
    rows_sum,
    scale_in_place,
)
from .strided_apply import (
    BLOCK,
    COPY,
    DIV,
    MUL,
    broadcast_apply,
    broadcast_shapes,
    c_order_view,
    coalesce,
    flat_operand,
    leading_rows_nest,
)

MAX_CHUNKS = 16      # reduction partials at most (fixed: independent of threads)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _chunks_wanted(total: int) -> int:
    """How many partials a reduction of ``total`` terms may cut its rows into: one per
    CHUNK terms, at most MAX_CHUNKS."""
    return min(MAX_CHUNKS, max(1, total // CHUNK))


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
    (``lane_sums``), then the a rows of b sums added (``_bias_rows_sum``). Deterministic
    at any thread count; the general plan adds the same terms in another order. Used for
    a per-channel scale's gradient ([16, 8, 8, 8] to [1, 8, 1, 1]), which the general
    plan computes several times slower (docs/benchmarks.md#reductions)."""
    sums = np.empty(a * b, out.dtype)
    _rows_along_lanes(op, fu, fv, sums, n)
    return _bias_rows_sum(COPY, sums, sums, out, a, b, b, scale)


def _rows_along_lanes(op: int, fu: np.ndarray, fv: np.ndarray, out: np.ndarray,
                      n: int) -> None:
    """``lane_sums`` of every row of flat C-contiguous [out.size, n] u and v into flat
    ``out``, in parallel runs of rows from PARALLEL_MIN elements."""
    if out.size * n >= PARALLEL_MIN:
        lane_sums_parallel(op, fu, fv, out, n, max(1, CHUNK // n))
    else:
        lane_sums(op, fu, fv, out, n, 0, out.size)


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
    strides us, vs (0: one row that every row reads): ``rows_sum`` in the chunks of
    ``bias_rows_plan``."""
    rows_sum(op, fu, fv, out.reshape(-1), rows, us, vs, *bias_rows_plan(rows, out.size),
             out.dtype.type(scale))
    return out


def bias_rows_plan(rows: int, n: int) -> tuple[int, int]:
    """(chunks, rows per chunk) of a sum over the rows of [rows, n]: as the general plan's
    kept-lane reduction cuts them, or (0, rows) for one pass in the calling thread
    (fewer than 2 CHUNK elements)."""
    want = _chunks_wanted(rows * n)
    return (0, rows) if want == 1 else _row_chunks(rows, _ceil_div(n, BLOCK), want)


def _unsummed(op: int, u: np.ndarray, v: np.ndarray, shape: tuple,
              scale: float) -> np.ndarray:
    """``reduce_term`` where no axis is summed: ``scale * f(u, v)`` of ``shape``, a
    strided operand read as the element-wise ops read it (``c_order_view``). The
    reduction loops would gather strided lanes one by one, several times slower than
    the copy (docs/benchmarks.md#element-wise), and start each sum from +0, which turns
    a -0.0 term into +0.0."""
    if op == COPY:
        out = np.array(u, order="C").reshape(shape)
    else:
        out = broadcast_apply(op, c_order_view(u), c_order_view(v)).reshape(shape)
    if scale != 1:
        scale_in_place(out.reshape(-1), out.dtype.type(scale))
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
        (reduce_flat_parallel if u.size >= PARALLEL_MIN else reduce_flat)(
            op, u.reshape(-1), v.reshape(-1), u.dtype.type(scale), out.reshape(-1))
        return out
    nd = len(full_shape)
    if len(shape) > nd:
        raise ValueError(f"sum_to_shape: shape {shape} has more dims than {full_shape}")
    pshape = (1,) * (nd - len(shape)) + tuple(shape)
    for s, f in zip(pshape, full_shape):
        if s != 1 and s != f:
            raise ValueError(f"sum_to_shape: shape {shape} does not broadcast to "
                             f"{full_shape}")
    if pshape == tuple(full_shape) and 0 not in full_shape:
        return _unsummed(op, u, v, tuple(shape), scale)
    out = np.empty(shape, u.dtype)
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
                scale_in_place(flat_out, out.dtype.type(scale))
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
    want = _chunks_wanted(total)
    if lane_kept:
        tasks = (nk // n) * ((n + BLOCK - 1) // BLOCK)
        nchunks, rpc = _row_chunks(rows, tasks, want)
        part = flat_out.reshape(1, nk) if nchunks == 1 else np.empty((nchunks, nk), out.dtype)
        if parallel:
            reduce_kept_lane_parallel(op, fu, fv, part, kshape, kstr, rshape, rstr, n,
                                       su[-1], sv[-1], rpc)
        else:
            reduce_kept_lane(op, fu, fv, part, kshape, kstr, rshape, rstr, n,
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
            reduce_lane_parallel(op, fu, fv, part, kshape, kstr, rshape, rstr, n,
                                  su[-1], sv[-1], rpc, lpc)
        else:
            reduce_lane(op, fu, fv, part, kshape, kstr, rshape, rstr, n,
                         su[-1], sv[-1], rpc, lpc, 0, nchunks * nk)
    if nchunks > 1:
        combine(part, flat_out, scale)
    elif scale != 1:
        scale_in_place(flat_out, scale)
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
    nchunks, rpc = _row_chunks(rows, _ceil_div(n, BLOCK), _chunks_wanted(total))
    gu = np.empty(u.shape, u.dtype)
    gw = np.empty(shape, w.dtype)
    flat_gu = gu.reshape(-1)
    part = flat_gu.reshape(1, n) if nchunks == 1 else np.empty((nchunks, n), u.dtype)
    args = (g.reshape(-1), full_g, u.reshape(-1), w.reshape(-1), gw.reshape(-1), part, rpc)
    if total >= PARALLEL_MIN:
        mul_grads_rows_parallel(*args)
    else:
        mul_grads_rows(*args, 0, nchunks)
    scale = u.dtype.type(scale)
    if nchunks > 1:
        combine(part, flat_gu, scale)
    elif scale != 1:
        scale_in_place(flat_gu, scale)
    return gu, gw
