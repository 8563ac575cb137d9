"""laplace_basis, lno_encode, lno_decode."""

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads
from hypothesis import given
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.kernels import laplace as K
from nbgrad.ops import laplace as laplace_ops
from nbgrad.testing import gradcheck


def basis_numpy(mu, n):
    """E[m, j] = exp(-mu_m t_j), t_j = j / (n - 1) (t = 0 for n = 1), in float64."""
    t = np.arange(n) / (n - 1) if n > 1 else np.zeros(1)
    return np.exp(-np.outer(np.asarray(mu, np.float64), t)), t


def basis_and_grad(mu, n, g):
    m = nb.tensor(mu, requires_grad=True)
    E = nb.laplace_basis(m, n)
    E.backward(g)
    return E.numpy(), m.grad.numpy()


def test_fixed_values():
    E = nb.laplace_basis(np.array([0.0, 1.0, np.log(2.0)]), 3).numpy()
    expected = [[1, 1, 1], [1, np.exp(-0.5), np.exp(-1)], [1, 2 ** -0.5, 0.5]]
    np.testing.assert_allclose(E, expected, rtol=1e-15)


@pytest.mark.parametrize("n", [1, 2, 5, 64])
def test_forward_and_gradient_against_numpy(rng, n):
    mu = rng.uniform(-1.0, 4.0, 6)
    g = rng.standard_normal((6, n))
    E, dmu = basis_and_grad(mu, n, g)
    E_ref, t = basis_numpy(mu, n)
    np.testing.assert_allclose(E, E_ref, rtol=1e-14)
    np.testing.assert_allclose(dmu, -(g * t * E_ref).sum(axis=1), rtol=1e-12, atol=1e-14)


def test_single_point_is_constant_one(rng):
    E, dmu = basis_and_grad(rng.uniform(0, 3, 4), 1, np.ones((4, 1)))
    np.testing.assert_array_equal(E, np.ones((4, 1)))
    np.testing.assert_array_equal(dmu, np.zeros(4))


def test_float32_stays_float32_and_is_accurate(rng):
    mu = rng.uniform(0.0, 20.0, 32)
    g = rng.standard_normal((32, 1000))
    E, dmu = basis_and_grad(mu.astype(np.float32), 1000, g.astype(np.float32))
    assert E.dtype == dmu.dtype == np.float32
    # float32 rounds mu_m t_j (a relative error of eps * |mu t| in E): evaluate exp in
    # float64 on the same rounded arguments, so only the exp's own error (< 1 ulp) is left.
    t32 = np.arange(1000, dtype=np.float32) / np.float32(999)
    arg32 = mu.astype(np.float32)[:, None] * t32
    E_ref = np.exp(-arg32.astype(np.float64))
    np.testing.assert_allclose(E, E_ref, rtol=2.5e-7, atol=1e-30)
    dmu_ref = -(g.astype(np.float32) * t32 * E_ref).sum(axis=1)
    np.testing.assert_allclose(dmu, dmu_ref, rtol=1e-4, atol=1e-4)


def test_fast_decay_underflows_to_zero_without_nan():
    for dtype in (np.float32, np.float64):
        E, dmu = basis_and_grad(np.array([1e6, 1e30], dtype), 50, np.ones((2, 50), dtype))
        assert np.isfinite(E).all() and np.isfinite(dmu).all()
        assert E[:, 0].tolist() == [1, 1] and not E[:, 1:].any()


def test_broadcast_upstream_gradient(rng):
    mu = rng.uniform(0, 3, 4)
    _, d_view = basis_and_grad(mu, 7, np.broadcast_to(np.arange(7.0), (4, 7)))
    _, d_full = basis_and_grad(mu, 7, np.tile(np.arange(7.0), (4, 1)))
    np.testing.assert_array_equal(d_view, d_full)


def test_gradcheck_every_argument(rng):
    mu = rng.uniform(0.1, 3.0, 4)
    gradcheck(lambda m: nb.laplace_basis(m, 6), [mu])
    gradcheck(nb.lno_encode, [rng.standard_normal((3, 9)), mu])
    gradcheck(lambda x, m: nb.lno_decode(x, m, 11), [rng.standard_normal((3, 4)), mu])
    gradcheck(nb.lno_encode, [rng.standard_normal(9), mu])   # unbatched field


