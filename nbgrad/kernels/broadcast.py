"""Broadcasting kernels: a binary op applied over NumPy-broadcast operands, and the sum of
a full-size term over the axes along which one operand was broadcast.

Public entry points (plain Python wrappers that plan the loop nest and call the kernels):

* ``broadcast_apply(op, u, v)``: ``op(u, v)`` over the NumPy broadcast of ``u`` and
  ``v`` (same dtype), a new C-contiguous array; no operand is materialised at full size.
* ``sum_to_shape(g, shape)``: ``g`` summed over the axes broadcast to reach ``g.shape``
  from ``shape`` (the backward of broadcasting); the result has exactly ``shape``.
* ``reduce_term(op, u, v, shape, scale)``: ``scale * sum_to_shape(op(u, v), shape)``
  for op COPY, MUL or DIV, without materialising ``op(u, v)`` (e.g. mul's grad_a = sum
  of g*b over the broadcast axes).
* ``mul_grads(g, u, w)``: both gradients of ``u * w`` when ``u`` is broadcast over the
  leading axes of ``w`` (a bias-like vector), in one pass over ``w`` that writes
  ``g * u`` and accumulates the partial sums of ``g * w``.

How a call is planned. Every operand is passed to the kernels as a flat 1-D buffer that
starts at its first element, plus one element stride per dimension (0 along broadcast
axes, so 0-stride views such as ``np.broadcast_to(g, ...)`` are read in place). Adjacent
dimensions that every operand walks the same way are coalesced (``[N, C, H, W] + [1, C,
1, 1]`` becomes ``[N, C, H*W]``), so the loop nest is an outer index decomposed with
divmod and a contiguous inner "lane" loop processed in blocks of ``BLOCK`` elements.
A lane whose stride is not 1 is gathered into a small private buffer first, so the
arithmetic loops (``_block``) always run over contiguous slices and vectorise.

Reductions are race-free and deterministic (kernel rule 2): each parallel task owns a
block of output elements, or, when there are too few output elements to share out, a
private partial over a fixed chunk of the reduced rows; partials are then summed in
chunk order. Chunk counts depend only on the shapes, never on the thread count, so
results are bitwise identical at 1 and 2 threads.

Kernels use Numba's NumPy error model: x / 0 is inf or NaN as in NumPy and PyTorch
(the Python model would raise, and its checks stop the loops vectorising).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .fastmath import log

# Op codes: out = f(u, v) elementwise (v is ignored by COPY).
COPY, ADD, SUB, MUL, DIV, POW, POW_DBASE, POW_DEXP, SIGN_MUL, HALF_DIV = range(10)

BLOCK = 2048         # lanes per inner block (private buffers stay in L1/L2)
CHUNK = 1 << 16      # elements per parallel chunk
PARALLEL_MIN = 1 << 17  # below this many elements the serial kernels run
MAX_CHUNKS = 16      # reduction partials at most (fixed: independent of threads)
TASK_GROUPS = 64     # reduction tasks are handed to threads in at most this many
                     # runs (each run allocates its lane buffers once; every task
                     # still owns its outputs, so results do not depend on it)


# -- inner loops over contiguous slices ----------------------------------------------------

@njit(cache=True, error_model="numpy", inline="always")
def _block(op, out, u, v):
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


@njit(cache=True, error_model="numpy", inline="always")
def _accumulate(op, acc, u, v):
    """acc[l] += f(u[l], v[l]) for the reduction ops COPY (u), MUL (u v), DIV (u / v)."""
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


@njit(cache=True, error_model="numpy", inline="always")
def _lanes(src, off, stride, j0, n, buf):
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


@njit(cache=True, error_model="numpy", fastmath={"reassoc", "nsz"})
def _sum(x):
    """Sum of a short contiguous block (reassociation lets LLVM vectorise it; the order
    is fixed at compile time, so the result does not depend on the thread count)."""
    s = x.dtype.type(0)
    for i in range(x.size):
        s += x[i]
    return s


@njit(cache=True, error_model="numpy", fastmath={"reassoc", "nsz"})
def _reduce_block(op, u, v):
    """Sum of f(u[l], v[l]) over a short block for COPY, MUL, DIV (as ``_sum``)."""
    if op == COPY:
        return _sum(u)
    s = u.dtype.type(0)
    if op == MUL:
        for i in range(u.size):
            s += u[i] * v[i]
    else:
        for i in range(u.size):
            s += u[i] / v[i]
    return s


@njit(cache=True, error_model="numpy", inline="always")
def _offsets(idx, shape, strides):
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

@njit(cache=True, error_model="numpy")
def _apply_rows(op, u, v, out, shape, strides, n, us, vs, r0, r1):
    """Rows r0..r1 of out[rows, n] = f(u, v); the outer dims are ``shape``/``strides``.
    A 0-stride (broadcast) lane is filled into its buffer only when its offset changes
    (once in all for a scalar broadcast such as sum's upstream gradient)."""
    ubuf = np.empty(BLOCK, out.dtype)
    vbuf = np.empty(BLOCK, out.dtype)
    ulast = -1
    vlast = -1
    for r in range(r0, r1):
        uo, vo = _offsets(r, shape, strides)
        if us == 0 and uo != ulast:
            _lanes(u, uo, 0, 0, min(BLOCK, n), ubuf)
            ulast = uo
        if vs == 0 and vo != vlast:
            _lanes(v, vo, 0, 0, min(BLOCK, n), vbuf)
            vlast = vo
        for j0 in range(0, n, BLOCK):
            m = min(BLOCK, n - j0)
            o = r * n + j0
            _block(op, out[o:o + m], ubuf[:m] if us == 0 else _lanes(u, uo, us, j0, m, ubuf),
                   vbuf[:m] if vs == 0 else _lanes(v, vo, vs, j0, m, vbuf))


@njit(cache=True, parallel=True, error_model="numpy")
def _apply_parallel(op, u, v, out, shape, strides, n, us, vs, rows_per_chunk):
    rows = out.size // n
    nchunks = (rows + rows_per_chunk - 1) // rows_per_chunk
    for c in prange(nchunks):
        r0 = c * rows_per_chunk
        _apply_rows(op, u, v, out, shape, strides, n, us, vs, r0,
                    min(rows, r0 + rows_per_chunk))


# -- reductions over broadcast axes ------------------------------------------------------

@njit(cache=True, error_model="numpy")
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
        ku, kv = _offsets(ko, kshape, kstr)
        for r in range(c * rows_per_chunk, min(rows, (c + 1) * rows_per_chunk)):
            ru, rv = _offsets(r, rshape, rstr)
            _accumulate(op, a, _lanes(u, ku + ru, us, j0, m, ubuf),
                        _lanes(v, kv + rv, vs, j0, m, vbuf))
        o = ko * n + j0
        for i in range(m):
            part[c, o + i] = a[i]


@njit(cache=True, error_model="numpy")
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
        ku, kv = _offsets(k, kshape, kstr)
        s = part.dtype.type(0)
        for r in range(cr * rows_per_chunk, min(rows, (cr + 1) * rows_per_chunk)):
            ru, rv = _offsets(r, rshape, rstr)
            for j0 in range(cl * lanes_per_chunk, min(n, (cl + 1) * lanes_per_chunk), BLOCK):
                m = min(BLOCK, n - j0, (cl + 1) * lanes_per_chunk - j0)
                s += _reduce_block(op, _lanes(u, ku + ru, us, j0, m, ubuf),
                                   _lanes(v, kv + rv, vs, j0, m, vbuf))
        part[c, k] = s


@njit(cache=True, parallel=True, error_model="numpy")
def _reduce_kept_lane_parallel(op, u, v, part, kshape, kstr, rshape, rstr, n, us, vs,
                               rows_per_chunk):
    ntasks = part.shape[0] * (part.shape[1] // n) * ((n + BLOCK - 1) // BLOCK)
    per = (ntasks + TASK_GROUPS - 1) // TASK_GROUPS
    for grp in prange((ntasks + per - 1) // per):
        _reduce_kept_lane(op, u, v, part, kshape, kstr, rshape, rstr, n, us, vs,
                          rows_per_chunk, grp * per, min(ntasks, (grp + 1) * per))


@njit(cache=True, parallel=True, error_model="numpy")
def _reduce_lane_parallel(op, u, v, part, kshape, kstr, rshape, rstr, n, us, vs,
                          rows_per_chunk, lanes_per_chunk):
    ntasks = part.shape[0] * part.shape[1]
    per = (ntasks + TASK_GROUPS - 1) // TASK_GROUPS
    for grp in prange((ntasks + per - 1) // per):
        _reduce_lane(op, u, v, part, kshape, kstr, rshape, rstr, n, us, vs,
                     rows_per_chunk, lanes_per_chunk, grp * per, min(ntasks, (grp + 1) * per))


@njit(cache=True, error_model="numpy")
def _flat_chunk(op, u, v, c):
    s = c * CHUNK
    e = min(u.size, s + CHUNK)
    return _reduce_block(op, u[s:e], v[s:e])


@njit(cache=True, error_model="numpy")
def _ordered_total(part, scale, out):
    total = part[0]
    for c in range(1, part.size):
        total += part[c]
    out[0] = total * scale


@njit(cache=True, error_model="numpy")
def _reduce_flat(op, u, v, scale, out):
    """out[0] = scale * sum of f(u, v) over contiguous 1-D u, v (size >= 1): partial sums
    over fixed chunks of CHUNK elements, added in chunk order."""
    part = np.empty((u.size + CHUNK - 1) // CHUNK, out.dtype)
    for c in range(part.size):
        part[c] = _flat_chunk(op, u, v, c)
    _ordered_total(part, scale, out)


@njit(cache=True, parallel=True, error_model="numpy")
def _reduce_flat_parallel(op, u, v, scale, out):
    """``_reduce_flat`` with the chunks shared among threads (same chunks, same order)."""
    part = np.empty((u.size + CHUNK - 1) // CHUNK, out.dtype)
    for c in prange(part.size):
        part[c] = _flat_chunk(op, u, v, c)
    _ordered_total(part, scale, out)


@njit(cache=True, error_model="numpy")
def _combine(part, out, scale):
    """out[k] = scale * sum over chunks c (in order) of part[c, k]."""
    one = out.dtype.type(1)
    for k in range(out.size):
        s = part[0, k]
        for c in range(1, part.shape[0]):
            s += part[c, k]
        out[k] = s if scale == one else s * scale


@njit(cache=True, error_model="numpy")
def _scale(x, scale):
    for i in range(x.size):
        x[i] *= scale


# -- mul's backward, both gradients in one pass --------------------------------------------

@njit(cache=True, error_model="numpy")
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


@njit(cache=True, parallel=True, error_model="numpy")
def _mul_grads_rows_parallel(g, full_g, a, b, gb, part, rows_per_chunk):
    for c in prange(part.shape[0]):
        _mul_grads_rows(g, full_g, a, b, gb, part, rows_per_chunk, c, c + 1)


# -- planning (Python) ------------------------------------------------------------------

def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _flat(arr: np.ndarray, ndim: int) -> tuple[np.ndarray, list[int]]:
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
        return _flat(np.ascontiguousarray(arr), ndim)
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


def _coalesce(shape, columns):
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
    n = max(len(a), len(b))
    pa = (1,) * (n - len(a)) + a
    pb = (1,) * (n - len(b)) + b
    out = []
    for x, y in zip(pa, pb):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"{op_name}: shapes {a} and {b} are not broadcastable "
                             f"(NumPy rules: trailing dims must match or be 1)")
        out.append(y if x == 1 else x)
    return tuple(out)


def broadcast_apply(op: int, u: np.ndarray, v: np.ndarray, shape: tuple | None = None,
                    ) -> np.ndarray:
    """``f(u, v)`` elementwise over the NumPy broadcast of ``u`` and ``v`` (same dtype).

    ``op`` is one of the op codes of this module (ADD, SUB, MUL, DIV, POW, ...; see
    ``_block`` for their formulas). ``shape`` is the broadcast shape when the caller
    knows it already (not checked again). Returns a new C-contiguous array of that shape
    and the operands' dtype; 0-stride (broadcast) views are read in place, never copied.
    """
    if shape is None:
        shape = broadcast_shapes("broadcast_apply", u.shape, v.shape)
    out = np.empty(shape, u.dtype)
    if out.size == 0:
        return out
    nd = len(shape)
    fu, su = _flat(u, nd)
    fv, sv = _flat(v, nd)
    sizes, (su, sv) = _coalesce(shape, [su, sv])
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
            and all(s == 1 for s in shape)):
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
    fu, su = _flat(u, nd)
    fv, sv = _flat(v, nd)
    # the result's own strides: contiguous over its dims, 0 where it is broadcast
    sx = [0] * nd
    step = 1
    for d in range(nd - 1, -1, -1):
        if pshape[d] != 1:
            sx[d] = step
            step *= pshape[d]
    sizes, (su, sv, sx) = _coalesce(full_shape, [su, sv, sx])
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
        nchunks = 1 if tasks >= MAX_CHUNKS // 2 else min(rows, want)
        rpc = _ceil_div(rows, nchunks)
        nchunks = _ceil_div(rows, rpc)
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
