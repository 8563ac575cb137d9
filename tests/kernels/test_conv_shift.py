"""The input gradient over column-shifted copies of g (kernels/conv_shift.py): the kernel
against the direct loop nests over drawn geometries, slots and threads, inf and NaN, where
the plan takes it (ops/conv_plan.py), and the ops through it (gradchecks, PyTorch oracle)."""

from contextlib import contextmanager

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads
from hypothesis import assume, given
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.kernels import conv as K
from nbgrad.kernels import conv_shift
from nbgrad.ops import conv as conv_ops
from nbgrad.ops import conv_plan
from nbgrad.testing import gradcheck, gradgradcheck


@st.composite
def shift_geometries(draw):
    """(N, F, C, H, W, KH, KW, ph, pw, dh, dw): stride 1, 2 pw = (KW-1) dw < 2 W and
    ph <= (KH-1) dh, the geometries the kernel serves, on maps of any size."""
    KH, KW = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    assume((KW - 1) * dw % 2 == 0)
    pw = (KW - 1) * dw // 2
    W = draw(st.integers(pw + 1, pw + 6))
    ph = draw(st.integers(0, (KH - 1) * dh))
    H = draw(st.integers(max(1, (KH - 1) * dh - 2 * ph + 1), 7))
    return (draw(st.integers(0, 3)), draw(st.integers(1, 5)), draw(st.integers(1, 8)), H, W,
            KH, KW, ph, pw, dh, dw)


def _operands(geometry, dtype, seed=0):
    N, F, C, H, W, KH, KW, ph, pw, dh, dw = geometry
    OH = H + 2 * ph - (KH - 1) * dh
    rng = np.random.default_rng(seed)
    g = rng.standard_normal((N, F, OH, W)).astype(dtype)
    w = rng.standard_normal((F, C, KH, KW)).astype(dtype)
    return g, w


def _direct(g, w, geometry):
    N, F, C, H, W, KH, KW, ph, pw, dh, dw = geometry
    dx = np.empty((N, C, H, W), g.dtype)
    return K.conv2d_input_grad_direct(g, w, dx, 1, 1, ph, pw, dh, dw, 1)


def _shifted(g, w, geometry, slots):
    """The kernel, into a dx filled with NaN (so an element it leaves unwritten shows)."""
    N, F, C, H, W, KH, KW, ph, pw, dh, dw = geometry
    dx = np.full((N, C, H, W), np.nan, g.dtype)
    return conv_shift.conv2d_input_grad_shift(g, w, dx, ph, pw, dh, dw, slots)


@given(geometry=shift_geometries(), slots=st.integers(1, 3),
       dtype=st.sampled_from([np.float32, np.float64]))
def test_kernel_matches_the_direct_loop_nests(geometry, slots, dtype):
    g, w = _operands(geometry, dtype)
    got = _shifted(g, w, geometry, slots)
    expected = _direct(g.astype(np.float64), w.astype(np.float64), geometry)
    tol = 1e-5 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol * np.abs(w).sum())


@given(geometry=shift_geometries())
def test_same_bits_for_any_number_of_slots(geometry):
    g, w = _operands(geometry, np.float32, seed=1)
    one = _shifted(g, w, geometry, 1)
    for slots in (2, 3):
        assert_same_bits(_shifted(g, w, geometry, slots), one)


def test_shifted_planes_hold_g_shifted_and_zero_outside():
    """The planes of one image against their definition, G[kw, f, u, j] =
    g[n, f, u - T, j + pw - kw dw] (zero outside g), written with a loop."""
    F, OH, W, KW, pw, dw, T, Hg = 2, 3, 5, 3, 2, 2, 1, 5
    g = np.arange(2 * F * OH * W, dtype=np.float64).reshape(2, F, OH, W) + 1
    G = np.zeros(KW * F * Hg * W)
    conv_shift.shifted_planes(g, 1, KW, pw, dw, T, Hg, G)
    expected = np.zeros((KW, F, Hg, W))
    for kw in range(KW):
        for f in range(F):
            for u in range(Hg):
                for j in range(W):
                    r, c = u - T, j + pw - kw * dw
                    if 0 <= r < OH and 0 <= c < W:
                        expected[kw, f, u, j] = g[1, f, r, c]
    np.testing.assert_array_equal(G.reshape(KW, F, Hg, W), expected)


