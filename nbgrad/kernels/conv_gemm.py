"""Convolution as an implicit GEMM on phase planes (see kernels/conv.py for the notation,
docs/derivations.md#convolution-adjoints for the adjoints).

Along an axis with stride s, dilation d and top padding p, output oh and tap kh read the
padded input row u = oh*s + kh*d. Split u into its phase a = u mod s and its row
q = u div s = oh + (kh*d) div s in the plane of phase a: tap kh always reads phase
(kh*d) mod s, shifted by (kh*d) div s. Copying each channel's input into its s_h*s_w
phase planes of Hq = OH + ((KH-1)*dh) div sh rows and Wq = OW + ((KW-1)*dw) div sw
columns (zero where the plane is outside the input), output (oh, ow) sits at the flat
position j = oh*Wq + ow of every plane, and tap t = (kh, kw) of channel c reads

    planes[start(c, t) + j],   start(c, t) = plane(c, phase_t)*S + shift_h*Wq + shift_w

(S = Hq*Wq). The im2col matrix is then an offset matrix over one copy of the input
(kernels/gemm.py), and per image and group

    forward      yq[f, j]    = sum_{(cl, t)} w[f, cl, t] * planes[start(c, t) + j]
    weight grad  dw[f, cl, t] = sum_j planes[start(c, t) + j] * gq[j, f]
    input grad   dxq[c, a][m] = sum_{f, t of phase a} w[f, cl, t] * G[f, m - shift_t]

where j < L = (OH-1)*Wq + OW runs over the outputs plus Wq - OW scratch columns per row
(gq, G: the output gradient on the same pitch, zero in the scratch columns and, for G,
in a margin before and after). The input gradient is the adjoint gather: input row
u = q*s + a collects the taps of phase a. Images run in parallel (``slots`` at once,
each with private buffers); results do not depend on the thread count or the slots.
"""

import numpy as np
from numba import njit, prange

from ..runtime.jit import PARALLEL, SERIAL, njit_with_serial
from .basics import copy_into
from .conv import ConvGeometry, KernelRun, out_range, planes_from_pitch, row_gather
from .gemm import MR, NR, offset_gemm, round_up


@njit(**SERIAL)
def phase_shape(OH, OW, KH, KW, sh, sw, dh, dw):
    """(Hq, Wq): the rows and columns of one phase plane."""
    return OH + (KH - 1) * dh // sh, OW + (KW - 1) * dw // sw


@njit(**SERIAL)
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


@njit(**SERIAL)
def phases_used(KH, KW, sh, sw, dh, dw):
    """used[a]: whether some tap reads phase a (with stride 2 and dilation 2, only a = 0)."""
    phase, _ = tap_layout(KH, KW, sh, sw, dh, dw, 0)
    used = np.zeros(sh * sw, np.bool_)
    for t in range(phase.size):
        used[phase[t]] = True
    return used


@njit(**SERIAL)
def tap_rows(C, KH, KW, sh, sw, dh, dw, Wq, S):
    """start(c, t) for the im2col rows (c, kh, kw), in w's order."""
    phase, shift = tap_layout(KH, KW, sh, sw, dh, dw, Wq)
    T = KH * KW
    starts = np.empty(C * T, np.int64)
    for c in range(C):
        for t in range(T):
            starts[c * T + t] = (c * sh * sw + phase[t]) * S + shift[t]
    return starts


@njit(**SERIAL)
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
                    # inline with indices from 0 (cheaper than a row_gather call per row)
                    dst = row[r_lo:r_hi]
                    src = xn[c, q * sh + ah - ph, r_lo * sw + aw - pw:]
                    for j in range(r_hi - r_lo):
                        dst[j] = src[j * sw]
    planes[C * sh * sw * S:] = 0


