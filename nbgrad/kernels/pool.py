"""2-D pooling kernels on x[N, C, H, W]: max (with the argmax it routes the gradient to)
and average. Window (oh, ow) covers ih = oh*sh + kh*dh - ph, iw = ow*sw + kw*dw - pw for
kh < KH, kw < KW; positions outside x are padding. The ops pass the number of windows
(OH, OW), so ceil_mode only adds last windows that run past the padded input: the loops
clip every window to x (out_range), and window_span the divisor.

Every kernel is parallel over the N*C planes (one parallel region per call; ops/pool.py
runs its serial form, njit_with_serial, below POOL_PARALLEL_MIN elements); each
iteration owns its planes of the output and of the input gradient (overlapping windows
add into the owned plane serially), so results do not depend on the thread count. The
backward kernels fill a gradient array the caller allocates with NumPy (the engine keeps
it without a copy).
Derivations: docs/derivations.md#pooling.
"""

import numpy as np
from numba import njit, prange

from ._jit import PARALLEL, SERIAL, njit_with_serial, plain
from .conv import out_range


@njit_with_serial(**PARALLEL)
def max_pool2d_forward(x, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW):
    """(y, idx): y = the window maximum, idx = its flat position ih*W + iw in the plane.

    Padding counts as -inf (never chosen). Ties go to the first maximum in row-major
    window order; a NaN in the window wins (the last one, as in PyTorch: every NaN
    replaces the running maximum), so NaN propagates. A window
    that dilation makes miss the input entirely gives -inf and idx -1 (no gradient)."""
    N, C, H, W = x.shape
    inf = x.dtype.type(np.inf)
    y = np.empty((N, C, OH, OW), x.dtype)
    idx = np.empty((N, C, OH, OW), np.int64)
    for p in prange(N * C):
        n = p // C
        c = p % C
        xp = x[n, c]
        for oh in range(OH):
            kh_lo, kh_hi = out_range(oh * sh - ph, dh, H, KH)
            for ow in range(OW):
                kw_lo, kw_hi = out_range(ow * sw - pw, dw, W, KW)
                best = -inf
                at = -1
                for kh in range(kh_lo, kh_hi):
                    ih = oh * sh - ph + kh * dh
                    for kw in range(kw_lo, kw_hi):
                        iw = ow * sw - pw + kw * dw
                        v = xp[ih, iw]
                        if at < 0 or v > best or v != v:
                            best = v
                            at = ih * W + iw
                y[n, c, oh, ow] = best
                idx[n, c, oh, ow] = at
    return y, idx


@njit_with_serial(**PARALLEL)
def max_pool2d_backward(g, idx, dx):
    """Fill dx[N, C, H*W] (flat planes; returned too): dx[n, c] = sum of g[n, c, oh, ow]
    at the positions idx[n, c, oh, ow] (skipping -1)."""
    N, C, OH, OW = g.shape
    for p in prange(N * C):
        n = p // C
        c = p % C
        plane = dx[n, c]
        plane[:] = 0
        for oh in range(OH):
            for ow in range(OW):
                at = idx[n, c, oh, ow]
                if at >= 0:
                    plane[at] += g[n, c, oh, ow]
    return dx


@njit_with_serial(**PARALLEL)
def max_pool2d_2x2_forward(x):
    """The common case kernel 2, stride 2, no padding or dilation, in one pass with the
    same tie and NaN rules as ``max_pool2d_forward`` (order (0,0), (0,1), (1,0), (1,1))."""
    N, C, H, W = x.shape
    OH = H // 2
    OW = W // 2
    y = np.empty((N, C, OH, OW), x.dtype)
    idx = np.empty((N, C, OH, OW), np.int64)
    for p in prange(N * C):
        n = p // C
        c = p % C
        xp = x[n, c]
        for oh in range(OH):
            r0 = xp[2 * oh]
            r1 = xp[2 * oh + 1]
            for ow in range(OW):
                best = r0[2 * ow]
                at = 2 * oh * W + 2 * ow
                v = r0[2 * ow + 1]
                if v > best or v != v:
                    best = v
                    at = 2 * oh * W + 2 * ow + 1
                v = r1[2 * ow]
                if v > best or v != v:
                    best = v
                    at = (2 * oh + 1) * W + 2 * ow
                v = r1[2 * ow + 1]
                if v > best or v != v:
                    best = v
                    at = (2 * oh + 1) * W + 2 * ow + 1
                y[n, c, oh, ow] = best
                idx[n, c, oh, ow] = at
    return y, idx


@njit(**SERIAL)
def window_span(start, K, size, pad, count_include_pad):
    """Along one axis, the positions of the window [start, start + K) that avg_pool2d's
    divisor counts (PyTorch's rule): the window cut at the padded input's end size + pad
    (K except for the last windows of ceil_mode), and without count_include_pad also cut
    to the input [0, size). The divisor is the product of the two axes' spans."""
    end = min(start + K, size + pad)
    if count_include_pad:
        return end - start
    return min(end, size) - max(start, 0)


@njit_with_serial(**PARALLEL)
def avg_pool2d_forward(x, KH, KW, sh, sw, ph, pw, OH, OW, count_include_pad,
                       divisor_override):
    """y = window sum / divisor: divisor_override if non-zero, else the product of the
    window's spans (``window_span``)."""
    N, C, H, W = x.shape
    y = np.empty((N, C, OH, OW), x.dtype)
    zero = x.dtype.type(0)
    for p in prange(N * C):
        n = p // C
        c = p % C
        xp = x[n, c]
        for oh in range(OH):
            kh_lo, kh_hi = out_range(oh * sh - ph, plain(1), H, KH)
            rows = window_span(oh * sh - ph, KH, H, ph, count_include_pad)
            for ow in range(OW):
                kw_lo, kw_hi = out_range(ow * sw - pw, plain(1), W, KW)
                acc = zero
                for kh in range(kh_lo, kh_hi):
                    for kw in range(kw_lo, kw_hi):
                        acc += xp[oh * sh - ph + kh, ow * sw - pw + kw]
                count = divisor_override
                if count == 0:
                    count = rows * window_span(ow * sw - pw, KW, W, pw, count_include_pad)
                y[n, c, oh, ow] = acc / x.dtype.type(count)
    return y


@njit_with_serial(**PARALLEL)
def avg_pool2d_backward(g, dx, KH, KW, sh, sw, ph, pw, count_include_pad, divisor_override):
    """Fill dx[N, C, H, W] (returned too): dx[n, c, ih, iw] = sum over the windows
    containing (ih, iw) of g / divisor (as in ``avg_pool2d_forward``)."""
    N, C, OH, OW = g.shape
    _, _, H, W = dx.shape
    for p in prange(N * C):
        n = p // C
        c = p % C
        plane = dx[n, c]
        plane[:, :] = 0
        for oh in range(OH):
            kh_lo, kh_hi = out_range(oh * sh - ph, plain(1), H, KH)
            rows = window_span(oh * sh - ph, KH, H, ph, count_include_pad)
            for ow in range(OW):
                kw_lo, kw_hi = out_range(ow * sw - pw, plain(1), W, KW)
                count = divisor_override
                if count == 0:
                    count = rows * window_span(ow * sw - pw, KW, W, pw, count_include_pad)
                share = g[n, c, oh, ow] / g.dtype.type(count)
                for kh in range(kh_lo, kh_hi):
                    for kw in range(kw_lo, kw_hi):
                        plane[oh * sh - ph + kh, ow * sw - pw + kw] += share
    return dx
