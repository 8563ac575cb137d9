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

Three implementations (ops/conv.py picks one per call):
* ``*_direct``: the loop nests above, parallel over independent outputs: the reference,
  and the path for strided convolutions with few channels per group.
* ``*_s1``: stride 1 on zero-padded planes (long contiguous spans): depthwise and other
  small-group convolutions.
* ``*_gemm``: im2col + a register-blocked GEMM per image, parallel over images: the
  path once a group has many input channels and filters.
The tests compare ``*_s1`` and ``*_gemm`` with ``*_direct``.

Race freedom (Kernel rule 2): forward owns y[n, f] (gemm: y[n]); the input gradient owns
dx[n, c] (gemm: dx[n]) and collects every output that touches it; the weight gradient
owns one dw[f, cl] and sums the batch inside in a fixed order (gemm: one partial per
image, summed in image order); the bias gradient owns db[f].
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
        dst = out[lo:hi]
        seg = src[lo + offset: hi + offset]
        for j in range(dst.size):
            dst[j] = seg[j]
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


# -- im2col + register-blocked GEMM fast path -----------------------------------------------
# Per image: im2col, then a matrix product per group. The product is our own GEMM (below)
# rather than BLAS, so that images run in parallel (prange) with one private column
# buffer per slot (``slots`` images at once: the caller passes the thread count) and no
# second thread pool competing with Numba's; every output element is summed in a fixed
# order, so results do not depend on the thread count or the number of slots.
GEMM_TILE = 128


@njit(cache=True)
def gemm(a, b, out):
    """out[M, P] = a[M, K] @ b[K, P] (overwritten).

    Blocks of 4 rows of a by 128 columns of b accumulate in a small buffer, 4 steps of K
    at a time (acc += a0*b0 + a1*b1 + a2*b2 + a3*b3): every buffer load/store serves 4
    multiply-adds and the column loop vectorises. The sum over K runs in a fixed order."""
    M, K = a.shape
    P = b.shape[1]
    acc = np.empty((4, GEMM_TILE), out.dtype)
    K4 = K - K % 4
    for j0 in range(0, P, GEMM_TILE):
        n = min(GEMM_TILE, P - j0)
        for i0 in range(0, M, 4):
            rows = min(4, M - i0)
            acc[:, :] = 0
            if rows == 4:
                for k in range(0, K4, 4):
                    b0, b1 = b[k, j0: j0 + n], b[k + 1, j0: j0 + n]
                    b2, b3 = b[k + 2, j0: j0 + n], b[k + 3, j0: j0 + n]
                    a00, a01, a02, a03 = a[i0, k], a[i0, k + 1], a[i0, k + 2], a[i0, k + 3]
                    a10, a11, a12, a13 = (a[i0 + 1, k], a[i0 + 1, k + 1], a[i0 + 1, k + 2],
                                          a[i0 + 1, k + 3])
                    a20, a21, a22, a23 = (a[i0 + 2, k], a[i0 + 2, k + 1], a[i0 + 2, k + 2],
                                          a[i0 + 2, k + 3])
                    a30, a31, a32, a33 = (a[i0 + 3, k], a[i0 + 3, k + 1], a[i0 + 3, k + 2],
                                          a[i0 + 3, k + 3])
                    for j in range(n):
                        v0, v1, v2, v3 = b0[j], b1[j], b2[j], b3[j]
                        acc[0, j] += a00 * v0 + a01 * v1 + a02 * v2 + a03 * v3
                        acc[1, j] += a10 * v0 + a11 * v1 + a12 * v2 + a13 * v3
                        acc[2, j] += a20 * v0 + a21 * v1 + a22 * v2 + a23 * v3
                        acc[3, j] += a30 * v0 + a31 * v1 + a32 * v2 + a33 * v3
                k_rest = K4
            else:
                k_rest = 0
            # the K % 4 last steps, and every step of a partial row block
            for k in range(k_rest, K):
                bk = b[k, j0: j0 + n]
                for r in range(rows):
                    ar = a[i0 + r, k]
                    for j in range(n):
                        acc[r, j] += ar * bk[j]
            for r in range(rows):
                out[i0 + r, j0: j0 + n] = acc[r, :n]


