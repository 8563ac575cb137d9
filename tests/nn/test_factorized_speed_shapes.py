"""The factorised contraction (``FactorizedTensor.contract``, SpectralConv's
implementation='factorized') against an independent NumPy complex oracle and against
implementation='reconstructed', for every factorisation, 1-3 grid dims and ranks 0.1-1;
and the sizes of its intermediates: every product it forms (the GEMMs and broadcast
products, recorded through a hook on the module's ``matmul`` / ``mul``) stays within the
bound its docstring states -- at most max(B, C) C M entries (Tucker, TT) or B C M (CP),
C the largest channel dim or channel rank, M = prod(modes) -- so no batch-times-weight
outer product (the old [B, r_out, r_modes.., modes..] of Tucker) and, for Tucker at
ranks below the channels, nothing as large as the dense [in, out, *modes] weight."""

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.nn import factorized
from nbgrad.nn.factorized import FactorizedTensor, cmatmul, cmul, cp_rank
from nbgrad.nn.spectral import SpectralConv
from nbgrad.testing.torch_reference import factorized_dense

FACS = ("cp", "tucker", "tt")
RANKS = (0.1, 0.3, 0.6, 1.0)
MODES = {1: (7,), 2: (6, 5), 3: (4, 3, 4)}  # kept modes of the oracle tests
N_MODES = {1: (12,), 2: (6, 8), 3: (4, 3, 6)}  # SpectralConv's n_modes -> kept as MODES
GRIDS = {1: (14,), 2: (8, 9), 3: (5, 4, 7)}
C_IN, C_OUT = 4, 5


def shape_of(d: int, sep: bool) -> tuple:
    return ((C_IN,) if sep else (C_IN, C_OUT)) + MODES[d]


def valid(fac: str, d: int, sep: bool, rank: float) -> bool:
    """A fraction that leaves CP no rank is a constructor error (tested elsewhere)."""
    return fac != "cp" or cp_rank(shape_of(d, sep), rank) >= 1


CASES = [(fac, d, sep, rank) for fac in FACS for d in (1, 2, 3) for sep in (False, True)
         for rank in RANKS if valid(fac, d, sep, rank)]


def complex_factors(w: FactorizedTensor) -> dict:
    return {n: w.get(n)[0].numpy() + 1j * w.get(n)[1].numpy()
            for n in sorted({p[:-5] for p, _ in w.named_parameters()})}


def np_apply(w: np.ndarray, x: np.ndarray, sep: bool) -> np.ndarray:
    m = "xyz"[:x.ndim - 2]
    return x * w if sep else np.einsum(f"bi{m},io{m}->bo{m}", x, w)


def tensor_for(fac, d, sep, rank, seed=0, dtype=np.float64):
    w = FactorizedTensor(shape_of(d, sep), fac, rank, dtype=dtype)
    return w.normal_(0.7, generator=np.random.default_rng(seed))


def spectrum(b, d, seed, dtype=np.float64):
    rng = np.random.default_rng(seed)
    shape = (b, C_IN) + MODES[d]
    return rng.standard_normal(shape).astype(dtype), rng.standard_normal(shape).astype(dtype)


# -- values and gradients -----------------------------------------------------------------
@pytest.mark.parametrize("fac,d,sep,rank", CASES)
def test_contract_against_numpy_complex_oracle(fac, d, sep, rank):
    w = tensor_for(fac, d, sep, rank)
    xr, xi = spectrum(3, d, 1)
    yr, yi = w.contract((nb.tensor(xr), nb.tensor(xi)), sep)
    dense = factorized_dense(np.einsum, fac, complex_factors(w), w.order)
    want = np_apply(dense, xr + 1j * xi, sep)
    scale = np.abs(want).max()
    np.testing.assert_allclose(yr.numpy(), want.real, rtol=1e-10, atol=1e-13 * scale)
    np.testing.assert_allclose(yi.numpy(), want.imag, rtol=1e-10, atol=1e-13 * scale)


def layers(fac, d, sep, rank, dtype=np.float64, seed=0):
    c_out = C_IN if sep else C_OUT
    return [SpectralConv(C_IN, c_out, N_MODES[d], factorization=fac, rank=rank, separable=sep,
                         implementation=impl, dtype=dtype, generator=np.random.default_rng(seed))
            for impl in ("factorized", "reconstructed")]


def forward_backward(layer, x, v):
    xn = nb.tensor(x, requires_grad=True)
    y = layer(xn)
    (y * nb.tensor(v)).sum().backward()
    return y.numpy(), xn.grad.numpy(), {n: p.grad.numpy() for n, p in layer.named_parameters()}


