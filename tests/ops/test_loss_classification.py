"""binary_cross_entropy_with_logits, nll_loss and the general cross_entropy (class
weights, ignore_index, label smoothing, class probabilities, [N, C, d1, ...] logits) of
nbgrad/ops/loss_classification.py (the fused cross_entropy is in tests/ops/test_loss.py),
and softmax/log_softmax's dtype: NumPy references, gradchecks (registered samples and
hypothesis), second derivatives, PyTorch oracles, non-finite values, the loss modules,
threads and bad input."""

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads
from hypothesis import given
from hypothesis import strategies as st
from ops.loss_references import (
    REDUCTIONS,
    SPECIAL,
    compare_with_torch,
    inputs_unchanged,
    loss_and_grads,
    non_finite_like_torch,
    raises_all,
    reduce_loss,
    second_derivatives_like_torch,
    upstream_scale,
)
from scipy.special import expit, log_softmax

import nbgrad as nb
from nbgrad import nn
from nbgrad.testing import check_registered, gradcheck, gradgradcheck
from nbgrad.testing import strategies as nbst


def _softplus(z):
    return np.logaddexp(0.0, z)


def _bce_reference(x, t, w=1.0, pw=None):
    """(loss, d/dx, d/dt) of w ((1 - t) x + lw log(1 + e^-x)), lw = 1 + (pw - 1) t."""
    if pw is None:
        loss = (1 - t) * x + _softplus(-x)
        return w * loss, w * (expit(x) - t), w * -x
    lw = 1 + (pw - 1) * t
    loss = (1 - t) * x + lw * _softplus(-x)
    return w * loss, w * (lw * expit(x) - pw * t), w * (pw * _softplus(-x) - _softplus(x))


def _nll_reference(x, t, w, ignore_index):
    """Per-position loss, picked weights and the unit gradient (g = 1) for x [N, C, ...]."""
    c = x.shape[1]
    w = np.ones(c) if w is None else w
    xm = np.moveaxis(x, 1, -1)                       # [N, ..., C]
    loss = np.zeros(t.shape)
    picked = np.zeros(t.shape)
    unit = np.zeros_like(xm)
    for idx in np.ndindex(t.shape):
        k = t[idx]
        if k != ignore_index:
            loss[idx] = -w[k] * xm[idx + (k,)]
            picked[idx] = w[k]
            unit[idx + (k,)] = -w[k]
    return loss, picked, np.moveaxis(unit, -1, 1)


def _ce_reference(x, t, w=None, ignore_index=-100, reduction="mean", eps=0.0):
    """PyTorch's cross_entropy in NumPy, float64 (values only)."""
    c = x.shape[1]
    lp = log_softmax(x, axis=1)
    wb = np.ones(c) if w is None else w
    wshape = (1, c) + (1,) * (x.ndim - 2)
    if t.dtype.kind == "f":
        tt = t * (1 - eps) + eps / c
        per = -(lp * tt * wb.reshape(wshape)).sum(1)
        return reduce_loss(per, reduction, per.size)
    loss, picked, _ = _nll_reference(lp, t, w, ignore_index)
    kept = t != ignore_index
    smooth = np.where(kept, -(lp * wb.reshape(wshape)).sum(1), 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        nll = reduce_loss(loss, reduction, picked.sum())
        sm = reduce_loss(smooth, reduction, picked.sum())
    return (1 - eps) * nll + eps / c * sm


# -- registered samples: gradcheck and gradgradcheck ----------------------------------------


@pytest.mark.parametrize("second_order", [False, True])
@pytest.mark.parametrize("name", ["binary_cross_entropy_with_logits", "nll_loss"])
def test_registered_samples_pass_gradcheck_and_gradgradcheck(name, second_order):
    report = check_registered(name, second_order=second_order)
    assert report.passed, "\n".join(report.failures)


# -- binary_cross_entropy_with_logits --------------------------------------------------------


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("weighted", ["plain", "weight", "pos_weight", "both"])
def test_bce_with_logits_matches_reference(weighted, dtype, reduction):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((5, 4)) * 4).astype(dtype)
    t = rng.uniform(0, 1, (5, 4)).astype(dtype)
    w = rng.uniform(0.5, 2, (5, 1)) if weighted in ("weight", "both") else None
    pw = rng.uniform(0.5, 3, 4) if weighted in ("pos_weight", "both") else None
    xt, tt = nb.tensor(x, requires_grad=True), nb.tensor(t, requires_grad=True)
    loss = nb.binary_cross_entropy_with_logits(xt, tt, weight=w, reduction=reduction,
                                               pos_weight=pw)
    want, dx, dt = _bce_reference(x.astype(np.float64), t.astype(np.float64),
                                  1.0 if w is None else w, pw)
    rtol = 3e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(loss.numpy(), reduce_loss(want, reduction), rtol=rtol)
    g = rng.standard_normal(loss.shape).astype(dtype)
    loss.backward(g)
    gs = upstream_scale(reduction, g.astype(np.float64), x.size)
    np.testing.assert_allclose(xt.grad.numpy(), dx * gs, rtol=rtol * 10, atol=1e-6)
    np.testing.assert_allclose(tt.grad.numpy(), dt * gs, rtol=rtol * 10, atol=1e-6)
    assert loss.dtype == dtype and xt.grad.dtype == dtype and tt.grad.dtype == dtype


