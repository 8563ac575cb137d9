"""Second (and third) derivatives of the activations and the softmax family: gradgradchecks,
closed forms, the PyTorch oracle."""

import numpy as np
import pytest
from ops.activation_cases import ELEMENTWISE, EW_IDS, OPS, forward_backward, torch_cases
from scipy.special import expit

import nbgrad as nb
from nbgrad import REGISTRY
from nbgrad.testing import check_registered

# -- second derivatives ------------------------------------------------------------------------


@pytest.mark.parametrize("name", OPS)
def test_samples_gradcheck_and_gradgradcheck_through_the_registry(name):
    assert REGISTRY[name].has_vjp()
    for second_order in (False, True):
        report = check_registered(name, second_order=second_order)
        assert report.passed, report.failures


def _second_derivative(fn, x, g, v):
    """d/dx <v, d/dx <g, fn(x)>> through two nb.grad calls (the first with create_graph)."""
    t = nb.tensor(x, requires_grad=True)
    (gx,) = nb.grad(fn(t), t, grad_outputs=nb.tensor(g), create_graph=True)
    if not gx.requires_grad:                 # piecewise linear: g times a constant mask
        return gx.numpy(), np.zeros_like(x)
    (h,) = nb.grad(gx, t, grad_outputs=nb.tensor(v))
    return gx.numpy(), h.numpy()


def _torch_second_derivative(torch, fn, x, g, v):
    xt = torch.tensor(x, requires_grad=True)
    (gt,) = torch.autograd.grad(fn(xt), xt, torch.tensor(g), create_graph=True)
    if not gt.requires_grad:
        return gt.detach().numpy(), np.zeros_like(x)
    (ht,) = torch.autograd.grad(gt, xt, torch.tensor(v), allow_unused=True)
    return gt.detach().numpy(), np.zeros_like(x) if ht is None else ht.numpy()


def _signed(rng, shape, low, high):
    """|x| in [low, high], random sign."""
    return rng.uniform(low, high, shape) * rng.choice([-1.0, 1.0], shape)


def test_pytorch_oracle_second_derivatives():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(14)
    x = _signed(rng, (6, 50), 0.05, 6.0)
    # away from the kinks, the clamp bounds (-0.5, 1) and softplus's threshold (3 / 1.5)
    for edge in (-0.5, 1.0, 2.0):
        x = np.where(np.abs(x - edge) < 0.05, edge + 0.1, x)
    cases = torch_cases(torch) + [
        ("gelu_quick", nb.gelu_quick, lambda t: t * torch.sigmoid(1.702 * t)),
        ("softmax dim=1", lambda t: nb.softmax(t, dim=1), lambda t: torch.softmax(t, 1)),
        ("logsumexp all", nb.logsumexp, lambda t: torch.logsumexp(t, (0, 1))),
        ("logsumexp keepdim", lambda t: nb.logsumexp(t, 0, True),
         lambda t: torch.logsumexp(t, 0, True)),
    ]
    for name, ours, theirs in cases:
        g = rng.standard_normal(ours(x).shape)
        v = rng.standard_normal(x.shape)
        gx, h = _second_derivative(ours, x, g, v)
        gx_t, h_t = _torch_second_derivative(torch, theirs, x, g, v)
        np.testing.assert_allclose(gx, gx_t, rtol=1e-10, atol=1e-13, err_msg=name)
        np.testing.assert_allclose(h, h_t, rtol=1e-10, atol=1e-13, err_msg=name)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name, fn, f, df", ELEMENTWISE, ids=EW_IDS)
def test_recorded_backward_matches_the_kernel_backward_kinks_included(name, fn, f, df, dtype):
    # the vjp (create_graph=True) computes the first derivative with nbgrad ops: the same
    # values as the kernels, PyTorch's kink conventions included
    x = np.concatenate([np.linspace(-6, 6, 241), [0.0, -0.0, -1.0, 2.0, 2.5]]).astype(dtype)
    g = np.random.default_rng(15).standard_normal(x.size).astype(dtype)
    _, want = forward_backward(fn, x, g)
    t = nb.tensor(x, requires_grad=True)
    (got,) = nb.grad(fn(t), t, grad_outputs=nb.tensor(g), create_graph=True)
    assert got.dtype == dtype
    tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == np.float32 else {"rtol": 1e-12,
                                                                   "atol": 1e-15}
    np.testing.assert_allclose(got.numpy(), want, **tol)


def test_second_derivatives_match_closed_forms():
    x = np.linspace(-5, 5, 101) + 0.013               # no point on a kink
    s = expit(x)
    phi = np.exp(-x * x / 2) / np.sqrt(2 * np.pi)
    cases = [
        (nb.tanh, -2 * np.tanh(x) * (1 - np.tanh(x) ** 2)),
        (nb.sigmoid, s * (1 - s) * (1 - 2 * s)),
        (nb.relu, 0 * x),
        (lambda t: nb.leaky_relu(t, 0.2), 0 * x),
        (lambda t: nb.elu(t, 1.5), np.where(x > 0, 0.0, 1.5 * np.exp(x))),
        (nb.gelu, phi * (2 - x * x)),
        (nb.silu, s * (1 - s) * (2 + x * (1 - 2 * s))),
        (lambda t: nb.softplus(t, 2.0, 5.0), np.where(2 * x > 5, 0.0,
                                                      2 * expit(2 * x) * (1 - expit(2 * x)))),
        (lambda t: nb.clamp(t, -1.0, 2.0), 0 * x),
    ]
    for fn, want in cases:
        np.testing.assert_allclose(_second_derivative(fn, x, np.ones_like(x),
                                                      np.ones_like(x))[1],
                                   want, rtol=1e-10, atol=1e-14)


def _gelu_d2_d3(x, approximate):
    t = nb.tensor(x, requires_grad=True)
    (d1,) = nb.grad(nb.gelu(t, approximate).sum(), t, create_graph=True)
    (d2,) = nb.grad(d1.sum(), t, create_graph=True)
    (d3,) = nb.grad(d2.sum(), t)
    return d2.numpy(), d3.numpy()


def test_third_derivative_of_gelu_through_gelu_derivative():
    x = np.linspace(-3, 3, 13) + 0.01
    phi = np.exp(-x * x / 2) / np.sqrt(2 * np.pi)
    np.testing.assert_allclose(_gelu_d2_d3(x, "none")[1], phi * (x ** 3 - 4 * x),
                               rtol=1e-10, atol=1e-14)
    eps = 1e-6
    numeric = (_gelu_d2_d3(x + eps, "tanh")[0] - _gelu_d2_d3(x - eps, "tanh")[0]) / (2 * eps)
    np.testing.assert_allclose(_gelu_d2_d3(x, "tanh")[1], numeric, rtol=1e-6, atol=1e-8)


def test_float32_gelu_saved_derivative_fast_path_is_twice_differentiable():
    x = np.linspace(-4, 4, 33).astype(np.float32)
    t = nb.tensor(x, requires_grad=True)
    (d1,) = nb.grad(nb.gelu(t).sum(), t, create_graph=True)
    (d2,) = nb.grad(d1.sum(), t)
    x64 = x.astype(np.float64)
    assert d2.dtype == np.float32
    np.testing.assert_allclose(d2.numpy(), np.exp(-x64 ** 2 / 2) / np.sqrt(2 * np.pi)
                               * (2 - x64 ** 2), rtol=1e-5, atol=1e-6)
