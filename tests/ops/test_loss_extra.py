"""binary_cross_entropy, kl_div, poisson_nll_loss and gaussian_nll_loss
(nbgrad/ops/loss_extra.py): PyTorch oracles for values and both gradients over
hypothesis shapes and reductions, second derivatives, gradcheck (registered samples for
binary_cross_entropy, the compositions directly for the others) and bad input."""

import warnings

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.ops import loss_extra as L
from nbgrad.testing import check_registered, gradcheck, gradgradcheck

torch = pytest.importorskip("torch")
F = torch.nn.functional

REDUCTIONS = ["mean", "sum", "none"]
shapes = st.lists(st.integers(1, 4), min_size=0, max_size=3).map(tuple)


def _tol(dtype):
    return dict(rtol=2e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)


def _compare(ours, theirs, arrays, differentiable, seed=0, **kw):
    """Loss and the gradient of every differentiable array, ours against PyTorch's, for one
    random upstream gradient; kw are passed to both (arrays as tensors of each)."""
    dtype = arrays[0].dtype
    tins = [torch.tensor(a, requires_grad=d) for a, d in zip(arrays, differentiable)]
    nins = [nb.tensor(a, requires_grad=d) for a, d in zip(arrays, differentiable)]
    tkw = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lt, ln = theirs(*tins, **tkw), ours(*nins, **kw)
    g = np.random.default_rng(seed).standard_normal(tuple(lt.shape)).astype(dtype)
    lt.backward(torch.tensor(g))
    ln.backward(g)
    assert ln.shape == tuple(lt.shape) and ln.dtype == dtype
    np.testing.assert_allclose(ln.numpy(), lt.detach().numpy(), **_tol(dtype))
    for n, t, d in zip(nins, tins, differentiable):
        if d:
            np.testing.assert_allclose(n.grad.numpy(), t.grad.numpy(), **_tol(dtype))


# -- binary_cross_entropy --------------------------------------------------------------------


@pytest.mark.parametrize("second_order", [False, True])
def test_bce_registered_samples_pass_gradcheck_and_gradgradcheck(second_order):
    report = check_registered("binary_cross_entropy", second_order=second_order)
    assert report.passed, "\n".join(report.failures)


@given(shape=shapes, reduction=st.sampled_from(REDUCTIONS), weighted=st.booleans(),
       dtype=st.sampled_from([np.float32, np.float64]), seed=st.integers(0, 2**16))
def test_bce_matches_torch(shape, reduction, weighted, dtype, seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.01, 0.99, shape).astype(dtype)
    t = rng.uniform(0, 1, shape).astype(dtype)
    w = rng.uniform(0.5, 2, shape[-1:]).astype(dtype) if weighted else None
    _compare(L.binary_cross_entropy, F.binary_cross_entropy, [x, t], [True, True], seed,
             weight=w, reduction=reduction)


def test_bce_at_0_and_1_clamps_logs_like_torch():
    x = np.array([0.0, 0.0, 1.0, 1.0, 1e-50, 1 - 1e-17, 0.5])
    t = np.array([0.0, 1.0, 0.0, 1.0, 0.3, 0.7, 0.5])
    _compare(L.binary_cross_entropy, F.binary_cross_entropy, [x, t], [True, False],
             reduction="none")


def test_bce_second_derivatives_like_torch():
    rng = np.random.default_rng(1)
    x, t = rng.uniform(0.1, 0.9, (3, 4)), rng.uniform(0, 1, (3, 4))
    xt, tt = torch.tensor(x, requires_grad=True), torch.tensor(t, requires_grad=True)
    first = torch.autograd.grad(F.binary_cross_entropy(xt, tt), [xt, tt], create_graph=True)
    want = torch.autograd.grad(sum((d * d).sum() for d in first), [xt, tt])
    xn, tn = nb.tensor(x, requires_grad=True), nb.tensor(t, requires_grad=True)
    dx, dt = nb.grad(L.binary_cross_entropy(xn, tn), [xn, tn], create_graph=True)
    got = nb.grad((dx * dx).sum() + (dt * dt).sum(), [xn, tn])
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-9, atol=1e-12)


