"""Spectral convolution kernels (the Fourier layer of FNO), forward and backward
(docs/derivations.md#spectral-convolution).

Every kernel works on a 2-D grid of H x W points; the 1-D op is the case H = 1. The
kept Fourier modes of a grid are ``nblk`` blocks of m1 x m2 coefficients of
rfft2(x) = fft over H of rfft over W:

    block 0: rows kx = 0 .. m1-1,       columns ky = 0 .. m2-1
    block 1: rows kx = H-m1 .. H-1,     columns ky = 0 .. m2-1   (2-D only)

(the 3-D kernels ``rfft3_modes``/``irfft3_modes``: four blocks m1 x m2 x m3 of rfftn over
a D x H x W grid, the corners of the two full axes as in the original FNO's weights1-4;
block blk starts at row 0 or D - m1 (blk % 2) and at row 0 or H - m2 (blk // 2)),
held as split real/imaginary arrays ``[S, nblk, m1, m2]`` (S = batch x channels; a mode
k = (r, c) of a block is flattened to r * m2 + c where the mixing needs a vector). The
op is

    X = R rfft2(x)                        (rfft_modes: R keeps the blocks)
    Y[b, o, k] = sum_i X[b, i, k] W[i, o, k]       (complex, per mode k)
    y = irfft2(P Y)                       (irfft_modes: P puts Y back among zeros)

and its adjoints (c_ky = 1 for ky = 0 and for ky = W/2 when W is even, else 2: the
bins that the half spectrum stands for twice):

    dx = irfft2(P mixT(R rfft2(g)))   with mixT(G)[b, i, k] = sum_o G[b, o, k] conj W[i, o, k]
    dW[i, o, k] = c_ky / (H W) * sum_b conj X[b, i, k] G[b, o, k],   G = R rfft2(g)

The transforms are DUCC0's (the library behind scipy.fft), called from Numba through
rocket-fft's low-level ``r2c``/``c2c``/``c2r``: each ``prange`` iteration transforms a
block of grids (how many, the grid's size fixes) with one DUCC thread, so the grouping
of the grids, and with it every bit, depends on the shape alone, never on the thread
count. The mixing is one small complex matrix product per mode. A batch of a few rows
(a GINO's one latent grid) mixes the modes where they lie: one prange iteration per
(batch, output channel) pair (forward, dx) or per (block, in, out) weight (dW),
vectorised along the modes, summing its channels or batch in a fixed order
(``mix_modes``, ``weight_grad_modes``). A larger batch runs a real product per mode on
the batched GEMM (kernels/matmul.py): the transforms write the kept modes as GEMM rows
[k, b, re | im of the channels] and read them back from such rows, each mode's weights
become the real block [[re, im], [-im, re]] (``weight_rows``), so Y's rows are X's rows
times the block, dx's rows G's rows times its transpose, and dW comes from X's rows
transposed times G's (``weight_grad_rows``).
"""

from __future__ import annotations

import numpy as np
import rocket_fft  # noqa: F401  (loads DUCC0 and the Numba overloads before any cache load)
from numba import njit, prange
from rocket_fft import c2c, c2r, r2c

from ..runtime.jit import PARALLEL, PARALLEL_FUSED, SERIAL, njit_with_serial
from .basics import copy_into

# The axes arguments of DUCC's transforms on a block of grids [s, H, W] (global arrays
# are frozen into the compiled kernels as constants).
_AXIS_H = np.array([1], np.int64)
_AXIS_W = np.array([2], np.int64)
# ... and on a block of 3-D grids [s, D, H, W]: the two full axes, the half axis
_AXES_DH = np.array([1, 2], np.int64)
_AXIS_W3 = np.array([3], np.int64)
# Grids per task of the transforms: one DUCC call transforms a block of grids at once (its
# plan is made once per call, and it runs several rows in SIMD lanes): at least
# SLICES grids, and small grids up to TASK_POINTS points, so that the plan and the call
# are paid over enough work. A function of the grid's size, so the grouping of the grids
# (hence every bit) depends on the shape alone.
SLICES = 8
TASK_POINTS = 8192


