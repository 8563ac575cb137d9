"""2-D convolution kernels (NCHW, stride s, padding p, dilation d, groups), forward and
the three gradients of seed 004.

With x[N, C, H, W] and w[F, C/groups, KH, KW], group gi = f // (F/groups) reads the input
channels c = gi*Cg + cl, cl < Cg = C/groups, and

    y[n, f, oh, ow] = b[f] + sum_{cl, kh, kw} w[f, cl, kh, kw] * x[n, c, ih, iw],
    ih = oh*sh + kh*dh - ph,  iw = ow*sw + kw*dw - pw   (zero outside the input).

Gradients (g = dL/dy):

    db[f]             = sum_{n, oh, ow} g[n, f, oh, ow]
    dw[f, cl, kh, kw] = sum_{n, oh, ow} g[n, f, oh, ow] * x[n, c, ih, iw]
    dx[n, c, ih, iw]  = sum_{f in group, kh, kw, (oh, ow) with oh*sh + kh*dh - ph = ih, ...}
                        g[n, f, oh, ow] * w[f, cl, kh, kw]

Only the top/left padding (ph, pw) enters the index maps; the bottom/right padding is
implied by the output size (OH, OW), so asymmetric padding ('same' with an even kernel)
needs nothing extra. Input positions no output reads (trailing rows when the stride
does not divide the span) get a zero gradient.

Two implementations:
* ``*_direct``: the loop nests above, parallel over independent outputs. They are the
  reference, and the fast path when each group has one input channel (depthwise).
* ``*_gemm``: im2col + BLAS per image (serial over images, im2col/col2im parallel over
  rows/channels, GEMM threaded by BLAS). The tests compare them with ``*_direct``.

Race freedom (Kernel rule 2): forward owns y[n, f]; the input gradient owns dx[n, c]
(it collects every output that touches that plane); the weight gradient owns one
dw[f, cl] and sums the batch inside in a fixed order; the bias gradient owns db[f].
"""

import numpy as np
from numba import njit, prange


