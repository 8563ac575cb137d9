"""sin cos erf square, var std norm argmax argmin, add/sub alpha and div rounding_mode:
NumPy references, hypothesis properties, PyTorch oracles (skipped without torch), bad
input, non-finite values and thread-count determinism."""

import warnings

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nbgrad as nb
from nbgrad.testing import gradcheck, gradgradcheck
from nbgrad.testing import strategies as nbst

UNARY = {"sin": np.sin, "cos": np.cos, "square": np.square}
DERIVATIVE = {"sin": np.cos, "cos": lambda x: -np.sin(x), "square": lambda x: 2 * x,
              "erf": lambda x: 2 / np.sqrt(np.pi) * np.exp(-x * x)}


def _scipy_erf(x):
    special = pytest.importorskip("scipy.special")
    return special.erf(x)


def _reference(name, x):
    return _scipy_erf(x) if name == "erf" else UNARY[name](x)


def _ulp_error(got, want, dtype):
    """|got - want| in units of the ulp of ``want`` rounded to ``dtype``."""
    want = np.asarray(want, np.float64)
    spacing = np.spacing(np.abs(want).astype(dtype)).astype(np.float64)
    return np.abs(np.asarray(got, np.float64) - want) / spacing


# -- sin, cos, erf, square -------------------------------------------------------------------
@pytest.mark.parametrize("name", ["sin", "cos", "erf", "square"])
@given(x=nbst.arrays(np.float64, min_value=-20, max_value=20), seed=st.integers(0, 99))
def test_unary_values_and_gradients_match_numpy(name, x, seed):
    t = nb.tensor(x, requires_grad=True)
    before = x.copy()
    y = getattr(nb, name)(t)
    assert y.shape == x.shape and y.dtype == np.float64
    rtol = 1e-15 if name == "erf" else 0  # float64 is libm's: sin/cos exactly NumPy's
    np.testing.assert_allclose(y.numpy(), _reference(name, x), rtol=rtol, atol=1e-300)
    g = np.random.default_rng(seed).standard_normal(x.shape)
    (gx,) = nb.grad(y, [t], grad_outputs=g)
    np.testing.assert_allclose(gx.numpy(), g * DERIVATIVE[name](x), rtol=1e-14, atol=1e-300)
    np.testing.assert_array_equal(x, before)
    assert getattr(t, name)().shape == x.shape  # the Tensor method


def test_erf_float64_accuracy_against_scipy():
    """float64 erf is libm's (fastmath's float64 path): within 3 ulp of SciPy's, 4.4e-16
    relative at worst on this sweep (SciPy's own error is the larger one there)."""
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-6, 6, 100_000), np.logspace(-300, 1, 5000),
                        -np.logspace(-300, 1, 5000)])
    got = nb.erf(nb.tensor(x)).numpy()
    want = _scipy_erf(x)
    assert np.max(np.abs(got - want) / np.abs(want)) < 1e-15


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_float32_sin_cos_are_correctly_rounded(name):
    """float32: a float64 polynomial after Cody-Waite reduction, < 0.501 ulp against the
    float64 libm result, including near multiples of pi/2, beyond 2^19 (libm) and for
    subnormals."""
    bits = np.arange(np.float32(1e-30).view(np.int32), np.float32(3e6).view(np.int32), 211,
                     dtype=np.int32)
    x = bits.view(np.float32)
    x = np.concatenate([x, -x, np.float32([1e10, -3e38, 1.5707964, 3.1415927, 1e-45])])
    got = getattr(nb, name)(nb.tensor(x)).numpy()
    assert got.dtype == np.float32
    assert _ulp_error(got, UNARY[name](x.astype(np.float64)), np.float32).max() < 0.501


@pytest.mark.parametrize("name", ["sin", "cos", "erf", "square"])
def test_float32_backward_matches_float64(name):
    x = np.random.default_rng(1).uniform(-8, 8, 1000).astype(np.float32)
    t = nb.tensor(x, requires_grad=True)
    getattr(nb, name)(t).sum().backward()
    want = DERIVATIVE[name](x.astype(np.float64))
    np.testing.assert_allclose(t.grad.numpy(), want, rtol=3e-6, atol=1e-6)