def test_bce_with_logits_is_finite_for_huge_logits():
    x = np.array([-1e30, -100.0, -20.0, 0.0, 20.0, 100.0, 1e30, 3e38], np.float32)
    t = np.array([0.0, 1.0, 0.5, 1.0, 0.0, 0.5, 0.0, 0.25], np.float32)
    xt, tt = nb.tensor(x, requires_grad=True), nb.tensor(t, requires_grad=True)
    loss = nb.binary_cross_entropy_with_logits(xt, tt, reduction="none")
    loss.sum().backward()
    want, dx, _ = _bce_reference(x.astype(np.float64), t.astype(np.float64))
    np.testing.assert_allclose(loss.numpy(), want.astype(np.float32), rtol=1e-6)
    np.testing.assert_allclose(xt.grad.numpy(), dx, rtol=1e-6, atol=1e-30)
    assert np.isfinite(loss.numpy()).all() and np.isfinite(xt.grad.numpy()).all()


@given(data=st.data(), shape=st.lists(st.integers(1, 4), min_size=1, max_size=3),
       reduction=st.sampled_from(REDUCTIONS), use_w=st.booleans(), use_pw=st.booleans())
def test_bce_with_logits_gradcheck_hypothesis(data, shape, reduction, use_w, use_pw):
    shape = tuple(shape)
    x = data.draw(nbst.arrays(np.float64, shape, min_value=-6, max_value=6))
    t = data.draw(nbst.arrays(np.float64, shape, min_value=0, max_value=1))
    w = data.draw(nbst.arrays(np.float64, shape[-1:], min_value=0.1, max_value=2)) \
        if use_w else None
    pw = data.draw(nbst.arrays(np.float64, shape[-1:], min_value=0.1, max_value=3)) \
        if use_pw else None

    def f(a, b):
        return nb.binary_cross_entropy_with_logits(a, b, w, reduction, pw)

    gradcheck(f, [x, t])
    gradgradcheck(f, [x, t])


# -- nll_loss -----------------------------------------------------------------------------------


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(6, 5), (3, 4, 5), (2, 3, 2, 4)], ids=str)
def test_nll_loss_matches_reference(shape, dtype, reduction):
    rng = np.random.default_rng(4)
    x = rng.standard_normal(shape).astype(dtype)
    t = rng.integers(0, shape[1], (shape[0], *shape[2:]))
    t.reshape(-1)[::3] = 2          # ignore_index 2 (a valid class, ignored)
    w = rng.uniform(0.5, 2, shape[1])
    xt = nb.tensor(x, requires_grad=True)
    loss = nb.nll_loss(xt, t, weight=w, ignore_index=2, reduction=reduction)
    per, picked, unit = _nll_reference(x.astype(np.float64), t, w, 2)
    rtol = 2e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(loss.numpy(), reduce_loss(per, reduction, picked.sum()),
                               rtol=rtol)
    g = rng.standard_normal(loss.shape).astype(dtype)
    loss.backward(g)
    gb = g.reshape((shape[0], 1, *shape[2:])) if reduction == "none" else g
    want = unit * (gb / picked.sum() if reduction == "mean" else gb)
    np.testing.assert_allclose(xt.grad.numpy(), want, rtol=rtol, atol=1e-7)


@given(data=st.data(), n=st.integers(1, 3), c=st.integers(1, 4),
       spatial=st.lists(st.integers(1, 3), max_size=2), reduction=st.sampled_from(REDUCTIONS),
       weighted=st.booleans())
