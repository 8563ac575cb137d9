"""mse_loss and cross_entropy: references, gradchecks (samples and hypothesis), stability,
threads, PyTorch oracle, bad input."""

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads
from hypothesis import given
from hypothesis import strategies as st
from scipy.special import logsumexp, softmax

import nbgrad as nb
from nbgrad import REGISTRY
from nbgrad.testing import check_registered, gradcheck
from nbgrad.testing import strategies as nbst

REDUCTIONS = ["mean", "sum", "none"]


def _reduce(v, reduction):
    return {"mean": np.mean, "sum": np.sum, "none": lambda a: a}[reduction](v)


def _ce_reference(x, t, reduction):
    rows = logsumexp(x, axis=1) - x[np.arange(len(t)), t]
    return _reduce(rows, reduction)


def _ce_grad_reference(x, t, reduction, g):
    onehot = np.zeros_like(x)
    onehot[np.arange(len(t)), t] = 1
    scale = {"mean": g / len(t), "sum": g, "none": None}[reduction]
    scale = g[:, None] if reduction == "none" else scale
    return scale * (softmax(x, axis=1) - onehot)


@pytest.mark.parametrize("name", ["mse_loss", "cross_entropy"])
def test_samples_gradcheck(name):
    op = REGISTRY[name]
    for sample in op.samples(np.random.default_rng(1)):
        gradcheck(lambda *a, s=sample: op.apply(*a, **s.params), sample.inputs)


# -- mse_loss ------------------------------------------------------------------------------------


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mse_matches_reference_values_and_gradients(reduction, dtype):
    rng = np.random.default_rng(2)
    p = rng.standard_normal((7, 33)).astype(dtype)
    t = rng.standard_normal((7, 33)).astype(dtype)
    pt, tt = nb.tensor(p, requires_grad=True), nb.tensor(t, requires_grad=True)
    loss = nb.mse_loss(pt, tt, reduction)
    d = p.astype(np.float64) - t
    rtol = 1e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(loss.numpy(), _reduce(d * d, reduction), rtol=rtol)
    assert loss.dtype == dtype
    g = rng.standard_normal(loss.shape).astype(dtype)
    loss.backward(g)
    want = 2 * d * (g / d.size if reduction == "mean" else g)
    np.testing.assert_allclose(pt.grad.numpy(), want, rtol=rtol * 10, atol=1e-7)
    np.testing.assert_allclose(tt.grad.numpy(), -want, rtol=rtol * 10, atol=1e-7)
    assert pt.grad.dtype == dtype


@given(data=st.data(), shape=st.lists(st.integers(1, 4), max_size=3),
       reduction=st.sampled_from(REDUCTIONS))
def test_mse_gradcheck_hypothesis(data, shape, reduction):
    p = data.draw(nbst.arrays(np.float64, tuple(shape)))
    t = data.draw(nbst.arrays(np.float64, tuple(shape)))
    gradcheck(lambda a, b: nb.mse_loss(a, b, reduction), [p, t])


def test_mse_sum_of_a_large_float32_array_is_accurate_and_thread_independent():
    rng = np.random.default_rng(3)
    p = rng.standard_normal(1_000_003).astype(np.float32)
    t = np.zeros_like(p)
    one = at_threads(1, lambda: nb.mse_loss(p, t, "sum").numpy())
    two = at_threads(2, lambda: nb.mse_loss(p, t, "sum").numpy())
    assert_same_bits(one, two)
    np.testing.assert_allclose(one, np.sum(p.astype(np.float64) ** 2), rtol=1e-7)


# -- cross_entropy ----------------------------------------------------------------------------


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cross_entropy_matches_reference(reduction, dtype):
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((9, 13)) * 3).astype(dtype)
    t = rng.integers(0, 13, 9)
    xt = nb.tensor(x, requires_grad=True)
    loss = nb.cross_entropy(xt, t, reduction=reduction)
    x64 = x.astype(np.float64)
    rtol = 2e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(loss.numpy(), _ce_reference(x64, t, reduction), rtol=rtol)
    g = rng.standard_normal(loss.shape).astype(dtype)
    loss.backward(g)
    np.testing.assert_allclose(xt.grad.numpy(), _ce_grad_reference(x64, t, reduction, g),
                               rtol=rtol * 10, atol=1e-7)
    assert loss.dtype == dtype and xt.grad.dtype == dtype


@given(data=st.data(), n=st.integers(1, 4), c=st.integers(1, 5),
       reduction=st.sampled_from(REDUCTIONS))
def test_cross_entropy_gradcheck_hypothesis(data, n, c, reduction):
    x = data.draw(nbst.arrays(np.float64, (n, c), min_value=-6, max_value=6))
    t = np.array(data.draw(st.lists(st.integers(0, c - 1), min_size=n, max_size=n)))
    gradcheck(lambda a: nb.cross_entropy(a, t, reduction=reduction), [x])