def test_unary_integer_inputs_follow_pytorch():
    i = nb.tensor(np.array([0, 1, -2, 3]))
    for name in ("sin", "cos", "erf"):
        y = getattr(nb, name)(i)
        assert y.dtype == np.float32 and not y.requires_grad
        want = _reference(name, np.array([0, 1, -2, 3], np.float64)).astype(np.float32)
        np.testing.assert_array_equal(y.numpy(), want)
    assert nb.sin(nb.tensor(np.array([True, False]))).dtype == np.float32
    sq = nb.square(nb.tensor(np.array([3, -4]), dtype=np.int32))
    assert sq.dtype == np.int32 and sq.numpy().tolist() == [9, 16]
    sqb = nb.square(nb.tensor(np.array([True, False])))
    assert sqb.dtype == np.int64 and sqb.numpy().tolist() == [1, 0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unary_nonfinite_and_signed_zero_match_torch(dtype):
    torch = pytest.importorskip("torch")
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30, 1e-40, 3.0], dtype)
    for name in ("sin", "cos", "erf", "square"):
        t = nb.tensor(x, requires_grad=True)
        y = getattr(nb, name)(t)
        y.backward(nb.tensor(np.ones_like(x)))
        xt = torch.tensor(x, requires_grad=True)
        yt = getattr(torch, name)(xt)
        yt.backward(torch.ones_like(xt))
        want = yt.detach().numpy()
        np.testing.assert_allclose(y.numpy(), want, rtol=2e-7 if dtype == np.float32 else 1e-15)
        finite = ~np.isnan(want)  # signed zeros keep their sign (NaN's sign is not compared)
        assert np.array_equal(np.signbit(y.numpy()[finite]), np.signbit(want[finite]))
        np.testing.assert_allclose(t.grad.numpy(), xt.grad.numpy(), rtol=1e-6, atol=1e-30)


@pytest.mark.parametrize("name", ["sin", "cos", "erf", "square"])
def test_unary_second_derivative_matches_torch(name):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(2).standard_normal((3, 4))
    t = nb.tensor(x, requires_grad=True)
    (g,) = nb.grad(getattr(nb, name)(t).sum(), [t], create_graph=True)
    (gg,) = nb.grad((g * g).sum(), [t])
    xt = torch.tensor(x, requires_grad=True)
    (gt,) = torch.autograd.grad(getattr(torch, name)(xt).sum(), [xt], create_graph=True)
    (ggt,) = torch.autograd.grad((gt * gt).sum(), [xt])
    np.testing.assert_allclose(gg.numpy(), ggt.numpy(), rtol=1e-12, atol=1e-14)


def test_unary_bad_input_names_the_op():
    with pytest.raises(TypeError, match="sin"):
        nb.sin(nb.tensor([1.0]), 2.0)
    with pytest.raises(TypeError, match="erf"):
        nb.erf(nb.tensor([1.0]), 2.0)


# -- var, std --------------------------------------------------------------------------------
@st.composite
def moment_cases(draw):
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=1, max_side=4))
    axis = draw(nbst.reduction_axes(len(shape)))
    return shape, axis, draw(st.booleans()), draw(st.sampled_from([0, 1, 2, 0.5]))


@pytest.mark.parametrize("name", ["var", "std"])
@given(case=moment_cases(), seed=st.integers(0, 99))
def test_var_std_match_numpy(name, case, seed):
    shape, axis, keepdims, correction = case
    rng = np.random.default_rng(seed)
    x = np.asarray(rng.standard_normal(shape))
    t = nb.tensor(x, requires_grad=True)
    y = getattr(nb, name)(t, axis, correction=correction, keepdim=keepdims)
    axes = tuple(range(x.ndim)) if axis is None else axis
    n = x.size if axis is None else int(np.prod([x.shape[a] for a in np.atleast_1d(axis)]))
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        want = getattr(np, name)(x, axis=axes, ddof=correction, keepdims=keepdims)
    if n - correction <= 0:  # NumPy's divisor goes negative; PyTorch's stops at 0
        assert np.all(np.isnan(y.numpy()) | np.isinf(y.numpy()))
        return
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-12, atol=1e-14)
    g = np.asarray(rng.standard_normal(y.shape))
    (gx,) = nb.grad(y, [t], grad_outputs=g)
    gk = g if keepdims or not axes else np.expand_dims(g, axes)
    dvar = 2 * (x - x.mean(axis=axes, keepdims=True)) / (n - correction)
    if name == "std":
        s = np.sqrt(np.var(x, axis=axes, ddof=correction, keepdims=True))
        dvar = np.where(s == 0, 0.0, dvar / (2 * np.where(s == 0, 1.0, s)))
    np.testing.assert_allclose(gx.numpy(), gk * dvar, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["var", "std"])
