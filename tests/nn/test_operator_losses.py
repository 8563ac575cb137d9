"""LpLoss and H1Loss of nbgrad/nn/operator_losses.py: values against analytic integrals
and a NumPy reference, values, gradients and second derivatives against a PyTorch
reference of neuraloperator's formulas written here, hypothesis over shapes / p / d, and
bad input."""

import math
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.nn.operator_losses import H1Loss, LpLoss
from nbgrad.testing.torch_reference_losses import h1_loss, lp_loss

rng = np.random.default_rng(46)


# -- analytic and NumPy references ----------------------------------------------------
def test_lp_abs_is_a_quadrature_of_the_integral():
    # u = sin(2 pi x) on [0, L) sampled at n points: ||u||_{L2} = sqrt(L / 2) and
    # ||u||_{L1} = 2 L / pi; the Riemann sum of a periodic function converges fast.
    n, L = 256, 3.0
    grid = np.arange(n) * L / n
    u = np.sin(2 * np.pi * grid / L)[None, None]
    zero = np.zeros_like(u)
    l2 = LpLoss(d=1, p=2, measure=L).abs(nb.tensor(u), nb.tensor(zero)).item()
    l1 = LpLoss(d=1, p=1, measure=L).abs(nb.tensor(u), nb.tensor(zero)).item()
    assert l2 == pytest.approx(math.sqrt(L / 2), rel=1e-10)
    assert l1 == pytest.approx(2 * L / math.pi, rel=1e-3)


def test_h1_abs_of_a_periodic_wave_matches_the_integral():
    # u = sin(2 pi x) sin(2 pi y) on [0,1)^2: int u^2 = 1/4 and
    # int |grad u|^2 = 2 * (2 pi)^2 / 4; central differences are second order.
    n = 128
    g = np.arange(n) / n
    u = (np.sin(2 * np.pi * g)[:, None] * np.sin(2 * np.pi * g)[None, :])[None, None]
    got = H1Loss(d=2).abs(nb.tensor(u), nb.tensor(np.zeros_like(u))).item()
    want = math.sqrt(0.25 + 2 * (2 * np.pi) ** 2 / 4)
    assert got == pytest.approx(want, rel=1e-3)


def test_one_sided_stencils_are_exact_on_cubics():
    # The interior central difference is exact for quadratics, the one-sided boundary
    # stencil for cubics; so H1 of u = x^2 against 0 is the sum of u^2 + (2x)^2 exactly.
    n, L = 9, 2.0
    h = L / n
    xs = np.arange(n) * h
    u = (xs ** 2)[None, None]
    got = H1Loss(d=1, measure=L, periodic_in_x=False).abs(
        nb.tensor(u), nb.tensor(np.zeros_like(u)), take_root=False).item()
    want = h * (np.sum(xs ** 4) + np.sum((2 * xs) ** 2))
    assert got == pytest.approx(want, rel=1e-12)


def np_lp_rel(x, y, d, p, eps=1e-8, reduction="sum"):
    """NumPy: ||x - y||_p / (||y||_p + eps) over the last d dims, then reduced."""
    axes = tuple(range(x.ndim - d, x.ndim))
    num = (np.abs(x - y) ** p).sum(axis=axes) ** (1 / p)
    den = (np.abs(y) ** p).sum(axis=axes) ** (1 / p) + eps
    r = num / den
    return r.sum() if reduction == "sum" else r.mean()


@given(d=st.integers(1, 3), p=st.sampled_from([1.0, 1.5, 2.0, 3.0, 4.0]),
       lead=st.lists(st.integers(1, 3), min_size=1, max_size=2),
       spatial=st.lists(st.integers(1, 5), min_size=3, max_size=3),
       reduction=st.sampled_from(["sum", "mean"]), seed=st.integers(0, 2 ** 16))
def test_lp_rel_matches_numpy_over_shapes(d, p, lead, spatial, reduction, seed):
    r = np.random.default_rng(seed)
    shape = tuple(lead) + tuple(spatial[:d])
    x, y = r.normal(size=shape), r.normal(size=shape)
    got = LpLoss(d=d, p=p, reduction=reduction)(nb.tensor(x), nb.tensor(y)).item()
    want = np_lp_rel(x, y, d, p, reduction=reduction)
    assert got == pytest.approx(want, rel=1e-10)


