"""Convolution on small maps as GEMMs over blocks of images (see kernels/conv.py for the
notation, docs/derivations.md#convolution-adjoints for the adjoints).

On a small output map (M = OH*OW of a few dozen positions) a product per image has too
few columns to fill the NR-wide panels of kernels/gemm.py. Here the columns run over a
block of B images at once, j = b*M + oh*OW + ow for b < B. Per block and group, the
planes are zero-padded (xp, pad_block) and the im2col matrix is copied out,

    cols[k, j] = xp[b, cl, oh*sh + kh*dh, ow*sw + kw*dw]
               = x[n0 + b, c, oh*sh + kh*dh - ph, ow*sw + kw*dw - pw]   (0 outside x)

with k = (cl*KH + kh)*KW + kw (w's order) and c = gi*Cg + cl. Then (each product one
``kernels/matmul.py: matrix_product`` in the block's thread)

    forward      y[n0 + b, f, oh, ow] = b[f] + sum_k w[f, k] cols[k, j]
    input grad   dcols[k, j] = sum_fl w[f, k] gb[fl, j], each added back at the padded
                 position cols[k, j] was read from (col2im); dx is the interior
    weight grad  part[blk][fl, k] = sum_j gb[fl, j] cols[k, j]; dw = the parts summed in
                 block order

with gb[fl, j] = g[n0 + b, gi*Fg + fl, oh, ow]. The block size B comes from the shapes
alone (ops/conv_plan.py), so every sum has the same order at any thread count. Slot s
(one per thread, with private buffers) takes blocks s, s + slots, ...: in one parallel
region, or in the calling thread when the plan gives one slot to a small call. One
compiled form serves both, so a model whose small and large layers take this path
compiles each kernel once.
"""

import numpy as np
from numba import njit, prange, types

from ..runtime.jit import PARALLEL, SERIAL, compiled_once, plain
from .basics import dot
from .conv import ConvGeometry, KernelRun, activate_in_place
from .conv_gemm import group_filters, zeros2
from .matmul import matrix_product


@njit(**SERIAL)
def padded_extent(OH, OW, KH, KW, sh, sw, dh, dw):
    """(Hp, Wp): the rows and columns of the zero-padded input that some tap reads."""
    return (OH - 1) * sh + (KH - 1) * dh + 1, (OW - 1) * sw + (KW - 1) * dw + 1


@njit(**SERIAL)
def pad_block(x, n0, nb, c0, Cg, ph, pw, Hp, Wp, xp):
    """xp[((b*Cg + cl)*Hp + i)*Wp + j] = x[n0 + b, c0 + cl, i - ph, j - pw], zero outside
    x: the block's planes of one group, zero-padded (ph, pw >= 0). Flat offsets into x:
    a view of each plane passed to a call costs two atomic reference-count updates on x,
    which every thread shares."""
    C, H, W = x.shape[1], x.shape[2], x.shape[3]
    xf = x.reshape(-1)
    xp[: nb * Cg * Hp * Wp] = 0
    rows = max(0, min(Hp - ph, H))
    cols = np.uint64(max(0, min(Wp - pw, W)))
    for b in range(nb):
        for cl in range(Cg):
            # unsigned offsets, as in gather_cols
            d0 = np.uint64(((b * Cg + cl) * Hp + ph) * Wp + pw)
            s0 = np.uint64(((n0 + b) * C + c0 + cl) * H * W)
            for i in range(np.uint64(rows)):
                d = d0 + i * np.uint64(Wp)
                s = s0 + i * np.uint64(W)
                for j in range(cols):
                    xp[d + j] = xf[s + j]


# Output maps narrower than this many columns gather the im2col matrix through
# column_offsets (one loop over the block's columns per tap) rather than a loop per output
# row: with runs of 4 (4x4 maps) the serial forward and weight gradient took 1.2-1.5 times
# as long by rows; with runs of 8 the two were within 5% (the rows ahead in the forward).
# Their col2im is a gather too (each input position sums the taps that read it,
# gather_input_grad): on 4x4 maps it takes half the time of the row runs and
# unpadding, on 8x8 the row runs win (docs/benchmarks.md#conv-paths).
ROW_RUNS_MIN = 8


