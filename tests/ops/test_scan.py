"""cumsum, cumprod and diff: against PyTorch over shapes, dims and dtypes (values, dtypes,
gradients, cumprod's gradient with zeros), second derivatives, thread-count independence
of the scan kernels, bad input."""

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nbgrad as nb
from nbgrad.kernels import scan as scan_kernels
from nbgrad.runtime.jit import PARALLEL_MIN
from nbgrad.testing import gradcheck, gradgradcheck

torch = pytest.importorskip("torch")

DTYPES = [np.float32, np.float64, np.int64, np.bool_]


@st.composite
def scan_cases(draw, min_dims=0):
    shape = draw(hnp.array_shapes(min_dims=min_dims, max_dims=4, min_side=0, max_side=5))
    span = max(len(shape), 1)
    dim = draw(st.integers(-span, span - 1))
    return shape, dim


def sample(rng, shape, dtype, zeros=False):
    """Values of ``dtype``: small integers for the integer dtypes (no overflow), values
    near +-1 for floats (products stay moderate), with some zeros on request."""
    if dtype == np.bool_:
        return np.asarray(rng.random(shape) < 0.6)
    if dtype == np.int64:
        return np.asarray(rng.integers(-3, 4, shape), np.int64)
    x = np.asarray(rng.uniform(0.5, 1.5, shape) * rng.choice([-1.0, 1.0], shape), dtype)
    if zeros:
        x[rng.random(shape) < 0.25] = 0
    return x


@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
@pytest.mark.parametrize("dtype", DTYPES)
@given(case=scan_cases(), seed=st.integers(0, 99))
def test_scans_match_torch(name, dtype, case, seed):
    shape, dim = case
    x = sample(np.random.default_rng(seed), shape, dtype)
    before = x.copy()
    y = getattr(nb, name)(x, dim)
    want = getattr(torch, name)(torch.from_numpy(x), dim).numpy()
    assert y.shape == want.shape and y.dtype == want.dtype  # ints and bools give int64
    if dtype == np.float32:
        np.testing.assert_allclose(y.numpy(), want, rtol=1e-6, atol=1e-6)
    else:
        np.testing.assert_allclose(y.numpy(), want, rtol=1e-13, atol=0)
    np.testing.assert_array_equal(x, before)  # the input is not modified


@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
@given(case=scan_cases(), seed=st.integers(0, 99), zeros=st.booleans())
def test_scan_gradients_match_torch(name, case, seed, zeros):
    shape, dim = case
    rng = np.random.default_rng(seed)
    x = sample(rng, shape, np.float64, zeros)
    g = rng.standard_normal(shape)
    t = nb.tensor(x, requires_grad=True)
    (gx,) = nb.grad(getattr(nb, name)(t, dim), [t], grad_outputs=g)
    tt = torch.tensor(x, requires_grad=True)
    getattr(torch, name)(tt, dim).backward(torch.tensor(g))
    np.testing.assert_allclose(gx.numpy(), tt.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_nonfinite_values_propagate_as_in_torch():
    x = np.array([[1.0, np.inf, -np.inf, 2.0], [np.nan, 1.0, 0.0, 3.0],
                  [0.0, np.inf, 2.0, 1.0]])
    for name in ["cumsum", "cumprod"]:
        for dim in [0, 1]:
            want = getattr(torch, name)(torch.tensor(x), dim).numpy()
            np.testing.assert_array_equal(getattr(nb, name)(x, dim).numpy(), want)


def test_float32_accumulates_in_float64_as_torch():
    # a long float32 line: each y_i rounded once from a float64 sum (PyTorch's CPU rule)
    x = np.random.default_rng(0).standard_normal(5000).astype(np.float32)
    assert_same_bits(nb.cumsum(x, 0).numpy(), torch.cumsum(torch.from_numpy(x), 0).numpy())
    p = np.random.default_rng(1).uniform(0.99, 1.01, (7, 300)).astype(np.float32)
    assert_same_bits(nb.cumprod(p, 1).numpy(), torch.cumprod(torch.from_numpy(p), 1).numpy())


def test_dtype_argument_and_methods():
    x = np.arange(6).reshape(2, 3)
    y = nb.cumsum(x, 1, dtype=nb.float32)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y.numpy(), [[0, 1, 3], [3, 7, 12]])
    t = nb.tensor(x.astype(np.float32))
    assert nb.cumprod(t, 0, dtype=np.float64).dtype == np.float64
    np.testing.assert_array_equal(t.cumsum(0).numpy(), [[0, 1, 2], [3, 5, 7]])
    np.testing.assert_array_equal(t.cumprod(dim=1).numpy(), [[0, 0, 0], [3, 12, 60]])
    np.testing.assert_array_equal(t.diff().numpy(), [[1, 1], [1, 1]])
    assert nb.cumsum(nb.tensor(2.5), 0).shape == ()
    # a float32 tensor that requires grad, summed in float64: the gradient comes back float32
    w = nb.tensor(np.ones(3, np.float32), requires_grad=True)
    nb.cumsum(w, 0, dtype=nb.float64).sum().backward()
    assert w.grad.dtype == np.float32
    np.testing.assert_array_equal(w.grad.numpy(), [3, 2, 1])


