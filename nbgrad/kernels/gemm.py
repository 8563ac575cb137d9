"""A register-tiled matrix product over "offset matrices", as a Numba loop nest.

An offset matrix is a flat buffer plus one start offset per row: row i is
``buf[row[i]: row[i] + width]``. A plain row-major matrix has row[i] = i * width; the
convolution kernels instead point the rows of one matrix at shifted spans of the same
zero-padded input planes, so that a convolution is a matrix product without an im2col
copy (kernels/conv.py). The product is

    out[i, j] = sum_{k = 0}^{K-1} a[a_row[i] + k] * b[b_row[k] + j]      (k ascending)

for all i < out.shape[0] and j < out.shape[1], which must be multiples of MR and NR (the
caller pads: extra rows may start anywhere valid, their results are discarded).

Each tile of MR = 6 rows by NR = 64 columns of ``out`` accumulates in a stack array of
constant shape, which LLVM keeps in vector registers for the whole k loop (with AVX-512,
6 x 4 zmm): each step k costs NR/16 loads of b, MR broadcasts of a and MR*NR/16 fused
multiply-adds (the BLIS micro-kernel, written as plain loops).

It is single-threaded: the convolutions call it inside a ``prange`` over images (a BLAS
call there would start a second thread pool competing with Numba's). Every element is
one sum over k in ascending order, so results do not depend on any caller's threads.
"""

import numpy as np
from llvmlite import ir
from numba import carray, njit, types
from numba.core import cgutils, errors
from numba.extending import intrinsic

MR = 6  # rows of a per micro-tile
NR = 64  # columns of b per panel (a multiple of the widest vector: 16 float32)
NR_U = np.uint64(NR)
TILE = MR * NR  # elements of one accumulator tile
SPAN = 128  # outputs per register tile of offset_gemv (8 zmm: enough independent FMAs)
SPAN_U = np.uint64(SPAN)


@njit(cache=True)
def round_up(n, m):
    """The smallest multiple of m at or above n (the padded size of a tiled dimension)."""
    return (n + m - 1) // m * m


@njit(cache=True, fastmath={"reassoc", "contract"})
def dot(a, b, n):
    """sum_{j < n} a[j] * b[j], reassociated so that LLVM vectorises it: the summation
    order depends on the machine's vector width, never on the thread count."""
    acc = a.dtype.type(0)
    for j in range(n):
        acc += a[j] * b[j]
    return acc


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


@njit(cache=True, inline="always")
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


@njit(cache=True, fastmath={"contract"})
def panel_tiles(a, a_row, b, b_row, K, out, j0):
    """Columns [j0, j0 + NR) of out, one micro-tile per MR rows."""
    for i0 in range(0, out.shape[0], MR):
        micro_tile(a, a_row[i0: i0 + MR], b, b_row, K, out, i0, j0)


@njit(cache=True)
def offset_gemm(a, a_row, b, b_row, K, out):
    """out[i, j] = sum_{k < K} a[a_row[i] + k] * b[b_row[k] + j] (see the module doc).

    Raises if a row would read past its buffer (the kernels have no bounds checks)."""
    M, P = out.shape
    if M % MR or P % NR:
        raise ValueError("offset_gemm: out's shape must be a multiple of (MR, NR)")
    a_outside = M > 0 and (a_row[:M].min() < 0 or a_row[:M].max() + K > a.size)
    b_outside = K > 0 and (b_row[:K].min() < 0 or b_row[:K].max() + P > b.size)
    if a_outside or b_outside:
        raise ValueError("offset_gemm: a row reaches outside its buffer")
    a_row_u = a_row[:M].astype(np.uint64)
    b_row_u = b_row[:K].astype(np.uint64)
    for j0 in range(0, P, NR):
        panel_tiles(a, a_row_u, b, b_row_u, np.uint64(K), out, np.uint64(j0))


@njit(cache=True, inline="always")
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


@njit(cache=True, fastmath={"contract"})
def offset_gemv(w, b, b_row, K, out):
    """out[j] = sum_{k < K} w[k] * b[b_row[k] + j] (k ascending): the one-row case of
    offset_gemm, e.g. a depthwise convolution's taps as shifted spans of one plane.
    out.size must be a multiple of SPAN; raises if a row would read outside b."""
    P = out.size
    if P % SPAN:
        raise ValueError("offset_gemv: out's size must be a multiple of SPAN")
    if K > 0 and (b_row[:K].min() < 0 or b_row[:K].max() + P > b.size):
        raise ValueError("offset_gemv: a row reaches outside its buffer")
    b_row_u = b_row[:K].astype(np.uint64)
    for j0 in range(0, P, SPAN):
        span_tile(w, b, b_row_u, np.uint64(K), out, np.uint64(j0))