# -- the PyTorch reference of neuraloperator's formulas: nbgrad.testing.torch_reference_losses


def compare_with_torch(nb_fn, torch_fn, shape, dtype, rtol, atol=0.0):
    """Value, both first derivatives and a Hessian-vector product of nb_fn(x, y) against
    torch_fn(x, y) on the same random operands."""
    torch = pytest.importorskip("torch")
    x0 = rng.normal(size=shape).astype(dtype)
    y0 = rng.normal(size=shape).astype(dtype)
    v0 = rng.normal(size=shape).astype(dtype)
    x, y = nb.tensor(x0, requires_grad=True), nb.tensor(y0, requires_grad=True)
    tx = torch.tensor(x0, requires_grad=True)
    ty = torch.tensor(y0, requires_grad=True)
    out, tout = nb_fn(x, y), torch_fn(tx, ty)
    assert out.shape == tuple(tout.shape) == ()
    assert out.dtype == (nb.float64 if dtype == np.float64 else nb.float32)
    np.testing.assert_allclose(out.item(), tout.item(), rtol=rtol, atol=atol)
    gx, gy = nb.autograd.grad(out, [x, y], create_graph=True)
    tgx, tgy = torch.autograd.grad(tout, [tx, ty], create_graph=True)
    np.testing.assert_allclose(gx.numpy(), tgx.detach().numpy(), rtol=rtol, atol=atol)
    np.testing.assert_allclose(gy.numpy(), tgy.detach().numpy(), rtol=rtol, atol=atol)
    # Second derivatives: d/dx and d/dy of <grad_x, v>. Where they vanish identically
    # (p = 1: the gradient is a sign pattern) nbgrad records no graph at all.
    tsec = (tgx * torch.tensor(v0)).sum()
    thx, thy = (torch.autograd.grad(tsec, [tx, ty], allow_unused=True)
                if tsec.requires_grad else (None, None))
    thx, thy = (np.zeros(shape) if h is None else h.detach().numpy() for h in (thx, thy))
    if not gx.requires_grad:
        assert not thx.any() and not thy.any()
        return
    hx, hy = (np.zeros(shape) if h is None else h.numpy()
              for h in nb.autograd.grad((gx * nb.tensor(v0)).sum(), [x, y]))
    scale = max(np.abs(thx).max(), np.abs(thy).max(), 1.0)
    np.testing.assert_allclose(hx, thx, rtol=rtol, atol=rtol * scale)
    np.testing.assert_allclose(hy, thy, rtol=rtol, atol=rtol * scale)


LP_CASES = [  # d, p, measure, reduction, shape
    (1, 2, 1.0, "sum", (3, 2, 7)),
    (1, 1, 2.0, "mean", (4, 6)),
    (2, 2, [1.0, 3.0], "sum", (2, 3, 5, 4)),
    (2, 3, 2 * math.pi, "mean", (2, 1, 4, 6)),
    (2, 1.5, [0.5, 2.0], "sum", (2, 2, 3, 5)),
    (3, 4, 1.0, "sum", (2, 1, 3, 4, 3)),
    (3, 2.5, [1.0, 2.0, 0.5], "mean", (1, 2, 3, 2, 4)),
]


@pytest.mark.parametrize("d,p,measure,reduction,shape", LP_CASES)
@pytest.mark.parametrize("mode", ["rel", "abs"])
@pytest.mark.parametrize("take_root", [True, False])
def test_lp_loss_matches_torch_float64(d, p, measure, reduction, shape, mode, take_root):
    loss = LpLoss(d=d, p=p, measure=measure, reduction=reduction)
    ms = measure if isinstance(measure, list) else [measure] * d
    compare_with_torch(
        lambda x, y: getattr(loss, mode)(x, y, take_root=take_root),
        lambda x, y: lp_loss(pytest.importorskip("torch"), x, y, d, p, ms, reduction,
                              1e-8, mode, take_root),
        shape, np.float64, rtol=1e-10)