@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan])
def test_inf_and_nan_in_g_reach_the_positions_the_definition_gives(value):
    """Where g holds an inf or a NaN, the kernel's dx has NaN, +-inf and finite values
    exactly where the direct loop nests' has (its extra products are zeros times a
    finite w), at the corner and inside the map."""
    geometry = (2, 3, 4, 8, 8, 3, 3, 1, 1, 1, 1)
    g, w = _operands(geometry, np.float64, seed=2)
    g[0, 1, 0, 0] = value
    g[1, 2, 4, 5] = value
    got, expected = _shifted(g, w, geometry, 2), _direct(g, w, geometry)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(expected))
    finite = np.isfinite(expected)
    assert not finite.all() and finite.any()
    np.testing.assert_allclose(got[finite], expected[finite], rtol=1e-13, atol=1e-13)


# -- where the plan takes it ----------------------------------------------------------------
SAME_3X3 = (1, 1, 1, 1, 1, 1, 1)  # stride, padding, dilation (per axis), groups


@pytest.mark.parametrize("w_shape, geom, in_hw, dtype, takes", [
    ((32, 16, 3, 3), SAME_3X3, (8, 8), np.float32, True),
    ((32, 16, 3, 3), SAME_3X3, (16, 16), np.float32, True),
    ((8, 64, 5, 5), (1, 1, 2, 2, 1, 1, 1), (4, 16), np.float32, True),
    ((8, 12, 3, 3), (1, 1, 0, 2, 1, 2, 1), (8, 8), np.float32, True),  # valid rows
    ((32, 16, 3, 3), SAME_3X3, (8, 8), np.float64, False),  # the tile spills in float64
    ((32, 16, 3, 3), (2, 2, 1, 1, 1, 1, 1), (8, 8), np.float32, False),  # stride 2
    ((32, 8, 3, 3), (1, 1, 1, 1, 1, 1, 2), (8, 8), np.float32, False),  # two groups
    ((32, 16, 3, 3), (1, 1, 1, 0, 1, 1, 1), (8, 8), np.float32, False),  # narrower output
    ((32, 16, 3, 3), (1, 1, 3, 1, 1, 1, 1), (8, 8), np.float32, False),  # ph > (KH-1) dh
    ((32, 16, 3, 3), SAME_3X3, (4, 4), np.float32, False),  # less than a panel
    ((32, 16, 3, 3), SAME_3X3, (6, 6), np.float32, False),  # not whole panels
    ((32, 16, 3, 3), SAME_3X3, (32, 32), np.float32, False),  # above SHIFT_MAX_MAP
    ((32, 5, 3, 3), SAME_3X3, (8, 8), np.float32, False),  # 5 -> 6 or 8 rows: too many
    ((32, 1, 3, 3), SAME_3X3, (8, 8), np.float32, False),
])
def test_the_ops_take_the_shifted_planes_where_they_fit(w_shape, geom, in_hw, dtype, takes):
    assert conv_plan.shifted_input_grad(w_shape, _geometry(geom, w_shape, in_hw), in_hw,
                                        np.dtype(dtype)) == takes