@njit_with_serial(**PARALLEL)
def conv2d_forward_gemm(x, w, b, sh, sw, ph, pw, dh, dw, groups, OH, OW, slots, activation):
    """As ``conv2d_forward_direct``: yq = w[group] @ (offset matrix of the planes), then
    y[n, f, oh, ow] = activation(yq[f, oh*Wq + ow] + b[f]). Parallel over images."""
    N, C, H, W = x.shape
    F, Cg, KH, KW = w.shape
    Fg = F // groups
    Kg = Cg * KH * KW
    Hq, Wq = phase_shape(OH, OW, KH, KW, sh, sw, dh, dw)
    L = round_up((OH - 1) * Wq + OW, NR)
    starts = tap_rows(C, KH, KW, sh, sw, dh, dw, Wq, Hq * Wq)
    used = phases_used(KH, KW, sh, sw, dh, dw)
    Fp = round_up(Fg, MR)
    w_flat = group_filters(w, groups, Fp)
    w_rows = strided_rows(Fp, Kg)
    planes = np.empty((slots, C * sh * sw * Hq * Wq + NR), x.dtype)
    yq = np.empty((slots, Fp, L), x.dtype)
    y = np.empty((N, F, OH, OW), x.dtype)
    for s in prange(slots):
        for n in range(s, N, slots):  # slot s takes images s, s + slots, ...
            phase_planes(x[n], planes[s], sh, sw, ph, pw, Hq, Wq, used)
            for gi in range(groups):
                offset_gemm(w_flat[gi], w_rows, planes[s], starts[gi * Kg: (gi + 1) * Kg],
                            Kg, yq[s])
                planes_from_pitch(yq[s], Fg, Wq, b, gi * Fg, y[n], activation)
    return y


# Setup helpers: serial, so that the parallel kernels calling them open one parallel
# region (a NumPy fill or array expression in a parallel=True function is a region).
@njit(**SERIAL)
def strided_rows(count, pitch):
    """rows[i] = i * pitch: the row starts of a row-major matrix for offset_gemm."""
    rows = np.empty(count, np.int64)
    for i in range(count):
        rows[i] = i * pitch
    return rows


@njit(**SERIAL)
def group_filters(w, groups, Fp):
    """w per group as [groups, Fp * Kg]: row fl of group gi is w[gi*Fg + fl] flattened,
    rows fl >= Fg zero (padding to whole micro-tiles)."""
    F = w.shape[0]
    Fg = F // groups
    Kg = w.size // F
    w2 = w.reshape(F, Kg)
    wp = np.zeros((groups, Fp * Kg), w.dtype)
    for gi in range(groups):
        for fl in range(Fg):
            copy_into(wp[gi, fl * Kg: (fl + 1) * Kg], w2[gi * Fg + fl])
    return wp


@njit(**SERIAL)
def zeros2(rows, cols, like):
    """np.zeros((rows, cols), like.dtype), made in a serial function."""
    return np.zeros((rows, cols), like.dtype)


@njit(**SERIAL)
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


@njit_with_serial(**PARALLEL)
def conv2d_input_grad_gemm(g, w, dx, sh, sw, ph, pw, dh, dw, groups, slots):
    """As ``conv2d_input_grad_direct``: per image, group and phase a,
    dxq[cl, m] = sum_{fl, t of phase a} w[f, cl, t] * G[f, m - shift_t], then the plane
    positions inside the input are copied to dx (the rest of dx is zero). Parallel over
    images (each owns dx[n])."""
    N, F, OH, OW = g.shape
    _, Cg, KH, KW = w.shape
    _, C, H, W = dx.shape
    Fg = F // groups
    phases = sh * sw
    Hq, Wq = phase_shape(OH, OW, KH, KW, sh, sw, dh, dw)
    phase, shift = tap_layout(KH, KW, sh, sw, dh, dw, Wq)
    order, ptr = taps_by_phase(phase, phases)
    margin = shift.max()
    Sp = round_up(Hq * Wq, NR) + NR
    R = margin + Sp  # G[f] lives at gbuf[f*R + margin + j], zero elsewhere
    Cp = round_up(Cg, MR)
    wa, b_rows = phase_weights(w, groups, order, ptr, shift, Cp, R, margin)
    gbuf = zeros2(slots, F * R, g)
    for s in prange(slots):
        for n in range(s, N, slots):  # slot s takes images s, s + slots, ...
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