def test_cross_entropy_is_stable_for_huge_logits():
    x = np.array([[0.0, 1e4, -1e4], [3.4e38, -3.4e38, 0.0], [1e-45, -1e-45, 0.0]],
                 np.float32)
    t = np.array([1, 1, 2])
    xt = nb.tensor(x, requires_grad=True)
    loss = nb.cross_entropy(xt, t, reduction="none")
    loss.sum().backward()
    # row 1: exact value 6.8e38 is beyond float32, so inf is right; everything else finite
    np.testing.assert_allclose(loss.numpy()[[0, 2]], [0.0, np.log(3)], rtol=1e-6)
    assert loss.numpy()[1] == np.inf
    assert np.isfinite(xt.grad.numpy()).all()
    np.testing.assert_array_equal(xt.grad.numpy()[:2], [[0, 0, 0], [1, -1, 0]])


def test_cross_entropy_sweep_rows_are_finite():
    row = np.linspace(-1e4, 1e4, 1001, dtype=np.float32)
    x = np.stack([row, row[::-1], np.r_[row[:-5], [3.4e38, 1e-45, -1e-45, 0.0, -1e4]]])
    t = np.array([0, 500, 1000])
    xt = nb.tensor(x.astype(np.float32), requires_grad=True)
    loss = nb.cross_entropy(xt, t, reduction="none")
    loss.sum().backward()
    np.testing.assert_allclose(loss.numpy()[:2], [2e4, 1e4], rtol=1e-6)
    assert np.isfinite(xt.grad.numpy()).all()


def test_cross_entropy_one_and_two_threads_give_the_same_bits():
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((301, 77)) * 3).astype(np.float32)
    t = rng.integers(0, 77, 301)

    def run():
        xt = nb.tensor(x, requires_grad=True)
        loss = nb.cross_entropy(xt, t)
        loss.backward()
        return loss.numpy(), xt.grad.numpy()

    (l1, g1), (l2, g2) = at_threads(1, run), at_threads(2, run)
    assert_same_bits(l1, l2)
    assert_same_bits(g1, g2)


def test_int32_targets_and_tensor_targets_work():
    x = np.random.default_rng(6).standard_normal((3, 4))
    want = _ce_reference(x, np.array([0, 3, 1]), "mean")
    for t in (np.array([0, 3, 1], np.int32), nb.tensor([0, 3, 1])):
        np.testing.assert_allclose(nb.cross_entropy(x, t).numpy(), want, rtol=1e-13)


# -- bad input ------------------------------------------------------------------------------------


def test_bad_input_raises_naming_op_values_and_shapes():
    x = np.zeros((3, 5), np.float32)
    with pytest.raises(ValueError, match=r"cross_entropy: target\[1\] = 5 is out of range for "
                                         r"C = 5 classes"):
        nb.cross_entropy(x, np.array([0, 5, 1]))
    with pytest.raises(ValueError, match=r"cross_entropy: target\[2\] = -1 is out of range"):
        nb.cross_entropy(x, np.array([0, 4, -1]))
    with pytest.raises(ValueError, match=r"cross_entropy: target has shape \(2,\) but logits "
                                         r"\(3, 5\) needs \(3,\)"):
        nb.cross_entropy(x, np.array([0, 1]))
    with pytest.raises(ValueError, match=r"cross_entropy: logits must be \[N, C\], got shape "
                                         r"\(15,\)"):
        nb.cross_entropy(x.reshape(-1), np.array([0]))
    with pytest.raises(TypeError, match="cross_entropy: target must hold integer class"):
        nb.cross_entropy(x, np.zeros(3))
    with pytest.raises(TypeError, match="cross_entropy: logits must be float32 or float64"):
        nb.cross_entropy(np.zeros((3, 5), np.int64), np.zeros(3, np.int64))
    for op, args in ((nb.cross_entropy, (x, np.array([0, 1, 2]))), (nb.mse_loss, (x, x))):
        with pytest.raises(ValueError, match=r"reduction must be 'mean', 'sum' or 'none', "
                                             r"got 'avg'"):
            op(*args, reduction="avg")
    with pytest.raises(ValueError, match=r"mse_loss: pred has shape \(3, 5\) but target has "
                                         r"shape \(5,\)"):
        nb.mse_loss(x, np.zeros(5, np.float32))
    with pytest.raises(TypeError, match="mse_loss: target is nbgrad.float64 but pred is "
                                          "nbgrad.float32"):
        nb.mse_loss(x, nb.tensor(np.zeros((3, 5)), requires_grad=True))


# -- PyTorch oracle ------------------------------------------------------------------------------


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_pytorch_oracle(reduction):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    x = rng.standard_normal((6, 11)) * 4
    t = rng.integers(0, 11, 6)
    y = rng.standard_normal((6, 11))
    f = torch.nn.functional
    for ours, theirs, args in (
            (nb.cross_entropy, f.cross_entropy, (x, t)),
            (nb.mse_loss, f.mse_loss, (x, y))):
        xt = torch.tensor(args[0], requires_grad=True)
        lt = theirs(xt, torch.tensor(args[1]), reduction=reduction)
        g = rng.standard_normal(tuple(lt.shape))
        lt.backward(torch.tensor(g))
        xn = nb.tensor(args[0], requires_grad=True)
        ln = ours(xn, args[1], reduction=reduction)
        ln.backward(g)
        np.testing.assert_allclose(ln.numpy(), lt.detach().numpy(), rtol=1e-13)
        np.testing.assert_allclose(xn.grad.numpy(), xt.grad.numpy(), rtol=1e-12, atol=1e-15)