def test_nll_loss_gradcheck_hypothesis(data, n, c, spatial, reduction, weighted):
    x = data.draw(nbst.arrays(np.float64, (n, c, *spatial)))
    t = np.array(data.draw(st.lists(st.sampled_from([*range(c), -100]),
                                    min_size=n * int(np.prod(spatial)),
                                    max_size=n * int(np.prod(spatial))))).reshape(n, *spatial)
    w = np.linspace(0.5, 2.0, c) if weighted else None
    if reduction == "mean" and (t == -100).all():
        t.reshape(-1)[0] = 0                        # a NaN loss has no useful gradient
    f = lambda a: nb.nll_loss(a, t, w, reduction=reduction)  # noqa: E731
    gradcheck(f, [x])
    gradgradcheck(f, [x])


# -- cross_entropy, general path --------------------------------------------------------------


CE_CASES = {
    # label: (logits shape, target kind, weight?, ignore_index, label_smoothing)
    "weight": ((6, 5), "index", True, -100, 0.0),
    "ignored in range": ((6, 5), "index", False, 1, 0.0),
    "ignored -100": ((6, 5), "index-ignored", False, -100, 0.0),
    "smoothing": ((6, 5), "index", False, -100, 0.2),
    "weight, smoothing, ignored": ((6, 5), "index-ignored", True, -100, 0.3),
    "nd": ((3, 4, 2, 3), "index", False, -100, 0.0),
    "nd weight smoothing ignored": ((3, 4, 5), "index-ignored", True, -100, 0.1),
    "probabilities": ((6, 5), "prob", False, -100, 0.0),
    "probabilities, weight, smoothing": ((6, 5), "prob", True, -100, 0.25),
    "nd probabilities": ((2, 3, 4), "prob", True, -100, 0.0),
}


def _ce_inputs(shape, kind, weighted, rng):
    x = rng.standard_normal(shape) * 2
    c = shape[1]
    if kind == "prob":
        t = np.moveaxis(rng.dirichlet(np.ones(c), (shape[0], *shape[2:])), -1, 1)
    else:
        t = rng.integers(0, c, (shape[0], *shape[2:]))
        if kind == "index-ignored":
            t.reshape(-1)[::4] = -100
    w = rng.uniform(0.5, 2, c) if weighted else None
    return x, t, w


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("case", sorted(CE_CASES))
def test_cross_entropy_general_matches_reference_and_gradchecks(case, reduction):
    shape, kind, weighted, ignore_index, eps = CE_CASES[case]
    rng = np.random.default_rng(5)
    x, t, w = _ce_inputs(shape, kind, weighted, rng)
    loss = nb.cross_entropy(x, t, w, ignore_index, reduction, eps)
    np.testing.assert_allclose(loss.numpy(), _ce_reference(x, t, w, ignore_index, reduction,
                                                           eps), rtol=1e-12)

    def f(*a):
        return nb.cross_entropy(a[0], a[1] if kind == "prob" else t, w, ignore_index,
                                reduction, eps)

    inputs = [x, t] if kind == "prob" else [x]
    gradcheck(f, inputs)
    gradgradcheck(f, inputs)


@given(data=st.data(), n=st.integers(1, 3), c=st.integers(1, 4),
       spatial=st.lists(st.integers(1, 2), max_size=2), reduction=st.sampled_from(REDUCTIONS),
       weighted=st.booleans(), eps=st.sampled_from([0.0, 0.1, 1.0]), prob=st.booleans())
def test_cross_entropy_general_gradcheck_hypothesis(data, n, c, spatial, reduction, weighted,
                                                    eps, prob):
    shape = (n, c, *spatial)
    x = data.draw(nbst.arrays(np.float64, shape, min_value=-5, max_value=5))
    w = np.linspace(0.5, 2.0, c) if weighted else None
    if prob:
        t = data.draw(nbst.arrays(np.float64, shape, min_value=0, max_value=1))
        f = lambda a, b: nb.cross_entropy(a, b, w, reduction=reduction,  # noqa: E731
                                          label_smoothing=eps)
        inputs = [x, t]
    else:
        t = data.draw(nbst.arrays(np.int64, (n, *spatial), min_value=0, max_value=c - 1))
        f = lambda a: nb.cross_entropy(a, t, w, reduction=reduction,  # noqa: E731
                                       label_smoothing=eps)
        inputs = [x]
    np.testing.assert_allclose(f(*inputs).numpy(), _ce_reference(x, t, w, -100, reduction, eps),
                               rtol=1e-11, atol=1e-13)
    gradcheck(f, inputs)
    gradgradcheck(f, inputs)