H1_CASES = [  # d, measure, periodic flags, reduction, shape
    (1, 1.0, (True,), "sum", (3, 2, 8)),
    (1, 2.0, (False,), "mean", (2, 1, 6)),
    (2, 1.0, (True, True), "sum", (2, 2, 5, 6)),
    (2, [1.0, 2.0], (False, True), "mean", (2, 1, 4, 7)),
    (2, 1.0, (True, False), "sum", (1, 2, 3, 5)),
    (2, 2 * math.pi, (False, False), "sum", (2, 1, 5, 4)),
    (3, 1.0, (True, True, True), "sum", (1, 2, 4, 3, 5)),
    (3, [1.0, 0.5, 2.0], (False, True, False), "mean", (2, 1, 4, 3, 5)),
]


@pytest.mark.parametrize("d,measure,periodic,reduction,shape", H1_CASES)
@pytest.mark.parametrize("mode", ["rel", "abs"])
def test_h1_loss_matches_torch_float64(d, measure, periodic, reduction, shape, mode):
    flags = dict(zip(["periodic_in_x", "periodic_in_y", "periodic_in_z"], periodic))
    loss = H1Loss(d=d, measure=measure, reduction=reduction, **flags)
    ms = measure if isinstance(measure, list) else [measure] * d
    compare_with_torch(
        lambda x, y: getattr(loss, mode)(x, y),
        lambda x, y: h1_loss(pytest.importorskip("torch"), x, y, d, ms, periodic,
                              reduction, 1e-8, mode),
        shape, np.float64, rtol=1e-10)


def test_h1_without_root_and_given_quadrature_match_torch():
    torch = pytest.importorskip("torch")
    loss = H1Loss(d=2, periodic_in_x=False)
    compare_with_torch(
        lambda x, y: loss.rel(x, y, quadrature=[0.3, 0.2], take_root=False),
        lambda x, y: h1_loss(torch, x, y, 2, [0.3 * 4, 0.2 * 5], (False, True), "sum",
                              1e-8, "rel", take_root=False),
        (2, 2, 4, 5), np.float64, rtol=1e-10)
    compare_with_torch(
        lambda x, y: loss.abs(x, y, quadrature=0.25),
        lambda x, y: h1_loss(torch, x, y, 2, [0.25 * 4, 0.25 * 5], (False, True), "sum",
                              1e-8, "abs"),
        (2, 2, 4, 5), np.float64, rtol=1e-10)


@pytest.mark.parametrize("which", ["lp", "h1"])
def test_float32_matches_torch(which):
    torch = pytest.importorskip("torch")
    if which == "lp":
        loss = LpLoss(d=2, p=3, measure=[1.0, 2.0])
        ref = lambda x, y: lp_loss(torch, x, y, 2, 3, [1.0, 2.0], "sum", 1e-8,  # noqa: E731
                                    "rel")
    else:
        loss = H1Loss(d=2, periodic_in_y=False)
        ref = lambda x, y: h1_loss(torch, x, y, 2, [1.0, 1.0], (True, False),  # noqa: E731
                                    "sum", 1e-8, "rel")
    compare_with_torch(lambda x, y: loss(x, y), ref, (3, 2, 6, 5), np.float32, rtol=2e-4,
                       atol=1e-5)


@given(d=st.integers(1, 3), data=st.data(), seed=st.integers(0, 2 ** 16),
       reduction=st.sampled_from(["sum", "mean"]))
def test_h1_matches_torch_over_shapes_and_boundaries(d, data, seed, reduction):
    torch = pytest.importorskip("torch")
    periodic = tuple(data.draw(st.lists(st.booleans(), min_size=d, max_size=d)))
    spatial = tuple(data.draw(st.integers(4 if not f else 1, 6)) for f in periodic)
    lead = tuple(data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=2)))
    r = np.random.default_rng(seed)
    x, y = r.normal(size=lead + spatial), r.normal(size=lead + spatial)
    flags = dict(zip(["periodic_in_x", "periodic_in_y", "periodic_in_z"], periodic))
    loss = H1Loss(d=d, reduction=reduction, **flags)
    for mode in ("rel", "abs"):
        got = getattr(loss, mode)(nb.tensor(x), nb.tensor(y)).item()
        want = h1_loss(torch, torch.tensor(x), torch.tensor(y), d, [1.0] * d, periodic,
                        reduction, 1e-8, mode).item()
        assert got == pytest.approx(want, rel=1e-10)


