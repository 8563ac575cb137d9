"""Convolutions: conv2d, conv1d and conv_transpose2d (PyTorch semantics, NCHW / NCL).

All three run on the kernels of ``nbgrad.kernels.conv*``: a conv2d forward, its input
gradient (which is the transposed convolution) and its weight gradient
(docs/derivations.md#convolution-adjoints).
conv1d is conv2d with H = 1; conv_transpose2d is the input gradient of the conv2d whose
weight it shares, so its backward is that conv2d's forward and weight gradient.
Which kernel family serves each of them, and how, is the node's plan (ops/conv_plan.py),
made once in its forward and kept as ``ctx.plan``; every family's entry points take the
plan's ConvGeometry and a step's KernelRun (kernels/conv.py).
Second derivatives: the weight gradient is an op too (conv2d_weight_grad), so every vjp
is written with conv2d, conv_transpose2d and conv2d_weight_grad, each differentiable again.
"""

from __future__ import annotations

import numpy as np

from ..function import Function, Sample, register
from ..kernels import conv, conv_cols, conv_gemm, conv_pointwise, conv_s1, conv_shift
from ..kernels.activation import ACTIVATIONS, NO_ACTIVATION
from ..runtime.jit import for_work
from ..tensor import Tensor, lift
from ._args import float_operands, int_tuple
from .activation import gradient_before_activation
from .conv_plan import ConvPlan, Step, conv_geometry, exact_step, finite, plan_conv

IntPair = int | tuple[int, int]


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


def _operands(op: str, x, w, b, x_layout: str, w_layout: str,
              transposed: bool = False) -> tuple[Tensor, Tensor, Tensor | None]:
    """x, w, b lifted to tensors and checked (floating; x batched or unbatched, of the
    rank of w or one less; then b one per output channel, w.shape[0], and the sizes).
    ``transposed``: w is [C, F/groups, ...] and b is left to the caller, which knows the
    groups."""
    x, w = lift(x), lift(w)
    b = None if b is None else lift(b)
    float_operands(op, x=x, w=w, b=b)
    rank = w_layout.count(",") + 1  # w's axes, as its layout names them
    _check_rank(op, "x", x, (rank - 1, rank), x_layout)
    _check_rank(op, "w", w, (rank,), w_layout)
    channels = {"output channels": w.shape[0]}
    if transposed:
        channels = {"input channels": w.shape[0], "output channels": w.shape[1]}
    else:
        _check_bias(op, b, w.shape[0])
    _check_sizes(op, x, w, rank - 2, channels)
    return x, w, b


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


# The kernel families by the names the plan gives them (ops/conv_plan.py); each module's
# entry points take the arrays, the plan's ConvGeometry and the step's KernelRun.
FAMILIES = {"direct": conv, "s1": conv_s1, "gemm": conv_gemm, "cols": conv_cols,
            "shift": conv_shift, "pointwise": conv_pointwise}


def conv2d_forward(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, plan: ConvPlan,
                   step: Step, activation: int = NO_ACTIVATION) -> np.ndarray:
    """y[N, F, OH, OW] for contiguous 4-D x and w (b None for no bias), by ``step`` of
    ``plan`` (its forward, or the direct loop nests: ``exact_step``); ``activation``: a
    code of kernels/activation.py applied to each output plane as it is stored."""
    bias = np.zeros(w.shape[0], x.dtype) if b is None else _contig(b)
    return FAMILIES[step.family].forward(x, w, bias, plan.geometry, step.run, activation)


def conv2d_input_grad(g: np.ndarray, w: np.ndarray, plan: ConvPlan,
                      step: Step) -> np.ndarray:
    """dx[N, C, H, W] (the transposed convolution of g with w), by ``step`` of ``plan``."""
    dx = np.empty((g.shape[0], w.shape[1] * plan.geometry.groups, *plan.in_hw), g.dtype)
    return FAMILIES[step.family].input_grad(g, w, dx, plan.geometry, step.run)


def conv2d_weight_grad(x: np.ndarray, g: np.ndarray, plan: ConvPlan) -> np.ndarray:
    """dw[F, C/groups, KH, KW] = correlation of x with g, the batch summed, by the plan's
    weight gradient (which may read the im2col matrices its 'cols' forward kept).

    A fast path adds products of its zeros (padding, scratch columns, tile padding) with
    x and g to the exact sum: +-0 for finite values, NaN for an inf or NaN. So where its
    dw is all finite it is the exact sum (to rounding); otherwise the direct loop nests
    recompute it (docs/derivations.md#non-finite-operands). Checking dw, the size of w,
    replaces a scan of x and g on every call."""
    step = plan.weight_grad
    dw = FAMILIES[step.family].weight_grad(x, g, plan.geometry, step.run)
    return dw if step.family == "direct" else _exact_weight_grad(dw, x, g, plan)


