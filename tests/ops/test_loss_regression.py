"""l1_loss, smooth_l1_loss and huber_loss (nbgrad/ops/loss_regression.py; mse_loss is in
tests/ops/test_loss.py): NumPy references, gradchecks (registered samples and
hypothesis), second derivatives, PyTorch oracles, non-finite values, the loss modules,
threads and bad input."""

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads
from hypothesis import given
from hypothesis import strategies as st
from ops.loss_references import (
    REDUCTIONS,
    compare_with_torch,
    inputs_unchanged,
    loss_and_grads,
    non_finite_like_torch,
    raises_all,
    reduce_loss,
    second_derivatives_like_torch,
    upstream_scale,
)

import nbgrad as nb
from nbgrad import nn
from nbgrad.testing import check_registered, gradcheck, gradgradcheck
from nbgrad.testing import strategies as nbst


def _piecewise_reference(x, t, beta, div, mul):
    """(loss, d/dx) of z^2 / (2 div) for z = |x - t| < beta, mul (z - beta / 2) above."""
    d = x - t
    z = np.abs(d)
    loss = np.where(z < beta, 0.5 * z * z / div, mul * (z - 0.5 * beta))
    grad = np.where(d < -beta, -mul, np.where(d > beta, mul, d / div))
    return loss, grad


REGRESSION = {
    # name: (nbgrad call, coefficients (beta, div, mul), torch name, torch kwargs)
    "l1_loss": (lambda x, t, r: nb.l1_loss(x, t, r), (0.0, 1.0, 1.0), "l1_loss", {}),
    "smooth_l1_loss": (lambda x, t, r: nb.smooth_l1_loss(x, t, r, beta=0.7),
                       (0.7, 0.7, 1.0), "smooth_l1_loss", {"beta": 0.7}),
    "smooth_l1_loss beta 0": (lambda x, t, r: nb.smooth_l1_loss(x, t, r, beta=0.0),
                              (0.0, 1.0, 1.0), "smooth_l1_loss", {"beta": 0.0}),
    "huber_loss": (lambda x, t, r: nb.huber_loss(x, t, r, delta=1.5), (1.5, 1.0, 1.5),
                   "huber_loss", {"delta": 1.5}),
}


# -- registered samples: gradcheck and gradgradcheck ----------------------------------------


@pytest.mark.parametrize("second_order", [False, True])
@pytest.mark.parametrize("name", ["l1_loss", "smooth_l1_loss", "huber_loss"])
def test_registered_samples_pass_gradcheck_and_gradgradcheck(name, second_order):
    report = check_registered(name, second_order=second_order)
    assert report.passed, "\n".join(report.failures)


# -- l1, smooth l1, huber ------------------------------------------------------------------------


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(REGRESSION))
def test_regression_losses_match_reference(name, dtype, reduction):
    call, coef, _, _ = REGRESSION[name]
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((6, 7)) * 2).astype(dtype)
    t = (rng.standard_normal((6, 7)) * 2).astype(dtype)
    x[0, :3] = t[0, :3]                                   # ties: l1' = 0 there
    xt, tt = nb.tensor(x, requires_grad=True), nb.tensor(t, requires_grad=True)
    loss = call(xt, tt, reduction)
    want, dx = _piecewise_reference(x.astype(np.float64), t, *coef)
    rtol = 2e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(loss.numpy(), reduce_loss(want, reduction), rtol=rtol)
    assert loss.dtype == dtype
    g = rng.standard_normal(loss.shape).astype(dtype)
    loss.backward(g)
    want_dx = dx * upstream_scale(reduction, g, x.size)
    np.testing.assert_allclose(xt.grad.numpy(), want_dx, rtol=rtol, atol=1e-7)
    np.testing.assert_allclose(tt.grad.numpy(), -want_dx, rtol=rtol, atol=1e-7)
    assert xt.grad.dtype == dtype


def test_smooth_l1_with_beta_zero_is_l1_and_huber_is_delta_times_smooth_l1():
    rng = np.random.default_rng(2)
    x, t = rng.standard_normal((4, 5)), rng.standard_normal((4, 5))
    np.testing.assert_array_equal(nb.smooth_l1_loss(x, t, "none", beta=0.0).numpy(),
                                  nb.l1_loss(x, t, "none").numpy())
    np.testing.assert_allclose(nb.huber_loss(x, t, "none", delta=0.8).numpy(),
                               0.8 * nb.smooth_l1_loss(x, t, "none", beta=0.8).numpy(),
                               rtol=1e-14)


@given(data=st.data(), shape=st.lists(st.integers(1, 4), max_size=3),
       reduction=st.sampled_from(REDUCTIONS), name=st.sampled_from(sorted(REGRESSION)))
