"""Hypothesis strategies for convolution and pooling parameters.

Each strategy draws a dict of shapes and parameters that the op accepts (the padded input
always holds the dilated kernel), small enough for finite-difference gradchecks::

    from hypothesis import given
    from nbgrad.testing.strategies_conv import conv2d_configs

    @given(conv2d_configs())
    def test_conv(cfg):
        x = rng.standard_normal(cfg["x_shape"]); w = rng.standard_normal(cfg["w_shape"])
        nb.conv2d(x, w, stride=cfg["stride"], padding=cfg["padding"],
                  dilation=cfg["dilation"], groups=cfg["groups"])
"""

from __future__ import annotations

from hypothesis import strategies as st

__all__ = ["conv1d_configs", "conv2d_configs", "conv_transpose2d_configs", "pool2d_configs"]


def _pair(draw, lo: int, hi: int) -> tuple[int, int]:
    return (draw(st.integers(lo, hi)), draw(st.integers(lo, hi)))


def _groups(draw, max_groups: int, max_channels_per_group: int,
            max_filters_per_group: int) -> tuple[int, int, int]:
    """(groups, C, F): groups 1..max_groups, or depthwise (one input channel per group)."""
    groups = draw(st.integers(1, max_groups))
    depthwise = draw(st.booleans())
    cg = 1 if depthwise else draw(st.integers(1, max_channels_per_group))
    fg = draw(st.integers(1, max_filters_per_group))
    return groups, groups * cg, groups * fg


def _input_side(draw, kernel: int, dilation: int, padding: int, max_extra: int) -> int:
    """An input side whose padded size holds the dilated kernel, plus 0..max_extra (so the
    stride often leaves trailing rows/columns unread)."""
    extent = dilation * (kernel - 1) + 1
    return max(1, extent - 2 * padding) + draw(st.integers(0, max_extra))


