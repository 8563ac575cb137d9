"""2-D convolution (NCHW, stride s, padding p, dilation d, groups): the index maps, the
direct loop nests, the bias gradient, and the row primitives the other forms share.

With x[N, C, H, W] and w[F, C/groups, KH, KW], group gi = f // (F/groups) reads the input
channels c = gi*Cg + cl, cl < Cg = C/groups, and

    y[n, f, oh, ow] = b[f] + sum_{cl, kh, kw} w[f, cl, kh, kw] * x[n, c, ih, iw],
    ih = oh*sh + kh*dh - ph,  iw = ow*sw + kw*dw - pw   (zero outside the input).

Gradients (g = dL/dy; derivations: docs/derivations.md#convolution-adjoints):

    db[f]             = sum_{n, oh, ow} g[n, f, oh, ow]
    dw[f, cl, kh, kw] = sum_{n, oh, ow} g[n, f, oh, ow] * x[n, c, ih, iw]
    dx[n, c, ih, iw]  = sum_{f in group, kh, kw, (oh, ow) with oh*sh + kh*dh - ph = ih, ...}
                        g[n, f, oh, ow] * w[f, cl, kh, kw]

Only the top/left padding (ph, pw) enters the index maps; the bottom/right padding is
implied by the output size (OH, OW), so asymmetric padding ('same' with an even kernel)
needs nothing extra. Input positions no output reads (trailing rows when the stride
does not divide the span) get a zero gradient.

Six implementations (ops/conv_plan.py picks one per role, and the serial or the
parallel form of it by its work; runtime/jit.py: njit_with_serial, PARALLEL_WORK_MIN;
the ``*_cols`` kernels have one form, run in one slot or several). Each family's module
has the same entry points, which ops/conv.py calls: ``forward(x, w, b, geometry, run,
activation)``,
``input_grad(g, w, dx, geometry, run)`` and ``weight_grad(x, g, geometry, run)`` (those
it has), with ``geometry`` a ``ConvGeometry`` and ``run`` a ``KernelRun``:
* ``*_direct`` (here): the loop nests above, parallel over independent outputs: the
  reference, and the path for strided convolutions with few channels per group.
* ``*_s1`` (kernels/conv_s1.py): stride 1 on zero-padded planes (long contiguous
  spans): depthwise and other small-group convolutions.
* ``*_gemm`` (kernels/conv_gemm.py): an implicit GEMM per image (kernels/gemm.py on
  offset rows into the input's phase planes, no im2col copy), parallel over images: the
  path once a group has many input channels and filters.
* ``*_cols`` (kernels/conv_cols.py): an explicit im2col GEMM over blocks of images, for
  the same convolutions on small output maps (a few dozen positions per image).
* ``conv2d_input_grad_shift`` (kernels/conv_shift.py): the input gradient alone, for
  layers of the two GEMM paths with stride 1 and an output as wide as the input: one
  offset-matrix product per image over column-shifted copies of g.
* the ``pointwise`` family (kernels/conv_pointwise.py): 1x1 kernels at stride 1 without
  padding, one matrix product per image on kernels/matmul.py (y = W x, dx = W^T g,
  dW = sum over images of g x^T).
The tests compare ``*_s1``, ``*_gemm``, ``*_cols`` and ``*_shift`` with ``*_direct``.
The fast forms multiply implicit zeros (padding, scratch columns, tile padding) by the
other operand, so they are exact only for finite operands (0 * inf = NaN); ``*_direct``
forms only the products of the definition. The plan (ops/conv_plan.py) sends a forward or
input gradient whose w holds an inf or NaN to ``*_direct``, and ops/conv.py recomputes a
weight gradient there when the fast form's result is not all finite (``all_finite``;
docs/derivations.md#non-finite-operands).

Each parallel kernel opens one parallel region per call: fills and reductions outside
its ``prange`` loop are serial helpers (an array expression or np.zeros in a
``parallel=True`` function would be a region of its own).

Race freedom: forward owns y[n, f] (gemm: y[n]); the input gradient owns dx[n, c] (gemm:
dx[n]) and collects every output that touches it; the weight gradient owns one dw[f, cl]
and sums the batch inside in a fixed order (gemm: one partial per image, summed in image
order; cols: one per block of images, summed in block order); the bias gradient owns
db[f]. So no result depends on the thread count.
"""

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from numba import njit, prange