@given(case=scan_cases(), keepdim=st.booleans(), whole=st.booleans(), zeros=st.booleans(),
       seed=st.integers(0, 99))
def test_prod_matches_torch_with_zeros_and_gradients(case, keepdim, whole, zeros, seed):
    shape, dim = case
    for dtype in DTYPES:
        x = sample(np.random.default_rng(seed), shape, dtype, zeros)
        args = {} if whole else dict(dim=dim, keepdim=keepdim)
        ours, theirs = nb.prod(nb.tensor(x), **args), torch.prod(torch.from_numpy(x), **args)
        assert ours.shape == tuple(theirs.shape)
        assert ours.dtype == np.dtype(str(theirs.dtype).removeprefix("torch."))
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5)
    x = sample(np.random.default_rng(seed), shape, np.float64, zeros)
    a, b = nb.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    nb.prod(a, **args).sum().backward()
    torch.prod(b, **args).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_prod_second_derivatives_with_zeros_and_the_method():
    for x in [np.array([1.3, 0.0, -0.8, 1.1]), np.array([[0.5, 0.0], [1.5, -2.0]])]:
        assert gradcheck(lambda t: nb.prod(t), [x])
        assert gradgradcheck(lambda t: nb.prod(t, 0), [x])
    assert nb.tensor([[2, 3], [4, 5]]).prod(1).tolist() == [6, 20]
    with pytest.raises(IndexError, match="prod"):
        nb.prod(nb.ones(2, 3), 2)


def test_cumprod_zero_gradients_second_order():
    # zeros (one, two, first, last) in the line: first and second derivatives
    for x in [np.array([1.3, 0.0, -0.8, 1.1]), np.array([0.0, 1.2, 0.0, 0.9]),
              np.array([0.7, 1.4, 0.0]), np.array([[0.5, 0.0], [1.5, -2.0], [0.0, 0.3]])]:
        assert gradcheck(lambda t: nb.cumprod(t, 0), [x])
        assert gradgradcheck(lambda t: nb.cumprod(t, 0), [x])
    x = np.random.default_rng(3).uniform(0.5, 1.5, (3, 4))
    assert gradgradcheck(lambda t: nb.cumsum(t, 1), [x])
    assert gradgradcheck(lambda t: nb.cumprod(t, -1), [x])