@given(M=st.integers(1, 5), n=st.integers(1, 9), seed=st.integers(0, 2**31))
def test_property_forward_and_gradcheck(M, n, seed):
    rng = np.random.default_rng(seed)
    mu = rng.uniform(-2.0, 4.0, M)
    np.testing.assert_allclose(nb.laplace_basis(mu, n).numpy(), basis_numpy(mu, n)[0],
                               rtol=1e-14)
    gradcheck(lambda m: nb.laplace_basis(m, n), [mu])
    x = rng.standard_normal((2, M))
    gradcheck(lambda x, m: nb.lno_decode(x, m, n), [x, mu])


def test_encode_decode_against_numpy(rng):
    mu = rng.uniform(0.1, 5.0, 8)
    u = rng.standard_normal((5, 40))
    E_in, t_in = basis_numpy(mu, 40)
    E_out, t_out = basis_numpy(mu, 25)
    mut, ut = nb.tensor(mu, requires_grad=True), nb.tensor(u, requires_grad=True)
    code = nb.lno_encode(ut, mut)
    y = nb.lno_decode(code, mut, 25)
    c_ref = u @ E_in.T
    np.testing.assert_allclose(code.numpy(), c_ref, rtol=1e-12)
    np.testing.assert_allclose(y.numpy(), c_ref @ E_out, rtol=1e-12)
    gy = rng.standard_normal((5, 25))
    y.backward(gy)
    gc = gy @ E_out.T                                    # dL/dcode
    dE_out = c_ref.T @ gy                                # dL/dE(mu, 25)
    dE_in = gc.T @ u                                     # dL/dE(mu, 40)
    dmu = -(dE_out * t_out * E_out).sum(1) - (dE_in * t_in * E_in).sum(1)
    np.testing.assert_allclose(mut.grad.numpy(), dmu, rtol=1e-10)
    np.testing.assert_allclose(ut.grad.numpy(), gc @ E_in, rtol=1e-10)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_parallel_kernels_bitwise_equal_serial_at_1_and_2_threads(rng, dtype):
    mu = rng.uniform(0, 10, 37).astype(dtype)
    t = K.laplace_grid(301, mu)
    g = rng.standard_normal((37, 301)).astype(dtype)
    E = K.laplace_forward(mu, t)
    dmu = K.laplace_backward(g, E, t)
    for threads in (1, 2):
        assert_same_bits(at_threads(threads, K.laplace_forward_parallel, mu, t), E)
        assert_same_bits(at_threads(threads, K.laplace_backward_parallel, g, E, t), dmu)


def test_op_bitwise_at_1_and_2_threads(rng, monkeypatch):
    mu = rng.uniform(0, 10, 37).astype(np.float32)
    g = rng.standard_normal((37, 301)).astype(np.float32)
    for parallel_min in (laplace_ops.LAPLACE_PARALLEL_MIN, 0):   # serial and parallel
        monkeypatch.setattr(laplace_ops, "LAPLACE_PARALLEL_MIN", parallel_min)
        one = at_threads(1, basis_and_grad, mu, 301, g)
        two = at_threads(2, basis_and_grad, mu, 301, g)
        assert_same_bits(one[0], two[0])
        assert_same_bits(one[1], two[1])


