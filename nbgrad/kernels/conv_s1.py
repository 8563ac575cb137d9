"""Stride-1 convolution kernels on zero-padded planes (see kernels/conv.py for the
notation, docs/derivations.md#convolution-adjoints for the adjoints).

With stride 1, a tap (kh, kw) shifts the whole plane by one constant offset once the
input is zero-padded into a buffer of row pitch Wp = OW + dw(KW-1): on that pitch the
outputs are the flat positions j = oh*Wp + ow, and tap t = (kh, kw) reads j + off_t,
off_t = kh*dh*Wp + kw*dw (the Wp - OW columns past each output row are scratch). So

    forward      yq[j]  = sum_{cl, t} w[f, cl, t] * xp[cl][off_t + j]
    input grad   dxp[m] = sum_{fl, t} w[f, cl, t] * gq[fl][m - off_t]
    weight grad  dw[f, cl, t] = sum_j gq[f][j] * xp[cl][off_t + j]

are sums of shifted spans (kernels/gemm.py's offset_gemv for the first two: gq carries
a zero margin in front so that m - off_t never leaves it). For few channels per group
(depthwise) this beats the implicit GEMM; the tests compare it with the loop nests.

Tasks share out over ``slots`` (slot s takes tasks s, s + slots, ...), each slot with
buffers allocated before the parallel loop, of which a task overwrites what it reads: a
task that allocated its own took a malloc lock that the pool's threads share when they
share a malloc arena (docs/threads.md#malloc-arenas).
"""

import numpy as np
from numba import njit, prange

from ..runtime.jit import PARALLEL, SERIAL, njit_with_serial, plain
from .basics import copy_into, dot
from .conv import ConvGeometry, KernelRun, plane_sum, planes_from_pitch
from .gemm import SPAN, offset_gemv, round_up


@njit(**SERIAL)
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


@njit(**SERIAL)
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


@njit(**SERIAL)
def dot_taps(gq, xp, offs, L, out):
    """out[t] = sum_{j < L} gq[j] * xp[offs[t] + j] for every tap t."""
    for t in range(offs.size):
        out[t] = dot(gq, xp[offs[t]:], L)


@njit(**SERIAL)
def span_taps(KH, KW, dh, dw, Wp):
    """Flat offsets kh*dh*Wp + kw*dw of the taps on pitch Wp, row-major."""
    offs = np.empty(KH * KW, np.int64)
    for kh in range(KH):
        for kw in range(KW):
            offs[kh * KW + kw] = kh * dh * Wp + kw * dw
    return offs


@njit(**SERIAL)
def span_layout(OH, OW, KH, KW, dh, dw):
    """(Hp, Wp, offs): the rows and the pitch of the zero-padded planes, and the taps'
    flat offsets on that pitch (span_taps)."""
    Hp = OH + dh * (KH - 1)
    Wp = OW + dw * (KW - 1)
    return Hp, Wp, span_taps(KH, KW, dh, dw, Wp)


