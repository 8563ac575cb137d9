"""Gradients of gradients: create_graph in backward and grad, the functional API against
PyTorch's, the errors, and grad mode per thread."""

import threading

import numpy as np
import pytest

import nbgrad as nb
from nbgrad.autograd import functional as F


def leaf(data, dtype=np.float64):
    return nb.tensor(np.asarray(data, dtype), requires_grad=True)


def test_nested_grad_gives_the_second_and_third_derivative():
    x = leaf([0.3, -1.2, 2.0])
    (d1,) = nb.grad((x ** 4).sum(), x, create_graph=True)
    (d2,) = nb.grad(d1.sum(), x, create_graph=True)
    (d3,) = nb.grad(d2.sum(), x)
    np.testing.assert_allclose(d1.numpy(), 4 * x.data ** 3, rtol=1e-14)
    np.testing.assert_allclose(d2.numpy(), 12 * x.data ** 2, rtol=1e-14)
    np.testing.assert_allclose(d3.numpy(), 24 * x.data, rtol=1e-14)
    assert d1.requires_grad and not d3.requires_grad


def test_backward_with_create_graph_leaves_a_differentiable_grad():
    x = leaf([1.0, 2.0])
    w = leaf([3.0, -1.0])
    ((x * x * w).sum()).backward(create_graph=True)
    assert x.grad.requires_grad and x.grad.grad_fn is not None
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.data * w.data)
    (dw,) = nb.grad(x.grad.sum(), w)  # d/dw sum(2 x w) = 2 x
    np.testing.assert_allclose(dw.numpy(), 2 * x.data)


def test_broadcast_operands_are_reduced_in_the_recorded_backward_too():
    a = leaf(np.arange(3.0).reshape(1, 3) + 1)
    b = leaf(np.arange(12.0).reshape(4, 3) / 7)
    (ga,) = nb.grad((a * a * b).sum(), a, create_graph=True)
    assert ga.shape == (1, 3)
    np.testing.assert_allclose(ga.numpy(), (2 * a.data * b.data).sum(0, keepdims=True))
    (gb,) = nb.grad(ga.sum(), b)
    np.testing.assert_allclose(gb.numpy(), np.broadcast_to(2 * a.data, (4, 3)))


def test_a_grad_output_that_requires_grad_stays_in_the_graph():
    x = leaf([1.0, 2.0, 3.0])
    u = leaf([0.5, -1.0, 2.0])
    (vjp,) = nb.grad(x * x, x, grad_outputs=u, create_graph=True)  # 2 x u
    (du,) = nb.grad(vjp.sum(), u)
    np.testing.assert_allclose(du.numpy(), 2 * x.data)