from ..runtime.jit import PARALLEL, SERIAL, SERIAL_REASSOC, njit_with_serial
from .activation import NO_ACTIVATION, activate_tile
from .basics import vector_sum
from .gemm import data_pointer


class ConvGeometry(NamedTuple):
    """One convolution's scalars, as every kernel family's entry point takes them:
    stride, top/left padding, dilation, groups, kernel size and output size (the input
    size is that of x, or of the dx the caller passes)."""

    sh: int
    sw: int
    ph: int
    pw: int
    dh: int
    dw: int
    groups: int
    KH: int
    KW: int
    OH: int
    OW: int

    @property
    def scalars(self) -> tuple:
        """sh, sw, ph, pw, dh, dw, groups: the loop nests' scalar arguments."""
        return self[:7]

    @property
    def stride1_scalars(self) -> tuple:
        """ph, pw, dh, dw, groups: those of the stride-1 kernels (kernels/conv_s1.py)."""
        return self[2:7]

    @property
    def kernel_hw(self) -> tuple[int, int]:
        return self.KH, self.KW

    @property
    def out_hw(self) -> tuple[int, int]:
        return self.OH, self.OW


class KernelRun(NamedTuple):
    """How one kernel call runs: the parallel form or the serial one (``njit_with_serial``),
    the slots of scratch its tasks share out over, and for the 'cols' kernels the images
    per block, the weight gradient's form of the parts and the forward's kept im2col
    matrices (kernels/conv_cols.py; None for none)."""

    parallel: bool
    slots: int
    block: int = 1
    part_form: int = 0
    kept: np.ndarray | None = None

    def form_of(self, kernel: Callable) -> Callable:
        """``kernel`` (an ``njit_with_serial`` kernel) or its serial form."""
        return kernel if self.parallel else kernel.serial


@njit(**SERIAL)
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
@njit(**SERIAL)
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


@njit(**SERIAL)
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


@njit(**SERIAL)
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


@njit(**SERIAL)
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
@njit(**SERIAL)
def tap_spans(KH, KW, sh, sw, ph, pw, dh, dw, H, W, OH, OW):
    """Per tap t = kh*KW + kw: the outputs [oh_lo, oh_hi) x [ow_lo, ow_hi) whose tap lies
    inside the H x W input, and the offsets kh*dh - ph and kw*dw - pw of the input row
    oh*sh + kh*dh - ph and column ow*sw + kw*dw - pw it reads, as spans[t, 0:6]."""
    spans = np.empty((KH * KW, 6), np.int64)
    for kh in range(KH):
        oh_lo, oh_hi = out_range(kh * dh - ph, sh, H, OH)
        for kw in range(KW):
            ow_lo, ow_hi = out_range(kw * dw - pw, sw, W, OW)
            t = kh * KW + kw
            spans[t, 0], spans[t, 1], spans[t, 2], spans[t, 3] = oh_lo, oh_hi, ow_lo, ow_hi
            spans[t, 4], spans[t, 5] = kh * dh - ph, kw * dw - pw
    return spans


@njit(**SERIAL)
def activate_in_place(a, activation):
    """a = f(a) for a 1-D contiguous ``a`` and an activation code of kernels/activation.py
    (NO_ACTIVATION: a is left as it is): the layer's activation, applied to each output
    plane of a convolution as it is stored, by the activation kernels' own function."""
    if activation != NO_ACTIVATION:
        activate_tile(data_pointer(a), 0, a.size, 1, a.size, activation, a.dtype.type(1))


