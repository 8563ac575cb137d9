"""Convolutions: conv2d, conv1d and conv_transpose2d (PyTorch semantics, NCHW / NCL).

All three run on the kernels of ``nbgrad.kernels.conv*``: a conv2d forward, its input
gradient (which is the transposed convolution) and its weight gradient
(docs/derivations.md#convolution-adjoints).
conv1d is conv2d with H = 1; conv_transpose2d is the input gradient of the conv2d whose
weight it shares, so its backward is that conv2d's forward and weight gradient.
Second derivatives: the weight gradient is an op too (conv2d_weight_grad), so every vjp
is written with conv2d, conv_transpose2d and conv2d_weight_grad, each differentiable again.
"""

from __future__ import annotations

import functools

import numpy as np

from ..function import Function, Sample, register
from ..kernels import conv, conv_cols, conv_gemm, conv_s1, conv_shift, gemm
from ..kernels.matmul import panel_cols, tiled_size
from ..runtime.jit import PARALLEL_WORK_MIN, for_work
from ..runtime.threads import get_num_threads
from ..tensor import Tensor, lift
from ._args import float_operands, int_tuple

IntPair = int | tuple[int, int]

# The implicit GEMM pays once a group's dot products are long enough (C/groups*KH*KW
# taps) and there are a few filters per group to share each column; otherwise (depthwise,
# tiny groups) the direct kernels are faster. With stride 1 the padded-plane span kernels
# read every tap as a contiguous run and stay ahead up to more filters and taps
# (docs/benchmarks.md#conv-paths).
GEMM_MIN_TAPS = 16
GEMM_MIN_FILTERS = 4
S1_GEMM_MIN_TAPS = 64
S1_GEMM_MIN_FILTERS = 16
# Output maps of at most COLS_MAX_MAP positions take the GEMM over blocks of images
# (kernels/conv_cols.py) instead of the per-image implicit GEMM, whose NR-wide panels
# such a map leaves mostly empty; a block holds about COLS_BLOCK output columns, a
# whole number of panels. Past about 10x10 maps the two paths are even
# (docs/benchmarks.md#conv-paths).
COLS_MAX_MAP = 100
COLS_BLOCK = 256
# The 'cols' kernels share their blocks out over the threads from this many multiply-adds
# (with one block, or below it, the calling thread runs them all): below about 2^18
# multiply-adds, waking the second thread costs more than it saves
# (docs/benchmarks.md#threads).
COLS_PARALLEL_MIN = 1 << 18
# Stride-1 layers of 16 filters or more on maps of up to COLS_S1_MAX_MAP positions take
# the 'cols' GEMM rather than the span kernels ('s1') whatever their taps: the GEMM is
# as fast or faster there except for one or two input channels at small batches, and a
# model's layers then share one kernel family instead of compiling two (a shorter cold
# first step; docs/benchmarks.md#conv-paths).
COLS_S1_MAX_MAP = 64
# A 'cols' forward whose weight gradient will be taken keeps its im2col matrices, up to
# this many bytes, so that the weight gradient reads them instead of padding and
# gathering x again (TAPS_FIRST and DOTS parts, which read them in the forward's [Kg, P]
# layout): docs/memory.md.
COLS_KEEP_MAX_BYTES = 16 << 20
# The input gradient of a stride-1, one-group layer whose output is as wide as its input
# takes one product per image over column-shifted copies of g (kernels/conv_shift.py)
# on maps of up to SHIFT_MAX_MAP positions, a whole number of NR-wide panels, where
# padding C to whole micro-tiles adds at most an eighth. It sums F KH KW terms per
# input element with no col2im scatter, and measured faster than the 'cols' and 'gemm'
# input gradients on every such shape (docs/benchmarks.md#conv-paths). Only for the
# dtypes in SHIFT_DTYPES: the product's register tile (4 x 64 sums) fits the vector
# registers in float32, not in float64, where it is slower.
SHIFT_MAX_MAP = 256
SHIFT_DTYPES = (np.float32,)


# -- argument handling --------------------------------------------------------------------
def _check_rank(op: str, name: str, t: Tensor, ranks: tuple[int, ...], layout: str) -> None:
    if t.ndim not in ranks:
        raise ValueError(f"{op}: {name} must be {layout}, got shape {t.shape}")


def _check_groups(op: str, groups, channels: dict[str, int], x_shape: tuple,
                  w_shape: tuple) -> int:
    """groups is a positive int dividing every count in ``channels`` (name -> count)."""
    if not isinstance(groups, int | np.integer) or isinstance(groups, bool) or groups < 1:
        raise ValueError(f"{op}: groups must be a positive int, got {groups!r}")
    for name, count in channels.items():
        if count % groups:
            raise ValueError(f"{op}: groups={groups} does not divide the {count} {name} "
                             f"(x {x_shape}, w {w_shape})")
    return int(groups)


def _check_sizes(op: str, x: Tensor, w: Tensor, spatial: int,
                 channels: dict[str, int]) -> None:
    """PyTorch's rules for empty tensors: x may have no batch (and conv2d/conv1d no input
    channels), but its ``spatial`` trailing axes, the kernel and the channel counts in
    ``channels`` (name -> count) must be non-zero."""
    if 0 in x.shape[-spatial:]:
        raise ValueError(f"{op}: x has an empty spatial axis; only the batch and the "
                         f"channels may be empty (x {x.shape}, w {w.shape})")
    if 0 in w.shape[2:]:
        raise ValueError(f"{op}: the kernel size must be positive (w {w.shape})")
    for name, count in channels.items():
        if count == 0:
            raise ValueError(f"{op}: w has no {name} (x {x.shape}, w {w.shape})")