def test_bce_leaves_inputs_unchanged_and_exported():
    x, t = np.array([0.2, 0.7]), np.array([0.0, 1.0])
    xc, tc = x.copy(), t.copy()
    assert nb.binary_cross_entropy(x, t).item() > 0
    np.testing.assert_array_equal(x, xc)
    np.testing.assert_array_equal(t, tc)


def test_bce_bad_input_like_torch():
    x, t = nb.tensor([[0.2, 0.5, 0.7]]), nb.tensor([[0.0, 1.0, 1.0]])
    with pytest.raises(ValueError, match="binary_cross_entropy.*'foo' is not a valid"):
        L.binary_cross_entropy(x, t, reduction="foo")
    with pytest.raises(ValueError, match=r"binary_cross_entropy: target of shape \(3,\).*"
                                         r"\(1, 3\)"):
        L.binary_cross_entropy(x, nb.tensor([0.0, 1.0, 1.0]))
    for bad in (1.5, -0.1, np.nan):
        with pytest.raises(RuntimeError, match="between 0 and 1"):
            L.binary_cross_entropy(nb.tensor([[0.2, bad, 0.7]]), t)
    with pytest.raises(RuntimeError, match=r"weight of shape \(4,\).*\(1, 3\)"):
        L.binary_cross_entropy(x, t, weight=np.ones(4))
    with pytest.raises(TypeError, match="binary_cross_entropy: weight.*requires grad"):
        L.binary_cross_entropy(x, t, weight=nb.tensor([1.0, 2.0, 3.0], requires_grad=True))
    with pytest.raises(TypeError, match="binary_cross_entropy: input must be float"):
        L.binary_cross_entropy(np.array([0, 1]), np.array([0, 1]))


# -- kl_div ----------------------------------------------------------------------------------


@given(shape=shapes, reduction=st.sampled_from(REDUCTIONS + ["batchmean"]),
       log_target=st.booleans(), dtype=st.sampled_from([np.float32, np.float64]),
       seed=st.integers(0, 2**16))
def test_kl_div_matches_torch(shape, reduction, log_target, dtype, seed):
    rng = np.random.default_rng(seed)
    x = np.log(rng.uniform(0.05, 1, shape)).astype(dtype)
    t = (np.log(rng.uniform(0.05, 1, shape)) if log_target
         else rng.uniform(0.05, 1, shape)).astype(dtype)
    _compare(L.kl_div, F.kl_div, [x, t], [True, True], seed, reduction=reduction,
             log_target=log_target)


def test_kl_div_zero_target_and_broadcasting_like_torch():
    x = np.log(np.array([[0.2, 0.3, 0.5], [0.1, 0.1, 0.8]]))
    t = np.array([0.0, 0.4, 0.6])
    _compare(L.kl_div, F.kl_div, [x, t], [True, False], reduction="batchmean")
    # target's gradient at t = 0 is 0 here (PyTorch's composition gives 0 * inf = NaN)
    tn = nb.tensor(t, requires_grad=True)
    L.kl_div(nb.tensor(x), tn, reduction="sum").backward()
    assert np.isfinite(tn.grad.numpy()).all()


def test_kl_div_mean_warns_as_torch():
    with pytest.warns(UserWarning, match="batchmean"):
        L.kl_div(nb.tensor([-1.0, -2.0]), nb.tensor([0.3, 0.7]))


def test_kl_div_gradgradcheck():
    rng = np.random.default_rng(2)
    x = nb.tensor(np.log(rng.uniform(0.1, 1, (2, 3))), requires_grad=True)
    t = nb.tensor(rng.uniform(0.1, 1, (2, 3)), requires_grad=True)
    for log_target in (False, True):
        def fn(a, b, lt=log_target):
            return L.kl_div(a, b, reduction="batchmean", log_target=lt)
        assert gradcheck(fn, [x, t])
        assert gradgradcheck(fn, [x, t])


