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
                        for ow in range(ow_lo, ow_hi):
                            out[oh, ow] += wv * xc[ih, ow * sw + kw * dw - pw]
    return y


@njit(cache=True, parallel=True)
def conv2d_input_grad_direct(g, w, H, W, sh, sw, ph, pw, dh, dw, groups):
    """dx[N, C, H, W] from g[N, F, OH, OW]. Parallel over (n, c): each iteration owns the
    plane dx[n, c] and adds in every output of its group that reads it."""
    N, F, OH, OW = g.shape
    _, Cg, KH, KW = w.shape
    C = Cg * groups
    Fg = F // groups
    dx = np.zeros((N, C, H, W), g.dtype)
    for nc in prange(N * C):
        n = nc // C
        c = nc % C
        gi = c // Cg
        cl = c % Cg
        plane = dx[n, c]
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
                        for ow in range(ow_lo, ow_hi):
                            plane[ih, ow * sw + kw * dw - pw] += wv * gp[oh, ow]
    return dx


@njit(cache=True, parallel=True)
def conv2d_weight_grad_direct(x, g, KH, KW, sh, sw, ph, pw, dh, dw, groups):
    """dw[F, C/groups, KH, KW]. Parallel over (f, cl); the batch is summed inside, in order."""
    N, C, H, W = x.shape
    _, F, OH, OW = g.shape
    Cg = C // groups
    Fg = F // groups
    dwt = np.empty((F, Cg, KH, KW), x.dtype)
    zero = x.dtype.type(0)
    for fc in prange(F * Cg):
        f = fc // Cg
        cl = fc % Cg
        c = (f // Fg) * Cg + cl
        for kh in range(KH):
            oh_lo, oh_hi = out_range(kh * dh - ph, sh, H, OH)
            for kw in range(KW):
                ow_lo, ow_hi = out_range(kw * dw - pw, sw, W, OW)
                acc = zero
                for n in range(N):
                    for oh in range(oh_lo, oh_hi):
                        ih = oh * sh + kh * dh - ph
                        for ow in range(ow_lo, ow_hi):
                            acc += g[n, f, oh, ow] * x[n, c, ih, ow * sw + kw * dw - pw]
                dwt[f, cl, kh, kw] = acc
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


# -- im2col + BLAS fast path ---------------------------------------------------------------
# Images are processed in chunks whose column buffer holds at most ``col_budget`` elements
# (COL_BUDGET by default: 32 MiB of float32); within a chunk, one parallel region builds
# (or scatters back) the columns of every image
# and BLAS multiplies image by image, so the parallel regions are few and coarse.
COL_BUDGET = 1 << 23


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
            base = oh * OW
            if oh < oh_lo or oh >= oh_hi:
                for ow in range(OW):
                    row[base + ow] = zero
                continue
            ih = oh * sh + kh * dh - ph
            for ow in range(ow_lo):
                row[base + ow] = zero
            for ow in range(ow_lo, ow_hi):
                row[base + ow] = xc[ih, ow * sw + kw * dw - pw]
            for ow in range(ow_hi, OW):
                row[base + ow] = zero


@njit(cache=True, parallel=True)
def col2im(dcol, dx, n0, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW):
    """dx[n0 + m, c, ih, iw] = sum of the dcol[m] entries im2col copied from there.
    Parallel over (image, channel): each iteration owns one plane of dx."""
    _, C, H, W = dx.shape
    nb = dcol.shape[0]
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
                    base = oh * OW
                    for ow in range(ow_lo, ow_hi):
                        plane[ih, ow * sw + kw * dw - pw] += row[base + ow]


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
def conv2d_input_grad_gemm(g, w, H, W, sh, sw, ph, pw, dh, dw, groups,
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
    dx = np.empty((N, C, H, W), g.dtype)
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