@njit(**SERIAL)
def phase_weights(w, groups, order, ptr, shift, Cp, R, margin):
    """Per group, per phase a, the matrix A[cl, fl*Ta + i] = w[f, cl, order[ptr[a] + i]]
    (Cp x Fg*Ta, zero rows past Cg), stored flat one phase after the other (``wa``), and
    b_rows: the G row f*R + margin - shift[t] of each column (fl, i)."""
    F, Cg, KH, KW = w.shape
    Fg = F // groups
    T = KH * KW
    phases = ptr.size - 1
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
    return wa, b_rows


@njit(**SERIAL)
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


@njit_with_serial(**PARALLEL)
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
    x_rows = group_rows(starts, groups, Kp)
    g_rows = strided_rows(L, Fp)
    planes = np.empty((slots, C * sh * sw * Hq * Wq + NR), x.dtype)
    gq = zeros2(slots, L * Fp, x)  # gq[j*Fp + fl]: zero in scratch columns
    parts = np.empty((N, groups, Kp, Fp), x.dtype)
    for s in prange(slots):
        for n in range(s, N, slots):  # slot s takes images s, s + slots, ...
            phase_planes(x[n], planes[s], sh, sw, ph, pw, Hq, Wq, used)
            for gi in range(groups):
                for oh in range(OH):  # row by row: the block of gq written stays in L1
                    for fl in range(Fg):
                        src = g[n, gi * Fg + fl, oh]
                        for ow in range(OW):
                            gq[s, (oh * Wq + ow) * Fp + fl] = src[ow]
                offset_gemm(planes[s], x_rows[gi], gq[s], g_rows, L, parts[n, gi])
    return sum_image_parts(parts, Kg, Fg).reshape(F, Cg, KH, KW)


@njit(**SERIAL)
def group_rows(starts, groups, Kp):
    """x_rows[gi, k] = starts[gi*Kg + k] for k < Kg; rows past Kg read plane 0 (their
    results are discarded)."""
    Kg = starts.size // groups
    rows = np.zeros((groups, Kp), np.int64)
    for gi in range(groups):
        for k in range(Kg):
            rows[gi, k] = starts[gi * Kg + k]
    return rows


@njit(**SERIAL)
def sum_image_parts(parts, Kg, Fg):
    """dw3[gi, fl, k] = sum_n parts[n, gi, k, fl], n ascending (zero for an empty batch)."""
    N, groups, Kp, Fp = parts.shape
    total = np.zeros((groups, Kp, Fp), parts.dtype)
    for n in range(N):
        for gi in range(groups):
            for k in range(Kg):
                dst = total[gi, k]
                src = parts[n, gi, k]
                for fl in range(Fg):
                    dst[fl] += src[fl]
    dw3 = np.empty((groups, Fg, Kg), parts.dtype)
    for gi in range(groups):
        for k in range(Kg):
            for fl in range(Fg):
                dw3[gi, fl, k] = total[gi, k, fl]
    return dw3


# -- the family's entry points (ops/conv.py; kernels/conv.py: ConvGeometry, KernelRun) -----
def forward(x: np.ndarray, w: np.ndarray, b: np.ndarray, geometry: ConvGeometry,
            run: KernelRun, activation: int) -> np.ndarray:
    return run.form_of(conv2d_forward_gemm)(x, w, b, *geometry.scalars, *geometry.out_hw,
                                            run.slots, activation)


def input_grad(g: np.ndarray, w: np.ndarray, dx: np.ndarray, geometry: ConvGeometry,
               run: KernelRun) -> np.ndarray:
    return run.form_of(conv2d_input_grad_gemm)(g, w, dx, *geometry.scalars, run.slots)


def weight_grad(x: np.ndarray, g: np.ndarray, geometry: ConvGeometry,
                run: KernelRun) -> np.ndarray:
    return run.form_of(conv2d_weight_grad_gemm)(x, g, *geometry.kernel_hw, *geometry.scalars,
                                                run.slots)