@njit(**SERIAL, inline="always")
def _grids_per_task(points):
    return max(SLICES, TASK_POINTS // points)


@njit_with_serial(**PARALLEL_FUSED)
def rfft_modes(x, m1, nblk, spec_like, out, row_of, at, im_at):
    """The kept modes of rfft2(x[s]): mode k = (blk m1 + r) m2 + c, the bin
    (row(blk, r), c) with c < m2, row(0, r) = r and row(1, r) = H - m1 + r, goes to
    out[row_of[k], at[s]] (real part) and out[row_of[k], at[s] + im_at] (imaginary part),
    or nowhere if row_of[k] < 0. x: real [S, H, W] (C-contiguous); out: [rows, L] (GEMM
    rows, or re and im stacks read transposed: ops/spectral.py); row_of: [nblk m1 m2];
    ``spec_like``: a complex array of x's precision (its dtype only)."""
    S, H, W = x.shape
    m2 = row_of.size // (nblk * m1)
    per = _grids_per_task(H * W)
    for t in prange((S + per - 1) // per):
        s0, s1 = t * per, min(S, (t + 1) * per)
        # rfft along W (every row), then a complex fft along H of the m2 kept columns only
        half = np.empty((s1 - s0, H, W // 2 + 1), spec_like.dtype)
        r2c(x[s0:s1], half, _AXIS_W, True, 1.0, 1)
        spec = np.empty((s1 - s0, H, m2), spec_like.dtype)
        if H > 1:
            c2c(half[:, :, :m2], spec, _AXIS_H, True, 1.0, 1)
        else:
            for i in range(s1 - s0):
                copy_into(spec[i, 0], half[i, 0, :m2])
        # the grids innermost: a mode's values of the block sit side by side in GEMM rows
        for blk in range(nblk):
            row0 = 0 if blk == 0 else H - m1
            for r in range(m1):
                for c in range(m2):
                    k = row_of[(blk * m1 + r) * m2 + c]
                    if k < 0:
                        continue
                    for s in range(s0, s1):
                        v = spec[s - s0, row0 + r, c]
                        out[k, at[s]] = v.real
                        out[k, at[s] + im_at] = v.imag


@njit_with_serial(**PARALLEL_FUSED)
def irfft_modes(y, row_of, at, im_at, nblk, m1, spec_like, out):
    """out[s] = irfft2(P y_s) on an H x W grid (H, W = out.shape[1:]), y_s's mode k =
    (blk m1 + r) m2 + c being y[row_of[k], at[s]] + i y[row_of[k], at[s] + im_at] (zero
    if row_of[k] < 0; as in rfft_modes), added at (row(blk, r), c) of a zero half
    spectrum [H, W//2 + 1].
    The imaginary parts of the columns c = 0 and c = W/2 (W even) are ignored, as by any
    c2r transform (numpy.fft.irfft2, torch.fft.irfft2)."""
    S, H, W = out.shape
    m2 = row_of.size // (nblk * m1)
    scale = 1.0 / (H * W)
    per = _grids_per_task(H * W)
    for t in prange((S + per - 1) // per):
        s0, s1 = t * per, min(S, (t + 1) * per)
        spec = np.zeros((s1 - s0, H, m2), spec_like.dtype)
        for blk in range(nblk):
            row0 = 0 if blk == 0 else H - m1
            for r in range(m1):
                for c in range(m2):
                    k = row_of[(blk * m1 + r) * m2 + c]
                    if k < 0:
                        continue
                    for s in range(s0, s1):
                        # += : blocks that overlap (SpectralConv's odd mode counts pad a
                        # block with zero weights) add, so P stays the adjoint of R
                        spec[s - s0, row0 + r, c] += y[k, at[s]] + 1j * y[k, at[s] + im_at]
        cols = spec  # H = 1: the fft along H is the identity
        if H > 1:
            cols = np.empty((s1 - s0, H, m2), spec_like.dtype)
            c2c(spec, cols, _AXIS_H, False, 1.0, 1)
        # c2r reads the m2 given columns and takes the rest of the W//2 + 1 as zeros
        c2r(cols, out[s0:s1], _AXIS_W, False, scale, 1)


@njit_with_serial(**PARALLEL_FUSED)
def mix_modes(a_re, a_im, w_re, w_im, adjoint, out_re, out_im):
    """Complex mode mixing. a: [B, Q, nblk, M]; w: [nblk, Cin, Cout, M]; out: [B, P, nblk, M].

    adjoint False (Q = Cin, P = Cout): out[b, p, blk, k] = sum_q a[b, q, blk, k] w[blk, q, p, k]
    adjoint True (Q = Cout, P = Cin):
        out[b, p, blk, k] = sum_q a[b, q, blk, k] conj w[blk, p, q, k]

    One prange iteration per (b, p); the channel sum runs in order q = 0 .. Q-1."""
    B, Q, nblk, M = a_re.shape
    P = out_re.shape[1]
    sign = -1.0 if adjoint else 1.0
    for bp in prange(B * P):
        b, p = bp // P, bp % P
        for blk in range(nblk):
            yr = out_re[b, p, blk]
            yi = out_im[b, p, blk]
            yr[:] = 0
            yi[:] = 0
            for q in range(Q):
                xr = a_re[b, q, blk]
                xi = a_im[b, q, blk]
                if adjoint:
                    wr = w_re[blk, p, q]
                    wi = w_im[blk, p, q]
                else:
                    wr = w_re[blk, q, p]
                    wi = w_im[blk, q, p]
                s = wr.dtype.type(sign)
                for k in range(M):
                    # (xr + i xi)(wr + i s wi)
                    yr[k] += xr[k] * wr[k] - s * (xi[k] * wi[k])
                    yi[k] += xi[k] * wr[k] + s * (xr[k] * wi[k])


@njit_with_serial(**PARALLEL_FUSED)
def weight_grad_modes(a_re, a_im, g_re, g_im, scale, out_re, out_im):
    """dW[blk, i, o, k] = scale[k] * sum_b conj a[b, i, blk, k] g[b, o, blk, k].
    a: [B, Cin, nblk, M]; g: [B, Cout, nblk, M]; out: [nblk, Cin, Cout, M]; scale[M]
    holds c_ky / (H W). One prange iteration per (blk, i, o); the batch sum runs in
    order b = 0 .. B-1."""
    B, Cin, nblk, M = a_re.shape
    Cout = g_re.shape[1]
    for t in prange(nblk * Cin * Cout):
        blk = t // (Cin * Cout)
        i = (t // Cout) % Cin
        o = t % Cout
        dr = out_re[blk, i, o]
        di = out_im[blk, i, o]
        dr[:] = 0
        di[:] = 0
        for b in range(B):
            xr = a_re[b, i, blk]
            xi = a_im[b, i, blk]
            gr = g_re[b, o, blk]
            gi = g_im[b, o, blk]
            for k in range(M):
                # (xr - i xi)(gr + i gi)
                dr[k] += xr[k] * gr[k] + xi[k] * gi[k]
                di[k] += xr[k] * gi[k] - xi[k] * gr[k]
        for k in range(M):
            dr[k] *= scale[k]
            di[k] *= scale[k]


@njit_with_serial(**PARALLEL)
def weight_rows(w_re, w_im, out):
    """The complex weights w [nblk, Cin, Cout, M] as one real block per mode, the GEMM
    operand of the mixing: out[blk M + m] = [[re, im], [-im, re]] of w[blk, :, :, m]
    ([2 Cin, 2 Cout]), so that [xr | xi] @ out[k] = [Re | Im] of x w at mode k. One
    prange iteration per (blk, input channel), writing each row of a block in order."""
    nblk, Cin, Cout, M = w_re.shape
    for t in prange(nblk * Cin):
        blk, i = t // Cin, t % Cin
        for m in range(M):
            k = blk * M + m
            for o in range(Cout):
                r = w_re[blk, i, o, m]
                v = w_im[blk, i, o, m]
                out[k, i, o] = r
                out[k, i, Cout + o] = v
                out[k, Cin + i, o] = -v
                out[k, Cin + i, Cout + o] = r


@njit_with_serial(**PARALLEL)
def weight_grad_rows(c, scale, out_re, out_im):
    """dW from the per-mode products c[k] = [xr | xi]^T [gr | gi] ([2 Cin, 2 Cout], summed
    over the batch): conj(x)^T g = (xr^T gr + xi^T gi) + i (xr^T gi - xi^T gr), so

        out_re[blk, i, o, m] = scale[m] (c[k, i, o] + c[k, Cin + i, Cout + o])
        out_im[blk, i, o, m] = scale[m] (c[k, i, Cout + o] - c[k, Cin + i, o])

    with k = blk M + m (the adjoint of weight_rows, scaled). out: [nblk, Cin, Cout, M]."""
    nblk, Cin, Cout, M = out_re.shape
    for t in prange(nblk * Cin):
        blk, i = t // Cin, t % Cin
        for m in range(M):
            k = blk * M + m
            for o in range(Cout):
                out_re[blk, i, o, m] = scale[m] * (c[k, i, o] + c[k, Cin + i, Cout + o])
                out_im[blk, i, o, m] = scale[m] * (c[k, i, Cout + o] - c[k, Cin + i, o])


@njit(**SERIAL, inline="always")
def _corner(blk, D, H, m1, m2):
    """First (d, h) index of corner block ``blk`` (0..3) of a D x H grid of modes: rows
    from the top (even blk) or bottom, columns from the left (blk < 2) or right."""
    return (0 if blk % 2 == 0 else D - m1), (0 if blk // 2 == 0 else H - m2)


@njit_with_serial(**PARALLEL_FUSED)
def rfft3_modes(x, m1, m2, spec_like, out, row_of, at, im_at):
    """The kept modes of rfftn(x[s]): mode k = ((blk m1 + r) m2 + q) m3 + c, the bin
    (d(blk, r), h(blk, q), c) with c < m3, d(blk, r) = r or D - m1 + r (blk % 2 = 0 or 1)
    and h(blk, q) = q or H - m2 + q (blk // 2 = 0 or 1), goes to out[row_of[k], at[s]]
    and out[row_of[k], at[s] + im_at] as in rfft_modes. x: real [S, D, H, W]
    (C-contiguous); out: [rows, L]; row_of: [4 m1 m2 m3]. Blocks may overlap (each reads
    its own copy)."""
    S, D, H, W = x.shape
    m3 = row_of.size // (4 * m1 * m2)
    per = _grids_per_task(D * H * W)
    for t in prange((S + per - 1) // per):
        s0, s1 = t * per, min(S, (t + 1) * per)
        # rfft along W, then the complex fft along D and H of the m3 kept columns only
        half = np.empty((s1 - s0, D, H, W // 2 + 1), spec_like.dtype)
        r2c(x[s0:s1], half, _AXIS_W3, True, 1.0, 1)
        spec = np.empty((s1 - s0, D, H, m3), spec_like.dtype)
        c2c(half[:, :, :, :m3], spec, _AXES_DH, True, 1.0, 1)
        for blk in range(4):
            d0, h0 = _corner(blk, D, H, m1, m2)
            for r in range(m1):
                for q in range(m2):
                    for c in range(m3):
                        k = row_of[((blk * m1 + r) * m2 + q) * m3 + c]
                        if k < 0:
                            continue
                        for s in range(s0, s1):
                            v = spec[s - s0, d0 + r, h0 + q, c]
                            out[k, at[s]] = v.real
                            out[k, at[s] + im_at] = v.imag


@njit_with_serial(**PARALLEL_FUSED)
def irfft3_modes(y, row_of, at, im_at, m1, m2, spec_like, out):
    """out[s] = irfftn(P y_s) on a D x H x W grid (out: [S, D, H, W]), y_s's mode k =
    ((blk m1 + r) m2 + q) m3 + c being y[row_of[k], at[s]] + i y[row_of[k], at[s] + im_at]
    (zero if row_of[k] < 0; as in rfft3_modes), added at (d(blk, r), h(blk, q), c) of a
    zero half spectrum [D, H, W//2 + 1] (overlapping blocks add: P is the adjoint of R).
    The imaginary parts of the columns c = 0 and c = W/2 (W even) are ignored, as by any
    c2r transform."""
    S, D, H, W = out.shape
    m3 = row_of.size // (4 * m1 * m2)
    scale = 1.0 / (D * H * W)
    per = _grids_per_task(D * H * W)
    for t in prange((S + per - 1) // per):
        s0, s1 = t * per, min(S, (t + 1) * per)
        spec = np.zeros((s1 - s0, D, H, m3), spec_like.dtype)
        for blk in range(4):
            d0, h0 = _corner(blk, D, H, m1, m2)
            for r in range(m1):
                for q in range(m2):
                    for c in range(m3):
                        k = row_of[((blk * m1 + r) * m2 + q) * m3 + c]
                        if k < 0:
                            continue
                        for s in range(s0, s1):
                            spec[s - s0, d0 + r, h0 + q, c] += (
                                y[k, at[s]] + 1j * y[k, at[s] + im_at])
        cols = np.empty((s1 - s0, D, H, m3), spec_like.dtype)
        c2c(spec, cols, _AXES_DH, False, 1.0, 1)
        # c2r reads the m3 given columns and takes the rest of the W//2 + 1 as zeros
        c2r(cols, out[s0:s1], _AXIS_W3, False, scale, 1)
