"""Pointwise convolutions as matrix products: a kernel-1, stride-1, unpadded, one-group
conv2d (or conv1d, or neuraloperator's ChannelMLP on [B, C, N] points) is one matrix
product per image on kernels/matmul.py's register-tiled GEMM, with no im2col and no
padded planes.

With x viewed as [N, C, S] (S = H W positions), w as W[F, C] and g = dL/dy as [N, F, S]:

    y[n]  = W @ x[n] (+ b[f] on every row f)            one [F, C] @ [C, S] per image
    dx[n] = W^T @ g[n]                                   one [C, F] @ [F, S] per image
    dW    = sum_n g[n] @ x[n]^T                          (see below)
    db[f] = sum_{n, s} g[n, f, s]                        (ops/conv.py: conv2d_bias_grad)

The kernel is 1x1, so the dilation moves no tap: a layer whose output is as large as its
input (ops/conv_plan.py checks it) is exactly these products whatever its dilation.

A side of at most FEW_CHANNELS channels (a lift from the few channels of a grid and its
coordinates, a projection onto one output) leaves the GEMM nothing to tile: the depth
of y and dx, or one dimension of dW, is a handful. Those products are loops over rows of
S positions instead (``few_channel_product``, ``few_channel_weight_grad``), each row read
or written once, which is all the work there is.

dW is one [F, S] @ [S, C] product per image (x read transposed in place), the partials
summed in image order (``sum_partials``), a chunk of at most PARTIALS_MAX_BYTES of
partials at a time. Joining the batch along the positions instead (g and x copied to
[F, N S] and [C, N S], one product with K = N S) pays for the copies wherever this family
is taken, and wins only on maps of a few positions, which take the other families
(ops/conv_plan.py: POINTWISE_MIN_MAP; docs/benchmarks.md#conv-paths).
Every product gives the same bits at any thread count (kernels/matmul.py: each output
element is one FMA chain over k in ascending order, owned by one task), and the partials
are summed in a fixed order, so no result here depends on the thread count.

Entry points, as every conv family's (kernels/conv.py): ``forward(x, w, b, geometry,
run)``, ``input_grad(g, w, dx, geometry, run)``, ``weight_grad(x, g, geometry, run)``;
``run.slots`` is the thread count the products split their output over and
``run.parallel`` whether they run on the pool.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import njit, prange

from ..runtime.jit import PARALLEL, PARALLEL_FUSED, PARALLEL_MIN, SERIAL, njit_with_serial
from . import conv, matmul
from .activation import NO_ACTIVATION
from .basics import dot
from .conv import ConvGeometry, KernelRun

# dW partials (one [F, C] product per image) are summed a chunk of images at a time, so
# that a large batch does not hold N F C partials at once.
PARTIALS_MAX_BYTES = 8 << 20
# A product with at most this many channels on one side runs as row loops (see above).
FEW_CHANNELS = 4


@functools.lru_cache(maxsize=64)
def _maps(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(zeros, arange) batch maps of n products: one matrix against n, read-only."""
    zeros, arange = np.zeros(n, np.int64), np.arange(n, dtype=np.int64)
    zeros.flags.writeable = arange.flags.writeable = False
    return zeros, arange


def _stack(a: np.ndarray) -> np.ndarray:
    """[N, C, H, W] as [N, C, H W] (a view of a C-contiguous array)."""
    return a.reshape(a.shape[0], a.shape[1], a.shape[2] * a.shape[3])


def _matrix(w: np.ndarray) -> np.ndarray:
    """w[F, C, 1, 1] as a stack of one [F, C] matrix."""
    return w.reshape(1, w.shape[0], w.shape[1])


@njit_with_serial(**PARALLEL_FUSED)
def few_channel_product(w, x, y):
    """y[n, f] = sum_c w[f, c] x[n, c] over rows of S positions, c ascending (FMA), for
    w [F, C] (any strides) with few columns, x [N, C, S], y [N, F, S] (C >= 1). One
    prange iteration per output row (n, f)."""
    N, C, S = x.shape
    F = w.shape[0]
    for t in prange(N * F):
        n, f = t // F, t % F
        row = y[n, f]
        first, w0 = x[n, 0], w[f, 0]
        for s in range(S):
            row[s] = w0 * first[s]
        for c in range(1, C):
            src, wc = x[n, c], w[f, c]
            for s in range(S):
                row[s] += wc * src[s]


