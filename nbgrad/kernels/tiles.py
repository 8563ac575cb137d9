"""The register tile of every tiled matrix product in kernels/: how many rows and columns
of sums a micro-kernel keeps in vector registers through its loop over k, for the host's
vector registers (``runtime.jit.VECTOR_BYTES``: 64 bytes with AVX-512, 32 with AVX2).
Every tiled loop nest takes its shape from here, so all of them have the same row count
on a host:

* kernels/matmul.py, the packed GEMM of ops/matmul.py, the 'cols' convolutions and the
  graph neural operator (``_tile_sums``): TILE_ROWS x ``panel_cols`` (TILE_VECTORS vectors
  of the dtype), or one or two vectors for a last partial panel;
* kernels/gemm.py, the offset-matrix GEMM of the 'gemm' and 'shift' convolutions and of
  the orthogonal-basis products (``micro_tile``), and ``gemm_tn_acc`` of the graph neural
  operator: TILE_ROWS x FLOAT32_COLUMNS in either dtype, and the one-row tile of
  ``offset_gemv``, GEMV_COLUMNS.

A step k of a tile of R rows by four vectors holds 4 R accumulators, R broadcasts of a
(2 R when two values of k are loaded per pass) and a vector or two of b. AVX-512 has 32
vector registers: four rows (16 + 8 + 2) fit with room to spare; they measured no slower
than three on any product, and faster than six on every conv shape tried. AVX2 has 16:
three rows (12 + 3 + 1) fill them (docs/benchmarks.md#matmul). The shape is fixed per
host, never by the thread count, so a product's bits are the same at any thread count
(gemm_tn_acc's depend on it: full tiles sum in registers and then add, its edges add
term by term).
"""

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from ..runtime.jit import VECTOR_BYTES

TILE_ROWS = 4 if VECTOR_BYTES == 64 else 3  # rows of a register tile (see above)
TILE_VECTORS = 4  # vector registers per row of a register tile
#: Why the tile has this shape on this host (``python -m nbgrad info``).
TILE_REASON = (f"{TILE_ROWS * TILE_VECTORS} accumulators + {2 * TILE_ROWS} broadcasts + "
               f"2 loads of {'32' if VECTOR_BYTES == 64 else '16'} vector registers")


def panel_cols(like) -> int:
    """The register tile's columns for the dtype of array ``like``: TILE_VECTORS vectors
    of its lanes (NR of kernels/matmul.py)."""
    return TILE_VECTORS * VECTOR_BYTES // like.dtype.itemsize


@overload(panel_cols, inline="always")
def _panel_cols_jit(like):
    cols = np.uint64(TILE_VECTORS * VECTOR_BYTES // (like.dtype.bitwidth // 8))
    return lambda like: cols


@intrinsic
def tile_buffer(typingctx, like):
    """Pointer to TILE_ROWS * panel_cols(like) uninitialised elements of ``like``'s dtype
    on the stack (for ``carray``): constant-size stack memory is what LLVM promotes to
    registers."""
    elem = like.dtype
    size = TILE_ROWS * TILE_VECTORS * VECTOR_BYTES // (elem.bitwidth // 8)

    def codegen(context, builder, signature, args):
        llvm_elem = context.get_value_type(elem)
        buf = cgutils.alloca_once(builder, ir.ArrayType(llvm_elem, size))
        return builder.bitcast(buf, llvm_elem.as_pointer())

    return types.CPointer(elem)(like), codegen


# kernels/gemm.py's tiles are as wide in either dtype, TILE_VECTORS vectors of float32:
# the conv kernels pad their operands to whole tiles with gemm.NR as a constant of the
# module, not of the dtype (a float64 tile is then twice as many registers).
FLOAT32_COLUMNS = TILE_VECTORS * VECTOR_BYTES // 4
# offset_gemv's tile: one row of twice as many columns, eight independent FMA chains per
# lane, enough to cover a fused multiply-add's latency (4 cycles, two started a cycle).
GEMV_COLUMNS = 2 * FLOAT32_COLUMNS
