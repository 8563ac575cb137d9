"""Element-wise kernels on flat contiguous arrays: unary ops (exp, log, sqrt, abs, neg)
and the fast paths of the binary ops that need no broadcasting plan: two arrays of one
shape, or an array with a scalar; and both gradients of a same-shape product in one pass.

Binary op codes and their formulas are those of ``strided_apply.binary_block``;
broadcasting operands go through ``strided_apply.broadcast_apply`` instead. The callers
run arrays below ``_jit.PARALLEL_MIN`` elements serially (thread start-up would cost more
than the loop), larger ones in fixed chunks of ``_jit.CHUNK`` elements (the ``_parallel``
kernels). Derivatives: docs/derivations.md#element-wise-arithmetic.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ._jit import CHUNK, PARALLEL_IEEE_DIV, SERIAL_IEEE_DIV
from .fastmath import exp, log
from .strided_apply import BLOCK, binary_block

# Unary op codes.
EXP, LOG, SQRT, ABS, NEG = range(5)


@njit(**SERIAL_IEEE_DIV)
def _unary_block(op, x, out):
    """out[i] = f(x[i]) for EXP (fastmath exp), LOG (fastmath log), SQRT (the sqrt
    instruction, not libm), ABS, NEG."""
    if op == EXP:
        for i in range(x.size):
            out[i] = exp(x[i])
    elif op == LOG:
        for i in range(x.size):
            out[i] = log(x[i])
    elif op == SQRT:
        for i in range(x.size):
            out[i] = np.sqrt(x[i])
    elif op == ABS:
        for i in range(x.size):
            out[i] = abs(x[i])
    elif op == NEG:
        for i in range(x.size):
            out[i] = -x[i]


@njit(**SERIAL_IEEE_DIV)
def unary(op, x, out):
    """Serial unary kernel on 1-D contiguous ``x`` and ``out``."""
    _unary_block(op, x, out)


@njit(**PARALLEL_IEEE_DIV)
def unary_parallel(op, x, out):
    """``unary`` in fixed chunks of CHUNK elements, one prange iteration each."""
    nchunks = (x.size + CHUNK - 1) // CHUNK
    for c in prange(nchunks):
        s = c * CHUNK
        e = min(x.size, s + CHUNK)
        _unary_block(op, x[s:e], out[s:e])


@njit(**SERIAL_IEEE_DIV)
def binary(op, u, v, out):
    """Serial same-shape binary kernel on 1-D contiguous arrays (op codes of strided_apply)."""
    binary_block(op, out, u, v)


@njit(**PARALLEL_IEEE_DIV)
def binary_parallel(op, u, v, out):
    """``binary`` in fixed chunks of CHUNK elements, one prange iteration each."""
    nchunks = (u.size + CHUNK - 1) // CHUNK
    for c in prange(nchunks):
        s = c * CHUNK
        e = min(u.size, s + CHUNK)
        binary_block(op, out[s:e], u[s:e], v[s:e])


@njit(**SERIAL_IEEE_DIV)
def _mul_grads_block(g, a, b, grad_a, grad_b):
    for i in range(g.size):
        grad_a[i] = g[i] * b[i]
        grad_b[i] = g[i] * a[i]


@njit(**SERIAL_IEEE_DIV)
def mul_grads(g, a, b, grad_a, grad_b):
    """Both gradients of a * b for operands of the output's shape, in one pass:
    grad_a = g * b, grad_b = g * a (1-D contiguous arrays of one dtype)."""
    _mul_grads_block(g, a, b, grad_a, grad_b)


@njit(**PARALLEL_IEEE_DIV)
def mul_grads_parallel(g, a, b, grad_a, grad_b):
    """``mul_grads`` in fixed chunks of CHUNK elements, one prange iteration each."""
    nchunks = (g.size + CHUNK - 1) // CHUNK
    for c in prange(nchunks):
        s = c * CHUNK
        e = min(g.size, s + CHUNK)
        _mul_grads_block(g[s:e], a[s:e], b[s:e], grad_a[s:e], grad_b[s:e])


@njit(**SERIAL_IEEE_DIV)
def _scalar_range(op, x, s, out, scalar_first, i0, i1):
    """out[i] = f(x[i], s) (or f(s, x[i]) when ``scalar_first``) for i in [i0, i1): the
    scalar fills one block buffer once, then every block runs the two-array loop."""
    buf = np.empty(min(BLOCK, i1 - i0), out.dtype)
    for i in range(buf.size):
        buf[i] = s
    for j0 in range(i0, i1, BLOCK):
        m = min(BLOCK, i1 - j0)
        if scalar_first:
            binary_block(op, out[j0:j0 + m], buf[:m], x[j0:j0 + m])
        else:
            binary_block(op, out[j0:j0 + m], x[j0:j0 + m], buf[:m])


@njit(**SERIAL_IEEE_DIV)
def binary_scalar(op, x, s, out, scalar_first):
    """Serial binary kernel of 1-D contiguous ``x`` with the scalar ``s``."""
    _scalar_range(op, x, s, out, scalar_first, 0, x.size)


@njit(**PARALLEL_IEEE_DIV)
def binary_scalar_parallel(op, x, s, out, scalar_first):
    """``binary_scalar`` in fixed chunks of CHUNK elements, one prange iteration each."""
    nchunks = (x.size + CHUNK - 1) // CHUNK
    for c in prange(nchunks):
        s0 = c * CHUNK
        _scalar_range(op, x, s, out, scalar_first, s0, min(x.size, s0 + CHUNK))
