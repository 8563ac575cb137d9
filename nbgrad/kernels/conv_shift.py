"""The input gradient of a stride-1 convolution whose output is as wide as its input, as
one product per image over column-shifted copies of g (see kernels/conv.py for the
notation, docs/derivations.md#convolution-adjoints for the adjoint).

With stride 1 and OW = W (2 pw = (KW-1) dw), input position (i, j) collects

    dx[n, c, i, j] = sum_{f, kh, kw} w[f, c, kh, kw] g[n, f, i + ph - kh dh, j + pw - kw dw]

(g zero outside its map). Per image, g is copied into KW planes per filter, each of
Hg = H + (KH-1) dh rows of W columns, shifted by rows and columns:

    G[kw, f, u, j] = g[n, f, u - T, j + pw - kw dw]   (zero outside g),  T = (KH-1) dh - ph.

Tap (f, kh, kw) of dx[n, c, i, j] is then G[kw, f, i + (KH-1-kh) dh, j], and since G's
rows are as wide as dx's, the taps of all H W input positions are one run of G, flat:

    dx[n, c, p] = sum_k A[c, k] G[rows[k] + p],     p = i W + j,
    A[c, (f KH + kh) KW + kw] = w[f, c, kh, kw],    rows[k] = ((kw F + f) Hg + (KH-1-kh) dh) W

an offset-matrix product (kernels/gemm.py: offset_gemm) of F KH KW terms per sum. The
'cols' input gradient (kernels/conv_cols.py) instead sums over the F filters only and
adds each of its KH KW products back into padded planes (col2im). Here the copy is KW
planes per filter, against KH KW im2col rows, and no addition is left after the product.

Needs ph <= (KH-1) dh (T >= 0: g's rows fit inside the planes) and pw < W (a column shift
of less than a row). The rows of G outside g are zeroed once per slot: the copies never
write them. Each image is one task of ``slots`` (private buffers), so no result depends
on the slots or the thread count. Exact for finite w, the products of the definition
plus zeros times w (ops/conv_plan.py sends a non-finite w to the direct kernel).
"""

import numpy as np
from numba import njit, prange, types

from ..runtime.jit import PARALLEL, SERIAL, compiled_once, plain
from .conv import ConvGeometry, KernelRun
from .conv_cols import slot_signature
from .conv_gemm import strided_rows
from .gemm import MR, NR, offset_gemm, round_up


@njit(**SERIAL)
def shift_weights(w, Cp):
    """A [Cp, F*KH*KW] flat: A[c, (f*KH + kh)*KW + kw] = w[f, c, kh, kw], rows c >= C zero
    (padding to whole micro-tiles)."""
    F, C, KH, KW = w.shape
    K = F * KH * KW
    a = np.zeros(Cp * K, w.dtype)
    for c in range(C):
        for f in range(F):
            for kh in range(KH):
                for kw in range(KW):
                    a[c * K + (f * KH + kh) * KW + kw] = w[f, c, kh, kw]
    return a


@njit(**SERIAL)
def shift_rows(F, KH, KW, dh, Hg, W):
    """rows[(f*KH + kh)*KW + kw] = ((kw*F + f)*Hg + (KH-1-kh)*dh)*W: where tap k's run of
    the planes starts."""
    rows = np.empty(F * KH * KW, np.int64)
    for f in range(F):
        for kh in range(KH):
            for kw in range(KW):
                rows[(f * KH + kh) * KW + kw] = ((kw * F + f) * Hg + (KH - 1 - kh) * dh) * W
    return rows