@njit(**SERIAL)
def column_offsets(nb, Cg, Hp, Wp, OH, OW, sh, sw):
    """at[b*M + oh*OW + ow] = (b*Cg*Hp + oh*sh)*Wp + ow*sw (M = OH*OW): where column j of
    the im2col matrix reads the block's padded planes (pad_block's layout, flat) for the
    first channel's first tap; tap k adds tap_offsets[k]."""
    M = OH * OW
    at = np.empty(nb * M, np.uint64)
    for b in range(nb):
        for oh in range(OH):
            for ow in range(OW):
                at[b * M + oh * OW + ow] = (b * Cg * Hp + oh * sh) * Wp + ow * sw
    return at


@njit(**SERIAL)
def tap_offsets(Cg, KH, KW, Hp, Wp, dh, dw):
    """taps[k] = (cl*Hp + kh*dh)*Wp + kw*dw for k = (cl*KH + kh)*KW + kw: where tap k
    reads the block's padded planes relative to column_offsets' ``at``."""
    taps = np.empty(Cg * KH * KW, np.uint64)
    for k in range(taps.size):
        cl, tap = divmod(k, KH * KW)
        kh, kw = divmod(tap, KW)
        taps[k] = (cl * Hp + kh * dh) * Wp + kw * dw
    return taps


@njit(**SERIAL)
def gather_cols(xp, nb, Cg, KH, KW, sh, sw, dh, dw, Hp, Wp, OH, OW, cols, k_step, j_step):
    """cols[k*k_step + (b*M + oh*OW + ow)*j_step] = xp[b, cl, oh*sh + kh*dh, ow*sw + kw*dw]
    (pad_block's layout, flat) for k = (cl*KH + kh)*KW + kw, cl < Cg, b < nb, M = OH*OW:
    the im2col matrix as [Kg, P] (k_step = P, j_step = 1) or as its transpose [P, Kg]
    (k_step = 1, j_step = Kg). [Kg, P]: every row of the map a run of OW copies without a
    branch, or below ROW_RUNS_MIN columns one run over the block's columns per tap. The
    transpose: one row of cols per column, each a contiguous write of Kg values, which
    measured faster than runs per tap (docs/benchmarks.md#conv-paths)."""
    # unsigned offsets: no fix-up for negative indices in either nest's copy loop
    ju = np.uint64(j_step)
    if k_step == 1 or OW < ROW_RUNS_MIN:
        taps = tap_offsets(Cg, KH, KW, Hp, Wp, dh, dw)
        at = column_offsets(nb, Cg, Hp, Wp, OH, OW, sh, sw)
        if k_step == 1:
            # each column's taps as one contiguous row of cols (a pass over k per tap
            # would store one value per cache line of cols), read from the block's padded
            # planes, which stay in L1
            for j in range(np.uint64(at.size)):
                d0 = j * ju
                s0 = at[j]  # a local: the stores to cols could alias at, as LLVM sees it
                for k in range(np.uint64(taps.size)):
                    cols[d0 + k] = xp[s0 + taps[k]]
        else:
            for k in range(taps.size):
                d0 = np.uint64(k * k_step)
                base = taps[k]
                for j in range(np.uint64(at.size)):
                    cols[d0 + j * ju] = xp[base + at[j]]
        return
    M = OH * OW
    OHu, OWu, swu = np.uint64(OH), np.uint64(OW), np.uint64(sw)
    row_step = np.uint64(sh * Wp)
    for cl in range(Cg):
        for kh in range(KH):
            for kw in range(KW):
                k = (cl * KH + kh) * KW + kw
                for b in range(nb):
                    d0 = np.uint64(k * k_step + b * M * j_step)
                    s0 = np.uint64(((b * Cg + cl) * Hp + kh * dh) * Wp + kw * dw)
                    for oh in range(OHu):
                        d = d0 + oh * OWu * ju
                        s = s0 + oh * row_step
                        for ow in range(OWu):
                            cols[d + ow * ju] = xp[s + ow * swu]