def test_kl_div_bad_input():
    x, t = nb.tensor([[-1.0, -2.0, -0.5]]), nb.tensor([0.1, 0.2])
    with pytest.raises(ValueError, match="kl_div: 'batch' is not a valid value for reduction"):
        L.kl_div(x, nb.tensor([0.1, 0.2, 0.7]), reduction="batch")
    with pytest.raises(RuntimeError, match=r"kl_div: input of shape \(1, 3\) and target of "
                                           r"shape \(2,\) do not broadcast"):
        L.kl_div(x, t, reduction="sum")


# -- poisson_nll_loss --------------------------------------------------------------------------


@given(shape=shapes, reduction=st.sampled_from(REDUCTIONS), log_input=st.booleans(),
       full=st.booleans(), dtype=st.sampled_from([np.float32, np.float64]),
       seed=st.integers(0, 2**16))
def test_poisson_nll_loss_matches_torch(shape, reduction, log_input, full, dtype, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) if log_input else rng.uniform(0.1, 3, shape)).astype(dtype)
    t = rng.uniform(1.2, 5, shape).astype(dtype)   # target grads: above Stirling's cut at 1
    _compare(L.poisson_nll_loss, F.poisson_nll_loss, [x, t], [True, True], seed,
             log_input=log_input, full=full, reduction=reduction)


def test_poisson_nll_loss_integer_targets_and_eps_like_torch():
    x = np.array([[0.0, 0.5, 2.0, 1e-9]])
    t = np.array([[0.0, 1.0, 3.0, 2.0]])
    for log_input in (True, False):
        _compare(L.poisson_nll_loss, F.poisson_nll_loss, [x, t], [True, False],
                 log_input=log_input, full=True, eps=1e-3, reduction="none")


def test_poisson_nll_loss_gradgradcheck():
    rng = np.random.default_rng(3)
    x = nb.tensor(rng.uniform(0.5, 2, (2, 3)), requires_grad=True)
    t = nb.tensor(rng.uniform(1.5, 4, (2, 3)), requires_grad=True)
    for log_input in (True, False):
        def fn(a, b, li=log_input):
            return L.poisson_nll_loss(a, b, log_input=li, full=True)
        assert gradcheck(fn, [x, t])
        assert gradgradcheck(fn, [x, t])


def test_poisson_nll_loss_bad_input():
    with pytest.raises(ValueError, match="poisson_nll_loss: 'avg' is not a valid value"):
        L.poisson_nll_loss(nb.tensor([1.0]), nb.tensor([1.0]), reduction="avg")
    with pytest.raises(RuntimeError, match=r"poisson_nll_loss: input of shape \(2, 3\)"):
        L.poisson_nll_loss(nb.zeros((2, 3)), nb.zeros((3, 3)))


# -- gaussian_nll_loss --------------------------------------------------------------------------


VAR_SHAPES = {"same": lambda s: s, "last dim dropped": lambda s: s[:-1],
              "one dim 1": lambda s: s[:-1] + (1,)}


@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple),
       var_shape=st.sampled_from(sorted(VAR_SHAPES)), full=st.booleans(),
       reduction=st.sampled_from(REDUCTIONS), dtype=st.sampled_from([np.float32, np.float64]),
       seed=st.integers(0, 2**16))
def test_gaussian_nll_loss_matches_torch(shape, var_shape, full, reduction, dtype, seed):
    rng = np.random.default_rng(seed)
    x, t = (rng.standard_normal(shape).astype(dtype) for _ in range(2))
    var = rng.uniform(0.2, 2, VAR_SHAPES[var_shape](shape)).astype(dtype)
    _compare(L.gaussian_nll_loss, F.gaussian_nll_loss, [x, t, var], [True, True, True], seed,
             full=full, reduction=reduction)