@njit_with_serial(**PARALLEL)
def conv2d_forward_direct(x, w, b, sh, sw, ph, pw, dh, dw, groups, OH, OW, activation):
    """y[N, F, OH, OW]; ``b`` has F entries (zeros for no bias); each plane then goes
    through ``activation`` (``activate_in_place``). Parallel over (n, f)."""
    N, C, H, W = x.shape
    F, Cg, KH, KW = w.shape
    Fg = F // groups
    spans = tap_spans(KH, KW, sh, sw, ph, pw, dh, dw, H, W, OH, OW)
    y = np.empty((N, F, OH, OW), x.dtype)
    for nf in prange(N * F):
        n = nf // F
        f = nf % F
        c0 = (f // Fg) * Cg
        out = y[n, f]
        out[:, :] = b[f]
        for cl in range(Cg):
            xc = x[n, c0 + cl]
            for t in range(KH * KW):
                wv = w[f, cl, t // KW, t % KW]
                for oh in range(spans[t, 0], spans[t, 1]):
                    # out[oh, ow] += wv * xc[oh*sh + kh*dh - ph, ow*sw + kw*dw - pw]
                    row_axpy(out[oh], wv, xc[oh * sh + spans[t, 4]], spans[t, 2], spans[t, 3],
                             sw, spans[t, 5])
        activate_in_place(out.reshape(-1), activation)
    return y


@njit_with_serial(**PARALLEL)
def conv2d_input_grad_direct(g, w, dx, sh, sw, ph, pw, dh, dw, groups):
    """Fill dx[N, C, H, W] (and return it) from g[N, F, OH, OW]. Parallel over (n, c):
    each iteration owns the plane dx[n, c] and adds in every output of its group that
    reads it. (dx comes from the caller: a NumPy-owned gradient is not copied again by
    the engine.)"""
    N, F, OH, OW = g.shape
    _, Cg, KH, KW = w.shape
    _, C, H, W = dx.shape
    Fg = F // groups
    spans = tap_spans(KH, KW, sh, sw, ph, pw, dh, dw, H, W, OH, OW)
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
            for t in range(KH * KW):
                wv = w[f, cl, t // KW, t % KW]
                for oh in range(spans[t, 0], spans[t, 1]):
                    # plane[oh*sh + kh*dh - ph, ow*sw + kw*dw - pw] += wv * gp[oh, ow]
                    row_scatter(plane[oh * sh + spans[t, 4]], wv, gp[oh], spans[t, 2],
                                spans[t, 3], sw, spans[t, 5])
    return dx


@njit_with_serial(**PARALLEL)
def conv2d_weight_grad_direct(x, g, KH, KW, sh, sw, ph, pw, dh, dw, groups):
    """dw[F, C/groups, KH, KW]. Parallel over (f, cl); the batch is summed inside, in order."""
    N, C, H, W = x.shape
    _, F, OH, OW = g.shape
    Cg, Fg = C // groups, F // groups
    spans = tap_spans(KH, KW, sh, sw, ph, pw, dh, dw, H, W, OH, OW)
    dwt = np.empty((F, Cg, KH, KW), x.dtype)
    for fc in prange(F * Cg):
        f = fc // Cg
        cl = fc % Cg
        c = (f // Fg) * Cg + cl
        # acc[t, ow]: partial sums along the output row, summed once at the end.
        acc = np.zeros((KH * KW, OW), x.dtype)
        for n in range(N):
            for t in range(KH * KW):
                for oh in range(spans[t, 0], spans[t, 1]):
                    # acc[t, ow] += g[n, f, oh, ow] * x[n, c, oh*sh + kh*dh - ph, ow*sw + ...]
                    row_fma(acc[t], g[n, f, oh], x[n, c, oh * sh + spans[t, 4]], spans[t, 2],
                            spans[t, 3], sw, spans[t, 5])
        for t in range(KH * KW):
            dwt[f, cl, t // KW, t % KW] = acc[t].sum()
    return dwt


@njit(**SERIAL)
def planes_from_pitch(yq, Fg, pitch, b, f0, y_n, activation):
    """y_n[f0 + fl, oh, ow] = yq[fl, oh*pitch + ow] + b[f0 + fl] for fl < Fg: a group's
    output planes from rows computed on a wider pitch (the columns past OW are
    scratch), each plane then through ``activation`` (``activate_in_place``)."""
    _, OH, OW = y_n.shape
    for fl in range(Fg):
        f = f0 + fl
        for oh in range(OH):
            src = yq[fl, oh * pitch: oh * pitch + OW]
            dst = y_n[f, oh]
            for ow in range(OW):
                dst[ow] = src[ow] + b[f]
        activate_in_place(y_n[f].reshape(-1), activation)


@njit(**SERIAL_REASSOC)
def plane_sum(plane):
    """Sum of a 2-D plane: each row summed (reassociated so that LLVM vectorises it, as in
    ``basics.vector_sum``), then the row sums in order."""
    total = plane.dtype.type(0)
    for i in range(plane.shape[0]):
        row = plane.dtype.type(0)
        for j in range(plane.shape[1]):
            row += plane[i, j]
        total += row
    return total


@njit(**SERIAL_REASSOC)
def all_finite(a):
    """Whether every element of the 1-D array a is finite: sum(a * 0) is 0 if so, NaN if
    not (inf * 0 and NaN * 0 are NaN); reassociated so that LLVM vectorises it."""
    zero = a.dtype.type(0)
    acc = zero
    for i in range(a.size):
        acc += a[i] * zero
    return acc == zero


@njit(**SERIAL)
def column_sums(a, start, step, rows, cols):
    """out[m] = sum over r < rows, in order, of a[start + r*step + m], for m < cols."""
    out = np.zeros(cols, a.dtype)
    u = np.uint64
    for r in range(u(rows)):
        row = u(start) + r * u(step)  # unsigned: no fix-up for negative indices
        for m in range(u(cols)):
            out[m] += a[row + m]
    return out


@njit_with_serial(**PARALLEL)
def conv2d_bias_grad(g):
    """db[f] = sum over the map positions m of sum_n g[n, f, m] (n in order, then m
    reassociated as in ``basics.vector_sum``), for C-contiguous g. Parallel over f."""
    N, F, OH, OW = g.shape
    M = OH * OW
    flat = g.reshape(-1)
    db = np.empty(F, g.dtype)
    for f in prange(F):
        db[f] = vector_sum(column_sums(flat, f * M, F * M, N, M))
    return db


@njit_with_serial(**PARALLEL)
def add_channel_bias(y, b, activation):
    """y[n, f] = activation(y[n, f] + b[f]) in place (``activate_in_place``). Parallel
    over (n, f)."""
    N, F, H, W = y.shape
    for nf in prange(N * F):
        plane = y[nf // F, nf % F]
        bias = b[nf % F]
        for i in range(H):
            for j in range(W):
                plane[i, j] += bias
        activate_in_place(plane.reshape(-1), activation)


# -- the direct family's entry points (ops/conv.py) -----------------------------------------
def forward(x: np.ndarray, w: np.ndarray, b: np.ndarray, geometry: ConvGeometry,
            run: KernelRun, activation: int) -> np.ndarray:
    return run.form_of(conv2d_forward_direct)(x, w, b, *geometry.scalars, *geometry.out_hw,
                                              activation)


def input_grad(g: np.ndarray, w: np.ndarray, dx: np.ndarray, geometry: ConvGeometry,
               run: KernelRun) -> np.ndarray:
    return run.form_of(conv2d_input_grad_direct)(g, w, dx, *geometry.scalars)


def weight_grad(x: np.ndarray, g: np.ndarray, geometry: ConvGeometry,
                run: KernelRun) -> np.ndarray:
    return run.form_of(conv2d_weight_grad_direct)(x, g, *geometry.kernel_hw,
                                                  *geometry.scalars)