@njit(**SERIAL)
def scatter_cols(dcols, nb, Cg, KH, KW, sh, sw, dh, dw, Hp, Wp, OH, OW, dxp):
    """col2im, the adjoint of gather_cols: dxp (zeroed here) collects
    dxp[b, cl, oh*sh + kh*dh, ow*sw + kw*dw] += dcols[k, b*M + oh*OW + ow] (dcols is
    [Kg, P])."""
    M = OH * OW
    OHu, OWu, swu = np.uint64(OH), np.uint64(OW), np.uint64(sw)
    row_step = np.uint64(sh * Wp)
    dxp[:] = 0
    for cl in range(Cg):
        for kh in range(KH):
            for kw in range(KW):
                src = dcols[(cl * KH + kh) * KW + kw]
                for b in range(nb):
                    # unsigned offsets, as in gather_cols
                    d0 = np.uint64(((b * Cg + cl) * Hp + kh * dh) * Wp + kw * dw)
                    s0 = np.uint64(b * M)
                    for oh in range(OHu):
                        d = d0 + oh * row_step
                        s = s0 + oh * OWu
                        for ow in range(OWu):
                            dxp[d + ow * swu] += src[s + ow]


@njit(**SERIAL)
def unpad_block(dxp, dx, n0, nb, c0, Cg, ph, pw, Hp, Wp):
    """dx[n0 + b, c0 + cl, i, j] = dxp[b, cl, i + ph, j + pw], zero where that is outside
    the padded extent (inputs no tap reads); flat offsets into dx, as in pad_block."""
    C, H, W = dx.shape[1], dx.shape[2], dx.shape[3]
    df = dx.reshape(-1)
    rows = max(0, min(Hp - ph, H))
    cols = max(0, min(Wp - pw, W))
    cols_u = np.uint64(cols)
    for b in range(nb):
        for cl in range(Cg):
            # unsigned offsets, as in gather_cols
            d0 = np.uint64(((n0 + b) * C + c0 + cl) * H * W)
            s0 = np.uint64(((b * Cg + cl) * Hp + ph) * Wp + pw)
            if rows < H or cols < W:
                df[d0: d0 + np.uint64(H * W)] = 0
            for i in range(np.uint64(rows)):
                d = d0 + i * np.uint64(W)
                s = s0 + i * np.uint64(Wp)
                for j in range(cols_u):
                    df[d + j] = dxp[s + j]


@njit(**SERIAL)
def input_taps(H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, P):
    """(ptr, at): for input position i = ih*W + iw, at[ptr[i]: ptr[i + 1]] are the offsets
    (kh*KW + kw)*P + oh*OW + ow into one channel's rows of dcols [Kg, P] of the taps that
    read it (ih = oh*sh + kh*dh - ph, iw = ow*sw + kw*dw - pw), kh and kw ascending."""
    ptr = np.zeros(H * W + 1, np.int64)
    at = np.empty(H * W * KH * KW, np.uint64)
    e = 0
    for ih in range(H):
        for iw in range(W):
            for kh in range(KH):
                rows = ih + ph - kh * dh  # oh*sh
                if rows < 0 or rows % sh != 0 or rows // sh >= OH:
                    continue
                for kw in range(KW):
                    cols = iw + pw - kw * dw  # ow*sw
                    if cols < 0 or cols % sw != 0 or cols // sw >= OW:
                        continue
                    at[e] = (kh * KW + kw) * P + rows // sh * OW + cols // sw
                    e += 1
            ptr[ih * W + iw + 1] = e
    return ptr, at


