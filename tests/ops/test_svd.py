"""nb.linalg.svd and svdvals, and matrix_norm / norm with ord 2, -2 and 'nuc', against
PyTorch: values (up to the signs of singular vectors), gradients of gauge-invariant losses,
second derivatives, gradcheck and gradgradcheck of the registered op, bad input."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad import linalg
from nbgrad.testing import check_registered, gradcheck, gradgradcheck

torch = pytest.importorskip("torch")
TL = torch.linalg

shapes = st.tuples(st.lists(st.integers(1, 3), max_size=2).map(tuple),
                   st.integers(1, 5), st.integers(1, 5))


def separated(rng, batch, m, n, gap=0.5):
    """A [*batch, m, n] matrix with singular values k*gap + 1, ..., 1 + gap (well apart
    and away from 0) and random singular vectors."""
    k = min(m, n)
    s = 1.0 + gap * np.arange(k, 0, -1)
    qu = np.linalg.qr(rng.standard_normal((*batch, m, m)))[0][..., :, :k]
    qv = np.linalg.qr(rng.standard_normal((*batch, n, n)))[0][..., :k, :]
    return (qu * s) @ qv


def both(a, requires_grad=True):
    return (nb.tensor(a, requires_grad=requires_grad),
            torch.tensor(a, requires_grad=requires_grad))


# -- values ---------------------------------------------------------------------------------


@given(shape=shapes, full=st.booleans(), seed=st.integers(0, 99),
       dtype=st.sampled_from([np.float32, np.float64]))
def test_svd_matches_pytorch_up_to_signs(shape, full, seed, dtype):
    batch, m, n = shape
    k = min(m, n)
    rng = np.random.default_rng(seed)
    a = separated(rng, batch, m, n).astype(dtype)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    U, S, Vh = linalg.svd(a, full_matrices=full)
    tU, tS, tVh = TL.svd(torch.tensor(a), full_matrices=full)
    for ours, theirs in ((U, tU), (S, tS), (Vh, tVh)):
        assert ours.shape == tuple(theirs.shape) and ours.dtype == dtype
    np.testing.assert_allclose(S.numpy(), tS.numpy(), rtol=tol, atol=tol)
    u, s, vh = U.numpy(), S.numpy(), Vh.numpy()
    np.testing.assert_allclose((u[..., :k] * s[..., None, :]) @ vh[..., :k, :], a,
                               rtol=tol * 10, atol=tol * 10)
    eye_u, eye_v = np.eye(u.shape[-1]), np.eye(vh.shape[-2])
    np.testing.assert_allclose(np.swapaxes(u, -1, -2) @ u, np.broadcast_to(eye_u, u.shape[:-2]
                               + eye_u.shape), atol=tol * 10)
    np.testing.assert_allclose(vh @ np.swapaxes(vh, -1, -2), np.broadcast_to(
        eye_v, vh.shape[:-2] + eye_v.shape), atol=tol * 10)
    # the singular values are distinct: the first k vectors agree up to sign
    np.testing.assert_allclose(np.abs(u[..., :k]), np.abs(tU.numpy()[..., :k]),
                               rtol=tol * 10, atol=tol * 10)
    np.testing.assert_allclose(np.abs(vh[..., :k, :]), np.abs(tVh.numpy()[..., :k, :]),
                               rtol=tol * 10, atol=tol * 10)


@given(shape=shapes, seed=st.integers(0, 99), dtype=st.sampled_from([np.float32, np.float64]))
def test_svdvals_matches_pytorch(shape, seed, dtype):
    batch, m, n = shape
    a = np.random.default_rng(seed).standard_normal((*batch, m, n)).astype(dtype)
    for grad in (False, True):  # the S-only forward and the op's
        got = linalg.svdvals(nb.tensor(a, requires_grad=grad))
        want = TL.svdvals(torch.tensor(a))
        assert got.shape == tuple(want.shape) and got.dtype == dtype
        tol = 1e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (2, 0, 0), (0, 2, 3)])
@pytest.mark.parametrize("full", [True, False])
def test_svd_of_empty_matrices(shape, full):
    U, S, Vh = linalg.svd(np.zeros(shape), full_matrices=full)
    tU, tS, tVh = TL.svd(torch.zeros(shape, dtype=torch.float64), full_matrices=full)
    for ours, theirs in ((U, tU), (S, tS), (Vh, tVh)):
        assert ours.shape == tuple(theirs.shape)
    np.testing.assert_array_equal(linalg.svdvals(np.zeros(shape)).numpy(),
                                  TL.svdvals(torch.zeros(shape)).numpy())


def test_svd_returns_a_named_tuple():
    r = linalg.svd(np.diag([3.0, 2.0]))
    assert isinstance(r, nb.return_types.linalg_svd) and r._fields == ("U", "S", "Vh")
    U, S, Vh = r
    assert U is r.U and S is r.S and Vh is r.Vh
    np.testing.assert_array_equal(r.S.numpy(), [3.0, 2.0])
    assert repr(r).startswith("nbgrad.return_types.linalg_svd(\nU=tensor(")


def test_inputs_are_not_modified():
    a = separated(np.random.default_rng(0), (), 4, 3)
    c = a.copy()
    t = nb.tensor(a, requires_grad=True)
    U, S, Vh = linalg.svd(t)
    (U[:, :1].sum() * Vh[:1].sum() + S.sum() + linalg.matrix_norm(t, "nuc")).backward()
    np.testing.assert_array_equal(a, c)


# -- gradients ------------------------------------------------------------------------------


def losses(full, k, B, W):
    """Gauge-invariant losses of (U, S, Vh): ``lib`` is nbgrad or torch's namespace."""
    def fro(U, S, Vh):  # ||U diag(S) Vh - B||^2, through all three
        d = (U[..., :, :k] * S.unsqueeze(-2)) @ Vh[..., :k, :] - B
        return (d * d).sum()

    def proj(U, S, Vh):  # a projection U_j Vh_j (U, Vh only)
        j = max(k - 1, 1)
        return ((U[..., :, :j] @ Vh[..., :j, :]) * W).sum()

    def left(U, S, Vh):  # U_j U_j^T, the gradient of U alone (with the m > n term)
        j = max(k - 1, 1)
        P = U[..., :, :j] @ U[..., :, :j].transpose(-2, -1)
        return (P * P.sum(-1, keepdim=True)).sum() + S.sum()

    def right(U, S, Vh):  # Vh_j^T Vh_j, the gradient of Vh alone (with the m < n term)
        j = max(k - 1, 1)
        P = Vh[..., :j, :].transpose(-2, -1) @ Vh[..., :j, :]
        return (P * P.sum(-1, keepdim=True)).sum()

    def values(U, S, Vh):  # S alone (cubed: not the svdvals shortcut of a plain sum)
        return (S * S * S).sum()

    return [fro, proj, left, right, values]


