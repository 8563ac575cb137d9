"""Matrix products on Numba's thread pool: a BLIS-style register-tiled GEMM as plain loop
nests, for ops/matmul.py (derivations: docs/derivations.md#matrix-product). No BLAS
call: BLAS would start a second thread pool that spins against Numba's.

``product(x, y, x_map, y_map, x_t, y_t)`` computes, for every output batch i,

    out[i, m, n] = sum_{k = 0}^{K-1} op(x)[m, k] op(y)[k, n]      (k ascending)

with op(x) = x[x_map[i]] or its transpose (``x_t``), and likewise for y. Transposed
operands are read in place, so ``a @ b``, ``g @ b^T`` and ``a^T @ g`` need no copies.

Register tile. MR x NR sums of ``out`` live in a stack array of constant shape that
LLVM keeps in vector registers for the whole k loop; its shape is kernels/tiles.py's, the
one of every tiled product here (MR = TILE_ROWS, NR = four vectors of the host's widest
registers). Step k costs MR broadcasts, NR / lanes vector loads and MR NR / lanes fused
multiply-adds. LLVM vectorises the tile's j loop and promotes it to registers only when
that loop is too long to unroll before the vectoriser runs: a 6 x 2-vector tile (the
BLIS Haswell shape) gets unrolled into scalar code, so the tile is MR x 4 vectors and
steps two values of k per pass. A last panel of at most one or two vectors of columns
(N not a multiple of NR) takes a tile of MR x one or two vectors instead
(``_narrow_tile``, ``_half_tile``: the same loop nest, ``tile_cols``). The tile takes its
operands as raw pointers (``gemm.data_pointer``): an array argument costs an atomic
reference-count update on every call.

Packing, per task (a block of output tiles):

* b: b is taken in blocks of ``depth`` values of k by NC columns, which stay in L2, each
  cut into NR-wide panels; ``depth`` is the host's (kernels/gemm_search.py: derived from
  its L1d and L2 sizes, confirmed by timing; KC_BYTES / itemsize in ``matrix_product``).
  The tile
  reads a panel's rows with unit stride: in place from a row-major b (row stride N), or
  from a contiguous copy when b is read transposed, when its block spans more than
  the host's span (IN_PLACE_SPAN, or the timed choice) and many rows of a read it
  (PACK_MIN_ROWS), or when the panel is
  narrower than NR: kc x NR, or kc x its tile's columns for a last partial panel
  (``tile_cols``; columns past N are zeros).
* a: each sliver of MR full rows by kc values of k is read in place, through a's row and
  k strides, and swept across the block's panels from L1 (three runs of kc values, or for
  a read transposed kc cache lines of MR values), so a copy would only add a pass over a
  per block. Only the last sliver, with fewer than MR rows left, is copied (rows past M
  are zeros, their sums discarded).
* Reading slivers and row-major panels in place saves a pass over each operand per
  block; it measured faster than packing every sliver and panel, for large products
  and for the conv GEMMs alike (docs/benchmarks.md#matmul).
* Serial products with one term per sum (an outer product), or one output row against a
  b that would be copied, skip the GEMM (``is_thin``, ``_thin_product``).
* K is cut into blocks of ``depth`` (one block when K is at most twice that:
  ``block_depth``); the tile of the first block starts from zero, the
  next ones from the partial sums stored in ``out`` (exact: a stored float is reloaded
  unchanged), so every element is still one FMA chain over k in ascending order.

Work split: tasks are blocks of whole output tiles of one batch (as even as the shape
allows), one per pool thread, all in one ``prange``; below ``runtime.jit.PARALLEL_WORK_MIN``
multiply-adds one task per batch runs in a plain loop (every task packs its own partial
slivers and panels, so extra tasks in one thread would only repeat that work). A
task owns its output block and no sum depends on the split, so results are bitwise
identical at any thread count. Each thread packs into its own buffer.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import (
    carray,
    config,
    get_thread_id,
    njit,
    prange,
    types,
)
from numba.extending import overload, register_jitable

from ..runtime.host import gemm_depth
from ..runtime.jit import (
    PARALLEL,
    PARALLEL_WORK_MIN,
    SERIAL,
    SERIAL_FMA,
    compiled_once,
    plain,
)
from . import buffers
from .activation import (
    BIAS_ALONG_COLUMNS,
    BIAS_ALONG_ROWS,
    NO_BIAS,
    activate_tile,
    add_bias_tile,
    apply_epilogue,
)
from .gemm import data_pointer, stack_buffer
from .gemm_search import Blocking, blocking
from .tiles import TILE_ROWS, panel_cols, tile_buffer

MR = TILE_ROWS  # rows of the register tile (kernels/tiles.py)
# Depth of a packed block of b, in bytes of k values (float32: 512 k), for
# ``matrix_product`` (called inside other kernels' loops, compiled with it as a constant);
# ``product`` takes the host's (kernels/gemm_search.py). No depth changes the bits (see
# "K is cut into blocks" above).
KC_BYTES = 2048
# Columns of b per packed block (a multiple of every NR): 256 x depth values are 512 KB,
# half of a Zen 4 core's L2. Each sliver of a is packed once per block, so a wider
# block packs a less often (docs/benchmarks.md#matmul).
NC = 256
# A row-major b is copied into panels where its block spans more than IN_PLACE_SPAN
# bytes and at least PACK_MIN_ROWS rows of a (a task's) sweep each panel; else its
# panels are read in place. A panel read in place strides through a block of b as wide
# as the span; past a few hundred KB its rows evict each other from L1 and L2, and with
# many rows of a per panel a contiguous copy pays for itself. Below the span, or with
# few rows (the 32-row conv GEMMs), the copy costs more than it saves
# (docs/benchmarks.md#matmul). Packing past L1d instead (batches of 128 x 128 products,
# whose 512-byte rows map a panel onto half of L1d's sets) helped a @ b and hurt a^T @ b
# (docs/benchmarks.md#matmul). This is the guess; kernels/gemm_search.py times it against
# a quarter and four times as wide on the host.
IN_PLACE_SPAN = np.uint64(128 << 10)
PACK_MIN_ROWS = np.uint64(128)
# Whether an a read transposed (a^T @ g, a weight gradient) whose block spans more than
# the span is copied per block, in groups of GROUP_ROWS rows, before its slivers sweep
# the block's panels. Read in place, a sliver's MR values of one k sit one row of a
# apart, and with a power-of-two row length its kc lines fall into a few sets of L1d and
# L2 and evict each other; a group copy reads each k's GROUP_ROWS values as one cache
# line of float32. A block within the span (batches of 128 x 128) stays in L2 and reads
# as fast in place, where the copy would only add a pass (docs/benchmarks.md#matmul).
# The guess for ``product`` (kernels/gemm_search.py times both); ``matrix_product``,
# inside other kernels' loops on small matrices, reads in place as when those kernels
# were tuned.
PACK_T = True
GROUP_ROWS = np.uint64(16)

A_PAIR = 2 * MR  # a's values of one tile at k and k + 1
# The same constants unsigned, for the index arithmetic of the kernels.
MR_U, NC_U = np.uint64(MR), np.uint64(NC)
_TWO, _FOUR = np.uint64(2), np.uint64(4)  # tile widths in vectors: tile_cols


@register_jitable(inline="always")
def block_depth(depth, K):
    """Values of k per block of b: ``depth``, or all of K when K is at most twice that
    (one block then spares the tile a reload of its sums, and the block is still small)."""
    return K if K <= 2 * depth else depth


@register_jitable(inline="always")
def a_rows(pack_t):
    """Rows of a's packing buffer (times the depth): a group, or one sliver."""
    return GROUP_ROWS if pack_t else MR_U


