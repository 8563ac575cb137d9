"""spectral_conv1d, spectral_conv2d (FNO's Fourier layer) and the SpectralConv1d/2d modules
(the FNO model: tests/nn/test_fno.py)."""

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads
from hypothesis import given, settings
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.nn.spectral import SpectralConv1d, SpectralConv2d
from nbgrad.testing import gradcheck, gradgradcheck


# -- NumPy references ---------------------------------------------------------------------
def conv1d_numpy(x, wr, wi):
    n, m = x.shape[-1], wr.shape[-1]
    X = np.fft.rfft(x)
    Y = np.zeros(x.shape[:1] + (wr.shape[1], n // 2 + 1), complex)
    Y[..., :m] = np.einsum("bix,iox->box", X[..., :m], wr + 1j * wi)
    return np.fft.irfft(Y, n=n)


def conv2d_numpy(x, wr, wi):
    B, _, H, W = x.shape
    m1, m2 = wr.shape[3:]
    X = np.fft.rfft2(x)
    w = wr + 1j * wi
    Y = np.zeros((B, wr.shape[2], H, W // 2 + 1), complex)
    Y[:, :, :m1, :m2] = np.einsum("bixy,ioxy->boxy", X[:, :, :m1, :m2], w[0])
    Y[:, :, H - m1:, :m2] = np.einsum("bixy,ioxy->boxy", X[:, :, H - m1:, :m2], w[1])
    return np.fft.irfft2(Y, s=(H, W))


def inputs(rng, x_shape, w_shape, dtype=np.float64):
    return [rng.standard_normal(s).astype(dtype) for s in (x_shape, w_shape, w_shape)]


def forward_backward(op, arrays, g):
    leaves = [nb.tensor(a, requires_grad=True) for a in arrays]
    y = op(*leaves)
    y.backward(g)
    return [y.numpy()] + [t.grad.numpy() for t in leaves]


# -- forward against NumPy ----------------------------------------------------------------
@pytest.mark.parametrize("n, modes", [(8, 3), (9, 5), (16, 9), (1, 1), (2, 2)])
def test_conv1d_forward_against_numpy(rng, n, modes):
    x, wr, wi = inputs(rng, (3, 4, n), (4, 2, modes))
    np.testing.assert_allclose(nb.spectral_conv1d(x, wr, wi).numpy(),
                               conv1d_numpy(x, wr, wi), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("hw, modes", [((8, 10), (3, 4)), ((7, 9), (3, 5)), ((6, 8), (3, 5)),
                                       ((2, 1), (1, 1)), ((16, 16), (1, 1))])
def test_conv2d_forward_against_numpy(rng, hw, modes):
    x, wr, wi = inputs(rng, (2, 3) + hw, (2, 3, 4) + modes)
    np.testing.assert_allclose(nb.spectral_conv2d(x, wr, wi).numpy(),
                               conv2d_numpy(x, wr, wi), rtol=1e-12, atol=1e-12)


def test_float32_matches_float64(rng):
    x, wr, wi = inputs(rng, (2, 3, 12, 10), (2, 3, 2, 4, 6))
    y64 = nb.spectral_conv2d(x, wr, wi).numpy()
    y32 = nb.spectral_conv2d(*[a.astype(np.float32) for a in (x, wr, wi)])
    assert y32.dtype == np.float32
    np.testing.assert_allclose(y32.numpy(), y64, rtol=1e-4, atol=1e-5)


def test_inputs_are_not_modified(rng):
    arrays = inputs(rng, (2, 3, 8, 6), (2, 3, 2, 3, 4))
    copies = [a.copy() for a in arrays]
    forward_backward(nb.spectral_conv2d, arrays, rng.standard_normal((2, 2, 8, 6)))
    for a, c in zip(arrays, copies):
        assert_same_bits(a, c)


def test_non_contiguous_inputs(rng):
    x, wr, wi = inputs(rng, (3, 2, 8, 6), (2, 2, 3, 2, 3))
    xt = np.ascontiguousarray(x.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)
    wr_strided = np.repeat(wr, 2, axis=-1)[..., ::2]
    assert not xt.flags.c_contiguous and not wr_strided.flags.c_contiguous
    np.testing.assert_allclose(nb.spectral_conv2d(xt, wr_strided, wi).numpy(),
                               conv2d_numpy(x, wr, wi), rtol=1e-12, atol=1e-12)


# -- hypothesis: odd/even grids, modes up to the limit -------------------------------------
@settings(max_examples=30)
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.integers(1, 12),
       st.integers(1, 11), st.data())
def test_conv2d_property_against_numpy(b, cin, cout, h, w, data):
    m1 = data.draw(st.integers(1, h // 2), label="m1") if h >= 2 else 0
    m2 = data.draw(st.integers(1, w // 2 + 1), label="m2")
    if m1 == 0:  # H = 1 leaves no rows for two blocks: an error
        with pytest.raises(ValueError, match="modes1"):
            nb.spectral_conv2d(np.zeros((b, cin, h, w)), np.zeros((2, cin, cout, 1, m2)),
                               np.zeros((2, cin, cout, 1, m2)))
        return
    rng = np.random.default_rng(h * 100 + w)
    x, wr, wi = inputs(rng, (b, cin, h, w), (2, cin, cout, m1, m2))
    np.testing.assert_allclose(nb.spectral_conv2d(x, wr, wi).numpy(),
                               conv2d_numpy(x, wr, wi), rtol=1e-11, atol=1e-11)


@settings(max_examples=30)
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 40), st.data())
def test_conv1d_property_against_numpy_and_adjoint(cin, cout, n, data):
    m = data.draw(st.integers(1, n // 2 + 1), label="modes")
    rng = np.random.default_rng(n)
    x, wr, wi = inputs(rng, (2, cin, n), (cin, cout, m))
    g = rng.standard_normal((2, cout, n))
    y, dx, dwr, dwi = forward_backward(nb.spectral_conv1d, [x, wr, wi], g)
    np.testing.assert_allclose(y, conv1d_numpy(x, wr, wi), rtol=1e-11, atol=1e-11)
    # linear in x: <y(x), g> = <x, dx>; in w: <y(w), g> = <wr, dwr> + <wi, dwi>
    np.testing.assert_allclose(np.vdot(y, g), np.vdot(x, dx), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(np.vdot(y, g), np.vdot(wr, dwr) + np.vdot(wi, dwi),
                               rtol=1e-10, atol=1e-10)


# -- PyTorch oracle -----------------------------------------------------------------------
def torch_conv2d(torch, x, wr, wi):
    B, _, H, W = x.shape
    m1, m2 = wr.shape[3], wr.shape[4]
    w = torch.complex(wr, wi)
    X = torch.fft.rfft2(x)
    Y = torch.zeros(B, wr.shape[2], H, W // 2 + 1, dtype=X.dtype)
    Y[:, :, :m1, :m2] = torch.einsum("bixy,ioxy->boxy", X[:, :, :m1, :m2], w[0])
    Y[:, :, -m1:, :m2] = torch.einsum("bixy,ioxy->boxy", X[:, :, -m1:, :m2], w[1])
    return torch.fft.irfft2(Y, s=(H, W))


def torch_conv1d(torch, x, wr, wi):
    n, m = x.shape[-1], wr.shape[-1]
    X = torch.fft.rfft(x)
    Y = torch.zeros(x.shape[0], wr.shape[1], n // 2 + 1, dtype=X.dtype)
    Y[..., :m] = torch.einsum("bix,iox->box", X[..., :m], torch.complex(wr, wi))
    return torch.fft.irfft(Y, n=n)


def torch_forward_backward(torch, fn, arrays, g):
    leaves = [torch.tensor(a, requires_grad=True) for a in arrays]
    y = fn(torch, *leaves)
    y.backward(torch.tensor(g))
    return [y.detach().numpy()] + [t.grad.numpy() for t in leaves]


CASES = [
    ("2d", (2, 3, 8, 10), (2, 3, 4, 3, 4)),
    ("2d", (1, 2, 7, 9), (2, 2, 3, 3, 5)),   # odd grid, every column
    ("2d", (2, 2, 6, 8), (2, 2, 2, 3, 5)),   # m1 = H/2, the Nyquist column
    ("1d", (3, 2, 10), (2, 3, 6)),           # the Nyquist mode
    ("1d", (2, 3, 11), (3, 2, 4)),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("kind, x_shape, w_shape", CASES)
def test_forward_and_backward_against_torch(rng, kind, x_shape, w_shape, dtype):
    torch = pytest.importorskip("torch")
    ours, theirs = ((nb.spectral_conv2d, torch_conv2d) if kind == "2d"
                    else (nb.spectral_conv1d, torch_conv1d))
    arrays = inputs(rng, x_shape, w_shape, dtype)
    cout = w_shape[2] if kind == "2d" else w_shape[1]
    g = rng.standard_normal((x_shape[0], cout) + x_shape[2:]).astype(dtype)
    tol = dict(rtol=1e-11, atol=1e-11) if dtype == np.float64 else dict(rtol=1e-4, atol=1e-4)
    for a, b in zip(forward_backward(ours, arrays, g),
                    torch_forward_backward(torch, theirs, arrays, g)):
        assert a.dtype == dtype
        np.testing.assert_allclose(a, b, **tol)


def test_second_derivative_against_torch(rng):
    torch = pytest.importorskip("torch")
    arrays = inputs(rng, (2, 2, 6, 7), (2, 2, 3, 2, 3))
    g = rng.standard_normal((2, 3, 6, 7))
    leaves = [nb.tensor(a, requires_grad=True) for a in arrays]
    y = nb.spectral_conv2d(*leaves)
    grads = nb.grad((y * nb.tensor(g)).sum(), leaves, create_graph=True)
    s = sum((d * d).sum() for d in grads)
    second = nb.grad(s, leaves)
    tleaves = [torch.tensor(a, requires_grad=True) for a in arrays]
    ty = torch_conv2d(torch, *tleaves)
    tgrads = torch.autograd.grad((ty * torch.tensor(g)).sum(), tleaves, create_graph=True)
    tsecond = torch.autograd.grad(sum((d * d).sum() for d in tgrads), tleaves)
    for a, b in zip(second, tsecond):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-10)


def test_non_finite_values_propagate_as_in_torch(rng):
    torch = pytest.importorskip("torch")
    x, wr, wi = inputs(rng, (2, 2, 6, 8), (2, 2, 2, 2, 3))
    x[0, 1, 2, 3] = np.nan
    wi[1, 0, 1, 1, 2] = np.inf
    ours = nb.spectral_conv2d(x, wr, wi).numpy()
    theirs = torch_conv2d(torch, *(torch.tensor(a) for a in (x, wr, wi))).numpy()
    # The NaN in x[0] spreads over all of y[0]; the inf weight makes every element of the
    # output channel it feeds non-finite. Which of them are inf and which NaN depends on
    # the FFT's arithmetic (PyTorch's MKL/pocketfft, DUCC0 and numpy.fft all differ), so
    # the test compares where the values are finite, and the finite values.
    assert np.isnan(ours[0]).all()
    np.testing.assert_array_equal(np.isfinite(ours), np.isfinite(theirs))
    np.testing.assert_allclose(ours[np.isfinite(ours)], theirs[np.isfinite(theirs)])


# -- gradcheck beyond the registered samples ----------------------------------------------
def test_gradcheck_and_gradgradcheck_one_input_at_a_time(rng):
    x, wr, wi = inputs(rng, (1, 2, 5, 6), (2, 2, 2, 2, 4))
    assert gradcheck(lambda a: nb.spectral_conv2d(a, wr, wi), [x])
    assert gradcheck(lambda a: nb.spectral_conv2d(x, wr, a), [wi])
    assert gradgradcheck(lambda a, b: nb.spectral_conv1d(a, b, wi[0, :, :, 0]),
                         [x[:, :, 0], wr[0, :, :, 0]])


# -- the two mixing routes: loops for small batches, the GEMM from GEMM_MIN_BATCH rows ------
@pytest.fixture(params=["gemm", "loops"])
def route(request, monkeypatch):
    """Every batch on the GEMM (GEMM_MIN_BATCH = 1) or on the loops."""
    from nbgrad.ops import spectral
    monkeypatch.setattr(spectral, "GEMM_MIN_BATCH", 1 if request.param == "gemm" else 10 ** 9)
    return request.param


def test_the_default_routes():
    from nbgrad.ops.spectral import GEMM_MIN_BATCH, _GemmMixing, _LoopMixing, _mixing
    assert isinstance(_mixing(GEMM_MIN_BATCH, 2, (3, 4)), _GemmMixing)
    assert isinstance(_mixing(GEMM_MIN_BATCH - 1, 2, (3, 4)), _LoopMixing)


@pytest.mark.parametrize("op, x_shape, w_shape, reference", [
    (nb.spectral_conv1d, (3, 4, 16), (4, 5, 7), conv1d_numpy),
    (nb.spectral_conv1d, (2, 3, 9), (3, 2, 5), conv1d_numpy),
    (nb.spectral_conv2d, (3, 4, 10, 9), (2, 4, 5, 3, 4), conv2d_numpy),
    (nb.spectral_conv2d, (2, 3, 7, 8), (2, 3, 2, 3, 5), conv2d_numpy)])
def test_each_route_against_numpy_with_gradients_checked(rng, route, op, x_shape, w_shape,
                                                         reference):
    """Forward against NumPy, the gradients through <y, g> = <x, dx> = <w, dw> (the op is
    linear in each input), gradcheck and gradgradcheck, on either route."""
    x, wr, wi = inputs(rng, x_shape, w_shape)
    g = rng.standard_normal(op(x, wr, wi).shape)
    y, dx, dwr, dwi = forward_backward(op, [x, wr, wi], g)
    np.testing.assert_allclose(y, reference(x, wr, wi), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.vdot(y, g), np.vdot(x, dx), rtol=1e-11)
    np.testing.assert_allclose(np.vdot(y, g), np.vdot(wr, dwr) + np.vdot(wi, dwi), rtol=1e-11)
    # two batch rows and two channels each way (2-D weights lead with their blocks)
    small = [np.ascontiguousarray(a[:, :2, :2] if a.ndim == 5 else a[:2, :2])
             for a in (x, wr, wi)]
    assert gradcheck(op, small) and gradgradcheck(op, small)


def test_the_routes_agree(rng):
    """The same layer on both routes: the same values to rounding, float64."""
    from nbgrad.ops import spectral
    arrays = inputs(rng, (5, 6, 12, 10), (2, 6, 4, 5, 6))
    g = rng.standard_normal((5, 4, 12, 10))
    results = {}
    for name, minimum in (("gemm", 1), ("loops", 10 ** 9)):
        old, spectral.GEMM_MIN_BATCH = spectral.GEMM_MIN_BATCH, minimum
        try:
            results[name] = forward_backward(nb.spectral_conv2d, arrays, g)
        finally:
            spectral.GEMM_MIN_BATCH = old
    for a, b in zip(results["gemm"], results["loops"]):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


# -- determinism --------------------------------------------------------------------------
def test_same_bits_at_1_and_2_threads(rng, route):
    # large enough for the parallel kernels
    arrays = inputs(rng, (4, 8, 32, 32), (2, 8, 8, 6, 6), np.float32)
    g = rng.standard_normal((4, 8, 32, 32)).astype(np.float32)
    one = at_threads(1, forward_backward, nb.spectral_conv2d, arrays, g)
    two = at_threads(2, forward_backward, nb.spectral_conv2d, arrays, g)
    for a, b in zip(one, two):
        assert_same_bits(a, b)


def test_serial_and_parallel_kernels_agree_bitwise(rng):
    from nbgrad.kernels import spectral as K
    from nbgrad.ops.spectral import _row_columns
    x = rng.standard_normal((6, 16, 12)).astype(np.float32)
    c = np.empty(0, np.complex64)
    at = _row_columns(2, 3)  # the 6 grids as 2 x 3 (batch, channel) in GEMM rows
    out = [np.empty((2 * 3 * 4, 2 * 6), np.float32) for _ in range(2)]
    rows = np.arange(2 * 3 * 4)
    K.rfft_modes(x, 3, 2, c, out[0], rows, at, 3)
    K.rfft_modes.serial(x, 3, 2, c, out[1], rows, at, 3)
    assert_same_bits(out[0], out[1])
    y = [np.empty((6, 16, 12), np.float32) for _ in range(2)]
    K.irfft_modes(out[0], rows, at, 3, 2, 3, c, y[0])
    K.irfft_modes.serial(out[0], rows, at, 3, 2, 3, c, y[1])
    assert_same_bits(y[0], y[1])


def test_modes_land_in_the_gemm_rows(rng):
    """Mode k of grid s = b C + ch is row k, batch b, column ch (re) and C + ch (im)."""
    from nbgrad.ops.spectral import _spectrum_rows, _synthesis_rows
    x = rng.standard_normal((2, 3, 8, 10))
    rows = _spectrum_rows(x, (3, 4), np.arange(24))
    f = np.fft.rfft2(x)
    want = np.concatenate([f[:, :, :3, :4], f[:, :, -3:, :4]], axis=2)  # [2, 3, 6, 4]
    want = want.reshape(2, 3, 24).transpose(2, 0, 1)
    np.testing.assert_allclose(rows[:, :, :3], want.real, atol=1e-12)
    np.testing.assert_allclose(rows[:, :, 3:], want.imag, atol=1e-12)
    # and back: irfft2 of the kept blocks among zeros
    spec = np.zeros((2, 3, 8, 6), complex)
    spec[:, :, :3, :4] = f[:, :, :3, :4]
    spec[:, :, -3:, :4] = f[:, :, -3:, :4]
    np.testing.assert_allclose(_synthesis_rows(rows, (3, 4), (8, 10), np.arange(24)),
                               np.fft.irfft2(spec, s=(8, 10)), atol=1e-12)


# -- bad input ----------------------------------------------------------------------------
@pytest.mark.parametrize("op, x_shape, w_shape, imag_shape, match", [
    ("1d", (2, 3, 8), (3, 2, 6), None, r"spectral_conv1d: modes = 6 .* larger than the 5"),
    ("2d", (2, 3, 8, 8), (2, 3, 2, 5, 3), None, r"spectral_conv2d: modes1 = 5 .* H // 2 = 4"),
    ("2d", (2, 3, 8, 8), (2, 3, 2, 2, 6), None, r"spectral_conv2d: modes2 = 6 .* 5 Fourier"),
    ("2d", (2, 4, 8, 8), (2, 3, 2, 2, 3), None, r"x has 4 channels .* C_in = 3"),
    ("1d", (2, 3, 8, 1), (3, 2, 3), None, r"spectral_conv1d: x must be 3-D"),
    ("2d", (2, 3, 8), (2, 3, 2, 2, 3), None, r"spectral_conv2d: x must be 4-D"),
    ("2d", (2, 3, 8, 8), (3, 2, 2, 3), None, r"w_real must be 5-D"),
    ("2d", (2, 3, 8, 8), (1, 3, 2, 2, 3), None, r"2 blocks of modes"),
    ("2d", (2, 3, 8, 8), (2, 3, 2, 2, 3), (2, 3, 2, 2, 2), r"w_imag has shape \(2, 3, 2, 2, 2\)"),
])
def test_bad_input_names_op_argument_and_shapes(op, x_shape, w_shape, imag_shape, match):
    fn = nb.spectral_conv1d if op == "1d" else nb.spectral_conv2d
    with pytest.raises(ValueError, match=match):
        fn(np.zeros(x_shape), np.zeros(w_shape), np.zeros(imag_shape or w_shape))


def test_mixed_dtypes_are_an_error():
    with pytest.raises(TypeError, match="spectral_conv1d: inputs must share one dtype"):
        nb.spectral_conv1d(np.zeros((1, 2, 8), np.float32), np.zeros((2, 2, 3)),
                           np.zeros((2, 2, 3)))


# -- modules ------------------------------------------------------------------------------
def test_spectral_conv_modules_shapes_and_init():
    nb.manual_seed(0)
    layer = SpectralConv2d(4, 6, 3, 5)
    assert layer.weight_real.shape == (2, 4, 6, 3, 5)
    for w in (layer.weight_real, layer.weight_imag):
        assert w.dtype == np.float32
        assert 0 <= w.numpy().min() and w.numpy().max() < 1 / 24
    assert layer(nb.randn(2, 4, 8, 10)).shape == (2, 6, 8, 10)
    assert len(list(layer.parameters())) == 2
    layer1 = SpectralConv1d(3, 2, 4, dtype=np.float64)
    assert layer1.weight_imag.shape == (3, 2, 4) and layer1.weight_imag.dtype == np.float64
    assert layer1(nb.randn(5, 3, 16, dtype=np.float64)).shape == (5, 2, 16)