def test_fused_and_general_cross_entropy_agree():
    """weight = 1 takes the general path (log_softmax + nll_loss); it gives the fused
    kernel's values and gradients."""
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((33, 17)) * 3).astype(np.float32)
    t = rng.integers(0, 17, 33)
    for reduction in REDUCTIONS:
        a, b = nb.tensor(x, requires_grad=True), nb.tensor(x, requires_grad=True)
        fused = nb.cross_entropy(a, t, reduction=reduction)
        general = nb.cross_entropy(b, t, np.ones(17, np.float32), reduction=reduction)
        assert fused.grad_fn.name == "cross_entropy" and general.grad_fn.name == "nll_loss"
        np.testing.assert_allclose(fused.numpy(), general.numpy(), rtol=2e-6)
        g = rng.standard_normal(fused.shape).astype(np.float32)
        fused.backward(g)
        general.backward(g)
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=2e-5, atol=1e-7)


def test_cross_entropy_fast_path_only_when_nothing_is_ignored():
    x = np.random.default_rng(7).standard_normal((4, 3))
    assert nb.cross_entropy(nb.tensor(x, requires_grad=True), np.array([0, 1, 2, 1]),
                            ignore_index=2).grad_fn.name == "nll_loss"
    assert nb.cross_entropy(nb.tensor(x, requires_grad=True), np.array([0, 1, 0, 1]),
                            ignore_index=2).grad_fn.name == "cross_entropy"
    loss = nb.cross_entropy(x, np.array([0, -100, 2, 1]))
    np.testing.assert_allclose(loss.numpy(), _ce_reference(x, np.array([0, -100, 2, 1])),
                               rtol=1e-13)


def test_all_ignored_mean_is_nan_with_zero_gradient():
    x = nb.tensor(np.random.default_rng(9).standard_normal((3, 4)), requires_grad=True)
    t = np.full(3, -100)
    for eps in (0.0, 0.2):
        loss = nb.cross_entropy(x, t, label_smoothing=eps)
        assert np.isnan(loss.item())
        x.grad = None
        loss.backward()
        np.testing.assert_array_equal(x.grad.numpy(), np.zeros((3, 4)))
    assert np.isnan(nb.nll_loss(x, t).item())
    assert nb.nll_loss(x, t, reduction="sum").item() == 0


def test_unbatched_logits():
    rng = np.random.default_rng(10)
    x = rng.standard_normal(5)
    np.testing.assert_allclose(nb.cross_entropy(x, np.array(3)).numpy(),
                               -log_softmax(x)[3], rtol=1e-14)
    p = rng.dirichlet(np.ones(5))
    loss = nb.cross_entropy(x, p, reduction="none")
    assert loss.shape == ()
    np.testing.assert_allclose(loss.numpy(), -(p * log_softmax(x)).sum(), rtol=1e-14)
    np.testing.assert_allclose(nb.nll_loss(x, np.array(1), reduction="none").numpy(), -x[1])


# -- softmax / log_softmax dtype ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_dtype_casts_first_and_the_gradient_comes_back_cast(name):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    xt = nb.tensor(x, requires_grad=True)
    y = getattr(nb, name)(xt, 1, dtype=np.float64)
    assert y.dtype == np.float64
    np.testing.assert_array_equal(y.numpy(), getattr(nb, name)(x.astype(np.float64), 1).numpy())
    g = rng.standard_normal((3, 4))
    y.backward(g)
    assert xt.grad.dtype == np.float32
    ref = nb.tensor(x.astype(np.float64), requires_grad=True)
    getattr(nb, name)(ref, 1).backward(g)
    np.testing.assert_array_equal(xt.grad.numpy(), ref.grad.numpy().astype(np.float32))
    ints = getattr(nb, name)(nb.tensor([1, 2, 3]), 0, dtype="float32")   # integers, cast
    assert ints.dtype == np.float32
    gradgradcheck(lambda a: getattr(nb, name)(a, 0, dtype=np.float64), [x[0].astype(float)])
    with pytest.raises(TypeError, match=f"{name}: dtype must be float32 or float64, got int64"):
        getattr(nb, name)(xt, 1, dtype=np.int64)


