"""Resampling kernels on planes x[P, H, W] (P = N*C; 1-D signals are planes of one row).

* ``separable_forward``: y[p, oh, ow] = sum_b ww[ow, b] sum_a wh[oh, a] x[p, ih[oh, a],
  iw[ow, b]], the interpolation of every mode (nearest: one tap of weight 1 per axis;
  linear: two taps; bicubic: four, border taps repeated). Each output row first mixes
  its K input rows into one row (a contiguous, vectorisable loop over W), then gathers
  its columns. Repeated indices simply add.
* ``separable_adjoint``: the transpose, dx[p, ih, iw] += wh ww g[p, oh, ow], in the same
  row-then-column order (a per-plane scatter, serial within the plane).
* ``nearest_adjoint``: the same transpose for the nearest modes when every input column
  takes r consecutive output columns (an integer factor along W): sums over each input
  row's run of output rows and over strided columns, which vectorise, in the order
  ``separable_adjoint`` adds them (the same bits; a NaN's sign may differ).
* ``adaptive_avg_forward`` / ``adaptive_avg_adjoint`` / ``adaptive_max_forward``: the
  variable windows of PyTorch's adaptive pooling, rows [h0[oh], h1[oh]) and columns
  [w0[ow], w1[ow]).

Every kernel is parallel over the P planes and each iteration owns its output plane (and
its input-gradient plane), so the bits do not depend on the thread count.
"""

import numpy as np
from numba import prange

from ..runtime.jit import PARALLEL, njit_with_serial


@njit_with_serial(**PARALLEL)
def separable_forward(x, ih, wh, iw, ww):
    """y[P, OH, OW] from x[P, H, W] and the taps (ih, wh)[OH, KH], (iw, ww)[OW, KW]."""
    P, H, W = x.shape
    OH, KH = ih.shape
    OW, KW = iw.shape
    y = np.empty((P, OH, OW), x.dtype)
    for p in prange(P):
        row = np.empty(W, x.dtype)
        for oh in range(OH):
            r0 = ih[oh, 0]
            w0 = wh[oh, 0]
            for w in range(W):
                row[w] = w0 * x[p, r0, w]
            for a in range(1, KH):
                ra = ih[oh, a]
                wa = wh[oh, a]
                for w in range(W):
                    row[w] += wa * x[p, ra, w]
            for ow in range(OW):
                acc = ww[ow, 0] * row[iw[ow, 0]]
                for b in range(1, KW):
                    acc += ww[ow, b] * row[iw[ow, b]]
                y[p, oh, ow] = acc
    return y


@njit_with_serial(**PARALLEL)
def separable_adjoint(g, ih, wh, iw, ww, H, W):
    """dx[P, H, W] = the transpose of ``separable_forward`` applied to g[P, OH, OW]."""
    P, OH, OW = g.shape
    KH = ih.shape[1]
    KW = iw.shape[1]
    dx = np.zeros((P, H, W), g.dtype)
    for p in prange(P):
        row = np.empty(W, g.dtype)
        for oh in range(OH):
            row[:] = 0
            for ow in range(OW):
                v = g[p, oh, ow]
                for b in range(KW):
                    row[iw[ow, b]] += ww[ow, b] * v
            for a in range(KH):
                ra = ih[oh, a]
                wa = wh[oh, a]
                for w in range(W):
                    dx[p, ra, w] += wa * row[w]
    return dx


@njit_with_serial(**PARALLEL)
def nearest_adjoint(g, h_start, h_stop, r, W):
    """dx[P, H, W] from g[P, OH, r W]: dx[p, h, w] = the sum over output rows
    h_start[h] <= oh < h_stop[h] of the sum over k < r of g[p, oh, w r + k], each sum
    from zero and in increasing oh and k (``separable_adjoint``'s order with weights 1)."""
    P = g.shape[0]
    H = h_start.size
    zero = g.dtype.type(0)
    dx = np.empty((P, H, W), g.dtype)
    for p in prange(P):
        row = np.empty(W, g.dtype)
        for h in range(H):
            dx[p, h, :] = zero
            for oh in range(h_start[h], h_stop[h]):
                row[:] = zero
                for k in range(r):
                    for w in range(W):
                        row[w] += g[p, oh, w * r + k]
                for w in range(W):
                    dx[p, h, w] += row[w]
    return dx


@njit_with_serial(**PARALLEL)
def adaptive_avg_forward(x, h0, h1, w0, w1):
    """y[p, oh, ow] = (sum of x[p, h0[oh]:h1[oh], w0[ow]:w1[ow]] in row-major order)
    / kh / kw, as PyTorch's CPU kernel."""
    P, H, W = x.shape
    OH = h0.size
    OW = w0.size
    y = np.empty((P, OH, OW), x.dtype)
    for p in prange(P):
        for oh in range(OH):
            kh = x.dtype.type(h1[oh] - h0[oh])
            for ow in range(OW):
                kw = x.dtype.type(w1[ow] - w0[ow])
                acc = x.dtype.type(0)
                for i in range(h0[oh], h1[oh]):
                    for j in range(w0[ow], w1[ow]):
                        acc += x[p, i, j]
                y[p, oh, ow] = acc / kh / kw
    return y


@njit_with_serial(**PARALLEL)
def adaptive_avg_adjoint(g, h0, h1, w0, w1, H, W):
    """dx[P, H, W]: each g[p, oh, ow] / kh / kw added over its window (windows in
    row-major order, serially within a plane)."""
    P, OH, OW = g.shape
    dx = np.zeros((P, H, W), g.dtype)
    for p in prange(P):
        for oh in range(OH):
            kh = g.dtype.type(h1[oh] - h0[oh])
            for ow in range(OW):
                kw = g.dtype.type(w1[ow] - w0[ow])
                v = g[p, oh, ow] / kh / kw
                for i in range(h0[oh], h1[oh]):
                    for j in range(w0[ow], w1[ow]):
                        dx[p, i, j] += v
    return dx


@njit_with_serial(**PARALLEL)
def adaptive_max_forward(x, h0, h1, w0, w1):
    """(y, idx)[P, OH, OW]: the window maximum and its flat position i*W + j in the plane;
    the first maximum in row-major order, a NaN winning (the last one), as PyTorch."""
    P, H, W = x.shape
    OH = h0.size
    OW = w0.size
    y = np.empty((P, OH, OW), x.dtype)
    idx = np.empty((P, OH, OW), np.int64)
    for p in prange(P):
        for oh in range(OH):
            for ow in range(OW):
                best = x[p, h0[oh], w0[ow]]
                at = h0[oh] * W + w0[ow]
                for i in range(h0[oh], h1[oh]):
                    for j in range(w0[ow], w1[ow]):
                        v = x[p, i, j]
                        if v > best or v != v:
                            best = v
                            at = i * W + j
                y[p, oh, ow] = best
                idx[p, oh, ow] = at
    return y, idx
