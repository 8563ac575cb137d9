"""A binary op applied element-wise over NumPy-broadcast operands, read through their
strides: the op codes, the planning of a strided loop nest that the reductions over
broadcast axes (kernels/broadcast_sum.py) share, and ``broadcast_apply``.

* ``broadcast_apply(op, u, v)``: ``op(u, v)`` over the NumPy broadcast of ``u`` and
  ``v`` (same dtype), a new C-contiguous array; no operand is materialised at full size.
* ``broadcast_shapes(op_name, a, b)``: NumPy's broadcast of two shapes.

How a call is planned. Every operand is passed to the kernels as a flat 1-D buffer that
starts at its first element, plus one element stride per dimension (0 along broadcast
axes, so 0-stride views such as ``np.broadcast_to(g, ...)`` are read in place:
``flat_operand``). Adjacent dimensions that every operand walks the same way are
coalesced (``[N, C, H, W] + [1, C, 1, 1]`` becomes ``[N, C, H*W]``: ``coalesce``), so
the loop nest is an outer index decomposed with divmod (``operand_offsets``) and a
contiguous inner "lane" loop processed in blocks of ``BLOCK`` elements. A lane whose
stride is not 1 is gathered into a small private buffer first (``lanes``), so the
arithmetic loops (``binary_block``) always run over contiguous slices and vectorise.

The kernels use NumPy's error model (``SERIAL_IEEE_DIV``, runtime/jit.py): x / 0 is
inf or NaN as in NumPy and PyTorch. Each parallel task owns a fixed run of output rows,
so results do not depend on the thread count. Derivations of the op codes' gradients:
docs/derivations.md#element-wise-arithmetic.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import njit, prange

from ..runtime.jit import CHUNK, PARALLEL_IEEE_DIV, PARALLEL_MIN, SERIAL_IEEE_DIV
from .fastmath import log

# Op codes: out = f(u, v) elementwise (v is ignored by COPY).
COPY, ADD, SUB, MUL, DIV, POW, POW_DBASE, POW_DEXP, SIGN_MUL, HALF_DIV = range(10)

BLOCK = 2048  # lanes per inner block (private buffers stay in L1/L2)
ROW_OPS = (ADD, SUB, MUL, DIV)  # the ops with a kernel for a row broadcast (binary_rows)


# -- inner loops over contiguous slices ----------------------------------------------------

@njit(**SERIAL_IEEE_DIV, inline="always")
def binary_block(op, out, u, v):
    """out[l] = f(u[l], v[l]) for one block of lanes (u, v, out: contiguous, same length).

    POW_DBASE = v * u**(v-1) (d(u**v)/du, 0 where v == 0); POW_DEXP = u**v * log(u)
    (d(u**v)/dv, 0 where u == 0 and v >= 0, as PyTorch); SIGN_MUL = u * sign(v) with
    sign(0) = 0; HALF_DIV = u / (2 v).
    """
    n = out.size
    zero = out.dtype.type(0)
    one = out.dtype.type(1)
    if op == COPY:
        for i in range(n):
            out[i] = u[i]
    elif op == ADD:
        for i in range(n):
            out[i] = u[i] + v[i]
    elif op == SUB:
        for i in range(n):
            out[i] = u[i] - v[i]
    elif op == MUL:
        for i in range(n):
            out[i] = u[i] * v[i]
    elif op == DIV:
        for i in range(n):
            out[i] = u[i] / v[i]
    elif op == POW:
        for i in range(n):
            out[i] = u[i] ** v[i]
    elif op == POW_DBASE:
        for i in range(n):
            out[i] = zero if v[i] == zero else v[i] * u[i] ** (v[i] - one)
    elif op == POW_DEXP:
        for i in range(n):
            if u[i] == zero and v[i] >= zero:
                out[i] = zero
            else:
                out[i] = u[i] ** v[i] * log(u[i])
    elif op == SIGN_MUL:
        for i in range(n):
            s = v[i]
            out[i] = u[i] if s > zero else (-u[i] if s < zero else zero * u[i])
    elif op == HALF_DIV:
        two = out.dtype.type(2)
        for i in range(n):
            out[i] = u[i] / (two * v[i])


@njit(**SERIAL_IEEE_DIV, inline="always")
def _row(out, u, v, r, n, us, vs):
    """Row r of out (flat [rows, n]) and the rows of u and v it reads (row strides us, vs;
    a stride of 0 reads the one row again)."""
    return out[r * n:(r + 1) * n], u[r * us:r * us + n], v[r * vs:r * vs + n]


@njit(**SERIAL_IEEE_DIV, inline="always")
def binary_rows(op, out, u, v, rows, n, us, vs):
    """out[r, l] = f(u[r, l], v[r, l]) for rows r < rows of n lanes each, for the ops in
    ROW_OPS: out is flat [rows, n]; u and v are flat with row strides us and vs (0 for one
    row that every row reads, e.g. a bias).

    The op is chosen once, outside the row loop: chosen per row, as ``binary_block`` would
    be, it keeps short rows from vectorising (docs/benchmarks.md#element-wise). Only
    the common ops have a row loop: one for each of the ten made every
    kernel that inlines it two to four times slower to compile.
    """
    if op == ADD:
        for r in range(rows):
            o, a, b = _row(out, u, v, r, n, us, vs)
            for i in range(n):
                o[i] = a[i] + b[i]
    elif op == SUB:
        for r in range(rows):
            o, a, b = _row(out, u, v, r, n, us, vs)
            for i in range(n):
                o[i] = a[i] - b[i]
    elif op == MUL:
        for r in range(rows):
            o, a, b = _row(out, u, v, r, n, us, vs)
            for i in range(n):
                o[i] = a[i] * b[i]
    else:
        for r in range(rows):
            o, a, b = _row(out, u, v, r, n, us, vs)
            for i in range(n):
                o[i] = a[i] / b[i]


@njit(**SERIAL_IEEE_DIV, inline="always")
def lanes(src, off, stride, j0, n, buf):
    """Lanes j0..j0+n of the row of ``src`` starting at ``off``, as a contiguous array:
    a slice of ``src`` when the stride is 1, else gathered into ``buf`` (a fill for a
    0-stride, i.e. broadcast, lane)."""
    if stride == 1:
        s = off + j0
        return src[s:s + n]
    b = buf[:n]
    if stride == 0:
        x = src[off]
        for i in range(n):
            b[i] = x
        return b
    base = off + j0 * stride
    for i in range(n):
        b[i] = src[base + i * stride]
    return b


@njit(**SERIAL_IEEE_DIV, inline="always")
def operand_offsets(idx, shape, strides):
    """Element offsets of multi-index ``idx`` (row-major over ``shape``) in both operands."""
    o0 = 0
    o1 = 0
    for d in range(shape.size - 1, -1, -1):
        q = idx // shape[d]
        i = idx - q * shape[d]
        idx = q
        o0 += i * strides[0, d]
        o1 += i * strides[1, d]
    return o0, o1


# -- broadcast apply ------------------------------------------------------------------------

@njit(**SERIAL_IEEE_DIV)
def _apply_rows(op, u, v, out, shape, strides, n, us, vs, r0, r1):
    """Rows r0..r1 of out[rows, n] = f(u, v); the outer dims are ``shape``/``strides``.
    A 0-stride (broadcast) lane is filled into its buffer only when its offset changes
    (once in all for a scalar broadcast such as sum's upstream gradient)."""
    ubuf = np.empty(BLOCK, out.dtype)
    vbuf = np.empty(BLOCK, out.dtype)
    ulast = -1
    vlast = -1
    for r in range(r0, r1):
        uo, vo = operand_offsets(r, shape, strides)
        if us == 0 and uo != ulast:
            lanes(u, uo, 0, 0, min(BLOCK, n), ubuf)
            ulast = uo
        if vs == 0 and vo != vlast:
            lanes(v, vo, 0, 0, min(BLOCK, n), vbuf)
            vlast = vo
        for j0 in range(0, n, BLOCK):
            m = min(BLOCK, n - j0)
            o = r * n + j0
            binary_block(op, out[o:o + m], ubuf[:m] if us == 0 else lanes(u, uo, us, j0, m, ubuf),
                   vbuf[:m] if vs == 0 else lanes(v, vo, vs, j0, m, vbuf))


@njit(**SERIAL_IEEE_DIV)
def _apply_bias_rows(op, u, v, out, n, us, vs):
    """out[r, :] = f(u[r, :], v[r, :]) over the rows of out[rows, n] (flat), for an op in
    ROW_OPS, where an operand of row stride 0 (``us`` / ``vs``) is one row of n that
    every row reads: a bias added to each row, without the general plan's offsets and
    lane buffers."""
    binary_rows(op, out, u, v, out.size // n, n, us, vs)


@njit(**SERIAL_IEEE_DIV)
def _apply_column(op, u, c, out, n, column_first, r0, r1):
    """out[r, j] = f(u[r, j], c[r]) for r0 <= r < r1, or f(c[r], u[r, j]) when
    ``column_first``, for an op in ROW_OPS: u and out flat [rows, n], c one value per row
    (a [rows, 1] operand, such as a row's mean or norm). Without the general plan's
    offsets and lane buffers, which cost more than the row's work on short rows
    (docs/benchmarks.md#element-wise)."""
    for r in range(r0, r1):
        a, o, s = u[r * n:(r + 1) * n], out[r * n:(r + 1) * n], c[r]
        if op == ADD:
            for j in range(n):
                o[j] = a[j] + s
        elif op == MUL:
            for j in range(n):
                o[j] = a[j] * s
        elif op == SUB:
            if column_first:
                for j in range(n):
                    o[j] = s - a[j]
            else:
                for j in range(n):
                    o[j] = a[j] - s
        elif column_first:
            for j in range(n):
                o[j] = s / a[j]
        else:
            for j in range(n):
                o[j] = a[j] / s


@njit(**PARALLEL_IEEE_DIV)
def _apply_column_parallel(op, u, c, out, n, column_first, rows_per_chunk):
    """``_apply_column`` in fixed runs of ``rows_per_chunk`` rows, one prange iteration
    each."""
    rows = c.size
    for k in prange((rows + rows_per_chunk - 1) // rows_per_chunk):
        r0 = k * rows_per_chunk
        _apply_column(op, u, c, out, n, column_first, r0, min(rows, r0 + rows_per_chunk))


@njit(**PARALLEL_IEEE_DIV)
def _apply_bias_rows_parallel(op, u, v, out, n, us, vs, rows_per_chunk):
    """``_apply_bias_rows`` in fixed runs of ``rows_per_chunk`` rows, one prange
    iteration each."""
    rows = out.size // n
    for c in prange((rows + rows_per_chunk - 1) // rows_per_chunk):
        r0 = c * rows_per_chunk
        r1 = min(rows, r0 + rows_per_chunk)
        binary_rows(op, out[r0 * n:r1 * n], u[r0 * us:], v[r0 * vs:], r1 - r0, n, us, vs)


@njit(**PARALLEL_IEEE_DIV)
def _apply_parallel(op, u, v, out, shape, strides, n, us, vs, rows_per_chunk):
    rows = out.size // n
    nchunks = (rows + rows_per_chunk - 1) // rows_per_chunk
    for c in prange(nchunks):
        r0 = c * rows_per_chunk
        _apply_rows(op, u, v, out, shape, strides, n, us, vs, r0,
                    min(rows, r0 + rows_per_chunk))


# -- planning (Python) ------------------------------------------------------------------

# Strided views (a transpose, a slice) of at most this many elements are copied into C
# order before an element-wise op, which then takes a flat kernel: below this size
# planning the strided loop (in Python, once per call) costs more than the copy; from
# about 128K elements a 2-D view is faster read by the strided kernel. A view of 3 or
# more dims (a permuted activation or gradient) has short inner rows there, and is
# copied up to COPY_VIEW_MAX_ND elements; by 4M the parallel strided kernel wins again
# (docs/benchmarks.md#element-wise).
COPY_VIEW_MAX = 1 << 15
COPY_VIEW_MAX_ND = 1 << 17


def c_order_view(a: np.ndarray) -> np.ndarray:
    """``a``, or a C-order copy of it when it is a small strided view that repeats no
    value (a broadcast is read in place: copying it would write every repeat)."""
    if a.flags.c_contiguous or a.size > (COPY_VIEW_MAX if a.ndim < 3 else COPY_VIEW_MAX_ND):
        return a
    for n, stride in zip(a.shape, a.strides):
        if stride == 0 and n > 1:
            return a
    return np.ascontiguousarray(a)


def flat_operand(arr: np.ndarray, ndim: int) -> tuple[np.ndarray, list[int]]:
    """A 1-D buffer starting at ``arr``'s first element and the element strides of
    ``arr`` left-padded to ``ndim`` dims (0 for size-1 and broadcast axes).

    A strided view is read through its owner's memory: when the array owning the data
    is contiguous with the same dtype, the buffer is a slice of it (so a read-only
    broadcast view of a writeable array does not make the kernels compile a read-only
    signature); otherwise an ``as_strided`` window over the view's extent.
    """
    if any(s < 0 for s in arr.strides):
        arr = np.ascontiguousarray(arr)
    isz = arr.itemsize
    strides = [0] * (ndim - arr.ndim) + [0 if n == 1 else s // isz
                                         for n, s in zip(arr.shape, arr.strides)]
    if arr.flags.c_contiguous:
        return arr.reshape(-1), strides
    if any(s % isz for s in arr.strides):
        return flat_operand(np.ascontiguousarray(arr), ndim)
    extent = 1 + sum((n - 1) * s for n, s in zip(arr.shape, strides[ndim - arr.ndim:]))
    root = arr
    while isinstance(root.base, np.ndarray):
        root = root.base
    if root.dtype == arr.dtype and root.flags.c_contiguous:
        off = arr.__array_interface__["data"][0] - root.__array_interface__["data"][0]
        if off % isz == 0:
            start = off // isz
            return root.reshape(-1)[start:start + extent], strides
    return np.lib.stride_tricks.as_strided(arr, (extent,), (isz,)), strides


@functools.lru_cache(maxsize=512)
def column_nest(full_shape: tuple, u_shape: tuple, v_shape: tuple) -> tuple | None:
    """(rows, n, column_first, k) when one operand has ``full_shape`` and the other, the
    column (u when column_first), is 1 after its first k axes: [rows, n] against one
    value per row, rows = prod(full_shape[:k]) > 1, n > 1. The column may also be 1 on
    leading axes ([N, C, H, W] against [1, C, 1, 1] or [C, 1, 1]: its values repeat over
    the rows); it must match ``full_shape`` on at least one axis. Else None. Kept per
    shapes."""
    nd = len(full_shape)
    for column, other, first in ((v_shape, u_shape, False), (u_shape, v_shape, True)):
        if other != full_shape or column == full_shape:
            continue
        padded = (1,) * (nd - len(column)) + column
        j = 0
        while j < nd and padded[j] == 1 and full_shape[j] != 1:
            j += 1
        k = j
        while k < nd and padded[k] == full_shape[k]:
            k += 1
        if k > j and padded[k:].count(1) == nd - k:
            rows, n = math.prod(full_shape[:k]), math.prod(full_shape[k:])
            return (rows, n, first, k) if rows > 1 and n > 1 else None
    return None


def _row_values(column: np.ndarray, shape: tuple, k: int) -> np.ndarray:
    """The column operand's value for each row of ``column_nest``'s [rows, n] view of
    ``shape`` (the rows being the cells of shape[:k], row-major): the column itself, or
    its values repeated where it is 1 on leading axes."""
    lead = shape[:k]
    if column.size == math.prod(lead):
        return column.reshape(-1)
    values = np.empty(lead, column.dtype)
    values[...] = column.reshape(((1,) * (len(shape) - column.ndim) + column.shape)[:k])
    return values.reshape(-1)


@functools.lru_cache(maxsize=512)
def leading_rows_nest(full_shape: tuple, shapes: tuple) -> tuple | None:
    """``coalesce``'s result for C-contiguous operands each of ``full_shape`` or of its
    trailing dims S = full_shape[lead:] (leading 1s of an operand's shape ignored; one S
    for all), found from the shapes alone: (sizes, strides per operand) with sizes
    [rows, n] (or [n] when every operand is full), strides [n, 1] for a full operand and
    [0, 1] for a trailing one. None for other shapes, or when rows or n is 1 (the plan
    of a bias broadcast over rows, or of equal shapes, without the general planning).
    Kept per shapes (working it out is a tenth of a small bias add); callers must not
    modify it."""
    nd = len(full_shape)
    tail = nd
    for shape in shapes:
        if shape == full_shape:
            continue
        first = next((d for d, n in enumerate(shape) if n != 1), len(shape))
        own = len(shape) - first
        if (tail != nd and own != tail) or shape[first:] != full_shape[nd - own:]:
            return None
        tail = own
    rows, n = math.prod(full_shape[: nd - tail]), math.prod(full_shape[nd - tail:])
    if tail == nd:
        return ([n], [[1] for _ in shapes]) if n > 1 else None
    if rows < 2 or n < 2:
        return None
    return [rows, n], [[n, 1] if shape == full_shape else [0, 1] for shape in shapes]


def coalesce(shape, columns):
    """Drop size-1 dims and merge adjacent dims that every operand (one strides list per
    column) walks contiguously; returns the sizes and one strides list per operand."""
    sizes: list[int] = []
    merged: list[list[int]] = [[] for _ in columns]
    for d, size in enumerate(shape):
        if size == 1:
            continue
        if sizes and all(m[-1] == col[d] * size for m, col in zip(merged, columns)):
            sizes[-1] *= size
            for m, col in zip(merged, columns):
                m[-1] = col[d]
        else:
            sizes.append(size)
            for m, col in zip(merged, columns):
                m.append(col[d])
    return sizes, merged


def broadcast_shapes(op_name: str, a: tuple, b: tuple) -> tuple:
    """NumPy's broadcast of two shapes; ValueError naming the op and both shapes."""
    if a == b:
        return a
    out = _broadcast_of(a, b)
    if out is None:
        raise ValueError(f"{op_name}: shapes {a} and {b} are not broadcastable "
                         f"(NumPy rules: trailing dims must match or be 1)")
    return out


@functools.lru_cache(maxsize=1024)
def _broadcast_of(a: tuple, b: tuple) -> tuple | None:
    """The broadcast of shapes a and b, or None if they do not broadcast. Kept per pair of
    shapes: every binary op asks, and working it out is about a quarter of a small bias
    add ([64, 64] + [64])."""
    n = max(len(a), len(b))
    out = []
    for x, y in zip((1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b):
        if x != y and x != 1 and y != 1:
            return None
        out.append(y if x == 1 else x)
    return tuple(out)


def broadcast_apply(op: int, u: np.ndarray, v: np.ndarray, shape: tuple | None = None,
                    ) -> np.ndarray:
    """``f(u, v)`` elementwise over the NumPy broadcast of ``u`` and ``v`` (same dtype).

    ``op`` is one of the op codes of this module (ADD, SUB, MUL, DIV, POW, ...; see
    ``binary_block`` for their formulas). ``shape`` is the broadcast shape when the caller
    knows it already (not checked again). Returns a new C-contiguous array of that shape
    and the operands' dtype; 0-stride (broadcast) views are read in place, never copied.
    """
    if shape is None:
        shape = broadcast_shapes("broadcast_apply", u.shape, v.shape)
    out = np.empty(shape, u.dtype)
    if out.size == 0:
        return out
    nest = None
    if u.flags.c_contiguous and v.flags.c_contiguous:
        column = column_nest(shape, u.shape, v.shape) if op in ROW_OPS else None
        if column is not None:
            rows, n, first, k = column
            full, c = (v, u) if first else (u, v)
            values = _row_values(c, shape, k)
            if out.size >= PARALLEL_MIN:
                _apply_column_parallel(op, full.reshape(-1), values, out.reshape(-1), n, first,
                                       max(1, CHUNK // n))
            else:
                _apply_column(op, full.reshape(-1), values, out.reshape(-1), n, first, 0, rows)
            return out
        nest = leading_rows_nest(shape, (u.shape, v.shape))
    if nest is not None:
        fu, fv, (sizes, (su, sv)) = u.reshape(-1), v.reshape(-1), nest
        if len(sizes) == 2 and op in ROW_OPS:
            n = sizes[1]
            if out.size >= PARALLEL_MIN:
                _apply_bias_rows_parallel(op, fu, fv, out.reshape(-1), n, su[0], sv[0],
                                          max(1, CHUNK // n))
            else:
                _apply_bias_rows(op, fu, fv, out.reshape(-1), n, su[0], sv[0])
            return out
    else:
        fu, su = flat_operand(u, len(shape))
        fv, sv = flat_operand(v, len(shape))
        sizes, (su, sv) = coalesce(shape, [su, sv])
    if not sizes:
        sizes, su, sv = [1], [0], [0]
    n = sizes[-1]
    outer = np.array(sizes[:-1], np.int64)
    strides = np.array([su[:-1], sv[:-1]], np.int64).reshape(2, len(sizes) - 1)
    flat_out = out.reshape(-1)
    if out.size >= PARALLEL_MIN:
        _apply_parallel(op, fu, fv, flat_out, outer, strides, n, su[-1], sv[-1],
                        max(1, CHUNK // n))
    else:
        _apply_rows(op, fu, fv, flat_out, outer, strides, n, su[-1], sv[-1], 0,
                    out.size // n)
    return out