@pytest.mark.parametrize("fac,d,sep,rank", CASES)
def test_factorized_equals_reconstructed_float64(fac, d, sep, rank):
    a, b = layers(fac, d, sep, rank)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, C_IN) + GRIDS[d])
    v = rng.standard_normal((3, a.out_channels) + GRIDS[d])
    ya, gxa, gpa = forward_backward(a, x, v)
    yb, gxb, gpb = forward_backward(b, x, v)
    np.testing.assert_allclose(ya, yb, rtol=1e-10, atol=1e-13 * np.abs(yb).max())
    np.testing.assert_allclose(gxa, gxb, rtol=1e-10, atol=1e-13 * np.abs(gxb).max())
    assert gpa.keys() == gpb.keys()
    for name in gpa:
        np.testing.assert_allclose(gpa[name], gpb[name], rtol=1e-10,
                                   atol=1e-13 * max(np.abs(gpb[name]).max(), 1e-300),
                                   err_msg=name)


@pytest.mark.parametrize("fac", FACS)
def test_factorized_equals_reconstructed_float32(fac):
    a, b = layers(fac, 2, False, 0.5, dtype=np.float32)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, C_IN) + GRIDS[2]).astype(np.float32)
    v = rng.standard_normal((2, C_OUT) + GRIDS[2]).astype(np.float32)
    ya, gxa, gpa = forward_backward(a, x, v)
    yb, gxb, gpb = forward_backward(b, x, v)
    assert ya.dtype == gxa.dtype == np.float32
    np.testing.assert_allclose(ya, yb, atol=2e-5 * np.abs(yb).max())
    np.testing.assert_allclose(gxa, gxb, atol=2e-5 * np.abs(gxb).max())
    for name in gpa:
        assert gpa[name].dtype == np.float32
        np.testing.assert_allclose(gpa[name], gpb[name], atol=2e-5 * np.abs(gpb[name]).max(),
                                   err_msg=name)


@pytest.mark.parametrize("fac", FACS)
@pytest.mark.parametrize("sep", [False, True])
def test_mixed_second_derivative_equals_reconstructed(fac, sep):
    """d/dx <dL/dfactor1_imag, u> through both paths (double backward through the ops)."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, C_IN) + GRIDS[2])
    out = []
    for layer in layers(fac, 2, sep, 0.6):
        v = np.random.default_rng(5).standard_normal((2, layer.out_channels) + GRIDS[2])
        p = layer.weight.factor1_imag
        u = np.random.default_rng(6).standard_normal(p.shape)
        xn = nb.tensor(x, requires_grad=True)
        (gp,) = nb.grad((layer(xn) * nb.tensor(v)).sum(), [p], create_graph=True)
        (gx,) = nb.grad((gp * nb.tensor(u)).sum(), [xn])
        out.append(gx.numpy())
    np.testing.assert_allclose(out[0], out[1], rtol=1e-10, atol=1e-13 * np.abs(out[1]).max())


@settings(max_examples=15, deadline=None)
@given(fac=st.sampled_from(FACS), d=st.integers(1, 3), sep=st.booleans(),
       rank=st.one_of(st.floats(0.1, 1.0), st.integers(1, 5)), batch=st.integers(1, 5),
       seed=st.integers(0, 99))
def test_property_contract_against_numpy(fac, d, sep, rank, batch, seed):
    assume(valid(fac, d, sep, rank))
    w = tensor_for(fac, d, sep, rank, seed)
    xr, xi = spectrum(batch, d, seed + 1)
    yr, yi = w.contract((nb.tensor(xr), nb.tensor(xi)), sep)
    dense = factorized_dense(np.einsum, fac, complex_factors(w), w.order)
    want = np_apply(dense, xr + 1j * xi, sep)
    atol = 1e-13 * np.abs(want).max()
    np.testing.assert_allclose(yr.numpy() + 1j * yi.numpy(), want, rtol=1e-10, atol=atol)


def test_complex_helpers_against_numpy():
    rng = np.random.default_rng(7)
    a = rng.standard_normal((2, 3, 4)) + 1j * rng.standard_normal((2, 3, 4))
    b = rng.standard_normal((4, 5)) + 1j * rng.standard_normal((4, 5))
    c = rng.standard_normal((1, 3, 1)) + 1j * rng.standard_normal((1, 3, 1))

    def pair(z):
        return nb.tensor(z.real.copy()), nb.tensor(z.imag.copy())

    for got, want in ((cmatmul(pair(a), pair(b)), a @ b), (cmul(pair(a), pair(c)), a * c)):
        np.testing.assert_allclose(got[0].numpy() + 1j * got[1].numpy(), want, rtol=1e-12)


# -- intermediate sizes -------------------------------------------------------------------
def recorded_sizes(monkeypatch, fn) -> list:
    """Run ``fn`` with the module's ``matmul`` / ``mul`` wrapped to record each result's
    shape (every product the contraction forms goes through one of them). A real GEMM
    may hold the real and imaginary parts together ([re; im] or [re | im]), so sizes are
    compared in complex entries: real entries / 2."""
    shapes = []

    def hook(op):
        def wrapped(*args):
            out = op(*args)
            shapes.append(tuple(out.shape))
            return out
        return wrapped

    monkeypatch.setattr(factorized, "matmul", hook(factorized.matmul))
    monkeypatch.setattr(factorized, "mul", hook(factorized.mul))
    fn()
    return shapes


def channel_bound(w: FactorizedTensor, sep: bool, batch: int) -> int:
    """The docstring's bound: max(B, C) C M (Tucker, TT), B C M and C M (CP), with C the
    largest channel dim or channel rank and M the modes' product."""
    n_lead = 1 if sep else 2
    m = math.prod(w.shape[n_lead:])
    chans = list(w.shape[:n_lead])
    if w.factorization == "cp":
        return max(batch, 1) * max(chans + [w.rank]) * m
    if w.factorization == "tucker":
        c = max(chans + list(w.rank[:n_lead]))
    else:
        c = max(chans + list(w.rank[1:n_lead + 1]))
    return max(batch, c) * c * m


