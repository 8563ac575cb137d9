"""The physics-informed network of notebooks/pinn_poisson.ipynb: -u'' = f on [0, 1],
u(0) = u(1) = 0, with u_x and u_xx from two nested ``grad(..., create_graph=True)``
calls. The model code below is written once for both libraries (a backend passes
``tensor``, ``grad``, ``tanh``, ``sqrt``), so nbgrad and PyTorch run the same
computation from the same initial parameters."""

from types import SimpleNamespace

import numpy as np
import pytest

import nbgrad as nb

SIZES = (1, 32, 32, 1)
NB = SimpleNamespace(tensor=nb.tensor, grad=nb.grad, tanh=nb.tanh, sqrt=nb.sqrt,
                     no_grad=nb.no_grad)


def init_params(seed=0, sizes=SIZES):
    """Weights N(0, 1/fan_in), zero biases: [W1, b1, W2, b2, ...] as float64 arrays."""
    rng = np.random.default_rng(seed)
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        params += [rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in), np.zeros(fan_out)]
    return params


def mlp(lib, params, x):
    h = x
    for w, b in zip(params[:-2:2], params[1:-2:2]):
        h = lib.tanh(h @ w + b)
    return h @ params[-2] + params[-1]


def derivatives(lib, params, x):
    """u, u_x, u_xx at the points x [N, 1] (x requires grad). Each u[i] depends on x[i]
    only, so the gradient of the sum is the per-point derivative."""
    u = mlp(lib, params, x)
    (u_x,) = lib.grad(u.sum(), x, create_graph=True)
    (u_xx,) = lib.grad(u_x.sum(), x, create_graph=True)
    return u, u_x, u_xx


def pinn_loss(lib, params, x, f, x_boundary):
    """mean((u_xx + f)^2) over the collocation points + mean(u^2) on the boundary."""
    _, _, u_xx = derivatives(lib, params, x)
    return ((u_xx + f) ** 2).mean() + (mlp(lib, params, x_boundary) ** 2).mean()


def train(lib, steps, n_points=64, lr=1e-2, betas=(0.9, 0.999), eps=1e-8, seed=0):
    """Adam by hand; returns the losses and the parameters."""
    params = [lib.tensor(p, requires_grad=True) for p in init_params(seed)]
    x_np = np.linspace(0.0, 1.0, n_points)[:, None]
    x = lib.tensor(x_np, requires_grad=True)
    f = lib.tensor(np.pi**2 * np.sin(np.pi * x_np))
    x_boundary = lib.tensor(np.array([[0.0], [1.0]]))
    m = [0 * p.detach() for p in params]
    v = [0 * p.detach() for p in params]
    losses = []
    for t in range(1, steps + 1):
        loss = pinn_loss(lib, params, x, f, x_boundary)
        grads = lib.grad(loss, params)
        losses.append(loss.item())
        with lib.no_grad():
            for i, (p, g) in enumerate(zip(params, grads)):
                m[i] = betas[0] * m[i] + (1 - betas[0]) * g
                v[i] = betas[1] * v[i] + (1 - betas[1]) * g * g
                step = lr * (m[i] / (1 - betas[0] ** t)) / (
                    lib.sqrt(v[i] / (1 - betas[1] ** t)) + eps)
                p.data -= step.data  # in place on the leaf, as `p -= step` in PyTorch
    return losses, params


def test_first_ten_losses_match_pytorch():
    torch = pytest.importorskip("torch")
    lib = SimpleNamespace(tensor=torch.tensor, grad=torch.autograd.grad, tanh=torch.tanh,
                          sqrt=torch.sqrt, no_grad=torch.no_grad)
    ours, _ = train(NB, 10)
    theirs, _ = train(lib, 10)
    assert min(ours) < ours[0] / 4  # it is learning
    np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=0)


def test_second_derivative_matches_finite_differences():
    params = [nb.tensor(p, requires_grad=True) for p in init_params(seed=1)]
    x_np = np.linspace(0.0, 1.0, 17)[:, None]
    u, u_x, u_xx = derivatives(NB, params, nb.tensor(x_np, requires_grad=True))
    assert u.shape == u_x.shape == u_xx.shape == (17, 1)

    def u_at(x):
        with nb.no_grad():
            return mlp(NB, params, nb.tensor(x)).numpy()

    h = 1e-4
    fd_x = (u_at(x_np + h) - u_at(x_np - h)) / (2 * h)
    fd_xx = (u_at(x_np + h) - 2 * u_at(x_np) + u_at(x_np - h)) / h**2
    scale = np.abs(fd_xx).max()
    np.testing.assert_allclose(u_x.numpy(), fd_x, rtol=0, atol=1e-5 * np.abs(fd_x).max())
    np.testing.assert_allclose(u_xx.numpy(), fd_xx, rtol=0, atol=1e-5 * scale)
