"""spectral_conv3d (the original FNO's 3-D Fourier layer) and its kernels rfft3_modes /
irfft3_modes: NumPy and PyTorch references, adjoint identities, second derivatives,
1 vs 2 threads, serial vs parallel kernels, bad input. The registered samples of
spectral_conv3d and spectral_conv3d_weight_grad are gradchecked and gradgradchecked by
tests/testing/test_gradcheck.py."""

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads
from hypothesis import given, settings
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.ops.spectral import spectral_conv3d
from nbgrad.testing import gradcheck, gradgradcheck


def corners(j, D, H, m1, m2):
    """The rows of block j: [:m1] or [D-m1:] (j odd) x [:m2] or [H-m2:] (j >= 2)."""
    s1 = slice(0, m1) if j % 2 == 0 else slice(D - m1, D)
    s2 = slice(0, m2) if j < 2 else slice(H - m2, H)
    return s1, s2


def conv3d_numpy(x, wr, wi):
    B, _, D, H, W = x.shape
    m1, m2, m3 = wr.shape[3:]
    X = np.fft.rfftn(x, axes=(2, 3, 4))
    w = wr + 1j * wi
    Y = np.zeros((B, wr.shape[2], D, H, W // 2 + 1), complex)
    for j in range(4):
        s1, s2 = corners(j, D, H, m1, m2)
        Y[:, :, s1, s2, :m3] = np.einsum("bixyz,ioxyz->boxyz", X[:, :, s1, s2, :m3], w[j])
    return np.fft.irfftn(Y, s=(D, H, W), axes=(2, 3, 4))


def torch_conv3d(torch, x, wr, wi):
    B, _, D, H, W = x.shape
    m1, m2, m3 = wr.shape[3:]
    w = torch.complex(wr, wi)
    X = torch.fft.rfftn(x, dim=(2, 3, 4))
    Y = torch.zeros(B, wr.shape[2], D, H, W // 2 + 1, dtype=X.dtype)
    for j in range(4):
        s1, s2 = corners(j, D, H, m1, m2)
        Y[:, :, s1, s2, :m3] = torch.einsum("bixyz,ioxyz->boxyz", X[:, :, s1, s2, :m3], w[j])
    return torch.fft.irfftn(Y, s=(D, H, W), dim=(2, 3, 4))


def inputs(rng, x_shape, w_shape, dtype=np.float64):
    return [rng.standard_normal(s).astype(dtype) for s in (x_shape, w_shape, w_shape)]


def forward_backward(arrays, g):
    leaves = [nb.tensor(a, requires_grad=True) for a in arrays]
    y = spectral_conv3d(*leaves)
    y.backward(g)
    return [y.numpy()] + [t.grad.numpy() for t in leaves]


# -- forward against NumPy ----------------------------------------------------------------
@pytest.mark.parametrize("grid, modes", [((6, 8, 10), (2, 3, 4)), ((5, 7, 9), (2, 3, 5)),
                                         ((4, 6, 8), (2, 3, 5)), ((2, 2, 1), (1, 1, 1)),
                                         ((8, 4, 3), (1, 2, 2))])
def test_forward_against_numpy(rng, grid, modes):
    x, wr, wi = inputs(rng, (2, 3) + grid, (4, 3, 2) + modes)
    np.testing.assert_allclose(spectral_conv3d(x, wr, wi).numpy(), conv3d_numpy(x, wr, wi),
                               rtol=1e-12, atol=1e-12)


def test_float32_matches_float64(rng):
    x, wr, wi = inputs(rng, (2, 3, 6, 8, 10), (4, 3, 2, 2, 3, 4))
    y64 = spectral_conv3d(x, wr, wi).numpy()
    y32 = spectral_conv3d(*[a.astype(np.float32) for a in (x, wr, wi)])
    assert y32.dtype == np.float32
    np.testing.assert_allclose(y32.numpy(), y64, rtol=1e-4, atol=1e-5)


def test_inputs_are_not_modified_and_strided_inputs_work(rng):
    x, wr, wi = inputs(rng, (2, 2, 6, 4, 8), (4, 2, 3, 2, 2, 3))
    copies = [a.copy() for a in (x, wr, wi)]
    xt = np.ascontiguousarray(x.transpose(0, 1, 4, 3, 2)).transpose(0, 1, 4, 3, 2)
    assert not xt.flags.c_contiguous
    forward_backward([xt, wr, wi], rng.standard_normal((2, 3, 6, 4, 8)))
    for a, c in zip((xt, wr, wi), copies):
        assert_same_bits(a, c)
    np.testing.assert_allclose(spectral_conv3d(xt, wr, wi).numpy(), conv3d_numpy(x, wr, wi),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("route_min", [1, 10 ** 9], ids=["gemm", "loops"])
@pytest.mark.parametrize("grid, modes", [((6, 8, 10), (2, 3, 4)), ((5, 7, 9), (2, 3, 5))])
def test_each_mixing_route_against_numpy_and_adjoint(rng, monkeypatch, route_min, grid,
                                                     modes):
    """Both routes of ops/spectral.py (the GEMM from GEMM_MIN_BATCH rows, the loops
    below); the second grid odd, keeping every column."""
    from nbgrad.ops import spectral
    monkeypatch.setattr(spectral, "GEMM_MIN_BATCH", route_min)
    x, wr, wi = inputs(rng, (3, 2) + grid, (4, 2, 3) + modes)
    g = rng.standard_normal((3, 3) + grid)
    y, dx, dwr, dwi = forward_backward([x, wr, wi], g)
    np.testing.assert_allclose(y, conv3d_numpy(x, wr, wi), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.vdot(y, g), np.vdot(x, dx), rtol=1e-11)
    np.testing.assert_allclose(np.vdot(y, g), np.vdot(wr, dwr) + np.vdot(wi, dwi), rtol=1e-11)


# -- hypothesis: odd/even grids, modes up to the limits, adjoint identities -----------------
@settings(max_examples=25)
@given(st.integers(1, 2), st.integers(1, 3), st.integers(2, 7), st.integers(2, 7),
       st.integers(1, 9), st.data())
def test_property_against_numpy_and_adjoint(cin, cout, d, h, w, data):
    m1 = data.draw(st.integers(1, d // 2), label="m1")
    m2 = data.draw(st.integers(1, h // 2), label="m2")
    m3 = data.draw(st.integers(1, w // 2 + 1), label="m3")
    rng = np.random.default_rng(d * 100 + h * 10 + w)
    x, wr, wi = inputs(rng, (2, cin, d, h, w), (4, cin, cout, m1, m2, m3))
    g = rng.standard_normal((2, cout, d, h, w))
    y, dx, dwr, dwi = forward_backward([x, wr, wi], g)
    np.testing.assert_allclose(y, conv3d_numpy(x, wr, wi), rtol=1e-11, atol=1e-11)
    # linear in x: <y(x), g> = <x, dx>; linear in w: <y(w), g> = <wr, dwr> + <wi, dwi>
    np.testing.assert_allclose(np.vdot(y, g), np.vdot(x, dx), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(np.vdot(y, g), np.vdot(wr, dwr) + np.vdot(wi, dwi),
                               rtol=1e-10, atol=1e-10)


# -- PyTorch oracle -----------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("x_shape, w_shape", [
    ((2, 3, 6, 8, 10), (4, 3, 2, 3, 4, 4)),
    ((1, 2, 5, 7, 9), (4, 2, 3, 2, 3, 5)),    # odd grid, every column
    ((2, 2, 4, 6, 8), (4, 2, 2, 2, 3, 5)),    # m1 = D/2, m2 = H/2, the Nyquist column
])
def test_forward_and_backward_against_torch(rng, x_shape, w_shape, dtype):
    torch = pytest.importorskip("torch")
    arrays = inputs(rng, x_shape, w_shape, dtype)
    g = rng.standard_normal((x_shape[0], w_shape[2]) + x_shape[2:]).astype(dtype)
    leaves = [torch.tensor(a, requires_grad=True) for a in arrays]
    ty = torch_conv3d(torch, *leaves)
    ty.backward(torch.tensor(g))
    theirs = [ty.detach().numpy()] + [t.grad.numpy() for t in leaves]
    tol = dict(rtol=1e-11, atol=1e-11) if dtype == np.float64 else dict(rtol=1e-4, atol=1e-4)
    for a, b in zip(forward_backward(arrays, g), theirs):
        assert a.dtype == dtype
        np.testing.assert_allclose(a, b, **tol)


def test_second_derivative_against_torch(rng):
    torch = pytest.importorskip("torch")
    arrays = inputs(rng, (2, 2, 4, 6, 5), (4, 2, 3, 2, 2, 3))
    g = rng.standard_normal((2, 3, 4, 6, 5))
    leaves = [nb.tensor(a, requires_grad=True) for a in arrays]
    grads = nb.grad((spectral_conv3d(*leaves) * nb.tensor(g)).sum(), leaves, create_graph=True)
    second = nb.grad(sum((d * d).sum() for d in grads), leaves)
    tleaves = [torch.tensor(a, requires_grad=True) for a in arrays]
    ty = torch_conv3d(torch, *tleaves)
    tgrads = torch.autograd.grad((ty * torch.tensor(g)).sum(), tleaves, create_graph=True)
    tsecond = torch.autograd.grad(sum((d * d).sum() for d in tgrads), tleaves)
    for a, b in zip(second, tsecond):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-10)


def test_gradcheck_and_gradgradcheck_one_input_at_a_time(rng):
    x, wr, wi = inputs(rng, (1, 2, 4, 5, 6), (4, 2, 2, 2, 2, 4))
    assert gradcheck(lambda a: spectral_conv3d(a, wr, wi), [x])
    assert gradgradcheck(lambda a, b: spectral_conv3d(a, b, wi), [x, wr])


# -- kernels: overlapping blocks add; determinism --------------------------------------------
def test_overlapping_blocks_add(rng):
    """irfft3_modes adds blocks that share a mode (SpectralConv relies on it), and
    rfft3_modes gives each block its own copy: P is the adjoint of R."""
    from nbgrad.kernels import spectral as K
    S, D, H, W, m1, m2, m3 = 2, 3, 5, 6, 2, 3, 4   # 2 m1 > D, 2 m2 > H: rows overlap
    c = np.empty(0, np.complex128)
    # the kernels' columns: grid s's re at column s of [K, 2S], its im S further
    at = np.arange(S)
    stacked = rng.standard_normal((2, S, 4, m1, m2, m3))
    y_re, y_im = stacked
    out = np.empty((S, D, H, W))
    every = np.arange(4 * m1 * m2 * m3)
    K.irfft3_modes(stacked.reshape(2 * S, -1).T, every, at, S, m1, m2, c, out)
    Y = np.zeros((S, D, H, W // 2 + 1), complex)
    for j in range(4):
        s1, s2 = corners(j, D, H, m1, m2)
        Y[:, s1, s2, :m3] += y_re[:, j] + 1j * y_im[:, j]
    np.testing.assert_allclose(out, np.fft.irfftn(Y, s=(D, H, W), axes=(1, 2, 3)),
                               rtol=1e-12, atol=1e-12)
    x = rng.standard_normal((S, D, H, W))
    modes = np.empty((2, S, 4, m1, m2, m3))
    K.rfft3_modes(x, m1, m2, c, modes.reshape(2 * S, -1).T, every, at, S)
    re, im = modes
    X = np.fft.rfftn(x, axes=(1, 2, 3))
    for j in range(4):
        s1, s2 = corners(j, D, H, m1, m2)
        np.testing.assert_allclose(re[:, j] + 1j * im[:, j], X[:, s1, s2, :m3],
                                   rtol=1e-12, atol=1e-12)


def test_same_bits_at_1_and_2_threads(rng):
    arrays = inputs(rng, (4, 4, 16, 16, 16), (4, 4, 4, 4, 4, 5), np.float32)
    g = rng.standard_normal((4, 4, 16, 16, 16)).astype(np.float32)
    one = at_threads(1, forward_backward, arrays, g)
    two = at_threads(2, forward_backward, arrays, g)
    for a, b in zip(one, two):
        assert_same_bits(a, b)


def test_serial_and_parallel_kernels_agree_bitwise(rng):
    from nbgrad.kernels import spectral as K
    x = rng.standard_normal((20, 6, 8, 10)).astype(np.float32)
    c = np.empty(0, np.complex64)
    at = np.arange(20)
    out = [np.empty((4 * 2 * 3 * 4, 40), np.float32) for _ in range(2)]
    every = np.arange(4 * 2 * 3 * 4)
    K.rfft3_modes(x, 2, 3, c, out[0], every, at, 20)
    K.rfft3_modes.serial(x, 2, 3, c, out[1], every, at, 20)
    assert_same_bits(out[0], out[1])
    y = [np.empty((20, 6, 8, 10), np.float32) for _ in range(2)]
    K.irfft3_modes(out[0], every, at, 20, 2, 3, c, y[0])
    K.irfft3_modes.serial(out[0], every, at, 20, 2, 3, c, y[1])
    assert_same_bits(y[0], y[1])


# -- bad input ----------------------------------------------------------------------------
@pytest.mark.parametrize("x_shape, w_shape, imag_shape, match", [
    ((2, 3, 8, 8, 8), (4, 3, 2, 5, 2, 3), None, r"spectral_conv3d: modes1 = 5 .* D // 2 = 4"),
    ((2, 3, 8, 6, 8), (4, 3, 2, 2, 4, 3), None, r"spectral_conv3d: modes2 = 4 .* H // 2 = 3"),
    ((2, 3, 8, 8, 8), (4, 3, 2, 2, 2, 6), None, r"spectral_conv3d: modes3 = 6 .* 5 Fourier"),
    ((2, 4, 8, 8, 8), (4, 3, 2, 2, 2, 3), None, r"x has 4 channels .* C_in = 3"),
    ((2, 3, 8, 8), (4, 3, 2, 2, 2, 3), None, r"spectral_conv3d: x must be 5-D"),
    ((2, 3, 8, 8, 8), (2, 3, 2, 2, 3), None, r"w_real must be 6-D"),
    ((2, 3, 8, 8, 8), (2, 3, 2, 2, 2, 3), None, r"4 blocks of modes"),
    ((2, 3, 8, 8, 8), (4, 3, 2, 2, 2, 3), (4, 3, 2, 2, 2, 2), r"w_imag has shape"),
])
def test_bad_input_names_op_argument_and_shapes(x_shape, w_shape, imag_shape, match):
    with pytest.raises(ValueError, match=match):
        spectral_conv3d(np.zeros(x_shape), np.zeros(w_shape), np.zeros(imag_shape or w_shape))


def test_mixed_dtypes_are_an_error():
    with pytest.raises(TypeError, match="spectral_conv3d: inputs must share one dtype"):
        spectral_conv3d(np.zeros((1, 2, 4, 4, 4), np.float32), np.zeros((4, 2, 2, 1, 1, 2)),
                        np.zeros((4, 2, 2, 1, 1, 2)))