@pytest.mark.parametrize("kwargs", [{}, {"dim": 1}, {"dim": (0, 2), "keepdim": True},
                                    {"dim": 0, "unbiased": False}, {"correction": 0},
                                    {"dim": -1, "correction": 2.5}])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_var_std_torch_oracle(name, kwargs, dtype):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(3).standard_normal((3, 4, 5)).astype(dtype)
    t = nb.tensor(x, requires_grad=True)
    y = getattr(nb, name)(t, **kwargs)
    g = np.random.default_rng(4).standard_normal(y.shape).astype(dtype)
    y.backward(nb.tensor(g))
    xt = torch.tensor(x, requires_grad=True)
    yt = getattr(torch, name)(xt, **kwargs)
    yt.backward(torch.tensor(g))
    tol = 1e-5 if dtype == np.float32 else 1e-12
    assert y.shape == tuple(yt.shape) and y.dtype == dtype
    np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(t.grad.numpy(), xt.grad.numpy(), rtol=tol, atol=tol)


def _torch_quiet(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "degrees of freedom is <= 0"
        return fn()


@pytest.mark.parametrize("name", ["var", "std"])
@pytest.mark.parametrize("x, correction, dim", [
    ([1.0], 1, None), ([3.0, 3.0], 2, None), ([1.0, 2.0], 2, None), ([1.0, 2.0, 6.0], 5, None),
    ([[1.0, 2.0]], 2, 1), ([[1.0, 2.0, 4.0]], 3, 1), ([[5.0, 5.0]], 2, 1), ([], 1, None)])
def test_var_std_without_degrees_of_freedom_match_torch(name, x, correction, dim):
    """N - correction <= 0: the value is inf (NaN for a constant or empty slice) and the
    gradient non-finite, as PyTorch. PyTorch's gradient there has two conventions (dim=None:
    g * inf, or NaN where x == mean; with a dim: 2 (x - mean) / (N - c), finite and of the
    wrong sign when N < c); nbgrad uses 2 (x - mean) / max(N - c, 0) throughout, so the
    gradient's signs and finite values are compared only where the two agree."""
    torch = pytest.importorskip("torch")
    x = np.array(x)
    t = nb.tensor(x, requires_grad=True)
    y = getattr(nb, name)(t, dim, correction=correction)
    xt = torch.tensor(x, requires_grad=True)
    yt = _torch_quiet(lambda: getattr(torch, name)(xt, dim, correction=correction))
    np.testing.assert_array_equal(y.numpy(), yt.detach().numpy())
    if x.size == 0:
        return
    y.sum().backward()
    yt.sum().backward()
    got, want = t.grad.numpy(), xt.grad.numpy()
    assert not np.isfinite(got).any()
    if dim is not None and x.shape[-1] == correction or name == "std":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


def test_std_gradient_of_a_constant_slice_is_zero_as_torch():
    torch = pytest.importorskip("torch")
    x = np.array([[2.0, 2.0, 2.0], [1.0, 2.0, 4.0]])
    t = nb.tensor(x, requires_grad=True)
    nb.std(t, 1).sum().backward()
    xt = torch.tensor(x, requires_grad=True)
    torch.std(xt, 1).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), xt.grad.numpy(), rtol=1e-14)
    assert (t.grad.numpy()[0] == 0).all()


@pytest.mark.parametrize("name", ["var", "std"])
def test_var_std_nonfinite_match_torch(name):
    torch = pytest.importorskip("torch")
    x = np.array([[np.nan, 1.0, 2.0], [np.inf, 1.0, 2.0], [1e300, -1e300, 0.0], [1, 2, 3]])
    t = nb.tensor(x, requires_grad=True)
    y = getattr(nb, name)(t, 1)
    y.sum().backward()
    xt = torch.tensor(x, requires_grad=True)
    yt = getattr(torch, name)(xt, 1)
    yt.sum().backward()
    np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), rtol=1e-14)
    np.testing.assert_allclose(t.grad.numpy(), xt.grad.numpy(), rtol=1e-14)