def _geometry(geom, w_shape, in_hw):
    """The ConvGeometry of a conv2d of in_hw maps (padding geom[2:4] on both sides)."""
    sh, sw, ph, pw, dh, dw, _ = geom
    KH, KW = w_shape[2:]
    out_hw = ((in_hw[0] + 2 * ph - dh * (KH - 1) - 1) // sh + 1,
              (in_hw[1] + 2 * pw - dw * (KW - 1) - 1) // sw + 1)
    return K.ConvGeometry(*geom, KH, KW, *out_hw)


@contextmanager
def shifted_in(*dtypes):
    """Let the ops take the shifted planes for ``dtypes`` (float64 for the gradchecks)."""
    saved = conv_plan.SHIFT_DTYPES
    conv_plan.SHIFT_DTYPES = dtypes
    try:
        yield
    finally:
        conv_plan.SHIFT_DTYPES = saved


@pytest.fixture
def shift_calls(monkeypatch):
    """The dx shapes of every call of the kernel while the test runs."""
    calls = []
    entry = conv_shift.input_grad

    def counted(g, w, dx, geometry, run):
        calls.append(dx.shape)
        return entry(g, w, dx, geometry, run)
    monkeypatch.setattr(conv_shift, "input_grad", counted)
    return calls


def test_conv2d_backward_takes_the_kernel(shift_calls):
    x = nb.tensor(np.ones((2, 12, 8, 8), np.float32), requires_grad=True)
    w = nb.tensor(np.ones((16, 12, 3, 3), np.float32))
    nb.conv2d(x, w, padding=1).sum().backward()
    assert shift_calls == [(2, 12, 8, 8)]


# 8x8 and 4x16 maps (64 positions), 'same' padding along the width, and 16 filters: the
# layers of the GEMM paths ('cols', 'gemm'), whose input gradient the shifted planes take
OP_CASES = [((2, 12, 8, 8), (16, 12, 3, 3), dict(padding=1)),
            ((2, 12, 4, 16), (16, 12, 3, 5), dict(padding=(0, 2))),
            ((1, 12, 8, 8), (16, 12, 2, 3), dict(padding=(1, 2), dilation=(1, 2)))]


@pytest.mark.parametrize("xs, ws, kw", OP_CASES)
def test_conv2d_gradchecks_through_the_shifted_planes(xs, ws, kw, shift_calls):
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal(xs), rng.standard_normal(ws)
    b = rng.standard_normal(ws[0])
    with shifted_in(np.float32, np.float64):
        gradcheck(lambda x, w, b: nb.conv2d(x, w, b, **kw), [x, w, b])
        assert shift_calls
        gradgradcheck(lambda x, w: nb.conv2d(x, w, **kw), [x[:1], w[:1]])


@pytest.mark.parametrize("xs, ws, kw", OP_CASES + [((64, 16, 8, 8), (32, 16, 3, 3),
                                                    dict(padding=1))])
def test_conv2d_input_gradient_against_torch_and_threads(xs, ws, kw):
    """float32 as the ops run it: PyTorch's input gradient, and the same bits at 1 and 2
    threads (the last case is large enough to run in two slots)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)

    def input_grad():
        xt = nb.tensor(x, requires_grad=True)
        y = nb.conv2d(xt, nb.tensor(w), **kw)
        y.backward(np.cos(np.arange(y.numpy().size, dtype=np.float32)).reshape(y.shape))
        return xt.grad.numpy()
    one, two = at_threads(1, input_grad), at_threads(2, input_grad)
    assert_same_bits(one, two)
    xt = torch.tensor(x, requires_grad=True)
    y = torch.nn.functional.conv2d(xt, torch.tensor(w), **kw)
    y.backward(torch.cos(torch.arange(y.numel(), dtype=torch.float32)).reshape(y.shape))
    np.testing.assert_allclose(one, xt.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_conv_transpose2d_forward_through_the_shifted_planes_matches_torch():
    """conv_transpose2d's forward is conv2d's input gradient: 16 -> 12 channels, 8x8."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 16, 8, 8)).astype(np.float32)
    w = rng.standard_normal((16, 12, 3, 3)).astype(np.float32)
    assert conv_plan.shifted_input_grad((16, 12, 3, 3), _geometry(SAME_3X3, (16, 12, 3, 3),
                                                                   (8, 8)),
                                        (8, 8), np.dtype(np.float32))
    ours = nb.conv_transpose2d(x, w, padding=1).numpy()
    theirs = torch.nn.functional.conv_transpose2d(torch.tensor(x), torch.tensor(w), padding=1)
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-4, atol=1e-4)


def test_non_finite_w_takes_the_direct_kernel(monkeypatch):
    """A w with an inf goes to the direct loop nests (0 * inf is NaN in the planes'
    zeros): the shifted kernel is not called, and dx is NaN only where the definition
    gives NaN."""
    monkeypatch.setattr(conv_shift, "input_grad", None)
    rng = np.random.default_rng(6)
    g = rng.standard_normal((2, 16, 8, 8)).astype(np.float32)
    w = rng.standard_normal((16, 12, 3, 3)).astype(np.float32)
    w[1, 2, 0, 0] = np.inf
    geometry = _geometry(SAME_3X3, w.shape, (8, 8))
    by_shapes = conv_plan.plan_conv(2, (8, 8), w.shape, geometry, w.dtype)
    assert by_shapes.input_grad.family == "shift"
    expected = _direct(g, w, (2, 16, 12, 8, 8, 3, 3, 1, 1, 1, 1))
    # w known to the plan (conv2d, conv_transpose2d), or checked by the call
    # (conv2d_weight_grad's backward)
    with_w = conv_plan.plan_conv(2, (8, 8), w.shape, geometry, w.dtype, w)
    for plan, step in [(with_w, with_w.input_grad),
                       (by_shapes, conv_plan.exact_step(by_shapes, by_shapes.input_grad, w))]:
        dx = conv_ops.conv2d_input_grad(g, w, plan, step)
        np.testing.assert_array_equal(np.isnan(dx), np.isnan(expected))
        assert np.isinf(dx[:, 2]).any() and np.isfinite(dx[:, :2]).all()
