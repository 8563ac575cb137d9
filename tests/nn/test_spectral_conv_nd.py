"""SpectralConv (neuraloperator's spectral convolution, grids of 1-3 dims, dense weights)
against a PyTorch reference of the reference library's math (rfftn, fftshift, the
centred mode slices, einsum, ifftn + irfft with the Hermitian bins made real): forward
and every gradient in float64 and float32, second derivatives, n_modes set after
construction (resolution independence), separable weights, defaults and bad input."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.nn.spectral import SpectralConv


# -- the PyTorch reference ----------------------------------------------------------------
def torch_spectral_conv(torch, x, wr, wi, bias, n_modes, max_n_modes, separable,
                        fft_norm="forward"):
    """neuraloperator's SpectralConv.forward (real data, dense weights) written out:
    n_modes are the kept counts (the last as rfft bins), weights [in, (out,) *max]."""
    d = len(n_modes)
    dims = list(range(-d, 0))
    grid = list(x.shape[2:])
    fft_size = grid[:-1] + [grid[-1] // 2 + 1]
    X = torch.fft.rfftn(x, norm=fft_norm, dim=dims)
    if d > 1:
        X = torch.fft.fftshift(X, dim=dims[:-1])
    w = torch.complex(wr, wi)
    # the weights' kept part: centred along the first d - 1 dims, the first bins last
    starts = [mx - min(n, m) for n, m, mx in zip(fft_size, n_modes, max_n_modes)]
    sw = [slice(None)] * (1 if separable else 2)
    sw += [slice(s // 2, -s // 2) if s else slice(None) for s in starts[:-1]]
    sw += [slice(None, -starts[-1]) if starts[-1] else slice(None)]
    w = w[tuple(sw)]
    # the input's kept modes: n around the centre n // 2 of each shifted dim
    sx = [slice(None), slice(None)]
    for n, k in zip(fft_size, w.shape[(1 if separable else 2):]):
        sx.append(slice(n // 2 - k // 2, n // 2 + k // 2 + k % 2))
    sx[-1] = slice(None, w.shape[-1]) if w.shape[-1] < fft_size[-1] else slice(None)
    sx = tuple(sx)
    cout = wr.shape[0] if separable else wr.shape[1]
    out = torch.zeros([x.shape[0], cout] + fft_size, dtype=X.dtype)
    letters = "xyz"[:d]
    if separable:
        out[sx] = X[sx] * w
    else:
        out[sx] = torch.einsum(f"bi{letters},io{letters}->bo{letters}", X[sx], w)
    if d > 1:
        out = torch.fft.ifftshift(out, dim=dims[:-1])
        out = torch.fft.ifftn(out, s=grid[:-1], dim=dims[:-1], norm=fft_norm)
    # enforce_hermitian_symmetry: bin 0 and (even length) the Nyquist bin are real
    keep = torch.ones(fft_size[-1], dtype=x.dtype)
    keep[0] = 0
    if grid[-1] % 2 == 0:
        keep[-1] = 0
    out = torch.complex(out.real, out.imag * keep)
    y = torch.fft.irfft(out, n=grid[-1], dim=-1, norm=fft_norm)
    return y if bias is None else y + bias


def layer_params(layer):
    return [layer.weight_real, layer.weight_imag] + ([layer.bias] if layer.bias is not None
                                                      else [])


def ours_forward_backward(layer, x, g):
    for p in layer_params(layer):
        p.grad = None   # a layer may be compared more than once
    xt = nb.tensor(x, requires_grad=True)
    y = layer(xt)
    y.backward(nb.tensor(g))
    return [y.numpy(), xt.grad.numpy()] + [p.grad.numpy() for p in layer_params(layer)]


def torch_forward_backward(torch, layer, x, g, fft_norm="forward"):
    xt = torch.tensor(x, requires_grad=True)
    ps = [torch.tensor(p.numpy(), requires_grad=True) for p in layer_params(layer)]
    bias = ps[2] if len(ps) == 3 else None
    y = torch_spectral_conv(torch, xt, ps[0], ps[1], bias, layer.n_modes, layer.max_n_modes,
                            layer.separable, fft_norm)
    y.backward(torch.tensor(g))
    return [y.detach().numpy(), xt.grad.numpy()] + [p.grad.numpy() for p in ps]


def compare(torch, layer, x_shape, dtype=np.float64, fft_norm="forward", seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(dtype)
    g = rng.standard_normal((x_shape[0], layer.out_channels) + x_shape[2:]).astype(dtype)
    tol = dict(rtol=1e-10, atol=1e-12) if dtype == np.float64 else dict(rtol=2e-4, atol=2e-5)
    names = ["y", "x.grad", "weight_real.grad", "weight_imag.grad", "bias.grad"]
    for name, a, b in zip(names, ours_forward_backward(layer, x, g),
                          torch_forward_backward(torch, layer, x, g, fft_norm)):
        assert a.dtype == dtype, name
        np.testing.assert_allclose(a, b, err_msg=name, **tol)


# -- PyTorch oracle: forward and every gradient --------------------------------------------
CASES = [
    # (in, out, n_modes, max_n_modes, separable, grid)
    (2, 3, (8,), None, False, (16,)),
    (2, 2, (10,), None, False, (10,)),              # every bin, the Nyquist bin
    (3, 3, (7,), (6,), True, (11,)),                # separable, max_n_modes > kept
    (2, 3, (6, 8), None, False, (12, 10)),
    (2, 2, (5, 6), None, False, (8, 9)),            # odd kept count along dim 0
    (1, 2, (7, 4), None, False, (7, 6)),            # every mode of an odd dim
    (2, 1, (6, 6), None, False, (6, 10)),           # every mode of an even dim
    (2, 2, (5, 8), (9, 7), False, (10, 12)),        # centred slice of larger weights
    (2, 2, (5, 6), (8, 6), False, (8, 8)),          # odd start (8 - 5) of the slice
    (3, 3, (4, 6), (6, 5), True, (6, 9)),           # separable
    (2, 3, (4, 5, 6), None, False, (6, 7, 8)),
    (1, 2, (3, 4, 8), None, False, (3, 4, 8)),      # every mode, odd and even dims
    (2, 2, (3, 3, 4), (5, 4, 4), False, (5, 5, 6)),
    (2, 2, (2, 5, 5), None, True, (4, 6, 7)),       # separable 3-D
]


@pytest.mark.parametrize("cin, cout, n_modes, max_n_modes, separable, grid", CASES)
def test_forward_and_gradients_against_torch_float64(cin, cout, n_modes, max_n_modes,
                                                     separable, grid):
    torch = pytest.importorskip("torch")
    layer = SpectralConv(cin, cout, n_modes, max_n_modes=max_n_modes, separable=separable,
                         dtype=np.float64, generator=np.random.default_rng(1))
    compare(torch, layer, (2, cin) + grid)


@pytest.mark.parametrize("case", [CASES[0], CASES[4], CASES[10]])
def test_forward_and_gradients_against_torch_float32(case):
    torch = pytest.importorskip("torch")
    cin, cout, n_modes, max_n_modes, separable, grid = case
    layer = SpectralConv(cin, cout, n_modes, max_n_modes=max_n_modes, separable=separable,
                         dtype=np.float32, generator=np.random.default_rng(2))
    assert layer.weight_real.dtype == np.float32
    compare(torch, layer, (2, cin) + grid, dtype=np.float32)


@pytest.mark.parametrize("fft_norm", ["backward", "ortho"])
def test_fft_norm_gives_the_same_layer_on_one_grid(fft_norm):
    torch = pytest.importorskip("torch")
    layer = SpectralConv(2, 2, (4, 6), fft_norm=fft_norm, bias=False, dtype=np.float64,
                         generator=np.random.default_rng(3))
    assert layer.bias is None and layer.fft_norm == fft_norm
    compare(torch, layer, (2, 2, 8, 8), fft_norm=fft_norm)


def test_second_derivatives_against_torch():
    torch = pytest.importorskip("torch")
    layer = SpectralConv(2, 2, (3, 3, 4), max_n_modes=(4, 4, 4), dtype=np.float64,
                         generator=np.random.default_rng(4))
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 2, 5, 4, 6))
    g = rng.standard_normal((2, 2, 5, 4, 6))
    leaves = [nb.tensor(x, requires_grad=True)] + layer_params(layer)
    first = nb.grad((layer(leaves[0]) * nb.tensor(g)).sum(), leaves, create_graph=True)
    second = nb.grad(sum((d * d).sum() for d in first), leaves[:3])
    tl = [torch.tensor(a.numpy() if isinstance(a, nb.Tensor) else a, requires_grad=True)
          for a in leaves]
    ty = torch_spectral_conv(torch, tl[0], tl[1], tl[2], tl[3], layer.n_modes,
                             layer.max_n_modes, False)
    tfirst = torch.autograd.grad((ty * torch.tensor(g)).sum(), tl, create_graph=True)
    tsecond = torch.autograd.grad(sum((d * d).sum() for d in tfirst), tl[:3])
    for a, b in zip(second, tsecond):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-12)


# -- hypothesis: dims, grids, modes, max_n_modes, separable -------------------------------
@settings(max_examples=25)
@given(st.integers(1, 3), st.integers(1, 3), st.booleans(), st.data())
def test_property_against_torch(d, cin, separable, data):
    torch = pytest.importorskip("torch")
    cout = cin if separable else data.draw(st.integers(1, 3), label="cout")
    grid = tuple(data.draw(st.lists(st.integers(1, 9), min_size=d, max_size=d), label="grid"))
    # modes within the grid: K_j <= N_j, and the last dim's m // 2 + 1 <= N // 2 + 1
    n_modes = [data.draw(st.integers(1, n), label=f"n_modes[{j}]")
               for j, n in enumerate(grid[:-1])]
    n_modes.append(data.draw(st.integers(1, grid[-1]), label="n_modes[-1]"))
    kept = n_modes[:-1] + [n_modes[-1] // 2 + 1]
    max_n_modes = [k + data.draw(st.integers(0, 2), label=f"extra[{j}]")
                   for j, k in enumerate(kept)]
    layer = SpectralConv(cin, cout, n_modes, max_n_modes=max_n_modes, separable=separable,
                         dtype=np.float64, generator=np.random.default_rng(sum(grid)))
    assert layer.n_modes == kept
    compare(torch, layer, (2, cin) + grid, seed=len(grid))


# -- n_modes after construction ------------------------------------------------------------
def test_n_modes_set_after_construction_uses_the_centre_of_the_weights():
    torch = pytest.importorskip("torch")
    layer = SpectralConv(2, 3, (8, 8), dtype=np.float64, generator=np.random.default_rng(6))
    assert layer.n_modes == [8, 5] and layer.max_n_modes == [8, 5]
    assert layer.weight_real.shape == (2, 3, 8, 5)
    layer.n_modes = (5, 4)
    assert layer.n_modes == [5, 3] and layer.weight_real.shape == (2, 3, 8, 5)
    compare(torch, layer, (2, 2, 6, 7))
    # independently: a layer of max_n_modes = the kept modes, holding the centre slice
    # (8 - 5 = 3: rows 1 .. 5 of dim 0, the reference's [3 // 2 : -(3 // 2) - 1]), the
    # first 3 bins of the last dim, gives the same output
    small = SpectralConv(2, 3, (5, 4), dtype=np.float64, generator=np.random.default_rng(7))
    with nb.no_grad():
        small.weight_real.copy_(nb.tensor(layer.weight_real.numpy()[:, :, 1:6, :3]))
        small.weight_imag.copy_(nb.tensor(layer.weight_imag.numpy()[:, :, 1:6, :3]))
        small.bias.copy_(layer.bias)
    x = np.random.default_rng(8).standard_normal((2, 2, 10, 9))
    np.testing.assert_allclose(small(x).numpy(), layer(x).numpy(), rtol=1e-12, atol=1e-14)
    # the same layer runs on grids of other sizes (resolution independence)
    for grid in [(5, 4), (16, 20)]:
        compare(torch, layer, (1, 2) + grid)


def test_n_modes_above_max_n_modes_is_an_error():
    layer = SpectralConv(2, 2, (6, 6), dtype=np.float64)
    with pytest.raises(ValueError, match=r"SpectralConv: n_modes\[0\] keeps 8 .*max_n_modes"):
        layer.n_modes = (8, 6)
    with pytest.raises(ValueError, match=r"SpectralConv: n_modes\[1\] keeps 5 .*max_n_modes"):
        layer.n_modes = (6, 8)
    with pytest.raises(ValueError, match=r"SpectralConv: n_modes .* 3 entries .* 2 grid dims"):
        layer.n_modes = (4, 4, 4)
    assert layer.n_modes == [6, 4]   # unchanged by the failed assignments


# -- defaults, names, initialisation --------------------------------------------------------
def test_reference_defaults_names_and_initialisation():
    layer = SpectralConv(32, 32, (8, 8), dtype=np.float64, generator=np.random.default_rng(9))
    assert [n for n, _ in layer.named_parameters()] == ["weight_real", "weight_imag", "bias"]
    assert layer.bias.shape == (32, 1, 1)
    assert (layer.fft_norm, layer.rank, layer.factorization, layer.separable) == (
        "forward", 1.0, None, False)
    assert (layer.implementation, layer.fno_block_precision) == ("reconstructed", "full")
    # init_std 'auto' = sqrt(2 / (in + out)) = 1 / sqrt 32: the complex weight's standard
    # deviation, its variance half in each part (std 1/8 each; 10240 draws: within 3 %)
    assert layer.init_std == pytest.approx(32 ** -0.5)
    for p in (layer.weight_real, layer.weight_imag):
        assert abs(p.numpy().mean()) < 0.01
        assert p.numpy().std() == pytest.approx(0.125, rel=0.03)
    sep = SpectralConv(4, 4, 6, separable=True, init_std=0.1, bias=False)
    assert sep.weight_real.shape == (4, 4) and sep.n_modes == [4] and sep.bias is None
    assert sep.init_std == 0.1
    x = nb.tensor(np.ones((1, 4, 8)))
    assert sep.transform(x) is x and sep.transform(x, output_shape=(8,)) is x


# -- bad input ----------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, error, match", [
    (dict(factorization="svd"), ValueError, r"SpectralConv: factorization"),
    (dict(complex_data=True), NotImplementedError, r"complex_data"),
    (dict(resolution_scaling_factor=2), NotImplementedError, r"resolution_scaling_factor"),
    (dict(fno_block_precision="half"), NotImplementedError, r"fno_block_precision"),
    (dict(out_channels=3, separable=True), ValueError, r"separable=True needs in_channels"),
    (dict(rank=0.0), ValueError, r"SpectralConv: rank = 0.0 is outside \(0, 1\]"),
    (dict(rank=1.5), ValueError, r"rank = 1.5 is outside"),
    (dict(rank=-2), ValueError, r"rank must be a positive int"),
    (dict(fft_norm="none"), ValueError, r"fft_norm must be one of"),
    (dict(implementation="fast"), ValueError, r"implementation must be"),
    (dict(init_std=-1.0), ValueError, r"init_std must be 'auto' or a positive"),
    (dict(n_modes=(4, 0)), ValueError, r"n_modes must be 1 to 3 positive ints"),
    (dict(n_modes=(4, 4, 4, 4)), ValueError, r"n_modes must be 1 to 3"),
    (dict(max_n_modes=(8,)), ValueError, r"max_n_modes \[8\] has 1 entries"),
    (dict(max_n_modes=(2, 8)), ValueError, r"n_modes\[0\] keeps 4 .* max_n_modes\[0\] = 2"),
    (dict(in_channels=0), ValueError, r"SpectralConv: in_channels must be a positive int"),
])
def test_bad_construction_names_the_argument(kwargs, error, match):
    args = dict(in_channels=2, out_channels=2, n_modes=(4, 4))
    args.update(kwargs)
    with pytest.raises(error, match=match):
        SpectralConv(**args)


@pytest.mark.parametrize("x_shape, match", [
    ((2, 2, 8), r"SpectralConv: x must be 4-D \[B, C, N1, N2\] .* got shape \(2, 2, 8\)"),
    ((2, 3, 8, 8), r"SpectralConv: x has 3 channels .* in_channels = 2"),
    ((2, 2, 5, 8), r"n_modes\[0\] keeps 6 modes but grid dim 0 of x .* only 5"),
    ((2, 2, 8, 6), r"n_modes\[1\] keeps 5 rfft bins .* only 4 Fourier modes \(6 // 2 \+ 1\)"),
])
def test_bad_input_names_layer_argument_and_shapes(x_shape, match):
    layer = SpectralConv(2, 2, (6, 8))
    with pytest.raises(ValueError, match=match):
        layer(np.zeros(x_shape, layer.weight_real.dtype))


def test_other_output_shape_and_dtype_mismatch_are_errors():
    layer = SpectralConv(2, 2, (4, 4), dtype=np.float64)
    x = np.zeros((1, 2, 8, 8))
    with pytest.raises(NotImplementedError, match=r"output_shape=\(16, 16\)"):
        layer(x, output_shape=(16, 16))
    with pytest.raises(NotImplementedError, match=r"transform: output_shape"):
        layer.transform(nb.tensor(x), output_shape=(4, 4))
    with pytest.raises(TypeError, match=r"SpectralConv: inputs must share one dtype"):
        layer(x.astype(np.float32))