# -- module behaviour -----------------------------------------------------------------
def test_defaults_names_and_module_behaviour():
    lp, h1 = LpLoss(), H1Loss()
    assert (lp.d, lp.p, lp.measure, lp.reduction, lp.eps) == (1, 2, [1.0], "sum", 1e-8)
    assert (h1.d, h1.measure, h1.reduction, h1.eps) == (1, [1.0], "sum", 1e-8)
    assert h1.periodic_in_x and h1.periodic_in_y and h1.periodic_in_z
    assert LpLoss(d=2, p=3).name == "L3_2Dloss" and H1Loss(d=3).name == "H1_3DLoss"
    assert lp.state_dict() == {} and list(lp.parameters()) == []
    assert "p=2" in repr(lp) and "periodic_in_x=True" in repr(h1)
    assert LpLoss(d=2, measure=[2.0, 4.0]).uniform_quadrature(np.zeros((1, 4, 8))) == [
        0.5, 0.5]


def test_numpy_operands_and_extra_keywords():
    x, y = rng.normal(size=(2, 5)), rng.normal(size=(2, 5))
    want = np_lp_rel(x, y, 1, 2)
    assert LpLoss()(x, y).item() == pytest.approx(want, rel=1e-12)
    assert LpLoss()(nb.tensor(x), y).item() == pytest.approx(want, rel=1e-12)
    ints = np.arange(10).reshape(2, 5)
    assert LpLoss()(ints, ints + 1).item() == pytest.approx(
        np_lp_rel(ints * 1.0, ints + 1.0, 1, 2), rel=1e-12)
    with pytest.warns(UserWarning, match="LpLoss.forward.*unexpected keyword.*'x'"):
        LpLoss()(x, y, x=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        H1Loss()(x, y)


# -- bad input ------------------------------------------------------------------------
@pytest.mark.parametrize("make,match", [
    (lambda: LpLoss(p=0), "LpLoss: p must be .* > 0, got 0"),
    (lambda: LpLoss(p=-1.5), "LpLoss: p must"),
    (lambda: LpLoss(p=float("inf")), "LpLoss: p must"),
    (lambda: LpLoss(d=0), "LpLoss: d must be a positive int"),
    (lambda: LpLoss(d=1.5), "LpLoss: d must be a positive int"),
    (lambda: LpLoss(reduction="none"), "LpLoss: reduction must be one of .*'none'"),
    (lambda: LpLoss(d=2, measure=[1.0]), "LpLoss: measure must be .* d=2"),
    (lambda: LpLoss(measure=-1.0), "LpLoss: measure must be a positive"),
    (lambda: LpLoss(eps=-1.0), "LpLoss: eps must"),
    (lambda: H1Loss(d=4), "H1Loss: d must be one of"),
    (lambda: H1Loss(reduction="avg"), "H1Loss: reduction must be one of"),
    (lambda: H1Loss(d=3, measure=[1.0, 2.0]), "H1Loss: measure must"),
])
def test_bad_constructor_arguments(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_bad_operands():
    with pytest.raises(ValueError, match=r"LpLoss: d=2 spatial dims need .* got shape \(4, 5\)"):
        LpLoss(d=2)(np.zeros((4, 5)), np.zeros((4, 5)))
    with pytest.raises(ValueError, match=r"H1Loss: d=3 .* got shape \(2, 4, 4\)"):
        H1Loss(d=3).abs(np.zeros((2, 4, 4)), np.zeros((2, 4, 4)))
    with pytest.raises(ValueError, match=r"LpLoss: y_pred and y must have the same shape, "
                                         r"got \(2, 5\) and \(2, 6\)"):
        LpLoss()(np.zeros((2, 5)), np.zeros((2, 6)))
    with pytest.raises(ValueError, match="H1Loss: y_pred and y must have the same shape"):
        H1Loss(d=2)(np.zeros((1, 4, 4)), np.zeros((1, 4, 5)))
    with pytest.raises(ValueError, match="H1Loss: periodic_in_y=False needs at least 4 "
                                         r"points .* \(1, 5, 3\)"):
        H1Loss(d=2, periodic_in_y=False)(np.ones((1, 5, 3)), np.ones((1, 5, 3)))
    with pytest.raises(ValueError, match="LpLoss: quadrature must .* d=2"):
        LpLoss(d=2).abs(np.ones((1, 3, 3)), np.ones((1, 3, 3)), quadrature=[1.0, 2.0, 3.0])