def test_torch_oracle(rng):
    torch = pytest.importorskip("torch")
    mu = rng.uniform(0.1, 5.0, 6)
    u = rng.standard_normal((4, 30))
    gy = rng.standard_normal((4, 20))
    mt = torch.tensor(mu, requires_grad=True)
    ut = torch.tensor(u, requires_grad=True)

    def E(n):
        return torch.exp(-mt[:, None] * torch.linspace(0, 1, n, dtype=torch.float64))

    y = (ut @ E(30).T) @ E(20)
    y.backward(torch.tensor(gy))
    m, x = nb.tensor(mu, requires_grad=True), nb.tensor(u, requires_grad=True)
    ours = nb.lno_decode(nb.lno_encode(x, m), m, 20)
    ours.backward(gy)
    np.testing.assert_allclose(ours.numpy(), y.detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(m.grad.numpy(), mt.grad.numpy(), rtol=1e-10)
    np.testing.assert_allclose(x.grad.numpy(), ut.grad.numpy(), rtol=1e-10)


def test_torch_oracle_second_derivative(rng):
    # d/d(mu, u) of <d<lno_decode(lno_encode(u, mu), mu, 20), gy>/dmu, w>: through E and
    # its derivative -t E, both taken from the basis op's output.
    torch = pytest.importorskip("torch")
    mu = rng.uniform(0.1, 5.0, 6)
    u = rng.standard_normal((4, 30))
    gy = rng.standard_normal((4, 20))
    w = rng.standard_normal(6)
    mt = torch.tensor(mu, requires_grad=True)
    ut = torch.tensor(u, requires_grad=True)

    def E(n):
        return torch.exp(-mt[:, None] * torch.linspace(0, 1, n, dtype=torch.float64))

    (dmu,) = torch.autograd.grad((ut @ E(30).T) @ E(20), mt, torch.tensor(gy),
                                 create_graph=True)
    want = torch.autograd.grad((dmu * torch.tensor(w)).sum(), (mt, ut))
    m, x = nb.tensor(mu, requires_grad=True), nb.tensor(u, requires_grad=True)
    (dm,) = nb.grad(nb.lno_decode(nb.lno_encode(x, m), m, 20), m, grad_outputs=gy,
                    create_graph=True)
    got = nb.grad((dm * w).sum(), [m, x])
    np.testing.assert_allclose(dm.numpy(), dmu.detach().numpy(), rtol=1e-10)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-12)


# -- bad input ----------------------------------------------------------------------------------


def test_rates_not_1d_raises():
    with pytest.raises(ValueError, match=r"laplace_basis: mu must be 1-D .*shape \(2, 3\)"):
        nb.laplace_basis(np.ones((2, 3)), 4)
    with pytest.raises(ValueError, match=r"lno_encode: mu must be 1-D .*shape \(\)"):
        nb.lno_encode(np.ones((2, 3)), np.float64(1.0))


def test_bad_point_count_raises():
    with pytest.raises(ValueError, match="laplace_basis: n = -1 must be >= 0"):
        nb.laplace_basis(np.ones(3), -1)
    with pytest.raises(TypeError, match="lno_decode: n_out must be an integer, got 2.5"):
        nb.lno_decode(np.ones((2, 3)), np.ones(3), 2.5)


def test_integer_rates_raise():
    with pytest.raises(TypeError,
                       match="laplace_basis: mu must be float32 or float64, got nbgrad.int64"):
        nb.laplace_basis(np.arange(3), 4)


def test_decode_coefficient_mismatch_raises():
    with pytest.raises(ValueError, match=r"lno_decode: x has shape \(2, 4\) but mu has shape "
                                         r"\(3,\).*M = 3"):
        nb.lno_decode(np.ones((2, 4)), np.ones(3), 10)
    with pytest.raises(ValueError, match=r"lno_encode: u must have at least one dim"):
        nb.lno_encode(np.float64(1.0), np.ones(3))


@pytest.mark.parametrize("M, n", [(0, 4), (3, 0)])
def test_empty_basis(M, n):
    E, dmu = basis_and_grad(np.ones(M), n, np.ones((M, n)))
    assert E.shape == (M, n)
    np.testing.assert_array_equal(dmu, np.zeros(M))


@pytest.mark.parametrize("create_graph", [False, True])
@pytest.mark.parametrize("batch, M, n", [((0,), 2, 4), ((2, 0), 2, 4), ((3,), 2, 0),
                                         ((3,), 0, 4), ((0,), 0, 0)])
def test_lno_empty_operands(batch, M, n, create_graph):
    # like u @ E.T and x @ E in PyTorch: empty sums are 0, and so are all gradients
    mu = nb.tensor(np.linspace(0.5, 2.0, M), requires_grad=True)
    u = nb.tensor(np.ones(batch + (n,)), requires_grad=True)
    x = nb.tensor(np.ones(batch + (M,)), requires_grad=True)
    y, z = nb.lno_encode(u, mu), nb.lno_decode(x, mu, n)
    assert y.shape == batch + (M,) and z.shape == batch + (n,)
    np.testing.assert_array_equal(y.numpy(), 0)
    np.testing.assert_array_equal(z.numpy(), 0)
    grads = nb.grad(y.sum() + z.sum(), [u, x, mu], create_graph=create_graph)
    for g, a in zip(grads, (u, x, mu)):
        assert g.shape == a.shape
        np.testing.assert_array_equal(g.numpy(), 0)