@njit(**SERIAL)
def gather_input_grad(dcols, ptr, at, nb, Cg, taps, P, M, dx, n0, c0):
    """col2im as a gather, for maps narrower than ROW_RUNS_MIN columns (scatter_cols then
    adds runs too short to vectorise): dx[n0 + b, c0 + cl] at input position i is the sum
    of dcols[cl*taps*P + b*M + at[e]] over e in [ptr[i], ptr[i + 1]) (input_taps), taps in
    scatter_cols' order, so the same bits; zero where no tap reads it. dcols is flat
    [Kg*P], dx C-contiguous."""
    C = dx.shape[1]
    HW = dx.shape[2] * dx.shape[3]
    flat = dx.reshape(-1)
    zero = dcols.dtype.type(0)
    for b in range(nb):
        for cl in range(Cg):
            # unsigned offsets, as in gather_cols
            base = np.uint64(cl * taps * P + b * M)
            d0 = np.uint64(((n0 + b) * C + c0 + cl) * HW)
            for i in range(np.uint64(HW)):
                acc = zero
                for e in range(ptr[i], ptr[i + 1]):
                    acc += dcols[base + at[e]]
                flat[d0 + i] = acc


@njit(**SERIAL)
def gather_grad(g, n0, nb, f0, Fg, gb, f_step, j_step):
    """gb[fl*f_step + (b*M + m)*j_step] = g[n0 + b, f0 + fl] flattened at m (M = OH*OW):
    the output gradient of one group of the block as an [Fg, P] matrix (f_step = P,
    j_step = 1) or as its transpose [P, Fg] (f_step = 1, j_step = Fg)."""
    F = g.shape[1]
    M = g.shape[2] * g.shape[3]
    flat = g.reshape(-1)  # one view: a slice per plane costs more than a small plane's copy
    Mu, ju = np.uint64(M), np.uint64(j_step)
    for fl in range(Fg):
        for b in range(nb):
            # unsigned offsets, as in gather_cols
            s0 = np.uint64(((n0 + b) * F + f0 + fl) * M)
            d0 = np.uint64(fl * f_step + b * M * j_step)
            for m in range(Mu):
                gb[d0 + m * ju] = flat[s0 + m]


@njit(**SERIAL)
def store_outputs(out, y, bias, n0, nb, f0, Fg, activation):
    """y[n0 + b, f0 + fl] (flattened) = activation(out[fl, b*M: (b + 1)*M] + bias[f0 + fl])
    (``activate_in_place``)."""
    F = y.shape[1]
    M = y.shape[2] * y.shape[3]
    P = out.shape[1]
    src, dst = out.reshape(-1), y.reshape(-1)  # as in gather_grad
    Mu = np.uint64(M)
    for b in range(nb):
        for fl in range(Fg):
            # unsigned offsets, as in gather_cols
            s0 = np.uint64(fl * P + b * M)
            d0 = np.uint64(((n0 + b) * F + f0 + fl) * M)
            bf = bias[f0 + fl]
            for m in range(Mu):
                dst[d0 + m] = src[s0 + m] + bf
            activate_in_place(dst[d0:d0 + Mu], activation)


# The slot bodies are C functions (runtime/jit.py: compiled_once), each compiled once
# per dtype rather than again inside its kernel's parallel region and single-slot call.
def slot_signature(*arrays, scalars: int):
    """signature_of(dt) of a slot body: (s, slots, the arrays, ``scalars`` int64s) -> None,
    an array given by its rank (C-contiguous, of dt) or by its Numba type."""
    def signature_of(dt):
        i64 = types.int64
        return types.void(i64, i64, *(types.Array(dt, a, "C") if isinstance(a, int) else a
                                      for a in arrays), *([i64] * scalars))

    return signature_of


@njit(**SERIAL)
def block_layout(Cg, KH, KW, OH, OW, sh, sw, dh, dw, B):
    """(Kg, P, Hp, Wp): the taps per group, the columns of a full block of B images (a
    partial block's extra ones are discarded) and the padded planes' extent."""
    Hp, Wp = padded_extent(OH, OW, KH, KW, sh, sw, dh, dw)
    return Cg * KH * KW, B * OH * OW, Hp, Wp


