"""Register-tiled matrix products as Numba loop nests (no BLAS: a BLAS call would start a
second thread pool competing with Numba's), and the blocked transpose of the basis ops.

Every product here sums each element over k in ascending order, whichever task or
caller computes it, so results do not depend on any thread count.

1. ``offset_gemm`` / ``offset_gemv``: products over "offset matrices". An offset matrix
   is a flat buffer plus one start offset per row: row i is ``buf[row[i]: row[i] +
   width]``. A plain row-major matrix has row[i] = i * width; the convolution kernels
   instead point the rows of one matrix at shifted spans of the same zero-padded input
   planes, so that a convolution is a matrix product without an im2col copy
   (kernels/conv_gemm.py). The product is

       out[i, j] = sum_{k = 0}^{K-1} a[a_row[i] + k] * b[b_row[k] + j]      (k ascending)

   for all i < out.shape[0] and j < out.shape[1], which must be multiples of MR and NR
   (the caller pads: extra rows may start anywhere valid, their results are discarded).
   Each tile of MR rows by NR columns of ``out`` (kernels/tiles.py: TILE_ROWS by four
   vectors of float32; 4 x 64, 4 x 4 zmm, with AVX-512) accumulates in a stack array of
   constant shape, which LLVM keeps in vector registers for the whole k loop: each step
   k costs NR/lanes loads of b, MR broadcasts of a and MR*NR/lanes fused multiply-adds
   (the BLIS micro-kernel, written as plain loops).
   Single-threaded (``SERIAL_FMA``): the convolutions call it inside a ``prange`` over
   images.

2. ``matmul(a, b)``: ``a[M, K] @ b[K, P]`` for the orthogonal-basis ops (``u @ Q``,
   ``g @ Q^T``, ``g^T u``) on the micro-kernel of 1., parallel. It computes into a buffer
   padded to whole micro-tiles, ``[M', P']`` with M' and P' the multiples of MR and NR at
   or above M and P, and returns its ``[:M, :P]`` view (C-contiguous when P is a
   multiple of NR; returned from Numba, so the autograd engine takes it as an array of
   its own, not a view to copy). The padding rows of a read row 0 and the padding
   columns of b read past the end of its rows (into the next row, or zeros after the
   last); their results are never used. The work is split into tasks of ROW_TILES
   micro-tile rows by one NR-column panel, run by a ``prange`` panel by panel (so the
   tasks of one thread share b's panels in cache).

3. ``gemm_tn_acc(A, B, out)``: ``out += A^T B`` on plain 2-D arrays (any strides), for
   the small dense products of the graph neural operator. It differs from 1. in three
   ways: the first operand is read transposed, the product is added to ``out``, and it
   compiles with ``SERIAL_FUSED`` (reassociation as well as FMA, as every gno kernel
   that inlines it). Full TN_TILE_ROWS x TN_TILE_COLS tiles (the tile of 1.) sum over
   k in registers and are then added; the bottom and right edges go term by term.

Derivations of the products' adjoints: docs/derivations.md#matrix-product.
"""

import numpy as np
from llvmlite import ir
from numba import carray, njit, prange, types
from numba.core import cgutils, errors
from numba.extending import intrinsic

from ..runtime.jit import (
    PARALLEL,
    PARALLEL_WORK_MIN,
    SERIAL,
    SERIAL_FMA,
    SERIAL_FUSED,
    for_work,
    njit_with_serial,
    plain,
)
from .basics import copy_into
from .tiles import FLOAT32_COLUMNS, GEMV_COLUMNS, TILE_ROWS

MR = TILE_ROWS  # rows of a per micro-tile (kernels/tiles.py)
NR = FLOAT32_COLUMNS  # columns of b per panel, in either dtype (kernels/tiles.py)
NR_U = np.uint64(NR)
TILE = MR * NR  # elements of one accumulator tile
SPAN = GEMV_COLUMNS  # outputs per register tile of offset_gemv (kernels/tiles.py)
SPAN_U = np.uint64(SPAN)
ROW_TILES = 2  # micro-tiles (of MR rows) per task of matmul: small tasks balance 2 cores
TN_TILE_ROWS, TN_TILE_COLS = MR, NR  # register tile of gemm_tn_acc: the micro-tile's
TN_TILE = TN_TILE_ROWS * TN_TILE_COLS