# -- modules ------------------------------------------------------------------------------------


def test_loss_modules_call_their_functions_and_keep_weights_as_buffers():
    rng = np.random.default_rng(12)
    x, y = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    t = np.array([0, 2, 1, 2])
    w = np.array([0.5, 1.0, 2.0])
    pairs = [
        (nn.BCEWithLogitsLoss(weight=w, pos_weight=w),
         nb.binary_cross_entropy_with_logits(x, expit(y), w, pos_weight=w), (x, expit(y))),
        (nn.NLLLoss(w, ignore_index=1), nb.nll_loss(x, t, w, 1), (x, t)),
        (nn.CrossEntropyLoss(w, label_smoothing=0.1),
         nb.cross_entropy(x, t, w, label_smoothing=0.1), (x, t)),
    ]
    for module, want, args in pairs:
        np.testing.assert_array_equal(module(nb.tensor(args[0]), args[1]).numpy(), want.numpy())
    ce = nn.CrossEntropyLoss(weight=nb.tensor(w))
    assert set(ce.state_dict()) == {"weight"} and set(nn.CrossEntropyLoss().state_dict()) == set()
    assert set(nn.BCEWithLogitsLoss(pos_weight=w).state_dict()) == {"pos_weight"}
    ce.float()
    assert ce.weight.dtype == np.float32
    assert "label_smoothing=0.0" in repr(ce)


# -- threads, inputs unchanged -----------------------------------------------------------------


def test_large_losses_give_the_same_bits_at_one_and_two_threads():
    rng = np.random.default_rng(13)
    n = 300_007                                          # above the parallel threshold
    x = (rng.standard_normal(n) * 3).astype(np.float32)
    p = rng.uniform(0, 1, n).astype(np.float32)
    logits = rng.standard_normal((2_003, 7, 11)).astype(np.float32)
    labels = rng.integers(0, 7, (2_003, 11))
    labels[::5, 3] = -100

    def bce(a, b):
        return nb.binary_cross_entropy_with_logits(a, b, None, "mean", 2.0)

    for one, two in zip(at_threads(1, loss_and_grads, bce, x, p),
                        at_threads(2, loss_and_grads, bce, x, p)):
        assert_same_bits(one, two)

    def run_nll():
        lt = nb.tensor(logits, requires_grad=True)
        loss = nb.nll_loss(lt, labels, np.linspace(0.5, 2, 7, dtype=np.float32))
        loss.backward()
        return loss.numpy(), lt.grad.numpy()

    for one, two in zip(at_threads(1, run_nll), at_threads(2, run_nll)):
        assert_same_bits(one, two)


def test_inputs_are_not_modified():
    rng = np.random.default_rng(14)
    x, y = rng.standard_normal((4, 3)), rng.uniform(0, 1, (4, 3))
    t, w = np.array([0, -100, 1, 2]), np.array([1.0, 2.0, 3.0])
    inputs_unchanged([lambda: nb.binary_cross_entropy_with_logits(x, y, w, pos_weight=w),
                      lambda: nb.nll_loss(x, t, w),
                      lambda: nb.cross_entropy(x, t, w, -100, "mean", 0.2),
                      lambda: nb.cross_entropy(x, y, w, label_smoothing=0.2)], (x, y, t, w))


# -- bad input ---------------------------------------------------------------------------------


