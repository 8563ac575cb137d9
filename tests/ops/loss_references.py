"""What the loss tests of tests/ops/test_loss_regression.py and
tests/ops/test_loss_classification.py share: the reductions in NumPy, and the comparisons
with PyTorch (values and gradients, second derivatives, non-finite values)."""

import numpy as np
import pytest

import nbgrad as nb

REDUCTIONS = ["mean", "sum", "none"]
SPECIAL = [0.0, -0.0, 1.0, -1.0, 2.5, -40.0, 40.0, 1e30, -1e30, np.inf, -np.inf, np.nan]


def reduce_loss(v, reduction, count=None):
    """Per-element losses ``v`` reduced: themselves, their sum, or the sum / count (the
    number of elements unless given)."""
    if reduction == "none":
        return v
    total = np.sum(v)
    return total if reduction == "sum" else total / (v.size if count is None else count)


def upstream_scale(reduction, g, n):
    """What the upstream g becomes per element: g / n for 'mean', g otherwise."""
    return g / n if reduction == "mean" else g


def compare_with_torch(ours, theirs, inputs, differentiable, dtype, rng):
    """Run both on ``inputs`` (arrays; integer ones are constants), backpropagate one
    random upstream gradient, compare the loss and every differentiable input's grad."""
    torch = pytest.importorskip("torch")
    tol = dict(rtol=2e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-14)
    tins = [torch.tensor(a, requires_grad=bool(d)) for a, d in zip(inputs, differentiable)]
    nins = [nb.tensor(a, requires_grad=bool(d)) for a, d in zip(inputs, differentiable)]
    lt, ln = theirs(*tins), ours(*nins)
    g = rng.standard_normal(tuple(lt.shape)).astype(dtype)
    lt.backward(torch.tensor(g))
    ln.backward(g)
    assert ln.dtype == dtype and ln.shape == tuple(lt.shape)
    np.testing.assert_allclose(ln.numpy(), lt.detach().numpy(), **tol)
    for n, t, d in zip(nins, tins, differentiable):
        if d:
            np.testing.assert_allclose(n.grad.numpy(), t.grad.numpy(), **tol)


def second_derivatives_like_torch(pairs, x, y):
    """For each (ours, theirs) loss of (x, y): the grad of |dL/dx|^2 + |dL/dy|^2, as
    PyTorch computes it."""
    torch = pytest.importorskip("torch")
    for ours, theirs in pairs:
        xt, yt = torch.tensor(x, requires_grad=True), torch.tensor(y, requires_grad=True)
        first = torch.autograd.grad(theirs(xt, yt), [xt, yt], create_graph=True)
        want = torch.autograd.grad(sum((d * d).sum() for d in first), [xt, yt])
        xn, yn = nb.tensor(x, requires_grad=True), nb.tensor(y, requires_grad=True)
        dx, dy = nb.grad(ours(xn, yn), [xn, yn], create_graph=True)
        got = nb.grad((dx * dx).sum() + (dy * dy).sum(), [xn, yn])
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-10, atol=1e-12)


def non_finite_like_torch(calls, dtype):
    """Every pair of SPECIAL values as (input, target) element-wise, for each (ours,
    theirs, our kwargs, their kwargs): NaN and inf where PyTorch has them, in the losses
    and both gradients."""
    torch = pytest.importorskip("torch")
    a, b = (np.array(v, dtype) for v in np.meshgrid(SPECIAL, SPECIAL))
    for ours, theirs, kw, tkw in calls:
        xt, yt = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
        lt = theirs(xt, yt, reduction="none", **tkw)
        lt.backward(torch.ones_like(lt))
        xn, yn = nb.tensor(a, requires_grad=True), nb.tensor(b, requires_grad=True)
        ln = ours(xn, yn, reduction="none", **kw)
        ln.backward(np.ones(ln.shape, dtype))
        for got, want in ((ln, lt), (xn.grad, xt.grad), (yn.grad, yt.grad)):
            got, want = got.numpy(), want.detach().numpy()
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=ours.__name__)
            finite = np.isfinite(want)
            np.testing.assert_array_equal(got[~finite & ~np.isnan(want)],
                                          want[~finite & ~np.isnan(want)])
            np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-30)


def loss_and_grads(call, a, b):
    """call(a, b) on two differentiable tensors, backpropagated with ones: the loss and
    both gradients as arrays."""
    at, bt = nb.tensor(a, requires_grad=True), nb.tensor(b, requires_grad=True)
    loss = call(at, bt)
    loss.backward(np.ones(loss.shape, a.dtype))
    return loss.numpy(), at.grad.numpy(), bt.grad.numpy()


def inputs_unchanged(calls, arrays):
    """Each call gives a finite loss and leaves ``arrays`` as they were."""
    copies = [a.copy() for a in arrays]
    for fn in calls:
        assert np.isfinite(fn().item())
    for a, c in zip(arrays, copies):
        np.testing.assert_array_equal(a, c)


def raises_all(cases):
    """Each (error, match, fn): fn raises ``error`` with a message matching ``match``."""
    for error, match, fn in cases:
        with pytest.raises(error, match=match):
            fn()