def test_gaussian_nll_loss_clamped_and_scalar_var_like_torch():
    x, t = np.array([[0.5, -1.0, 2.0]]), np.array([[0.0, 0.5, 1.0]])
    var = np.array([[0.0, 1e-9, 0.5]])    # clamped at eps, gradient passed through
    _compare(L.gaussian_nll_loss, F.gaussian_nll_loss, [x, t, var], [True, True, True],
             eps=1e-4, reduction="none")
    _compare(lambda a, b: L.gaussian_nll_loss(a, b, 0.7),
             lambda a, b: F.gaussian_nll_loss(a, b, 0.7), [x, t], [True, True])


def test_gaussian_nll_loss_gradgradcheck():
    rng = np.random.default_rng(4)
    x, t = (nb.tensor(rng.standard_normal((2, 3)), requires_grad=True) for _ in range(2))
    var = nb.tensor(rng.uniform(0.5, 2, (2, 1)), requires_grad=True)
    assert gradcheck(lambda a, b, v: L.gaussian_nll_loss(a, b, v, full=True), [x, t, var])
    assert gradgradcheck(lambda a, b, v: L.gaussian_nll_loss(a, b, v), [x, t, var])


def test_gaussian_nll_loss_bad_input_like_torch():
    x, t = nb.zeros((2, 3)), nb.zeros((2, 3))
    with pytest.raises(ValueError, match=r"gaussian_nll_loss: var is of incorrect size: var "
                                         r"of shape \(3, 3\) for input of shape \(2, 3\)"):
        L.gaussian_nll_loss(x, t, nb.ones((3, 3)))
    with pytest.raises(ValueError, match="negative"):
        L.gaussian_nll_loss(x, t, -1.0)
    with pytest.raises(ValueError, match="negative"):
        L.gaussian_nll_loss(x, t, nb.tensor([[1.0], [-1.0]]))
    with pytest.raises(ValueError, match="gaussian_nll_loss: 'foo' is not valid"):
        L.gaussian_nll_loss(x, t, nb.ones((2, 1)), reduction="foo")
    with pytest.raises(RuntimeError, match=r"input of shape \(2, 3\) and target of shape "
                                           r"\(2,\)"):
        L.gaussian_nll_loss(x, nb.zeros(2), 1.0)


# -- margin losses ------------------------------------------------------------------------------


def _margin_case(name, rng, shape, dtype):
    """(arrays, differentiable, kwargs) for a margin loss on a batch of ``shape``
    (n, d); targets are +-1 (hinge: some 0.5, where both terms count)."""
    x1, x2, x3 = (rng.standard_normal(shape).astype(dtype) for _ in range(3))
    y = rng.choice([-1.0, 1.0], shape).astype(dtype)
    if name == "margin_ranking_loss":
        return [x1, x2, y], [True, True, False], {"margin": 0.3}
    if name == "hinge_embedding_loss":
        y[rng.random(shape) < 0.2] = 0.5
        return [x1, y], [True, False], {"margin": 0.7}
    if name == "soft_margin_loss":
        return [x1, y], [True, False], {}
    if name == "multilabel_soft_margin_loss":
        w = rng.uniform(0.5, 2, shape[-1:]).astype(dtype)
        return [x1, rng.uniform(0, 1, shape).astype(dtype)], [True, True], {"weight": w}
    if name == "cosine_embedding_loss":
        return [x1, x2, y[..., 0]], [True, True, False], {"margin": -0.2}
    return [x1, x2, x3], [True, True, True], {"p": 1.5, "margin": 2.0, "swap": True}


MARGIN = ["margin_ranking_loss", "hinge_embedding_loss", "soft_margin_loss",
          "multilabel_soft_margin_loss", "cosine_embedding_loss", "triplet_margin_loss"]


@pytest.mark.parametrize("name", MARGIN)
@given(n=st.integers(1, 4), d=st.integers(1, 5), reduction=st.sampled_from(REDUCTIONS),
       dtype=st.sampled_from([np.float32, np.float64]), seed=st.integers(0, 2**16))
