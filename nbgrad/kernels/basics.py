"""Small loops that many kernels inline: a dot product and a sum that LLVM vectorises
(their summation order fixed by the vector width, never by the thread count), and a copy
without a slice assignment's shape check."""

from numba import njit

from ..runtime.jit import SERIAL, SERIAL_FUSED


@njit(**SERIAL_FUSED)
def dot(a, b, n):
    """sum_{j < n} a[j] * b[j], reassociated so that LLVM vectorises it (the summation
    order depends on the machine's vector width, never on the thread count), with FMA."""
    acc = a.dtype.type(0)
    for j in range(n):
        acc += a[j] * b[j]
    return acc


@njit(**SERIAL)
def copy_into(dst, src):
    """dst[j] = src[j] for j < src.size (1-D arrays, dst at least as long). A loop, not a slice
    assignment, whose shape check compiles Numba's error message (string formatting)
    into the kernel: seconds of a cold start per pair of dimensions."""
    for j in range(src.size):
        dst[j] = src[j]

@njit(**SERIAL_FUSED)
def vector_sum(a):
    """sum of a 1-D array in a's dtype, reassociated like ``dot``."""
    s = a.dtype.type(0)
    for j in range(a.size):
        s += a[j]
    return s
