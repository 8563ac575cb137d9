"""Reduction kernels: max/min over the trailing axis of a [K, R] array and their
tie-splitting backward, a small scaling kernel for mean's backward, and the row kernels of
var/std (``moment_rows``) and the vector norms (``norm_rows``), forward and backward.

sum and mean are ``broadcast_sum.reduce_term(COPY, ...)``: summing over axes is the
backward of broadcasting, so they share its race-free, thread-count independent loop
nest (a whole contiguous array takes its flat chunked path). max/min take x with the
reduced axes moved last and flattened, ``x2[K, R]``.

max/min forward: each row is cut into fixed chunks of ``CHUNK`` elements (a count that
depends on R only); every (row, chunk) task writes its own partial extremum, and the
partials are combined per row. NaN propagates (as ``torch.amax``): a row holding a NaN
has extremum NaN. Max is exact, so the result never depends on the chunking anyway.
Derivations: docs/derivations.md#reductions.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from ..runtime.jit import CHUNK, PARALLEL_IEEE_DIV, PARALLEL_MIN, SERIAL_IEEE_DIV, njit_with_serial


def _extremum_of_two(larger: bool):
    """An intrinsic for the larger (or smaller) of two numbers: LLVM's maxnum (minnum)
    for floats, which gives the other operand where one is NaN, and a compare and select
    for integers. LLVM vectorises a running maximum written with it; a running
    ``v if v > m else m`` of floats it left scalar, even with Numba's no-NaN fast-math
    flag on every instruction."""
    @intrinsic
    def of_two(typingctx, a, b):
        def codegen(context, builder, signature, args):
            kind = signature.return_type
            if isinstance(kind, types.Float):
                ty = context.get_value_type(kind)
                name = f"llvm.{'maxnum' if larger else 'minnum'}.f{kind.bitwidth}"
                fnty = ir.FunctionType(ty, [ty, ty])
                return builder.call(cgutils.get_or_insert_function(builder.module, fnty, name),
                                    args)
            compare = (builder.icmp_signed if getattr(kind, "signed", False)
                       else builder.icmp_unsigned)
            return builder.select(compare(">" if larger else "<", *args), *args)

        return a(a, a), codegen

    return of_two


_larger, _smaller = _extremum_of_two(True), _extremum_of_two(False)


# Rows of at least VECTOR_MIN elements take the vectorised path of ``_extremum``. LLVM
# runs its maxnum loop 64 float32 values a pass (four vectors, four running maxima) and
# the values left over one at a time, so that loop takes whole blocks of VECTOR_BLOCK
# values and a plain loop compares the rest. From one whole block (64) on, this beats
# the scalar loop, whose NaN branch per element keeps LLVM from vectorising it; a
# shorter row has no whole block and stays scalar (docs/benchmarks.md#reductions).
VECTOR_MIN = 64
VECTOR_BLOCK = np.uint64(64)


@njit(**SERIAL_IEEE_DIV)
def _extremum(x, is_min):
    """max (or min) of a contiguous 1-D block; its first NaN if the block holds a NaN.
    Long blocks: a count of NaNs, then the running maximum (minimum), both loops
    vectorised (of the equal 0.0 and -0.0, either may come back)."""
    if x.size < VECTOR_MIN:
        return _extremum_scalar(x, is_min)
    nans = 0
    for i in range(np.uint64(x.size)):
        nans += x[i] != x[i]
    if nans:
        return _first_nan(x)
    n = np.uint64(x.size)
    blocks = n - n % VECTOR_BLOCK
    m = x[0]
    if is_min:
        for i in range(blocks):
            m = _smaller(m, x[i])
        for i in range(blocks, n):
            if x[i] < m:
                m = x[i]
    else:
        for i in range(blocks):
            m = _larger(m, x[i])
        for i in range(blocks, n):
            if x[i] > m:
                m = x[i]
    return m


@njit(**SERIAL_IEEE_DIV)
def _first_nan(x):
    """The first NaN of ``x`` (called when it holds one; x[0] only types the return)."""
    for i in range(x.size):
        if x[i] != x[i]:
            return x[i]
    return x[0]


@njit(**SERIAL_IEEE_DIV, inline="always")
def _extremum_scalar(x, is_min):
    """``_extremum`` element by element, stopping at the first NaN."""
    m = x[0]
    if is_min:
        for i in range(1, x.size):
            v = x[i]
            if v < m or v != v:
                m = v
                if v != v:
                    return v
    else:
        for i in range(1, x.size):
            v = x[i]
            if v > m or v != v:
                m = v
                if v != v:
                    return v
    return m


@njit(**SERIAL_IEEE_DIV, inline="always")
def _extremum_task(x2, is_min, part, t):
    nch = part.shape[1]
    k = t // nch
    c = t - k * nch
    s = c * CHUNK
    part[k, c] = _extremum(x2[k, s:min(x2.shape[1], s + CHUNK)], is_min)


@njit(**PARALLEL_IEEE_DIV)
def _extremum_tasks_parallel(x2, is_min, part):
    for t in prange(part.size):
        _extremum_task(x2, is_min, part, t)


def extremum_rows(x2: np.ndarray, is_min: bool) -> np.ndarray:
    """max (or min) of every row of contiguous ``x2[K, R]`` (R >= 1), shape [K]."""
    nrow, ncol = x2.shape
    part = np.empty((nrow, (ncol + CHUNK - 1) // CHUNK), x2.dtype)
    if x2.size >= PARALLEL_MIN:
        _extremum_tasks_parallel(x2, is_min, part)
    else:
        _extremum_tasks(x2, is_min, part)
    if part.shape[1] == 1:
        return part.reshape(nrow)
    out = np.empty(nrow, x2.dtype)
    _combine_rows(part, is_min, out)
    return out


@njit(**SERIAL_IEEE_DIV)
def _extremum_tasks(x2, is_min, part):
    for t in range(part.size):
        _extremum_task(x2, is_min, part, t)


@njit(**SERIAL_IEEE_DIV)
def _combine_rows(part, is_min, out):
    for k in range(out.size):
        out[k] = _extremum(part[k], is_min)


@njit(**SERIAL_IEEE_DIV, inline="always")
def _extremum_backward_rows(x2, m, g, out, k, spread_nan):
    """Row k: out[k, j] = g[k] / n_k where x2[k, j] is the extremum m[k], else 0, n_k being
    the number of tied extrema in row k (the gradient is split evenly among ties).

    A NaN extremum: with ``spread_nan`` the NaN entries are the ties (torch.max() without
    dim); without, the whole row is NaN (torch.amax: g / 0 ties * 0)."""
    ncol = x2.shape[1]
    zero = out.dtype.type(0)
    mk = m[k]
    if mk != mk and not spread_nan:
        for j in range(ncol):
            out[k, j] = mk
        return
    n = 0
    for j in range(ncol):
        v = x2[k, j]
        if v == mk or (v != v and mk != mk):
            n += 1
    share = g[k] / out.dtype.type(n)  # n >= 1: m[k] is an entry of row k
    for j in range(ncol):
        v = x2[k, j]
        out[k, j] = share if (v == mk or (v != v and mk != mk)) else zero


@njit(**PARALLEL_IEEE_DIV)
def _extremum_backward_parallel(x2, m, g, out, spread_nan):
    for k in prange(x2.shape[0]):
        _extremum_backward_rows(x2, m, g, out, k, spread_nan)


@njit(**SERIAL_IEEE_DIV)
def _extremum_backward_serial(x2, m, g, out, spread_nan):
    for k in range(x2.shape[0]):
        _extremum_backward_rows(x2, m, g, out, k, spread_nan)


def extremum_rows_backward(x2: np.ndarray, m: np.ndarray, g: np.ndarray,
                           spread_nan: bool) -> np.ndarray:
    """Gradient of ``extremum_rows`` for upstream ``g[K]``: out[k, j] = g[k] / n_k where
    x2[k, j] == m[k], else 0 (n_k tied extrema in row k; each row owned by one task). A
    row whose extremum is NaN: g[k] / n_k to its n_k NaNs with ``spread_nan``, else NaN
    throughout (see ``_extremum_backward_rows``)."""
    out = np.empty(x2.shape, g.dtype)
    if x2.size >= PARALLEL_MIN:
        _extremum_backward_parallel(x2, m, g, out, spread_nan)
    else:
        _extremum_backward_serial(x2, m, g, out, spread_nan)
    return out


@njit(**SERIAL_IEEE_DIV)
def scaled(x, s, out):
    """out[i] = x[i] * s (contiguous 1-D)."""
    for i in range(x.size):
        out[i] = x[i] * s


# -- var, std ------------------------------------------------------------------------------
# Row k of x2[K, R] (the reduced axes moved last): mean m_k = sum_j x_kj / R and
# var_k = sum_j (x_kj - m_k)^2 / dof, dof = max(R - correction, 0) (two passes, summed in
# float64 in row order; dof = 0 gives inf, or NaN when every x_kj = m_k, as PyTorch).
# Backward: d var_k / d x_kj = 2 (x_kj - m_k) / dof (the terms through m_k sum to zero);
# std_k = sqrt(var_k) adds the factor 1 / (2 std_k), taken as 0 where std_k = 0 (PyTorch's
# masked_fill: a constant row has zero gradient). docs/derivations.md#reductions.
# Each row is one prange iteration, so the bits do not depend on the thread count.


@njit_with_serial(**PARALLEL_IEEE_DIV)
def moment_rows(x2, dof, take_sqrt, mean, out):
    """mean[k] and out[k] = var (or std, with ``take_sqrt``) of row k of x2, as above."""
    n = np.float64(x2.shape[1])
    for k in prange(x2.shape[0]):
        s = 0.0
        for j in range(x2.shape[1]):
            s += np.float64(x2[k, j])
        m = s / n
        q = 0.0
        for j in range(x2.shape[1]):
            d = np.float64(x2[k, j]) - m
            q += d * d
        v = q / dof
        mean[k] = m
        out[k] = np.sqrt(v) if take_sqrt else v


@njit_with_serial(**PARALLEL_IEEE_DIV)
def moment_rows_backward(x2, mean, g, y, dof, is_std, out):
    """out[k, j] = (2 / dof) gv_k (x2[k, j] - mean[k]); gv_k = g[k] for var, and
    g[k] / (2 y[k]) (0 where y[k] = 0) for std, y the forward's result."""
    two = out.dtype.type(2)
    zero = out.dtype.type(0)
    for k in prange(x2.shape[0]):
        gv = g[k]
        if is_std:
            gv = zero if y[k] == 0 else gv / (two * y[k])
        c = (two / dof) * gv
        m = mean[k]
        for j in range(x2.shape[1]):
            out[k, j] = c * (x2[k, j] - m)