def test_var_std_arguments():
    x = np.random.default_rng(5).standard_normal((4, 3))
    t = nb.tensor(x)
    np.testing.assert_allclose(nb.var(t, False).numpy(), np.var(x))  # var(x, unbiased)
    np.testing.assert_allclose(nb.var(t, 0, False).numpy(), np.var(x, 0))
    np.testing.assert_allclose(nb.std(t, axis=1, keepdims=True).numpy(),
                               np.std(x, 1, ddof=1, keepdims=True))
    np.testing.assert_allclose(t.var(1, correction=0).numpy(), np.var(x, 1))
    with pytest.raises(TypeError, match="var: got both unbiased"):
        nb.var(t, unbiased=True, correction=1)
    with pytest.raises(TypeError, match="std: got both dim"):
        nb.std(t, dim=0, axis=0)
    with pytest.raises(TypeError, match="var: x must be float32 or float64, got nbgrad.int64"):
        nb.var(nb.tensor(np.array([1, 2, 3])))
    with pytest.raises(ValueError, match=r"std: axis=2 is out of range for x of shape \(4, 3\)"):
        nb.std(t, 2)
    with pytest.raises(TypeError, match="correction must be a real number"):
        nb.var(t, correction="1")


# -- norm ------------------------------------------------------------------------------------
ORDERS = [2, 1, np.inf, -np.inf, 0, 3, 0.5, 1.5, -1]


def _numpy_norm(x, p, axes, keepdims):
    a = np.abs(x)
    if p == np.inf:
        return np.max(a, axis=axes, keepdims=keepdims)
    if p == -np.inf:
        return np.min(a, axis=axes, keepdims=keepdims)
    if p == 0:
        return np.sum(x != 0, axis=axes, keepdims=keepdims).astype(x.dtype)
    with np.errstate(divide="ignore"):
        return np.sum(a ** p, axis=axes, keepdims=keepdims) ** (1 / p)


