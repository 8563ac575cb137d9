"""The convolution kernels at kernel level, against the direct loop nests: the implicit
GEMM and the stride-1 span kernels over drawn parameters, slots and many tiles, the
offset products they run on, and the 'cols' kernels (every weight-gradient form, the kept
im2col matrices, the im2col gather and both col2im forms, a partial block)."""

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads, draw_conv_operands, pair
from hypothesis import given
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.kernels import conv as K
from nbgrad.kernels import conv_cols, conv_gemm, conv_s1, gemm
from nbgrad.kernels.activation import ACTIVATIONS, NO_ACTIVATION
from nbgrad.ops import conv_plan
from nbgrad.ops.conv import FAMILIES
from nbgrad.testing.strategies_conv import conv2d_configs


@given(cfg=conv2d_configs(max_groups=3, max_channels_per_group=4, max_filters_per_group=5),
       dtype=st.sampled_from([np.float32, np.float64]), slots=st.integers(1, 3))
def test_gemm_kernels_match_direct(cfg, dtype, slots):
    """The implicit-GEMM fast path against the direct loop nests, at kernel level."""
    x, w, _ = draw_conv_operands(cfg, dtype=dtype)
    b = np.random.default_rng(2).standard_normal(w.shape[0]).astype(dtype)
    (sh, sw), (dh, dw), (ph, pw) = (pair(cfg[k]) for k in ("stride", "dilation", "padding"))
    geom = (sh, sw, ph, pw, dh, dw, cfg["groups"])
    N, C, H, W = x.shape
    F, _, KH, KW = w.shape
    OH, OW = (H + 2 * ph - dh * (KH - 1) - 1) // sh + 1, (W + 2 * pw - dw * (KW - 1) - 1) // sw + 1
    g = np.random.default_rng(3).standard_normal((N, F, OH, OW)).astype(dtype)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    pairs = [
        (K.conv2d_forward_direct(x, w, b, *geom, OH, OW, NO_ACTIVATION),
         conv_gemm.conv2d_forward_gemm(x, w, b, *geom, OH, OW, slots, NO_ACTIVATION)),
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
    x, w, _ = draw_conv_operands(cfg, dtype=dtype)
    b = np.random.default_rng(2).standard_normal(w.shape[0]).astype(dtype)
    (dh, dw), (ph, pw) = (pair(cfg[k]) for k in ("dilation", "padding"))
    N, C, H, W = x.shape
    F, _, KH, KW = w.shape
    OH, OW = H + 2 * ph - dh * (KH - 1), W + 2 * pw - dw * (KW - 1)
    g = np.random.default_rng(3).standard_normal((N, F, OH, OW)).astype(dtype)
    geom = (ph, pw, dh, dw, cfg["groups"])
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    pairs = [
        (K.conv2d_forward_direct(x, w, b, 1, 1, *geom, OH, OW, NO_ACTIVATION),
         conv_s1.conv2d_forward_s1(x, w, b, *geom, OH, OW, slots, NO_ACTIVATION)),
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
    direct = (K.conv2d_forward_direct(x, w, b, *geom, 4, 6, NO_ACTIVATION),
              K.conv2d_input_grad_direct(g, w, np.empty(x.shape), *geom),
              K.conv2d_weight_grad_direct(x, g, 3, 2, *geom))

    def implicit_gemm():
        return (conv_gemm.conv2d_forward_gemm(x, w, b, *geom, 4, 6, slots, NO_ACTIVATION),
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
        (K.conv2d_forward_direct(x, w, b, *geom, OH, OW, NO_ACTIVATION),
         conv_gemm.conv2d_forward_gemm(x, w, b, *geom, OH, OW, 2, NO_ACTIVATION)),
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
        plain = conv_cols.conv2d_forward_cols(x, w, b, *geom, OH, OW, B, slots, none,
                                              NO_ACTIVATION)
        keeping = conv_cols.conv2d_forward_cols(x, w, b, *geom, OH, OW, B, slots, kept,
                                                NO_ACTIVATION)
        assert_same_bits(keeping, plain)
        assert not np.isnan(kept).any()
        gathered = conv_cols.conv2d_weight_grad_cols(x, g, 3, 2, *geom, B, slots, form, none)
        reused = conv_cols.conv2d_weight_grad_cols(x, g, 3, 2, *geom, B, slots, form, kept)
        assert_same_bits(reused, gathered)


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
    rng = np.random.default_rng(21)
    n = conv_plan.COLS_BLOCK // 16 + 1  # 4x4 maps: one full block and one of a single image
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




@given(cfg=conv2d_configs(max_groups=2, max_channels_per_group=3, max_filters_per_group=4,
                          max_stride=1),
       family=st.sampled_from(["direct", "s1", "gemm", "cols", "pointwise"]),
       activation=st.sampled_from(sorted(ACTIVATIONS)),
       dtype=st.sampled_from([np.float32, np.float64]), parallel=st.booleans(),
       slots=st.integers(1, 3), block=st.integers(1, 3))
def test_every_forward_family_applies_the_activation_as_the_op_does(
        cfg, family, activation, dtype, parallel, slots, block):
    """A family's forward given an activation code is the activation op on its forward
    without one, bit for bit: every family, both forms, 1 to 3 slots, 'cols' over
    blocks of 1 to 3 images, a zero bias (which 'pointwise' otherwise skips)."""
    if family == "pointwise":   # 1x1 kernels at stride 1 without padding
        N, C = cfg["x_shape"][:2]
        cfg = dict(cfg, w_shape=(cfg["w_shape"][0], C, 1, 1), groups=1, padding=(0, 0),
                   dilation=(1, 1))
    x, w, b = draw_conv_operands(cfg, dtype=dtype)
    b = np.zeros(w.shape[0], dtype) if b is None else b
    (dh, dw), (ph, pw) = pair(cfg["dilation"]), pair(cfg["padding"])
    _, _, H, W = x.shape
    KH, KW = w.shape[2:]
    out_hw = (H + 2 * ph - dh * (KH - 1), W + 2 * pw - dw * (KW - 1))
    geometry = conv_plan.conv_geometry((1, 1), (ph, ph, pw, pw), (dh, dw), cfg["groups"],
                                       (KH, KW), out_hw)
    run = K.KernelRun(parallel, slots, block)
    kernels = FAMILIES[family]
    plain = kernels.forward(x, w, b, geometry, run, NO_ACTIVATION)
    activated = kernels.forward(x, w, b, geometry, run, ACTIVATIONS[activation])
    assert_same_bits(activated, getattr(nb, activation)(nb.tensor(plain)).numpy())