# -- vector norms ----------------------------------------------------------------------------
# ||x_k||_p of row k (torch.linalg.vector_norm), modes and their gradients, a_j = |x_kj|,
# n = the norm, g = g[k] (docs/derivations.md#reductions):
#   P2    sqrt(sum a^2)            g x / n                     (0 where n = 0)
#   P1    sum a                    g sign(x)                   (sign(0) = sign(NaN) = 0)
#   PINF  max a (NaN if any NaN)   g sign(x) / t on the t entries with a = n, else 0
#   NINF  min a (NaN if any NaN)   the same, over the minima
#   P0    #(x != 0)                0
#   PGEN  (sum a^p)^(1/p)          g sign(x) a^(p-1) / n^(p-1)  (0 where n = 0, and at
#                                  x = 0: a^(p-1) is 0 for p > 1 and masked for p < 1)
# Sums run in float64 in row order (no overflow from squaring float32); a general p uses
# libm's pow (scalar): the common orders take the vectorisable loops.
P2, P1, PINF, NINF, P0, PGEN = range(6)


@njit(**SERIAL_IEEE_DIV, inline="always")
def _sign(v, one):
    return one if v > 0 else (-one if v < 0 else one - one)


@njit(**SERIAL_IEEE_DIV, inline="always")
def _abs_extremum(row, is_min):
    """max (or min) of |row| (NaN if the row holds a NaN; R >= 1)."""
    m = abs(row[0])
    for j in range(1, row.size):
        a = abs(row[j])
        if a != a:
            return a
        if (a < m) if is_min else (a > m):
            m = a
    return m