@njit(**SERIAL)
def round_up(n, m):
    """The smallest multiple of m at or above n (the padded size of a tiled dimension)."""
    return (n + m - 1) // m * m


@intrinsic
def stack_buffer(typingctx, size, dtype):
    """Pointer to ``size`` uninitialised elements of ``dtype`` on the stack, for
    ``carray``; ``size`` must be a compile-time constant (a literal or module-level int).

    Constant-size stack memory (unlike np.empty, which is a heap call LLVM cannot see
    through) is what lets LLVM promote a small accumulator tile to registers."""
    if not isinstance(size, types.IntegerLiteral):
        raise errors.RequireLiteralValue("stack_buffer: size must be a constant")
    elem = dtype.dtype if isinstance(dtype, types.DType) else dtype.instance_type

    def codegen(context, builder, signature, args):
        llvm_elem = context.get_value_type(elem)
        buf = cgutils.alloca_once(builder, ir.ArrayType(llvm_elem, size.literal_value))
        return builder.bitcast(buf, llvm_elem.as_pointer())

    return types.CPointer(elem)(size, dtype), codegen


@intrinsic
def data_pointer(typingctx, arr):
    """Pointer to the first element of array ``arr`` (indexed as ``p[i]``, no bounds
    check). A function called in a hot loop takes pointers instead of arrays: every array
    argument costs an atomic reference-count increment and decrement per call (a
    register tile of kernels/matmul.py spent most of its time on them when k was short),
    a pointer none."""
    elem = arr.dtype

    def codegen(context, builder, signature, args):
        return context.make_array(arr)(context, builder, args[0]).data

    return types.CPointer(elem)(arr), codegen


# -- 1. offset matrices ------------------------------------------------------------------


@njit(**SERIAL, inline="always")
def micro_tile(a, a_start, b, b_row, K, out, i0, j0):
    """out[i0 + r, j0 + j] = sum_k a[a_start[r] + k] * b[b_row[k] + j0 + j] for r < MR,
    j < NR (k ascending). Offsets, K, j0 and the loop counters k and j are unsigned:
    Numba then indexes without the fix-up for negative indices, so LLVM sees that
    b[b_row[k] + j0 + j] is NR consecutive elements and loads whole vectors. Inlined
    into panel_tiles, it takes that caller's fastmath={"contract"}: one FMA per term."""
    acc = carray(stack_buffer(TILE, out.dtype), (MR, NR))
    for r in range(MR):
        for j in range(NR):
            acc[r, j] = 0
    for k in range(K):
        b0 = b_row[k] + j0
        for r in range(MR):
            ark = a[a_start[r] + k]
            for j in range(NR_U):
                acc[r, j] += ark * b[b0 + j]
    for r in range(MR):
        out_row = out[i0 + r, j0: j0 + NR_U]
        for j in range(NR):
            out_row[j] = acc[r, j]


@njit(**SERIAL_FMA)
def panel_tiles(a, a_row, b, b_row, K, out, j0):
    """Columns [j0, j0 + NR) of out, one micro-tile per MR rows."""
    for i0 in range(0, out.shape[0], MR):
        micro_tile(a, a_row[i0: i0 + MR], b, b_row, K, out, i0, j0)


@njit(**SERIAL)
def rows_inside(rows, n, length, size):
    """Whether rows[i] >= 0 and rows[i] + length <= size for every i < n: each of the
    first n rows, ``length`` elements long, lies inside a buffer of ``size``. (A loop:
    array.min() and max() would compile NumPy's generic reductions into every caller.)"""
    for i in range(n):
        if rows[i] < 0 or rows[i] + length > size:
            return False
    return True


@njit(**SERIAL)
def offset_gemm(a, a_row, b, b_row, K, out):
    """out[i, j] = sum_{k < K} a[a_row[i] + k] * b[b_row[k] + j] (see the module doc).

    Raises if a row would read past its buffer (the kernels have no bounds checks)."""
    M, P = out.shape
    if M % MR or P % NR:
        raise ValueError("offset_gemm: out's shape must be a multiple of (MR, NR)")
    if not (rows_inside(a_row, M, K, a.size) and rows_inside(b_row, K, P, b.size)):
        raise ValueError("offset_gemm: a row reaches outside its buffer")
    a_row_u = a_row[:M].astype(np.uint64)
    b_row_u = b_row[:K].astype(np.uint64)
    for j0 in range(0, P, NR):
        panel_tiles(a, a_row_u, b, b_row_u, np.uint64(K), out, np.uint64(j0))