def _exact_weight_grad(dw: np.ndarray, x: np.ndarray, g: np.ndarray,
                       plan: ConvPlan) -> np.ndarray:
    """dw of a fast path, or the direct loop nests' if it is not all finite."""
    return dw if finite(dw) else conv.weight_grad(x, g, plan.geometry, plan.direct.run)


def conv2d_bias_grad(g: np.ndarray) -> np.ndarray:
    """db[F] = g summed over the batch and the map (memory-bound, so parallel from
    jit.PARALLEL_MIN elements, where two cores' bandwidth pays for the region)."""
    return for_work(conv.conv2d_bias_grad, g.size)(_contig(g))


def add_channel_bias(y: np.ndarray, b: np.ndarray) -> None:
    """y[n, f] += b[f] in place (parallel from jit.PARALLEL_MIN elements, as
    ``conv2d_bias_grad``)."""
    for_work(conv.add_channel_bias, y.size)(y, b, NO_ACTIVATION)


def _conv2d_backward(ctx, g: np.ndarray) -> tuple:
    """(dx, dw, db) of a 4-D conv2d whose forward saved x and w (first) and its plan."""
    x, w = ctx.saved_tensors[:2]
    g = _contig(g)
    plan = ctx.plan
    need_x, need_w, need_b = ctx.needs_input_grad[:3]
    if plan.backward is not None:
        # the s1 kernels' one pass for all three; dw is checked as in conv2d_weight_grad
        dx, dw, db = conv_s1.backward(x, g, w, plan.geometry, plan.backward.run, need_x)
        dw = _exact_weight_grad(dw, x, g, plan)
        return (dx if need_x else None), dw, (db if need_b else None)
    dx = conv2d_input_grad(g, w, plan, plan.input_grad) if need_x else None
    dw = conv2d_weight_grad(x, g, plan) if need_w else None
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


def _vjp(ctx, x: Tensor, g: Tensor, input_grad, weight_grad) -> tuple:
    """(dx, dw, db) of a conv node with input x (3-D or 4-D) and upstream gradient g, in
    differentiable ops: ``input_grad(x4, g4)`` and ``weight_grad(x4, g4)`` of the 4-D
    forms; db sums g over the batch and the map."""
    batched = x.ndim == 4
    x4, g4 = _batch1(x, batched), _batch1(g, batched)
    need_x, need_w, need_b = ctx.needs_input_grad[:3]
    dx = dw = db = None
    if need_x:
        dx = input_grad(x4, g4)
        dx = dx if batched else dx.reshape(x.shape)
    if need_w:
        dw = weight_grad(x4, g4)
    if need_b:
        db = g4.sum((0, 2, 3))
    return dx, dw, db


def _conv2d_vjp(ctx, x: Tensor, w: Tensor, g: Tensor) -> tuple:
    """(dx, dw, db) of y = conv2d(x, w, b), x 3-D or 4-D, in differentiable ops."""
    p = _geom_params(ctx.params)
    return _vjp(ctx, x, g,
                lambda x4, g4: ConvTranspose2d.apply(g4, w, None, out_hw=tuple(x4.shape[2:]),
                                                     **p),
                lambda x4, g4: Conv2dWeightGrad.apply(x4, g4, w_shape=tuple(w.shape), **p))


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
        geometry = conv_geometry(stride, padding, dilation, groups, w_shape[2:], g.shape[2:])
        ctx.plan = plan_conv(x.shape[0], x.shape[2:], tuple(w_shape), geometry, x.dtype)
        ctx.save_for_backward(x, g)
        return conv2d_weight_grad(x, g, ctx.plan)

    @staticmethod
    def backward(ctx, h):
        # h stands where conv2d's w does: its inf or NaN sends a call to the loop nests
        x, g = ctx.saved_tensors
        h, plan = _contig(h), ctx.plan
        need_x, need_g = ctx.needs_input_grad[:2]
        dx = (conv2d_input_grad(g, h, plan, exact_step(plan, plan.input_grad, h))
              if need_x else None)
        dg = (conv2d_forward(x, h, None, plan, exact_step(plan, plan.forward, h))
              if need_g else None)
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


def _conv2d_node_forward(ctx, x, w, b, stride, padding, dilation, groups,
                         activation: int = NO_ACTIVATION) -> tuple:
    """(x, w, y) of a conv2d node's forward: x batched and contiguous, w contiguous, y
    (unbatched as x came); the node's plan in ``ctx.plan``."""
    ctx.unbatched = x.ndim == 3
    x = _contig(x[None] if ctx.unbatched else x)
    w = _contig(w)
    out_hw = _out_size("conv2d", x.shape[2:], padding, w.shape[2:], stride, dilation)
    geometry = conv_geometry(stride, padding, dilation, groups, w.shape[2:], out_hw)
    ctx.plan = plan_conv(x.shape[0], x.shape[2:], w.shape, geometry, x.dtype, w,
                         grads=tuple(ctx.needs_input_grad[:2]))
    y = conv2d_forward(x, w, b, ctx.plan, ctx.plan.forward, activation)
    return x, w, (y[0] if ctx.unbatched else y)