def test_cumprod_second_derivative_matches_torch_with_zeros():
    rng = np.random.default_rng(5)
    x = rng.uniform(0.5, 1.5, (3, 5))
    x[0, 1] = x[1, 0] = x[1, 3] = 0.0
    g, v = rng.standard_normal((3, 5)), rng.standard_normal((3, 5))
    t = nb.tensor(x, requires_grad=True)
    (gx,) = nb.grad(nb.cumprod(t, 1), [t], grad_outputs=g, create_graph=True)
    (hx,) = nb.grad((gx * v).sum(), [t])
    tt = torch.tensor(x, requires_grad=True)
    (tg,) = torch.autograd.grad(torch.cumprod(tt, 1), tt, torch.tensor(g), create_graph=True)
    (th,) = torch.autograd.grad((tg * torch.tensor(v)).sum(), tt)
    np.testing.assert_allclose(gx.numpy(), tg.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(hx.numpy(), th.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("shape,dim", [((PARALLEL_MIN // 64 + 3, 67), 1),  # rows
                                       ((5, 67, PARALLEL_MIN // 300 + 7), 1),  # blocks of B
                                       ((3, PARALLEL_MIN // 2 + 1), 0)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scans_are_the_same_bits_at_1_and_2_threads(shape, dim, dtype):
    rng = np.random.default_rng(0)
    x = rng.uniform(0.9, 1.1, shape).astype(dtype)
    x.reshape(-1)[::97] = 0  # cumprod's backward with zeros
    g = rng.standard_normal(shape).astype(dtype)
    assert x.size >= PARALLEL_MIN

    def run():
        outs = []
        for fn in (nb.cumsum, nb.cumprod):
            t = nb.tensor(x, requires_grad=True)
            y = fn(t, dim)
            (gx,) = nb.grad(y, [t], grad_outputs=g)
            outs += [y.numpy(), gx.numpy()]
        return outs

    for a, b in zip(at_threads(1, run), at_threads(2, run)):
        assert_same_bits(a, b)


def test_scan_kernel_forms_agree():
    x = np.random.default_rng(2).standard_normal((3, 40, 1100))  # B spans 3 blocks
    a, b = np.empty_like(x), np.empty_like(x)
    for product in (False, True):
        for reverse in (False, True):
            scan_kernels.scan(x, a, np.float64(0), product, reverse)
            scan_kernels.scan.serial(x, b, np.float64(0), product, reverse)
            assert_same_bits(a, b)
            ref = np.flip(x, 1) if reverse else x
            ref = np.cumprod(ref, 1) if product else np.cumsum(ref, 1)
            np.testing.assert_allclose(a, np.flip(ref, 1) if reverse else ref, rtol=1e-12)


# -- diff -----------------------------------------------------------------------------------
@st.composite
def diff_cases(draw):
    shape, dim = draw(scan_cases(min_dims=1))
    d = dim % len(shape)
    n = draw(st.integers(0, 4))
    extras = []
    for _ in range(2):
        k = draw(st.sampled_from([None, 0, 1, 2]))
        extras.append(None if k is None else shape[:d] + (k,) + shape[d + 1:])
    return shape, dim, n, extras


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.bool_])
@given(case=diff_cases(), seed=st.integers(0, 99))
@settings(deadline=None)
def test_diff_matches_torch(dtype, case, seed):
    shape, dim, n, (pre, app) = case
    rng = np.random.default_rng(seed)
    x = sample(rng, shape, dtype)
    pre = None if pre is None else sample(rng, pre, dtype)
    app = None if app is None else sample(rng, app, dtype)
    y = nb.diff(x, n, dim, pre, app)
    want = torch.diff(torch.from_numpy(x), n, dim,
                      None if pre is None else torch.from_numpy(pre),
                      None if app is None else torch.from_numpy(app)).numpy()
    assert y.shape == want.shape and y.dtype == want.dtype
    np.testing.assert_array_equal(y.numpy(), want)


def test_diff_gradients():
    rng = np.random.default_rng(4)
    x, pre = rng.standard_normal((3, 5)), rng.standard_normal((3, 2))
    assert gradcheck(lambda a, b: nb.diff(a, 2, 1, prepend=b), [x, pre])
    assert gradgradcheck(lambda a: nb.diff(a, 3, 0, append=a), [x])
    t = nb.tensor(x, requires_grad=True)
    assert nb.diff(t, 0, append=x) is t


# -- bad input ------------------------------------------------------------------------------
def test_bad_input():
    x = np.ones((2, 3))
    for fn in (nb.cumsum, nb.cumprod):
        with pytest.raises(IndexError, match=rf"{fn.__name__}: dim=2 is out of range"):
            fn(x, 2)
        with pytest.raises(TypeError, match="dim must be an int"):
            fn(x, 1.0)
        with pytest.raises(TypeError, match="dtype"):
            fn(x, 0, dtype="nope")
    with pytest.raises(IndexError, match="diff: dim=-3 is out of range"):
        nb.diff(x, dim=-3)
    with pytest.raises(ValueError, match="diff: order n must be non-negative"):
        nb.diff(x, -1)
    with pytest.raises(TypeError, match="diff: n must be an int"):
        nb.diff(x, 1.5)
    with pytest.raises(ValueError, match="at least one-dimensional"):
        nb.diff(nb.tensor(1.0))
    with pytest.raises(ValueError, match=r"diff: prepend of shape \(3, 1\) must have the shape"):
        nb.diff(x, prepend=np.ones((3, 1)))
    with pytest.raises(ValueError, match=r"diff: append of shape \(\) must have the shape"):
        nb.diff(x, append=1.0)