@st.composite
def conv2d_configs(draw, max_batch: int = 2, max_groups: int = 2,
                   max_channels_per_group: int = 2, max_filters_per_group: int = 2,
                   max_kernel: int = 4, max_stride: int = 3, max_dilation: int = 3,
                   max_padding: int = 2, max_extra: int = 3, bias=None):
    """dict(x_shape, w_shape, bias, stride, padding, dilation, groups) for conv2d:
    stride 1..3, dilation 1..3, padding 0..2, kernel 1..4 (each axis on its own), groups
    1..max_groups or depthwise; ``bias`` None draws it."""
    groups, C, F = _groups(draw, max_groups, max_channels_per_group, max_filters_per_group)
    kernel = _pair(draw, 1, max_kernel)
    stride = _pair(draw, 1, max_stride)
    dilation = _pair(draw, 1, max_dilation)
    padding = _pair(draw, 0, max_padding)
    H = _input_side(draw, kernel[0], dilation[0], padding[0], max_extra)
    W = _input_side(draw, kernel[1], dilation[1], padding[1], max_extra)
    N = draw(st.integers(1, max_batch))
    return dict(x_shape=(N, C, H, W), w_shape=(F, C // groups, *kernel),
                bias=draw(st.booleans()) if bias is None else bias,
                stride=stride, padding=padding, dilation=dilation, groups=groups)


@st.composite
def conv1d_configs(draw, max_batch: int = 2, max_groups: int = 2,
                   max_channels_per_group: int = 2, max_filters_per_group: int = 2,
                   max_kernel: int = 4, max_stride: int = 3, max_dilation: int = 3,
                   max_padding: int = 2, max_extra: int = 4, bias=None):
    """dict(x_shape, w_shape, bias, stride, padding, dilation, groups) for conv1d."""
    groups, C, F = _groups(draw, max_groups, max_channels_per_group, max_filters_per_group)
    kernel = draw(st.integers(1, max_kernel))
    stride = draw(st.integers(1, max_stride))
    dilation = draw(st.integers(1, max_dilation))
    padding = draw(st.integers(0, max_padding))
    L = _input_side(draw, kernel, dilation, padding, max_extra)
    N = draw(st.integers(1, max_batch))
    return dict(x_shape=(N, C, L), w_shape=(F, C // groups, kernel),
                bias=draw(st.booleans()) if bias is None else bias,
                stride=stride, padding=padding, dilation=dilation, groups=groups)


@st.composite
def conv_transpose2d_configs(draw, max_batch: int = 2, max_groups: int = 2,
                             max_channels_per_group: int = 2, max_filters_per_group: int = 2,
                             max_kernel: int = 4, max_stride: int = 3, max_dilation: int = 3,
                             max_padding: int = 2, max_side: int = 4, bias=None):
    """dict(x_shape, w_shape, bias, stride, padding, output_padding, groups, dilation) for
    conv_transpose2d (w is [C, F/groups, KH, KW]; output size positive; output_padding
    below max(stride, dilation))."""
    groups, C, F = _groups(draw, max_groups, max_channels_per_group, max_filters_per_group)
    kernel = _pair(draw, 1, max_kernel)
    stride = _pair(draw, 1, max_stride)
    dilation = _pair(draw, 1, max_dilation)
    out_pad = tuple(draw(st.integers(0, max(s, d) - 1)) for s, d in zip(stride, dilation))
    sides = _pair(draw, 1, max_side)
    # Output side (H-1)s - 2p + d(k-1) + op + 1 must stay positive.
    padding = tuple(
        draw(st.integers(0, min(max_padding,
                                ((h - 1) * s + d * (k - 1) + op) // 2)))
        for h, s, d, k, op in zip(sides, stride, dilation, kernel, out_pad))
    N = draw(st.integers(1, max_batch))
    return dict(x_shape=(N, C, *sides), w_shape=(C, F // groups, *kernel),
                bias=draw(st.booleans()) if bias is None else bias, stride=stride,
                padding=padding, output_padding=out_pad, groups=groups, dilation=dilation)


def _windows_hit(size: int, kernel: int, stride: int, padding: int, dilation: int) -> bool:
    """Every window along one axis has a tap inside [0, size)."""
    out = (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1
    return all(any(0 <= o * stride - padding + k * dilation < size for k in range(kernel))
               for o in range(out))


@st.composite
def pool2d_configs(draw, max_batch: int = 2, max_channels: int = 3, max_kernel: int = 3,
                   max_stride: int = 3, max_dilation: int = 2, max_extra: int = 3,
                   dilation: bool = True):
    """dict(x_shape, kernel_size, stride, padding, dilation) for max_pool2d/avg_pool2d
    (padding at most half the kernel; stride None means the kernel size; every window
    holds at least one input element). With
    ``dilation=False`` the dilation is 1 (avg_pool2d has none)."""
    kernel = _pair(draw, 1, max_kernel)
    stride = draw(st.none() | st.tuples(st.integers(1, max_stride), st.integers(1, max_stride)))
    dil = _pair(draw, 1, max_dilation) if dilation else (1, 1)
    padding = tuple(draw(st.integers(0, k // 2)) for k in kernel)
    H = _input_side(draw, kernel[0], dil[0], padding[0], max_extra)
    W = _input_side(draw, kernel[1], dil[1], padding[1], max_extra)
    # A padded, dilated window can step over a small input entirely (its max is -inf);
    # an input side of at least the dilated kernel extent rules that out.
    s = kernel if stride is None else stride
    H, W = (n if _windows_hit(n, k, st_, p, d) else max(n, d * (k - 1) + 1)
            for n, k, st_, p, d in zip((H, W), kernel, s, padding, dil))
    shape = (draw(st.integers(1, max_batch)), draw(st.integers(1, max_channels)), H, W)
    return dict(x_shape=shape, kernel_size=kernel, stride=stride, padding=padding,
                dilation=dil)