# -- second derivatives ---------------------------------------------------------------------
@pytest.mark.parametrize("name", ["mse_loss", "cross_entropy"])
def test_gradgradcheck_registered(name):
    for second_order in (False, True):
        report = check_registered(name, second_order=second_order)
        assert report.passed, "\n".join(report.failures)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cross_entropy_second_derivative_torch_oracle(reduction, dtype):
    """grad of |dL/dx|^2 (L = <cross_entropy(x, t), v>) w.r.t. x and v; also the
    Hessian-vector product d/dx <dL/dx, u>."""
    torch = pytest.importorskip("torch")
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)
    rng = np.random.default_rng(31)
    x = (rng.standard_normal((5, 4)) * 2).astype(dtype)
    t = rng.integers(0, 4, 5)
    v = rng.standard_normal(5 if reduction == "none" else ()).astype(dtype)
    u = rng.standard_normal((5, 4)).astype(dtype)
    xt, vt = torch.tensor(x, requires_grad=True), torch.tensor(v, requires_grad=True)
    lt = torch.nn.functional.cross_entropy(xt, torch.tensor(t), reduction=reduction)
    (dt,) = torch.autograd.grad((lt * vt).sum(), [xt], create_graph=True)
    expected = torch.autograd.grad((dt * dt).sum(), [xt, vt], retain_graph=True)
    (hvp_t,) = torch.autograd.grad((dt * torch.tensor(u)).sum(), [xt])
    xn, vn = nb.tensor(x, requires_grad=True), nb.tensor(v, requires_grad=True)
    ln = nb.cross_entropy(xn, t, reduction=reduction)
    (dn,) = nb.grad((ln * vn).sum(), [xn], create_graph=True)
    np.testing.assert_allclose(dn.numpy(), dt.detach().numpy(), **tol)
    for got, e in zip(nb.grad((dn * dn).sum(), [xn, vn], retain_graph=True), expected):
        assert got.dtype == dtype
        np.testing.assert_allclose(got.numpy(), e.numpy(), **tol)
    (hvp,) = nb.grad((dn * nb.tensor(u)).sum(), [xn])
    np.testing.assert_allclose(hvp.numpy(), hvp_t.numpy(), **tol)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_mse_loss_second_derivative_torch_oracle(reduction):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(32)
    p, q = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    pt, qt = torch.tensor(p, requires_grad=True), torch.tensor(q, requires_grad=True)
    lt = torch.nn.functional.mse_loss(pt, qt, reduction=reduction)
    first = torch.autograd.grad((lt ** 2).sum(), [pt, qt], create_graph=True)
    expected = torch.autograd.grad(sum((d ** 3).sum() for d in first), [pt, qt])
    pn, qn = nb.tensor(p, requires_grad=True), nb.tensor(q, requires_grad=True)
    ln = nb.mse_loss(pn, qn, reduction=reduction)
    dp, dq = nb.grad((ln * ln).sum(), [pn, qn], create_graph=True)
    for got, e in zip(nb.grad((dp * dp * dp).sum() + (dq * dq * dq).sum(), [pn, qn]),
                      expected):
        np.testing.assert_allclose(got.numpy(), e.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cross_entropy_keeps_the_log_sum_next_to_huge_logits(dtype):
    """-log_softmax computed as PyTorch: log sum e^(x - m) - (x_t - m), so rows of huge
    equal logits lose nothing to m + log sum rounding (loss log 2, softmax 1/2)."""
    logits = nb.tensor(np.array([[1e30, 1e30], [-1e30, -1e30]], dtype), requires_grad=True)
    loss = nb.cross_entropy(logits, np.array([0, 1]), reduction="none")
    np.testing.assert_allclose(loss.numpy(), [np.log(2), np.log(2)], rtol=1e-6)
    loss.sum().backward()
    np.testing.assert_allclose(logits.grad.numpy(), [[-0.5, 0.5], [0.5, -0.5]], rtol=1e-6)


def test_cross_entropy_of_a_row_holding_inf_is_nan_as_in_pytorch():
    logits = nb.tensor(np.array([[np.inf, 1.0], [0.0, 1.0]], np.float32), requires_grad=True)
    loss = nb.cross_entropy(logits, np.array([1, 0]), reduction="none")
    assert np.isnan(loss.numpy()[0]) and np.isfinite(loss.numpy()[1])
    loss.sum().backward()
    assert np.isnan(logits.grad.numpy()[0]).all() and np.isfinite(logits.grad.numpy()[1]).all()