def _check_bias(op: str, b: Tensor | None, channels: int) -> None:
    if b is not None and b.shape != (channels,):
        raise ValueError(f"{op}: b must have shape ({channels},) (one per output channel), "
                         f"got {b.shape}")


def _out_size(op: str, size: tuple[int, int], pad: tuple[int, int, int, int],
              kernel: tuple[int, int], stride: tuple[int, int],
              dilation: tuple[int, int]) -> tuple[int, int]:
    """(H + pad_top + pad_bottom - d(k-1) - 1) // s + 1 per axis; error if < 1."""
    padded = (size[0] + pad[0] + pad[1], size[1] + pad[2] + pad[3])
    extent = (dilation[0] * (kernel[0] - 1) + 1, dilation[1] * (kernel[1] - 1) + 1)
    if padded[0] < extent[0] or padded[1] < extent[1]:
        raise ValueError(f"{op}: the dilated kernel {extent} is larger than the padded "
                         f"input {padded} (input {size}, padding {pad})")
    return ((padded[0] - extent[0]) // stride[0] + 1, (padded[1] - extent[1]) // stride[1] + 1)


def _padding(op: str, padding, kernel: tuple[int, int], stride: tuple[int, int],
             dilation: tuple[int, int]) -> tuple[int, int, int, int]:
    """(top, bottom, left, right) from an int, a pair, 'valid' or 'same'."""
    if isinstance(padding, str):
        if padding == "valid":
            return (0, 0, 0, 0)
        if padding == "same":
            if stride != (1, 1):
                raise ValueError(f"{op}: padding='same' needs stride 1, got stride {stride}")
            total = (dilation[0] * (kernel[0] - 1), dilation[1] * (kernel[1] - 1))
            # PyTorch puts the odd extra row/column at the bottom/right.
            return (total[0] // 2, total[0] - total[0] // 2,
                    total[1] // 2, total[1] - total[1] // 2)
        raise ValueError(f"{op}: padding must be an int, a pair, 'valid' or 'same', "
                         f"got {padding!r}")
    ph, pw = int_tuple(op, "padding", padding, 2, 0)
    return (ph, ph, pw, pw)


def _conv2d_params(op: str, x_shape: tuple, w_shape: tuple, stride, padding, dilation,
                   groups) -> dict:
    """Validated, normalised keyword parameters of ``Conv2d.apply`` for 4-D w and a 3-D
    or 4-D x."""
    stride = int_tuple(op, "stride", stride, 2, 1)
    dilation = int_tuple(op, "dilation", dilation, 2, 1)
    C = x_shape[-3]
    F, Cg, KH, KW = w_shape
    groups = _check_groups(op, groups, {"input channels": C, "output channels": F},
                           x_shape, w_shape)
    if Cg * groups != C:
        raise ValueError(f"{op}: weight has {Cg} input channels per group but x has {C} "
                         f"channels (groups={groups}; x {x_shape}, w {w_shape})")
    pad = _padding(op, padding, (KH, KW), stride, dilation)
    _out_size(op, x_shape[-2:], pad, (KH, KW), stride, dilation)
    return dict(stride=stride, padding=pad, dilation=dilation, groups=groups)


def _contig(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a)


def _kernel_path(w_shape: tuple, geom: tuple, out_hw: tuple[int, int]) -> str:
    """'gemm' (implicit GEMM on phase planes) when a group's dot products are long and
    shared by a few filters, or 'cols' (GEMM over blocks of images) for those on small
    output maps; else 's1' (padded-plane spans) for stride 1, or 'direct' (the loop
    nests)."""
    F, Cg, KH, KW = w_shape
    taps, filters = Cg * KH * KW, F // geom[-1]
    positions = out_hw[0] * out_hw[1]
    big = "cols" if positions <= COLS_MAX_MAP else "gemm"
    if geom[:2] == (1, 1):
        if positions <= COLS_S1_MAX_MAP and filters >= S1_GEMM_MIN_FILTERS:
            return "cols"
        return big if taps >= S1_GEMM_MIN_TAPS and filters >= S1_GEMM_MIN_FILTERS else "s1"
    return big if taps >= GEMM_MIN_TAPS and filters >= GEMM_MIN_FILTERS else "direct"


def _finite(a: np.ndarray) -> bool:
    """Whether every element of ``a`` is finite (one vectorised pass, kernels/conv.py)."""
    return conv.all_finite(a.reshape(-1))


def _exact_path(path: str, w: np.ndarray) -> str:
    """``path``, or 'direct' if the weight ``w`` of a forward or input gradient holds an
    inf or a NaN. The fast paths multiply implicit zeros (padding, zero-stuffed rows,
    rows and columns that round a tile up) by w, and 0 * inf is NaN; the direct loop
    nests form only the products of the definition, so padding contributes exactly
    nothing (docs/derivations.md#non-finite-operands). Products of those zeros with
    non-finite x (forward) or g (input gradient) only reach outputs that are dropped.
    w is small, so the scan costs little; the weight gradient, whose zeros meet x and g,
    is checked on its (small) result instead (``conv2d_weight_grad``)."""
    return path if path == "direct" or _finite(w) else "direct"


# The kernels by path and role ('shift': the shifted-planes input gradient that
# conv2d_input_grad takes on the GEMM paths where it fits). Each but the 'cols' and
# 'shift' kernels has a serial form (runtime/jit.py: njit_with_serial), run below
# PARALLEL_WORK_MIN multiply-adds; those two run one slot in the calling thread below
# COLS_PARALLEL_MIN.
_KERNELS = {
    ("direct", "forward"): conv.conv2d_forward_direct,
    ("direct", "input_grad"): conv.conv2d_input_grad_direct,
    ("direct", "weight_grad"): conv.conv2d_weight_grad_direct,
    ("s1", "forward"): conv_s1.conv2d_forward_s1,
    ("s1", "input_grad"): conv_s1.conv2d_input_grad_s1,
    ("s1", "weight_grad"): conv_s1.conv2d_weight_grad_s1,
    ("s1", "backward"): conv_s1.conv2d_backward_s1,
    ("gemm", "forward"): conv_gemm.conv2d_forward_gemm,
    ("gemm", "input_grad"): conv_gemm.conv2d_input_grad_gemm,
    ("gemm", "weight_grad"): conv_gemm.conv2d_weight_grad_gemm,
    ("cols", "forward"): conv_cols.conv2d_forward_cols,
    ("cols", "input_grad"): conv_cols.conv2d_input_grad_cols,
    ("cols", "weight_grad"): conv_cols.conv2d_weight_grad_cols,
    ("shift", "input_grad"): conv_shift.conv2d_input_grad_shift,
}


def _macs(batch: int, w_shape: tuple, out_hw: tuple[int, int]) -> int:
    """Multiply-adds of the convolution (and of each of its gradients)."""
    F, Cg, KH, KW = w_shape
    return batch * F * out_hw[0] * out_hw[1] * Cg * KH * KW


def _kernel(path: str, role: str, work: int, units: int):
    """(kernel, slots): the parallel kernel or its serial form by ``work``, and the
    number of independent buffers the kernels with scratch use (one per thread over
    ``units`` images, blocks or tasks; 1 for the serial form)."""
    parallel = _KERNELS[path, role]
    if path in ("cols", "shift"):
        threads = get_num_threads() if work >= COLS_PARALLEL_MIN else 1
        return parallel, max(1, min(units, threads))
    kernel = for_work(parallel, work, PARALLEL_WORK_MIN)
    if kernel is not parallel:
        return kernel, 1
    return kernel, max(1, min(units, get_num_threads()))


def _block(batch: int, out_hw: tuple[int, int]) -> int:
    """Images per block of the 'cols' kernels: about COLS_BLOCK output columns (a
    function of the shapes only, so the weight gradient's sum order is fixed)."""
    return max(1, min(batch, COLS_BLOCK // (out_hw[0] * out_hw[1])))


# How the 'cols' weight gradient computes each block's part (kernels/conv_cols.py):
# * dot products (conv_cols.DOTS) for parts of fewer than COLS_DOTS_PART sums, where a
#   GEMM's per-block packing and tiles cost more than they save;
# * else the GEMM orientation that tiles to fewer elements (kernels/matmul.py:
#   tiled_size: the zero padding of partial tiles is wasted work), taps first on a tie;
# * but filters first on maps narrower than conv_cols.ROW_RUNS_MIN, where the taps-first
#   [Kg, P] gather has no row runs.
# The measurements behind each rule: docs/benchmarks.md#conv-weight-gradient.
COLS_DOTS_PART = 512


@functools.lru_cache(maxsize=1024)
def _weight_grad_form(w_shape: tuple, groups: int, dtype: np.dtype, out_w: int) -> int:
    """How the 'cols' weight gradient computes each part (kernels/conv_cols.py) for
    output maps ``out_w`` wide: see COLS_DOTS_PART. Kept per shapes: it is asked twice
    per layer and step, and working it out costs more than a cache lookup."""
    F, Cg, KH, KW = w_shape
    Fg, Kg = F // groups, Cg * KH * KW
    if Fg * Kg < COLS_DOTS_PART:
        return conv_cols.DOTS
    nr = panel_cols(np.empty(0, dtype))
    if out_w < conv_cols.ROW_RUNS_MIN or tiled_size(Fg, Kg, nr) < tiled_size(Kg, Fg, nr):
        return conv_cols.FILTERS_FIRST
    return conv_cols.TAPS_FIRST


def _geometry(stride, pad, dilation, groups) -> tuple:
    """The scalar kernel arguments sh, sw, ph, pw, dh, dw, groups (top/left padding)."""
    return (stride[0], stride[1], pad[0], pad[2], dilation[0], dilation[1], groups)


def _no_cols(x: np.ndarray) -> np.ndarray:
    """The 'cols' kernels' argument for "no kept im2col matrices"."""
    return np.empty((0, 0), x.dtype)


def cols_to_keep(x: np.ndarray, w: np.ndarray, geom: tuple,
                 out_hw: tuple[int, int]) -> np.ndarray | None:
    """A buffer for the im2col matrices of the 'cols' forward of x and w, for the weight
    gradient to reuse (``conv2d_weight_grad``'s ``kept``): [blocks * groups, Kg * P], or
    None where the forward does not take the 'cols' kernels, the weight gradient would
    not read them in their layout, or they exceed COLS_KEEP_MAX_BYTES."""
    _, Cg, KH, KW = w.shape
    groups = geom[-1]
    if _exact_path(_kernel_path(w.shape, geom, out_hw), w) != "cols":
        return None
    if _weight_grad_form(w.shape, groups, x.dtype, out_hw[1]) == conv_cols.FILTERS_FIRST:
        return None
    N = x.shape[0]
    B = _block(N, out_hw)
    shape = (-(-N // B) * groups, Cg * KH * KW * B * out_hw[0] * out_hw[1])
    if shape[0] * shape[1] * x.itemsize > COLS_KEEP_MAX_BYTES:
        return None
    return np.empty(shape, x.dtype)


def conv2d_forward(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, geom: tuple,
                   out_hw: tuple[int, int], kept: np.ndarray | None = None) -> np.ndarray:
    """y[N, F, OH, OW] for contiguous 4-D x and w (b None for no bias). ``kept``: a
    ``cols_to_keep`` buffer that the 'cols' kernels fill with their im2col matrices (one
    exists only where they run, so its path is not worked out again)."""
    bias = np.zeros(w.shape[0], x.dtype) if b is None else _contig(b)
    N = x.shape[0]
    path = "cols" if kept is not None else _exact_path(_kernel_path(w.shape, geom, out_hw), w)
    work = _macs(N, w.shape, out_hw)
    if path == "cols":
        B = _block(N, out_hw)
        kernel, slots = _kernel(path, "forward", work, -(-N // B))
        return kernel(x, w, bias, *geom, *out_hw, B, slots,
                      _no_cols(x) if kept is None else kept)
    kernel, slots = _kernel(path, "forward", work, N * geom[-1] if path == "s1" else N)
    if path == "s1":
        return kernel(x, w, bias, *geom[2:], *out_hw, slots)
    if path == "gemm":
        return kernel(x, w, bias, *geom, *out_hw, slots)
    return kernel(x, w, bias, *geom, *out_hw)


def _shifted_input_grad(w_shape: tuple, geom: tuple, in_hw: tuple[int, int],
                        dtype: np.dtype) -> bool:
    """Whether the input gradient of a layer on the GEMM paths ('cols', 'gemm') takes
    kernels/conv_shift.py instead (SHIFT_MAX_MAP)."""
    _, C, KH, KW = w_shape
    sh, sw, ph, pw, dh, dw, groups = geom
    positions = in_hw[0] * in_hw[1]
    return (dtype in SHIFT_DTYPES and groups == 1 and (sh, sw) == (1, 1)
            and 2 * pw == (KW - 1) * dw and pw < in_hw[1] and ph <= (KH - 1) * dh
            and positions <= SHIFT_MAX_MAP and positions % gemm.NR == 0
            and -(-C // gemm.MR) * gemm.MR * 8 <= C * 9)


def conv2d_input_grad(g: np.ndarray, w: np.ndarray, in_hw: tuple[int, int],
                      geom: tuple) -> np.ndarray:
    """dx[N, C, H, W] (the transposed convolution of g with w)."""
    N, out_hw = g.shape[0], g.shape[2:]
    dx = np.empty((N, w.shape[1] * geom[-1], *in_hw), g.dtype)  # every kernel fills it
    path = _exact_path(_kernel_path(w.shape, geom, out_hw), w)
    work = _macs(N, w.shape, out_hw)
    if path in ("cols", "gemm") and _shifted_input_grad(w.shape, geom, in_hw, g.dtype):
        # a slot per COLS_BLOCK positions of dx at most, as the 'cols' kernels' blocks
        kernel, slots = _kernel("shift", "input_grad", work,
                                N * in_hw[0] * in_hw[1] // COLS_BLOCK)
        return kernel(g, w, dx, *geom[2:6], slots)
    if path == "cols":
        B = _block(N, out_hw)
        kernel, slots = _kernel(path, "input_grad", work, -(-N // B))
        return kernel(g, w, dx, *geom, B, slots)
    kernel, slots = _kernel(path, "input_grad", work, N * geom[-1] if path == "s1" else N)
    if path == "s1":
        return kernel(g, w, dx, *geom[2:], slots)
    if path == "gemm":
        return kernel(g, w, dx, *geom, slots)
    return kernel(g, w, dx, *geom)


def conv2d_weight_grad(x: np.ndarray, g: np.ndarray, w_shape: tuple, geom: tuple,
                       kept: np.ndarray | None = None) -> np.ndarray:
    """dw[F, C/groups, KH, KW] = correlation of x with g, the batch summed. ``kept``: the
    im2col matrices of x that the 'cols' forward kept (``cols_to_keep``), or None.

    A fast path adds products of its zeros (padding, scratch columns, tile padding) with
    x and g to the exact sum: +-0 for finite values, NaN for an inf or NaN. So where its
    dw is all finite it is the exact sum (to rounding); otherwise the direct loop nests
    recompute it (docs/derivations.md#non-finite-operands). Checking dw, the size of w,
    replaces a scan of x and g on every call."""
    path = _kernel_path(w_shape, geom, g.shape[2:])
    dw = _weight_grad_on(path, x, g, w_shape, geom, kept)
    if path != "direct" and not _finite(dw):
        dw = _weight_grad_on("direct", x, g, w_shape, geom)
    return dw


def _weight_grad_on(path: str, x: np.ndarray, g: np.ndarray, w_shape: tuple,
                    geom: tuple, kept: np.ndarray | None = None) -> np.ndarray:
    """conv2d_weight_grad by the kernels of ``path``."""
    N, out_hw = x.shape[0], g.shape[2:]
    work = _macs(N, w_shape, out_hw)
    if path == "cols":
        B = _block(N, out_hw)
        kernel, slots = _kernel(path, "weight_grad", work, -(-N // B))
        form = _weight_grad_form(w_shape, geom[-1], x.dtype, out_hw[1])
        return kernel(x, g, *w_shape[2:], *geom, B, slots, form,
                      _no_cols(x) if kept is None else kept)
    units = w_shape[0] * w_shape[1] if path == "s1" else N  # s1: (f, cl) tasks
    kernel, slots = _kernel(path, "weight_grad", work, units)
    if path == "s1":
        return kernel(x, g, *w_shape[2:], *geom[2:], slots)
    if path == "gemm":
        return kernel(x, g, *w_shape[2:], *geom, slots)
    return kernel(x, g, *w_shape[2:], *geom)


def conv2d_bias_grad(g: np.ndarray) -> np.ndarray:
    """db[F] = g summed over the batch and the map (memory-bound, so parallel from
    jit.PARALLEL_MIN elements, where two cores' bandwidth pays for the region)."""
    return for_work(conv.conv2d_bias_grad, g.size)(_contig(g))


def add_channel_bias(y: np.ndarray, b: np.ndarray) -> None:
    """y[n, f] += b[f] in place (parallel from jit.PARALLEL_MIN elements, as
    ``conv2d_bias_grad``)."""
    for_work(conv.add_channel_bias, y.size)(y, b)


def _conv2d_backward(ctx, g: np.ndarray) -> tuple:
    """(dx, dw, db) of a 4-D conv2d whose forward saved x, w and set ctx.geom."""
    x, w = ctx.saved_tensors
    g = _contig(g)
    need_x, need_w, need_b = ctx.needs_input_grad[:3]
    path = _kernel_path(w.shape, ctx.geom, g.shape[2:])
    if need_w and path == "s1" and (not need_x or _finite(w)):
        # one pass over the batch for all three (the planes are padded once); dx is exact
        # for finite w, dw is checked as in conv2d_weight_grad
        work = _macs(x.shape[0], w.shape, g.shape[2:]) * (2 + need_x)
        kernel, slots = _kernel("s1", "backward", work, x.shape[0] * ctx.geom[-1])
        dx, dw, db = kernel(x, g, w, *ctx.geom[2:], need_x, slots)
        if not _finite(dw):
            dw = _weight_grad_on("direct", x, g, w.shape, ctx.geom)
        return (dx if need_x else None), dw, (db if need_b else None)
    dx = conv2d_input_grad(g, w, x.shape[2:], ctx.geom) if need_x else None
    dw = conv2d_weight_grad(x, g, w.shape, ctx.geom, ctx.kept_cols) if need_w else None
    db = conv2d_bias_grad(g) if need_b else None
    return dx, dw, db


# -- second derivatives: the adjoint maps as differentiable ops -----------------------------
# For y = conv2d(x, w): dx = In(g, w) = conv_transpose2d(g, w) and dw = Wt(x, g) =
# conv2d_weight_grad(x, g). Both are bilinear; their own adjoints are
#   In(g, w):  d/dg u -> conv2d(u, w),   d/dw u -> Wt(u, g)
#   Wt(x, g):  d/dx u -> In(g, u),       d/dg u -> conv2d(x, u)
# so vjps written with Conv2d, ConvTranspose2d and Conv2dWeightGrad are differentiable again.
def _geom_params(params: dict) -> dict:
    """stride, padding (4-tuple), dilation, groups from a conv node's params."""
    return {k: params[k] for k in ("stride", "padding", "dilation", "groups")}


def _batch1(t: Tensor, batched: bool) -> Tensor:
    return t if batched else t.reshape((1,) + t.shape)


def _conv2d_to(x: Tensor, w: Tensor, out_hw: tuple, params: dict) -> Tensor:
    """conv2d(x, w) (no bias) cut to out_hw rows and columns: the adjoint of
    conv_transpose2d, whose output_padding may leave x's natural conv2d size larger."""
    y = Conv2d.apply(x, w, None, **params)
    if tuple(y.shape[2:]) != tuple(out_hw):
        y = y[:, :, :out_hw[0], :out_hw[1]]
    return y


def _conv2d_vjp(ctx, x: Tensor, w: Tensor, g: Tensor) -> tuple:
    """(dx, dw, db) of y = conv2d(x, w, b), x 3-D or 4-D, in differentiable ops."""
    batched = x.ndim == 4
    x4, g4 = _batch1(x, batched), _batch1(g, batched)
    need_x, need_w, need_b = ctx.needs_input_grad[:3]
    p = _geom_params(ctx.params)
    dx = dw = db = None
    if need_x:
        dx = ConvTranspose2d.apply(g4, w, None, out_hw=tuple(x4.shape[2:]), **p)
        dx = dx if batched else dx.reshape(x.shape)
    if need_w:
        dw = Conv2dWeightGrad.apply(x4, g4, w_shape=tuple(w.shape), **p)
    if need_b:
        db = g4.sum((0, 2, 3))
    return dx, dw, db


def _weight_grad_samples(rng):
    def sample(xs, ws, label, crop=0, **kw):
        params = _conv2d_params("conv2d", xs, ws, **kw)
        oh, ow = _out_size("conv2d", xs[2:], params["padding"], ws[2:], params["stride"],
                           params["dilation"])
        return Sample(rng.standard_normal(xs), rng.standard_normal((xs[0], ws[0], oh - crop,
                                                                     ow)),
                      w_shape=ws, label=label, **params)

    yield sample((2, 3, 5, 6), (4, 3, 3, 2), "plain", stride=1, padding=0, dilation=1,
                 groups=1)
    yield sample((1, 4, 7, 6), (4, 2, 2, 3), "stride 2x1, pad, dilation, groups 2",
                 stride=(2, 1), padding=(1, 2), dilation=(2, 1), groups=2)
    yield sample((1, 8, 6, 7), (8, 4, 3, 2), "gemm path, stride 3", stride=3, padding=0,
                 dilation=1, groups=2)
    yield sample((2, 2, 6, 5), (3, 2, 2, 2), "g a row short (conv_transpose2d's "
                 "output_padding >= stride)", crop=1, stride=1, padding=1, dilation=2,
                 groups=1)


@register("conv2d_weight_grad", samples=_weight_grad_samples)
class Conv2dWeightGrad(Function):
    """conv2d's weight gradient as an op: dw[F, C/groups, KH, KW] = the correlation of
    x[N, C, H, W] with g[N, F, OH, OW], the batch summed (params: conv2d's, and w_shape).
    Linear in x and in g: its backward is conv_transpose2d's forward (for x) and
    conv2d's (for g). What makes conv2d, conv1d and conv_transpose2d twice differentiable."""

    @staticmethod
    def forward(ctx, x, g, stride, padding, dilation, groups, w_shape):
        x, g = _contig(x), _contig(g)
        ctx.geom = _geometry(stride, padding, dilation, groups)
        ctx.save_for_backward(x, g)
        return conv2d_weight_grad(x, g, tuple(w_shape), ctx.geom)

    @staticmethod
    def backward(ctx, h):
        x, g = ctx.saved_tensors
        h = _contig(h)
        need_x, need_g = ctx.needs_input_grad[:2]
        dx = conv2d_input_grad(g, h, x.shape[2:], ctx.geom) if need_x else None
        dg = conv2d_forward(x, h, None, ctx.geom, g.shape[2:]) if need_g else None
        return dx, dg

    @staticmethod
    def vjp(ctx, h):
        x, g = lift(ctx.inputs[0]), lift(ctx.inputs[1])
        p = _geom_params(ctx.params)
        need_x, need_g = ctx.needs_input_grad[:2]
        dx = (ConvTranspose2d.apply(g, h, None, out_hw=tuple(x.shape[2:]), **p)
              if need_x else None)
        dg = _conv2d_to(x, h, tuple(g.shape[2:]), p) if need_g else None
        return dx, dg


# -- conv2d -------------------------------------------------------------------------------
def _conv2d_samples(rng):
    def sample(xs, ws, label, bias=True, **params):
        x = rng.standard_normal(xs)
        w = rng.standard_normal(ws)
        b = rng.standard_normal(ws[0]) if bias else None
        return Sample(x, w, b, label=label,
                      **_conv2d_params("conv2d", xs, ws, **params))

    yield sample((2, 3, 5, 6), (4, 3, 3, 2), "plain", stride=1, padding=0, dilation=1,
                 groups=1)
    yield sample((1, 4, 7, 6), (4, 2, 2, 3), "stride 2x1, pad, dilation, groups 2",
                 stride=(2, 1), padding=(1, 2), dilation=(2, 1), groups=2)
    yield sample((2, 3, 6, 5), (6, 1, 3, 3), "depthwise x2, no bias", bias=False,
                 stride=1, padding=1, dilation=1, groups=3)
    yield sample((1, 8, 6, 7), (8, 4, 3, 2), "gemm path, stride 3 leaves rows untouched",
                 stride=3, padding=0, dilation=1, groups=2)
    yield sample((3, 5, 5), (2, 3, 2, 2), "unbatched, same (even kernel)", stride=1,
                 padding="same", dilation=1, groups=1)


@register("conv2d", samples=_conv2d_samples)
class Conv2d(Function):
    @staticmethod
    def forward(ctx, x, w, b, stride, padding, dilation, groups):
        ctx.unbatched = x.ndim == 3
        x = _contig(x[None] if ctx.unbatched else x)
        w = _contig(w)
        ctx.geom = _geometry(stride, padding, dilation, groups)
        out_hw = _out_size("conv2d", x.shape[2:], padding, w.shape[2:], stride, dilation)
        ctx.save_for_backward(x, w)
        ctx.kept_cols = (cols_to_keep(x, w, ctx.geom, out_hw) if ctx.needs_input_grad[1]
                         else None)
        y = conv2d_forward(x, w, b, ctx.geom, out_hw, ctx.kept_cols)
        return y[0] if ctx.unbatched else y

    @staticmethod
    def backward(ctx, g):
        dx, dw, db = _conv2d_backward(ctx, g[None] if ctx.unbatched else g)
        if ctx.unbatched and dx is not None:
            dx = dx[0]
        return dx, dw, db

    @staticmethod
    def vjp(ctx, g):
        return _conv2d_vjp(ctx, lift(ctx.inputs[0]), lift(ctx.inputs[1]), g)


def conv2d(x, w, b=None, stride: IntPair = 1, padding: IntPair | str = 0,
           dilation: IntPair = 1, groups: int = 1) -> Tensor:
    """2-D cross-correlation, as ``torch.nn.functional.conv2d``.

    x[N, C, H, W] (or unbatched [C, H, W]), w[F, C/groups, KH, KW], b[F] or None:

        y[n, f, i, j] = b[f] + sum_{c in group(f), r, s}
                        w[f, c, r, s] * x[n, c, i*sh + r*dh - ph, j*sw + s*dw - pw]

    with zeros outside x. ``stride``, ``padding``, ``dilation``: int or (h, w) pair;
    ``padding`` may also be 'valid' (0) or 'same' (stride 1; an odd total padding puts
    the extra row/column at the bottom/right, as PyTorch does). Output size
    H' = (H + 2ph - dh(KH-1) - 1) // sh + 1. Input rows/columns that the stride skips
    get zero gradient. The padding adds no terms, so an inf or NaN reaches a result (or a
    gradient) only through a product of the sum above: an inf in w next to the padding
    gives inf (PyTorch's im2col kernels give 0 * inf = NaN there). x may have an empty
    batch, or no channels
    (y is then b, shaped [N, F, H', W'], where PyTorch returns an empty [N, 0, H', W']);
    any other empty axis is an error, as in PyTorch.
    """
    x, w = lift(x), lift(w)
    b = None if b is None else lift(b)
    float_operands("conv2d", x=x, w=w, b=b)
    _check_rank("conv2d", "x", x, (3, 4), "[N, C, H, W] or unbatched [C, H, W]")
    _check_rank("conv2d", "w", w, (4,), "[F, C/groups, KH, KW]")
    _check_bias("conv2d", b, w.shape[0])
    _check_sizes("conv2d", x, w, 2, {"output channels": w.shape[0]})
    params = _conv2d_params("conv2d", x.shape, w.shape, stride, padding, dilation, groups)
    return Conv2d.apply(x, w, b, **params)


# -- conv1d -------------------------------------------------------------------------------
def _conv1d_params(x_shape: tuple, w_shape: tuple, stride, padding, dilation,
                   groups) -> dict:
    """conv1d's arguments as those of the conv2d on [.., 1, L] with a [F, Cg, 1, K] kernel."""
    op = "conv1d"
    # PyTorch also takes one-element tuples: stride=(2,), padding=(1,), dilation=(1,).
    (stride,) = int_tuple(op, "stride", stride, 1, 1)
    (dilation,) = int_tuple(op, "dilation", dilation, 1, 1)
    pad2 = padding if isinstance(padding, str) else (0,) + int_tuple(op, "padding", padding,
                                                                     1, 0)
    return _conv2d_params(op, x_shape[:-1] + (1, x_shape[-1]), w_shape[:2] + (1, w_shape[2]),
                          (1, stride), pad2, (1, dilation), groups)


def _conv1d_samples(rng):
    yield Sample(rng.standard_normal((2, 3, 9)), rng.standard_normal((4, 3, 3)),
                 rng.standard_normal(4), label="stride 2, pad 1",
                 **_conv1d_params((2, 3, 9), (4, 3, 3), 2, 1, 1, 1))
    yield Sample(rng.standard_normal((4, 8)), rng.standard_normal((4, 2, 2)), None,
                 label="unbatched, groups 2, dilation 3, same",
                 **_conv1d_params((4, 8), (4, 2, 2), 1, "same", 3, 2))


@register("conv1d", samples=_conv1d_samples)
class Conv1d(Function):
    @staticmethod
    def forward(ctx, x, w, b, stride, padding, dilation, groups):
        ctx.x_shape = x.shape
        x4 = x.reshape(x.shape[:-1] + (1, x.shape[-1]))
        w4 = w.reshape(w.shape[:2] + (1, w.shape[2]))
        y = Conv2d.forward(ctx, x4, w4, b, stride, padding, dilation, groups)
        return y.reshape(y.shape[:-2] + (y.shape[-1],))

    @staticmethod
    def backward(ctx, g):
        g4 = g.reshape(g.shape[:-1] + (1, g.shape[-1]))
        dx, dw, db = Conv2d.backward(ctx, g4)
        dx = None if dx is None else dx.reshape(ctx.x_shape)
        dw = None if dw is None else dw.reshape(dw.shape[:2] + (dw.shape[3],))
        return dx, dw, db

    @staticmethod
    def vjp(ctx, g):
        x, w = lift(ctx.inputs[0]), lift(ctx.inputs[1])
        dx, dw, db = _conv2d_vjp(ctx, x.reshape(x.shape[:-1] + (1, x.shape[-1])),
                                 w.reshape(w.shape[:2] + (1, w.shape[2])),
                                 g.reshape(g.shape[:-1] + (1, g.shape[-1])))
        return (None if dx is None else dx.reshape(x.shape),
                None if dw is None else dw.reshape(w.shape), db)


def conv1d(x, w, b=None, stride: int = 1, padding: int | str = 0, dilation: int = 1,
           groups: int = 1) -> Tensor:
    """1-D cross-correlation, as ``torch.nn.functional.conv1d``: x[N, C, L] (or [C, L]),
    w[F, C/groups, K], b[F] or None,

        y[n, f, i] = b[f] + sum_{c in group(f), r} w[f, c, r] * x[n, c, i*s + r*d - p],

    L' = (L + 2p - d(K-1) - 1) // s + 1; padding may be 'valid' or 'same' (stride 1).
    Runs as conv2d with H = 1.
    """
    x, w = lift(x), lift(w)
    b = None if b is None else lift(b)
    float_operands("conv1d", x=x, w=w, b=b)
    _check_rank("conv1d", "x", x, (2, 3), "[N, C, L] or unbatched [C, L]")
    _check_rank("conv1d", "w", w, (3,), "[F, C/groups, K]")
    _check_bias("conv1d", b, w.shape[0])
    _check_sizes("conv1d", x, w, 1, {"output channels": w.shape[0]})
    params = _conv1d_params(x.shape, w.shape, stride, padding, dilation, groups)
    return Conv1d.apply(x, w, b, **params)


# -- conv_transpose2d ---------------------------------------------------------------------
def _conv_transpose2d_params(x_shape: tuple, w_shape: tuple, stride, padding,
                             output_padding, groups, dilation) -> dict:
    op = "conv_transpose2d"
    stride = int_tuple(op, "stride", stride, 2, 1)
    dilation = int_tuple(op, "dilation", dilation, 2, 1)
    pad = int_tuple(op, "padding", padding, 2, 0)
    out_pad = int_tuple(op, "output_padding", output_padding, 2, 0)
    C = x_shape[-3]
    Cw, Fg, KH, KW = w_shape
    if Cw != C:
        raise ValueError(f"{op}: weight expects {Cw} input channels but x has {C} "
                         f"(x {x_shape}, w {w_shape})")
    groups = _check_groups(op, groups, {"input channels": C}, x_shape, w_shape)
    for a in range(2):
        if out_pad[a] >= max(stride[a], dilation[a]):
            raise ValueError(f"{op}: output_padding {out_pad} must be smaller than stride "
                             f"{stride} or dilation {dilation}")
    out_hw = tuple((x_shape[-2 + a] - 1) * stride[a] - 2 * pad[a]
                   + dilation[a] * ((KH, KW)[a] - 1) + out_pad[a] + 1 for a in range(2))
    if min(out_hw) < 1:
        raise ValueError(f"{op}: output size {out_hw} is not positive (x {x_shape}, "
                         f"w {w_shape}, stride {stride}, padding {pad}, dilation {dilation})")
    return dict(stride=stride, padding=(pad[0], pad[0], pad[1], pad[1]), dilation=dilation,
                groups=groups, out_hw=out_hw)


def _conv_transpose2d_samples(rng):
    yield Sample(rng.standard_normal((2, 4, 3, 4)), rng.standard_normal((4, 3, 3, 2)),
                 rng.standard_normal(3), label="stride 2, pad 1, output_padding 1",
                 **_conv_transpose2d_params((2, 4, 3, 4), (4, 3, 3, 2), 2, 1, (1, 0), 1, 1))
    yield Sample(rng.standard_normal((1, 4, 4, 3)), rng.standard_normal((4, 2, 2, 3)), None,
                 label="groups 2, dilation 2, stride (1, 3)",
                 **_conv_transpose2d_params((1, 4, 4, 3), (4, 2, 2, 3), (1, 3), 0, 0, 2, 2))
    yield Sample(rng.standard_normal((8, 3, 3)), rng.standard_normal((8, 4, 3, 3)),
                 rng.standard_normal(4), label="unbatched, stride 2, gemm path",
                 **_conv_transpose2d_params((8, 3, 3), (8, 4, 3, 3), 2, 1, 0, 1, 1))
    yield Sample(rng.standard_normal((1, 2, 3, 4)), rng.standard_normal((2, 3, 2, 2)), None,
                 label="output_padding 1 >= stride 1 (dilation 2)",
                 **_conv_transpose2d_params((1, 2, 3, 4), (2, 3, 2, 2), 1, 1, (1, 0), 1, 2))


@register("conv_transpose2d", samples=_conv_transpose2d_samples)
class ConvTranspose2d(Function):
    @staticmethod
    def forward(ctx, x, w, b, stride, padding, dilation, groups, out_hw):
        ctx.unbatched = x.ndim == 3
        x = _contig(x[None] if ctx.unbatched else x)
        w = _contig(w)
        ctx.geom = _geometry(stride, padding, dilation, groups)
        ctx.save_for_backward(x, w)
        y = conv2d_input_grad(x, w, out_hw, ctx.geom)
        if b is not None:
            add_channel_bias(y, _contig(b))
        return y[0] if ctx.unbatched else y

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        g = _contig(g[None] if ctx.unbatched else g)
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        dx = conv2d_forward(g, w, None, ctx.geom, x.shape[2:]) if need_x else None
        dw = conv2d_weight_grad(g, x, w.shape, ctx.geom) if need_w else None
        db = conv2d_bias_grad(g) if need_b else None
        if ctx.unbatched and dx is not None:
            dx = dx[0]
        return dx, dw, db

    @staticmethod
    def vjp(ctx, u):
        x, w = lift(ctx.inputs[0]), lift(ctx.inputs[1])
        batched = x.ndim == 4
        x4, u4 = _batch1(x, batched), _batch1(u, batched)
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        p = _geom_params(ctx.params)
        dx = dw = db = None
        if need_x:
            dx = _conv2d_to(u4, w, tuple(x4.shape[2:]), p)
            dx = dx if batched else dx.reshape(x.shape)
        if need_w:
            dw = Conv2dWeightGrad.apply(u4, x4, w_shape=tuple(w.shape), **p)
        if need_b:
            db = u4.sum((0, 2, 3))
        return dx, dw, db


def conv_transpose2d(x, w, b=None, stride: IntPair = 1, padding: IntPair = 0,
                     output_padding: IntPair = 0, groups: int = 1,
                     dilation: IntPair = 1) -> Tensor:
    """2-D transposed convolution, as ``torch.nn.functional.conv_transpose2d`` (same
    argument order): x[N, C, H, W] (or [C, H, W]), w[C, F/groups, KH, KW], b[F] or None.

    It is the adjoint (input gradient) of conv2d with the same w, stride, padding and
    dilation: each x[n, c, i, j] spreads x * w[c, f, r, s] onto
    y[n, f, i*sh + r*dh - ph, j*sw + s*dw - pw]; positions outside y are dropped.
    H' = (H - 1) sh - 2 ph + dh (KH - 1) + output_padding_h + 1, where output_padding
    (smaller than stride or dilation) only adds rows/columns at the bottom/right.
    """
    op = "conv_transpose2d"
    x, w = lift(x), lift(w)
    b = None if b is None else lift(b)
    float_operands(op, x=x, w=w, b=b)
    _check_rank(op, "x", x, (3, 4), "[N, C, H, W] or unbatched [C, H, W]")
    _check_rank(op, "w", w, (4,), "[C, F/groups, KH, KW]")
    _check_sizes(op, x, w, 2, {"input channels": w.shape[0], "output channels": w.shape[1]})
    params = _conv_transpose2d_params(x.shape, w.shape, stride, padding, output_padding,
                                      groups, dilation)
    _check_bias(op, b, w.shape[1] * params["groups"])
    return ConvTranspose2d.apply(x, w, b, **params)


__all__ = ["conv1d", "conv2d", "conv_transpose2d"]