# -- the register tile -------------------------------------------------------------------


@njit(**SERIAL_FMA, inline="always")
def _load_a(a, at, a_row, a_k, s):
    """a_k[s, r] = a[at + r a_row]: the tile's column of a that starts at ``at``."""
    for r in range(MR_U):
        a_k[s, r] = a[at + r * a_row]


@njit(**SERIAL)
def _copy_rows(src, s0, lds, dst, d0, ldd, rows, cols):
    """dst[d0 + r ldd + j] = src[s0 + r lds + j] for r < rows, j < cols (pointers): a
    tile's sums into or out of ``out``. Inside the tile, where a full tile's counts are
    constants, LLVM unrolls this copy into one scalar move per element (192 each way,
    most of a tile's time when k is short); as a function with the counts as arguments
    it copies whole vectors."""
    for r in range(rows):
        s = s0 + r * lds
        d = d0 + r * ldd
        for j in range(cols):
            dst[d + j] = src[s + j]


@njit(**SERIAL_FMA, inline="always")
def _tile_sums(a, a0, a_row, a_step, bp, b0, b_step, kc, out, o0, ldo, rows, cols, first, nr):
    """out[o0 + r ldo + j] (+)= sum_{k < kc} a[a0 + k a_step + r a_row] bp[b0 + k b_step + j]
    for r < rows, j < cols <= nr (k ascending): one MR x nr tile (nr a constant: NR, or
    one or two vectors, ``tile_cols``) of the product over a sliver of a (packed,
    a_step = MR and a_row = 1, or read in place) and a panel of b (packed, b_step = nr,
    or read in place). a, bp and out are pointers (gemm.data_pointer): as arrays, their
    atomic reference-count updates cost more than the tile's own work when k is short
    (docs/benchmarks.md#matmul).
    ``first``: the tile starts from zero, else from the partial sums in ``out``.

    The j loop is innermost so that LLVM vectorises it (NR / lanes vectors of b times a
    broadcast value of a per row) and keeps the MR x NR sums in registers; it does so
    only when that loop is too long to unroll fully first, hence two values of k per
    pass (the terms are still added one k after the other). Every index and count is
    unsigned: Numba then indexes without the fix-up for negative indices, and LLVM sees
    whole vectors in bp[b0 + k NR + j]. ``fastmath={"contract"}``: one FMA per term."""
    sums = tile_buffer(out)
    acc = carray(sums, (MR, nr))
    a_k = carray(stack_buffer(A_PAIR, acc.dtype), (2, MR))
    full = rows == MR_U and cols == nr
    if first or not full:
        for r in range(MR_U):
            for j in range(nr):
                acc[r, j] = 0
    if not first:
        _copy_rows(out, o0, ldo, sums, np.uint64(0), nr, rows, cols)
    one, two = np.uint64(1), np.uint64(2)
    for k in range(np.uint64(0), kc - kc % two, two):
        _load_a(a, a0 + k * a_step, a_row, a_k, 0)
        _load_a(a, a0 + (k + one) * a_step, a_row, a_k, 1)
        bk = b0 + k * b_step
        for j in range(nr):
            b0j = bp[bk + j]
            b1j = bp[bk + b_step + j]
            for r in range(MR_U):
                acc[r, j] = acc[r, j] + a_k[0, r] * b0j
                acc[r, j] = acc[r, j] + a_k[1, r] * b1j
    if kc % two:
        k = kc - one
        _load_a(a, a0 + k * a_step, a_row, a_k, 0)
        bk = b0 + k * b_step
        for j in range(nr):
            b0j = bp[bk + j]
            for r in range(MR_U):
                acc[r, j] = acc[r, j] + a_k[0, r] * b0j
    _copy_rows(sums, np.uint64(0), nr, out, o0, ldo, rows, cols)


