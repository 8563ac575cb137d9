"""conv2d, conv1d, conv_transpose2d: gradchecks over drawn parameters, NumPy loop
references, the adjoint identities, direct vs fast kernels, PyTorch oracle, threads,
bad input."""

import numpy as np
import pytest
from conftest import PATHS, assert_same_bits, at_threads, kernel_form, kernel_path
from hypothesis import given
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.kernels import conv as K
from nbgrad.kernels import conv_cols, conv_gemm, conv_s1, gemm
from nbgrad.ops import conv as conv_ops
from nbgrad.testing import check_registered, gradcheck
from nbgrad.testing.strategies_conv import (
    conv1d_configs,
    conv2d_configs,
    conv_transpose2d_configs,
)


def _pad4(padding):
    ph, pw = (padding, padding) if isinstance(padding, int) else padding
    return (ph, ph, pw, pw)


def _draw(cfg, seed=0, dtype=np.float64):
    """x, w and (if cfg["bias"]) b for a config; transposed configs have output_padding
    and F = w.shape[1] * groups output channels."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(cfg["x_shape"]).astype(dtype)
    w = rng.standard_normal(cfg["w_shape"]).astype(dtype)
    F = w.shape[1] * cfg["groups"] if "output_padding" in cfg else w.shape[0]
    b = rng.standard_normal(F).astype(dtype) if cfg["bias"] else None
    return x, w, b


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


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


# -- gradchecks over drawn parameters -----------------------------------------------------
@pytest.mark.parametrize("path", PATHS)
@given(cfg=conv2d_configs(max_batch=1, max_extra=2))
def test_conv2d_gradcheck(path, cfg):
    x, w, b = _draw(cfg)
    with kernel_path(path):
        gradcheck(lambda x, w, b: nb.conv2d(x, w, b, **_conv_kwargs(cfg)), [x, w, b])


@given(cfg=conv1d_configs())
def test_conv1d_gradcheck(cfg):
    x, w, b = _draw(cfg)
    gradcheck(lambda x, w, b: nb.conv1d(x, w, b, **_conv_kwargs(cfg)), [x, w, b])


@pytest.mark.parametrize("path", PATHS)
@given(cfg=conv_transpose2d_configs(max_batch=1, max_side=3))
def test_conv_transpose2d_gradcheck(path, cfg):
    x, w, b = _draw(cfg)
    kw = {k: cfg[k] for k in ("stride", "padding", "output_padding", "groups", "dilation")}
    with kernel_path(path):
        gradcheck(lambda x, w, b: nb.conv_transpose2d(x, w, b, **kw), [x, w, b])


# -- against the NumPy references ---------------------------------------------------------
@pytest.mark.parametrize("path", PATHS)
@given(cfg=conv2d_configs(max_groups=3, max_channels_per_group=3, max_filters_per_group=5))
def test_conv2d_matches_reference(path, cfg):
    x, w, b = _draw(cfg)
    g = None
    with kernel_path(path):
        xt, wt = nb.tensor(x, requires_grad=True), nb.tensor(w, requires_grad=True)
        bt = None if b is None else nb.tensor(b, requires_grad=True)
        y = nb.conv2d(xt, wt, bt, **_conv_kwargs(cfg))
        g = np.random.default_rng(1).standard_normal(y.shape)
        y.backward(g)
    y_ref, dx, dw, db = ref_conv2d(x, w, b, _pair(cfg["stride"]), _pad4(cfg["padding"]),
                                   _pair(cfg["dilation"]), cfg["groups"], g)
    np.testing.assert_allclose(y.numpy(), y_ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(xt.grad.numpy(), dx, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(wt.grad.numpy(), dw, rtol=1e-12, atol=1e-12)
    if b is not None:
        np.testing.assert_allclose(bt.grad.numpy(), db, rtol=1e-12, atol=1e-12)


def test_small_map_paths():
    """Stride 1 with 16 filters or more takes 'cols' on maps of up to 8x8 whatever its taps
    (ops/conv.py: COLS_S1_MAX_MAP); the span kernels on a 10x10 map with few taps or with
    fewer filters."""
    geom = (1, 1, 1, 1, 1, 1, 1)
    assert conv_ops._kernel_path((16, 1, 3, 3), geom, (8, 8)) == "cols"
    assert conv_ops._kernel_path((16, 1, 3, 3), geom, (10, 10)) == "s1"
    assert conv_ops._kernel_path((8, 3, 3, 3), geom, (8, 8)) == "s1"


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
    x, w, b = _draw(cfg)
    kw = {k: cfg[k] for k in ("stride", "padding", "output_padding", "groups", "dilation")}
    y = nb.conv_transpose2d(x, w, b, **kw).numpy()
    ref = ref_conv_transpose2d(x, w, b, *(_pair(cfg[k]) for k in
                                          ("stride", "padding", "output_padding")),
                               cfg["groups"], _pair(cfg["dilation"]))
    np.testing.assert_allclose(y, ref, rtol=1e-12, atol=1e-12)


@given(cfg=conv2d_configs(max_groups=3, max_channels_per_group=4, max_filters_per_group=5),
       dtype=st.sampled_from([np.float32, np.float64]), slots=st.integers(1, 3))
def test_gemm_kernels_match_direct(cfg, dtype, slots):
    """The implicit-GEMM fast path against the direct loop nests, at kernel level."""
    x, w, _ = _draw(cfg, dtype=dtype)
    b = np.random.default_rng(2).standard_normal(w.shape[0]).astype(dtype)
    (sh, sw), (dh, dw), (ph, pw) = (_pair(cfg[k]) for k in ("stride", "dilation", "padding"))
    geom = (sh, sw, ph, pw, dh, dw, cfg["groups"])
    N, C, H, W = x.shape
    F, _, KH, KW = w.shape
    OH, OW = (H + 2 * ph - dh * (KH - 1) - 1) // sh + 1, (W + 2 * pw - dw * (KW - 1) - 1) // sw + 1
    g = np.random.default_rng(3).standard_normal((N, F, OH, OW)).astype(dtype)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    pairs = [
        (K.conv2d_forward_direct(x, w, b, *geom, OH, OW),
         conv_gemm.conv2d_forward_gemm(x, w, b, *geom, OH, OW, slots)),
        (K.conv2d_input_grad_direct(g, w, np.full(x.shape, np.nan, dtype), *geom),
         conv_gemm.conv2d_input_grad_gemm(g, w, np.full(x.shape, np.nan, dtype), *geom, slots)),
        (K.conv2d_weight_grad_direct(x, g, KH, KW, *geom),
         conv_gemm.conv2d_weight_grad_gemm(x, g, KH, KW, *geom, slots)),
    ]
    for direct, fast in pairs:
        assert direct.dtype == fast.dtype == dtype
        np.testing.assert_allclose(fast, direct, **tol)


@given(cfg=conv2d_configs(max_groups=3, max_channels_per_group=3, max_filters_per_group=3,
                          max_stride=1),
       dtype=st.sampled_from([np.float32, np.float64]), slots=st.integers(1, 3))
def test_s1_kernels_match_direct(cfg, dtype, slots):
    """The stride-1 padded-plane kernels against the direct loop nests, their tasks
    shared out over 1 to 3 slots of scratch."""
    x, w, _ = _draw(cfg, dtype=dtype)
    b = np.random.default_rng(2).standard_normal(w.shape[0]).astype(dtype)
    (dh, dw), (ph, pw) = (_pair(cfg[k]) for k in ("dilation", "padding"))
    N, C, H, W = x.shape
    F, _, KH, KW = w.shape
    OH, OW = H + 2 * ph - dh * (KH - 1), W + 2 * pw - dw * (KW - 1)
    g = np.random.default_rng(3).standard_normal((N, F, OH, OW)).astype(dtype)
    geom = (ph, pw, dh, dw, cfg["groups"])
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    pairs = [
        (K.conv2d_forward_direct(x, w, b, 1, 1, *geom, OH, OW),
         conv_s1.conv2d_forward_s1(x, w, b, *geom, OH, OW, slots)),
        (K.conv2d_input_grad_direct(g, w, np.full(x.shape, np.nan, dtype), 1, 1, *geom),
         conv_s1.conv2d_input_grad_s1(g, w, np.full(x.shape, np.nan, dtype), *geom, slots)),
        (K.conv2d_weight_grad_direct(x, g, KH, KW, 1, 1, *geom),
         conv_s1.conv2d_weight_grad_s1(x, g, KH, KW, *geom, slots)),
    ]
    # the fused backward: all three gradients, and dw, db alone
    fused_dx, fused_dw, fused_db = conv_s1.conv2d_backward_s1(x, g, w, *geom, True, slots)
    _, alone_dw, alone_db = conv_s1.conv2d_backward_s1(x, g, w, *geom, False, slots)
    pairs += [(pairs[1][0], fused_dx), (pairs[2][0], fused_dw), (pairs[2][0], alone_dw),
              (K.conv2d_bias_grad(g), fused_db), (K.conv2d_bias_grad(g), alone_db)]
    for direct, fast in pairs:
        assert direct.dtype == fast.dtype == dtype
        np.testing.assert_allclose(fast, direct, **tol)


@pytest.mark.parametrize("slots", [1, 2, 3])
def test_gemm_over_more_images_than_slots(slots):
    """Images go through the scratch slots in rounds (5 images, 1 to 3 slots), at 1 and 2
    threads; the results match the direct kernels and do not depend on either."""
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((5, 6, 6, 7)), rng.standard_normal((10, 3, 3, 2))
    b = rng.standard_normal(10)
    g = rng.standard_normal((5, 10, 4, 6))
    geom = (1, 1, 0, 0, 1, 1, 2)
    direct = (K.conv2d_forward_direct(x, w, b, *geom, 4, 6),
              K.conv2d_input_grad_direct(g, w, np.empty(x.shape), *geom),
              K.conv2d_weight_grad_direct(x, g, 3, 2, *geom))

    def implicit_gemm():
        return (conv_gemm.conv2d_forward_gemm(x, w, b, *geom, 4, 6, slots),
                conv_gemm.conv2d_input_grad_gemm(g, w, np.full(x.shape, np.nan), *geom, slots),
                conv_gemm.conv2d_weight_grad_gemm(x, g, 3, 2, *geom, slots))
    one, two = at_threads(1, implicit_gemm), at_threads(2, implicit_gemm)
    for a, c, d in zip(one, two, direct):
        assert_same_bits(a, c)
        np.testing.assert_allclose(a, d, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("stride, dilation, padding, groups", [
    ((1, 1), (1, 1), (1, 1), 1), ((2, 3), (2, 1), (0, 2), 1), ((3, 2), (1, 3), (2, 1), 2)])
def test_gemm_kernels_match_direct_over_many_tiles(stride, dilation, padding, groups):
    """Shapes spanning several micro-tiles in every direction (F, C*KH*KW, the plane
    length), and strides that split the input into several phase planes."""
    rng = np.random.default_rng(11)
    x, w = rng.standard_normal((3, 10, 37, 41)), rng.standard_normal((14, 10 // groups, 3, 4))
    b = rng.standard_normal(14)
    (sh, sw), (dh, dw), (ph, pw) = stride, dilation, padding
    geom = (sh, sw, ph, pw, dh, dw, groups)
    OH = (37 + 2 * ph - dh * 2 - 1) // sh + 1
    OW = (41 + 2 * pw - dw * 3 - 1) // sw + 1
    g = rng.standard_normal((3, 14, OH, OW))
    pairs = [
        (K.conv2d_forward_direct(x, w, b, *geom, OH, OW),
         conv_gemm.conv2d_forward_gemm(x, w, b, *geom, OH, OW, 2)),
        (K.conv2d_input_grad_direct(g, w, np.empty(x.shape), *geom),
         conv_gemm.conv2d_input_grad_gemm(g, w, np.full(x.shape, np.nan), *geom, 2)),
        (K.conv2d_weight_grad_direct(x, g, 3, 4, *geom),
         conv_gemm.conv2d_weight_grad_gemm(x, g, 3, 4, *geom, 2)),
    ]
    for direct, fast in pairs:
        np.testing.assert_allclose(fast, direct, rtol=1e-12, atol=1e-11)


@given(tiles=st.tuples(st.integers(1, 3), st.integers(0, 12), st.integers(1, 3)),
       overlap=st.booleans(), dtype=st.sampled_from([np.float32, np.float64]))
def test_offset_gemm_matches_loops(tiles, overlap, dtype):
    """out[i, j] = sum_k a[a_row[i] + k] * b[b_row[k] + j], on plain row-major matrices
    and on rows that start at arbitrary, overlapping offsets (as the conv planes do)."""
    (mt, K, pt), rng = tiles, np.random.default_rng(sum(tiles) + 7 * overlap)
    M, P = mt * gemm.MR, pt * gemm.NR
    a = rng.standard_normal(M * K + 9).astype(dtype)
    b = rng.standard_normal(K * P + 9).astype(dtype)
    if overlap:
        a_row = rng.integers(0, a.size - K + 1, M)
        b_row = rng.integers(0, b.size - P + 1, K)
    else:
        a_row, b_row = np.arange(M) * K, np.arange(K) * P
    out = np.full((M, P), np.nan, dtype)
    gemm.offset_gemm(a, a_row, b, b_row, K, out)
    ref = np.zeros((M, P))
    for k in range(K):
        ref += np.outer(a[a_row + k], b[b_row[k]: b_row[k] + P])
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)


@given(spans=st.integers(1, 3), K=st.integers(0, 12),
       dtype=st.sampled_from([np.float32, np.float64]))
def test_offset_gemv_matches_loops(spans, K, dtype):
    """out[i, j] = sum_k w[i, k] * b[b_row[k] + j] on arbitrary, overlapping row starts,
    for 0 to 3 rows of w."""
    rng = np.random.default_rng(spans * 100 + K)
    P, M = spans * gemm.SPAN, spans - 1 + K % 2
    w, b = rng.standard_normal((M, K)).astype(dtype), rng.standard_normal(P + 50).astype(dtype)
    b_row = rng.integers(0, 51, K)
    out = np.full((M, P), np.nan, dtype)
    gemm.offset_gemv(w, b, b_row, K, out)
    ref = np.zeros((M, P))
    for i in range(M):
        for k in range(K):
            ref[i] += w[i, k] * b[b_row[k]: b_row[k] + P].astype(np.float64)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)
    with pytest.raises(ValueError, match="outside its buffer"):
        gemm.offset_gemv(w[:, :1], b, np.array([51]), 1, out)


def test_offset_gemm_rejects_rows_outside_buffers():
    a, b = np.zeros(gemm.MR * 4), np.zeros(4 * gemm.NR)
    rows_a, rows_b = np.arange(gemm.MR) * 4, np.arange(4) * gemm.NR
    out = np.empty((gemm.MR, gemm.NR))
    with pytest.raises(ValueError, match="outside its buffer"):
        gemm.offset_gemm(a, rows_a + 1, b, rows_b, 4, out)
    with pytest.raises(ValueError, match="outside its buffer"):
        gemm.offset_gemm(a, rows_a, b, rows_b - 1, 4, out)
    with pytest.raises(ValueError, match="multiple"):
        gemm.offset_gemm(a, rows_a, b, rows_b, 4, np.empty((gemm.MR, gemm.NR - 1)))


# -- adjoint identities (docs/derivations.md) ----------------------------------------------------
@pytest.mark.parametrize("path", PATHS)
@given(cfg=conv2d_configs(max_groups=3, max_filters_per_group=3))
def test_adjoint_identities(path, cfg):
    """<conv(x; w), g> = <x, conv_input_grad(g; w)> = <w, conv_weight_grad(x, g)>, and
    conv_transpose2d is the adjoint of conv2d with the same geometry."""
    x, w, _ = _draw(cfg)
    stride, dilation, pad4 = _pair(cfg["stride"]), _pair(cfg["dilation"]), _pad4(cfg["padding"])
    geom = conv_ops._geometry(stride, pad4, dilation, cfg["groups"])
    with kernel_path(path):
        y = nb.conv2d(x, w, **_conv_kwargs(cfg)).numpy()
        g = np.random.default_rng(5).standard_normal(y.shape)
        lhs = np.vdot(y, g)
        dx = conv_ops.conv2d_input_grad(g, w, x.shape[2:], geom)
        dw = conv_ops.conv2d_weight_grad(x, g, w.shape, geom)
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
def _conv_all_grads(fn, x, w, b, g):
    xt, wt, bt = (nb.tensor(a, requires_grad=True) for a in (x, w, b))
    y = fn(xt, wt, bt)
    y.backward(g)
    return y.numpy(), xt.grad.numpy(), wt.grad.numpy(), bt.grad.numpy()


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
        one = at_threads(1, _conv_all_grads, fn, x, w, b, g)
        two = at_threads(2, _conv_all_grads, fn, x, w, b, g)
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
    x, w, b = _draw(cfg, dtype=dtype)
    kw = _conv_kwargs(cfg)
    with kernel_path(path):
        _check_against_torch(lambda x, w, b: nb.conv2d(x, w, b, **kw),
                             lambda x, w, b: torch.nn.functional.conv2d(x, w, b, **kw),
                             x, w, b, dtype)


@given(cfg=conv1d_configs(max_groups=3))
def test_conv1d_torch_oracle(cfg):
    torch = pytest.importorskip("torch")
    x, w, b = _draw(cfg)
    kw = _conv_kwargs(cfg)
    _check_against_torch(lambda x, w, b: nb.conv1d(x, w, b, **kw),
                         lambda x, w, b: torch.nn.functional.conv1d(x, w, b, **kw), x, w, b)


@pytest.mark.parametrize("path", PATHS)
@given(cfg=conv_transpose2d_configs(max_groups=3, max_side=5))
def test_conv_transpose2d_torch_oracle(path, cfg):
    torch = pytest.importorskip("torch")
    x, w, b = _draw(cfg)
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


# -- second derivatives ---------------------------------------------------------------------
@pytest.mark.parametrize("name", ["conv2d", "conv1d", "conv_transpose2d", "conv2d_weight_grad"])
def test_gradgradcheck_registered(name):
    for second_order in (False, True):
        report = check_registered(name, second_order=second_order)
        assert report.passed, "\n".join(report.failures)


def _sum_of_squares(ds):
    total = (ds[0] * ds[0]).sum()
    for d in ds[1:]:
        total = total + (d * d).sum()
    return total


def _check_second_derivatives_against_torch(ours, theirs, arrays):
    """grad of s = sum over the inputs of |dL/dinput|^2, L = sum(y^2), w.r.t. every input:
    ours (nb.grad with create_graph) against torch.autograd.grad (create_graph)."""
    torch = pytest.importorskip("torch")
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    y = theirs(*ts)
    first = torch.autograd.grad((y * y).sum(), ts, create_graph=True)
    expected = torch.autograd.grad(_sum_of_squares(first), ts)
    ns = [nb.tensor(a, requires_grad=True) for a in arrays]
    y = ours(*ns)
    first = nb.grad((y * y).sum(), ns, create_graph=True)
    for d, e in zip(first, torch.autograd.grad((theirs(*ts) ** 2).sum(), ts)):
        np.testing.assert_allclose(d.numpy(), e.numpy(), rtol=1e-10, atol=1e-10)
    got = nb.grad(_sum_of_squares(first), ns)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-10, atol=1e-10)


CONV2D_SECOND_ORDER = [
    ((2, 3, 5, 6), (4, 3, 3, 2), True, dict(stride=1, padding=1)),
    ((1, 4, 7, 6), (4, 2, 2, 3), True, dict(stride=(2, 1), padding=(1, 2), dilation=(2, 1),
                                            groups=2)),
    ((1, 8, 7, 7), (8, 4, 3, 2), False, dict(stride=2, groups=2)),
    ((3, 5, 5), (2, 3, 2, 2), True, dict(padding="same", dilation=2)),
]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("xs, ws, bias, kw", CONV2D_SECOND_ORDER)
def test_conv2d_second_derivative_torch_oracle(path, xs, ws, bias, kw):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(21)
    arrays = [rng.standard_normal(xs), rng.standard_normal(ws)]
    arrays += [rng.standard_normal(ws[0])] if bias else []
    with kernel_path(path):
        _check_second_derivatives_against_torch(
            lambda x, w, *b: nb.conv2d(x, w, *b, **kw),
            lambda x, w, *b: torch.nn.functional.conv2d(x, w, *b, **kw), arrays)


@pytest.mark.parametrize("xs, ws, kw", [
    ((2, 4, 3, 4), (4, 3, 3, 2), dict(stride=2, padding=1, output_padding=(1, 0))),
    ((1, 2, 3, 4), (2, 3, 2, 2), dict(stride=1, padding=1, output_padding=(1, 0), dilation=2)),
    ((4, 3, 3), (4, 2, 2, 3), dict(stride=(1, 3), groups=2)),
])
def test_conv_transpose2d_second_derivative_torch_oracle(xs, ws, kw):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(22)
    arrays = [rng.standard_normal(xs), rng.standard_normal(ws),
              rng.standard_normal(ws[1] * kw.get("groups", 1))]
    _check_second_derivatives_against_torch(
        lambda x, w, b: nb.conv_transpose2d(x, w, b, **kw),
        lambda x, w, b: torch.nn.functional.conv_transpose2d(x, w, b, **kw), arrays)


def test_conv1d_second_derivative_torch_oracle_and_one_element_tuples():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(23)
    arrays = [rng.standard_normal((2, 3, 9)), rng.standard_normal((4, 3, 3)),
              rng.standard_normal(4)]
    kw = dict(stride=(2,), padding=(1,), dilation=(1,))
    _check_second_derivatives_against_torch(
        lambda x, w, b: nb.conv1d(x, w, b, **kw),
        lambda x, w, b: torch.nn.functional.conv1d(x, w, b, **kw), arrays)
    assert_same_bits(nb.conv1d(*arrays, **kw).numpy(),
                     nb.conv1d(*arrays, stride=2, padding=1, dilation=1).numpy())
    with pytest.raises(TypeError, match=r"conv1d: stride must be an int or a one-element"):
        nb.conv1d(*arrays, stride=(2, 2))


def test_conv2d_hessian_vector_product_is_bilinear():
    """d/dx <dL/dw, v> for L = <conv2d(x, w), g> is conv_transpose2d(g, v): exact."""
    rng = np.random.default_rng(24)
    x = nb.tensor(rng.standard_normal((2, 3, 6, 5)), requires_grad=True)
    w = nb.tensor(rng.standard_normal((4, 3, 3, 3)), requires_grad=True)
    g, v = rng.standard_normal((2, 4, 3, 3)), rng.standard_normal((4, 3, 3, 3))
    (dw,) = nb.grad(nb.conv2d(x, w, stride=2, padding=1), [w], grad_outputs=[g],
                    create_graph=True)
    (hx,) = nb.grad((dw * nb.tensor(v)).sum(), [x])
    expected = nb.conv_transpose2d(g, v, stride=2, padding=1, output_padding=(1, 0))
    np.testing.assert_allclose(hx.numpy(), expected.numpy(), rtol=1e-12, atol=1e-12)


# -- serial and parallel forms, small maps, empty batch -------------------------------------
# digits-like small maps: 1 -> 16 channels on 8x8, 16 -> 32 on 4x4 (padding 1), and a
# strided 16 -> 8 on 6x6; batches that leave a partial block of images
SMALL_MAPS = [((37, 1, 8, 8), (16, 1, 3, 3), dict(padding=1)),
              ((37, 16, 4, 4), (32, 16, 3, 3), dict(padding=1)),
              ((21, 16, 6, 6), (8, 8, 3, 3), dict(stride=2, padding=1, groups=2))]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("xs, ws, kw", SMALL_MAPS)
def test_small_maps_serial_parallel_and_threads_bitwise(path, xs, ws, kw):
    """On small maps every kernel gives the same bits in its serial form and in its
    parallel form at 1 and 2 threads, and matches the direct loop nests."""
    rng = np.random.default_rng(20)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)

    def fn(x, w, b):
        return nb.conv2d(x, w, b, **kw)
    g = rng.standard_normal(fn(x, w, b).shape).astype(np.float32)
    with kernel_path(path):
        with kernel_form("serial"):
            serial = _conv_all_grads(fn, x, w, b, g)
        with kernel_form("parallel"):
            one = at_threads(1, _conv_all_grads, fn, x, w, b, g)
            two = at_threads(2, _conv_all_grads, fn, x, w, b, g)
    with kernel_path("direct"):
        reference = _conv_all_grads(fn, x.astype(np.float64), w.astype(np.float64),
                                    b.astype(np.float64), g.astype(np.float64))
    for s, a, c, r in zip(serial, one, two, reference):
        assert_same_bits(s, a)
        assert_same_bits(s, c)
        np.testing.assert_allclose(s, r, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("form", ["serial", "parallel"])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("xs, ws, kw", SMALL_MAPS[1:])
def test_empty_batch_gives_zero_gradients(form, path, xs, ws, kw):
    """N = 0: empty outputs and input gradients, zero weight and bias gradients (never
    uninitialised memory), on every path and form, for conv2d and conv_transpose2d."""
    rng = np.random.default_rng(21)
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)
    x = np.zeros((0,) + xs[1:], np.float32)
    with kernel_path(path), kernel_form(form):
        y = nb.conv2d(x, w, b, **kw)
        y_np, dx, dw, db = _conv_all_grads(lambda x, w, b: nb.conv2d(x, w, b, **kw), x, w, b,
                                           np.zeros(y.shape, np.float32))
        assert y_np.shape[0] == 0 and dx.shape == x.shape
        assert_same_bits(dw, np.zeros_like(w))
        assert_same_bits(db, np.zeros_like(b))
        u = np.zeros((0,) + (ws[0],) + xs[2:], np.float32)
        bt = rng.standard_normal(ws[1] * kw.get("groups", 1)).astype(np.float32)

        def tconv(u, w, b):
            return nb.conv_transpose2d(u, w, b, stride=kw.get("stride", 1),
                                       padding=kw["padding"], groups=kw.get("groups", 1))
        z = tconv(u, w, bt)
        _, du, dwt, dbt = _conv_all_grads(tconv, u, w, bt, np.zeros(z.shape, np.float32))
        assert du.shape == u.shape
        assert_same_bits(dwt, np.zeros_like(w))
        assert_same_bits(dbt, np.zeros_like(bt))


NO_COLS = np.empty((0, 0))  # the 'cols' kernels' "no kept im2col matrices"

WEIGHT_GRAD_FORMS = pytest.mark.parametrize(
    "form", [conv_cols.TAPS_FIRST, conv_cols.FILTERS_FIRST, conv_cols.DOTS],
    ids=["taps-first", "filters-first", "dots"])


@WEIGHT_GRAD_FORMS
@pytest.mark.parametrize("geom", [(1, 1, 1, 1, 1, 1, 1), (2, 1, 0, 2, 1, 2, 2)],
                         ids=["plain", "strided-dilated-groups"])
def test_cols_weight_grad_in_every_form_matches_direct(form, geom):
    """The op picks the parts' form from the shapes and the host's register tile, so a
    layer runs only one; each is checked here against the direct loop nests (float64,
    three blocks with a partial last one, slots 2)."""
    rng = np.random.default_rng(22)
    sh, sw, ph, pw, dh, dw, groups = geom
    x = rng.standard_normal((7, 4, 7, 9))  # w: [6, 4 // groups, 3, 2]
    OH = (7 + 2 * ph - dh * 2 - 1) // sh + 1
    OW = (9 + 2 * pw - dw * 1 - 1) // sw + 1
    g = rng.standard_normal((7, 6, OH, OW))
    direct = K.conv2d_weight_grad_direct(x, g, 3, 2, *geom)
    cols = conv_cols.conv2d_weight_grad_cols(x, g, 3, 2, *geom, 3, 2, form, NO_COLS)
    np.testing.assert_allclose(cols, direct, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("form", [conv_cols.TAPS_FIRST, conv_cols.DOTS],
                         ids=["taps-first", "dots"])
@pytest.mark.parametrize("geom", [(1, 1, 1, 1, 1, 1, 1), (2, 1, 0, 2, 1, 2, 2)],
                         ids=["plain", "strided-dilated-groups"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cols_weight_grad_from_the_forwards_kept_matrices_has_the_same_bits(form, geom,
                                                                           dtype):
    """The forward's kept im2col matrices (a row per block and group, a partial last
    block's unused columns zeroed) give the weight gradient that gathering them again
    gives, bit for bit, at 1 and 2 slots; the forward's y is unchanged by keeping."""
    rng = np.random.default_rng(24)
    sh, sw, ph, pw, dh, dw, groups = geom
    x = rng.standard_normal((7, 4, 7, 9)).astype(dtype)
    w = rng.standard_normal((6, 4 // groups, 3, 2)).astype(dtype)
    b = rng.standard_normal(6).astype(dtype)
    OH = (7 + 2 * ph - dh * 2 - 1) // sh + 1
    OW = (9 + 2 * pw - dw * 1 - 1) // sw + 1
    g = rng.standard_normal((7, 6, OH, OW)).astype(dtype)
    B, none = 3, NO_COLS.astype(dtype)
    kept = np.full((3 * groups, (4 // groups) * 6 * B * OH * OW), np.nan, dtype)
    for slots in (1, 2):
        plain = conv_cols.conv2d_forward_cols(x, w, b, *geom, OH, OW, B, slots, none)
        keeping = conv_cols.conv2d_forward_cols(x, w, b, *geom, OH, OW, B, slots, kept)
        assert_same_bits(keeping, plain)
        assert not np.isnan(kept).any()
        gathered = conv_cols.conv2d_weight_grad_cols(x, g, 3, 2, *geom, B, slots, form, none)
        reused = conv_cols.conv2d_weight_grad_cols(x, g, 3, 2, *geom, B, slots, form, kept)
        assert_same_bits(reused, gathered)


def test_conv2d_keeps_the_im2col_matrices_only_for_a_weight_gradient_it_can_feed():
    """cols_to_keep: a buffer on the 'cols' path for the taps-first and dots forms within
    COLS_KEEP_MAX_BYTES; none for filters-first, other paths or too many bytes; and the
    op keeps one only when w needs a gradient, whose value it then leaves unchanged."""
    geom = (1, 1, 1, 1, 1, 1, 1)
    x = np.zeros((64, 16, 8, 8), np.float32)
    kept = conv_ops.cols_to_keep(x, np.zeros((32, 16, 3, 3), np.float32), geom, (8, 8))
    assert kept.shape == (16, 16 * 9 * 4 * 64) and kept.dtype == np.float32
    narrow = np.zeros((64, 32, 4, 4), np.float32)  # 4x4 maps: filters first
    assert conv_ops._weight_grad_form((64, 32, 3, 3), 1, narrow.dtype, 4) == conv_cols.FILTERS_FIRST
    assert conv_ops.cols_to_keep(narrow, np.zeros((64, 32, 3, 3), np.float32), geom,
                                 (4, 4)) is None
    big = np.zeros((64, 16, 20, 20), np.float32)  # 400 positions: not 'cols'
    assert conv_ops.cols_to_keep(big, np.zeros((32, 16, 3, 3), np.float32), geom,
                                 (20, 20)) is None
    many = np.zeros((1024, 64, 8, 8), np.float32)  # 1024 * 576 * 64 * 4 bytes = 144 MiB
    assert conv_ops.cols_to_keep(many, np.zeros((64, 64, 3, 3), np.float32), geom,
                                 (8, 8)) is None
    rng = np.random.default_rng(25)
    x_np = rng.standard_normal((9, 16, 8, 8)).astype(np.float32)
    w_np = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
    for needs_w in (True, False):
        w = nb.tensor(w_np, requires_grad=needs_w)
        y = nb.conv2d(nb.tensor(x_np, requires_grad=not needs_w), w, padding=1)
        assert (y.grad_fn.kept_cols is not None) == needs_w
    y.sum().backward()
    w = nb.tensor(w_np, requires_grad=True)
    nb.conv2d(nb.tensor(x_np), w, padding=1).sum().backward()
    want = conv_ops._weight_grad_on("cols", x_np, np.ones((9, 32, 8, 8), np.float32),
                                    w_np.shape, geom)
    assert_same_bits(w.grad.numpy(), want)


@pytest.mark.parametrize("ow", [3, 9], ids=["column-offsets", "row-runs"])
@pytest.mark.parametrize("transposed", [False, True], ids=["Kg-P", "P-Kg"])
@pytest.mark.parametrize("geom", [(1, 1, 1, 1), (2, 1, 1, 2)], ids=["plain", "strided-dilated"])
def test_gather_cols_matches_numpy_im2col(ow, transposed, geom):
    """The loop nests of gather_cols (for [Kg, P], maps narrower than ROW_RUNS_MIN
    columns and wider ones; for the transpose, one row per column) against the im2col
    matrix indexed out of np.pad'ed planes; a partial block (2 of 3 images) leaves the
    other columns untouched."""
    assert (ow < conv_cols.ROW_RUNS_MIN) == (ow == 3)
    sh, sw, dh, dw = geom
    nb, B, Cg, KH, KW, OH = 2, 3, 2, 3, 2, 3
    Hp, Wp = conv_cols.padded_extent(OH, ow, KH, KW, sh, sw, dh, dw)
    rng = np.random.default_rng(9)
    xp = rng.standard_normal((nb, Cg, Hp, Wp))
    Kg, P = Cg * KH * KW, B * OH * ow
    want = np.full((Kg, P), -1.0)
    for cl in range(Cg):
        for kh in range(KH):
            for kw in range(KW):
                rows = xp[:, cl, kh * dh: kh * dh + (OH - 1) * sh + 1: sh,
                          kw * dw: kw * dw + (ow - 1) * sw + 1: sw]
                want[(cl * KH + kh) * KW + kw, : nb * OH * ow] = rows.reshape(-1)
    cols = np.full(Kg * P, -1.0)
    steps = (1, Kg) if transposed else (P, 1)
    conv_cols.gather_cols(xp.reshape(-1), nb, Cg, KH, KW, sh, sw, dh, dw, Hp, Wp, OH, ow,
                          cols, *steps)
    got = cols.reshape(P, Kg).T if transposed else cols.reshape(Kg, P)
    assert_same_bits(got, want)


@pytest.mark.parametrize("geom", [(1, 1, 1, 1, 1, 1), (2, 1, 0, 2, 1, 2), (1, 3, 2, 1, 2, 1)],
                         ids=["plain", "strided-dilated", "wide-stride"])
def test_col2im_gather_and_row_runs_give_the_same_bits(geom):
    """The input gradient's two col2im forms (a gather over input_taps on maps narrower
    than ROW_RUNS_MIN columns; row runs added into padded planes, then unpadded) add each
    input position's taps in the same order: the same bits, a partial block included,
    and zero at inputs no tap reads."""
    sh, sw, ph, pw, dh, dw = geom
    nb, B, Cg, KH, KW, H, W = 2, 3, 2, 3, 2, 7, 6
    OH = (H + 2 * ph - dh * (KH - 1) - 1) // sh + 1
    OW = (W + 2 * pw - dw * (KW - 1) - 1) // sw + 1
    Hp, Wp = conv_cols.padded_extent(OH, OW, KH, KW, sh, sw, dh, dw)
    M, P = OH * OW, B * OH * OW
    dcols = np.random.default_rng(23).standard_normal((Cg * KH * KW, P)).astype(np.float32)
    runs = np.full((nb, Cg, H, W), np.nan, np.float32)
    dxp = np.empty(nb * Cg * Hp * Wp, np.float32)
    conv_cols.scatter_cols(dcols, nb, Cg, KH, KW, sh, sw, dh, dw, Hp, Wp, OH, OW, dxp)
    conv_cols.unpad_block(dxp, runs, 0, nb, 0, Cg, ph, pw, Hp, Wp)
    gathered = np.full((nb, Cg, H, W), np.nan, np.float32)
    ptr, at = conv_cols.input_taps(H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, P)
    conv_cols.gather_input_grad(dcols.reshape(-1), ptr, at, nb, Cg, KH * KW, P, M, gathered,
                                0, 0)
    assert_same_bits(gathered, runs)
    read = np.zeros((H + 2 * ph + sh * OH, W + 2 * pw + sw * OW), bool)
    for kh in range(KH):
        for kw in range(KW):
            read[kh * dh: kh * dh + sh * OH: sh, kw * dw: kw * dw + sw * OW: sw] = True
    unread = ~read[ph: ph + H, pw: pw + W]
    assert unread.any() == (sh > KH * dh or sw > KW * dw)  # strides that skip inputs
    assert (gathered[:, :, unread] == 0).all()


@WEIGHT_GRAD_FORMS
def test_cols_partial_block_with_inf_matches_direct(form):
    """The last block of the 'cols' kernels holds fewer images than a full one; its unused
    columns must not reach the weight gradient (an inf left there by the previous
    block would turn 0 * inf into NaN), in every form of the parts. At kernel
    level: the op recomputes a non-finite weight gradient on the direct loop nests, so
    the kernel itself must get this right."""
    from nbgrad.ops.conv import COLS_BLOCK
    rng = np.random.default_rng(21)
    n = COLS_BLOCK // 16 + 1  # 4x4 maps: one full block and one of a single image
    x = rng.standard_normal((n, 3, 4, 4)).astype(np.float32)
    x[0, 1, 2, 2] = np.inf
    g = np.abs(rng.standard_normal((n, 5, 4, 4))).astype(np.float32)
    geom = (1, 1, 1, 1, 1, 1, 1)
    direct = K.conv2d_weight_grad_direct(x, g, 3, 3, *geom)
    cols = conv_cols.conv2d_weight_grad_cols(x, g, 3, 3, *geom, n - 1, 2, form,
                                             NO_COLS.astype(np.float32))
    np.testing.assert_array_equal(np.isnan(cols), np.isnan(direct))
    np.testing.assert_array_equal(np.isinf(cols), np.isinf(direct))
    finite = np.isfinite(direct)
    np.testing.assert_allclose(cols[finite], direct[finite], rtol=1e-4, atol=1e-4)


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
        y, dx, dw, db = _conv_all_grads(lambda x, w, b: nb.conv2d(x, w, b, padding=(1, 0)),
                                        np.zeros((2, 0, 5, 6)), np.zeros((3, 0, 3, 3)), b, g)
    np.testing.assert_array_equal(y, np.broadcast_to(b[:, None, None], (2, 3, 5, 4)))
    assert dx.shape == (2, 0, 5, 6) and dw.shape == (3, 0, 3, 3)
    np.testing.assert_allclose(db, g.sum(axis=(0, 2, 3)), rtol=1e-14)