def test_margin_losses_match_torch(name, n, d, reduction, dtype, seed):
    # one feature: every cosine is +-1 and its gradient 0, which both libraries return as
    # rounding noise of different sizes (PyTorch's up to 4e-6 in float32)
    assume(name != "cosine_embedding_loss" or d > 1)
    arrays, diff, kw = _margin_case(name, np.random.default_rng(seed), (n, d), dtype)
    _compare(getattr(L, name), getattr(F, name), arrays, diff, seed, reduction=reduction,
             **kw)


def test_unbatched_cosine_and_triplet_like_torch():
    rng = np.random.default_rng(6)
    a, b, c = (rng.standard_normal(5) for _ in range(3))
    _compare(L.cosine_embedding_loss, F.cosine_embedding_loss, [a, b, np.array(-1.0)],
             [True, True, False], margin=-0.5)
    _compare(L.triplet_margin_loss, F.triplet_margin_loss, [a, b, c], [True, True, True],
             margin=4.0)


@pytest.mark.parametrize("name", MARGIN)
def test_margin_losses_gradgradcheck(name):
    arrays, diff, kw = _margin_case(name, np.random.default_rng(8), (3, 4), np.float64)
    if name in ("margin_ranking_loss", "hinge_embedding_loss"):   # away from the kink at 0
        arrays[0] = arrays[0] + np.sign(arrays[0]) * 0.5
    tensors = [nb.tensor(a, requires_grad=True) if d else nb.tensor(a)
               for a, d in zip(arrays, diff)]
    differentiable = [t for t in tensors if t.requires_grad]

    def fn(*xs):
        it = iter(xs)
        return getattr(L, name)(*[next(it) if t.requires_grad else t for t in tensors], **kw)
    assert gradcheck(fn, differentiable)
    if name not in ("margin_ranking_loss", "hinge_embedding_loss"):   # piecewise linear
        assert gradgradcheck(fn, differentiable)


def test_margin_losses_bad_input_like_torch():
    x, y = nb.zeros((2, 3)), nb.ones((2, 3))
    with pytest.raises(RuntimeError, match=r"margin_ranking_loss: all input tensors should "
                                           r"have the same dimension.*target: \(3,\)"):
        L.margin_ranking_loss(x, y, nb.ones(3))
    for name in ("hinge_embedding_loss", "soft_margin_loss", "multilabel_soft_margin_loss"):
        with pytest.raises(RuntimeError, match=rf"{name}: input of shape \(2, 3\) and target "
                                               r"of shape \(3, 3\) do not broadcast"):
            getattr(L, name)(x, nb.ones((3, 3)))
    with pytest.raises(ValueError, match="soft_margin_loss: 'foo' is not a valid value"):
        L.soft_margin_loss(x, y, reduction="foo")
    with pytest.raises(ValueError, match="multilabel_soft_margin_loss: 'foo' is not valid"):
        L.multilabel_soft_margin_loss(x, y, reduction="foo")
    with pytest.raises(RuntimeError, match=r"cosine_embedding_loss: 0D or 1D target tensor "
                                           r"expected.*\(2, 1\)"):
        L.cosine_embedding_loss(x, y, nb.ones((2, 1)))
    with pytest.raises(RuntimeError, match=r"0D target tensor expects 1D input tensors, but "
                                           r"found inputs with sizes \(3,\) and \(2, 3\)"):
        L.cosine_embedding_loss(nb.zeros(3), y, nb.tensor(1.0))
    with pytest.raises(RuntimeError, match=r"triplet_margin_loss: the anchor, positive, and "
                                           r"negative .* negative 1D \(3,\)"):
        L.triplet_margin_loss(x, y, nb.ones(3))
    with pytest.raises(ValueError, match="triplet_margin_loss: margin must be greater than 0"):
        L.triplet_margin_loss(x, y, y, margin=0.0)
