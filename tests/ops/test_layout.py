"""Layout ops and small products (expand, repeat, tile, flip, roll, diag, diagonal,
diag_embed, tril, triu, outer, bmm, addmm, baddbmm, masked_select, nonzero, argwhere):
PyTorch as the oracle for values, dtypes and gradients over hypothesis shapes and
arguments, view semantics, gradcheck and gradgradcheck through the registered samples,
bad input."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nbgrad as nb
from nbgrad.testing import check_registered, gradcheck, gradgradcheck

torch = pytest.importorskip("torch")

REGISTERED = ["flip", "roll", "diagonal", "diag_embed", "tril", "triu"]


def shapes(min_dims=0, max_dims=4, min_side=0, max_side=4):
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side,
                            max_side=max_side)


def oracle(nb_fn, torch_fn, *arrays, seed=0):
    """Run both on copies of ``arrays``; compare values, dtypes and shapes, then the
    gradients of a weighted sum of the result through ``.backward()`` for float inputs.
    Returns the nbgrad result."""
    diff = [a.dtype.kind == "f" for a in arrays]
    ns = [nb.tensor(a, requires_grad=d) for a, d in zip(arrays, diff)]
    ts = [torch.tensor(a, requires_grad=d) for a, d in zip(arrays, diff)]
    out, want = nb_fn(*ns), torch_fn(*ts)
    assert out.shape == tuple(want.shape)
    assert out.numpy().dtype == want.detach().numpy().dtype
    # float32 gradients: torch and nbgrad sum the weighted copies in different orders
    tol = 1e-6 if any(a.dtype == np.float32 for a in arrays) else 1e-12
    np.testing.assert_allclose(out.numpy(), want.detach().numpy(), rtol=tol, atol=tol)
    if any(diff) and want.requires_grad:
        w = np.random.default_rng(seed).standard_normal(out.shape)
        (out * nb.tensor(w)).sum().backward()
        (want * torch.tensor(w)).sum().backward()
        for n, t, d in zip(ns, ts, diff):
            if d:
                got = np.zeros(n.shape) if n.grad is None else n.grad.numpy()
                want_g = np.zeros(n.shape) if t.grad is None else t.grad.numpy()
                np.testing.assert_allclose(got, want_g, rtol=tol, atol=tol)
    for a, n in zip(arrays, ns):  # inputs are never modified
        np.testing.assert_array_equal(n.numpy(), a)
    return out


def normal(shape, seed=0, dtype=np.float64):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# -- expand / repeat / tile ----------------------------------------------------------------
@given(shape=shapes(), data=st.data())
def test_expand_and_expand_as_match_torch(shape, data):
    lead = data.draw(st.lists(st.integers(0, 3), max_size=2))
    sizes = list(lead) + [data.draw(st.sampled_from([-1, 3] if s == 1 else [-1, s]))
                          for s in shape]
    x = normal(shape)
    if sizes:  # (torch's expand() needs a size)
        oracle(lambda t: t.expand(*sizes), lambda t: t.expand(*sizes), x)
    oracle(lambda t: nb.expand(t, sizes), lambda t: t.expand(sizes), x)
    target = np.zeros(tuple(lead) + tuple(3 if s == 1 else s for s in shape))
    oracle(lambda t: t.expand_as(nb.tensor(target)),
           lambda t: t.expand_as(torch.tensor(target)), x)


@given(shape=shapes(max_dims=3), data=st.data())
def test_repeat_and_tile_match_torch(shape, data):
    sizes = data.draw(st.lists(st.integers(0, 3), min_size=len(shape), max_size=len(shape) + 2))
    dims = data.draw(st.lists(st.integers(0, 3), max_size=len(shape) + 1))
    x = normal(shape, 1)
    if sizes:  # (torch's methods need an argument)
        oracle(lambda t: t.repeat(*sizes), lambda t: t.repeat(*sizes), x)
    oracle(lambda t: nb.repeat(t, sizes), lambda t: t.repeat(sizes), x)
    oracle(lambda t: nb.tile(t, dims), lambda t: torch.tile(t, tuple(dims)), x)
    if dims:
        oracle(lambda t: t.tile(*dims), lambda t: t.tile(*dims), x)


def test_repeat_tile_keep_integer_and_float32_dtypes_and_copy():
    oracle(lambda t: t.repeat(2, 1, 3), lambda t: t.repeat(2, 1, 3),
           np.arange(6).reshape(2, 3))
    oracle(lambda t: t.repeat(2, 2), lambda t: t.repeat(2, 2), normal((2, 3), 2, np.float32))
    x = nb.tensor(np.arange(6.0).reshape(2, 3))
    for y in (x.repeat(1, 1), x.tile(1)):  # a copy even when nothing repeats (PyTorch)
        assert not np.shares_memory(y.numpy(), x.numpy())


def test_expand_is_a_view_that_sees_writes_into_the_input():
    x, xt = nb.tensor([[1.0], [2.0]]), torch.tensor([[1.0], [2.0]])
    y, yt = x.expand(2, 3), xt.expand(2, 3)
    assert np.shares_memory(y.numpy(), x.numpy())
    x.add_(10.0)
    xt.add_(10.0)
    np.testing.assert_array_equal(y.numpy(), yt.numpy())
    assert y._version == x._version  # one storage, one version counter


# -- flip / roll ---------------------------------------------------------------------------
@given(shape=shapes(), data=st.data())
def test_flip_matches_torch(shape, data):
    nd = max(len(shape), 1)
    dims = data.draw(st.lists(st.integers(-nd, nd - 1), unique_by=lambda d: d % nd,
                              max_size=len(shape)))
    x = normal(shape, 3)
    oracle(lambda t: nb.flip(t, dims), lambda t: torch.flip(t, dims), x)
    if dims:  # (torch's method needs an argument)
        oracle(lambda t: t.flip(*dims), lambda t: t.flip(*dims), x)
    oracle(lambda t: nb.flip(t, dims=dims), lambda t: torch.flip(t, dims=dims), x)
    if len(shape) >= 1:
        oracle(nb.flipud, torch.flipud, x)
    if len(shape) >= 2:
        oracle(nb.fliplr, torch.fliplr, x)
        oracle(lambda t: t.fliplr(), lambda t: t.fliplr(), x)


@given(shape=shapes(), data=st.data())
def test_roll_matches_torch(shape, data):
    x = normal(shape, 4)
    shift = data.draw(st.integers(-7, 7))
    oracle(lambda t: nb.roll(t, shift), lambda t: torch.roll(t, shift), x)
    if shape:
        n = len(shape)
        dims = data.draw(st.lists(st.integers(-n, n - 1), min_size=1, max_size=3))
        shifts = data.draw(st.lists(st.integers(-7, 7), min_size=len(dims),
                                    max_size=len(dims)))
        oracle(lambda t: t.roll(shifts, dims), lambda t: t.roll(shifts, dims), x)
        oracle(lambda t: nb.roll(t, shifts[0], dims=dims[0]),
               lambda t: torch.roll(t, shifts[0], dims=dims[0]), x)


def test_flip_roll_keep_integer_dtypes_and_copy():
    a = np.arange(12).reshape(3, 4)
    oracle(lambda t: t.flip(0, 1), lambda t: t.flip(0, 1), a)
    oracle(lambda t: t.roll((1, -2), (0, 1)), lambda t: t.roll((1, -2), (0, 1)), a)
    x = nb.tensor(a)
    assert not np.shares_memory(x.flip(0).numpy(), a)
    assert not np.shares_memory(x.flip(0).numpy(), x.numpy())


# -- diag / diagonal / diag_embed ----------------------------------------------------------
@given(shape=shapes(min_dims=2, max_dims=4), data=st.data())
def test_diagonal_matches_torch(shape, data):
    n = len(shape)
    dim1 = data.draw(st.integers(-n, n - 1))
    dim2 = data.draw(st.integers(-n, n - 1).filter(lambda d: d % n != dim1 % n))
    offset = data.draw(st.integers(-5, 5))
    x = normal(shape, 5)
    oracle(lambda t: nb.diagonal(t, offset, dim1, dim2),
           lambda t: torch.diagonal(t, offset, dim1, dim2), x)
    oracle(lambda t: t.diagonal(offset=offset, dim1=dim1, dim2=dim2),
           lambda t: t.diagonal(offset=offset, dim1=dim1, dim2=dim2), x)


@given(shape=shapes(min_dims=1, max_dims=3), data=st.data())
def test_diag_embed_matches_torch(shape, data):
    n = len(shape) + 1
    dim1 = data.draw(st.integers(-n, n - 1))
    dim2 = data.draw(st.integers(-n, n - 1).filter(lambda d: d % n != dim1 % n))
    offset = data.draw(st.integers(-3, 3))
    x = normal(shape, 6)
    oracle(lambda t: nb.diag_embed(t, offset, dim1, dim2),
           lambda t: torch.diag_embed(t, offset, dim1, dim2), x)
    oracle(lambda t: t.diag_embed(), lambda t: t.diag_embed(), x)


@given(shape=shapes(min_dims=1, max_dims=2), k=st.integers(-5, 5))
def test_diag_matches_torch(shape, k):
    x = normal(shape, 7)
    oracle(lambda t: nb.diag(t, k), lambda t: torch.diag(t, k), x)
    oracle(lambda t: t.diag(diagonal=k), lambda t: t.diag(diagonal=k), x)
    oracle(lambda t: nb.diag(t, k), lambda t: torch.diag(t, k), np.arange(np.prod(shape))
           .reshape(shape))  # integers keep their dtype


def test_diagonal_is_a_view_and_diag_a_copy():
    a = np.arange(9.0).reshape(3, 3)
    x, xt = nb.tensor(a), torch.tensor(a)
    d, dt = x.diagonal(1), xt.diagonal(1)
    assert np.shares_memory(d.numpy(), x.numpy())
    c, ct = x.diag(), xt.diag()
    assert not np.shares_memory(c.numpy(), x.numpy())
    x[0, 1] = -5.0
    xt[0, 1] = -5.0
    np.testing.assert_array_equal(d.numpy(), dt.numpy())  # the view sees the write
    np.testing.assert_array_equal(c.numpy(), ct.numpy())  # the copy does not
    assert d._version == x._version


def test_diagonal_and_diag_embed_are_twice_differentiable_as_each_others_adjoints():
    x = normal((2, 4, 3), 8)
    assert gradgradcheck(lambda t: nb.diagonal(t, 1, 2, 0) ** 2, [x])
    assert gradgradcheck(lambda t: nb.diag_embed(t, -1) ** 2, [normal((2, 3), 9)])
    assert gradgradcheck(lambda t: nb.diag(t) ** 2, [normal(4, 10)])


# -- tril / triu ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["tril", "triu"])
@given(shape=shapes(min_dims=2, max_dims=4), k=st.integers(-5, 5))
def test_tril_triu_match_torch(name, shape, k):
    x = normal(shape, 11)
    oracle(lambda t: getattr(nb, name)(t, k), lambda t: getattr(torch, name)(t, k), x)
    oracle(lambda t: getattr(t, name)(diagonal=k), lambda t: getattr(t, name)(diagonal=k), x)
    oracle(lambda t: getattr(t, name)(k), lambda t: getattr(t, name)(k),
           np.arange(np.prod(shape)).reshape(shape))


# -- products ------------------------------------------------------------------------------
@given(n=st.integers(0, 5), m=st.integers(0, 5), seed=st.integers(0, 99))
def test_outer_matches_torch(n, m, seed):
    a, b = normal(n, seed), normal(m, seed + 1)
    oracle(nb.outer, torch.outer, a, b)
    oracle(lambda s, t: s.outer(t), lambda s, t: s.outer(t), a, b)
    oracle(nb.outer, torch.outer, normal(n, seed, np.float32), np.arange(m))  # promotion


@given(b=st.integers(1, 3), n=st.integers(1, 4), m=st.integers(1, 4), p=st.integers(1, 4),
       seed=st.integers(0, 99))
def test_bmm_baddbmm_match_torch(b, n, m, p, seed):
    x, y = normal((b, n, m), seed), normal((b, m, p), seed + 1)
    oracle(nb.bmm, torch.bmm, x, y)
    oracle(lambda s, t: s.bmm(t), lambda s, t: s.bmm(t), x, y)
    for shape in [(b, n, p), (p,), (n, 1), ()]:
        c = normal(shape, seed + 2)
        oracle(nb.baddbmm, torch.baddbmm, c, x, y)
        oracle(lambda c, s, t: c.baddbmm(s, t, beta=0.5, alpha=-2.0),
               lambda c, s, t: c.baddbmm(s, t, beta=0.5, alpha=-2.0), c, x, y)


@given(n=st.integers(1, 4), m=st.integers(1, 4), p=st.integers(1, 4), seed=st.integers(0, 99),
       beta=st.sampled_from([1, 0.5, -2.0]), alpha=st.sampled_from([1, 0.25, 3]))
def test_addmm_matches_torch(n, m, p, seed, beta, alpha):
    x, y = normal((n, m), seed), normal((m, p), seed + 1)
    for shape in [(n, p), (p,), (n, 1), (1, p), ()]:
        c = normal(shape, seed + 2)
        oracle(lambda c, s, t: nb.addmm(c, s, t, beta=beta, alpha=alpha),
               lambda c, s, t: torch.addmm(c, s, t, beta=beta, alpha=alpha), c, x, y)
        oracle(lambda c, s, t: c.addmm(s, t), lambda c, s, t: c.addmm(s, t), c, x, y)


def test_addmm_with_beta_zero_ignores_input_nans():
    c = np.full((2, 2), np.nan)
    x, y = normal((2, 3)), normal((3, 2), 1)
    out = oracle(lambda c, s, t: nb.addmm(c, s, t, beta=0),
                 lambda c, s, t: torch.addmm(c, s, t, beta=0), c, x, y)
    assert np.isfinite(out.numpy()).all()


# -- masked_select / nonzero / argwhere ----------------------------------------------------
@given(shapes_=hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3),
       seed=st.integers(0, 99))
def test_masked_select_matches_torch(shapes_, seed):
    xs, ms = shapes_.input_shapes
    mask = np.random.default_rng(seed).random(ms) < 0.5
    x = normal(xs, seed)
    oracle(lambda t: nb.masked_select(t, nb.tensor(mask)),
           lambda t: torch.masked_select(t, torch.tensor(mask)), x)
    oracle(lambda t: t.masked_select(mask), lambda t: t.masked_select(torch.tensor(mask)), x)


def test_masked_select_keeps_integers_and_its_gradient_is_second_order():
    mask = np.array([[True, False, True], [False, False, True]])
    oracle(lambda t: nb.masked_select(t, mask), lambda t: torch.masked_select(
        t, torch.tensor(mask)), np.arange(6).reshape(2, 3))
    assert gradgradcheck(lambda t: nb.masked_select(t, mask[1]) ** 2, [normal((2, 3))])


@given(shape=shapes(max_dims=3), seed=st.integers(0, 99))
def test_nonzero_and_argwhere_match_torch(shape, seed):
    x = np.round(normal(shape, seed))  # many zeros
    xt = torch.tensor(x)
    for got, want in [(nb.nonzero(nb.tensor(x)), torch.nonzero(xt)),
                      (nb.tensor(x).argwhere(), torch.argwhere(xt)),
                      (nb.tensor(x != 0).nonzero(), (xt != 0).nonzero())]:
        assert got.shape == tuple(want.shape) and got.numpy().dtype == np.int64
        assert not got.requires_grad
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    got, want = nb.nonzero(nb.tensor(x), as_tuple=True), torch.nonzero(xt, as_tuple=True)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w.numpy())
        assert g.numpy().dtype == np.int64


# -- gradcheck -----------------------------------------------------------------------------
@pytest.mark.parametrize("name", REGISTERED)
def test_registered_ops_gradcheck_and_gradgradcheck(name):
    for second in (False, True):
        report = check_registered(name, second_order=second)
        assert report.passed, report.failures


def test_compositions_gradcheck():
    x = normal((2, 1, 3), 12)
    assert gradgradcheck(lambda t: t.expand(4, 2, 3, 3) ** 2, [x])
    assert gradgradcheck(lambda t: t.repeat(2, 1, 3, 2) ** 2, [x])
    assert gradcheck(lambda t: nb.tile(t, (3,)) ** 2, [x])
    a, b = normal(3, 13), normal(4, 14)
    assert gradgradcheck(lambda s, t: nb.outer(s, t) ** 2, [a, b])
    c, m1, m2 = normal(4, 15), normal((3, 2), 16), normal((2, 4), 17)
    assert gradgradcheck(lambda c, s, t: nb.addmm(c, s, t, beta=0.5, alpha=2) ** 2, [c, m1, m2])
    assert gradcheck(lambda s, t: nb.bmm(s, t), [normal((2, 3, 2)), normal((2, 2, 4))])


# -- bad input -----------------------------------------------------------------------------
X = np.zeros((2, 3))
BAD = [
    (ValueError, "non-singleton", lambda: nb.expand(nb.tensor(X), 2, 4)),
    (ValueError, "greater or equal", lambda: nb.tensor(X).expand(3)),
    (ValueError, "leading", lambda: nb.tensor(X).expand(-1, 2, 3)),
    (ValueError, "invalid size", lambda: nb.tensor(X).expand(2, -2)),
    (TypeError, "must be ints", lambda: nb.tensor(X).expand(2.0, 3)),
    (ValueError, "can not be smaller", lambda: nb.tensor(X).repeat(2)),
    (ValueError, "non-negative", lambda: nb.tensor(X).repeat(-1, 2)),
    (ValueError, "non-negative", lambda: nb.tile(nb.tensor(X), (-1,))),
    (ValueError, "appears multiple times", lambda: nb.flip(nb.tensor(X), (0, -2))),
    (IndexError, "out of range", lambda: nb.flip(nb.tensor(X), (2,))),
    (TypeError, "dims both", lambda: nb.flip(nb.tensor(X), 0, dims=(0,))),
    (ValueError, "at least 2-D", lambda: nb.fliplr(nb.tensor(X[0]))),
    (ValueError, "at least 1-D", lambda: nb.flipud(nb.tensor(1.0))),
    (ValueError, "must align", lambda: nb.roll(nb.tensor(X), (1, 2))),
    (ValueError, "must align", lambda: nb.roll(nb.tensor(X), (1, 2), 0)),
    (ValueError, "must align", lambda: nb.roll(nb.tensor(X), 1, (0, 1))),
    (IndexError, "out of range", lambda: nb.roll(nb.tensor(X), 1, 2)),
    (ValueError, "cannot be identical", lambda: nb.diagonal(nb.tensor(X), 0, 0, -2)),
    (ValueError, "at least 2 dims", lambda: nb.diagonal(nb.tensor(X[0]))),
    (IndexError, "out of range", lambda: nb.diagonal(nb.tensor(X), 0, 0, 2)),
    (ValueError, "cannot be identical", lambda: nb.diag_embed(nb.tensor(X), 0, 0, 0)),
    (ValueError, "at least 1-D", lambda: nb.diag_embed(nb.tensor(1.0))),
    (ValueError, "1-D or 2-D", lambda: nb.diag(nb.tensor(np.zeros((2, 2, 2))))),
    (ValueError, "1-D or 2-D", lambda: nb.diag(nb.tensor(1.0))),
    (TypeError, "diagonal must be an int", lambda: nb.diag(nb.tensor(X), 1.5)),
    (ValueError, "at least 2 dims", lambda: nb.tril(nb.tensor(X[0]))),
    (ValueError, "at least 2 dims", lambda: nb.triu(nb.tensor(1.0))),
    (ValueError, "1-D arguments", lambda: nb.outer(nb.tensor(X), nb.tensor(X[0]))),
    (ValueError, "batch1 must be a 3-D", lambda: nb.bmm(nb.tensor(X), nb.tensor(X.T))),
    (ValueError, "batch2 must be a 3-D",
     lambda: nb.bmm(nb.tensor(np.zeros((2, 3, 4))), nb.tensor(X))),
    (ValueError, r"first two dims of batch2 to be \[2, 4\]",
     lambda: nb.bmm(nb.tensor(np.zeros((2, 3, 4))), nb.tensor(np.zeros((3, 4, 5))))),
    (ValueError, r"first two dims of batch2 to be \[2, 4\]",
     lambda: nb.bmm(nb.tensor(np.zeros((2, 3, 4))), nb.tensor(np.zeros((2, 3, 5))))),
    (ValueError, "mat1 must be a matrix",
     lambda: nb.addmm(nb.tensor(X), nb.tensor(X[0]), nb.tensor(X))),
    (ValueError, "cannot be multiplied",
     lambda: nb.addmm(nb.tensor(X), nb.tensor(X), nb.tensor(X))),
    (ValueError, "does not broadcast",
     lambda: nb.addmm(nb.tensor(np.zeros(3)), nb.tensor(X), nb.tensor(X.T))),
    (ValueError, "does not broadcast",
     lambda: nb.addmm(nb.tensor(np.zeros((1, 2, 2))), nb.tensor(X), nb.tensor(X.T))),
    (TypeError, "beta must be a real", lambda: nb.addmm(nb.tensor(X), nb.tensor(X),
                                                        nb.tensor(X.T[:, :3]), beta="1")),
    (ValueError, "first two dims", lambda: nb.baddbmm(nb.tensor(X), nb.tensor(
        np.zeros((1, 2, 3))), nb.tensor(np.zeros((1, 2, 3))))),
    (TypeError, "expected a bool mask", lambda: nb.masked_select(nb.tensor(X), np.ones(3))),
    (ValueError, "do not broadcast",
     lambda: nb.masked_select(nb.tensor(X), np.ones(4, dtype=bool))),
]


@pytest.mark.parametrize("error, match, call", BAD,
                         ids=[f"{i}-{m}" for i, (_, m, _) in enumerate(BAD)])
def test_bad_input_is_refused_with_a_clear_error(error, match, call):
    with pytest.raises(error, match=match):
        call()


def test_pytorch_refuses_the_same_input():
    """The bad shapes above are errors in PyTorch too (a sample of them)."""
    x = torch.zeros(2, 3)
    for call in [lambda: x.expand(2, 4), lambda: x.repeat(2), lambda: torch.flip(x, (0, -2)),
                 lambda: torch.roll(x, (1, 2)), lambda: torch.diagonal(x, 0, 0, -2),
                 lambda: torch.bmm(x, x.T), lambda: torch.masked_select(x, torch.ones(3)),
                 lambda: torch.addmm(torch.zeros(3), x, x.T)]:
        with pytest.raises(RuntimeError):
            call()
