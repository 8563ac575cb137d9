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
* ``*_gemm``: an implicit GEMM per image (kernels/gemm.py on offset rows into the
  input's phase planes, no im2col copy), parallel over images: the path once a group
  has many input channels and filters.
The tests compare ``*_s1`` and ``*_gemm`` with ``*_direct``.

Race freedom (Kernel rule 2): forward owns y[n, f] (gemm: y[n]); the input gradient owns
dx[n, c] (gemm: dx[n]) and collects every output that touches it; the weight gradient
owns one dw[f, cl] and sums the batch inside in a fixed order (gemm: one partial per
image, summed in image order); the bias gradient owns db[f].
"""

import numpy as np
from numba import njit, prange

from .gemm import MR, NR, SPAN, dot, offset_gemm, offset_gemv, round_up


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


@njit(cache=True, fastmath={"reassoc"})
def plane_sum(plane):
    """Sum of a 2-D plane: each row summed (reassociated so that LLVM vectorises it, as in
    gemm.dot), then the row sums in order."""
    total = plane.dtype.type(0)
    for i in range(plane.shape[0]):
        row = plane.dtype.type(0)
        for j in range(plane.shape[1]):
            row += plane[i, j]
        total += row
    return total


@njit(cache=True, parallel=True)
def conv2d_bias_grad(g):
    """db[f] = sum over n, in order, of the plane sums of g[n, f]."""
    N, F, OH, OW = g.shape
    db = np.empty(F, g.dtype)
    for f in prange(F):
        acc = g.dtype.type(0)
        for n in range(N):
            acc += plane_sum(g[n, f])
        db[f] = acc
    return db


# -- stride-1 padded-plane fast path ----------------------------------------------------
# With stride 1, a tap (kh, kw) shifts the whole plane by one constant offset once the
# input is zero-padded into a buffer of row pitch Wp = OW + dw(KW-1): on that pitch the
# outputs are the flat positions j = oh*Wp + ow, and tap t = (kh, kw) reads j + off_t,
# off_t = kh*dh*Wp + kw*dw (the Wp - OW columns past each output row are scratch). So
#
#     forward      yq[j]  = sum_{cl, t} w[f, cl, t] * xp[cl][off_t + j]
#     input grad   dxp[m] = sum_{fl, t} w[f, cl, t] * gq[fl][m - off_t]
#     weight grad  dw[f, cl, t] = sum_j gq[f][j] * xp[cl][off_t + j]
#
# are sums of shifted spans (kernels/gemm.py's offset_gemv for the first two: gq carries
# a zero margin in front so that m - off_t never leaves it). For few channels per group
# (depthwise) this beats the implicit GEMM; the tests compare it with the loop nests.
@njit(cache=True)
def pad_plane(src, buf, top, left, Hp, Wp):
    """buf[i*Wp + j] = src[i - top, j - left], zero outside src (buf is flat, Hp * Wp).
    (Rows are copied by plain loops: Numba's array-to-array slice assignment guards
    against overlap and costs several times more on rows this short.)"""
    H, W = src.shape
    buf[:] = 0
    lo = max(0, left)
    hi = min(Wp, W + left)
    for i in range(max(0, top), min(Hp, H + top)):
        dst = buf[i * Wp + lo: i * Wp + hi]
        row = src[i - top, lo - left: hi - left]
        for j in range(hi - lo):
            dst[j] = row[j]


@njit(cache=True)
def unpad_plane(buf, dst, top, left, Wp):
    """dst[i, j] = buf[(i + top)*Wp + j + left] where inside buf; zero elsewhere."""
    H, W = dst.shape
    Hp = buf.size // Wp
    dst[:, :] = 0
    lo = max(0, -left)
    hi = min(W, Wp - left)
    for i in range(max(0, -top), min(H, Hp - top)):
        row = dst[i, lo:hi]
        src = buf[(i + top) * Wp + lo + left: (i + top) * Wp + hi + left]
        for j in range(hi - lo):
            row[j] = src[j]


@njit(cache=True)
def dot_taps(gq, xp, offs, L, out):
    """out[t] = sum_{j < L} gq[j] * xp[offs[t] + j] for every tap t."""
    for t in range(offs.size):
        out[t] = dot(gq, xp[offs[t]:], L)


@njit(cache=True)
def span_taps(KH, KW, dh, dw, Wp):
    """Flat offsets kh*dh*Wp + kw*dw of the taps on pitch Wp, row-major."""
    offs = np.empty(KH * KW, np.int64)
    for kh in range(KH):
        for kw in range(KW):
            offs[kh * KW + kw] = kh * dh * Wp + kw * dw
    return offs


@njit(cache=True)
def pad_group(x, c0, Cg, ph, pw, Hp, Wp):
    """Channels c0 .. c0+Cg-1 of one image zero-padded, plane cl at [cl*Hp*Wp, ...), plus
    SPAN zeros of slack for offset_gemv's last tile."""
    xp = np.empty(Cg * Hp * Wp + SPAN, x.dtype)
    for cl in range(Cg):
        pad_plane(x[c0 + cl], xp[cl * Hp * Wp: (cl + 1) * Hp * Wp], ph, pw, Hp, Wp)
    xp[Cg * Hp * Wp:] = 0
    return xp


@njit(cache=True)
def pad_grad_group(g, f0, Fg, OH, Wp, margin, R):
    """Planes f0 .. f0+Fg-1 of one image's output gradient on pitch Wp (zero scratch
    columns), plane fl at [fl*R + margin, ...) with zeros around it."""
    gq = np.zeros(Fg * R, g.dtype)
    for fl in range(Fg):
        start = fl * R + margin
        pad_plane(g[f0 + fl], gq[start: start + OH * Wp], 0, 0, OH, Wp)
    return gq


@njit(cache=True)
def shifted_rows(count, pitch, offs, sign, base):
    """rows[i*T + t] = base + i*pitch + sign*offs[t]: the span starts of every (plane,
    tap) pair for offset_gemv."""
    T = offs.size
    rows = np.empty(count * T, np.int64)
    for i in range(count):
        for t in range(T):
            rows[i * T + t] = base + i * pitch + sign * offs[t]
    return rows


@njit(cache=True)
def input_grad_plane(gq, rows, w3, gi, cl, dxp, dxc, ph, pw, Hp, Wp):
    """dxc = the interior of dxp[m] = sum_{fl, t} w3[gi*Fg + fl, cl, t] * gq[rows[fl*T + t] + m]
    (the input gradient of channel cl of group gi, on the padded plane)."""
    T = w3.shape[2]
    Fg = rows.size // T
    wt = np.empty(Fg * T, w3.dtype)
    for fl in range(Fg):
        for t in range(T):
            wt[fl * T + t] = w3[gi * Fg + fl, cl, t]
    offset_gemv(wt, gq, rows, Fg * T, dxp)
    unpad_plane(dxp[: Hp * Wp], dxc, ph, pw, Wp)


@njit(cache=True, parallel=True)
def conv2d_forward_s1(x, w, b, ph, pw, dh, dw, groups, OH, OW):
    """As ``conv2d_forward_direct`` with stride 1. Parallel over (n, group): the group's
    planes are padded once for its Fg filters."""
    N, C, H, W = x.shape
    F, Cg, KH, KW = w.shape
    Fg = F // groups
    Hp = OH + dh * (KH - 1)
    Wp = OW + dw * (KW - 1)
    offs = span_taps(KH, KW, dh, dw, Wp)
    rows = shifted_rows(Cg, Hp * Wp, offs, 1, 0)
    w2 = w.reshape(F, Cg * KH * KW)
    y = np.empty((N, F, OH, OW), x.dtype)
    for ng in prange(N * groups):
        n = ng // groups
        gi = ng % groups
        xp = pad_group(x[n], gi * Cg, Cg, ph, pw, Hp, Wp)
        yq = np.empty(round_up((OH - 1) * Wp + OW, SPAN), x.dtype)
        for fl in range(Fg):
            f = gi * Fg + fl
            offset_gemv(w2[f], xp, rows, Cg * KH * KW, yq)
            for oh in range(OH):
                src = yq[oh * Wp: oh * Wp + OW]
                dst = y[n, f, oh]
                for ow in range(OW):
                    dst[ow] = src[ow] + b[f]
    return y


@njit(cache=True, parallel=True)
def conv2d_input_grad_s1(g, w, dx, ph, pw, dh, dw, groups):
    """As ``conv2d_input_grad_direct`` with stride 1. Parallel over (n, group): dxp, the
    gradient of a padded input plane, gathers every tap's shifted g; dx is its interior."""
    N, F, OH, OW = g.shape
    _, Cg, KH, KW = w.shape
    Fg = F // groups
    Hp = OH + dh * (KH - 1)
    Wp = OW + dw * (KW - 1)
    offs = span_taps(KH, KW, dh, dw, Wp)
    margin = round_up(offs[-1], 16)  # >= every tap offset; keeps gq planes 64-byte aligned
    R = margin + round_up(Hp * Wp, SPAN)
    rows = shifted_rows(Fg, R, offs, -1, margin)
    w3 = w.reshape(F, Cg, KH * KW)
    for ng in prange(N * groups):
        n = ng // groups
        gi = ng % groups
        gq = pad_grad_group(g[n], gi * Fg, Fg, OH, Wp, margin, R)
        dxp = np.empty(R - margin, g.dtype)
        for cl in range(Cg):
            input_grad_plane(gq, rows, w3, gi, cl, dxp, dx[n, gi * Cg + cl], ph, pw, Hp, Wp)
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
    dwt = np.empty((F, Cg, KH * KW), x.dtype)
    for fc in prange(F * Cg):
        f = fc // Cg
        c = (f // Fg) * Cg + fc % Cg
        acc = np.zeros(KH * KW, x.dtype)
        part = np.empty(KH * KW, x.dtype)
        xp = np.empty(Hp * Wp, x.dtype)
        gq = np.empty(OH * Wp, x.dtype)  # zero in the scratch columns
        for n in range(N):
            pad_plane(x[n, c], xp, ph, pw, Hp, Wp)
            pad_plane(g[n, f], gq, 0, 0, OH, Wp)
            dot_taps(gq, xp, offs, L, part)
            acc += part
        dwt[f, fc % Cg] = acc
    return dwt.reshape(F, Cg, KH, KW)


@njit(cache=True, parallel=True)
def conv2d_backward_s1(x, g, w, ph, pw, dh, dw, groups, need_dx):
    """(dx, dw, db) of a stride-1 convolution in one pass over the batch: task (n, group)
    pads the group's input planes and output gradients once, then
        dx[n, c]          as ``conv2d_input_grad_s1`` (only if need_dx; else dx is empty),
        part[n, f, cl, t] = <gq[f], xp[cl] shifted by tap t>,   sums[n, f] = sum g[n, f],
    and dw, db sum those over n in order. Parallel over (n, group)."""
    N, C, H, W = x.shape
    _, F, OH, OW = g.shape
    _, Cg, KH, KW = w.shape
    Fg = F // groups
    T = KH * KW
    Hp = OH + dh * (KH - 1)
    Wp = OW + dw * (KW - 1)
    L = (OH - 1) * Wp + OW
    offs = span_taps(KH, KW, dh, dw, Wp)
    margin = round_up(offs[-1], 16)  # >= every tap offset; keeps gq planes 64-byte aligned
    R = margin + round_up(Hp * Wp, SPAN)
    rows = shifted_rows(Fg, R, offs, -1, margin)
    w3 = w.reshape(F, Cg, T)
    dx = np.empty((N if need_dx else 0, C, H, W), x.dtype)
    parts = np.empty((N, F, Cg, T), x.dtype)
    sums = np.empty((N, F), x.dtype)
    for ng in prange(N * groups):
        n = ng // groups
        gi = ng % groups
        gq = pad_grad_group(g[n], gi * Fg, Fg, OH, Wp, margin, R)
        xp = pad_group(x[n], gi * Cg, Cg, ph, pw, Hp, Wp)
        for fl in range(Fg):
            sums[n, gi * Fg + fl] = plane_sum(g[n, gi * Fg + fl])
        dxp = np.empty(R - margin, x.dtype)
        for cl in range(Cg):
            for fl in range(Fg):
                dot_taps(gq[fl * R + margin:], xp[cl * Hp * Wp:], offs, L,
                         parts[n, gi * Fg + fl, cl])
            if need_dx:
                input_grad_plane(gq, rows, w3, gi, cl, dxp, dx[n, gi * Cg + cl], ph, pw, Hp, Wp)
    dwt = np.zeros((F, Cg, T), x.dtype)
    db = np.zeros(F, x.dtype)
    for n in range(N):
        dwt += parts[n]
        db += sums[n]
    return dx, dwt.reshape(F, Cg, KH, KW), db


# -- implicit GEMM on phase planes --------------------------------------------------------
# Along an axis with stride s, dilation d and top padding p, output oh and tap kh read the
# padded input row u = oh*s + kh*d. Split u into its phase a = u mod s and its row
# q = u div s = oh + (kh*d) div s in the plane of phase a: tap kh always reads phase
# (kh*d) mod s, shifted by (kh*d) div s. Copying each channel's input into its s_h*s_w
# phase planes of Hq = OH + ((KH-1)*dh) div sh rows and Wq = OW + ((KW-1)*dw) div sw
# columns (zero where the plane is outside the input), output (oh, ow) sits at the flat
# position j = oh*Wq + ow of every plane, and tap t = (kh, kw) of channel c reads
#
#     planes[start(c, t) + j],   start(c, t) = plane(c, phase_t)*S + shift_h*Wq + shift_w
#
# (S = Hq*Wq). The im2col matrix is then an offset matrix over one copy of the input
# (kernels/gemm.py), and per image and group
#
#     forward      yq[f, j]    = sum_{(cl, t)} w[f, cl, t] * planes[start(c, t) + j]
#     weight grad  dw[f, cl, t] = sum_j planes[start(c, t) + j] * gq[j, f]
#     input grad   dxq[c, a][m] = sum_{f, t of phase a} w[f, cl, t] * G[f, m - shift_t]
#
# where j < L = (OH-1)*Wq + OW runs over the outputs plus Wq - OW scratch columns per row
# (gq, G: the output gradient on the same pitch, zero in the scratch columns and, for G,
# in a margin before and after). The input gradient is the adjoint gather: input row
# u = q*s + a collects the taps of phase a. Images run in parallel (``slots`` at once,
# each with private buffers); results do not depend on the thread count or the slots.
@njit(cache=True)
def phase_shape(OH, OW, KH, KW, sh, sw, dh, dw):
    """(Hq, Wq): the rows and columns of one phase plane."""
    return OH + (KH - 1) * dh // sh, OW + (KW - 1) * dw // sw


@njit(cache=True)
def tap_layout(KH, KW, sh, sw, dh, dw, Wq):
    """Per tap t = kh*KW + kw: its phase (kh*dh mod sh)*sw + (kw*dw mod sw) and its flat
    shift ((kh*dh) div sh)*Wq + (kw*dw) div sw inside that phase plane."""
    phase = np.empty(KH * KW, np.int64)
    shift = np.empty(KH * KW, np.int64)
    for kh in range(KH):
        for kw in range(KW):
            phase[kh * KW + kw] = (kh * dh % sh) * sw + kw * dw % sw
            shift[kh * KW + kw] = (kh * dh // sh) * Wq + kw * dw // sw
    return phase, shift


@njit(cache=True)
def phases_used(KH, KW, sh, sw, dh, dw):
    """used[a]: whether some tap reads phase a (with stride 2 and dilation 2, only a = 0)."""
    phase, _ = tap_layout(KH, KW, sh, sw, dh, dw, 0)
    used = np.zeros(sh * sw, np.bool_)
    for t in range(phase.size):
        used[phase[t]] = True
    return used


@njit(cache=True)
def tap_rows(C, KH, KW, sh, sw, dh, dw, Wq, S):
    """start(c, t) for the im2col rows (c, kh, kw), in w's order."""
    phase, shift = tap_layout(KH, KW, sh, sw, dh, dw, Wq)
    T = KH * KW
    starts = np.empty(C * T, np.int64)
    for c in range(C):
        for t in range(T):
            starts[c * T + t] = (c * sh * sw + phase[t]) * S + shift[t]
    return starts


@njit(cache=True)
def phase_planes(xn, planes, sh, sw, ph, pw, Hq, Wq, used):
    """planes[plane(c, a)*S + q*Wq + r] = xn[c, q*sh + ah - ph, r*sw + aw - pw] with
    a = ah*sw + aw (zero outside the input), for the phases a some tap reads (used[a]);
    the others are left unset: only the forward's outputs past the span (j >= L, the
    padding up to a whole tile, discarded) read into them. The slack past the last plane
    is zeroed."""
    C, H, W = xn.shape
    S = Hq * Wq
    for c in range(C):
        for ah in range(sh):
            q_lo, q_hi = out_range(ah - ph, sh, H, Hq)
            for aw in range(sw):
                if not used[ah * sw + aw]:
                    continue
                r_lo, r_hi = out_range(aw - pw, sw, W, Wq)
                base = ((c * sh + ah) * sw + aw) * S
                for q in range(Hq):
                    row = planes[base + q * Wq: base + (q + 1) * Wq]
                    row[:] = 0
                    if q < q_lo or q >= q_hi:
                        continue
                    # row[r] = xn[c, ih, r*sw + aw - pw] for r in [r_lo, r_hi), written
                    # inline with indices from 0 (a row_gather call per row cost 6x more)
                    dst = row[r_lo:r_hi]
                    src = xn[c, q * sh + ah - ph, r_lo * sw + aw - pw:]
                    for j in range(r_hi - r_lo):
                        dst[j] = src[j * sw]
    planes[C * sh * sw * S:] = 0


@njit(cache=True, parallel=True)
def conv2d_forward_gemm(x, w, b, sh, sw, ph, pw, dh, dw, groups, OH, OW, slots):
    """As ``conv2d_forward_direct``: yq = w[group] @ (offset matrix of the planes), then
    y[n, f, oh, ow] = yq[f, oh*Wq + ow] + b[f]. Parallel over images."""
    N, C, H, W = x.shape
    F, Cg, KH, KW = w.shape
    Fg = F // groups
    Kg = Cg * KH * KW
    Hq, Wq = phase_shape(OH, OW, KH, KW, sh, sw, dh, dw)
    L = round_up((OH - 1) * Wq + OW, NR)
    starts = tap_rows(C, KH, KW, sh, sw, dh, dw, Wq, Hq * Wq)
    used = phases_used(KH, KW, sh, sw, dh, dw)
    Fp = round_up(Fg, MR)
    wp = np.zeros((groups, Fp, Kg), w.dtype)  # w per group, zero rows up to Fp
    wp[:, :Fg] = w.reshape(groups, Fg, Kg)
    w_flat = wp.reshape(groups, Fp * Kg)
    w_rows = np.arange(Fp) * Kg
    planes = np.empty((slots, C * sh * sw * Hq * Wq + NR), x.dtype)
    yq = np.empty((slots, Fp, L), x.dtype)
    y = np.empty((N, F, OH, OW), x.dtype)
    for n0 in range(0, N, slots):
        for s in prange(min(slots, N - n0)):
            n = n0 + s
            phase_planes(x[n], planes[s], sh, sw, ph, pw, Hq, Wq, used)
            for gi in range(groups):
                offset_gemm(w_flat[gi], w_rows, planes[s], starts[gi * Kg: (gi + 1) * Kg],
                            Kg, yq[s])
                for fl in range(Fg):
                    f = gi * Fg + fl
                    for oh in range(OH):
                        src = yq[s, fl, oh * Wq: oh * Wq + OW]
                        dst = y[n, f, oh]
                        for ow in range(OW):
                            dst[ow] = src[ow] + b[f]
    return y


@njit(cache=True)
def taps_by_phase(phase, phases):
    """The taps grouped by phase (ascending within each): order[ptr[a]: ptr[a + 1]]."""
    ptr = np.zeros(phases + 1, np.int64)
    for t in range(phase.size):
        ptr[phase[t] + 1] += 1
    for a in range(phases):
        ptr[a + 1] += ptr[a]
    order = np.empty(phase.size, np.int64)
    fill = ptr[:-1].copy()
    for t in range(phase.size):
        order[fill[phase[t]]] = t
        fill[phase[t]] += 1
    return order, ptr


@njit(cache=True, parallel=True)
def conv2d_input_grad_gemm(g, w, dx, sh, sw, ph, pw, dh, dw, groups, slots):
    """As ``conv2d_input_grad_direct``: per image, group and phase a,
    dxq[cl, m] = sum_{fl, t of phase a} w[f, cl, t] * G[f, m - shift_t], then the plane
    positions inside the input are copied to dx (the rest of dx is zero). Parallel over
    images (each owns dx[n])."""
    N, F, OH, OW = g.shape
    _, Cg, KH, KW = w.shape
    _, C, H, W = dx.shape
    Fg = F // groups
    T = KH * KW
    phases = sh * sw
    Hq, Wq = phase_shape(OH, OW, KH, KW, sh, sw, dh, dw)
    phase, shift = tap_layout(KH, KW, sh, sw, dh, dw, Wq)
    order, ptr = taps_by_phase(phase, phases)
    margin = shift.max()
    Sp = round_up(Hq * Wq, NR) + NR
    R = margin + Sp  # G[f] lives at gbuf[f*R + margin + j], zero elsewhere
    Cp = round_up(Cg, MR)
    # wa: per group, per phase a, the matrix A[cl, fl*Ta + i] = w[f, cl, order[ptr[a] + i]]
    # (Cp x Fg*Ta, zero rows past Cg); b_rows: the G row of each column (fl, i)
    wa = np.zeros((groups, Cp * Fg * T), w.dtype)
    b_rows = np.empty((groups, Fg * T), np.int64)
    for gi in range(groups):
        for a in range(phases):
            Ta = ptr[a + 1] - ptr[a]
            A = wa[gi, Cp * Fg * ptr[a]: Cp * Fg * ptr[a + 1]].reshape(Cp, Fg * Ta)
            for fl in range(Fg):
                f = gi * Fg + fl
                for i in range(Ta):
                    t = order[ptr[a] + i]
                    for cl in range(Cg):
                        A[cl, fl * Ta + i] = w[f, cl, t // KW, t % KW]
                    b_rows[gi, Fg * ptr[a] + fl * Ta + i] = f * R + margin - shift[t]
    gbuf = np.zeros((slots, F * R), g.dtype)
    for n0 in range(0, N, slots):
        for s in prange(min(slots, N - n0)):
            n = n0 + s
            for f in range(F):
                for oh in range(OH):
                    start = f * R + margin + oh * Wq
                    row_gather(gbuf[s, start: start + OW], g[n, f, oh], 0, OW, 1, 0)
            dx[n] = 0
            for gi in range(groups):
                for a in range(phases):
                    input_grad_phase(wa[gi, Cp * Fg * ptr[a]: Cp * Fg * ptr[a + 1]],
                                     b_rows[gi, Fg * ptr[a]: Fg * ptr[a + 1]], gbuf[s],
                                     dx[n, gi * Cg: (gi + 1) * Cg], a // sw, a % sw,
                                     sh, sw, ph, pw, Hq, Wq)
    return dx


@njit(cache=True)
def input_grad_phase(A, b_rows, gbuf, dxg, ah, aw, sh, sw, ph, pw, Hq, Wq):
    """The inputs of phase a = (ah, aw) in one group:
    dxq[cl, m] = sum_k A[cl, k] * gbuf[b_rows[k] + m] over the plane rows q in [q_lo, q_hi)
    that fall inside the input (m = (q - q_lo)*Wq + r), then
    dxg[cl, q*sh + ah - ph, r*sw + aw - pw] = dxq[cl, m] where inside the input.
    A phase no tap reads keeps its zero gradient."""
    Cg, H, W = dxg.shape
    K = b_rows.size
    q_lo, q_hi = out_range(ah - ph, sh, H, Hq)
    r_lo, r_hi = out_range(aw - pw, sw, W, Wq)
    if K == 0 or q_hi <= q_lo or r_hi <= r_lo:
        return
    Cp = A.size // K
    dxq = np.empty((Cp, round_up((q_hi - q_lo) * Wq, NR)), dxg.dtype)
    offset_gemm(A, np.arange(Cp) * K, gbuf, b_rows + q_lo * Wq, K, dxq)
    for cl in range(Cg):
        for q in range(q_lo, q_hi):
            src = dxq[cl, (q - q_lo) * Wq: (q - q_lo + 1) * Wq]
            dst = dxg[cl, q * sh + ah - ph]
            for r in range(r_lo, r_hi):
                dst[r * sw + aw - pw] = src[r]


@njit(cache=True, parallel=True)
def conv2d_weight_grad_gemm(x, g, KH, KW, sh, sw, ph, pw, dh, dw, groups, slots):
    """As ``conv2d_weight_grad_direct``: per image and group,
    part[(cl, t), fl] = sum_j planes[start(c, t) + j] * gq[j, fl]; dw is the sum of the
    parts in image order. Parallel over images, each writing its own part."""
    N, C, H, W = x.shape
    _, F, OH, OW = g.shape
    Cg = C // groups
    Fg = F // groups
    Kg = Cg * KH * KW
    Hq, Wq = phase_shape(OH, OW, KH, KW, sh, sw, dh, dw)
    L = (OH - 1) * Wq + OW
    starts = tap_rows(C, KH, KW, sh, sw, dh, dw, Wq, Hq * Wq)
    used = phases_used(KH, KW, sh, sw, dh, dw)
    Kp = round_up(Kg, MR)
    Fp = round_up(Fg, NR)
    x_rows = np.zeros((groups, Kp), np.int64)  # rows past Kg read plane 0, discarded
    for gi in range(groups):
        x_rows[gi, :Kg] = starts[gi * Kg: (gi + 1) * Kg]
    g_rows = np.arange(L) * Fp
    planes = np.empty((slots, C * sh * sw * Hq * Wq + NR), x.dtype)
    gq = np.zeros((slots, L * Fp), x.dtype)  # gq[j*Fp + fl]: zero in scratch columns
    parts = np.empty((N, groups, Kp, Fp), x.dtype)
    for n0 in range(0, N, slots):
        for s in prange(min(slots, N - n0)):
            n = n0 + s
            phase_planes(x[n], planes[s], sh, sw, ph, pw, Hq, Wq, used)
            for gi in range(groups):
                for oh in range(OH):  # row by row: the block of gq written stays in L1
                    for fl in range(Fg):
                        src = g[n, gi * Fg + fl, oh]
                        for ow in range(OW):
                            gq[s, (oh * Wq + ow) * Fp + fl] = src[ow]
                offset_gemm(planes[s], x_rows[gi], gq[s], g_rows, L, parts[n, gi])
    dw3 = np.empty((groups, Fg, Kg), x.dtype)
    for gi in prange(groups):
        total = parts[0, gi].copy()
        for n in range(1, N):
            total += parts[n, gi]
        dw3[gi] = total[:Kg, :Fg].T
    return dw3.reshape(F, Cg, KH, KW)


@njit(cache=True, parallel=True)
def add_channel_bias(y, b):
    """y[n, f] += b[f] in place. Parallel over (n, f)."""
    N, F, _, _ = y.shape
    for nf in prange(N * F):
        y[nf // F, nf % F] += b[nf % F]