@given(shape=shapes, full=st.booleans(), seed=st.integers(0, 99), which=st.integers(0, 4))
@settings(max_examples=60)
def test_svd_gradients_of_gauge_invariant_losses_match_pytorch(shape, full, seed, which):
    batch, m, n = shape
    k = min(m, n)
    rng = np.random.default_rng(seed)
    a = separated(rng, batch, m, n)
    B, W = rng.standard_normal((m, n)), rng.standard_normal((m, n))
    t, tt = both(a)
    ours = losses(full, k, nb.tensor(B), nb.tensor(W))[which](*linalg.svd(t, full))
    theirs = losses(full, k, torch.tensor(B), torch.tensor(W))[which](*TL.svd(tt, full))
    np.testing.assert_allclose(ours.item(), theirs.item(), rtol=1e-10, atol=1e-10)
    ours.backward()
    theirs.backward()
    np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("m, n", [(4, 3), (3, 4), (3, 3), (4, 2)])
def test_second_derivatives_match_pytorch(m, n):
    rng = np.random.default_rng(1)
    a = separated(rng, (2,), m, n)
    B, W, V = rng.standard_normal((m, n)), rng.standard_normal((m, n)), rng.standard_normal(a.shape)
    k = min(m, n)
    t, tt = both(a)
    grads = []
    for lib, x in ((nb, t), (torch, tt)):
        fns = losses(False, k, lib.tensor(B), lib.tensor(W))
        U, S, Vh = (linalg if lib is nb else TL).svd(x, full_matrices=False)
        loss = sum(f(U, S, Vh) for f in fns)
        (g,) = (nb.grad if lib is nb else torch.autograd.grad)(loss, [x], create_graph=True)
        (hv,) = (nb.grad if lib is nb else torch.autograd.grad)((g * lib.tensor(V)).sum(), [x])
        grads.append((g.detach().numpy(), hv.numpy()))
    for ours, theirs in zip(*grads, strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("m, n", [(5, 3), (3, 5), (4, 4)])
def test_full_matrices_ignores_the_extra_vectors_as_pytorch(m, n):
    a = separated(np.random.default_rng(2), (), m, n)
    t, tt = both(a)
    k = min(m, n)
    for x, fn in ((t, linalg.svd), (tt, TL.svd)):
        U, S, Vh = fn(x, full_matrices=True)
        extra = U[:, k:].sum() + Vh[k:].sum() if m != n else 0  # any basis: no gradient
        (extra + (U[:, :1] @ Vh[:1]).sum() + S.sum()).backward()
    np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), rtol=1e-9, atol=1e-11)