@njit(cache=True)
def im2col(xn, col, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW):
    """col[(c, kh, kw), (oh, ow)] = xn[c, ih, iw] for one image (zero in the padding)."""
    C, H, W = xn.shape
    zero = xn.dtype.type(0)
    for r in range(C * KH * KW):
        c = r // (KH * KW)
        kh = (r // KW) % KH
        kw = r % KW
        row = col[r]
        xc = xn[c]
        oh_lo, oh_hi = out_range(kh * dh - ph, sh, H, OH)
        ow_lo, ow_hi = out_range(kw * dw - pw, sw, W, OW)
        for oh in range(OH):
            seg = row[oh * OW: (oh + 1) * OW]
            if oh < oh_lo or oh >= oh_hi:
                for ow in range(OW):
                    seg[ow] = zero
                continue
            for ow in range(ow_lo):
                seg[ow] = zero
            # seg[ow] = xc[ih, ow*sw + kw*dw - pw]
            row_gather(seg, xc[oh * sh + kh * dh - ph], ow_lo, ow_hi, sw, kw * dw - pw)
            for ow in range(ow_hi, OW):
                seg[ow] = zero


@njit(cache=True)
def col2im(dcol, dxn, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW):
    """dxn[c, ih, iw] = sum of the dcol entries im2col copied from there (one image)."""
    C, H, W = dxn.shape
    one = dxn.dtype.type(1)
    for c in range(C):
        plane = dxn[c]
        plane[:, :] = 0
        for kh in range(KH):
            oh_lo, oh_hi = out_range(kh * dh - ph, sh, H, OH)
            for kw in range(KW):
                ow_lo, ow_hi = out_range(kw * dw - pw, sw, W, OW)
                row = dcol[(c * KH + kh) * KW + kw]
                for oh in range(oh_lo, oh_hi):
                    ih = oh * sh + kh * dh - ph
                    # plane[ih, ow*sw + kw*dw - pw] += row[oh*OW + ow]
                    row_scatter(plane[ih], one, row[oh * OW: (oh + 1) * OW], ow_lo, ow_hi,
                                sw, kw * dw - pw)


@njit(cache=True, parallel=True)
def conv2d_forward_gemm(x, w, b, sh, sw, ph, pw, dh, dw, groups, OH, OW, slots):
    """As ``conv2d_forward_direct``; y[n, group] = w[group] @ im2col(x[n])[group] + b.
    Parallel over images."""
    N, C, H, W = x.shape
    F, Cg, KH, KW = w.shape
    Fg = F // groups
    K = Cg * KH * KW
    P = OH * OW
    w3 = w.reshape(groups, Fg, K)
    cols = np.empty((slots, groups, K, P), x.dtype)
    y = np.empty((N, groups, Fg, P), x.dtype)
    for n0 in range(0, N, slots):
        for s in prange(min(slots, N - n0)):
            n = n0 + s
            im2col(x[n], cols[s].reshape(groups * K, P), KH, KW, sh, sw, ph, pw, dh, dw,
                   OH, OW)
            for gi in range(groups):
                yg = y[n, gi]
                gemm(w3[gi], cols[s, gi], yg)
                for fl in range(Fg):
                    yg[fl] += b[gi * Fg + fl]
    return y.reshape(N, F, OH, OW)


@njit(cache=True, parallel=True)
def conv2d_input_grad_gemm(g, w, dx, sh, sw, ph, pw, dh, dw, groups, slots):
    """As ``conv2d_input_grad_direct``; dx[n] = col2im(w[group]^T @ g[n, group]).
    Parallel over images (each owns dx[n])."""
    N, F, OH, OW = g.shape
    _, Cg, KH, KW = w.shape
    Fg = F // groups
    K = Cg * KH * KW
    P = OH * OW
    wt = np.empty((groups, K, Fg), w.dtype)  # w[group]^T, contiguous
    w3 = w.reshape(groups, Fg, K)
    for gi in range(groups):
        wt[gi] = w3[gi].T
    g4 = g.reshape(N, groups, Fg, P)
    dcols = np.empty((slots, groups, K, P), g.dtype)
    for n0 in range(0, N, slots):
        for s in prange(min(slots, N - n0)):
            n = n0 + s
            for gi in range(groups):
                gemm(wt[gi], g4[n, gi], dcols[s, gi])
            col2im(dcols[s].reshape(groups * K, P), dx[n], KH, KW, sh, sw, ph, pw, dh, dw,
                   OH, OW)
    return dx


@njit(cache=True, parallel=True)
def conv2d_weight_grad_gemm(x, g, KH, KW, sh, sw, ph, pw, dh, dw, groups, slots):
    """As ``conv2d_weight_grad_direct``; dw[group] = sum over n, in order, of
    (im2col(x[n])[group] @ g[n, group]^T)^T. Parallel over images, each writing its own
    partial; the partials are summed afterwards in image order."""
    N, C, H, W = x.shape
    _, F, OH, OW = g.shape
    Cg = C // groups
    Fg = F // groups
    K = Cg * KH * KW
    P = OH * OW
    g4 = g.reshape(N, groups, Fg, P)
    cols = np.empty((slots, groups, K, P), x.dtype)
    gts = np.empty((slots, P, Fg), x.dtype)
    parts = np.empty((N, groups, K, Fg), x.dtype)
    for n0 in range(0, N, slots):
        for s in prange(min(slots, N - n0)):
            n = n0 + s
            im2col(x[n], cols[s].reshape(groups * K, P), KH, KW, sh, sw, ph, pw, dh, dw,
                   OH, OW)
            for gi in range(groups):
                gts[s] = g4[n, gi].T
                gemm(cols[s, gi], gts[s], parts[n, gi])
    dw3 = np.zeros((groups, Fg, K), x.dtype)
    for gi in prange(groups):
        for n in range(N):
            dw3[gi] += parts[n, gi].T
    return dw3.reshape(F, Cg, KH, KW)


@njit(cache=True, parallel=True)
def add_channel_bias(y, b):
    """y[n, f] += b[f] in place. Parallel over (n, f)."""
    N, F, _, _ = y.shape
    for nf in prange(N * F):
        y[nf // F, nf % F] += b[nf % F]