@njit(cache=True)
def out_range(offset, stride, size, out_size):
    """The outputs o in [lo, hi) whose tap o*stride + offset lies inside [0, size)."""
    lo = 0
    if offset < 0:
        lo = (-offset + stride - 1) // stride
    if size - offset <= 0:
        return lo, lo
    hi = min(out_size, (size - 1 - offset) // stride + 1)
    return lo, max(lo, hi)


# Row primitives: o runs over [lo, hi) along one output row; with stride 1 the other
# operand is a contiguous slice, so LLVM vectorises the loop.
@njit(cache=True)
def row_axpy(out, a, src, lo, hi, stride, offset):
    """out[o] += a * src[o*stride + offset]."""
    if stride == 1:
        dst = out[lo:hi]
        seg = src[lo + offset: hi + offset]
        for j in range(dst.size):
            dst[j] += a * seg[j]
    else:
        for o in range(lo, hi):
            out[o] += a * src[o * stride + offset]


@njit(cache=True)
def row_gather(out, src, lo, hi, stride, offset):
    """out[o] = src[o*stride + offset]."""
    if stride == 1:
        out[lo:hi] = src[lo + offset: hi + offset]
    else:
        for o in range(lo, hi):
            out[o] = src[o * stride + offset]


@njit(cache=True)
def row_scatter(dst, a, src, lo, hi, stride, offset):
    """dst[o*stride + offset] += a * src[o]."""
    if stride == 1:
        seg = dst[lo + offset: hi + offset]
        part = src[lo:hi]
        for j in range(seg.size):
            seg[j] += a * part[j]
    else:
        for o in range(lo, hi):
            dst[o * stride + offset] += a * src[o]


@njit(cache=True)
def row_fma(acc, a, src, lo, hi, stride, offset):
    """acc[o] += a[o] * src[o*stride + offset] (elementwise partial products)."""
    if stride == 1:
        dst = acc[lo:hi]
        part = a[lo:hi]
        seg = src[lo + offset: hi + offset]
        for j in range(dst.size):
            dst[j] += part[j] * seg[j]
    else:
        for o in range(lo, hi):
            acc[o] += a[o] * src[o * stride + offset]


# -- direct loop nests (reference) ---------------------------------------------------------
@njit(cache=True, parallel=True)
def conv2d_forward_direct(x, w, b, sh, sw, ph, pw, dh, dw, groups, OH, OW):
    """y[N, F, OH, OW]; ``b`` has F entries (zeros for no bias). Parallel over (n, f)."""
    N, C, H, W = x.shape
    F, Cg, KH, KW = w.shape
    Fg = F // groups
    y = np.empty((N, F, OH, OW), x.dtype)
    for nf in prange(N * F):
        n = nf // F
        f = nf % F
        c0 = (f // Fg) * Cg
        out = y[n, f]
        out[:, :] = b[f]
        for cl in range(Cg):
            xc = x[n, c0 + cl]
            for kh in range(KH):
                oh_lo, oh_hi = out_range(kh * dh - ph, sh, H, OH)
                for kw in range(KW):
                    ow_lo, ow_hi = out_range(kw * dw - pw, sw, W, OW)
                    wv = w[f, cl, kh, kw]
                    for oh in range(oh_lo, oh_hi):
                        ih = oh * sh + kh * dh - ph
                        # out[oh, ow] += wv * xc[ih, ow*sw + kw*dw - pw]
                        row_axpy(out[oh], wv, xc[ih], ow_lo, ow_hi, sw, kw * dw - pw)
    return y


@njit(cache=True, parallel=True)
def conv2d_input_grad_direct(g, w, dx, sh, sw, ph, pw, dh, dw, groups):
    """Fill dx[N, C, H, W] (and return it) from g[N, F, OH, OW]. Parallel over (n, c):
    each iteration owns the plane dx[n, c] and adds in every output of its group that
    reads it. (dx comes from the caller: a NumPy-owned gradient is not copied again by
    the engine.)"""
    N, F, OH, OW = g.shape
    _, Cg, KH, KW = w.shape
    _, C, H, W = dx.shape
    Fg = F // groups
    for nc in prange(N * C):
        n = nc // C
        c = nc % C
        gi = c // Cg
        cl = c % Cg
        plane = dx[n, c]
        plane[:, :] = 0
        for fl in range(Fg):
            f = gi * Fg + fl
            gp = g[n, f]
            for kh in range(KH):
                oh_lo, oh_hi = out_range(kh * dh - ph, sh, H, OH)
                for kw in range(KW):
                    ow_lo, ow_hi = out_range(kw * dw - pw, sw, W, OW)
                    wv = w[f, cl, kh, kw]
                    for oh in range(oh_lo, oh_hi):
                        ih = oh * sh + kh * dh - ph
                        # plane[ih, ow*sw + kw*dw - pw] += wv * gp[oh, ow]
                        row_scatter(plane[ih], wv, gp[oh], ow_lo, ow_hi, sw, kw * dw - pw)
    return dx


@njit(cache=True, parallel=True)
def conv2d_weight_grad_direct(x, g, KH, KW, sh, sw, ph, pw, dh, dw, groups):
    """dw[F, C/groups, KH, KW]. Parallel over (f, cl); the batch is summed inside, in order."""
    N, C, H, W = x.shape
    _, F, OH, OW = g.shape
    Cg = C // groups
    Fg = F // groups
    dwt = np.empty((F, Cg, KH, KW), x.dtype)
    for fc in prange(F * Cg):
        f = fc // Cg
        cl = fc % Cg
        c = (f // Fg) * Cg + cl
        # acc[kh, kw, ow]: partial sums along the output row, summed once at the end.
        acc = np.zeros((KH, KW, OW), x.dtype)
        for n in range(N):
            for kh in range(KH):
                oh_lo, oh_hi = out_range(kh * dh - ph, sh, H, OH)
                for kw in range(KW):
                    ow_lo, ow_hi = out_range(kw * dw - pw, sw, W, OW)
                    for oh in range(oh_lo, oh_hi):
                        ih = oh * sh + kh * dh - ph
                        # acc[kh, kw, ow] += g[n, f, oh, ow] * x[n, c, ih, ow*sw + kw*dw - pw]
                        row_fma(acc[kh, kw], g[n, f, oh], x[n, c, ih], ow_lo, ow_hi, sw,
                                kw * dw - pw)
        for kh in range(KH):
            for kw in range(KW):
                dwt[f, cl, kh, kw] = acc[kh, kw].sum()
    return dwt


@njit(cache=True, parallel=True)
def conv2d_bias_grad(g):
    """db[f] = sum of g[:, f] over batch and space (rows summed first, then in order)."""
    N, F, OH, OW = g.shape
    db = np.empty(F, g.dtype)
    zero = g.dtype.type(0)
    for f in prange(F):
        acc = zero
        for n in range(N):
            for oh in range(OH):
                row = zero
                for ow in range(OW):
                    row += g[n, f, oh, ow]
                acc += row
        db[f] = acc
    return db


# -- stride-1 direct fast path -------------------------------------------------------------
# With stride 1, a tap (kh, kw) shifts the whole plane by one constant offset once the
# input is zero-padded into a buffer of row pitch Wp = OW + dw(KW-1): on that pitch the
# outputs are the flat positions j = oh*Wp + ow, and tap (kh, kw) reads j + kh*dh*Wp + kw*dw.
# Each tap is then one long contiguous multiply-add over the span L = (OH-1)*Wp + OW (the
# Wp - OW columns past each output row are scratch). For few channels per group
# (depthwise) this beats im2col; the tests compare it with the loop nests above.
@njit(cache=True, fastmath={"reassoc"})
def span_dot(a, b, n):
    """sum_{j < n} a[j] * b[j], reassociated so that LLVM vectorises it: the summation
    order depends on the machine's vector width, never on the thread count."""
    acc = a.dtype.type(0)
    for j in range(n):
        acc += a[j] * b[j]
    return acc


@njit(cache=True)
def pad_plane(src, top, left, Hp, Wp):
    """A flat [Hp * Wp] buffer holding src[i - top, j - left] at i*Wp + j, zero elsewhere."""
    H, W = src.shape
    buf = np.zeros(Hp * Wp, src.dtype)
    for i in range(max(0, top), min(Hp, H + top)):
        lo = max(0, left)
        hi = min(Wp, W + left)
        if hi > lo:
            buf[i * Wp + lo: i * Wp + hi] = src[i - top, lo - left: hi - left]
    return buf


@njit(cache=True)
def span_taps(KH, KW, dh, dw, Wp):
    """Flat offsets kh*dh*Wp + kw*dw of the taps on pitch Wp, row-major."""
    offs = np.empty(KH * KW, np.int64)
    for kh in range(KH):
        for kw in range(KW):
            offs[kh * KW + kw] = kh * dh * Wp + kw * dw
    return offs


@njit(cache=True, parallel=True)
def conv2d_forward_s1(x, w, b, ph, pw, dh, dw, groups, OH, OW):
    """As ``conv2d_forward_direct`` with stride 1. Parallel over (n, f)."""
    N, C, H, W = x.shape
    F, Cg, KH, KW = w.shape
    Fg = F // groups
    Hp = OH + dh * (KH - 1)
    Wp = OW + dw * (KW - 1)
    L = (OH - 1) * Wp + OW
    offs = span_taps(KH, KW, dh, dw, Wp)
    y = np.empty((N, F, OH, OW), x.dtype)
    for nf in prange(N * F):
        n = nf // F
        f = nf % F
        c0 = (f // Fg) * Cg
        acc = np.zeros(L, x.dtype)
        for cl in range(Cg):
            xp = pad_plane(x[n, c0 + cl], ph, pw, Hp, Wp)
            for t in range(KH * KW):
                wv = w[f, cl, t // KW, t % KW]
                seg = xp[offs[t]: offs[t] + L]
                for j in range(L):
                    acc[j] += wv * seg[j]
        for oh in range(OH):
            for ow in range(OW):
                y[n, f, oh, ow] = acc[oh * Wp + ow] + b[f]
    return y


@njit(cache=True, parallel=True)
def conv2d_input_grad_s1(g, w, dx, ph, pw, dh, dw, groups):
    """As ``conv2d_input_grad_direct`` with stride 1. Parallel over (n, c)."""
    N, F, OH, OW = g.shape
    _, Cg, KH, KW = w.shape
    _, C, H, W = dx.shape
    Fg = F // groups
    Hp = OH + dh * (KH - 1)
    Wp = OW + dw * (KW - 1)
    L = (OH - 1) * Wp + OW
    offs = span_taps(KH, KW, dh, dw, Wp)
    for nc in prange(N * C):
        n = nc // C
        c = nc % C
        gi = c // Cg
        cl = c % Cg
        dx[n, c] = 0
        dxp = np.zeros(Hp * Wp, g.dtype)
        for fl in range(Fg):
            f = gi * Fg + fl
            gq = pad_plane(g[n, f], 0, 0, OH, Wp)  # g on pitch Wp, zero scratch columns
            for t in range(KH * KW):
                wv = w[f, cl, t // KW, t % KW]
                seg = dxp[offs[t]: offs[t] + L]
                for j in range(L):
                    seg[j] += wv * gq[j]
        # dx[ih, iw] = dxp[ih + ph, iw + pw]; inputs no tap reaches keep zero
        for ih in range(max(0, -ph), min(H, Hp - ph)):
            lo = max(0, -pw)
            hi = min(W, Wp - pw)
            if hi > lo:
                dx[n, c, ih, lo:hi] = dxp[(ih + ph) * Wp + lo + pw: (ih + ph) * Wp + hi + pw]
    return dx


@njit(cache=True, parallel=True)
def conv2d_weight_grad_s1(x, g, KH, KW, ph, pw, dh, dw, groups):
    """As ``conv2d_weight_grad_direct`` with stride 1. Parallel over (f, cl); the batch
    is summed inside, in order."""
    N, C, H, W = x.shape
    _, F, OH, OW = g.shape
    Cg = C // groups
    Fg = F // groups
    Hp = OH + dh * (KH - 1)
    Wp = OW + dw * (KW - 1)
    L = (OH - 1) * Wp + OW
    offs = span_taps(KH, KW, dh, dw, Wp)
    dwt = np.empty((F, Cg, KH, KW), x.dtype)
    for fc in prange(F * Cg):
        f = fc // Cg
        cl = fc % Cg
        c = (f // Fg) * Cg + cl
        acc = np.zeros(KH * KW, x.dtype)
        for n in range(N):
            xp = pad_plane(x[n, c], ph, pw, Hp, Wp)
            gq = pad_plane(g[n, f], 0, 0, OH, Wp)  # zero in the scratch columns
            for t in range(KH * KW):
                acc[t] += span_dot(gq, xp[offs[t]:], L)
        for t in range(KH * KW):
            dwt[f, cl, t // KW, t % KW] = acc[t]
    return dwt


# -- im2col + BLAS fast path ---------------------------------------------------------------
# Images are processed in chunks whose column buffer holds at most ``col_budget`` elements
# (COL_BUDGET by default: 2 MiB of float32, so the buffer stays in cache and is not
# paged in afresh on every call); within a chunk, one parallel region builds
# (or scatters back) the columns of every image
# and BLAS multiplies image by image, so the parallel regions are few and coarse.
COL_BUDGET = 1 << 19


@njit(cache=True)
def chunk_size(N, rows, cols, col_budget):
    """Images per chunk so that a [chunk, rows, cols] column buffer fits col_budget
    (at least one image)."""
    return max(1, min(N, col_budget // max(1, rows * cols)))


@njit(cache=True, parallel=True)
def im2col(x, n0, col, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW):
    """col[m, (c, kh, kw), (oh, ow)] = x[n0 + m, c, ih, iw] (zero in the padding), for the
    col.shape[0] images from n0. Parallel over (image, row)."""
    _, C, H, W = x.shape
    nb, R, _ = col.shape
    zero = x.dtype.type(0)
    for mr in prange(nb * R):
        m = mr // R
        r = mr % R
        c = r // (KH * KW)
        kh = (r // KW) % KH
        kw = r % KW
        row = col[m, r]
        xc = x[n0 + m, c]
        oh_lo, oh_hi = out_range(kh * dh - ph, sh, H, OH)
        ow_lo, ow_hi = out_range(kw * dw - pw, sw, W, OW)
        for oh in range(OH):
            seg = row[oh * OW: (oh + 1) * OW]
            if oh < oh_lo or oh >= oh_hi:
                seg[:] = zero
                continue
            seg[:ow_lo] = zero
            # seg[ow] = xc[ih, ow*sw + kw*dw - pw]
            row_gather(seg, xc[oh * sh + kh * dh - ph], ow_lo, ow_hi, sw, kw * dw - pw)
            seg[ow_hi:] = zero


@njit(cache=True, parallel=True)
def col2im(dcol, dx, n0, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW):
    """dx[n0 + m, c, ih, iw] = sum of the dcol[m] entries im2col copied from there.
    Parallel over (image, channel): each iteration owns one plane of dx."""
    _, C, H, W = dx.shape
    nb = dcol.shape[0]
    one = dx.dtype.type(1)
    for mc in prange(nb * C):
        m = mc // C
        c = mc % C
        plane = dx[n0 + m, c]
        plane[:, :] = 0
        for kh in range(KH):
            oh_lo, oh_hi = out_range(kh * dh - ph, sh, H, OH)
            for kw in range(KW):
                ow_lo, ow_hi = out_range(kw * dw - pw, sw, W, OW)
                row = dcol[m, (c * KH + kh) * KW + kw]
                for oh in range(oh_lo, oh_hi):
                    ih = oh * sh + kh * dh - ph
                    # plane[ih, ow*sw + kw*dw - pw] += row[oh*OW + ow]
                    row_scatter(plane[ih], one, row[oh * OW: (oh + 1) * OW], ow_lo, ow_hi,
                                sw, kw * dw - pw)


@njit(cache=True)
def conv2d_forward_gemm(x, w, b, sh, sw, ph, pw, dh, dw, groups, OH, OW,
                        col_budget=COL_BUDGET):
    """As ``conv2d_forward_direct``; y[n, group] = w[group] @ im2col(x[n])[group] + b."""
    N, C, H, W = x.shape
    F, Cg, KH, KW = w.shape
    Fg = F // groups
    K = Cg * KH * KW
    w3 = w.reshape(groups, Fg, K)
    nb = chunk_size(N, C * KH * KW, OH * OW, col_budget)
    col = np.empty((nb, groups, K, OH * OW), x.dtype)
    col3 = col.reshape(nb, C * KH * KW, OH * OW)
    y = np.empty((N, groups, Fg, OH * OW), x.dtype)
    for n0 in range(0, N, nb):
        m_end = min(nb, N - n0)
        im2col(x, n0, col3[:m_end], KH, KW, sh, sw, ph, pw, dh, dw, OH, OW)
        for m in range(m_end):
            for gi in range(groups):
                yg = y[n0 + m, gi]
                np.dot(w3[gi], col[m, gi], yg)
                for fl in range(Fg):
                    yg[fl] += b[gi * Fg + fl]
    return y.reshape(N, F, OH, OW)


@njit(cache=True)
def conv2d_input_grad_gemm(g, w, dx, sh, sw, ph, pw, dh, dw, groups,
                           col_budget=COL_BUDGET):
    """As ``conv2d_input_grad_direct``; dx[n] = col2im(w[group]^T @ g[n, group])."""
    N, F, OH, OW = g.shape
    _, Cg, KH, KW = w.shape
    C = Cg * groups
    Fg = F // groups
    K = Cg * KH * KW
    w3 = w.reshape(groups, Fg, K)
    g4 = g.reshape(N, groups, Fg, OH * OW)
    nb = chunk_size(N, C * KH * KW, OH * OW, col_budget)
    dcol = np.empty((nb, groups, K, OH * OW), g.dtype)
    dcol3 = dcol.reshape(nb, C * KH * KW, OH * OW)
    for n0 in range(0, N, nb):
        m_end = min(nb, N - n0)
        for m in range(m_end):
            for gi in range(groups):
                np.dot(w3[gi].T, g4[n0 + m, gi], dcol[m, gi])
        col2im(dcol3[:m_end], dx, n0, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW)
    return dx


@njit(cache=True)
def conv2d_weight_grad_gemm(x, g, KH, KW, sh, sw, ph, pw, dh, dw, groups,
                            col_budget=COL_BUDGET):
    """As ``conv2d_weight_grad_direct``; dw[group] = sum over n, in order, of
    g[n, group] @ im2col(x[n])[group]^T."""
    N, C, H, W = x.shape
    _, F, OH, OW = g.shape
    Cg = C // groups
    Fg = F // groups
    K = Cg * KH * KW
    g4 = g.reshape(N, groups, Fg, OH * OW)
    nb = chunk_size(N, C * KH * KW, OH * OW, col_budget)
    col = np.empty((nb, groups, K, OH * OW), x.dtype)
    col3 = col.reshape(nb, C * KH * KW, OH * OW)
    dw3 = np.zeros((groups, Fg, K), x.dtype)
    part = np.empty((Fg, K), x.dtype)
    for n0 in range(0, N, nb):
        m_end = min(nb, N - n0)
        im2col(x, n0, col3[:m_end], KH, KW, sh, sw, ph, pw, dh, dw, OH, OW)
        for m in range(m_end):
            for gi in range(groups):
                np.dot(g4[n0 + m, gi], col[m, gi].T, part)
                dw3[gi] += part
    return dw3.reshape(F, Cg, KH, KW)


@njit(cache=True, parallel=True)
def add_channel_bias(y, b):
    """y[n, f] += b[f] in place. Parallel over (n, f)."""
    N, F, _, _ = y.shape
    for nf in prange(N * F):
        y[nf // F, nf % F] += b[nf % F]