@pytest.mark.parametrize("fac,d,sep,rank", CASES)
def test_intermediates_within_the_stated_bound(monkeypatch, fac, d, sep, rank):
    w = tensor_for(fac, d, sep, rank)
    batch = 6
    xr, xi = spectrum(batch, d, 8)
    shapes = recorded_sizes(monkeypatch, lambda: w.contract((nb.tensor(xr), nb.tensor(xi)),
                                                            sep))
    assert shapes, "the hook saw no products"
    bound = channel_bound(w, sep, batch)
    biggest = max(shapes, key=math.prod)
    assert math.prod(biggest) <= 2 * bound, (biggest, bound)


@pytest.mark.parametrize("d", [2, 3])
def test_tucker_never_forms_dense_or_batch_outer_products(monkeypatch, d):
    """Tucker at ranks below the channels (the darcy-tfno setting, rank 0.42): nothing
    as large as the dense [in, out, *modes] weight, and nothing with the batch and more
    than one rank or channel dim (B C M at most on the batch side)."""
    in_c, out_c, batch = 6, 7, 11  # a batch no other dim equals
    modes = (6, 5, 4)[:d]
    w = FactorizedTensor((in_c, out_c) + modes, "tucker", 0.42).normal_(
        1.0, generator=np.random.default_rng(9))
    assert all(r < s for r, s in zip(w.rank, w.shape))
    rng = np.random.default_rng(10)
    x = [nb.tensor(rng.standard_normal((batch, in_c) + modes)) for _ in range(2)]
    shapes = recorded_sizes(monkeypatch, lambda: w.contract(tuple(x), False))
    m = math.prod(modes)
    batch_side = [s for s in shapes if batch in s]
    weight_side = [s for s in shapes if batch not in s]
    assert batch_side and weight_side
    assert max(math.prod(s) for s in weight_side) < 2 * in_c * out_c * m
    assert max(math.prod(s) for s in batch_side) <= 2 * batch * max(in_c, out_c) * m


def test_products_grow_linearly_with_batch(monkeypatch):
    """Summed product sizes are affine in the batch (weight side fixed, batch side per
    sample): equal increments from B = 20 to 40 and 40 to 60."""
    w = tensor_for("tucker", 3, False, 0.6)
    totals = []
    for batch in (20, 40, 60):  # large enough that the chosen order stays the same
        xr, xi = spectrum(batch, 3, 11)
        shapes = recorded_sizes(
            monkeypatch, lambda xr=xr, xi=xi: w.contract((nb.tensor(xr), nb.tensor(xi)),
                                                         False))
        monkeypatch.undo()
        totals.append(sum(math.prod(s) for s in shapes))
    assert totals[2] - totals[1] == totals[1] - totals[0] > 0


@pytest.mark.parametrize("d", [1, 2, 3])
def test_cp_reconstruction_never_forms_the_shape_times_rank_product(monkeypatch, d):
    """to_tensor (implementation='reconstructed') of CP at rank 0.6: the dense W from
    two Khatri-Rao halves, nothing near the [*shape, R] outer product."""
    w = tensor_for("cp", d, False, 0.6)
    dense = factorized_dense(np.einsum, "cp", complex_factors(w), w.order)
    got = []
    shapes = recorded_sizes(monkeypatch, lambda: got.extend(w.to_tensor()))
    np.testing.assert_allclose(got[0].numpy() + 1j * got[1].numpy(), dense, rtol=1e-10,
                               atol=1e-13 * np.abs(dense).max())
    n = math.prod(w.shape)
    assert max(math.prod(s) for s in shapes) <= 2 * max(n, math.isqrt(n) * 4 * w.rank)
    assert max(math.prod(s) for s in shapes) < n * w.rank