@njit(**SERIAL, inline="always")
def span_tile(w, b, b_row, K, out, j0):
    """out[j0 + j] = sum_k w[k] * b[b_row[k] + j0 + j] for j < SPAN (k ascending), in a
    register tile as in micro_tile (unsigned offsets, K and j0)."""
    acc = carray(stack_buffer(SPAN, out.dtype), SPAN)
    for j in range(SPAN):
        acc[j] = 0
    for k in range(K):
        wk = w[k]
        b0 = b_row[k] + j0
        for j in range(SPAN_U):
            acc[j] += wk * b[b0 + j]
    dst = out[j0: j0 + SPAN_U]
    for j in range(SPAN):
        dst[j] = acc[j]


@njit(**SERIAL_FMA)
def offset_gemv(w, b, b_row, K, out):
    """out[i, j] = sum_{k < K} w[i, k] * b[b_row[k] + j] (k ascending) for every row i of
    w [M, >= K] and out [M, P]: one pass of SPAN-wide register tiles per row, e.g. the
    filters of a convolution group over shifted spans of its padded planes. P must be a
    multiple of SPAN; raises if a row would read outside b. (The rows are checked, and
    made unsigned, once for all of w's rows.)"""
    P = out.shape[1]
    if P % SPAN:
        raise ValueError("offset_gemv: out's row length must be a multiple of SPAN")
    if not rows_inside(b_row, K, P, b.size):
        raise ValueError("offset_gemv: a row reaches outside its buffer")
    b_row_u = b_row[:K].astype(np.uint64)
    for i in range(out.shape[0]):
        for j0 in range(0, P, SPAN):
            span_tile(w[i], b, b_row_u, np.uint64(K), out[i], np.uint64(j0))


# -- 2. matmul on padded row-major operands ----------------------------------------------


@njit(**SERIAL)
def _row_offsets(rows, width, padded_rows):
    """Start of row i of a [rows, width] row-major matrix, as offset_gemm wants them; the
    padding rows (i >= rows) start at row 0."""
    offsets = np.zeros(padded_rows, np.uint64)
    for i in range(rows):
        offsets[i] = i * width
    return offsets


@njit(**SERIAL)
def _flat_with_tail(b, tail):
    """b's elements in row-major order followed by ``tail`` zeros (a view when tail = 0),
    so that the last row's padding columns stay inside the buffer."""
    if tail == 0:
        return b.ravel()
    flat = np.zeros(b.size + tail, b.dtype)
    copy_into(flat, b.ravel())
    return flat


@njit(**SERIAL)
def padded_operands(a, b):
    """offset_gemm's operands for a[M, K] @ b[K, P]: the padded [M', P'] output buffer,
    a and b as flat buffers (b with its tail) and their row offsets."""
    M, K = a.shape
    P = b.shape[1]
    Mp = round_up(M, MR)
    Pp = round_up(P, NR)
    out = np.empty((Mp, Pp), a.dtype)
    b_flat = _flat_with_tail(b, Pp - P)
    return out, a.ravel(), _row_offsets(M, K, Mp), b_flat, _row_offsets(K, P, K)