def test_regression_losses_gradcheck_hypothesis(data, shape, reduction, name):
    call, (beta, _, _), _, _ = REGRESSION[name]
    t = data.draw(nbst.arrays(np.float64, tuple(shape)))
    d = data.draw(nbst.arrays(np.float64, tuple(shape), min_value=-4, max_value=4))
    # away from the kinks at |d| = 0 and |d| = beta (finite differences straddle them)
    d = np.where(np.abs(d) < 0.05, 0.3, d)
    d = np.where(np.abs(np.abs(d) - beta) < 0.05, d + 0.2, d)
    gradcheck(lambda a, b: call(a, b, reduction), [t + d, t])
    gradgradcheck(lambda a, b: call(a, b, reduction), [t + d, t])


# -- modules ------------------------------------------------------------------------------------


def test_loss_modules_call_their_functions():
    rng = np.random.default_rng(12)
    x, y = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    pairs = [
        (nn.L1Loss(reduction="sum"), nb.l1_loss(x, y, "sum")),
        (nn.SmoothL1Loss(beta=0.5), nb.smooth_l1_loss(x, y, beta=0.5)),
        (nn.HuberLoss("none", delta=2.0), nb.huber_loss(x, y, "none", 2.0)),
    ]
    for module, want in pairs:
        np.testing.assert_array_equal(module(nb.tensor(x), y).numpy(), want.numpy())
    assert "beta=0.5" in repr(nn.SmoothL1Loss(beta=0.5))


# -- threads, inputs unchanged -----------------------------------------------------------------


def test_large_losses_give_the_same_bits_at_one_and_two_threads():
    rng = np.random.default_rng(13)
    n = 300_007                                          # above the parallel threshold
    x = (rng.standard_normal(n) * 3).astype(np.float32)
    y = (rng.standard_normal(n) * 3).astype(np.float32)
    calls = [
        lambda a, b: nb.l1_loss(a, b, "sum"),
        lambda a, b: nb.smooth_l1_loss(a, b, "none", beta=0.5),
        lambda a, b: nb.huber_loss(a, b, "mean", delta=2.0),
    ]
    for call in calls:
        for one, two in zip(at_threads(1, loss_and_grads, call, x, y),
                            at_threads(2, loss_and_grads, call, x, y)):
            assert_same_bits(one, two)


def test_inputs_are_not_modified():
    rng = np.random.default_rng(14)
    x, y = rng.standard_normal((4, 3)), rng.uniform(0, 1, (4, 3))
    inputs_unchanged([lambda: nb.l1_loss(x, y), lambda: nb.huber_loss(x, y)], (x, y))


# -- bad input ---------------------------------------------------------------------------------


def test_bad_input_raises_naming_op_argument_and_shapes():
    x = np.zeros((3, 5), np.float32)
    raises_all([
        (ValueError, r"l1_loss: input has shape \(3, 5\) but target has shape \(5,\)",
         lambda: nb.l1_loss(x, np.zeros(5))),
        (ValueError, r"huber_loss: delta must be positive, got 0.0",
         lambda: nb.huber_loss(x, x, delta=0.0)),
        (ValueError, r"smooth_l1_loss: beta must be non-negative, got -1.0",
         lambda: nb.smooth_l1_loss(x, x, beta=-1)),
    ])


# -- PyTorch oracles ------------------------------------------------------------------------------


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pytorch_oracle(dtype, reduction):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(15)
    x = (rng.standard_normal((5, 6)) * 2).astype(dtype)
    y = (rng.standard_normal((5, 6)) * 2).astype(dtype)
    y[0, :2] = x[0, :2]
    for name in sorted(REGRESSION):
        call, _, tname, kw = REGRESSION[name]
        theirs = getattr(F, tname)
        compare_with_torch(lambda a, b, c=call: c(a, b, reduction),
                           lambda a, b, f=theirs, kw=kw: f(a, b, reduction=reduction, **kw),
                           [x, y], [True, True], dtype, rng)


def test_pytorch_oracle_second_derivatives():
    """grad of |dL/dx|^2 + |dL/dt|^2 (both input and target are differentiable)."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(18)
    x, y = rng.standard_normal((4, 5)) * 2, rng.uniform(0, 1, (4, 5))
    second_derivatives_like_torch([
        (lambda a, b: nb.smooth_l1_loss(a, b, beta=3.0),
         lambda a, b: F.smooth_l1_loss(a, b, beta=3.0)),
        (lambda a, b: nb.huber_loss(a, b, "sum", delta=3.0),
         lambda a, b: F.huber_loss(a, b, reduction="sum", delta=3.0)),
    ], x, y)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pytorch_oracle_non_finite_values(dtype):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    non_finite_like_torch([
        (nb.l1_loss, F.l1_loss, {}, {}),
        (nb.smooth_l1_loss, F.smooth_l1_loss, {"beta": 0.5}, {"beta": 0.5}),
        (nb.huber_loss, F.huber_loss, {"delta": 0.5}, {"delta": 0.5}),
    ], dtype)
