"""SpectralConv with factorised weights (CP, Tucker, TT as tensorly/tltorch hold them)
against a PyTorch reference of the same math (the dense weight built from the same
factors in torch, then neuraloperator's forward: rfftn, fftshift, the centred mode slice,
einsum, ifftn + irfft): forward, gradients for x and every factor, a mixed second
derivative; 'factorized' == 'reconstructed'; ranks and parameter counts against
tensorly's formulas worked by hand; the corner-block ops; initial std; bad input."""

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.nn.factorized import FactorizedTensor, cp_rank, tt_rank, tucker_rank
from nbgrad.nn.spectral import SpectralConv
from nbgrad.ops.spectral_parts import (
    ComplexBlock,
    irfftn_corners,
    irfftn_rows,
    rfftn_corners,
    rfftn_rows,
)
from nbgrad.testing import check_registered, gradgradcheck
from nbgrad.testing.torch_reference import factorized_dense

GRIDS = {1: (9,), 2: (7, 8), 3: (5, 6, 6)}
MODES = {1: (6,), 2: (5, 6), 3: (3, 4, 4)}  # kept: [4], [5, 4], [3, 4, 3]


# -- the PyTorch reference ----------------------------------------------------------------
def torch_spectral(torch, x, w, bias, separable):
    """neuraloperator's forward, n_modes == max_n_modes (w holds exactly the kept modes)."""
    d = x.ndim - 2
    dims = list(range(-d, 0))
    grid = list(x.shape[2:])
    fft_size = grid[:-1] + [grid[-1] // 2 + 1]
    X = torch.fft.rfftn(x, dim=dims, norm="forward")
    if d > 1:
        X = torch.fft.fftshift(X, dim=dims[:-1])
    ks = w.shape[(1 if separable else 2):]
    sx = [slice(None), slice(None)]
    sx += [slice(n // 2 - k // 2, n // 2 + k // 2 + k % 2) for n, k in zip(fft_size, ks)]
    sx[-1] = slice(0, ks[-1])
    sx = tuple(sx)
    cout = w.shape[0] if separable else w.shape[1]
    out = torch.zeros([x.shape[0], cout] + fft_size, dtype=X.dtype)
    m = "xyz"[:d]
    out[sx] = X[sx] * w if separable else torch.einsum(f"bi{m},io{m}->bo{m}", X[sx], w)
    if d > 1:
        out = torch.fft.ifftshift(out, dim=dims[:-1])
        out = torch.fft.ifftn(out, dim=dims[:-1], norm="forward")
    keep = torch.ones(fft_size[-1], dtype=x.dtype)
    keep[0] = 0
    if grid[-1] % 2 == 0:
        keep[-1] = 0
    out = torch.complex(out.real, out.imag * keep)
    return torch.fft.irfft(out, n=grid[-1], dim=-1, norm="forward") + bias


def factor_names(layer):
    return sorted({n[:-5] for n, _ in layer.weight.named_parameters()})


def run_torch(torch, layer, x, v):
    """Forward, loss sum(y v), grads for x and every factor part, in torch float64."""
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    parts = {n: torch.tensor(p.numpy(), dtype=torch.float64, requires_grad=True)
             for n, p in layer.weight.named_parameters()}
    f = {n: torch.complex(parts[n + "_real"], parts[n + "_imag"]) for n in factor_names(layer)}
    w = factorized_dense(torch.einsum, layer.factorization, f, layer.weight.order)
    bias = torch.tensor(layer.bias.numpy(), dtype=torch.float64)
    y = torch_spectral(torch, xt, w, bias, layer.separable)
    loss = (y * torch.tensor(v)).sum()
    grads = torch.autograd.grad(loss, [xt] + list(parts.values()), create_graph=True)
    return y, xt, parts, grads


def run_nb(layer, x, v):
    xn = nb.tensor(x, requires_grad=True)
    y = layer(xn)
    (y * nb.tensor(v.astype(y.numpy().dtype))).sum().backward()
    return y, xn


def make(fac, d, separable=False, impl="factorized", rank=0.6, dtype=np.float64, seed=0,
         **kw):
    return SpectralConv(3, 3, MODES[d], factorization=fac, rank=rank, separable=separable,
                        implementation=impl, dtype=dtype, generator=np.random.default_rng(seed),
                        **kw)


CASES = [(fac, d, sep, impl) for fac in ("cp", "tucker", "tt") for d in (1, 2, 3)
         for sep in (False, True) for impl in ("factorized", "reconstructed")]


@pytest.mark.parametrize("fac,d,sep,impl", CASES)
def test_forward_and_gradients_against_torch_float64(fac, d, sep, impl):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    layer = make(fac, d, sep, impl)
    x = rng.standard_normal((2, 3) + GRIDS[d])
    y, xn = run_nb(layer, x, v := rng.standard_normal((2, 3) + GRIDS[d]))
    yt, _, parts, grads = run_torch(torch, layer, x, v)
    np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(xn.grad.numpy(), grads[0].detach().numpy(), rtol=1e-9,
                               atol=1e-12)
    named = dict(layer.weight.named_parameters())
    for (name, _), g in zip(parts.items(), grads[1:]):
        np.testing.assert_allclose(named[name].grad.numpy(), g.detach().numpy(), rtol=1e-9,
                                   atol=1e-12, err_msg=name)


@pytest.mark.parametrize("fac", ["cp", "tucker", "tt"])
def test_float32_against_torch(fac):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    layer = make(fac, 2, dtype=np.float32)
    x = rng.standard_normal((2, 3) + GRIDS[2]).astype(np.float32)
    v = rng.standard_normal((2, 3) + GRIDS[2]).astype(np.float32)
    y, xn = run_nb(layer, x, v)
    assert y.numpy().dtype == np.float32 and xn.grad.numpy().dtype == np.float32
    yt, _, _, grads = run_torch(torch, layer, x.astype(np.float64), v)
    scale = np.abs(yt.detach().numpy()).max()
    np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), atol=1e-5 * scale)
    gx = grads[0].detach().numpy()
    np.testing.assert_allclose(xn.grad.numpy(), gx, atol=1e-5 * np.abs(gx).max())


@pytest.mark.parametrize("fac", ["cp", "tucker", "tt"])
def test_mixed_second_derivative_against_torch(fac):
    """d/dx of <dL/dfactor0_real, u>: double backward through the factorised path."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    layer = make(fac, 2)
    x = rng.standard_normal((1, 3) + GRIDS[2])
    v = rng.standard_normal((1, 3) + GRIDS[2])
    p = layer.weight.factor0_real
    u = rng.standard_normal(p.shape)
    xn = nb.tensor(x, requires_grad=True)
    loss = (layer(xn) * nb.tensor(v)).sum()
    (gp,) = nb.grad(loss, [p], create_graph=True)
    (gx,) = nb.grad((gp * nb.tensor(u)).sum(), [xn])
    _, xt, parts, grads = run_torch(torch, layer, x, v)
    idx = list(parts).index("factor0_real") + 1
    (gxt,) = torch.autograd.grad((grads[idx] * torch.tensor(u)).sum(), [xt])
    np.testing.assert_allclose(gx.numpy(), gxt.numpy(), rtol=1e-9, atol=1e-12)


def test_gradgradcheck_through_the_factorised_layer():
    layer = make("tucker", 2, rank=0.8)
    x = np.random.default_rng(4).standard_normal((1, 3) + GRIDS[2])
    assert gradgradcheck(lambda t: layer(t) ** 2, [x])


@pytest.mark.parametrize("fac", ["cp", "tucker", "tt"])
@pytest.mark.parametrize("sep", [False, True])
def test_factorized_equals_reconstructed_with_max_n_modes_and_fewer_modes(fac, sep):
    rng = np.random.default_rng(5)
    kw = dict(max_n_modes=(7, 5), rank=0.5, dtype=np.float64)
    a = SpectralConv(3, 3, (5, 6), factorization=fac, separable=sep,
                     implementation="factorized", generator=np.random.default_rng(6), **kw)
    b = SpectralConv(3, 3, (5, 6), factorization=fac, separable=sep,
                     implementation="reconstructed", generator=np.random.default_rng(6), **kw)
    for n_modes, grid in (((5, 6), (7, 8)), ((3, 4), (4, 6))):
        a.n_modes = b.n_modes = n_modes
        x = rng.standard_normal((2, 3) + grid)
        v = rng.standard_normal((2, 3) + grid)
        a.zero_grad()
        b.zero_grad()
        ya, xa = run_nb(a, x, v)
        yb, xb = run_nb(b, x, v)
        np.testing.assert_allclose(ya.numpy(), yb.numpy(), rtol=1e-10, atol=1e-13)
        np.testing.assert_allclose(xa.grad.numpy(), xb.grad.numpy(), rtol=1e-10, atol=1e-13)
        pb = dict(b.named_parameters())
        for name, p in a.named_parameters():
            np.testing.assert_allclose(p.grad.numpy(), pb[name].grad.numpy(), rtol=1e-10,
                                       atol=1e-13, err_msg=name)


@settings(max_examples=20, deadline=None)
@given(fac=st.sampled_from(["CP", "Tucker", "TT"]), d=st.integers(1, 3),
       sep=st.booleans(), rank=st.one_of(st.floats(0.05, 1.0), st.integers(1, 4)),
       modes=st.lists(st.integers(1, 5), min_size=3, max_size=3), seed=st.integers(0, 99))
def test_property_factorized_equals_reconstructed(fac, d, sep, rank, modes, seed):
    n_modes = tuple(modes[:d - 1]) + (2 * modes[d - 1],)
    grid = tuple(m + 1 for m in modes[:d - 1]) + (2 * modes[d - 1] + 1,)
    kept = tuple(modes[:d - 1]) + (modes[d - 1] + 1,)
    # a fraction that leaves CP no rank is an error (tested below), not a layer
    assume(fac != "CP" or cp_rank((2,) * (1 if sep else 2) + kept, rank) >= 1)
    a, b = (SpectralConv(2, 2, n_modes, factorization=fac, rank=rank, separable=sep,
                         implementation=impl, generator=np.random.default_rng(seed),
                         dtype=np.float64)
            for impl in ("factorized", "reconstructed"))
    x = np.random.default_rng(seed).standard_normal((2, 2) + grid)
    ya, yb = a(nb.tensor(x)).numpy(), b(nb.tensor(x)).numpy()
    np.testing.assert_allclose(ya, yb, rtol=1e-9, atol=1e-12 * max(1.0, np.abs(yb).max()))


# -- ranks and parameter counts (tensorly's formulas, worked by hand) -----------------------
SHAPE = (4, 4, 8, 5)  # in = out = 4, n_modes = (8, 8) -> kept [8, 5]


def test_ranks_of_a_fraction_match_tensorlys_formulas():
    # CP: round(640 * 0.5 / 21) = round(15.24)
    assert cp_rank(SHAPE, 0.5) == 15
    # Tucker: 640 x^4 + 121 x = 320 -> x = 0.7707..; round(s x) = 3, 3, 6, 4
    assert tucker_rank(SHAPE, 0.5) == [3, 3, 6, 4]
    # fixed mode 0: 640 x^3 + 105 x + 16 = 320 -> x = 0.7104..; [4, 3, 6, 4]
    assert tucker_rank(SHAPE, 0.5, fixed_modes=[0]) == [4, 3, 6, 4]
    # TT: avg dims 4, 6, 6.5; 408 x^2 + 48.5 x - 320 = 0 -> x = 0.8282..; [1, 3, 5, 5, 1]
    assert tt_rank(SHAPE, 0.5) == [1, 3, 5, 5, 1]
    assert cp_rank(SHAPE, 3) == 3 and tucker_rank(SHAPE, 2) == [2] * 4
    assert tt_rank(SHAPE, 2) == [1, 2, 2, 2, 1]


@pytest.mark.parametrize("fac,complex_params", [
    ("cp", 15 * (21 + 1)),                                   # R (sum s + 1): lam and U_k
    ("tucker", 3 * 3 * 6 * 4 + 4 * 3 + 4 * 3 + 8 * 6 + 5 * 4),  # core + factors
    ("tt", 4 * 3 + 3 * 4 * 5 + 5 * 8 * 5 + 5 * 5)])          # sum r_k s_k r_{k+1}
def test_parameter_counts(fac, complex_params):
    layer = SpectralConv(4, 4, (8, 8), factorization=fac, rank=0.5, bias=False)
    count = sum(p.numpy().size for p in layer.parameters())
    assert count == 2 * complex_params  # each complex number as a real and an imag part
    assert not hasattr(layer, "weight_real")


def test_fixed_rank_modes_true_keeps_mode_zero_at_full_rank():
    layer = SpectralConv(4, 4, (8, 8), factorization="tucker", rank=0.5,
                         fixed_rank_modes=True)
    assert layer.weight.rank == [4, 3, 6, 4]


@pytest.mark.parametrize("fac", ["cp", "tucker", "tt"])
def test_initial_dense_weight_has_std_init_std(fac):
    layer = SpectralConv(16, 16, (12, 12), factorization=fac, rank=0.5, init_std=0.3,
                         generator=np.random.default_rng(7))
    re, im = layer.weight.to_tensor()
    w = re.numpy() + 1j * im.numpy()
    std = math.sqrt(np.mean(np.abs(w) ** 2))
    assert 0.3 / 1.5 < std < 0.3 * 1.5
    assert abs(np.mean(w)) < 0.1 * std


# -- the corner-block ops -------------------------------------------------------------------
def test_rfftn_corners_against_numpy_and_irfftn_corners_inverts_it():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 3, 5, 4, 6))
    re, im = rfftn_corners(x, (2, 2, 4))
    X = np.fft.rfftn(x, axes=(2, 3, 4))
    for j in range(4):
        r0 = slice(0, 2) if j % 2 == 0 else slice(3, 5)
        c0 = slice(0, 2) if j // 2 == 0 else slice(2, 4)
        block = X[:, :, r0, c0, :4]
        np.testing.assert_allclose(re.numpy()[:, :, j], block.real, atol=1e-12)
        np.testing.assert_allclose(im.numpy()[:, :, j], block.imag, atol=1e-12)
    # all modes of an even 1-D grid: synthesis of analysis / N is x itself
    x1 = rng.standard_normal((2, 1, 8))
    r1, i1 = rfftn_corners(x1, (5,))
    np.testing.assert_allclose(irfftn_corners(r1, i1, (8,)).numpy(), x1, atol=1e-12)


@pytest.mark.parametrize("name", ["rfftn_corners", "irfftn_corners", "rfftn_rows",
                                  "irfftn_rows", "complex_block"])
def test_registered_corner_ops_gradcheck(name):
    for second in (False, True):
        report = check_registered(name, second_order=second)
        assert not report.failures, report.failures


@pytest.mark.parametrize("modes, grid", [((5,), (9,)), ((4, 3), (5, 7)), ((5, 4), (6, 6)),
                                         ((16, 9), (16, 16)), ((3, 2, 3), (3, 4, 5)),
                                         ((4, 5, 3), (5, 6, 4))])
def test_rfftn_rows_are_the_centred_modes_and_irfftn_rows_puts_them_back(modes, grid):
    """rfftn_rows(x)[m, b] = [re | im] of rfftn(x)[b, :, centred mode m] (frequency
    i - k // 2 along each full axis, bin i of the last), against numpy.fft; irfftn_rows of
    rows is numpy's irfftn of those modes put back among zeros (odd counts leave a corner
    row unread, overlapping corner blocks share a row: neither may count twice)."""
    rng = np.random.default_rng(12)
    x = rng.standard_normal((2, 3) + grid)
    axes = tuple(range(2, x.ndim))
    X = np.fft.rfftn(x, axes=axes)
    t = rfftn_rows(x, modes).numpy()
    rows = rng.standard_normal(t.shape)
    spec = np.zeros_like(X)
    for m, centred in enumerate(np.ndindex(*modes)):
        freq = tuple((i - k // 2) % n for i, k, n in zip(centred[:-1], modes[:-1], grid))
        at = (slice(None), slice(None)) + freq + (centred[-1],)
        np.testing.assert_allclose(t[m], np.concatenate([X[at].real, X[at].imag], -1),
                                   atol=1e-10)
        spec[at] = rows[m, :, :3] + 1j * rows[m, :, 3:]
    np.testing.assert_allclose(irfftn_rows(rows, grid, modes).numpy(),
                               np.fft.irfftn(spec, s=grid, axes=axes), atol=1e-12)


@settings(max_examples=30, deadline=None)
@given(modes=st.lists(st.integers(1, 5), min_size=1, max_size=3),
       extra=st.lists(st.integers(0, 2), min_size=3, max_size=3), b=st.integers(1, 3),
       c=st.integers(1, 3), seed=st.integers(0, 2 ** 16))
def test_property_irfftn_rows_is_the_adjoint_of_rfftn_rows(modes, extra, b, c, seed):
    """<rfftn_rows(x), t> = <x, N irfftn_rows(s t)> (s = 1 at the last axis's bin 0 and
    Nyquist bin, 1/2 elsewhere: the bins the half spectrum stands for twice) for any
    modes, grids, batch and channels: the identity the two ops' vjps rest on."""
    modes = tuple(modes)
    grid = tuple(k + e for k, e in zip(modes[:-1], extra)) + (2 * modes[-1] - 2 + extra[2] % 2
                                                              or 1,)
    assume(modes[-1] <= grid[-1] // 2 + 1)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((b, c) + grid)
    t = rng.standard_normal((math.prod(modes), b, 2 * c))
    s = np.full(modes[-1], 0.5)
    s[0] = 1.0
    if grid[-1] % 2 == 0 and modes[-1] > grid[-1] // 2:
        s[grid[-1] // 2] = 1.0
    scaled = t * np.tile(s, math.prod(modes[:-1]))[:, None, None]
    back = math.prod(grid) * irfftn_rows(scaled, grid, modes).numpy()
    np.testing.assert_allclose(np.sum(rfftn_rows(x, modes).numpy() * t), np.sum(x * back),
                               rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("call,match", [
    (lambda: rfftn_rows(np.zeros((2, 3, 8, 8)), (9, 4)),
     r"rfftn_rows: modes\[0\] = 9 exceeds the 8 modes of grid dim 0 \(x of shape"),
    (lambda: rfftn_rows(np.zeros((2, 3, 8)), (3, 3)),
     "rfftn_rows: modes must be 1 positive ints"),
    (lambda: rfftn_rows(np.zeros((2, 3)), (3,)), r"rfftn_rows: x must be \[B, C, \*grid\]"),
    (lambda: rfftn_rows(np.zeros((2, 3, 8), int), (3,)), "rfftn_rows"),
    (lambda: irfftn_rows(np.zeros((15, 2, 6)), (8, 8), (4, 4)),
     r"irfftn_rows: t must be \[16, B, 2C\] for modes \(4, 4\), got shape \(15, 2, 6\)"),
    (lambda: irfftn_rows(np.zeros((16, 2, 5)), (8, 8), (4, 4)),
     r"irfftn_rows: t must be \[16, B, 2C\]"),
    (lambda: irfftn_rows(np.zeros((24, 2, 6)), (8, 8), (4, 6)),
     r"irfftn_rows: modes\[1\] = 6 exceeds the 5 modes of grid dim 1"),
])
def test_rows_ops_bad_input_is_a_clear_error(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


def test_complex_block_times_a_packed_row_is_the_complex_product():
    """[xr | xi] @ complex_block(re, im) = [Re | Im] of x w, against NumPy's complex
    matmul, batched and in float32."""
    rng = np.random.default_rng(13)
    for dtype in (np.float64, np.float32):
        re, im = (rng.standard_normal((3, 4, 5)).astype(dtype) for _ in range(2))
        x = (rng.standard_normal((3, 2, 4)) + 1j * rng.standard_normal((3, 2, 4)))
        x = x.astype(np.complex128 if dtype == np.float64 else np.complex64)
        block = ComplexBlock.apply(nb.tensor(re), nb.tensor(im)).numpy()
        out = np.concatenate([x.real, x.imag], -1) @ block
        expected = x @ (re + 1j * im)
        tol = 1e-12 if dtype == np.float64 else 1e-5
        np.testing.assert_allclose(out[..., :5], expected.real, atol=tol)
        np.testing.assert_allclose(out[..., 5:], expected.imag, atol=tol)


# -- bad input ------------------------------------------------------------------------------
@pytest.mark.parametrize("rank", [0, -2, 0.0, 1.5, -0.1, "half", True])
def test_bad_rank_is_a_clear_error(rank):
    with pytest.raises(ValueError, match="SpectralConv: rank"):
        SpectralConv(2, 2, (4,), factorization="cp", rank=rank)


@pytest.mark.parametrize("fac", ["svd", "tucker2", 3])
def test_unknown_factorization_is_a_clear_error(fac):
    with pytest.raises(ValueError, match="SpectralConv: factorization"):
        SpectralConv(2, 2, (4,), factorization=fac)


@pytest.mark.parametrize("fac,kind", [("cP", "cp"), ("ComplexTucker", "tucker"),
                                      ("tt", "tt"), ("Dense", None)])
def test_factorization_names_are_case_insensitive(fac, kind):
    layer = SpectralConv(2, 2, (4, 4), factorization=fac)
    assert layer.factorization == kind
    assert isinstance(getattr(layer, "weight", None), FactorizedTensor) == (kind is not None)


def test_bad_implementation_and_rank_too_small():
    with pytest.raises(ValueError, match="SpectralConv: implementation"):
        SpectralConv(2, 2, (4,), factorization="cp", implementation="fast")
    with pytest.raises(ValueError, match="SpectralConv: rank=.*CP rank 0"):
        SpectralConv(2, 2, (2,), factorization="cp", rank=0.01)