def test_an_op_without_a_vjp_is_named_in_the_error():
    class Square(nb.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            return 2 * ctx.saved_tensors[0] * g

    x = leaf([1.0, 2.0])
    y = Square.apply(x).sum()
    with pytest.raises(RuntimeError, match="Square has no second derivative"):
        nb.grad(y, x, create_graph=True)
    (g,) = nb.grad(Square.apply(x).sum(), x)  # first derivatives still work
    np.testing.assert_array_equal(g.numpy(), [2.0, 4.0])


def test_grad_mode_is_per_thread():
    x = leaf([1.0])
    entered, release = threading.Event(), threading.Event()

    def hold_no_grad():
        with nb.no_grad():
            entered.set()
            release.wait(10)

    other = threading.Thread(target=hold_no_grad)
    other.start()
    entered.wait(10)
    try:
        y = x * 2 + x * 3  # recorded here although the other thread is inside no_grad
        y.backward()
    finally:
        release.set()
        other.join()
    assert x.grad.item() == 5.0
    assert nb.is_grad_enabled()


def test_enable_grad_inside_no_grad():
    x = leaf([2.0])
    with nb.no_grad():
        assert not (x * x).requires_grad
        with nb.enable_grad():
            assert (x * x).requires_grad


# -- the functional API against PyTorch ------------------------------------------------------
RNG = np.random.default_rng(7)
W = RNG.standard_normal((3, 5)) / 2
X0 = RNG.standard_normal((4, 3))
V_IN = RNG.standard_normal((4, 3))
V_OUT = RNG.standard_normal((4, 5))


def _layer(lib, x):
    y = x @ lib.tensor(W)
    return lib.exp(-y * y) + y * y * y / 3


def _scalar(lib, x):
    return (_layer(lib, x) ** 2).sum()


@pytest.fixture(scope="module")
def torch_functional():
    torch = pytest.importorskip("torch")
    return torch


def test_vjp_jvp_hvp_match_pytorch(torch_functional):
    torch = torch_functional
    tf = torch.autograd.functional
    tx, nx = torch.tensor(X0), nb.tensor(X0)
    cases = [
        (F.vjp(lambda x: _layer(nb, x), nx, nb.tensor(V_OUT))[1],
         tf.vjp(lambda x: _layer(torch, x), tx, torch.tensor(V_OUT))[1]),
        (F.jvp(lambda x: _layer(nb, x), nx, nb.tensor(V_IN))[1],
         tf.jvp(lambda x: _layer(torch, x), tx, torch.tensor(V_IN))[1]),
        (F.hvp(lambda x: _scalar(nb, x), nx, nb.tensor(V_IN))[1],
         tf.hvp(lambda x: _scalar(torch, x), tx, torch.tensor(V_IN))[1]),
        (F.vhp(lambda x: _scalar(nb, x), nx, nb.tensor(V_IN))[1],
         tf.vhp(lambda x: _scalar(torch, x), tx, torch.tensor(V_IN))[1]),
    ]
    for mine, theirs in cases:
        np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-10, atol=1e-12)


def test_jacobian_and_hessian_match_pytorch(torch_functional):
    torch = torch_functional
    tf = torch.autograd.functional
    tx, nx = torch.tensor(X0), nb.tensor(X0)
    J = F.jacobian(lambda x: _layer(nb, x), nx)
    assert J.shape == (4, 5, 4, 3)
    np.testing.assert_allclose(J.numpy(), tf.jacobian(lambda x: _layer(torch, x), tx).numpy(),
                               rtol=1e-10, atol=1e-12)
    H = F.hessian(lambda x: _scalar(nb, x), nx)
    np.testing.assert_allclose(H.numpy(), tf.hessian(lambda x: _scalar(torch, x), tx).numpy(),
                               rtol=1e-10, atol=1e-12)
    two = F.hessian(lambda a, b: (a @ b).sum() * (a * a).sum(), (nx, nb.tensor(W)))
    ptwo = tf.hessian(lambda a, b: (a @ b).sum() * (a * a).sum(), (tx, torch.tensor(W)))
    for i in range(2):
        for j in range(2):
            np.testing.assert_allclose(two[i][j].numpy(), ptwo[i][j].numpy(), rtol=1e-10,
                                       atol=1e-12)


def test_functional_results_are_detached_unless_create_graph():
    x = nb.tensor(X0)
    out, hv = F.hvp(lambda t: _scalar(nb, t), x, nb.tensor(V_IN))
    assert not out.requires_grad and not hv.requires_grad
    xg = nb.tensor(X0, requires_grad=True)
    _, hv = F.hvp(lambda t: _scalar(nb, t), xg, nb.tensor(V_IN), create_graph=True)
    assert hv.requires_grad


def test_functional_bad_input():
    with pytest.raises(TypeError, match="vjp: expected a Tensor or a tuple of Tensors"):
        F.vjp(lambda x: x, [1.0, 2.0])
    with pytest.raises(ValueError, match="hvp: func must return a one-element Tensor"):
        F.hvp(lambda x: x * 2, nb.tensor([1.0, 2.0]), nb.tensor([1.0, 1.0]))
    with pytest.raises(ValueError, match=r"jvp: v has shapes \[\(3,\)\]"):
        F.jvp(lambda x: x * 2, nb.tensor([1.0, 2.0]), nb.tensor([1.0, 1.0, 1.0]))