def test_bad_input_raises_naming_op_argument_and_shapes():
    x = np.zeros((3, 5), np.float32)
    t = np.array([0, 1, 2])
    raises_all([
        (ValueError, r"binary_cross_entropy_with_logits: input has shape \(3, 5\) but target "
                     r"has shape \(2, 5\)",
         lambda: nb.binary_cross_entropy_with_logits(x, x[:2])),
        (ValueError, r"binary_cross_entropy_with_logits: pos_weight of shape \(4,\) does not "
                     r"broadcast to the input's shape \(3, 5\)",
         lambda: nb.binary_cross_entropy_with_logits(x, x, pos_weight=np.ones(4))),
        (TypeError, r"binary_cross_entropy_with_logits: weight \(shape \(5,\)\) requires grad",
         lambda: nb.binary_cross_entropy_with_logits(
             x, x, weight=nb.tensor(np.ones(5, np.float32), requires_grad=True))),
        (TypeError, r"nll_loss: target must hold integer class indices, got nbgrad.float64 "
                    r"\(shape \(3,\)\)",
         lambda: nb.nll_loss(x, np.zeros(3))),
        (ValueError, r"nll_loss: target has shape \(3,\) but input \(3, 5, 2\) needs \(3, 2\)",
         lambda: nb.nll_loss(np.zeros((3, 5, 2)), t)),
        (ValueError, r"nll_loss: target\[1\] = 5 is out of range for C = 5 classes \(input "
                     r"shape \(3, 5\), ignore_index -100\)",
         lambda: nb.nll_loss(x, np.array([0, 5, 1]))),
        (ValueError, r"nll_loss: weight must hold one value per class, shape \(5,\) for input "
                     r"of shape \(3, 5\), got shape \(3,\)",
         lambda: nb.nll_loss(x, t, weight=np.ones(3))),
        (ValueError, r"cross_entropy: target\[0, 1\] = -3 is out of range for C = 5 classes",
         lambda: nb.cross_entropy(np.zeros((2, 5, 2)), np.array([[0, -3], [1, 1]]))),
        (ValueError, r"cross_entropy: weight must hold one value per class, shape \(5,\)",
         lambda: nb.cross_entropy(x, t, weight=np.ones((5, 5)))),
        (TypeError, r"cross_entropy: target must hold integer class indices of shape \(3,\) or "
                    r"class probabilities of the logits' shape \(3, 5\), got nbgrad.float32 of "
                    r"shape \(3, 4\)",
         lambda: nb.cross_entropy(x, np.zeros((3, 4), np.float32))),
        (ValueError, r"cross_entropy: ignore_index is not supported for class probabilities",
         lambda: nb.cross_entropy(x, x, ignore_index=1)),
        (ValueError, r"cross_entropy: label_smoothing must be between 0 and 1, got 1.5",
         lambda: nb.cross_entropy(x, t, label_smoothing=1.5)),
        (TypeError, r"cross_entropy: ignore_index must be an int, got 1.0",
         lambda: nb.cross_entropy(x, t, ignore_index=1.0)),
        (ValueError, r"nll_loss: reduction must be 'mean', 'sum' or 'none', got 'avg'",
         lambda: nb.nll_loss(x, t, reduction="avg")),
    ])


# -- PyTorch oracles ------------------------------------------------------------------------------


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pytorch_oracle_bce(dtype, reduction):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(15)
    x = (rng.standard_normal((5, 6)) * 2).astype(dtype)
    p = rng.uniform(0, 1, (5, 6)).astype(dtype)
    w, pw = rng.uniform(0.5, 2, (5, 1)), rng.uniform(0.5, 3, 6)
    for weight, pos_weight in [(None, None), (w, None), (None, pw), (w, pw)]:
        tw = None if weight is None else torch.tensor(weight.astype(dtype))
        tpw = None if pos_weight is None else torch.tensor(pos_weight.astype(dtype))
        compare_with_torch(
            lambda a, b, w_=weight, p_=pos_weight: nb.binary_cross_entropy_with_logits(
                a, b, w_, reduction, p_),
            lambda a, b, w_=tw, p_=tpw: F.binary_cross_entropy_with_logits(
                a, b, w_, reduction=reduction, pos_weight=p_),
            [x, p], [True, True], dtype, rng)



@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", sorted(CE_CASES))
def test_pytorch_oracle_cross_entropy_and_nll(case, dtype, reduction):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    shape, kind, weighted, ignore_index, eps = CE_CASES[case]
    rng = np.random.default_rng(16)
    x, t, w = _ce_inputs(shape, kind, weighted, rng)
    x = x.astype(dtype)
    t = t.astype(dtype) if kind == "prob" else t
    tw = None if w is None else torch.tensor(w.astype(dtype))
    compare_with_torch(
        lambda a, b: nb.cross_entropy(a, b, w, ignore_index, reduction, eps),
        lambda a, b: F.cross_entropy(a, b, tw, ignore_index=ignore_index, reduction=reduction,
                                     label_smoothing=eps),
        [x, t], [True, kind == "prob"], dtype, rng)
    if kind != "prob":
        lp = np.asarray(log_softmax(x.astype(np.float64), axis=1), dtype)
        compare_with_torch(
            lambda a, b: nb.nll_loss(a, b, w, ignore_index, reduction),
            lambda a, b: F.nll_loss(a, b, tw, ignore_index=ignore_index, reduction=reduction),
            [lp, t], [True, False], dtype, rng)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_pytorch_oracle_all_ignored_and_unbatched(reduction):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(17)
    x = rng.standard_normal((3, 4))
    for eps in (0.0, 0.3):
        compare_with_torch(
            lambda a, b, e=eps: nb.cross_entropy(a, b, reduction=reduction, label_smoothing=e),
            lambda a, b, e=eps: F.cross_entropy(a, b, reduction=reduction, label_smoothing=e),
            [x, np.full(3, -100)], [True, False], np.float64, rng)
    for target in (np.array(2), rng.dirichlet(np.ones(4))):
        compare_with_torch(
            lambda a, b: nb.cross_entropy(a, b, reduction=reduction, label_smoothing=0.1),
            lambda a, b: F.cross_entropy(a, b, reduction=reduction, label_smoothing=0.1),
            [x[0], target], [True, target.dtype.kind == "f"], np.float64, rng)


