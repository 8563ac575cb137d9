"""hardswish, hardsigmoid, mish, selu, celu, softsign, tanhshrink and glu
(nbgrad/ops/activation_extra.py): PyTorch oracles for values, gradients (kinks included)
and second derivatives over hypothesis shapes, gradcheck and gradgradcheck of the
compositions, and bad input."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.ops import activation_extra as A
from nbgrad.testing import gradcheck, gradgradcheck

torch = pytest.importorskip("torch")
F = torch.nn.functional

CASES = [("hardswish", {}), ("hardsigmoid", {}), ("mish", {}), ("selu", {}), ("celu", {}),
         ("celu", {"alpha": 0.4}), ("celu", {"alpha": -0.7}), ("softsign", {}),
         ("tanhshrink", {}), ("glu", {}), ("glu", {"dim": 0})]
IDS = [f"{n} {kw}" for n, kw in CASES]
# PyTorch's kernels hold some constants (1/6, 1/alpha) in float32: relative 1e-7 in float64
TOL = {np.float32: dict(rtol=2e-5, atol=1e-6), np.float64: dict(rtol=2e-7, atol=1e-12)}


def _values(rng, shape, dtype):
    """Normal values, some large, and the kinks -3, 3 (hardswish, hardsigmoid)."""
    x = rng.standard_normal(shape) * rng.choice([1.0, 4.0, 30.0], shape)
    flat = x.reshape(-1)
    flat[: flat.size // 3] = rng.choice([-3.0, 3.0, 0.5], flat.size // 3)
    return x.astype(dtype)


@pytest.mark.parametrize(("name", "kw"), CASES, ids=IDS)
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple),
       dtype=st.sampled_from([np.float32, np.float64]), seed=st.integers(0, 2**16))
def test_matches_torch_values_and_grads(name, kw, shape, dtype, seed):
    if name == "glu":
        d = kw.get("dim", -1)
        shape = tuple(2 * s if i == d % len(shape) else s for i, s in enumerate(shape))
    rng = np.random.default_rng(seed)
    x = _values(rng, shape, dtype)
    xn, xt = nb.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    yn, yt = getattr(A, name)(xn, **kw), getattr(F, name)(xt, **kw)
    g = rng.standard_normal(tuple(yt.shape)).astype(dtype)
    yn.backward(g)
    yt.backward(torch.tensor(g))
    assert yn.dtype == dtype and yn.shape == tuple(yt.shape)
    # a negative alpha makes e^(x / alpha) grow: PyTorch's float32 1 / alpha shows there
    tol = dict(rtol=1e-5, atol=1e-6) if kw.get("alpha", 1.0) < 0 else TOL[dtype]
    np.testing.assert_allclose(yn.numpy(), yt.detach().numpy(), **tol)
    np.testing.assert_allclose(xn.grad.numpy(), xt.grad.numpy(), **tol)


def test_kink_gradients_like_torch():
    x = np.array([-3.0, 3.0, -3.5, 3.5, 0.0])
    for name, want in (("hardswish", [0.0, 1.0, 0.0, 1.0, 0.5]),
                       ("hardsigmoid", [0.0, 0.0, 0.0, 0.0, 1 / 6])):
        xn = nb.tensor(x, requires_grad=True)
        getattr(A, name)(xn).sum().backward()
        xt = torch.tensor(x, requires_grad=True)
        getattr(F, name)(xt).sum().backward()
        np.testing.assert_allclose(xn.grad.numpy(), want, rtol=1e-15)
        np.testing.assert_allclose(xn.grad.numpy(), xt.grad.numpy(), rtol=2e-7)


# hardsigmoid's gradient is piecewise constant: no second derivative to take
SMOOTH = [c for c in CASES if c[0] != "hardsigmoid"]


@pytest.mark.parametrize(("name", "kw"), SMOOTH, ids=[f"{n} {kw}" for n, kw in SMOOTH])
def test_second_derivatives_like_torch(name, kw):
    # away from x = 0, where elu's second derivative is a convention
    x = np.array([[-4.0, -2.5, -0.7, 0.3, 1.5, 2.5], [3.5, -1.2, 0.9, -0.2, 5.0, -6.0]])
    xt = torch.tensor(x, requires_grad=True)
    (d,) = torch.autograd.grad(getattr(F, name)(xt, **kw).sum(), [xt], create_graph=True)
    (want,) = torch.autograd.grad((d * d).sum(), [xt])
    xn = nb.tensor(x, requires_grad=True)
    (dn,) = nb.grad(getattr(A, name)(xn, **kw).sum(), [xn], create_graph=True)
    (got,) = nb.grad((dn * dn).sum(), [xn])
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize(("name", "kw"), CASES, ids=IDS)
def test_gradcheck_and_gradgradcheck(name, kw):
    rng = np.random.default_rng(5)
    x = rng.uniform(0.2, 2.5, (2, 4)) * rng.choice([-1.0, 1.0], (2, 4))
    x = nb.tensor(x, requires_grad=True)

    def fn(a):
        return getattr(A, name)(a, **kw)
    assert gradcheck(fn, [x])
    if name != "hardsigmoid":
        assert gradgradcheck(fn, [x])


def test_inputs_unchanged():
    x = np.array([-3.0, -1.0, 0.5, 4.0])
    copy = x.copy()
    for name, kw in CASES:
        getattr(A, name)(x, **kw)
    np.testing.assert_array_equal(x, copy)


def test_bad_input_like_torch():
    with pytest.raises(RuntimeError, match=r"glu: Halving dimension must be even, but "
                                           r"dimension 1 is size 3 \(input of shape \(2, 3\)"):
        A.glu(nb.zeros((2, 3)))
    with pytest.raises(RuntimeError, match="glu.*scalars"):
        A.glu(nb.tensor(1.0))
    with pytest.raises(IndexError, match=r"glu: dim=2 is out of range .* shape \(2, 4\)"):
        A.glu(nb.zeros((2, 4)), dim=2)
    with pytest.raises(RuntimeError, match="celu: alpha cannot be 0"):
        A.celu(nb.zeros(3), alpha=0.0)
    for name, _ in CASES:
        with pytest.raises(TypeError, match=f"{name}: input must be float32 or float64"):
            getattr(A, name)(np.array([1, 2]))