def test_svdvals_gradient_with_repeated_and_zero_singular_values():
    # U diag(gS) Vh needs no distinct values: for gS = 1 it is the polar factor U Vh
    q = np.linalg.qr(np.random.default_rng(3).standard_normal((4, 4)))[0]
    for a in (q, np.diag([2.0, 1.0, 0.0])):
        t, tt = both(a)
        linalg.svdvals(t).sum().backward()
        TL.svdvals(tt).sum().backward()
        assert np.isfinite(t.grad.numpy()).all()
        np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), atol=1e-12)
    t = nb.tensor(q, requires_grad=True)
    linalg.matrix_norm(t, "nuc").backward()
    np.testing.assert_allclose(t.grad.numpy(), q, atol=1e-12)


def test_registered_svd_gradchecks_and_gradgradchecks():
    for second in (False, True):
        report = check_registered("linalg_svd", second_order=second)
        assert report.samples >= 5 and not report.failures, report.failures


@pytest.mark.parametrize("fn", [
    lambda t: linalg.svdvals(t), lambda t: linalg.matrix_norm(t, 2, (0, 2)),
    lambda t: linalg.matrix_norm(t, -2, (2, 1)), lambda t: linalg.matrix_norm(t, "nuc"),
    lambda t: linalg.svd(t, full_matrices=False).U.abs()])
def test_svdvals_and_norms_gradcheck_and_gradgradcheck(fn):
    a = np.moveaxis(separated(np.random.default_rng(4), (2,), 4, 3), 0, 1)  # (4, 2, 3)
    assert gradcheck(fn, [a])
    assert gradgradcheck(fn, [a])


# -- matrix_norm and norm with ord 2, -2, 'nuc' ----------------------------------------------


@st.composite
def matrices_and_dims(draw):
    shape = draw(st.lists(st.integers(1, 4), min_size=2, max_size=4).map(tuple))
    dims = draw(st.permutations(range(len(shape))))[:2]
    neg = draw(st.booleans())
    return shape, tuple(d - len(shape) if neg else d for d in dims)


@given(case=matrices_and_dims(), seed=st.integers(0, 99), keepdim=st.booleans(),
       ord=st.sampled_from([2, -2, "nuc", 2.0]), dtype=st.sampled_from([np.float32, np.float64]))