@njit_with_serial(**PARALLEL)
def matmul(a, b):
    """out[i, j] = sum_{k < K} a[i, k] b[k, j] (k ascending) for C-contiguous a[M, K] and
    b[K, P]: a new [M, P] array (a view of the padded buffer, see the module doc).
    ``matmul.serial`` is the same loop nest in one thread (``product`` picks by size)."""
    M, K = a.shape
    P = b.shape[1]
    out, a_flat, a_row, b_flat, b_row = padded_operands(a, b)
    Mp, Pp = out.shape
    block = ROW_TILES * MR
    panels = Pp // NR
    blocks = (Mp + block - 1) // block
    for t in prange(blocks * panels):
        r0 = t % blocks * block
        r1 = min(r0 + block, Mp)
        j0 = np.uint64(t // blocks * NR)
        panel_tiles(a_flat, a_row[r0:r1], b_flat, b_row, np.uint64(K), out[r0:r1], j0)
    return out[:M, :P]


def product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``matmul(a, b)``, in parallel from PARALLEL_WORK_MIN multiply-adds (the same bits
    either way: a task owns its output tiles)."""
    return for_work(matmul, a.shape[0] * a.shape[1] * b.shape[1], PARALLEL_WORK_MIN)(a, b)


# -- 3. out += A^T B ---------------------------------------------------------------------


@njit(**SERIAL_FUSED)
def _tn_tile_acc(A, B, out, a0, r0):
    """``out[a0 + t, r0 + l] += sum_k A[k, a0 + t] B[k, r0 + l]`` for t < TN_TILE_ROWS,
    l < TN_TILE_COLS: the sum over k (ascending) is formed in registers, then added."""
    acc = carray(stack_buffer(TN_TILE, out.dtype), (TN_TILE_ROWS, TN_TILE_COLS))
    for t in range(TN_TILE_ROWS):
        for l in range(TN_TILE_COLS):
            acc[t, l] = 0
    for k in range(A.shape[0]):
        Bk = B[k, r0:r0 + TN_TILE_COLS]
        Ak = A[k, a0:a0 + TN_TILE_ROWS]
        for t in range(TN_TILE_ROWS):
            akt = Ak[t]
            for l in range(TN_TILE_COLS):
                acc[t, l] += akt * Bk[l]
    for t in range(TN_TILE_ROWS):
        ot = out[a0 + t, r0:r0 + TN_TILE_COLS]
        for l in range(TN_TILE_COLS):
            ot[l] += acc[t, l]


@njit(**SERIAL_FUSED)
def _tn_edge_acc(A, B, out, a_lo, a_hi, r_lo, r_hi):
    """``out[a, r] += A[k, a] B[k, r]`` term by term (k ascending) on the block
    ``[a_lo, a_hi) x [r_lo, r_hi)``; rows a interleave, so their updates overlap."""
    for k in range(A.shape[0]):
        Bk = B[k, r_lo:r_hi]
        for a in range(a_lo, a_hi):
            a_ka = A[k, a]
            oa = out[a, r_lo:r_hi]
            for r in range(r_hi - r_lo):
                oa[r] += a_ka * Bk[r]


@njit(**SERIAL_FUSED)
def gemm_tn_acc(A, B, out):
    """``out += A^T B`` (``out[a, r] += sum_k A[k, a] B[k, r]``): full TN_TILE_ROWS x
    TN_TILE_COLS tiles in registers, the bottom and right edges term by term."""
    rows, cols = out.shape
    rows_t = rows - rows % TN_TILE_ROWS
    cols_t = cols - cols % TN_TILE_COLS
    for a0 in range(0, rows_t, TN_TILE_ROWS):
        for r0 in range(0, cols_t, TN_TILE_COLS):
            _tn_tile_acc(A, B, out, a0, r0)
    _tn_edge_acc(A, B, out, rows_t, rows, plain(0), cols)
    _tn_edge_acc(A, B, out, plain(0), rows_t, cols_t, cols)


# -- transpose ---------------------------------------------------------------------------

# Blocks of ``transpose``: TI rows of x (read down a column, TI cache lines at a time:
# few enough that rows a power of two apart do not evict each other) by TJ columns.
TI = 8
TJ = 16
# Up to this many rows, ``transpose`` copies each row of x into a column of the result
# instead: contiguous reads, and the strided writes land on result rows short enough to
# stay in cache.
SHORT = 64


@njit(**SERIAL)
def transpose(x):
    """x.T as a new C-contiguous array: row by row into the result's columns when x has at
    most SHORT rows, else block by block (a plain copy of the transposed view walks rows
    that map to the same cache sets). Serial: a prange over blocks of result rows gains
    nothing at 2 threads."""
    m, n = x.shape
    out = np.empty((n, m), x.dtype)
    if m <= SHORT:
        columns = out.T
        for i in range(m):
            copy_into(columns[i], x[i])
        return out
    for i0 in range(0, m, TI):
        i1 = min(i0 + TI, m)
        for j0 in range(0, n, TJ):
            for j in range(j0, min(j0 + TJ, n)):
                for i in range(i0, i1):
                    out[j, i] = x[i, j]
    return out
