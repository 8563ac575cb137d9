"""conv2d, conv1d, conv_transpose2d against references: gradchecks over drawn
parameters, NumPy loop references, the adjoint identities, fixed cases, threads, the
PyTorch oracle, bad input, and non-finite operands on every kernel path. The kernels
alone: test_conv_kernels.py; the plan: test_conv_plan.py; second derivatives:
test_conv_second_order.py."""

import numpy as np
import pytest
from conftest import (
    PATHS,
    assert_same_bits,
    at_threads,
    conv_all_grads,
    draw_conv_operands,
    kernel_path,
    pair,
)
from hypothesis import given
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.ops import conv as conv_ops
from nbgrad.ops import conv_plan
from nbgrad.testing import gradcheck
from nbgrad.testing.strategies_conv import (
    conv1d_configs,
    conv2d_configs,
    conv_transpose2d_configs,
)


def _pad4(padding):
    ph, pw = (padding, padding) if isinstance(padding, int) else padding
    return (ph, ph, pw, pw)


def _conv_kwargs(cfg):
    return {k: cfg[k] for k in ("stride", "padding", "dilation", "groups")}

# -- NumPy references (window slices and einsum, written from the definition) -----------
def _windows(xp, kh, kw, stride, dilation, out_hw):
    """xp[:, :, ih, iw] for ih = oh*sh + kh*dh, iw = ow*sw + kw*dw over the output grid."""
    (sh, sw), (dh, dw), (OH, OW) = stride, dilation, out_hw
    return xp[:, :, kh * dh: kh * dh + sh * (OH - 1) + 1: sh,
              kw * dw: kw * dw + sw * (OW - 1) + 1: sw]


def ref_conv2d(x, w, b, stride, pad4, dilation, groups, g=None):
    """y (and, given g, the gradients dx, dw, db) of conv2d, from the definition."""
    N, C, H, W = x.shape
    F, Cg, KH, KW = w.shape
    Fg = F // groups
    xp = np.pad(x, ((0, 0), (0, 0), pad4[:2], pad4[2:]))
    OH = (xp.shape[2] - dilation[0] * (KH - 1) - 1) // stride[0] + 1
    OW = (xp.shape[3] - dilation[1] * (KW - 1) - 1) // stride[1] + 1
    y = np.zeros((N, F, OH, OW)) + (0 if b is None else b[:, None, None])
    dxp, dw = np.zeros_like(xp), np.zeros_like(w)
    for gi in range(groups):
        cs, fs = slice(gi * Cg, (gi + 1) * Cg), slice(gi * Fg, (gi + 1) * Fg)
        for kh in range(KH):
            for kw in range(KW):
                patch = _windows(xp[:, cs], kh, kw, stride, dilation, (OH, OW))
                y[:, fs] += np.einsum("ncij,fc->nfij", patch, w[fs, :, kh, kw])
                if g is not None:
                    dw[fs, :, kh, kw] = np.einsum("nfij,ncij->fc", g[:, fs], patch)
                    _windows(dxp[:, cs], kh, kw, stride, dilation, (OH, OW))[...] += \
                        np.einsum("nfij,fc->ncij", g[:, fs], w[fs, :, kh, kw])
    if g is None:
        return y
    dx = dxp[:, :, pad4[0]: pad4[0] + H, pad4[2]: pad4[2] + W]
    return y, dx, dw, g.sum(axis=(0, 2, 3))


def ref_conv_transpose2d(x, w, b, stride, padding, output_padding, groups, dilation):
    """Scatter form: x[n, c, i, j] * w[c, f, r, s] lands on y[i*sh + r*dh - ph, ...]."""
    N, C, H, W = x.shape
    _, Fg, KH, KW = w.shape
    Cg = C // groups
    full = [(H - 1) * stride[0] + dilation[0] * (KH - 1) + 1 + output_padding[0],
            (W - 1) * stride[1] + dilation[1] * (KW - 1) + 1 + output_padding[1]]
    y = np.zeros((N, Fg * groups, *full))
    for gi in range(groups):
        cs, fs = slice(gi * Cg, (gi + 1) * Cg), slice(gi * Fg, (gi + 1) * Fg)
        for kh in range(KH):
            for kw in range(KW):
                _windows(y[:, fs], kh, kw, stride, dilation, (H, W))[...] += \
                    np.einsum("ncij,cf->nfij", x[:, cs], w[cs, :, kh, kw])
    y = y[:, :, padding[0]: full[0] - padding[0], padding[1]: full[1] - padding[1]]
    return y + (0 if b is None else b[:, None, None])