def _few_channel_rows(w: np.ndarray, x: np.ndarray, run: KernelRun) -> np.ndarray:
    """[N, F, S] = w [F, C] @ x[n] [C, S] for every image by row loops (1 <= C <=
    FEW_CHANNELS; w any strides)."""
    y = np.empty((x.shape[0], w.shape[0], x.shape[2]), x.dtype)
    (few_channel_product if run.parallel else few_channel_product.serial)(w, x, y)
    return y


def forward(x: np.ndarray, w: np.ndarray, b: np.ndarray, geometry: ConvGeometry,
            run: KernelRun, activation: int) -> np.ndarray:
    """y[n] = activation(W @ x[n] + b) (b and the activation in a second pass, skipped
    when b is all zeros and there is no activation)."""
    N, C, H, W = x.shape
    if 1 <= C <= FEW_CHANNELS:
        y = _few_channel_rows(_matrix(w)[0], _stack(x), run)
    else:
        zeros, arange = _maps(N)
        y = matmul.product(_matrix(w), _stack(x), zeros, arange, False, False, run.slots,
                           run.parallel)
    y = y.reshape(N, w.shape[0], H, W)
    if b.size and (b.any() or activation != NO_ACTIVATION):
        kernel = conv.add_channel_bias
        (kernel if y.size >= PARALLEL_MIN else kernel.serial)(y, b, activation)
    return y


def input_grad(g: np.ndarray, w: np.ndarray, dx: np.ndarray, geometry: ConvGeometry,
               run: KernelRun) -> np.ndarray:
    """dx[n] = W^T @ g[n] (W read transposed in place); a new array of dx's shape."""
    if 1 <= g.shape[1] <= FEW_CHANNELS:
        return _few_channel_rows(_matrix(w)[0].T, _stack(g), run).reshape(dx.shape)
    zeros, arange = _maps(g.shape[0])
    return matmul.product(_matrix(w), _stack(g), zeros, arange, True, False, run.slots,
                          run.parallel).reshape(dx.shape)


@njit_with_serial(**PARALLEL)
def sum_partials(acc, partials):
    """acc[j] += partials[0, j] + partials[1, j] + ... in image order (summed in acc's
    dtype), one element j per task: the same bits at any thread count."""
    n, m = partials.shape
    for j in prange(m):
        s = acc[j]
        for i in range(n):
            s += partials[i, j]
        acc[j] = s


@njit_with_serial(**PARALLEL)
def few_channel_weight_grad(g, x, dw):
    """dw[f, c] = sum_n g[n, f] . x[n, c] (``basics.dot`` over the S positions, the images
    in order) for g [N, F, S], x [N, C, S], one side few: one prange iteration per row f
    when F is the larger side, else per column c (the same sums either way)."""
    N, F, S = g.shape
    C = x.shape[1]
    if F >= C:
        for f in prange(F):
            for c in range(C):
                dw[f, c] = _image_sum(g, x, f, c)
    else:
        for c in prange(C):
            for f in range(F):
                dw[f, c] = _image_sum(g, x, f, c)


@njit(**SERIAL)
def _image_sum(g, x, f, c):
    acc = g.dtype.type(0)
    for n in range(g.shape[0]):
        acc += dot(g[n, f], x[n, c], g.shape[2])
    return acc


def weight_grad(x: np.ndarray, g: np.ndarray, geometry: ConvGeometry,
                run: KernelRun) -> np.ndarray:
    """dW[F, C, 1, 1] = sum_n g[n] @ x[n]^T: one [F, S] @ [S, C] product per image, the
    partials summed in image order (or row dots for a few channels on one side)."""
    N, C = x.shape[:2]
    F = g.shape[1]
    xs, gs = _stack(x), _stack(g)
    if min(F, C) <= FEW_CHANNELS:
        dw = np.empty((F, C), x.dtype)
        (few_channel_weight_grad if run.parallel else few_channel_weight_grad.serial)(gs, xs, dw)
        return dw.reshape(F, C, 1, 1)
    dw = np.zeros(F * C, x.dtype)
    chunk = max(1, PARTIALS_MAX_BYTES // max(1, F * C * x.itemsize))
    summing = sum_partials if F * C * min(N, chunk) >= PARALLEL_MIN else sum_partials.serial
    for n0 in range(0, N, chunk):
        n1 = min(N, n0 + chunk)
        _, arange = _maps(n1 - n0)
        partials = matmul.product(gs[n0:n1], xs[n0:n1], arange, arange, False, True,
                                  run.slots, run.parallel)
        summing(dw, partials.reshape(n1 - n0, F * C))
    return dw.reshape(F, C, 1, 1)