@njit(**SERIAL_FMA)
def _tile(a, a0, a_row, a_step, bp, b0, b_step, kc, out, o0, ldo, rows, cols, first):
    """_tile_sums on a full-width tile, MR x NR."""
    _tile_sums(a, a0, a_row, a_step, bp, b0, b_step, kc, out, o0, ldo, rows, cols, first,
               panel_cols(out))


# The last panel of a b whose width is not a multiple of NR is computed by a tile of one
# or two vectors per row where it is that narrow, instead of NR / lanes: a full-width
# tile over a last panel of 16 or 32 columns spends most of its FMAs on zero padding
# (the same bits; the 'cols' conv weight gradient's blocks are such products).
# LLVM vectorises a tile's j loop only from this many columns: a shorter one is unrolled
# into scalar code first, and 8-column tiles measured slower than full ones
# (docs/benchmarks.md#matmul).
TILE_COLS_MIN = np.uint64(16)


@register_jitable
def tile_cols(width, nr):
    """Columns of the tile that computes a panel of ``width`` <= nr columns of the
    product (nr = NR): one, two or four vectors, a narrower tile only where it has
    TILE_COLS_MIN columns. (Unsigned constants: the kernels pass uint64, and uint64 with
    int64 is float64 to Numba.)"""
    for cols in (nr // _FOUR, nr // _TWO):
        if width <= cols and cols >= TILE_COLS_MIN:
            return cols
    return nr


@njit(**SERIAL_FMA)
def _narrow_tile(a, a0, a_row, a_step, bp, b0, b_step, kc, out, o0, ldo, rows, cols, first):
    """_tile_sums on a tile of MR x one vector."""
    _tile_sums(a, a0, a_row, a_step, bp, b0, b_step, kc, out, o0, ldo, rows, cols, first,
               panel_cols(out) // _FOUR)


@njit(**SERIAL_FMA)
def _half_tile(a, a0, a_row, a_step, bp, b0, b_step, kc, out, o0, ldo, rows, cols, first):
    """_tile_sums on a tile of MR x two vectors."""
    _tile_sums(a, a0, a_row, a_step, bp, b0, b_step, kc, out, o0, ldo, rows, cols, first,
               panel_cols(out) // _TWO)


# -- packing -------------------------------------------------------------------------------


@njit(**SERIAL)
def _pack_sliver(x, x0, x_t, M, K, i0, rows, pc, kc, ap):
    """ap[k MR + r] = op(x)[i0 + r, pc + k] for k < kc, r < rows (zeros for the rows past
    ``rows``, whose sums are discarded); op(x) is [M, K], x itself [K, M] when ``x_t``."""
    for k in range(kc):
        for r in range(rows, MR_U):
            ap[k * MR_U + r] = 0
    if x_t:
        for k in range(kc):
            src = x0 + (pc + k) * M + i0
            for r in range(rows):
                ap[k * MR_U + r] = x[src + r]
    else:
        for r in range(rows):
            src = x0 + (i0 + r) * K + pc
            for k in range(kc):
                ap[k * MR_U + r] = x[src + k]


@njit(**SERIAL)
def _pack_group_t(x, x0, M, g0, g1, pc, kc, ap):
    """Rows g0 <= i < g1 of op(x) = x^T (x itself [K, M]) over k in [pc, pc + kc), as
    consecutive slivers: ap[s kc MR + k MR + r] = x[x0 + (pc + k) M + g0 + s MR + r]
    (zeros for rows past g1). Each k reads one contiguous run of x's row."""
    n = g1 - g0
    full = n // MR_U
    for k in range(kc):
        src = x0 + (pc + k) * M + g0
        for s in range(full):
            dst = s * kc * MR_U + k * MR_U
            for r in range(MR_U):
                ap[dst + r] = x[src + s * MR_U + r]
        if full * MR_U < n:
            dst = full * kc * MR_U + k * MR_U
            for r in range(MR_U):
                ap[dst + r] = x[src + full * MR_U + r] if full * MR_U + r < n else 0


@njit(**SERIAL)
def _pack_rows(y, y0, ldy, kc, j0, width, bp, p0):
    """bp[p0 + k nr + j] = y[y0 + k ldy + j0 + j]: a panel of a row-major b, its rows as
    long as its tile's (nr = tile_cols; zeros for j >= width)."""
    nr = tile_cols(width, panel_cols(bp))
    for k in range(kc):
        src = y0 + k * ldy + j0
        dst = p0 + k * nr
        for j in range(width):
            bp[dst + j] = y[src + j]
        for j in range(width, nr):
            bp[dst + j] = 0


# Columns of a transposed panel packed together: each step of k then writes them as one
# run (a cache line of float32) instead of one value per line of the panel; of 8, 16
# and 32 columns, 16 measured best (docs/benchmarks.md#matmul).
PACK_COLUMNS = np.uint64(16)


@njit(**SERIAL)
def _pack_columns(y, y0, ldy, kc, j0, width, bp, p0):
    """bp[p0 + k nr + j] = y[y0 + (j0 + j) ldy + k]: a panel of b read transposed, each
    column of the panel from one contiguous row of y, rows as long as its tile's
    (nr = tile_cols; zeros for j >= width)."""
    nr = tile_cols(width, panel_cols(bp))
    full = width - width % PACK_COLUMNS
    for jb in range(np.uint64(0), full, PACK_COLUMNS):
        src = y0 + (j0 + jb) * ldy
        for k in range(kc):
            dst = p0 + k * nr + jb
            for j in range(PACK_COLUMNS):
                bp[dst + j] = y[src + j * ldy + k]
    for j in range(full, width):
        src = y0 + (j0 + j) * ldy
        for k in range(kc):
            bp[p0 + k * nr + j] = y[src + k]
    for j in range(width, nr):
        for k in range(kc):
            bp[p0 + k * nr + j] = 0


@njit(**SERIAL)
def _pack_block(y, y0, y_t, K, N, pc, kc, jc, nc, bp):
    """op(y)[pc: pc + kc, jc: jc + nc] into bp as ceil(nc / NR) panels of kc x NR (the
    last kc x its tile_cols), one after the other (op(y) is [K, N]; y itself is [N, K]
    when ``y_t``)."""
    nr = panel_cols(bp)
    one = np.uint64(1)
    for p in range((nc + nr - one) // nr):
        j0 = jc + p * nr
        width = min(nr, jc + nc - j0)
        if y_t:
            _pack_columns(y, y0 + pc, K, kc, j0, width, bp, p * kc * nr)
        else:
            _pack_rows(y, y0 + pc * N, N, kc, j0, width, bp, p * kc * nr)


# -- one task --------------------------------------------------------------------------------


@njit(**SERIAL)
def _block(x, x0, x_t, y, y0, y_t, out, o0, M, N, K, r0, r1, c0, c1, depth, span, pack_t, ap,
           bp, bias, bias_along, activation):
    """out[o0 + i N + j] = sum_k op(x)[i, k] op(y)[k, j] for r0 <= i < r1, c0 <= j < c1:
    b block by block (NC columns by ``depth`` values of k, in L2; panels packed where b is
    transposed or the panel partial, or spanning more than ``span`` bytes of b), each
    block swept by the slivers of MR rows of a (in place, or packed if partial; if a is
    read transposed, spans more than ``span`` bytes per block and ``pack_t``, packed
    GROUP_ROWS rows at a time), each across the block's panels. In the last block of k,
    each sliver's rows of the block then get their epilogue while in L1: the ``bias`` (a
    pointer) added along its columns or rows (``bias_along``: activation.BIAS_ALONG_*,
    or NO_BIAS), and the ``activation`` (activation.ACTIVATIONS) applied."""
    nr = panel_cols(out)
    one = out.dtype.type(1)
    itemsize = np.uint64(out.itemsize)
    out_ptr = data_pointer(out)
    for jc in range(c0, c1, NC_U):
        nc = min(NC_U, c1 - jc)
        for pc in range(np.uint64(0), K, depth):
            kc = min(depth, K - pc)
            packed = y_t or (kc * N * itemsize > span and r1 - r0 >= PACK_MIN_ROWS)
            group_a = x_t and pack_t and kc * M * itemsize > span
            if packed:
                _pack_block(y, y0, y_t, K, N, pc, kc, jc, nc, bp)
            elif nc % nr:
                j_last = jc + nc - nc % nr
                _pack_rows(y, y0 + pc * N, N, kc, j_last, nc % nr, bp, (j_last - jc) * kc)
            for i0 in range(r0, r1, MR_U):
                rows = min(MR_U, r1 - i0)
                if group_a:
                    in_group = (i0 - r0) % GROUP_ROWS
                    if in_group == 0:
                        _pack_group_t(x, x0, M, i0, min(i0 + GROUP_ROWS, r1), pc, kc, ap)
                    a, a0, a_row, a_step = ap, in_group * kc, np.uint64(1), MR_U
                elif rows == MR_U:
                    a, a0 = x, x0 + (pc * M + i0 if x_t else i0 * K + pc)
                    a_row, a_step = (np.uint64(1), M) if x_t else (K, np.uint64(1))
                else:
                    _pack_sliver(x, x0, x_t, M, K, i0, rows, pc, kc, ap)
                    a, a0, a_row, a_step = ap, np.uint64(0), np.uint64(1), MR_U
                for j0 in range(jc, jc + nc, nr):
                    width = min(nr, jc + nc - j0)
                    tc = tile_cols(width, nr)
                    if packed or width < nr:
                        b, b0, b_step = bp, (j0 - jc) * kc, tc
                    else:
                        b, b0, b_step = y, y0 + pc * N + j0, N
                    a_ptr, b_ptr = data_pointer(a), data_pointer(b)
                    o = o0 + i0 * N + j0
                    if tc * _FOUR == nr:
                        _narrow_tile(a_ptr, a0, a_row, a_step, b_ptr, b0, b_step, kc, out_ptr,
                                     o, N, rows, width, pc == 0)
                    elif tc * _TWO == nr:
                        _half_tile(a_ptr, a0, a_row, a_step, b_ptr, b0, b_step, kc, out_ptr,
                                   o, N, rows, width, pc == 0)
                    else:
                        _tile(a_ptr, a0, a_row, a_step, b_ptr, b0, b_step, kc, out_ptr, o, N,
                              rows, width, pc == 0)
                if pc + kc == K:   # the sliver's rows of the block are done
                    o = o0 + i0 * N + jc
                    if bias_along != NO_BIAS:
                        add_bias_tile(out_ptr, o, N, rows, nc, bias,
                                      i0 if bias_along == BIAS_ALONG_ROWS else jc, bias_along)
                    if activation:
                        activate_tile(out_ptr, o, N, rows, nc, activation, one)


# -- the block as one C function ------------------------------------------------------------
#
# Each kernel that called ``_block`` directly carried, and compiled, its own copy of the
# packing and the register tile (docs/compiling.md); ``_call_block`` is compiled once per
# dtype as a C function (runtime/jit.py: compiled_once) that every kernel calls by name.


def _block_signature(dt):
    u, flag, flat = types.uint64, types.boolean, types.Array(dt, 1, "C")
    return types.void(flat, u, flag, flat, u, flag, flat, *([u] * 10), flag, flat,
                      types.CPointer(dt), u, u)


@compiled_once(_block_signature, early=True, **SERIAL)
def _call_block(x, x0, x_t, y, y0, y_t, out, o0, M, N, K, r0, r1, c0, c1, depth, span,
                pack_t, work, bias, bias_along, activation):
    """``_block`` on flat operands (x, y and out hold one matrix each at offsets x0, y0
    and o0) packing a into the first ``a_rows(pack_t)`` rows of depth values of work,
    b into the rest."""
    split = depth * a_rows(pack_t)
    _block(x, x0, x_t, y, y0, y_t, out, o0, M, N, K, r0, r1, c0, c1, depth, span, pack_t,
           work[:split], work[split:], bias, bias_along, activation)


@njit(**SERIAL)
def _split(n, parts, part, unit):
    """[lo, hi) of part ``part`` of ``parts`` of range(n) cut at multiples of ``unit``,
    the parts' numbers of units differing by at most one."""
    units = (n + unit - 1) // unit
    lo = units * part // parts * unit
    hi = min(units * (part + 1) // parts * unit, n)
    return lo, hi


@njit(**SERIAL)
def _task(t, x, x_map, x_t, y, y_map, y_t, out, M, N, K, row_parts, col_parts, depth, span,
          pack_t, work, bias, bias_along, activation):
    """Task t: block (t // col_parts % row_parts, t % col_parts) of output batch
    t // (row_parts col_parts), packing into ``work`` (the running thread's buffer)."""
    nr = panel_cols(out)
    per_batch = row_parts * col_parts
    i = t // per_batch
    r0, r1 = _split(M, row_parts, t % per_batch // col_parts, MR)
    c0, c1 = _split(N, col_parts, t % col_parts, nr)
    if r0 >= r1 or c0 >= c1:
        return
    u = np.uint64
    _call_block(x, u(x_map[i] * M * K), x_t, y, u(y_map[i] * K * N), y_t, out, u(i * M * N),
                u(M), u(N), u(K), u(r0), u(r1), u(c0), u(c1), u(depth), u(span), pack_t, work,
                data_pointer(bias), u(bias_along), u(activation))


def matrix_product(x, x_t, y, y_t, out, M, N, K) -> None:
    """out[i N + j] = sum_k op(x)[i, k] op(y)[k, j] (k ascending) in the calling thread,
    for flat row-major x ([M, K], or [K, M] read transposed when ``x_t``), y ([K, N], or
    [N, K] when ``y_t``) and out [M, N]: one matrix of ``product``, for kernels that
    multiply inside a ``prange`` of their own."""
    _matrix_product(x, x_t, y, y_t, out, M, N, K)


@overload(matrix_product, inline="always")
def _matrix_product_jit(x, x_t, y, y_t, out, M, N, K):
    def impl(x, x_t, y, y_t, out, M, N, K):
        _matrix_product(x, plain(x_t), y, plain(y_t), out, M, N, K)

    return impl


@njit(**SERIAL)
def _matrix_product(x, x_t, y, y_t, out, M, N, K):
    if K == 0:
        out[: M * N] = 0
        return
    nr = panel_cols(out)
    depth = min(KC_BYTES // out.itemsize, K)
    cols = min(NC, (N + nr - 1) // nr * nr)
    work = np.empty(depth * (a_rows(False) + cols), out.dtype)
    u = np.uint64
    _call_block(x.reshape(-1), u(0), x_t, y.reshape(-1), u(0), y_t, out.reshape(-1), u(0),
                u(M), u(N), u(K), u(0), u(M), u(0), u(N), u(depth), IN_PLACE_SPAN, False,
                work, data_pointer(work), u(NO_BIAS), u(0))


@njit(**PARALLEL)
def _product(x, x_map, x_t, y, y_map, y_t, out, M, N, K, row_parts, col_parts, parallel,
             slots, bias, bias_along, activation, depth_bytes=KC_BYTES, span=IN_PLACE_SPAN,
             pack_t=PACK_T):
    """All tasks of the product into the flat buffer out (see ``product``); ``slots``
    packing buffers, one per pool thread; blocks of b ``depth_bytes`` of k values deep
    and read in place up to ``span`` bytes, slivers of a transposed a copied if ``pack_t``
    (arguments, not constants: ``product`` passes
    the host's, kernels/gemm_search.py, and tests other choices; the defaults are the
    fixed ones of ``matrix_product``). ``bias`` (an array), ``bias_along``,
    ``activation``: the epilogue (``_block``)."""
    tasks = x_map.size * row_parts * col_parts
    nr = panel_cols(out)
    depth = block_depth(depth_bytes // out.itemsize, K)
    cols = min(NC, (N + nr - 1) // nr * nr)
    work = np.empty((slots, depth * (a_rows(pack_t) + cols)), out.dtype)
    if parallel:
        for t in prange(tasks):
            # prange's index is unsigned: as an int64, one compile of _task serves both loops
            _task(np.int64(t), x, x_map, x_t, y, y_map, y_t, out, M, N, K, row_parts,
                  col_parts, depth, span, pack_t, work[get_thread_id()], bias, bias_along,
                  activation)
    else:
        for t in range(tasks):
            _task(t, x, x_map, x_t, y, y_map, y_t, out, M, N, K, row_parts, col_parts, depth,
                  span, pack_t, work[0], bias, bias_along, activation)


# -- thin products ---------------------------------------------------------------------------
#
# An output row times a matrix, or sums of a single term (an outer product), fill a
# third of each MR x NR register tile, and a GEMM that must copy b (a transposed or
# partial panel) then spends more on the copy than on the product. Serial products with
# K = 1, or with M = 1 and b read transposed or narrower than a panel, skip the GEMM
# (``is_thin``, _thin_product). A row times a row-major b of whole panels stays on the
# GEMM, which reads those panels in place without a copy; two rows or two terms already
# fill enough of a tile for the GEMM to win (docs/benchmarks.md#thin-products).

# Sums a thin product keeps in flight at once: an FMA's latency (4 cycles) times the two
# FMAs a core starts per cycle.
THIN_CHAINS = 8


@njit(**SERIAL_FMA)
def _axpy(a, src, s0, out, o0, n):
    """out[o0 + j] += a src[s0 + j] for j < n (unsigned offsets; vectorised). Unlike
    kernels/conv.py: row_axpy, one FMA per term (SERIAL_FMA), as in the GEMM's tile."""
    for j in range(n):
        out[o0 + j] += a * src[s0 + j]


@njit(**SERIAL_FMA)
def _rows_times_rows(x, xb, xi, xk, y, yb, out, ob, M, N, K):
    """out[ob + i N + j] = sum_k x[xb + i xi + k xk] y[yb + k N + j] (k ascending): per
    row i of out, a * row k of y added for each k."""
    for i in range(M):
        o = ob + i * N
        for j in range(N):
            out[o + j] = 0
        for k in range(K):
            _axpy(x[xb + i * xi + k * xk], y, yb + k * N, out, o, N)


@njit(**SERIAL_FMA)
def _rows_times_columns(x, xb, xi, xk, y, yb, out, ob, M, N, K):
    """out[ob + i N + j] = sum_k x[xb + i xi + k xk] y[yb + j K + k] (k ascending):
    THIN_CHAINS sums of one row of out at a time, each over a row of y."""
    acc = carray(stack_buffer(THIN_CHAINS, out.dtype), THIN_CHAINS)
    chains = np.uint64(THIN_CHAINS)
    full = N - N % chains
    for i in range(M):
        o = ob + i * N
        for j0 in range(np.uint64(0), full, chains):
            for c in range(THIN_CHAINS):
                acc[c] = 0
            for k in range(K):
                a = x[xb + i * xi + k * xk]
                for c in range(THIN_CHAINS):
                    acc[c] += a * y[yb + (j0 + np.uint64(c)) * K + k]
            for c in range(THIN_CHAINS):
                out[o + j0 + np.uint64(c)] = acc[c]
        for j in range(full, N):
            s = out.dtype.type(0)
            for k in range(K):
                s += x[xb + i * xi + k * xk] * y[yb + j * K + k]
            out[o + j] = s


@njit(**SERIAL)
def _thin_product(x, x_map, x_t, y, y_map, y_t, out, M, N, K):
    """``_product`` in one thread without packing, for one row of out or one term per
    sum. Every element is one fused multiply-add chain over k ascending, as in the GEMM,
    so the bits are the same."""
    u = np.uint64
    M, N, K = u(M), u(N), u(K)
    xi, xk = (u(1), M) if x_t else (K, u(1))
    for b in range(x_map.size):
        xb, yb, ob = u(x_map[b]) * M * K, u(y_map[b]) * K * N, u(b) * M * N
        if y_t:
            _rows_times_columns(x, xb, xi, xk, y, yb, out, ob, M, N, K)
        else:
            _rows_times_rows(x, xb, xi, xk, y, yb, out, ob, M, N, K)


# -- entry point -------------------------------------------------------------------------------


# How a product is cut into tasks. A row cut makes each task pack all of b again; a
# column cut makes the tasks share every row of out, whose cache line at the cut (NumPy
# aligns out to 16 bytes, not to a 64-byte line) both threads write. The line shared at
# the cut costs more than repacking b, so a product as tall as wide or taller is cut
# into rows (docs/benchmarks.md#matmul).


def task_grid(batches: int, M: int, N: int, nr: int, tasks: int) -> tuple[int, int]:
    """(row parts, column parts) per batch, doubling one until there are ``tasks`` tasks
    or no part can be cut again: rows while their parts are at least as tall as the
    column parts are wide (see above), else columns."""
    rows, cols = 1, 1
    while batches * rows * cols < tasks:
        can_rows = M >= 2 * rows * MR
        can_cols = N >= 2 * cols * nr
        if can_rows and (M / rows >= N / cols or not can_cols):
            rows *= 2
        elif can_cols:
            cols *= 2
        else:
            break
    return rows, cols


def product(x: np.ndarray, y: np.ndarray, x_map: np.ndarray, y_map: np.ndarray,
            x_t: bool, y_t: bool, threads: int = 1, parallel: bool | None = None,
            depth_bytes: int | None = None, span: int | None = None,
            pack_t: bool | None = None, bias: np.ndarray | None = None,
            activation: int = 0) -> np.ndarray:
    """``out[i] = op(x[x_map[i]]) @ op(y[y_map[i]])`` for C-contiguous stacks x[Bx, ., .],
    y[By, ., .] of one float dtype, op the transpose of the last two axes where ``x_t`` /
    ``y_t`` is set: a new C-contiguous [len(x_map), M, N] array. ``parallel`` (default:
    from ``runtime.jit.PARALLEL_WORK_MIN`` multiply-adds) chooses the thread pool or one thread,
    ``threads`` (the pool's size) how many parts the output is split into;
    the bits are the same either way. ``depth_bytes``: the depth of the packed blocks of
    b in bytes of k values, ``span``: the largest block of a row-major b read in place,
    ``pack_t``: whether slivers of a transposed a are copied (defaults: the host's,
    kernels/gemm_search.py; every choice gives the same bits). An output with far fewer
    whole register tiles as its transpose is computed transposed (``computed_transposed``:
    a matrix times a vector fills one column of each tile as given, whole tile rows
    transposed).

    Epilogue, for one product (``len(x_map) == 1``): ``bias`` (C-contiguous [N], out's
    dtype) is added to every row and then the ``activation`` (kernels/activation.py:
    ``ACTIVATIONS`` code, or NO_ACTIVATION) applied, each sliver of rows as the GEMM stores it."""
    M = x.shape[2] if x_t else x.shape[1]
    K = x.shape[1] if x_t else x.shape[2]
    N = y.shape[1] if y_t else y.shape[2]
    batches = x_map.size
    if (bias is not None or activation) and batches != 1:
        raise ValueError(f"matmul kernel: an epilogue needs one product, got {batches}")
    along = NO_BIAS if bias is None else BIAS_ALONG_COLUMNS
    # (writable, as the callers in generated code pass: one compile of _product)
    bias = np.empty(0, x.dtype) if bias is None else np.require(bias, requirements="CW")
    if K == 0:
        out = np.zeros((batches, M, N), x.dtype)
        apply_epilogue(out.reshape(-1), M, N, bias, along, activation)
        return out
    swapped, parallel, thin, row_parts, col_parts = _plan(
        batches, M, N, K, x_t, y_t, panel_cols(x), threads, parallel)
    if swapped:
        # out^T = op(y)^T op(x)^T: the same terms summed in the same order (so the same
        # bits), with the short side of out on the tile's MR rows rather than across its
        # NR columns (N = 1 would fill one column of NR)
        x, y, x_map, y_map, x_t, y_t, M, N = y, x, y_map, x_map, not y_t, not x_t, N, M
        along = BIAS_ALONG_ROWS if along else NO_BIAS
    out = buffers.empty((batches, M, N), x.dtype)
    if out.size:
        if thin:
            _thin_product(x.reshape(-1), _read_only(x_map), x_t, y.reshape(-1),
                          _read_only(y_map), y_t, out.reshape(-1), M, N, K)
            apply_epilogue(out.reshape(-1), M, N, bias, along, activation)
        else:
            _product(x.reshape(-1), _read_only(x_map), x_t, y.reshape(-1), _read_only(y_map),
                     y_t, out.reshape(-1), M, N, K, row_parts, col_parts, parallel,
                     config.NUMBA_NUM_THREADS, bias, along, activation,
                     *_blocking(batches * M * N * K, threads, depth_bytes, span, pack_t))
    return np.ascontiguousarray(out.transpose(0, 2, 1)) if swapped else out


@functools.cache
def guessed_blocking() -> Blocking:
    """The blocking derived from the host's caches (runtime/host.py) and the fixed
    choices above, before kernels/gemm_search.py times it."""
    return Blocking(gemm_depth(), int(IN_PLACE_SPAN), PACK_T)


def _blocking(work: int, threads: int, depth_bytes: int | None, span: int | None,
              pack_t: bool | None) -> tuple[int, int, bool]:
    """(depth_bytes, span, pack_t): the ones given, else the host's
    (kernels/gemm_search.py)."""
    if depth_bytes is None or span is None or pack_t is None:
        chosen = blocking(work, threads, product, guessed_blocking())
        depth_bytes = chosen.depth_bytes if depth_bytes is None else depth_bytes
        span = chosen.span if span is None else span
        pack_t = chosen.pack_t if pack_t is None else pack_t
    return depth_bytes, int(span), bool(pack_t)


@functools.lru_cache(maxsize=1024)
def _plan(batches: int, M: int, N: int, K: int, x_t: bool, y_t: bool, nr: int,
          threads: int, parallel: bool | None) -> tuple[bool, bool, bool, int, int]:
    """How ``product`` computes an [M, K] @ [K, N] product with nr-column panels:
    (swapped: as its transpose, parallel, thin: ``_thin_product``, row parts, column
    parts). Kept per arguments: working it out in Python is a noticeable part of a small product."""
    swapped = computed_transposed(M, N, K, nr)
    if swapped:
        M, N, y_t = N, M, not x_t
    if parallel is None:
        parallel = batches * M * N * K >= PARALLEL_WORK_MIN
    thin = not parallel and is_thin(M, N, K, y_t, nr)
    # a task per pool thread; one in a single thread (each task copies its own partial
    # slivers and panels)
    row_parts, col_parts = task_grid(batches, M, N, nr, threads if parallel else 1)
    return swapped, parallel, thin, row_parts, col_parts


def is_thin(M: int, N: int, K: int, y_t: bool, nr: int) -> bool:
    """Whether a serial product skips the GEMM for ``_thin_product`` (see "thin
    products" above): one term per sum, or one output row against a b the GEMM would
    copy (read transposed, or narrower than a panel of nr columns)."""
    return K == 1 or (M == 1 and (y_t or N < nr))


# What copying one element of a transposed result costs, in multiply-adds of the register
# tile: a strided copy moves about one element per cache line it touches while the tile
# retires several FMAs a cycle, so one copied element is worth about 16 multiply-adds
# (docs/benchmarks.md#thin-products).
TRANSPOSE_COPY_MACS = 16


def computed_transposed(M: int, N: int, K: int, nr: int) -> bool:
    """Whether ``product`` computes an M x N output as the transposed product: when
    its tiles as out^T would pad away more multiply-adds than the copy back costs."""
    saved = (tiled_size(M, N, nr) - tiled_size(N, M, nr)) * K
    return saved > TRANSPOSE_COPY_MACS * M * N


def tiled_size(M: int, N: int, nr: int) -> int:
    """Elements of an M x N output rounded up to whole register tiles (MR rows; nr
    columns, or a last panel's ``tile_cols``): what the GEMM computes for it."""
    last = N % nr
    return -(-M // MR) * MR * (N - last + (int(tile_cols(last, nr)) if last else 0))


def _read_only(a: np.ndarray) -> np.ndarray:
    """``a`` if it is read-only, else a read-only view of it: Numba compiles a kernel once
    per combination of writable and read-only arguments, and ``_product`` is the longest
    compile there is."""
    if not a.flags.writeable:
        return a
    view = a.view()
    view.flags.writeable = False
    return view