@njit_with_serial(**PARALLEL_IEEE_DIV)
def norm_rows(x2, mode, p, out):
    """out[k] = ||x2[k]||_p for the ``mode`` codes above (``p`` used by PGEN)."""
    for k in prange(x2.shape[0]):
        row = x2[k]
        s = 0.0
        if mode == PINF or mode == NINF:
            s = np.float64(_abs_extremum(row, mode == NINF))
        elif mode == P2:
            for j in range(row.size):
                v = np.float64(row[j])
                s += v * v
            s = np.sqrt(s)
        elif mode == P1:
            for j in range(row.size):
                s += abs(np.float64(row[j]))
        elif mode == P0:
            for j in range(row.size):
                s += 1.0 if row[j] != 0 else 0.0
        else:
            for j in range(row.size):
                s += abs(np.float64(row[j])) ** p
            s = s ** (1.0 / p)
        out[k] = s


@njit_with_serial(**PARALLEL_IEEE_DIV)
def norm_rows_backward(x2, n, g, mode, p, out):
    """out[k, j] = d ||x2[k]||_p / d x2[k, j] times g[k], as in the table above."""
    one = out.dtype.type(1)
    zero = out.dtype.type(0)
    for k in prange(x2.shape[0]):
        row = x2[k]
        gk = g[k]
        nk = n[k]
        if mode == P2:
            c = zero if nk == 0 else gk / nk
            for j in range(row.size):
                out[k, j] = row[j] * c
        elif mode == P1:
            for j in range(row.size):
                out[k, j] = gk * _sign(row[j], one)
        elif mode == PINF or mode == NINF:
            t = 0
            for j in range(row.size):
                t += 1 if abs(row[j]) == nk else 0
            share = gk / out.dtype.type(t if t > 0 else 1)
            for j in range(row.size):
                out[k, j] = share * _sign(row[j], one) if abs(row[j]) == nk else zero
        elif mode == P0:
            for j in range(row.size):
                out[k, j] = zero
        else:
            c = zero if nk == 0 else gk / out.dtype.type(np.float64(nk) ** (p - 1.0))
            for j in range(row.size):
                v = row[j]
                a = out.dtype.type(abs(np.float64(v)) ** (p - 1.0))
                out[k, j] = zero if v == 0 else c * (_sign(v, one) * a)