# -- gradchecks over drawn parameters -----------------------------------------------------
@pytest.mark.parametrize("path", PATHS)
@given(cfg=conv2d_configs(max_batch=1, max_extra=2))
def test_conv2d_gradcheck(path, cfg):
    x, w, b = draw_conv_operands(cfg)
    with kernel_path(path):
        gradcheck(lambda x, w, b: nb.conv2d(x, w, b, **_conv_kwargs(cfg)), [x, w, b])


@given(cfg=conv1d_configs())
def test_conv1d_gradcheck(cfg):
    x, w, b = draw_conv_operands(cfg)
    gradcheck(lambda x, w, b: nb.conv1d(x, w, b, **_conv_kwargs(cfg)), [x, w, b])


@pytest.mark.parametrize("path", PATHS)
@given(cfg=conv_transpose2d_configs(max_batch=1, max_side=3))
def test_conv_transpose2d_gradcheck(path, cfg):
    x, w, b = draw_conv_operands(cfg)
    kw = {k: cfg[k] for k in ("stride", "padding", "output_padding", "groups", "dilation")}
    with kernel_path(path):
        gradcheck(lambda x, w, b: nb.conv_transpose2d(x, w, b, **kw), [x, w, b])


# -- against the NumPy references ---------------------------------------------------------
@pytest.mark.parametrize("path", PATHS)
@given(cfg=conv2d_configs(max_groups=3, max_channels_per_group=3, max_filters_per_group=5))
def test_conv2d_matches_reference(path, cfg):
    x, w, b = draw_conv_operands(cfg)
    g = None
    with kernel_path(path):
        xt, wt = nb.tensor(x, requires_grad=True), nb.tensor(w, requires_grad=True)
        bt = None if b is None else nb.tensor(b, requires_grad=True)
        y = nb.conv2d(xt, wt, bt, **_conv_kwargs(cfg))
        g = np.random.default_rng(1).standard_normal(y.shape)
        y.backward(g)
    y_ref, dx, dw, db = ref_conv2d(x, w, b, pair(cfg["stride"]), _pad4(cfg["padding"]),
                                   pair(cfg["dilation"]), cfg["groups"], g)
    np.testing.assert_allclose(y.numpy(), y_ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(xt.grad.numpy(), dx, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(wt.grad.numpy(), dw, rtol=1e-12, atol=1e-12)
    if b is not None:
        np.testing.assert_allclose(bt.grad.numpy(), db, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("channels", [1, 3])
def test_default_paths_of_a_small_map_layer_match_reference(channels):
    """A digits-like layer, 16 filters k3 p1 on 8x8 maps, on the path the ops choose by
    themselves ('cols')."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, channels, 8, 8))
    w = rng.standard_normal((16, channels, 3, 3))
    b = rng.standard_normal(16)
    xt, wt, bt = (nb.tensor(a, requires_grad=True) for a in (x, w, b))
    y = nb.conv2d(xt, wt, bt, padding=1)
    g = rng.standard_normal(y.shape)
    y.backward(g)
    y_ref, dx, dw, db = ref_conv2d(x, w, b, (1, 1), (1, 1, 1, 1), (1, 1), 1, g)
    for got, want in [(y, y_ref), (xt.grad, dx), (wt.grad, dw), (bt.grad, db)]:
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)


@given(cfg=conv_transpose2d_configs(max_groups=3, max_side=5))
def test_conv_transpose2d_matches_reference(cfg):
    x, w, b = draw_conv_operands(cfg)
    kw = {k: cfg[k] for k in ("stride", "padding", "output_padding", "groups", "dilation")}
    y = nb.conv_transpose2d(x, w, b, **kw).numpy()
    ref = ref_conv_transpose2d(x, w, b, *(pair(cfg[k]) for k in
                                          ("stride", "padding", "output_padding")),
                               cfg["groups"], pair(cfg["dilation"]))
    np.testing.assert_allclose(y, ref, rtol=1e-12, atol=1e-12)


# -- adjoint identities (docs/derivations.md) ----------------------------------------------------
@pytest.mark.parametrize("path", PATHS)
@given(cfg=conv2d_configs(max_groups=3, max_filters_per_group=3))
def test_adjoint_identities(path, cfg):
    """<conv(x; w), g> = <x, conv_input_grad(g; w)> = <w, conv_weight_grad(x, g)>, and
    conv_transpose2d is the adjoint of conv2d with the same geometry."""
    x, w, _ = draw_conv_operands(cfg)
    stride, dilation, pad4 = pair(cfg["stride"]), pair(cfg["dilation"]), _pad4(cfg["padding"])
    with kernel_path(path):
        y = nb.conv2d(x, w, **_conv_kwargs(cfg)).numpy()
        g = np.random.default_rng(5).standard_normal(y.shape)
        lhs = np.vdot(y, g)
        geometry = conv_plan.conv_geometry(stride, pad4, dilation, cfg["groups"], w.shape[2:],
                                           y.shape[2:])
        plan = conv_plan.plan_conv(x.shape[0], x.shape[2:], w.shape, geometry, x.dtype, w)
        dx = conv_ops.conv2d_input_grad(g, w, plan, plan.input_grad)
        dw = conv_ops.conv2d_weight_grad(x, g, plan)
        op = tuple(h + 2 * p - (d * (k - 1) + 1) - s * (o - 1)
                   for h, p, d, k, s, o in zip(x.shape[2:], (pad4[0], pad4[2]), dilation,
                                               w.shape[2:], stride, y.shape[2:]))
        t = nb.conv_transpose2d(g, w, stride=stride, padding=cfg["padding"],
                                output_padding=op, groups=cfg["groups"], dilation=dilation)
    assert t.shape == x.shape
    np.testing.assert_allclose(np.vdot(x, dx), lhs, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(np.vdot(w, dw), lhs, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(np.vdot(x, t.numpy()), lhs, rtol=1e-10, atol=1e-10)


# -- fixed cases --------------------------------------------------------------------------
@pytest.mark.parametrize("path", PATHS)
def test_untouched_trailing_rows_get_zero_gradient(path):
    """H = W = 8, k = 2, stride 3: outputs read rows 0,1,3,4,6,7 only; rows 2 and 5 (and,
    with W = 9, column 8) get exactly zero gradient."""
    rng = np.random.default_rng(6)
    x = nb.tensor(rng.standard_normal((2, 4, 8, 9)), requires_grad=True)
    w = nb.tensor(rng.standard_normal((4, 4, 2, 2)), requires_grad=True)
    with kernel_path(path):
        y = nb.conv2d(x, w, stride=3)
        assert y.shape == (2, 4, 3, 3)
        y.backward(np.ones(y.shape))
    dx = x.grad.numpy()
    assert np.all(dx[:, :, [2, 5], :] == 0) and np.all(dx[:, :, :, [2, 5, 8]] == 0)
    assert np.all(dx[:, :, [0, 1, 3, 4, 6, 7]][:, :, :, [0, 1, 3, 4, 6, 7]] != 0)


def test_identity_kernel_and_hand_values():
    """A 1x1 kernel of 1 copies x; a 2x2 all-ones kernel sums windows (hand values)."""
    x = np.arange(9.0).reshape(1, 1, 3, 3)
    np.testing.assert_array_equal(nb.conv2d(x, np.ones((1, 1, 1, 1))).numpy(), x)
    y = nb.conv2d(x, np.ones((1, 1, 2, 2)), np.array([0.5])).numpy()
    np.testing.assert_array_equal(y, [[[[8.5, 12.5], [20.5, 24.5]]]])
    xt = nb.tensor(x, requires_grad=True)
    nb.conv2d(xt, np.ones((1, 1, 2, 2))).backward(np.ones((1, 1, 2, 2)))
    np.testing.assert_array_equal(xt.grad.numpy(), [[[[1, 2, 1], [2, 4, 2], [1, 2, 1]]]])


@pytest.mark.parametrize("k", [1, 2, 3, 4])
@pytest.mark.parametrize("d", [1, 2])
def test_same_padding_keeps_size_and_matches_reference(k, d):
    rng = np.random.default_rng(7)
    x, w = rng.standard_normal((1, 2, 5, 6)), rng.standard_normal((3, 2, k, k + 1))
    y = nb.conv2d(x, w, padding="same", dilation=d).numpy()
    assert y.shape == (1, 3, 5, 6)
    tot = (d * (k - 1), d * k)
    pad4 = (tot[0] // 2, tot[0] - tot[0] // 2, tot[1] // 2, tot[1] - tot[1] // 2)
    np.testing.assert_allclose(y, ref_conv2d(x, w, None, (1, 1), pad4, (d, d), 1),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(nb.conv2d(x, w, padding="valid").numpy(),
                                  nb.conv2d(x, w, padding=0).numpy())


def test_unbatched_and_conv1d_agree_with_batched_conv2d():
    rng = np.random.default_rng(8)
    x, w, b = rng.standard_normal((3, 5, 7)), rng.standard_normal((4, 3, 2, 3)), \
        rng.standard_normal(4)
    np.testing.assert_array_equal(nb.conv2d(x, w, b, padding=1).numpy(),
                                  nb.conv2d(x[None], w, b, padding=1).numpy()[0])
    x1, w1 = rng.standard_normal((2, 3, 11)), rng.standard_normal((4, 3, 3))
    y1 = nb.conv1d(x1, w1, b, stride=2, padding=1, dilation=2).numpy()
    y2 = nb.conv2d(x1[:, :, None], w1[:, :, None], b, stride=(1, 2), padding=(0, 1),
                   dilation=(1, 2)).numpy()[:, :, 0]
    np.testing.assert_array_equal(y1, y2)
    xt = nb.tensor(x1[0], requires_grad=True)
    nb.conv1d(xt, w1, padding="same").backward(np.ones((4, 11)))
    assert xt.grad.shape == (3, 11)


def test_broadcast_upstream_gradient_and_float32():
    """A 0-stride upstream gradient (what sum() sends back) is accepted; float32 stays
    float32 in the output and all three gradients."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 4, 6, 6)).astype(np.float32)
    w = rng.standard_normal((4, 4, 3, 3)).astype(np.float32)
    b = np.zeros(4, np.float32)
    _, dx_ref, dw_ref, _ = ref_conv2d(x.astype(np.float64), w.astype(np.float64), None,
                                      (1, 1), (1, 1, 1, 1), (1, 1), 1, np.ones((2, 4, 6, 6)))
    for path in PATHS:
        with kernel_path(path):
            xt, wt, bt = (nb.tensor(a, requires_grad=True) for a in (x, w, b))
            y = nb.conv2d(xt, wt, bt, padding=1)
            ctx = y.grad_fn
            dx, dw, db = ctx.fn.backward(ctx, np.broadcast_to(np.float32(1), y.shape))
        assert y.dtype == dx.dtype == dw.dtype == db.dtype == np.float32
        np.testing.assert_array_equal(db, np.full(4, 72, np.float32))
        np.testing.assert_allclose(dx, dx_ref, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(dw, dw_ref, rtol=1e-5, atol=1e-4)


def test_inputs_not_modified():
    rng = np.random.default_rng(10)
    x, w = rng.standard_normal((1, 2, 5, 5)), rng.standard_normal((2, 2, 3, 3))
    xc, wc = x.copy(), w.copy()
    for path in PATHS:
        with kernel_path(path):
            nb.conv2d(x, w, padding=1).numpy()
            nb.conv_transpose2d(x, w, padding=1)
    np.testing.assert_array_equal(x, xc)
    np.testing.assert_array_equal(w, wc)


# -- determinism ----------------------------------------------------------------------------
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("op", ["conv2d", "conv2d_depthwise", "conv_transpose2d"])
def test_one_and_two_threads_bitwise(path, op):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((3, 8, 13, 11)).astype(np.float32)
    if op == "conv2d":
        w = rng.standard_normal((6, 4, 3, 2)).astype(np.float32)

        def fn(x, w, b):
            return nb.conv2d(x, w, b, stride=2, padding=1, dilation=(1, 2), groups=2)
    elif op == "conv2d_depthwise":
        w = rng.standard_normal((16, 1, 3, 3)).astype(np.float32)

        def fn(x, w, b):
            return nb.conv2d(x, w, b, padding=1, groups=8)
    else:
        w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)

        def fn(x, w, b):
            return nb.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1)
    with kernel_path(path):
        F = fn(x, w, None).shape[1]
        b = rng.standard_normal(F).astype(np.float32)
        g = rng.standard_normal(fn(x, w, b).shape).astype(np.float32)
        one = at_threads(1, conv_all_grads, fn, x, w, b, g)
        two = at_threads(2, conv_all_grads, fn, x, w, b, g)
    for a, c in zip(one, two):
        assert_same_bits(a, c)


# -- PyTorch oracle -------------------------------------------------------------------------
def _torch_grads(torch_fn, x, w, b, g):
    torch = pytest.importorskip("torch")
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    bt = None if b is None else torch.tensor(b, requires_grad=True)
    y = torch_fn(xt, wt, bt)
    y.backward(torch.tensor(g))
    return (y.detach().numpy(), xt.grad.numpy(), wt.grad.numpy(),
            None if b is None else bt.grad.numpy())


def _check_against_torch(ours, theirs, x, w, b, dtype=np.float64):
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)
    xt, wt = nb.tensor(x, requires_grad=True), nb.tensor(w, requires_grad=True)
    bt = None if b is None else nb.tensor(b, requires_grad=True)
    y = ours(xt, wt, bt)
    g = np.random.default_rng(12).standard_normal(y.shape).astype(dtype)
    y.backward(g)
    ty, tdx, tdw, tdb = _torch_grads(theirs, x, w, b, g)
    np.testing.assert_allclose(y.numpy(), ty, **tol)
    np.testing.assert_allclose(xt.grad.numpy(), tdx, **tol)
    np.testing.assert_allclose(wt.grad.numpy(), tdw, **tol)
    if b is not None:
        np.testing.assert_allclose(bt.grad.numpy(), tdb, **tol)


@pytest.mark.parametrize("path", PATHS)
@given(cfg=conv2d_configs(max_groups=3, max_channels_per_group=3, max_filters_per_group=4),
       dtype=st.sampled_from([np.float32, np.float64]))
def test_conv2d_torch_oracle(path, cfg, dtype):
    torch = pytest.importorskip("torch")
    x, w, b = draw_conv_operands(cfg, dtype=dtype)
    kw = _conv_kwargs(cfg)
    with kernel_path(path):
        _check_against_torch(lambda x, w, b: nb.conv2d(x, w, b, **kw),
                             lambda x, w, b: torch.nn.functional.conv2d(x, w, b, **kw),
                             x, w, b, dtype)


@given(cfg=conv1d_configs(max_groups=3))
def test_conv1d_torch_oracle(cfg):
    torch = pytest.importorskip("torch")
    x, w, b = draw_conv_operands(cfg)
    kw = _conv_kwargs(cfg)
    _check_against_torch(lambda x, w, b: nb.conv1d(x, w, b, **kw),
                         lambda x, w, b: torch.nn.functional.conv1d(x, w, b, **kw), x, w, b)


@pytest.mark.parametrize("path", PATHS)
@given(cfg=conv_transpose2d_configs(max_groups=3, max_side=5))
def test_conv_transpose2d_torch_oracle(path, cfg):
    torch = pytest.importorskip("torch")
    x, w, b = draw_conv_operands(cfg)
    kw = {k: cfg[k] for k in ("stride", "padding", "output_padding", "groups", "dilation")}
    with kernel_path(path):
        _check_against_torch(
            lambda x, w, b: nb.conv_transpose2d(x, w, b, **kw),
            lambda x, w, b: torch.nn.functional.conv_transpose2d(x, w, b, **kw), x, w, b)


@pytest.mark.parametrize("k", [(2, 3), (4, 1), (3, 3)])
def test_same_padding_torch_oracle(k):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(13)
    x, w = rng.standard_normal((2, 3, 6, 7)), rng.standard_normal((2, 3, *k))
    _check_against_torch(
        lambda x, w, b: nb.conv2d(x, w, b, padding="same", dilation=2),
        lambda x, w, b: torch.nn.functional.conv2d(x, w, b, padding="same", dilation=2),
        x, w, rng.standard_normal(2))


# -- bad input ------------------------------------------------------------------------------
X = np.zeros((2, 4, 6, 6))


@pytest.mark.parametrize("args, kwargs, match", [
    ((X, np.zeros((3, 3, 3, 3))), {},
     r"conv2d: weight has 3 input channels per group but x has 4 channels \(groups=1"),
    ((X, np.zeros((4, 2, 3, 3))), {"groups": 3},
     r"conv2d: groups=3 does not divide the 4 input channels \(x \(2, 4, 6, 6\)"),
    ((X, np.zeros((3, 2, 3, 3))), {"groups": 2},
     r"conv2d: groups=2 does not divide the 3 output channels"),
    ((X, np.zeros((3, 4, 7, 3))), {},
     r"conv2d: the dilated kernel \(7, 3\) is larger than the padded input \(6, 6\)"),
    ((X, np.zeros((3, 4, 3, 3))), {"dilation": 3},
     r"conv2d: the dilated kernel \(7, 7\) is larger than the padded input"),
    ((X, np.zeros((3, 4, 3, 3))), {"stride": 0}, r"conv2d: stride must be positive, got 0"),
    ((X, np.zeros((3, 4, 3, 3))), {"dilation": (1, -1)}, r"conv2d: dilation must be positive"),
    ((X, np.zeros((3, 4, 3, 3))), {"padding": -1}, r"conv2d: padding must be non-negative"),
    ((X, np.zeros((3, 4, 3, 3))), {"groups": 0}, r"conv2d: groups must be a positive int"),
    ((X, np.zeros((3, 4, 3, 3))), {"padding": "same", "stride": 2},
     r"conv2d: padding='same' needs stride 1"),
    ((X, np.zeros((3, 4, 3, 3))), {"padding": "full"}, r"conv2d: padding must be"),
    ((np.zeros((4, 6)), np.zeros((3, 4, 3, 3))), {},
     r"conv2d: x must be \[N, C, H, W\] or unbatched \[C, H, W\], got shape \(4, 6\)"),
    ((X, np.zeros((3, 4, 3))), {}, r"conv2d: w must be \[F, C/groups, KH, KW\], got shape"),
    ((X, np.zeros((3, 4, 3, 3)), np.zeros(4)), {},
     r"conv2d: b must have shape \(3,\) \(one per output channel\), got \(4,\)"),
    # empty axes: PyTorch allows only an empty batch or empty input channels
    ((np.zeros((2, 4, 0, 6)), np.zeros((3, 4, 3, 3))), {"padding": 2},
     r"conv2d: x has an empty spatial axis; only the batch and the channels may be empty "
     r"\(x \(2, 4, 0, 6\), w \(3, 4, 3, 3\)\)"),
    ((np.zeros((2, 4, 6, 0)), np.zeros((3, 4, 3, 3))), {"padding": 2},
     r"conv2d: x has an empty spatial axis"),
    ((X, np.zeros((3, 4, 0, 3))), {}, r"conv2d: the kernel size must be positive "
                                      r"\(w \(3, 4, 0, 3\)\)"),
    ((X, np.zeros((0, 4, 3, 3)), np.zeros(0)), {},
     r"conv2d: w has no output channels \(x \(2, 4, 6, 6\), w \(0, 4, 3, 3\)\)"),
])
def test_conv2d_value_errors(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        nb.conv2d(*args, **kwargs)


def test_type_errors():
    w = np.zeros((3, 4, 3, 3))
    with pytest.raises(TypeError,
                       match=r"conv2d: inputs must share one dtype \(x is nbgrad.float32"):
        nb.conv2d(X.astype(np.float32), w)
    with pytest.raises(TypeError, match=r"conv2d: x must be float32 or float64, got nbgrad.int64"):
        nb.conv2d(X.astype(np.int64), w)
    with pytest.raises(TypeError, match=r"conv2d: stride must be an int or a pair of ints"):
        nb.conv2d(X, w, stride=(1, 2, 3))
    with pytest.raises(TypeError, match=r"conv1d: stride must be an int"):
        nb.conv1d(np.zeros((1, 4, 9)), np.zeros((2, 4, 3)), stride=(1, 2))


@pytest.mark.parametrize("fn, args, kwargs, match", [
    (nb.conv1d, (np.zeros((1, 4, 5)), np.zeros((2, 3, 3))), {},
     r"conv1d: weight has 3 input channels per group but x has 4"),
    (nb.conv1d, (np.zeros((1, 4, 5)), np.zeros((2, 4, 3))), {"dilation": 3},
     r"conv1d: the dilated kernel \(1, 7\) is larger than the padded input \(1, 5\)"),
    (nb.conv1d, (np.zeros((1, 2, 4, 5)), np.zeros((2, 4, 3))), {},
     r"conv1d: x must be \[N, C, L\] or unbatched \[C, L\], got shape \(1, 2, 4, 5\)"),
    (nb.conv_transpose2d, (X, np.zeros((3, 2, 3, 3))), {},
     r"conv_transpose2d: weight expects 3 input channels but x has 4"),
    (nb.conv_transpose2d, (X, np.zeros((4, 2, 3, 3))), {"groups": 3},
     r"conv_transpose2d: groups=3 does not divide the 4 input channels"),
    (nb.conv_transpose2d, (X, np.zeros((4, 2, 3, 3))), {"stride": 2, "output_padding": 2},
     r"conv_transpose2d: output_padding \(2, 2\) must be smaller than stride \(2, 2\)"),
    (nb.conv_transpose2d, (X, np.zeros((4, 2, 1, 1))), {"padding": 3},
     r"conv_transpose2d: output size \(0, 0\) is not positive"),
    (nb.conv_transpose2d, (X, np.zeros((4, 2, 3, 3)), np.zeros(3)), {"groups": 2},
     r"conv_transpose2d: b must have shape \(4,\)"),
    (nb.conv_transpose2d, (X, np.zeros((4, 2, 3, 3))), {"stride": -1},
     r"conv_transpose2d: stride must be positive"),
    (nb.conv1d, (np.zeros((1, 4, 0)), np.zeros((2, 4, 3))), {"padding": 2},
     r"conv1d: x has an empty spatial axis; only the batch and the channels may be empty"),
    (nb.conv1d, (np.zeros((1, 4, 5)), np.zeros((2, 4, 0))), {},
     r"conv1d: the kernel size must be positive \(w \(2, 4, 0\)\)"),
    (nb.conv1d, (np.zeros((1, 4, 5)), np.zeros((0, 4, 3))), {},
     r"conv1d: w has no output channels"),
    (nb.conv_transpose2d, (np.zeros((2, 0, 6, 6)), np.zeros((0, 2, 3, 3))), {},
     r"conv_transpose2d: w has no input channels \(x \(2, 0, 6, 6\), w \(0, 2, 3, 3\)\)"),
    (nb.conv_transpose2d, (X, np.zeros((4, 0, 3, 3))), {},
     r"conv_transpose2d: w has no output channels"),
    (nb.conv_transpose2d, (np.zeros((2, 4, 6, 0)), np.zeros((4, 2, 3, 3))), {},
     r"conv_transpose2d: x has an empty spatial axis"),
    (nb.conv_transpose2d, (X, np.zeros((4, 2, 3, 0))), {},
     r"conv_transpose2d: the kernel size must be positive"),
])
def test_conv1d_and_transpose_errors(fn, args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        fn(*args, **kwargs)


# -- non-finite operands: NaN only from an inf or NaN product, padding adds nothing -------
@pytest.mark.parametrize("path", PATHS)
def test_inf_in_x_leaves_taps_that_never_read_it_finite(path):
    """x[2, 0] = inf, an all-ones 3x3 kernel, padding 1: the taps of column kw = 2 never
    read input column 0, so their weight gradients stay finite (PyTorch: 5.4, 9.6, 9.0);
    the span and GEMM kernels met the inf with the zero scratch columns past each output
    row (0 * inf = NaN)."""
    x = np.arange(16.0).reshape(1, 1, 4, 4) / 10
    x[0, 0, 2, 0] = np.inf
    xt = nb.tensor(x, requires_grad=True)
    wt = nb.tensor(np.ones((1, 1, 3, 3)), requires_grad=True)
    with kernel_path(path):
        nb.conv2d(xt, wt, padding=1).sum().backward()
    inf = np.inf
    np.testing.assert_allclose(wt.grad.numpy()[0, 0],
                               [[inf, inf, 5.4], [inf, inf, 9.6], [inf, inf, 9.0]],
                               rtol=1e-12)
    np.testing.assert_array_equal(xt.grad.numpy()[0, 0], [[4, 6, 6, 4], [6, 9, 9, 6],
                                                          [6, 9, 9, 6], [4, 6, 6, 4]])


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("operand", ["x", "w", "g"])
@pytest.mark.parametrize("corner", [0, -1])
@pytest.mark.parametrize("stride", [1, 2])
def test_one_inf_operand_gives_inf_exactly_where_it_is_multiplied(path, operand, corner,
                                                                  stride):
    """Positive x, w and g with their first or last element (``corner``: an x column that
    the scratch columns read, a tap or an output that meets the padding) of ``operand``
    set to inf (padding 1): every
    result that some product of the definition forms with it is inf, every other one
    is the finite result with that element set to 0, and nothing is NaN: the padding and
    the kernels' own zero buffers contribute no 0 * inf. ``touched`` is where the result
    with the element set to 1 differs from the one with it set to 0."""
    rng = np.random.default_rng(22)
    arrays = {"x": rng.uniform(0.5, 1.5, (2, 3, 5, 6)), "w": rng.uniform(0.5, 1.5, (4, 3, 3, 3))}
    y_shape = ref_conv2d(arrays["x"], arrays["w"], None, (stride, stride), (1, 1, 1, 1),
                         (1, 1), 1).shape
    arrays["g"] = rng.uniform(0.5, 1.5, y_shape)
    at = (corner,) * 4

    def results(value):
        a = {k: v.copy() for k, v in arrays.items()}
        a[operand][at] = value
        return a, ref_conv2d(a["x"], a["w"], None, (stride, stride), (1, 1, 1, 1), (1, 1), 1,
                             g=a["g"])[:3]

    zeroed, one = results(0.0)[1], results(1.0)[1]
    a, _ = results(np.inf)
    xt, wt = nb.tensor(a["x"], requires_grad=True), nb.tensor(a["w"], requires_grad=True)
    with kernel_path(path):
        nb.conv2d(xt, wt, padding=1, stride=stride).backward(a["g"])
        got = (nb.conv2d(a["x"], a["w"], padding=1, stride=stride).numpy(), xt.grad.numpy(),
               wt.grad.numpy())
    for name, r, z, o in zip(("y", "dx", "dw"), got, zeroed, one):
        expected = np.where(o != z, np.inf, z)
        np.testing.assert_allclose(r, expected, rtol=1e-12, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("path", PATHS)
def test_no_input_channels_gives_the_bias(path):
    """x with C = 0 (w [F, 0, KH, KW]): every sum over channels is empty, so y = b
    ([N, F, OH, OW]), db = g summed, dx and dw are empty. (PyTorch returns an empty
    [N, 0, OH, OW] output here instead; nbgrad keeps the shape of the definition.)"""
    rng = np.random.default_rng(23)
    b = rng.standard_normal(3)
    g = rng.standard_normal((2, 3, 5, 4))
    with kernel_path(path):
        y, dx, dw, db = conv_all_grads(lambda x, w, b: nb.conv2d(x, w, b, padding=(1, 0)),
                                        np.zeros((2, 0, 5, 6)), np.zeros((3, 0, 3, 3)), b, g)
    np.testing.assert_array_equal(y, np.broadcast_to(b[:, None, None], (2, 3, 5, 4)))
    assert dx.shape == (2, 0, 5, 6) and dw.shape == (3, 0, 3, 3)
    np.testing.assert_allclose(db, g.sum(axis=(0, 2, 3)), rtol=1e-14)