@pytest.mark.parametrize("p", ORDERS)
@given(case=moment_cases(), seed=st.integers(0, 99))
def test_norm_matches_numpy(p, case, seed):
    shape, axis, keepdims, _ = case
    rng = np.random.default_rng(seed)
    x = np.asarray(rng.standard_normal(shape))
    t = nb.tensor(x, requires_grad=True)
    y = nb.norm(t, p, axis, keepdims)
    axes = tuple(range(x.ndim)) if axis is None else axis
    np.testing.assert_allclose(y.numpy(), _numpy_norm(x, p, axes, keepdims), rtol=1e-12)
    if p in (2, 1, 3):
        g = np.asarray(rng.standard_normal(y.shape))
        (gx,) = nb.grad(y, [t], grad_outputs=g)
        gk = g if keepdims or not axes else np.expand_dims(g, axes)
        n = _numpy_norm(x, p, axes, True)
        want = gk * np.sign(x) * np.abs(x) ** (p - 1) / n ** (p - 1)
        np.testing.assert_allclose(gx.numpy(), want, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("p", ORDERS + ["fro"])
@pytest.mark.parametrize("dim", [None, 1, (0, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_norm_torch_oracle_with_zeros_ties_and_zero_vectors(p, dim, dtype):
    torch = pytest.importorskip("torch")
    x = np.array([[0.0, 2.0, -2.0, 1.0], [0.0, 0.0, 0.0, 0.0], [-3.0, 0.5, 3.0, 0.0]], dtype)
    t = nb.tensor(x, requires_grad=True)
    y = nb.norm(t, p, dim)
    y.sum().backward()
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.norm(xt, p, dim) if p == "fro" else torch.linalg.vector_norm(xt, p, dim)
    yt.sum().backward()
    tol = 1e-6 if dtype == np.float32 else 1e-14
    assert y.dtype == dtype and y.shape == tuple(yt.shape)
    np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), rtol=tol)
    want = np.zeros_like(x) if xt.grad is None else xt.grad.numpy()  # p = 0: no grad
    np.testing.assert_allclose(t.grad.numpy(), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("p", [2, 1, np.inf, -np.inf, 3])
def test_norm_nonfinite_match_torch(p):
    torch = pytest.importorskip("torch")
    x = np.array([[np.nan, 1.0, 3.0], [np.inf, 1.0, 3.0], [-np.inf, np.inf, 0.0]])
    t = nb.tensor(x, requires_grad=True)
    nb.norm(t, p, 1).sum().backward()
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.linalg.vector_norm(xt, p, 1)
    yt.sum().backward()
    np.testing.assert_allclose(nb.norm(nb.tensor(x), p, 1).numpy(), yt.detach().numpy())
    np.testing.assert_allclose(t.grad.numpy(), xt.grad.numpy())


@pytest.mark.parametrize("p", [2, 3, 0.5, 1.5])
def test_norm_second_derivative_matches_torch(p):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(6).standard_normal((3, 4)) + 0.1
    t = nb.tensor(x, requires_grad=True)
    (g,) = nb.grad(nb.norm(t, p, 1).sum(), [t], create_graph=True)
    (gg,) = nb.grad((g * g).sum(), [t])
    xt = torch.tensor(x, requires_grad=True)
    (gt,) = torch.autograd.grad(torch.linalg.vector_norm(xt, p, 1).sum(), [xt],
                                create_graph=True)
    (ggt,) = torch.autograd.grad((gt * gt).sum(), [xt])
    np.testing.assert_allclose(gg.numpy(), ggt.numpy(), rtol=1e-10, atol=1e-12)


def test_norm_arguments():
    t = nb.tensor(np.array([[3.0, 4.0]]))
    assert nb.norm(t).item() == 5.0 and t.norm(1).item() == 7.0
    assert nb.norm(t, "fro", 1, True).shape == (1, 1)
    assert nb.norm(t, axis=1, keepdims=True).shape == (1, 1)
    assert nb.norm(nb.tensor(np.zeros(0))).item() == 0.0
    with pytest.raises(ValueError, match="norm: p must be a real number or 'fro'"):
        nb.norm(t, "nuc")
    with pytest.raises(TypeError, match="norm: x must be float32 or float64, got nbgrad.int64"):
        nb.norm(nb.tensor(np.array([1, 2])))
    with pytest.raises(ValueError, match="inf norm of an empty slice"):
        nb.norm(nb.tensor(np.zeros((0, 2))), np.inf, 0)
    with pytest.raises(TypeError, match="norm: p must be a real number"):
        nb.norm(t, None)


# -- argmax, argmin --------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["argmax", "argmin"])
@given(x=nbst.arrays(np.float64, specials=True, max_side=4), seed=st.integers(0, 99),
       keepdim=st.booleans(), data=st.data())
def test_argmax_argmin_match_numpy(name, x, seed, keepdim, data):
    dim = data.draw(st.none() | st.integers(-max(x.ndim, 1), max(x.ndim, 1) - 1))
    x = np.round(x)  # ties
    y = getattr(nb, name)(nb.tensor(x, requires_grad=True), dim, keepdim)
    assert y.dtype == np.int64 and not y.requires_grad
    if dim is None:
        want = getattr(np, name)(x.reshape(-1))
        assert y.shape == ((1,) * x.ndim if keepdim else ())
    else:
        want = getattr(np, name)(x.reshape(x.shape or (1,)), axis=dim, keepdims=keepdim)
        want = want.reshape(()) if x.ndim == 0 else want
    np.testing.assert_array_equal(y.numpy().reshape(np.shape(want)), want)


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@pytest.mark.parametrize("kwargs", [{}, {"dim": 1}, {"dim": 0, "keepdim": True},
                                    {"keepdim": True}, {"dim": -1}])
def test_argmax_argmin_torch_oracle(name, kwargs):
    torch = pytest.importorskip("torch")
    for x in (np.array([[1.0, np.nan, 3.0, np.nan], [2.0, 0.0, 0.0, 2.0], [5, 5, -5, -5]]),
              np.array([[1, 7, 7], [3, 3, 0]])):
        y = getattr(nb, name)(nb.tensor(x), **kwargs)
        yt = getattr(torch, name)(torch.tensor(x), **kwargs)
        assert y.shape == tuple(yt.shape)
        np.testing.assert_array_equal(y.numpy(), yt.numpy())
    for x in (np.array(2.5), np.array([[4.0, 1.0]])):
        for kw in ({"dim": 0}, {"dim": 0, "keepdim": True}, {}):
            y = getattr(nb, name)(nb.tensor(x), **kw)
            yt = getattr(torch, name)(torch.tensor(x), **kw)
            assert y.shape == tuple(yt.shape)
            np.testing.assert_array_equal(y.numpy(), yt.numpy())


def test_argmax_argmin_errors():
    with pytest.raises(TypeError, match="argmax: not supported for a bool tensor"):
        nb.argmax(nb.tensor(np.array([True, False])))
    with pytest.raises(ValueError, match="argmin: cannot take the argmin of an empty"):
        nb.argmin(nb.tensor(np.zeros((0, 3))))
    with pytest.raises(ValueError, match="argmax: cannot reduce over the empty dim 0"):
        nb.argmax(nb.tensor(np.zeros((0, 3))), 0)
    assert nb.argmax(nb.tensor(np.zeros((0, 3))), 1).shape == (0,)
    with pytest.raises(ValueError, match=r"argmax: dim=2 is out of range for x of shape \(2, 3\)"):
        nb.argmax(nb.tensor(np.zeros((2, 3))), 2)
    assert nb.tensor(np.array([1.0, 3.0])).argmax().item() == 1


# -- add/sub alpha ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["add", "sub"])
@given(shapes=nbst.broadcastable_shapes(2, max_dims=3, max_side=3), seed=st.integers(0, 99),
       alpha=st.sampled_from([1, 2, -0.5, 3.25, 0]))
def test_add_sub_alpha_match_numpy(name, shapes, seed, alpha):
    rng = np.random.default_rng(seed)
    a, b = (np.asarray(rng.standard_normal(s)) for s in shapes)
    ta, tb = nb.tensor(a, requires_grad=True), nb.tensor(b, requires_grad=True)
    y = getattr(nb, name)(ta, tb, alpha=alpha)
    sign = 1 if name == "add" else -1
    np.testing.assert_allclose(y.numpy(), a + sign * alpha * b, rtol=1e-15)
    g = np.asarray(rng.standard_normal(y.shape))
    ga, gb = nb.grad(y, [ta, tb], grad_outputs=g)
    np.testing.assert_allclose(ga.numpy(), nb.sum_to_size(nb.tensor(g), *a.shape).numpy())
    np.testing.assert_allclose(gb.numpy(),
                               sign * alpha * nb.sum_to_size(nb.tensor(g), *b.shape).numpy())


@pytest.mark.parametrize("name", ["add", "sub"])
def test_add_sub_alpha_gradcheck(name):
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((3, 1)), rng.standard_normal((1, 4))
    fn = getattr(nb, name)
    assert gradcheck(lambda x, y: fn(x, y, alpha=-2.5), [a, b])
    assert gradgradcheck(lambda x, y: fn(x, y, alpha=0.5) * x, [a, b])


@pytest.mark.parametrize("name", ["add", "sub"])
def test_add_sub_alpha_dtypes_and_errors_match_torch(name):
    torch = pytest.importorskip("torch")
    fn, tfn = getattr(nb, name), getattr(torch, name)
    cases = [(np.array([1, 2]), np.array([3, 4]), 2),
             (np.array([1.0, 2.0], np.float32), np.array([3, 4]), 0.5),
             (np.array([1, 2]), np.array([3.0, 4.0], np.float32), 0.5),
             (np.array([1.0, 2.0]), np.array([3, 4]), 0.1),
             (np.array([1.0, 2.0], np.float32), np.array([3.0, 4.0], np.float32), 3),
             (np.array([True, False]), np.array([True, True]), 2)]
    for a, b, alpha in cases:
        if name == "sub" and a.dtype == bool:
            with pytest.raises(TypeError, match="sub: subtraction with a bool operand"):
                fn(nb.tensor(a), nb.tensor(b), alpha=alpha)
            continue
        y = fn(nb.tensor(a), nb.tensor(b), alpha=alpha)
        yt = tfn(torch.tensor(a), torch.tensor(b), alpha=alpha)
        assert str(y.dtype) == str(yt.dtype).replace("torch.", "nbgrad.")
        np.testing.assert_allclose(y.numpy(), yt.numpy(), rtol=1e-7)
    with pytest.raises(TypeError, match=f"{name}: alpha must not be a float"):
        fn(nb.tensor(np.array([1, 2])), nb.tensor(np.array([1, 2])), alpha=0.5)
    with pytest.raises(TypeError, match=f"{name}: a bool alpha"):
        fn(nb.tensor([1.0]), nb.tensor([1.0]), alpha=True)
    with pytest.raises(TypeError, match=f"{name}: alpha must be a real number"):
        fn(nb.tensor([1.0]), nb.tensor([1.0]), alpha="2")
    assert fn(nb.tensor([1.0]), 2, alpha=3).item() == (7.0 if name == "add" else -5.0)


# -- div rounding_mode -----------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["trunc", "floor"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_rounded_div_torch_oracle(mode, dtype):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(8)
    a = (rng.standard_normal((50, 40)) * 20).astype(dtype)
    b = (rng.standard_normal((1, 40)) * 5).astype(dtype)
    b[b == 0] = 3
    if dtype in (np.float32, np.float64):
        a[0, :6] = [5.1, -5.1, np.inf, 0.0, -0.0, np.nan]
        b[0, :6] = [0.1, 0.1, 2.0, -3.0, 3.0, 1.0]
        b[0, 6:10] = [0.0, -0.0, 0.0, np.inf]
    y = nb.div(nb.tensor(a, dtype=dtype), nb.tensor(b, dtype=dtype), rounding_mode=mode)
    yt = torch.div(torch.tensor(a), torch.tensor(b), rounding_mode=mode)
    assert y.dtype == dtype
    np.testing.assert_array_equal(y.numpy(), yt.numpy())
    assert np.array_equal(np.signbit(y.numpy()), np.signbit(yt.numpy()))


def test_rounded_div_mixed_integer_and_float_gives_float32_as_torch():
    torch = pytest.importorskip("torch")
    a, b = np.array([7, -7, 7]), np.array([2.0, 2.0, -2.0], np.float32)
    for mode in ("trunc", "floor"):
        y = nb.div(nb.tensor(a), nb.tensor(b), rounding_mode=mode)
        yt = torch.div(torch.tensor(a), torch.tensor(b), rounding_mode=mode)
        assert y.dtype == np.float32
        np.testing.assert_array_equal(y.numpy(), yt.numpy())
    assert nb.div(nb.tensor([7.0]), 2, rounding_mode="floor").item() == 3.0


def test_rounded_div_gradient_is_zero_as_torch():
    a = nb.tensor(np.array([7.0, 3.0, -1.0]), requires_grad=True)
    b = nb.tensor(np.array([[2.0], [-2.0]]), requires_grad=True)
    y = nb.div(a, b, rounding_mode="floor")
    assert y.requires_grad
    y.backward(nb.tensor(np.full((2, 3), np.inf)))
    assert (a.grad.numpy() == 0).all() and (b.grad.numpy() == 0).all()
    assert b.grad.shape == (2, 1)


def test_rounded_div_errors():
    i = nb.tensor(np.array([1, 2]))
    for mode in ("trunc", "floor"):
        with pytest.raises(ZeroDivisionError, match="div: integer division by zero"):
            nb.div(i, nb.tensor(np.array([1, 0])), rounding_mode=mode)
        with pytest.raises(TypeError, match="not supported for bool operands"):
            nb.div(nb.tensor(np.array([True])), nb.tensor(np.array([True])),
                   rounding_mode=mode)
    with pytest.raises(ValueError, match="div: rounding_mode must be None, 'trunc' or 'floor'"):
        nb.div(i, i, rounding_mode="round")
    with pytest.raises(ValueError, match="div"):
        nb.div(nb.tensor(np.ones(3)), nb.tensor(np.ones(2)), rounding_mode="floor")
    # true division of integers by zero: float inf/NaN, as PyTorch
    y = nb.div(i, nb.tensor(np.array([0, 0])))
    assert y.dtype == np.float32 and np.isinf(y.numpy()).all()


# -- determinism -----------------------------------------------------------------------------
def _run_all(x):
    t = nb.tensor(x, requires_grad=True)
    outs = [nb.sin(t), nb.cos(t), nb.erf(t), nb.square(t), nb.var(t, 1), nb.std(t),
            nb.norm(t, 2, 1), nb.norm(t, 3), nb.norm(t, np.inf, 0),
            nb.div(t, 0.3, rounding_mode="floor"), nb.div(t, 0.3, rounding_mode="trunc")]
    total = outs[0].sum()
    for o in outs[1:-2]:
        total = total + o.sum()
    total.backward()
    return [o.numpy() for o in outs] + [t.grad.numpy()]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bitwise_identical_for_one_and_two_threads(dtype):
    x = (np.random.default_rng(9).standard_normal((4, 70_000)) * 3).astype(dtype)
    one = at_threads(1, _run_all, x)
    two = at_threads(2, _run_all, x)
    for a, b in zip(one, two):
        assert_same_bits(a, b)