@njit(**SERIAL)
def input_grad_layout(w, groups, Hp, Wp, offs):
    """(margin, R, rows, wt) of the input gradient on the padded planes: the zero margin in
    front of each output-gradient plane (>= every tap offset, keeping the planes 64-byte
    aligned), the planes' pitch R in gq, the span starts of every (plane, tap) pair read
    backwards, and the weights by input channel (taps_by_channel)."""
    F, Cg, KH, KW = w.shape
    margin = round_up(offs[-1], 16)
    R = margin + round_up(Hp * Wp, SPAN)
    rows = shifted_rows(F // groups, R, offs, plain(-1), margin)
    return margin, R, rows, taps_by_channel(w.reshape(F, Cg, KH * KW), groups)


@njit(**SERIAL)
def pad_group(x, c0, Cg, ph, pw, Hp, Wp, xp):
    """xp[: Cg*Hp*Wp + SPAN] = channels c0 .. c0+Cg-1 of one image zero-padded, plane cl
    at [cl*Hp*Wp, ...), then SPAN zeros of slack for offset_gemv's last tile; returns
    that part of xp."""
    for cl in range(Cg):
        pad_plane(x[c0 + cl], xp[cl * Hp * Wp: (cl + 1) * Hp * Wp], ph, pw, Hp, Wp)
    xp[Cg * Hp * Wp: Cg * Hp * Wp + SPAN] = 0
    return xp[: Cg * Hp * Wp + SPAN]


@njit(**SERIAL)
def pad_grad_group(g, f0, Fg, OH, Wp, margin, R, gq):
    """gq[: Fg*R] = planes f0 .. f0+Fg-1 of one image's output gradient on pitch Wp (zero
    scratch columns), plane fl at [fl*R + margin, ...) with zeros around it; returns that
    part of gq."""
    gq[: Fg * R] = 0
    for fl in range(Fg):
        start = fl * R + margin
        pad_plane(g[f0 + fl], gq[start: start + OH * Wp], plain(0), plain(0), OH, Wp)
    return gq[: Fg * R]


@njit(**SERIAL)
def shifted_rows(count, pitch, offs, sign, base):
    """rows[i*T + t] = base + i*pitch + sign*offs[t]: the span starts of every (plane,
    tap) pair for offset_gemv."""
    T = offs.size
    rows = np.empty(count * T, np.int64)
    for i in range(count):
        for t in range(T):
            rows[i * T + t] = base + i * pitch + sign * offs[t]
    return rows


@njit(**SERIAL)
def taps_by_channel(w3, groups):
    """wt[gi, cl, fl*T + t] = w3[gi*Fg + fl, cl, t]: for each group, the weights that
    carry the output gradient's planes back to input channel cl, one row per channel."""
    F, Cg, T = w3.shape
    Fg = F // groups
    wt = np.empty((groups, Cg, Fg * T), w3.dtype)
    for gi in range(groups):
        for cl in range(Cg):
            for fl in range(Fg):
                for t in range(T):
                    wt[gi, cl, fl * T + t] = w3[gi * Fg + fl, cl, t]
    return wt


@njit(**SERIAL)
def input_grad_group(gq, rows, wt, dxp, dx_n, c0, ph, pw, Hp, Wp):
    """dx_n[c0 + cl] = the interior of dxp[cl, m] = sum_{fl, t} wt[cl, fl*T + t] *
    gq[rows[fl*T + t] + m] for each channel cl of one group (the input gradient on the
    padded planes)."""
    offset_gemv(wt, gq, rows, wt.shape[1], dxp)
    for cl in range(wt.shape[0]):
        unpad_plane(dxp[cl, : Hp * Wp], dx_n[c0 + cl], ph, pw, Wp)


@njit_with_serial(**PARALLEL)
def conv2d_forward_s1(x, w, b, ph, pw, dh, dw, groups, OH, OW, slots, activation):
    """As ``conv2d_forward_direct`` with stride 1. Parallel over (n, group) tasks: the
    group's planes are padded once for its Fg filters."""
    N = x.shape[0]
    F, Cg, KH, KW = w.shape
    Fg = F // groups
    Hp, Wp, offs = span_layout(OH, OW, KH, KW, dh, dw)
    rows = shifted_rows(Cg, Hp * Wp, offs, plain(1), plain(0))
    w2 = w.reshape(F, Cg * KH * KW)
    P = round_up((OH - 1) * Wp + OW, SPAN)
    y = np.empty((N, F, OH, OW), x.dtype)
    xps = np.empty((slots, Cg * Hp * Wp + SPAN), x.dtype)
    yq = np.empty((slots, Fg, P), x.dtype)
    for s in prange(slots):
        for ng in range(s, N * groups, slots):
            n = ng // groups
            gi = ng % groups
            xp = pad_group(x[n], gi * Cg, Cg, ph, pw, Hp, Wp, xps[s])
            offset_gemv(w2[gi * Fg: (gi + 1) * Fg], xp, rows, Cg * KH * KW, yq[s])
            planes_from_pitch(yq[s], Fg, Wp, b, gi * Fg, y[n], activation)
    return y


@njit_with_serial(**PARALLEL)
def conv2d_input_grad_s1(g, w, dx, ph, pw, dh, dw, groups, slots):
    """As ``conv2d_input_grad_direct`` with stride 1. Parallel over (n, group) tasks: dxp,
    the gradient of a padded input plane, gathers every tap's shifted g; dx is its
    interior."""
    N, F, OH, OW = g.shape
    _, Cg, KH, KW = w.shape
    Fg = F // groups
    Hp, Wp, offs = span_layout(OH, OW, KH, KW, dh, dw)
    margin, R, rows, wt = input_grad_layout(w, groups, Hp, Wp, offs)
    gqs = np.empty((slots, Fg * R), g.dtype)
    dxp = np.empty((slots, Cg, R - margin), g.dtype)
    for s in prange(slots):
        for ng in range(s, N * groups, slots):
            n = ng // groups
            gi = ng % groups
            gq = pad_grad_group(g[n], gi * Fg, Fg, OH, Wp, margin, R, gqs[s])
            input_grad_group(gq, rows, wt[gi], dxp[s], dx[n], gi * Cg, ph, pw, Hp, Wp)
    return dx


@njit_with_serial(**PARALLEL)
def conv2d_weight_grad_s1(x, g, KH, KW, ph, pw, dh, dw, groups, slots):
    """As ``conv2d_weight_grad_direct`` with stride 1. Parallel over (f, cl) tasks; the
    batch is summed inside, in order."""
    N, C, H, W = x.shape
    _, F, OH, OW = g.shape
    Cg = C // groups
    Fg = F // groups
    Hp, Wp, offs = span_layout(OH, OW, KH, KW, dh, dw)
    L = (OH - 1) * Wp + OW
    dwt = np.empty((F, Cg, KH * KW), x.dtype)
    acc = np.empty((slots, KH * KW), x.dtype)
    part = np.empty((slots, KH * KW), x.dtype)
    xp = np.empty((slots, Hp * Wp), x.dtype)
    gq = np.empty((slots, OH * Wp), x.dtype)  # zero in the scratch columns
    for s in prange(slots):
        for fc in range(s, F * Cg, slots):
            f = fc // Cg
            c = (f // Fg) * Cg + fc % Cg
            acc[s] = 0
            for n in range(N):
                pad_plane(x[n, c], xp[s], ph, pw, Hp, Wp)
                pad_plane(g[n, f], gq[s], plain(0), plain(0), OH, Wp)
                dot_taps(gq[s], xp[s], offs, L, part[s])
                acc[s] += part[s]
            copy_into(dwt[f, fc % Cg], acc[s])
    return dwt.reshape(F, Cg, KH, KW)


@njit_with_serial(**PARALLEL)
def conv2d_backward_s1(x, g, w, ph, pw, dh, dw, groups, need_dx, slots):
    """(dx, dw, db) of a stride-1 convolution in one pass over the batch: task (n, group)
    pads the group's input planes and output gradients once, then
        dx[n, c]          as ``conv2d_input_grad_s1`` (only if need_dx; else dx is empty),
        part[n, f, cl, t] = <gq[f], xp[cl] shifted by tap t>,   sums[n, f] = sum g[n, f],
    and dw, db sum those over n in order. Parallel over (n, group) tasks."""
    N, C, H, W = x.shape
    _, F, OH, OW = g.shape
    _, Cg, KH, KW = w.shape
    Fg = F // groups
    T = KH * KW
    Hp, Wp, offs = span_layout(OH, OW, KH, KW, dh, dw)
    L = (OH - 1) * Wp + OW
    margin, R, rows, wt = input_grad_layout(w, groups, Hp, Wp, offs)
    dx = np.empty((N if need_dx else 0, C, H, W), x.dtype)
    parts = np.empty((N, F, Cg, T), x.dtype)
    sums = np.empty((N, F), x.dtype)
    gqs = np.empty((slots, Fg * R), x.dtype)
    xps = np.empty((slots, Cg * Hp * Wp + SPAN), x.dtype)
    dxp = np.empty((slots if need_dx else 0, Cg, R - margin), x.dtype)
    for s in prange(slots):
        for ng in range(s, N * groups, slots):
            n = ng // groups
            gi = ng % groups
            gq = pad_grad_group(g[n], gi * Fg, Fg, OH, Wp, margin, R, gqs[s])
            xp = pad_group(x[n], gi * Cg, Cg, ph, pw, Hp, Wp, xps[s])
            for fl in range(Fg):
                sums[n, gi * Fg + fl] = plane_sum(g[n, gi * Fg + fl])
            for cl in range(Cg):
                for fl in range(Fg):
                    dot_taps(gq[fl * R + margin:], xp[cl * Hp * Wp:], offs, L,
                             parts[n, gi * Fg + fl, cl])
            if need_dx:
                input_grad_group(gq, rows, wt[gi], dxp[s], dx[n], gi * Cg, ph, pw, Hp, Wp)
    dwt, db = sum_batch_parts(parts, sums)
    return dx, dwt.reshape(F, Cg, KH, KW), db


@njit(**SERIAL)
def sum_batch_parts(parts, sums):
    """dw[f, cl, t] = sum_n parts[n, f, cl, t] and db[f] = sum_n sums[n, f], n ascending
    (zeros for an empty batch). Serial: called after the parallel loop, it keeps the
    kernel at one parallel region."""
    N, F, Cg, T = parts.shape
    dwt = np.zeros((F, Cg, T), parts.dtype)
    db = np.zeros(F, parts.dtype)
    for n in range(N):
        for f in range(F):
            db[f] += sums[n, f]
            for cl in range(Cg):
                for t in range(T):
                    dwt[f, cl, t] += parts[n, f, cl, t]
    return dwt, db


# -- the family's entry points (ops/conv.py; kernels/conv.py: ConvGeometry, KernelRun) -----
def forward(x: np.ndarray, w: np.ndarray, b: np.ndarray, geometry: ConvGeometry,
            run: KernelRun, activation: int) -> np.ndarray:
    return run.form_of(conv2d_forward_s1)(x, w, b, *geometry.stride1_scalars,
                                          *geometry.out_hw, run.slots, activation)


def input_grad(g: np.ndarray, w: np.ndarray, dx: np.ndarray, geometry: ConvGeometry,
               run: KernelRun) -> np.ndarray:
    return run.form_of(conv2d_input_grad_s1)(g, w, dx, *geometry.stride1_scalars, run.slots)


def weight_grad(x: np.ndarray, g: np.ndarray, geometry: ConvGeometry,
                run: KernelRun) -> np.ndarray:
    return run.form_of(conv2d_weight_grad_s1)(x, g, *geometry.kernel_hw,
                                              *geometry.stride1_scalars, run.slots)


def backward(x: np.ndarray, g: np.ndarray, w: np.ndarray, geometry: ConvGeometry,
             run: KernelRun, need_dx: bool) -> tuple:
    """(dx, dw, db) in one pass (``conv2d_backward_s1``; dx empty unless need_dx)."""
    return run.form_of(conv2d_backward_s1)(x, g, w, *geometry.stride1_scalars, need_dx,
                                           run.slots)