def test_matrix_norm_spectral_and_nuclear_match_pytorch(case, seed, keepdim, ord, dtype):
    shape, dim = case
    rng = np.random.default_rng(seed)
    d0, d1 = (d % len(shape) for d in dim)
    rest = [s for i, s in enumerate(shape) if i not in (d0, d1)]
    a = np.moveaxis(separated(rng, rest, shape[d0], shape[d1]), (-2, -1), (d0, d1))
    a = a.astype(dtype)
    t, tt = both(a)
    y, ty = linalg.matrix_norm(t, ord, dim, keepdim), TL.matrix_norm(tt, ord, dim, keepdim)
    assert y.shape == tuple(ty.shape) and y.dtype == dtype
    tol = 1e-5 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=tol, atol=tol)
    g = rng.standard_normal(y.shape).astype(dtype)
    y.backward(nb.tensor(g))
    ty.backward(torch.tensor(g))
    np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), rtol=tol * 10, atol=tol * 10)


@pytest.mark.parametrize("shape, ord, dim", [
    ((3, 4), 2, None), ((4, 3), -2, None), ((3, 4), "nuc", None), ((2, 3, 4), 2, (2, 0)),
    ((2, 3, 4), "nuc", (1, 2)), ((2, 3, 4), -2, (-1, -2))])
@pytest.mark.parametrize("keepdim", [False, True])
def test_norm_dispatches_spectral_and_nuclear_as_pytorch(shape, ord, dim, keepdim):
    a = np.random.default_rng(5).standard_normal(shape)
    t, tt = both(a)
    y, ty = linalg.norm(t, ord, dim, keepdim), TL.norm(tt, ord, dim, keepdim)
    assert y.shape == tuple(ty.shape)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-10)
    y.sum().backward()
    ty.sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), rtol=1e-7, atol=1e-10)


def test_spectral_norm_ties_share_the_gradient_as_pytorch():
    a = np.diag([2.0, 2.0, 1.0])  # the largest singular value twice: amax splits
    for ord in (2, -2, "nuc"):
        t, tt = both(a)
        linalg.matrix_norm(t, ord).backward()
        TL.matrix_norm(tt, ord).backward()
        np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), atol=1e-12)


# -- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize("call, error, match", [
    (lambda: linalg.svd(np.ones(3)), ValueError,
     r"linalg.svd: A must have at least 2 dimensions .*got shape \(3,\)"),
    (lambda: linalg.svdvals(np.ones(())), ValueError,
     r"linalg.svdvals: A must have at least 2 dimensions .*got shape \(\)"),
    (lambda: linalg.svd(np.ones((2, 3), np.int64)), TypeError,
     r"linalg.svd: expected a float32 or float64 tensor as A, got int64 \(shape \(2, 3\)\)"),
    (lambda: linalg.svdvals(np.ones((2, 3), bool)), TypeError,
     r"linalg.svdvals: expected a float32 or float64 tensor as A, got bool"),
    (lambda: linalg.svd(np.ones((2, 3)), full_matrices="yes"), TypeError,
     "linalg.svd: full_matrices must be a bool, got 'yes'"),
    (lambda: linalg.svd(np.ones((2, 3)), driver="gesvd"), ValueError,
     "linalg.svd: driver='gesvd' is CUDA-only"),
    (lambda: linalg.svd(np.full((2, 3), math.nan)), np.linalg.LinAlgError,
     r"linalg.svd: the SVD of A \(shape \(2, 3\)\) did not converge"),
    (lambda: linalg.matrix_norm(np.ones((2, 3), np.int32), 2), TypeError,
     "linalg.matrix_norm: expected a float32 or float64 tensor as A, got"),
    (lambda: linalg.matrix_norm(np.ones(3), "nuc"), ValueError,
     r"linalg.matrix_norm: A must have at least 2 dimensions, got shape \(3,\)"),
])
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()