@njit(**SERIAL)
def block_images(blk, B, N):
    """(n0, nb): the first image of block blk and its number of images."""
    n0 = blk * B
    return n0, min(B, N - n0)


@compiled_once(slot_signature(4, 3, 1, 4, 1, 2, 1, scalars=11), **SERIAL)
def forward_blocks(s, slots, x, w_flat, b, y, xp, cols, out, KH, KW, sh, sw, ph, pw, dh, dw,
                   B, keep, activation):
    """Blocks s, s + slots, ... of ``conv2d_forward_cols`` in slot s's buffers. The im2col
    matrix of block blk and group gi goes to cols[blk*groups + gi] if ``keep`` (the
    matrices kept for the weight gradient, a partial block's unused columns zeroed), else
    to the slot's cols[0]."""
    N, C = x.shape[:2]
    groups = w_flat.shape[0]
    Cg, Fg, OH, OW = C // groups, y.shape[1] // groups, y.shape[2], y.shape[3]
    Kg, P, Hp, Wp = block_layout(Cg, KH, KW, OH, OW, sh, sw, dh, dw, B)
    for blk in range(s, (N + B - 1) // B, slots):
        n0, nb = block_images(blk, B, N)
        for gi in range(groups):
            c = cols[blk * groups + gi if keep else 0]
            pad_block(x, n0, nb, gi * Cg, Cg, ph, pw, Hp, Wp, xp)
            gather_cols(xp, nb, Cg, KH, KW, sh, sw, dh, dw, Hp, Wp, OH, OW, c, P, plain(1))
            if keep and nb < B:
                zero_columns_from(c, Kg, P, nb * OH * OW)
            matrix_product(w_flat[gi], False, c, False, out, Fg, P, Kg)
            store_outputs(out.reshape(Fg, P), y, b, n0, nb, gi * Fg, Fg, activation)


@njit(**PARALLEL)
def conv2d_forward_cols(x, w, b, sh, sw, ph, pw, dh, dw, groups, OH, OW, B, slots, kept,
                        activation):
    """As ``conv2d_forward_direct``: per block of B images and group,
    out[fl, j] = sum_k w[f, k] cols[k, j] (kernels/matmul.py: matrix_product), then
    y = activation(out + b). The blocks are shared out over ``slots`` (one parallel region; one
    slot runs in the calling thread). ``kept``: [blocks * groups, Kg * P] to keep every
    block's im2col matrix in (for ``conv2d_weight_grad_cols``), or [0, 0] for none."""
    N, C, H, W = x.shape
    F, Cg, KH, KW = w.shape
    Fg = F // groups
    P = B * OH * OW  # columns of a full block (a partial block's extra ones: discarded)
    Hp, Wp = padded_extent(OH, OW, KH, KW, sh, sw, dh, dw)
    w_flat = group_filters(w, groups, Fg).reshape(groups, Fg, Cg * KH * KW)
    keep = kept.shape[0] > 0
    xp = np.empty((slots, B * Cg * Hp * Wp), x.dtype)
    cols = zeros2(slots, 0 if keep else Cg * KH * KW * P, x)
    out = np.empty((slots, Fg * P), x.dtype)
    y = np.empty((N, F, OH, OW), x.dtype)
    if slots == 1:
        forward_blocks(plain(0), slots, x, w_flat, b, y, xp[0], kept if keep else cols,
                       out[0], KH, KW, sh, sw, ph, pw, dh, dw, B, keep, activation)
        return y
    for s in prange(slots):
        # prange's index is unsigned: as an int64, one compile of forward_blocks serves both
        forward_blocks(np.int64(s), slots, x, w_flat, b, y, xp[s],
                       kept if keep else cols[s:s + 1], out[s], KH, KW, sh, sw, ph, pw, dh,
                       dw, B, keep, activation)
    return y


@compiled_once(slot_signature(4, 3, 4, 1, 1, 1, types.int64[::1], types.uint64[::1],
                               scalars=9), **SERIAL)
def input_grad_blocks(s, slots, g, w_flat, dx, gb, dcols, dxp, ptr, at, KH, KW, sh, sw, ph,
                      pw, dh, dw, B):
    """Blocks s, s + slots, ... of ``conv2d_input_grad_cols`` in slot s's buffers."""
    N, F, OH, OW = g.shape
    groups = w_flat.shape[0]
    Cg, Fg = dx.shape[1] // groups, F // groups
    Kg, P, Hp, Wp = block_layout(Cg, KH, KW, OH, OW, sh, sw, dh, dw, B)
    for blk in range(s, (N + B - 1) // B, slots):
        n0, nb = block_images(blk, B, N)
        for gi in range(groups):
            gather_grad(g, n0, nb, gi * Fg, Fg, gb, P, plain(1))
            matrix_product(w_flat[gi], True, gb, False, dcols, Kg, P, Fg)
            if OW < ROW_RUNS_MIN:
                gather_input_grad(dcols, ptr, at, nb, Cg, KH * KW, P, OH * OW, dx, n0,
                                  gi * Cg)
            else:
                scatter_cols(dcols.reshape(Kg, P), nb, Cg, KH, KW, sh, sw, dh, dw, Hp, Wp,
                             OH, OW, dxp[: nb * Cg * Hp * Wp])
                unpad_block(dxp, dx, n0, nb, gi * Cg, Cg, ph, pw, Hp, Wp)


@njit(**PARALLEL)
def conv2d_input_grad_cols(g, w, dx, sh, sw, ph, pw, dh, dw, groups, B, slots):
    """As ``conv2d_input_grad_direct``: per block and group,
    dcols[k, j] = sum_fl w[f, k] gb[fl, j] (w read transposed), then col2im into dx
    (each block owns its images' planes). Fills dx (from the caller) and returns it.
    Slots as in ``conv2d_forward_cols``."""
    N, F, OH, OW = g.shape
    _, Cg, KH, KW = w.shape
    Fg = F // groups
    Kg = Cg * KH * KW
    P = B * OH * OW  # columns of a full block (a partial block's extra ones: discarded)
    w_flat = group_filters(w, groups, Fg).reshape(groups, Fg, Kg)
    Hp, Wp = padded_extent(OH, OW, KH, KW, sh, sw, dh, dw)
    gb = zeros2(slots, Fg * P, g)
    dcols = np.empty((slots, Kg * P), g.dtype)
    if OW < ROW_RUNS_MIN:  # col2im as a gather: the taps of each input position
        ptr, at = input_taps(dx.shape[2], dx.shape[3], OH, OW, KH, KW, sh, sw, ph, pw, dh,
                             dw, P)
        dxp = np.empty((slots, 0), g.dtype)
    else:  # col2im as row runs added into padded planes
        ptr, at = np.zeros(1, np.int64), np.empty(0, np.uint64)
        dxp = np.empty((slots, B * Cg * Hp * Wp), g.dtype)
    if slots == 1:
        input_grad_blocks(plain(0), slots, g, w_flat, dx, gb[0], dcols[0], dxp[0], ptr, at,
                          KH, KW, sh, sw, ph, pw, dh, dw, B)
        return dx
    for s in prange(slots):
        input_grad_blocks(np.int64(s), slots, g, w_flat, dx, gb[s], dcols[s], dxp[s], ptr,
                          at, KH, KW, sh, sw, ph, pw, dh, dw, B)
    return dx


@njit(**SERIAL)
def zero_columns_from(a, rows, P, used):
    """Zero the columns ``used``..P-1 of a [rows, P] (flat)."""
    for r in range(rows):
        a[r * P + used: (r + 1) * P] = 0


@njit(**SERIAL)
def zero_block_tail(a, rows, P, b, cols, used):
    """Zero the columns ``used``..P-1 of a [rows, P] and the rows ``used``..P-1 of
    b [P, cols]: a partial block's product a @ b then sums only its own images."""
    zero_columns_from(a, rows, P, used)
    b[used * cols:] = 0


@njit(**SERIAL)
def sum_parts(parts):
    """total[i] = sum_n parts[n, i], n ascending."""
    total = np.zeros(parts.shape[1], parts.dtype)
    for n in range(parts.shape[0]):
        for i in range(parts.shape[1]):
            total[i] += parts[n, i]
    return total


# How the weight gradient computes each block's part (ops/conv_plan.py picks the form:
# COLS_DOTS_PART): as [Kg, Fg] = cols [Kg, P] @ gb [P, Fg] (TAPS_FIRST), as [Fg, Kg] =
# gb [Fg, P] @ cols [P, Kg] (FILTERS_FIRST), or as Fg*Kg dot products of rows of P
# (DOTS, laid out as FILTERS_FIRST), for parts too small to fill the register tiles.
TAPS_FIRST, FILTERS_FIRST, DOTS = 0, 1, 2


@njit(**SERIAL)
def filters_major(total, groups, Fg, Kg, form):
    """dw[gi, fl, k] from the summed parts: total[(gi*Fg + fl)*Kg + k], or
    total[(gi*Kg + k)*Fg + fl] for TAPS_FIRST."""
    if form != TAPS_FIRST:
        return total.reshape(groups, Fg, Kg)
    dw = np.empty((groups, Fg, Kg), total.dtype)
    for gi in range(groups):
        for fl in range(Fg):
            for k in range(Kg):
                dw[gi, fl, k] = total[(gi * Kg + k) * Fg + fl]
    return dw


@njit(**SERIAL)
def part_dots(gb, cols, part, Fg, Kg, P, used):
    """part[fl*Kg + k] = sum_{j < used} gb[fl*P + j] cols[k*P + j] (basics.dot)."""
    for fl in range(Fg):
        for k in range(Kg):
            part[fl * Kg + k] = dot(gb[fl * P:], cols[k * P:], used)


@compiled_once(slot_signature(4, 4, 2, 1, 2, 1, scalars=12), **SERIAL)
def weight_grad_blocks(s, slots, x, g, parts, xp, cols, gb, KH, KW, sh, sw, ph, pw, dh, dw,
                       groups, B, form, kept):
    """Blocks s, s + slots, ... of ``conv2d_weight_grad_cols`` in slot s's buffers, block
    blk's part into parts[blk]. cols: if ``kept``, the forward's im2col matrices (a row
    per block and group, [Kg, P]), else the slot's one row to gather them into."""
    N, C = x.shape[:2]
    _, F, OH, OW = g.shape
    Cg, Fg = C // groups, F // groups
    Kg, P, Hp, Wp = block_layout(Cg, KH, KW, OH, OW, sh, sw, dh, dw, B)
    # the layouts: cols [P, Kg] for FILTERS_FIRST, else [Kg, P]; gb [P, Fg] for TAPS_FIRST,
    # else [Fg, P]
    k_step, j_step = (1, Kg) if form == FILTERS_FIRST else (P, 1)
    f_step, i_step = (1, Fg) if form == TAPS_FIRST else (P, 1)
    M, Nc = (Kg, Fg) if form == TAPS_FIRST else (Fg, Kg)
    for blk in range(s, (N + B - 1) // B, slots):
        n0, nb = block_images(blk, B, N)
        used = nb * OH * OW
        for gi in range(groups):
            c = cols[blk * groups + gi if kept else 0]
            if not kept:
                pad_block(x, n0, nb, gi * Cg, Cg, ph, pw, Hp, Wp, xp)
                gather_cols(xp, nb, Cg, KH, KW, sh, sw, dh, dw, Hp, Wp, OH, OW, c, k_step,
                            j_step)
            gather_grad(g, n0, nb, gi * Fg, Fg, gb, f_step, i_step)
            part = parts[blk, gi * Fg * Kg: (gi + 1) * Fg * Kg]
            if form == DOTS:
                part_dots(gb, c, part, Fg, Kg, P, used)
                continue
            # [Fg, Kg] = gb [Fg, P] @ cols [P, Kg], or [Kg, Fg] = cols [Kg, P] @ gb [P, Fg]
            lhs, rhs = (c, gb) if form == TAPS_FIRST else (gb, c)
            if nb < B:
                zero_block_tail(lhs, M, P, rhs, Nc, used)
            matrix_product(lhs, False, rhs, False, part, M, Nc, P)


@njit(**PARALLEL)
def conv2d_weight_grad_cols(x, g, KH, KW, sh, sw, ph, pw, dh, dw, groups, B, slots, form,
                            kept):
    """As ``conv2d_weight_grad_direct``: per block and group, part[fl, k] =
    sum_j gb[fl, j] cols[k, j] (part[k, fl] for TAPS_FIRST; the same sums); dw sums the
    parts in block order. The GEMM forms gather their operands in the layout the product
    reads untransposed (kernels/matmul.py: matrix_product); ``kept``, the im2col matrices
    ``conv2d_forward_cols`` kept for x ([0, 0] if none; TAPS_FIRST and DOTS only), saves
    gathering them again. Slots as in ``conv2d_forward_cols``, each block writing its own
    part."""
    N, C, H, W = x.shape
    _, F, OH, OW = g.shape
    Cg = C // groups
    Fg = F // groups
    Kg = Cg * KH * KW
    P = B * OH * OW
    Hp, Wp = padded_extent(OH, OW, KH, KW, sh, sw, dh, dw)
    have = kept.shape[0] > 0  # then no padded planes and no gathered matrices of our own
    xp = np.empty((slots, 0 if have else B * Cg * Hp * Wp), x.dtype)
    cols = zeros2(slots, 0 if have else P * Kg, x)
    gb = zeros2(slots, Fg * P, x)
    parts = np.empty(((N + B - 1) // B, groups * Fg * Kg), x.dtype)
    if slots == 1:
        weight_grad_blocks(plain(0), slots, x, g, parts, xp[0], kept if have else cols,
                           gb[0], KH, KW, sh, sw, ph, pw, dh, dw, groups, B, form, have)
    else:
        for s in prange(slots):
            weight_grad_blocks(np.int64(s), slots, x, g, parts, xp[s],
                               kept if have else cols[s:s + 1], gb[s], KH, KW, sh, sw, ph,
                               pw, dh, dw, groups, B, form, have)
    return filters_major(sum_parts(parts), groups, Fg, Kg, form).reshape(F, Cg, KH, KW)


# -- the family's entry points (ops/conv.py; kernels/conv.py: ConvGeometry, KernelRun) -----
def _kept(run: KernelRun, like: np.ndarray) -> np.ndarray:
    """The kernels' ``kept`` argument: the run's im2col matrices, or [0, 0] for none."""
    return np.empty((0, 0), like.dtype) if run.kept is None else run.kept


def forward(x: np.ndarray, w: np.ndarray, b: np.ndarray, geometry: ConvGeometry,
            run: KernelRun, activation: int) -> np.ndarray:
    return conv2d_forward_cols(x, w, b, *geometry.scalars, *geometry.out_hw, run.block,
                               run.slots, _kept(run, x), activation)


def input_grad(g: np.ndarray, w: np.ndarray, dx: np.ndarray, geometry: ConvGeometry,
               run: KernelRun) -> np.ndarray:
    return conv2d_input_grad_cols(g, w, dx, *geometry.scalars, run.block, run.slots)


def weight_grad(x: np.ndarray, g: np.ndarray, geometry: ConvGeometry,
                run: KernelRun) -> np.ndarray:
    return conv2d_weight_grad_cols(x, g, *geometry.kernel_hw, *geometry.scalars, run.block,
                                   run.slots, run.part_form, _kept(run, x))