@register("conv2d", samples=_conv2d_samples)
class Conv2d(Function):
    @staticmethod
    def forward(ctx, x, w, b, stride, padding, dilation, groups):
        x, w, y = _conv2d_node_forward(ctx, x, w, b, stride, padding, dilation, groups)
        ctx.save_for_backward(x, w)
        return y

    @staticmethod
    def backward(ctx, g):
        dx, dw, db = _conv2d_backward(ctx, g[None] if ctx.unbatched else g)
        if ctx.unbatched and dx is not None:
            dx = dx[0]
        return dx, dw, db

    @staticmethod
    def vjp(ctx, g):
        return _conv2d_vjp(ctx, lift(ctx.inputs[0]), lift(ctx.inputs[1]), g)


class Conv2dActivation(Function):
    """``activation(conv2d(x, w, b, ...))`` for relu, tanh or sigmoid as one op, which
    nb.compile puts in place of the two (compiler/patterns.py): the conv kernels apply
    the activation to each output plane as they store it (``activate_in_place``,
    kernels/conv.py). Its backward is the activation's kernel on the saved output, then
    conv2d's: the two ops' kernels in their order, so the same bits. Not in the op table
    (no vjp: nb.compile does not fold in a program that differentiates a backward)."""

    op_name = "conv2d_activation"

    @staticmethod
    def forward(ctx, x, w, b, stride, padding, dilation, groups, activation):
        x, w, y = _conv2d_node_forward(ctx, x, w, b, stride, padding, dilation, groups,
                                       ACTIVATIONS[activation])
        ctx.save_for_backward(x, w, y)
        return y

    @staticmethod
    def backward(ctx, g):
        y = ctx.saved_tensors[2]
        return Conv2d.backward(ctx, gradient_before_activation(ctx.params["activation"], g, y))


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
    x, w, b = _operands("conv2d", x, w, b, "[N, C, H, W] or unbatched [C, H, W]",
                        "[F, C/groups, KH, KW]")
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
        ctx.input_shape = x.shape
        x4 = x.reshape(x.shape[:-1] + (1, x.shape[-1]))
        w4 = w.reshape(w.shape[:2] + (1, w.shape[2]))
        y = Conv2d.forward(ctx, x4, w4, b, stride, padding, dilation, groups)
        return y.reshape(y.shape[:-2] + (y.shape[-1],))

    @staticmethod
    def backward(ctx, g):
        g4 = g.reshape(g.shape[:-1] + (1, g.shape[-1]))
        dx, dw, db = Conv2d.backward(ctx, g4)
        dx = None if dx is None else dx.reshape(ctx.input_shape)
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
    x, w, b = _operands("conv1d", x, w, b, "[N, C, L] or unbatched [C, L]",
                        "[F, C/groups, K]")
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
        # the input gradient of the conv2d from out_hw maps to x's, whose w it shares
        geometry = conv_geometry(stride, padding, dilation, groups, w.shape[2:], x.shape[2:])
        ctx.plan = plan_conv(x.shape[0], out_hw, w.shape, geometry, x.dtype, w)
        ctx.save_for_backward(x, w)
        y = conv2d_input_grad(x, w, ctx.plan, ctx.plan.input_grad)
        if b is not None:
            add_channel_bias(y, _contig(b))
        return y[0] if ctx.unbatched else y

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        g = _contig(g[None] if ctx.unbatched else g)
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        dx = conv2d_forward(g, w, None, ctx.plan, ctx.plan.forward) if need_x else None
        dw = conv2d_weight_grad(g, x, ctx.plan) if need_w else None
        db = conv2d_bias_grad(g) if need_b else None
        if ctx.unbatched and dx is not None:
            dx = dx[0]
        return dx, dw, db

    @staticmethod
    def vjp(ctx, u):
        x, w = lift(ctx.inputs[0]), lift(ctx.inputs[1])
        p = _geom_params(ctx.params)
        return _vjp(ctx, x, u, lambda x4, u4: _conv2d_to(u4, w, tuple(x4.shape[2:]), p),
                    lambda x4, u4: Conv2dWeightGrad.apply(u4, x4, w_shape=tuple(w.shape), **p))


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
    x, w, b = _operands(op, x, w, b, "[N, C, H, W] or unbatched [C, H, W]",
                        "[C, F/groups, KH, KW]", transposed=True)
    params = _conv_transpose2d_params(x.shape, w.shape, stride, padding, output_padding,
                                      groups, dilation)
    _check_bias(op, b, w.shape[1] * params["groups"])
    return ConvTranspose2d.apply(x, w, b, **params)


__all__ = ["conv1d", "conv2d", "conv_transpose2d"]
