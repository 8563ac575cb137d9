"""2-D pooling kernels on x[N, C, H, W]: max (with the argmax it routes the gradient to)
and average. Window (oh, ow) covers ih = oh*sh + kh*dh - ph, iw = ow*sw + kw*dw - pw for
kh < KH, kw < KW; positions outside x are padding. The ops pass the number of windows
(OH, OW), so ceil_mode only adds last windows that run past the padded input: the loops
clip every window to x (out_range), and window_span the divisor.

Every kernel is parallel over the N*C planes, the max-pool ones over runs of whole planes
(one parallel region per call; ops/pool.py runs its serial form, njit_with_serial, below
POOL_PARALLEL_MIN elements); each iteration owns its planes of the output and of the input
gradient (overlapping windows add into the owned plane serially), so results do not
depend on the thread count. The backward kernels fill a gradient array the caller
allocates with NumPy (the engine keeps it without a copy).
Derivations: docs/derivations.md#pooling.
"""

import numpy as np
from numba import njit, prange

from ..runtime.jit import PARALLEL, SERIAL, njit_with_serial, plain
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


# The max-pool kernels run over the windows of this many consecutive planes' worth
# (whole planes, at least one) in one loop: a few dozen windows rather than a loop per
# output row (two windows on 4x4 maps), so the loop's fixed cost is paid per run of
# planes instead of per short row (docs/benchmarks.md#pooling).
WINDOW_RUN = 64