@njit(**SERIAL)
def shifted_planes(g, n, KW, pw, dw, T, Hg, G):
    """G[((kw*F + f)*Hg + u)*W + j] = g[n, f, u - T, j + pw - kw*dw] for the rows u in
    [T, T + OH), zero where the column j + pw - kw*dw is outside g; the other rows of G
    are left as they are. Each plane is one run of g shifted by pw - kw*dw elements, its
    columns that read across a row end then zeroed. Flat unsigned offsets, as in
    kernels/conv_cols.py: pad_block."""
    F, OH, W = g.shape[1], g.shape[2], g.shape[3]
    M = OH * W
    gf = g.reshape(-1)
    for kw in range(KW):
        s = pw - kw * dw  # column shift, |s| < W
        lo, hi = max(0, -s), min(M, M - s)  # positions whose source is inside g[n, f]
        edge_lo, edge_hi = (W - s, W) if s > 0 else (0, -s)  # columns that read outside
        for f in range(F):
            d0 = np.uint64(((kw * F + f) * Hg + T) * W)
            dst = d0 + np.uint64(lo)
            src = np.uint64((n * F + f) * M + lo + s)
            for q in range(np.uint64(hi - lo)):
                G[dst + q] = gf[src + q]
            for i in range(OH):
                row = d0 + np.uint64(i * W)
                for j in range(edge_lo, edge_hi):
                    G[row + np.uint64(j)] = 0


@compiled_once(slot_signature(4, 1, types.int64[::1], types.int64[::1], 4, 1, 2, scalars=5),
               **SERIAL)
def shift_images(s, slots, g, a, a_rows, b_rows, dx, G, out, KW, pw, dw, T, Hg):
    """Images s, s + slots, ... of ``conv2d_input_grad_shift`` in slot s's planes G and
    product out [Cp, >= H*W]."""
    N, C = dx.shape[:2]
    P = dx.shape[2] * dx.shape[3]
    G[:] = 0
    dxf = dx.reshape(-1)
    for n in range(s, N, slots):
        shifted_planes(g, n, KW, pw, dw, T, Hg, G)
        offset_gemm(a, a_rows, G, b_rows, b_rows.size, out)
        for c in range(C):
            d0 = np.uint64((n * C + c) * P)
            for p in range(np.uint64(P)):
                dxf[d0 + p] = out[c, p]


@njit(**PARALLEL)
def conv2d_input_grad_shift(g, w, dx, ph, pw, dh, dw, slots):
    """As ``conv2d_input_grad_direct`` for stride 1, one group and OW = W: per image,
    dx[n] = A @ (the offset matrix of g's shifted planes). Fills dx (from the caller) and
    returns it. The images are shared out over ``slots`` (one parallel region; one slot
    runs in the calling thread)."""
    F, KH, KW = g.shape[1], w.shape[2], w.shape[3]
    C, H, W = dx.shape[1], dx.shape[2], dx.shape[3]
    T = (KH - 1) * dh - ph
    Hg = H + (KH - 1) * dh
    Cp = round_up(C, MR)
    K = F * KH * KW
    a = shift_weights(w, Cp)
    a_rows = strided_rows(Cp, K)
    b_rows = shift_rows(F, KH, KW, dh, Hg, W)
    # NR more elements: the product's columns past H*W (up to a whole panel) read on
    G = np.empty((slots, KW * F * Hg * W + NR), g.dtype)
    out = np.empty((slots, Cp, round_up(H * W, NR)), g.dtype)
    if slots == 1:
        shift_images(plain(0), slots, g, a, a_rows, b_rows, dx, G[0], out[0], KW, pw, dw,
                     T, Hg)
        return dx
    for s in prange(slots):
        shift_images(np.int64(s), slots, g, a, a_rows, b_rows, dx, G[s], out[s], KW, pw,
                     dw, T, Hg)
    return dx


# -- the family's entry point (ops/conv.py; kernels/conv.py: ConvGeometry, KernelRun) ------
def input_grad(g: np.ndarray, w: np.ndarray, dx: np.ndarray, geometry: ConvGeometry,
               run: KernelRun) -> np.ndarray:
    return conv2d_input_grad_shift(g, w, dx, geometry.ph, geometry.pw, geometry.dh,
                                   geometry.dw, run.slots)
