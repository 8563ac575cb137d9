"""The convolution ops' plan: which kernel family (kernels/conv*.py) serves a layer's
forward, input gradient and weight gradient, in which form and over how many slots.

A conv node's forward makes its plan once, from the shapes, the dtype, the geometry and
the thread count (``plan_conv``), and keeps it as ``ctx.plan``; the backward and the
second derivatives read it. ``choose_paths`` is the one place that picks a family from
the shapes and ``parallel_from`` the one that picks a form from the work: the tests
force a family or a form there (tests/conftest.py: kernel_path, kernel_form).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from ..kernels import conv, conv_cols, gemm
from ..kernels.conv import ConvGeometry, KernelRun
from ..kernels.matmul import panel_cols, tiled_size
from ..runtime.jit import COLS_PARALLEL_MIN, PARALLEL_WORK_MIN
from ..runtime.threads import get_num_threads

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
# How the 'cols' weight gradient computes each block's part (kernels/conv_cols.py):
# * dot products (conv_cols.DOTS) for parts of fewer than COLS_DOTS_PART sums, where a
#   GEMM's per-block packing and tiles cost more than they save;
# * else the GEMM orientation that tiles to fewer elements (kernels/matmul.py:
#   tiled_size: the zero padding of partial tiles is wasted work), taps first on a tie;
# * but filters first on maps narrower than conv_cols.ROW_RUNS_MIN, where the taps-first
#   [Kg, P] gather has no row runs.
# The measurements behind each rule: docs/benchmarks.md#conv-weight-gradient.
COLS_DOTS_PART = 512
# Kernel-1 stride-1 one-group layers whose output is as large as the input (a 1x1 conv2d,
# a kernel-1 conv1d, neuraloperator's ChannelMLP) are one matrix product per image:
# on maps of at least POINTWISE_MIN_MAP positions they take the 'pointwise' family
# (kernels/conv_pointwise.py) when POINTWISE is set (a switch for measuring against the
# family they took before). Below that the per-image products are too short for the
# GEMM's NR-wide panels, and 'cols' or 's1' are faster (docs/benchmarks.md#conv-paths).
POINTWISE = True
POINTWISE_MIN_MAP = 64
# The families whose kernels have one form and share their work out over slots: below
# COLS_PARALLEL_MIN multiply-adds they run one slot in the calling thread.
SLOT_FAMILIES = ("cols", "shift")


class Paths(NamedTuple):
    """The kernel families of a layer: ``conv`` for the forward and the weight gradient,
    ``input_grad`` for the input gradient ('shift' where it fits, else ``conv``)."""

    conv: str
    input_grad: str


class Step(NamedTuple):
    """One role of a plan: the kernel family that serves it and how its call runs."""

    family: str
    run: KernelRun


class ConvPlan(NamedTuple):
    """The kernels of one conv node, chosen once (``plan_conv``). ``backward``: the s1
    family's one pass for all three gradients of a conv2d, or None; ``direct``: the loop
    nests at this work, for operands with an inf or a NaN (``exact_step``)."""

    geometry: ConvGeometry
    in_hw: tuple[int, int]
    forward: Step
    input_grad: Step
    weight_grad: Step
    backward: Step | None
    direct: Step


def conv_geometry(stride: tuple, padding: tuple, dilation: tuple, groups: int,
                  kernel_hw: tuple, out_hw: tuple) -> ConvGeometry:
    """The geometry record of a conv node (padding as (top, bottom, left, right))."""
    return ConvGeometry(stride[0], stride[1], padding[0], padding[2], dilation[0],
                        dilation[1], groups, kernel_hw[0], kernel_hw[1], out_hw[0],
                        out_hw[1])


def shape_path(w_shape: tuple, geometry: ConvGeometry) -> str:
    """'gemm' (implicit GEMM on phase planes) when a group's dot products are long and
    shared by a few filters, or 'cols' (GEMM over blocks of images) for those on small
    output maps; else 's1' (padded-plane spans) for stride 1, or 'direct' (the loop
    nests)."""
    F, Cg, KH, KW = w_shape
    taps, filters = Cg * KH * KW, F // geometry.groups
    positions = geometry.OH * geometry.OW
    big = "cols" if positions <= COLS_MAX_MAP else "gemm"
    if (geometry.sh, geometry.sw) == (1, 1):
        if positions <= COLS_S1_MAX_MAP and filters >= S1_GEMM_MIN_FILTERS:
            return "cols"
        return big if taps >= S1_GEMM_MIN_TAPS and filters >= S1_GEMM_MIN_FILTERS else "s1"
    return big if taps >= GEMM_MIN_TAPS and filters >= GEMM_MIN_FILTERS else "direct"


def is_pointwise(w_shape: tuple, geometry: ConvGeometry, in_hw: tuple[int, int]) -> bool:
    """Whether a layer takes the 'pointwise' family, a matrix product per image: a 1x1
    kernel, stride 1, no padding, one group, an output map the size of the input and of
    at least POINTWISE_MIN_MAP positions (with a 1x1 kernel the dilation
    moves nothing; the size check excludes the cropped maps of conv_transpose2d's
    output_padding and of conv2d_weight_grad's cropped g)."""
    g = geometry
    return (tuple(w_shape[2:]) == (1, 1) and (g.sh, g.sw) == (1, 1) and (g.ph, g.pw) == (0, 0)
            and g.groups == 1 and tuple(in_hw) == g.out_hw
            and g.OH * g.OW >= POINTWISE_MIN_MAP)


def shifted_input_grad(w_shape: tuple, geometry: ConvGeometry, in_hw: tuple[int, int],
                       dtype: np.dtype) -> bool:
    """Whether the input gradient of a layer on the GEMM paths ('cols', 'gemm') takes
    kernels/conv_shift.py instead (SHIFT_MAX_MAP)."""
    _, C, KH, KW = w_shape
    g = geometry
    positions = in_hw[0] * in_hw[1]
    return (dtype in SHIFT_DTYPES and g.groups == 1 and (g.sh, g.sw) == (1, 1)
            and 2 * g.pw == (KW - 1) * g.dw and g.pw < in_hw[1] and g.ph <= (KH - 1) * g.dh
            and positions <= SHIFT_MAX_MAP and positions % gemm.NR == 0
            and -(-C // gemm.MR) * gemm.MR * 8 <= C * 9)


def choose_paths(w_shape: tuple, geometry: ConvGeometry, in_hw: tuple[int, int],
                 dtype: np.dtype) -> Paths:
    """The kernel families of a layer, from its shapes alone."""
    if POINTWISE and is_pointwise(w_shape, geometry, in_hw):
        return Paths("pointwise", "pointwise")
    path = shape_path(w_shape, geometry)
    if path in ("cols", "gemm") and shifted_input_grad(w_shape, geometry, in_hw, dtype):
        return Paths(path, "shift")
    return Paths(path, path)


def parallel_from(family: str, work: int) -> bool:
    """Whether a call of ``work`` multiply-adds runs the parallel form of ``family``'s
    kernels (for SLOT_FAMILIES: more than one slot)."""
    return work >= (COLS_PARALLEL_MIN if family in SLOT_FAMILIES
                         else PARALLEL_WORK_MIN)


def _step(family: str, work: int, units: int, threads: int, block: int = 1,
          part_form: int = 0, kept: np.ndarray | None = None) -> Step:
    """The step of ``family`` whose tasks are ``units`` images, blocks or (f, cl) pairs:
    one slot per thread over them in the parallel form, one slot in the serial form."""
    parallel = parallel_from(family, work)
    slots = max(1, min(units, threads)) if parallel else 1
    return Step(family, KernelRun(parallel, slots, block, part_form, kept))


@functools.lru_cache(maxsize=1024)
def _weight_grad_form(w_shape: tuple, groups: int, dtype: np.dtype, out_w: int) -> int:
    """How the 'cols' weight gradient computes each part (kernels/conv_cols.py) for
    output maps ``out_w`` wide: see COLS_DOTS_PART. Kept per shapes: working it out
    costs more than a cache lookup."""
    F, Cg, KH, KW = w_shape
    Fg, Kg = F // groups, Cg * KH * KW
    if Fg * Kg < COLS_DOTS_PART:
        return conv_cols.DOTS
    nr = panel_cols(np.empty(0, dtype))
    if out_w < conv_cols.ROW_RUNS_MIN or tiled_size(Fg, Kg, nr) < tiled_size(Kg, Fg, nr):
        return conv_cols.FILTERS_FIRST
    return conv_cols.TAPS_FIRST


def _block(batch: int, out_hw: tuple[int, int]) -> int:
    """Images per block of the 'cols' kernels: about COLS_BLOCK output columns (a
    function of the shapes only, so the weight gradient's sum order is fixed)."""
    return max(1, min(batch, COLS_BLOCK // (out_hw[0] * out_hw[1])))


def cols_to_keep(batch: int, w_shape: tuple, geometry: ConvGeometry, dtype: np.dtype,
                 form: int) -> np.ndarray | None:
    """A buffer for the im2col matrices of a 'cols' forward, for its weight gradient
    (of the parts' ``form``) to reuse: [blocks * groups, Kg * P], or None where the
    weight gradient would not read them in their layout or they exceed
    COLS_KEEP_MAX_BYTES."""
    if form == conv_cols.FILTERS_FIRST:
        return None
    _, Cg, KH, KW = w_shape
    B = _block(batch, geometry.out_hw)
    shape = (-(-batch // B) * geometry.groups, Cg * KH * KW * B * geometry.OH * geometry.OW)
    if shape[0] * shape[1] * np.dtype(dtype).itemsize > COLS_KEEP_MAX_BYTES:
        return None
    return np.empty(shape, dtype)


def finite(a: np.ndarray) -> bool:
    """Whether every element of ``a`` is finite (one vectorised pass, kernels/conv.py)."""
    return conv.all_finite(a.reshape(-1))


def plan_conv(batch: int, in_hw: tuple[int, int], w_shape: tuple, geometry: ConvGeometry,
              dtype: np.dtype, w: np.ndarray | None = None,
              grads: tuple[bool, bool] | None = None) -> ConvPlan:
    """The plan of a convolution of ``batch`` in_hw maps by w_shape filters.

    ``w``: the weight the forward and input gradient will multiply, where it is known
    (else ``exact_step`` checks each call's). Their fast paths multiply implicit zeros
    (padding, zero-stuffed rows, rows and columns that round a tile up) by w, and
    0 * inf is NaN; a w with an inf or a NaN takes the direct loop nests, which form
    only the products of the definition (docs/derivations.md#non-finite-operands). w is
    small, so the scan costs little; the weight gradient, whose zeros meet x and g, is
    checked on its (small) result instead (ops/conv.py: conv2d_weight_grad).

    ``grads``: (x, w) needs-gradient flags of a conv2d node, which then may keep the
    'cols' im2col matrices for its weight gradient and take the s1 one-pass backward."""
    F, Cg, KH, KW = w_shape
    work = batch * F * geometry.OH * geometry.OW * Cg * KH * KW
    threads = get_num_threads()
    paths = choose_paths(w_shape, geometry, in_hw, dtype)
    exact = paths.conv == "direct" or w is None or finite(w)
    need_x, need_w = grads or (False, False)
    per_group = batch * geometry.groups  # (n, group) tasks of the s1 kernels
    if paths.conv == "pointwise":
        # the products split their output over every thread (kernels/matmul.py)
        forward = weight_grad = _step("pointwise", work, threads, threads)
    elif paths.conv == "cols":
        B = _block(batch, geometry.out_hw)
        blocks = -(-batch // B)
        form = _weight_grad_form(w_shape, geometry.groups, np.dtype(dtype), geometry.OW)
        kept = cols_to_keep(batch, w_shape, geometry, dtype, form) if need_w and exact \
            else None
        forward = _step("cols", work, blocks, threads, B, 0, kept)
        weight_grad = _step("cols", work, blocks, threads, B, form, kept)
    else:
        forward = _step(paths.conv, work, per_group if paths.conv == "s1" else batch,
                        threads)
        weight_grad = forward if paths.conv != "s1" else \
            _step("s1", work, F * Cg, threads)  # s1: (f, cl) tasks
    if paths.input_grad == "shift":
        # a slot per COLS_BLOCK positions of dx at most, as the 'cols' kernels' blocks
        input_grad = _step("shift", work, batch * in_hw[0] * in_hw[1] // COLS_BLOCK, threads)
    else:
        input_grad = forward if paths.conv != "cols" else \
            _step("cols", work, blocks, threads, B)
    direct = forward if paths.conv == "direct" else _step("direct", work, batch, threads)
    if not exact:
        forward = input_grad = direct
    backward = None
    if need_w and paths.conv == "s1" and (not need_x or exact):
        # one pass over the batch for all three (the planes are padded once); dx is exact
        # for finite w, dw is checked as the weight gradient's
        backward = _step("s1", work * (2 + need_x), per_group, threads)
    return ConvPlan(geometry, tuple(in_hw), forward, input_grad, weight_grad, backward,
                    direct)


def exact_step(plan: ConvPlan, step: Step, w: np.ndarray) -> Step:
    """``step`` of ``plan`` (its forward or input gradient), or the direct loop nests if
    the weight ``w`` of this call holds an inf or a NaN (see ``plan_conv``)."""
    return step if step.family == "direct" or finite(w) else plan.direct