def test_pytorch_oracle_second_derivatives():
    """grad of |dL/dx|^2 + |dL/dt|^2 for losses with a differentiable target, and the
    Hessian-vector product of the general cross_entropy."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(18)
    x, y = rng.standard_normal((4, 5)) * 2, rng.uniform(0, 1, (4, 5))
    pw = rng.uniform(0.5, 3, 5)
    second_derivatives_like_torch([
        (lambda a, b: nb.binary_cross_entropy_with_logits(a, b, pos_weight=pw),
         lambda a, b: F.binary_cross_entropy_with_logits(a, b, pos_weight=torch.tensor(pw))),
        (lambda a, b: nb.cross_entropy(a, b, pw, label_smoothing=0.2),
         lambda a, b: F.cross_entropy(a, b, torch.tensor(pw), label_smoothing=0.2)),
    ], x, y)
    t = np.array([[0, 1, -100], [2, 2, 0]])
    x3 = rng.standard_normal((2, 3, 3))
    u = rng.standard_normal((2, 3, 3))
    xt = torch.tensor(x3, requires_grad=True)
    (d,) = torch.autograd.grad(F.cross_entropy(xt, torch.tensor(t), torch.tensor(pw[:3]),
                                               label_smoothing=0.1), [xt], create_graph=True)
    (want,) = torch.autograd.grad((d * torch.tensor(u)).sum(), [xt])
    xn = nb.tensor(x3, requires_grad=True)
    (dn,) = nb.grad(nb.cross_entropy(xn, t, pw[:3], label_smoothing=0.1), [xn],
                    create_graph=True)
    (got,) = nb.grad((dn * nb.tensor(u)).sum(), [xn])
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-10, atol=1e-12)



@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pytorch_oracle_non_finite_values(dtype):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    pw = np.full(len(SPECIAL), 2.0, dtype)
    non_finite_like_torch([
        (nb.binary_cross_entropy_with_logits, F.binary_cross_entropy_with_logits, {}, {}),
        (nb.binary_cross_entropy_with_logits, F.binary_cross_entropy_with_logits,
         {"pos_weight": pw}, {"pos_weight": torch.tensor(pw)}),
    ], dtype)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_pytorch_oracle_non_finite_logits_in_the_general_cross_entropy(reduction):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    x = np.array([[np.inf, 1.0, 0.0], [0.0, np.nan, 1.0], [-np.inf, 0.0, 1.0],
                  [1e30, -1e30, 0.0], [0.0, 1.0, 2.0]], np.float32)
    t = np.array([1, 0, 0, 2, -100])
    w = np.array([0.5, 2.0, 1.0], np.float32)
    for weight, eps in [(None, 0.0), (w, 0.0), (None, 0.2), (w, 0.2)]:
        tw = None if weight is None else torch.tensor(weight)
        xt = torch.tensor(x, requires_grad=True)
        lt = F.cross_entropy(xt, torch.tensor(t), tw, reduction=reduction, label_smoothing=eps)
        lt.backward(torch.ones_like(lt))
        xn = nb.tensor(x, requires_grad=True)
        ln = nb.cross_entropy(xn, t, weight, reduction=reduction, label_smoothing=eps)
        ln.backward(np.ones(ln.shape, np.float32))
        for got, want in ((ln.numpy(), lt.detach().numpy()), (xn.grad.numpy(), xt.grad.numpy())):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7, equal_nan=True)