@njit(**SERIAL)
def planes_per_run(L):
    """Whole planes of L windows each in a run of about WINDOW_RUN windows (at least one)."""
    return max(1, WINDOW_RUN // max(1, L))


@njit(**SERIAL)
def route_gradient(gf, jf, df, p0, p1, L, HW):
    """For planes p0 <= p < p1 of flat C-contiguous g, idx [planes, L] and dx [planes, HW]:
    zero the dx planes, then df[p*HW + jf[p*L + q]] += gf[p*L + q], skipping idx -1."""
    u = np.uint64
    for i in range(u(p0 * HW), u(p1 * HW)):
        df[i] = 0
    for p in range(p0, p1):
        base = u(p * HW)
        q0 = u(p * L)
        for q in range(u(L)):
            at = jf[q0 + q]
            if at >= 0:
                df[base + u(at)] += gf[q0 + q]


@njit_with_serial(**PARALLEL)
def max_pool2d_backward(g, idx, dx):
    """Fill dx[N, C, H*W] (flat planes; returned too): dx[n, c] = sum of g[n, c, oh, ow]
    at the positions idx[n, c, oh, ow] (skipping -1), for C-contiguous g and idx.
    Parallel over runs of whole planes (WINDOW_RUN windows)."""
    N, C, OH, OW = g.shape
    L = OH * OW
    planes = planes_per_run(L)
    gf, jf, df = g.reshape(-1), idx.reshape(-1), dx.reshape(-1)
    for run in prange((N * C + planes - 1) // planes):
        p0 = np.int64(run) * planes  # prange's index is unsigned: int64 arithmetic
        route_gradient(gf, jf, df, p0, min(N * C, p0 + planes), L, dx.shape[2])
    return dx


@njit(**SERIAL)
def window_table(H, W, OH, OW, planes):
    """(start, at) for the 2x2 windows of ``planes`` consecutive planes, q = (p*OH + oh)*OW
    + ow: start[q] = p*H*W + at[q], the window's first element from the first plane's
    start, and at[q] = 2*oh*W + 2*ow, its flat position in its own plane."""
    L = OH * OW
    start = np.empty(planes * L, np.uint64)
    at = np.empty(planes * L, np.int64)
    for p in range(planes):
        for oh in range(OH):
            for ow in range(OW):
                q = p * L + oh * OW + ow
                at[q] = 2 * oh * W + 2 * ow
                start[q] = p * H * W + at[q]
    return start, at


@njit(**SERIAL)
def max_of_windows(xf, x0, yf, y0, jf, count, start, at, W):
    """yf[y0 + q], jf[y0 + q] = the maximum and its position of window q < count
    (window_table, from x0 in xf), in the order (0,0), (0,1), (1,0), (1,1): a larger value
    or a NaN replaces the running maximum."""
    right = np.uint64(1)
    below = np.uint64(W)
    for q in range(np.uint64(count)):
        s = x0 + start[q]
        best = xf[s]
        best_at = at[q]
        v = xf[s + right]
        take = (v > best) | (v != v)
        best = v if take else best
        best_at = at[q] + 1 if take else best_at
        v = xf[s + below]
        take = (v > best) | (v != v)
        best = v if take else best
        best_at = at[q] + W if take else best_at
        v = xf[s + below + right]
        take = (v > best) | (v != v)
        best = v if take else best
        best_at = at[q] + W + 1 if take else best_at
        yf[y0 + q] = best
        jf[y0 + q] = best_at


# Output rows of at least this many windows go row by row (max_of_rows), whose loop over
# a row vectorises; the table of max_of_windows pays on shorter rows
# (docs/benchmarks.md#pooling).
WINDOW_ROW_MIN = 8


@njit(**SERIAL)
def max_of_rows(xf, yf, jf, p0, p1, H, W, OH, OW):
    """max_of_windows for the planes p0 <= p < p1 of flat x, y and idx, row by row
    (unsigned offsets, no slices: a view per row cost more than the row's windows)."""
    u = np.uint64
    Wu, OWu = u(W), u(OW)
    for p in range(p0, p1):
        plane = u(p * H * W)
        for oh in range(OH):
            out = u((p * OH + oh) * OW)
            for ow in range(OWu):
                at = u(2 * oh * W) + u(2) * ow  # the window's first element in its plane
                best = xf[plane + at]
                best_at = at
                v = xf[plane + at + u(1)]
                if v > best or v != v:
                    best, best_at = v, at + u(1)
                v = xf[plane + at + Wu]
                if v > best or v != v:
                    best, best_at = v, at + Wu
                v = xf[plane + at + Wu + u(1)]
                if v > best or v != v:
                    best, best_at = v, at + Wu + u(1)
                yf[out + ow] = best
                jf[out + ow] = best_at


@njit_with_serial(**PARALLEL)
def max_pool2d_2x2_forward(x):
    """The common case kernel 2, stride 2, no padding or dilation, with the same tie and
    NaN rules as ``max_pool2d_forward`` (order (0,0), (0,1), (1,0), (1,1)), for C-contiguous
    x. Parallel over runs of whole planes (WINDOW_RUN)."""
    N, C, H, W = x.shape
    OH = H // 2
    OW = W // 2
    L = OH * OW
    y = np.empty((N, C, OH, OW), x.dtype)
    idx = np.empty((N, C, OH, OW), np.int64)
    planes = planes_per_run(L)
    rows = OW >= WINDOW_ROW_MIN
    # the window table only for short rows (empty, of zero output rows, for max_of_rows)
    start, at = window_table(H, W, 0 if rows else OH, OW, planes)
    xf, yf, jf = x.reshape(-1), y.reshape(-1), idx.reshape(-1)
    for run in prange((N * C + planes - 1) // planes):
        p0 = np.int64(run) * planes  # prange's index is unsigned: int64 arithmetic
        p1 = min(N * C, p0 + planes)
        if rows:
            max_of_rows(xf, yf, jf, p0, p1, H, W, OH, OW)
        else:
            max_of_windows(xf, np.uint64(p0 * H * W), yf, np.uint64(p0 * L), jf,
                           (p1 - p0) * L, start, at, W)
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


@njit(**SERIAL, inline="always")
def window_axis(o, stride, pad, size, K, count_include_pad):
    """Along one axis, for output position ``o``: the window's offsets [lo, hi) that fall
    inside x (``out_range``) and its span for the divisor (``window_span``)."""
    start = o * stride - pad
    lo, hi = out_range(start, plain(1), size, K)
    return lo, hi, window_span(start, K, size, pad, count_include_pad)


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
            kh_lo, kh_hi, rows = window_axis(oh, sh, ph, H, KH, count_include_pad)
            for ow in range(OW):
                kw_lo, kw_hi, cols = window_axis(ow, sw, pw, W, KW, count_include_pad)
                acc = zero
                for kh in range(kh_lo, kh_hi):
                    for kw in range(kw_lo, kw_hi):
                        acc += xp[oh * sh - ph + kh, ow * sw - pw + kw]
                count = divisor_override if divisor_override != 0 else rows * cols
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
            kh_lo, kh_hi, rows = window_axis(oh, sh, ph, H, KH, count_include_pad)
            for ow in range(OW):
                kw_lo, kw_hi, cols = window_axis(ow, sw, pw, W, KW, count_include_pad)
                count = divisor_override if divisor_override != 0 else rows * cols
                share = g[n, c, oh, ow] / g.dtype.type(count)
                for kh in range(kh_lo, kh_hi):
                    for kw in range(kw_lo, kw_hi):
                        plane[oh * sh - ph + kh, ow * sw - pw + kw] += share
    return dx
