"""Activations and the softmax family: float64 gradchecks (samples and hypothesis), float32
against float64 NumPy/SciPy references, kinks, stability sweeps, threads, PyTorch oracle,
bad input."""

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads
from hypothesis import given
from hypothesis import strategies as st
from scipy.special import erf, expit
from scipy.special import logsumexp as scipy_logsumexp

import nbgrad as nb
from nbgrad import REGISTRY
from nbgrad.testing import check_registered, gradcheck
from nbgrad.testing import strategies as nbst

OPS = ["tanh", "sigmoid", "relu", "leaky_relu", "elu", "gelu", "gelu_derivative", "gelu_quick",
       "silu", "softplus", "clamp", "clamp_tensor", "softmax", "log_softmax", "logsumexp"]

# -- float64 references: (name, nbgrad call, f(x), f'(x)) ------------------------------------

K_TANH = np.sqrt(2 / np.pi)


def _phi_cdf(x):
    return 0.5 * (1 + erf(x / np.sqrt(2)))


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(K_TANH * (x + 0.044715 * x ** 3)))


def _gelu_tanh_grad(x):
    t = np.tanh(K_TANH * (x + 0.044715 * x ** 3))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * K_TANH * (1 + 3 * 0.044715 * x * x)


def _softplus(x, beta, threshold):
    z = beta * x
    return np.where(z > threshold, x, np.logaddexp(0, z) / beta)


ELEMENTWISE = [
    ("tanh", nb.tanh, np.tanh, lambda x: 1 - np.tanh(x) ** 2),
    ("sigmoid", nb.sigmoid, expit, lambda x: expit(x) * (1 - expit(x))),
    ("relu", nb.relu, lambda x: np.maximum(x, 0), lambda x: (x > 0) * 1.0),
    ("leaky_relu", lambda t: nb.leaky_relu(t, 0.1), lambda x: np.where(x > 0, x, 0.1 * x),
     lambda x: np.where(x > 0, 1.0, 0.1)),
    ("elu", lambda t: nb.elu(t, 1.5), lambda x: np.where(x > 0, x, 1.5 * np.expm1(x)),
     lambda x: np.where(x > 0, 1.0, 1.5 * np.exp(x))),
    ("gelu", nb.gelu, lambda x: x * _phi_cdf(x),
     lambda x: _phi_cdf(x) + x * np.exp(-x * x / 2) / np.sqrt(2 * np.pi)),
    ("gelu_tanh", lambda t: nb.gelu(t, "tanh"), _gelu_tanh, _gelu_tanh_grad),
    ("gelu_quick", nb.gelu_quick, lambda x: x * expit(1.702 * x),
     lambda x: expit(1.702 * x) * (1 + 1.702 * x * (1 - expit(1.702 * x)))),
    ("silu", nb.silu, lambda x: x * expit(x), lambda x: expit(x) * (1 + x * (1 - expit(x)))),
    ("softplus", lambda t: nb.softplus(t, 2.0, 5.0), lambda x: _softplus(x, 2.0, 5.0),
     lambda x: np.where(2 * x > 5, 1.0, expit(2 * x))),
    ("clamp", lambda t: nb.clamp(t, -1.0, 2.0), lambda x: np.clip(x, -1, 2),
     lambda x: ((x >= -1) & (x <= 2)) * 1.0),
]
EW_IDS = [c[0] for c in ELEMENTWISE]


def _forward_backward(fn, x, g):
    t = nb.tensor(x, requires_grad=True)
    y = fn(t)
    y.backward(g)
    return y.numpy(), t.grad.numpy()


# -- gradcheck -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", OPS)
def test_samples_gradcheck(name):
    op = REGISTRY[name]
    for sample in op.samples(np.random.default_rng(1)):
        kwargs = {k: v for k, v in (("atol", sample.atol), ("rtol", sample.rtol)) if v}
        gradcheck(lambda *a, s=sample: op.apply(*a, **s.params), sample.inputs, **kwargs)


def _away_from_kinks(x, kinks=(0.0,), margin=1e-3):
    for k in kinks:
        x = np.where(np.abs(x - k) < margin, k + 2 * margin, x)
    return x


@given(x=nbst.arrays(np.float64, max_dims=3, max_side=3, min_value=-4, max_value=4),
       which=st.sampled_from(range(len(ELEMENTWISE))))
def test_elementwise_gradcheck_hypothesis(x, which):
    name, fn, _, _ = ELEMENTWISE[which]
    x = _away_from_kinks(x, {"clamp": (-1.0, 2.0), "softplus": (2.5,)}.get(name, (0.0,)))
    gradcheck(fn, [x])


@given(x=nbst.arrays(np.float64, max_dims=3, max_side=3, min_value=-3, max_value=3),
       slope=st.floats(-1, 1), alpha=st.floats(0.1, 3), beta=st.floats(0.5, 3),
       threshold=st.floats(1, 20))
def test_parametrised_gradcheck_hypothesis(x, slope, alpha, beta, threshold):
    x = _away_from_kinks(x)
    gradcheck(lambda t: nb.leaky_relu(t, slope), [x])
    gradcheck(lambda t: nb.elu(t, alpha), [x])
    x = _away_from_kinks(x, (threshold / beta,))
    gradcheck(lambda t: nb.softplus(t, beta, threshold), [x])


@given(data=st.data(), shape=st.lists(st.integers(1, 4), min_size=1, max_size=3))
def test_softmax_family_gradcheck_hypothesis(data, shape):
    x = data.draw(nbst.arrays(np.float64, tuple(shape), min_value=-5, max_value=5))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    gradcheck(lambda t: nb.softmax(t, axis), [x])
    gradcheck(lambda t: nb.log_softmax(t, axis), [x])
    red = data.draw(nbst.reduction_axes(len(shape)))
    keep = data.draw(st.booleans())
    gradcheck(lambda t: nb.logsumexp(t, red, keep), [x])


@given(shapes=nbst.broadcastable_shapes(3, max_dims=3, max_side=3), data=st.data())
def test_clamp_tensor_bounds_gradcheck_hypothesis(shapes, data):
    xs, ls, hs = shapes
    x = data.draw(nbst.arrays(np.float64, xs, min_value=-2, max_value=2))
    lo = data.draw(nbst.arrays(np.float64, ls, min_value=-1.5, max_value=0.0))
    hi = data.draw(nbst.arrays(np.float64, hs, min_value=0.1, max_value=1.5))
    full_lo, full_hi = np.broadcast_to(lo, np.broadcast_shapes(*shapes)), hi
    # keep x at least 1e-3 away from every bound it meets
    xb = np.broadcast_to(x, np.broadcast_shapes(*shapes))
    if np.min(np.abs(xb - full_lo)) < 1e-3 or np.min(np.abs(xb - full_hi)) < 1e-3:
        return
    gradcheck(lambda a, b, c: nb.clamp(a, b, c), [x, lo, hi])


# -- float32 against float64 references ----------------------------------------------------------


@pytest.mark.parametrize("name, fn, f, df", ELEMENTWISE, ids=EW_IDS)
def test_float32_matches_float64_reference(name, fn, f, df):
    rng = np.random.default_rng(2)
    x = np.concatenate([np.linspace(-8, 8, 4001), rng.standard_normal(999) * 3])
    x = x.astype(np.float32)
    g = rng.standard_normal(x.size).astype(np.float32)
    y, gx = _forward_backward(fn, x, g)
    assert y.dtype == np.float32 and gx.dtype == np.float32
    x64 = x.astype(np.float64)
    # float32 rounding of a few ulp of O(1) intermediates: 1e-6 relative, 2e-6 absolute
    # (absolute because gelu's 1 + erf and tanh-gelu's 1 - tanh^2 cancel)
    np.testing.assert_allclose(y, f(x64), rtol=1e-6, atol=2e-6)
    np.testing.assert_allclose(gx, g * df(x64), rtol=1e-5, atol=1e-5)


def test_softmax_family_float32_matches_float64_reference():
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((37, 129)) * 4).astype(np.float32)
    g = rng.standard_normal(x.shape).astype(np.float32)
    x64, g64 = x.astype(np.float64), g.astype(np.float64)
    sm = np.exp(x64 - scipy_logsumexp(x64, axis=1, keepdims=True))
    y, gx = _forward_backward(nb.softmax, x, g)
    np.testing.assert_allclose(y, sm, rtol=2e-6, atol=1e-9)
    dot = (g64 * sm).sum(1, keepdims=True)
    # g - dot cancels: bound the error by the size of the terms, not of the result
    assert np.all(np.abs(gx - sm * (g64 - dot)) <= 1e-5 * sm * (np.abs(g64) + np.abs(dot)))
    y, gx = _forward_backward(nb.log_softmax, x, g)
    np.testing.assert_allclose(y, np.log(sm), rtol=1e-6, atol=1e-5)
    sg = g64.sum(1, keepdims=True)
    assert np.all(np.abs(gx - (g64 - sm * sg)) <= 1e-5 * (np.abs(g64) + sm * np.abs(sg)))
    gl = rng.standard_normal(37).astype(np.float32)
    y, gx = _forward_backward(lambda t: nb.logsumexp(t, 1), x, gl)
    np.testing.assert_allclose(y, scipy_logsumexp(x64, axis=1), rtol=1e-6)
    np.testing.assert_allclose(gx, gl[:, None] * sm, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2])
def test_softmax_axes_match_reference(axis):
    x = np.random.default_rng(4).standard_normal((3, 4, 5))
    want = np.exp(x - scipy_logsumexp(x, axis=axis, keepdims=True))
    np.testing.assert_allclose(nb.softmax(x, axis).numpy(), want, rtol=1e-13)
    np.testing.assert_allclose(nb.log_softmax(x, axis).numpy(), np.log(want), rtol=1e-12,
                               atol=1e-14)


@pytest.mark.parametrize("axis, keepdims", [(None, False), (None, True), (0, False),
                                            ((0, 2), True), ((2, 1), False), ((), False)])
def test_logsumexp_axes_match_scipy(axis, keepdims):
    x = np.random.default_rng(5).standard_normal((2, 3, 4))
    got = nb.logsumexp(x, axis, keepdims).numpy()
    want = x if axis == () else scipy_logsumexp(x, axis=axis, keepdims=keepdims)
    assert got.shape == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-13)


def test_logsumexp_infinities_and_empty_slices_follow_pytorch():
    x = np.array([[-np.inf, -np.inf], [np.inf, 1.0], [0.0, 0.0]])
    np.testing.assert_array_equal(nb.logsumexp(x, 1).numpy(), [-np.inf, np.inf, np.log(2)])
    np.testing.assert_array_equal(nb.logsumexp(np.zeros((3, 0)), 1).numpy(), [-np.inf] * 3)


def test_tensor_methods_forward_to_the_functions():
    x = nb.tensor(np.linspace(-2, 2, 12).reshape(3, 4))
    for name, args in [("tanh", ()), ("sigmoid", ()), ("relu", ()), ("leaky_relu", (0.2,)),
                       ("elu", (0.5,)), ("gelu", ("tanh",)), ("gelu_quick", ()), ("silu", ()),
                       ("softplus", (2.0, 3.0)), ("clamp", (-1.0, 1.0)), ("softmax", (0,)),
                       ("log_softmax", (1,)), ("logsumexp", (1, True))]:
        np.testing.assert_array_equal(getattr(x, name)(*args).numpy(),
                                      getattr(nb, name)(x, *args).numpy())


# -- kinks (PyTorch's conventions) ---------------------------------------------------------------


def _grad_at(fn, values, dtype=np.float32):
    return _forward_backward(fn, np.array(values, dtype), np.ones(len(values), dtype))[1]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kink_conventions(dtype):
    np.testing.assert_array_equal(_grad_at(nb.relu, [0.0, -0.0], dtype), [0, 0])
    np.testing.assert_array_equal(_grad_at(lambda t: nb.leaky_relu(t, 0.2), [0.0], dtype),
                                  [dtype(0.2)])
    np.testing.assert_array_equal(_grad_at(lambda t: nb.elu(t, 0.7), [0.0], dtype),
                                  [dtype(0.7)])
    clamp = lambda t: nb.clamp(t, -1.0, 2.0)  # noqa: E731
    np.testing.assert_array_equal(
        _grad_at(clamp, [-1.0, 2.0, np.nextafter(dtype(-1), dtype(-2)),
                         np.nextafter(dtype(2), dtype(3))], dtype), [1, 1, 0, 0])
    # tensor bounds: x on a bound goes to x (inclusive), PyTorch's rule
    x = nb.tensor(np.array([-1.0, 2.0], dtype), requires_grad=True)
    lo = nb.tensor(np.array([-1.0], dtype), requires_grad=True)
    hi = nb.tensor(np.array([2.0], dtype), requires_grad=True)
    nb.clamp(x, lo, hi).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1, 1])
    np.testing.assert_array_equal(lo.grad.numpy(), [0])
    np.testing.assert_array_equal(hi.grad.numpy(), [0])


def test_clamp_tensor_bounds_split_the_gradient_like_pytorch():
    x = nb.tensor([-3.0, 0.0, 3.0, 0.5], requires_grad=True)
    lo = nb.tensor([-1.0, -1.0, -1.0, 1.0], requires_grad=True)
    hi = nb.tensor([1.0, 1.0, 1.0, 0.0], requires_grad=True)   # last: min > max
    y = nb.clamp(x, lo, hi)
    np.testing.assert_array_equal(y.numpy(), [-1, 0, 1, 0])
    y.backward(np.array([1.0, 2.0, 3.0, 4.0], np.float32))
    np.testing.assert_array_equal(x.grad.numpy(), [0, 2, 0, 0])
    np.testing.assert_array_equal(lo.grad.numpy(), [1, 0, 0, 0])
    np.testing.assert_array_equal(hi.grad.numpy(), [0, 0, 3, 4])


def test_clamp_broadcast_bound_gradient_is_summed():
    x = nb.tensor(np.array([[-2.0, 0.0, 2.0], [-3.0, 0.5, 5.0]]), requires_grad=True)
    lo = nb.tensor(np.array([-1.0]), requires_grad=True)
    hi = nb.tensor(np.array([[1.0], [4.0]]), requires_grad=True)
    nb.clamp(x, lo, hi).sum().backward()
    np.testing.assert_array_equal(lo.grad.numpy(), [2.0])
    np.testing.assert_array_equal(hi.grad.numpy(), [[1.0], [1.0]])
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 1, 0], [0, 1, 0]])


def test_clamp_scalar_semantics_nan_and_min_above_max():
    x = np.array([np.nan, -5.0, 0.0, 5.0], np.float32)
    np.testing.assert_array_equal(nb.clamp(x, -1.0, 1.0).numpy(), [np.nan, -1, 0, 1])
    np.testing.assert_array_equal(nb.clamp(x[1:], 2.0, 1.0).numpy(), [1, 1, 1])
    np.testing.assert_array_equal(nb.clamp(x[1:], min=0.5).numpy(), [0.5, 0.5, 5])
    np.testing.assert_array_equal(nb.clamp(x[1:], max=0.5).numpy(), [-5, 0, 0.5])


# -- stability ------------------------------------------------------------------------------------

SWEEP = np.concatenate([np.linspace(-1e4, 1e4, 200_001, dtype=np.float32),
                        np.array([3.4e38, -3.4e38, 1e-45, -1e-45, 0.0, 60.0, -60.0, 100.0,
                                  -100.0, 1e3, -1e3], np.float32)])


@pytest.mark.parametrize("name, fn, f, df", ELEMENTWISE, ids=EW_IDS)
def test_float32_sweep_is_finite_forward_and_backward(name, fn, f, df):
    y, gx = _forward_backward(fn, SWEEP, np.ones_like(SWEEP))
    assert np.isfinite(y).all(), SWEEP[~np.isfinite(y)]
    assert np.isfinite(gx).all(), SWEEP[~np.isfinite(gx)]
    with np.errstate(all="ignore"):
        want = f(SWEEP.astype(np.float64))
    ok = np.isfinite(want) & (np.abs(want) < 1e30)
    np.testing.assert_allclose(y[ok], want[ok], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fn", [nb.softmax, nb.log_softmax,
                                lambda t: nb.logsumexp(t, 0, True)])
def test_softmax_family_sweep_is_finite(fn):
    y, gx = _forward_backward(fn, SWEEP, np.ones(fn(SWEEP).shape, np.float32))
    assert np.isfinite(gx).all()
    # log_softmax(-3.4e38) next to 3.4e38 is -6.8e38: below float32's range, so -inf
    # is the right answer there; every value inside the range is finite
    exact = SWEEP.astype(np.float64) - 3.4e38 if fn is nb.log_softmax else 0.0
    assert np.isfinite(y[np.abs(exact) < 3.4e38]).all()


def test_named_extremes_are_finite_and_right():
    y, gx = _forward_backward(nb.gelu_quick, np.array([-60.0], np.float32),
                              np.ones(1, np.float32))
    assert np.isfinite(y).all() and np.isfinite(gx).all()
    # the exact value, -2.7e-43, is subnormal in float32 (8 significant bits at most)
    np.testing.assert_allclose(y, -60 * expit(-102.12), rtol=0.1)
    assert abs(gx[0]) < 1e-40
    y, gx = _forward_backward(lambda t: nb.gelu(t, "tanh"),
                              np.array([1e4, -1e4], np.float32), np.ones(2, np.float32))
    np.testing.assert_array_equal(y, [1e4, 0.0])
    np.testing.assert_array_equal(gx, [1.0, 0.0])
    logits = np.array([0.0, 1e4, -1e4], np.float32)
    g = np.array([1.0, 2.0, 3.0], np.float32)
    y, gx = _forward_backward(nb.softmax, logits, g)
    np.testing.assert_array_equal(y, [0.0, 1.0, 0.0])
    np.testing.assert_array_equal(gx, [0.0, 0.0, 0.0])
    y, gx = _forward_backward(nb.log_softmax, logits, g)
    np.testing.assert_array_equal(y, [-1e4, 0.0, -2e4])
    np.testing.assert_allclose(gx, [1.0, 2.0 - 6.0, 3.0])


# -- layouts, dtypes, threads ---------------------------------------------------------------------


@pytest.mark.parametrize("name, fn, f, df", ELEMENTWISE, ids=EW_IDS)
def test_strided_input_and_broadcast_upstream_gradient(name, fn, f, df):
    base = np.random.default_rng(6).standard_normal((4, 6)) * 2
    x = nb.tensor(base, requires_grad=True)
    fn(x[:, ::2]).sum().backward()           # strided input, 0-stride upstream gradient
    want = np.zeros_like(base)
    want[:, ::2] = df(base[:, ::2])
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-12, atol=1e-14)


def _all_outputs(fn, x, g):
    return _forward_backward(fn, x, g)


@pytest.mark.parametrize("name, fn", [(c[0], c[1]) for c in ELEMENTWISE]
                         + [("softmax", nb.softmax), ("log_softmax", nb.log_softmax),
                            ("logsumexp", lambda t: nb.logsumexp(t, 1))],
                         ids=EW_IDS + ["softmax", "log_softmax", "logsumexp"])
def test_one_and_two_threads_give_the_same_bits(name, fn):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((389, 389)) * 3).astype(np.float32)  # above PARALLEL_MIN
    g = rng.standard_normal(fn(x).shape).astype(np.float32)
    y1, g1 = at_threads(1, _all_outputs, fn, x, g)
    y2, g2 = at_threads(2, _all_outputs, fn, x, g)
    assert_same_bits(y1, y2)
    assert_same_bits(g1, g2)


@pytest.mark.parametrize("name, fn", [(c[0], c[1]) for c in ELEMENTWISE]
                         + [("softmax", nb.softmax), ("log_softmax", nb.log_softmax),
                            ("logsumexp", lambda t: nb.logsumexp(t, 1))],
                         ids=EW_IDS + ["softmax", "log_softmax", "logsumexp"])
def test_serial_and_parallel_forms_give_the_same_bits(name, fn):
    """Below PARALLEL_MIN elements the kernels run their serial form: the rows of a large
    input, taken 100 at a time (serial), give the bits of the whole (parallel)."""
    from nbgrad.runtime.jit import PARALLEL_MIN
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((500, 389)) * 3).astype(np.float32)
    assert x.size >= PARALLEL_MIN > 100 * 389
    g = rng.standard_normal(fn(x).shape).astype(np.float32)
    y, gx = _all_outputs(fn, x, g)
    for lo in range(0, 500, 100):
        y_part, gx_part = _all_outputs(fn, x[lo:lo + 100], g[lo:lo + 100])
        assert_same_bits(y_part, y[lo:lo + 100])
        assert_same_bits(gx_part, gx[lo:lo + 100])


def test_float64_stays_float64_and_float32_stays_float32():
    for dtype in (np.float32, np.float64):
        x = np.linspace(-1, 1, 5).astype(dtype)
        for name, fn, _, _ in ELEMENTWISE:
            y, gx = _forward_backward(fn, x, np.ones_like(x))
            assert y.dtype == dtype and gx.dtype == dtype, name


def test_forward_does_not_modify_its_input():
    x = np.random.default_rng(8).standard_normal((5, 7)).astype(np.float32)
    keep = x.copy()
    for _, fn, _, _ in ELEMENTWISE:
        _forward_backward(fn, x, np.ones_like(x))
    for fn in (nb.softmax, nb.log_softmax):
        _forward_backward(fn, x, np.ones_like(x))
    np.testing.assert_array_equal(x, keep)


# -- bad input -----------------------------------------------------------------------------------


def test_bad_input_raises_naming_op_and_shapes():
    ints = nb.tensor(np.arange(6).reshape(2, 3))
    for name in ["tanh", "sigmoid", "relu", "gelu", "silu", "softmax", "clamp"]:
        args = (ints, 0.0) if name == "clamp" else (ints,)
        with pytest.raises(TypeError, match=rf"{name}: x must be float32 or float64, got "
                                            r"nbgrad.int64 \(shape \(2, 3\)\)"):
            getattr(nb, name)(*args)
    x = nb.tensor(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="gelu: approximate must be 'none' or 'tanh', got 'erf'"):
        nb.gelu(x, "erf")
    with pytest.raises(ValueError, match=r"softmax: axis 2 is out of range for shape \(2, 3\)"):
        nb.softmax(x, 2)
    with pytest.raises(ValueError, match=r"log_softmax: axis -3 is out of range"):
        nb.log_softmax(x, -3)
    with pytest.raises(ValueError, match=r"logsumexp: axis \(1, -1\) repeats an axis"):
        nb.logsumexp(x, (1, -1))
    with pytest.raises(TypeError, match="softmax: axis must be an int"):
        nb.softmax(x, 1.0)
    with pytest.raises(ValueError, match="clamp: at least one of min and max"):
        nb.clamp(x)
    with pytest.raises(ValueError, match=r"clamp .*\(2, 3\).*\(4,\)"):
        nb.clamp(x, np.zeros(4))
    with pytest.raises(TypeError, match="clamp: min must be a real number"):
        nb.clamp(x, "a")
    with pytest.raises(ValueError, match="softplus: beta must be non-zero"):
        nb.softplus(x, 0.0)
    with pytest.raises(TypeError, match="leaky_relu: negative_slope must be a real number"):
        nb.leaky_relu(x, None)
    lo64 = nb.tensor(np.zeros(3), requires_grad=True)
    with pytest.raises(TypeError,
                       match="clamp: min is nbgrad.float64 but x is nbgrad.float32"):
        nb.clamp(nb.tensor(np.zeros(3, np.float32)), lo64)


# -- PyTorch oracle ------------------------------------------------------------------------------


def _torch_cases(torch):
    f = torch.nn.functional
    return [
        ("tanh", nb.tanh, torch.tanh), ("sigmoid", nb.sigmoid, torch.sigmoid),
        ("relu", nb.relu, torch.relu),
        ("leaky_relu", lambda t: nb.leaky_relu(t, 0.3), lambda t: f.leaky_relu(t, 0.3)),
        ("elu", lambda t: nb.elu(t, 0.8), lambda t: f.elu(t, 0.8)),
        ("gelu", nb.gelu, f.gelu),
        ("gelu_tanh", lambda t: nb.gelu(t, "tanh"), lambda t: f.gelu(t, approximate="tanh")),
        ("silu", nb.silu, f.silu),
        ("softplus", lambda t: nb.softplus(t, 1.5, 3.0), lambda t: f.softplus(t, 1.5, 3.0)),
        ("clamp", lambda t: nb.clamp(t, -0.5, 1.0), lambda t: torch.clamp(t, -0.5, 1.0)),
        ("softmax", lambda t: nb.softmax(t, 0), lambda t: torch.softmax(t, 0)),
        ("log_softmax", nb.log_softmax, lambda t: torch.log_softmax(t, -1)),
        ("logsumexp", lambda t: nb.logsumexp(t, 1), lambda t: torch.logsumexp(t, 1)),
    ]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pytorch_oracle(dtype):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((6, 50)) * 3).astype(dtype)
    x[0, :5] = [0.0, -0.5, 1.0, -0.0, 0.5]   # kinks and clamp bounds
    # float32: the same bounds as against the float64 reference (1 + erf and 1 - tanh^2
    # cancel in both libraries, each with its own rounding)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-12,
                                                                   "atol": 1e-14}
    for name, ours, theirs in _torch_cases(torch):
        g = rng.standard_normal(ours(x).shape).astype(dtype)
        y, gx = _forward_backward(ours, x, g)
        xt = torch.tensor(x, requires_grad=True)
        yt = theirs(xt)
        yt.backward(torch.tensor(g))
        np.testing.assert_allclose(y, yt.detach().numpy(), **tol, err_msg=name)
        np.testing.assert_allclose(gx, xt.grad.numpy(), **tol, err_msg=name)


def test_pytorch_oracle_gelu_quick_formula():
    torch = pytest.importorskip("torch")
    x = np.linspace(-8, 8, 101)
    xt = torch.tensor(x, requires_grad=True)
    (xt * torch.sigmoid(1.702 * xt)).sum().backward()
    t = nb.tensor(x, requires_grad=True)
    nb.gelu_quick(t).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), xt.grad.numpy(), rtol=1e-12, atol=1e-15)


def test_pytorch_oracle_clamp_tensor_bounds():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(10)
    x = rng.standard_normal((4, 5))
    lo = rng.uniform(-1, 0.5, (1, 5))
    hi = rng.uniform(-0.5, 1, (4, 1))           # some min > max pairs
    g = rng.standard_normal((4, 5))
    ts = [torch.tensor(a, requires_grad=True) for a in (x, lo, hi)]
    torch.clamp(*ts).backward(torch.tensor(g))
    ns = [nb.tensor(a, requires_grad=True) for a in (x, lo, hi)]
    y = nb.clamp(*ns)
    y.backward(g)
    np.testing.assert_array_equal(y.numpy(), torch.clamp(*ts).detach().numpy())
    for a, b in zip(ns, ts):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-14)


@pytest.mark.parametrize("shape", [(3, 0), (0, 4), (0,), (2, 0, 3)])
def test_empty_arrays_keep_their_shape(shape):
    for fn in [c[1] for c in ELEMENTWISE] + [nb.softmax, nb.log_softmax,
                                             lambda t: nb.softmax(t, 0)]:
        y, gx = _forward_backward(fn, np.zeros(shape, np.float32),
                                  np.zeros(shape, np.float32))
        assert y.shape == shape and gx.shape == shape


@pytest.mark.parametrize("name, fn, f, df", ELEMENTWISE, ids=EW_IDS)
def test_nan_propagates_like_pytorch(name, fn, f, df):
    x = np.array([np.nan, 1.0, -1.0], np.float32)
    y, gx = _forward_backward(fn, x, np.ones_like(x))
    assert np.isnan(y[0]) and np.isfinite(y[1:]).all()
    assert np.isfinite(gx[1:]).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_row_max_all_negative_infinite_and_nan_rows(dtype):
    # float32 rows take the integer-key max, float64 rows the plain one: same answers
    x = np.array([[-5.0, -1.0, -2.0], [-np.inf, -1.0, -3.0], [-0.0, -1e-45, -3.0],
                  [np.nan, 0.0, 1.0], [-np.nan, 0.0, 1.0]], dtype)
    y = nb.softmax(x).numpy()
    finite = x[:3].astype(np.float64)
    np.testing.assert_allclose(y[:3], np.exp(finite - scipy_logsumexp(finite, 1,
                                                                      keepdims=True)),
                               rtol=1e-6)
    assert np.isnan(y[3:]).all()
    np.testing.assert_allclose(nb.logsumexp(x[:3], 1).numpy(),
                               scipy_logsumexp(finite, 1), rtol=1e-6)


def test_gelu_float32_fast_path_matches_the_reference_loop_nest():
    from nbgrad.kernels import activation as K
    x = np.concatenate([np.linspace(-10, 10, 20_001), [0.0, -0.0, 3.4e38, -3.4e38]])
    x = x.astype(np.float32)
    g = np.random.default_rng(11).standard_normal(x.size).astype(np.float32)
    fast, ref = np.empty_like(x), np.empty_like(x)
    K.gelu_forward_f32(x, fast)
    K.gelu_forward(x, ref)
    np.testing.assert_allclose(fast, ref, rtol=1e-6, atol=1e-6)   # ref cancels below 0
    K.gelu_backward_f32(g, x, fast)
    K.gelu_backward(g, x, ref)
    np.testing.assert_allclose(fast, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(1, 1), (33, 7), (70, 1024), (5, 0), (0, 4)])
def test_softmax_float32_pipelined_kernel_matches_the_plain_one_bit_for_bit(shape):
    from nbgrad.kernels import softmax as K
    rng = np.random.default_rng(13)
    x = (rng.standard_normal(shape) * 30).astype(np.float32)
    if x.size and shape[0] > 4:
        x[1, 0] = np.inf                           # +inf row, -inf row, NaN row, huge row
        x[2, :] = -np.inf
        x[3, -1] = np.nan
        x[4, :] = 3.4e38
    ref, fast = np.empty_like(x), np.empty_like(x)
    K.softmax_forward(x, ref)
    at_threads(1, K.softmax_forward_f32, x, fast)
    assert_same_bits(fast, ref)
    at_threads(2, K.softmax_forward_f32, x, fast)
    assert_same_bits(fast, ref)


def test_gelu_float32_saved_derivative_matches_the_backward_kernel_bit_for_bit():
    # with grad on, the float32 forward also writes Phi(x) + x phi(x) and the backward is
    # g * that (mul_saved): the same bits as gelu_backward_f32, edges included
    from nbgrad.kernels import activation as K
    x = np.concatenate([np.linspace(-12, 12, 4001), [0.0, -0.0, 3.4e38, -3.4e38, np.inf,
                                                      -np.inf, np.nan, 1e-40, -1e-40]])
    x = x.astype(np.float32)
    g = np.random.default_rng(12).standard_normal(x.size).astype(np.float32)
    g[:3] = [np.inf, np.nan, 0.0]
    y_ref, gx_ref = np.empty_like(x), np.empty_like(x)
    K.gelu_forward_f32(x, y_ref)
    K.gelu_backward_f32(g, x, gx_ref)
    y, d, gx = np.empty_like(x), np.empty_like(x), np.empty_like(x)
    K.gelu_forward_grad_f32(x, y, d)
    assert_same_bits(y, y_ref)
    assert_same_bits(K.mul_saved(g, d, gx), gx_ref)
    y_op, gx_op = _forward_backward(nb.gelu, x, g)          # through the op
    assert_same_bits(y_op, y_ref)
    assert_same_bits(gx_op, gx_ref)
    with nb.no_grad():                                      # no grad: plain forward
        assert_same_bits(nb.gelu(nb.tensor(x)).numpy(), y_ref)


def test_mul_saved_takes_a_broadcast_scalar_upstream_without_materialising_it():
    from nbgrad.kernels import activation as K
    d = np.linspace(-3, 3, 101).astype(np.float32)
    out = np.empty_like(d)
    K.mul_saved(np.array([np.float32(1.5)]), d, out)
    assert_same_bits(out, np.float32(1.5) * d)
    x = np.linspace(-4, 4, 60, dtype=np.float32).reshape(6, 10)
    g0 = np.broadcast_to(np.float32(0.25), x.shape)          # 0-stride upstream
    assert not any(g0.strides)
    full = _forward_backward(nb.gelu, x, np.full(x.shape, 0.25, np.float32))[1]
    assert_same_bits(_forward_backward(nb.gelu, x, g0)[1], full)


def test_gelu_float32_is_relatively_accurate_in_the_negative_tail():
    from scipy.special import ndtr
    x = np.linspace(-12, -0.5, 20_001).astype(np.float32)
    y, gx = _forward_backward(nb.gelu, x, np.ones_like(x))
    x64 = x.astype(np.float64)
    # erfc form, not 1 + erf(x / sqrt 2) (which cancels to 0 below x = -5.5); the
    # tolerance covers the rounding of x^2 / 2 inside exp (x^2/2 = 72 at x = -12)
    np.testing.assert_allclose(y, x64 * ndtr(x64), rtol=1e-5)
    pdf = np.exp(-x64 * x64 / 2) / np.sqrt(2 * np.pi)
    np.testing.assert_allclose(gx, ndtr(x64) + x64 * pdf, rtol=1e-5, atol=1e-7)


# -- second derivatives ------------------------------------------------------------------------


@pytest.mark.parametrize("name", OPS)
def test_samples_gradcheck_and_gradgradcheck_through_the_registry(name):
    assert REGISTRY[name].has_vjp()
    for second_order in (False, True):
        report = check_registered(name, second_order=second_order)
        assert report.passed, report.failures


def _second_derivative(fn, x, g, v):
    """d/dx <v, d/dx <g, fn(x)>> through two nb.grad calls (the first with create_graph)."""
    t = nb.tensor(x, requires_grad=True)
    (gx,) = nb.grad(fn(t), t, grad_outputs=nb.tensor(g), create_graph=True)
    if not gx.requires_grad:                 # piecewise linear: g times a constant mask
        return gx.numpy(), np.zeros_like(x)
    (h,) = nb.grad(gx, t, grad_outputs=nb.tensor(v))
    return gx.numpy(), h.numpy()


def _torch_second_derivative(torch, fn, x, g, v):
    xt = torch.tensor(x, requires_grad=True)
    (gt,) = torch.autograd.grad(fn(xt), xt, torch.tensor(g), create_graph=True)
    if not gt.requires_grad:
        return gt.detach().numpy(), np.zeros_like(x)
    (ht,) = torch.autograd.grad(gt, xt, torch.tensor(v), allow_unused=True)
    return gt.detach().numpy(), np.zeros_like(x) if ht is None else ht.numpy()


def _signed(rng, shape, low, high):
    """|x| in [low, high], random sign."""
    return rng.uniform(low, high, shape) * rng.choice([-1.0, 1.0], shape)


def test_pytorch_oracle_second_derivatives():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(14)
    x = _signed(rng, (6, 50), 0.05, 6.0)
    # away from the kinks, the clamp bounds (-0.5, 1) and softplus's threshold (3 / 1.5)
    for edge in (-0.5, 1.0, 2.0):
        x = np.where(np.abs(x - edge) < 0.05, edge + 0.1, x)
    cases = _torch_cases(torch) + [
        ("gelu_quick", nb.gelu_quick, lambda t: t * torch.sigmoid(1.702 * t)),
        ("softmax dim=1", lambda t: nb.softmax(t, dim=1), lambda t: torch.softmax(t, 1)),
        ("logsumexp all", nb.logsumexp, lambda t: torch.logsumexp(t, (0, 1))),
        ("logsumexp keepdim", lambda t: nb.logsumexp(t, 0, True),
         lambda t: torch.logsumexp(t, 0, True)),
    ]
    for name, ours, theirs in cases:
        g = rng.standard_normal(ours(x).shape)
        v = rng.standard_normal(x.shape)
        gx, h = _second_derivative(ours, x, g, v)
        gx_t, h_t = _torch_second_derivative(torch, theirs, x, g, v)
        np.testing.assert_allclose(gx, gx_t, rtol=1e-10, atol=1e-13, err_msg=name)
        np.testing.assert_allclose(h, h_t, rtol=1e-10, atol=1e-13, err_msg=name)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name, fn, f, df", ELEMENTWISE, ids=EW_IDS)
def test_recorded_backward_matches_the_kernel_backward_kinks_included(name, fn, f, df, dtype):
    # the vjp (create_graph=True) computes the first derivative with nbgrad ops: the same
    # values as the kernels, PyTorch's kink conventions included
    x = np.concatenate([np.linspace(-6, 6, 241), [0.0, -0.0, -1.0, 2.0, 2.5]]).astype(dtype)
    g = np.random.default_rng(15).standard_normal(x.size).astype(dtype)
    _, want = _forward_backward(fn, x, g)
    t = nb.tensor(x, requires_grad=True)
    (got,) = nb.grad(fn(t), t, grad_outputs=nb.tensor(g), create_graph=True)
    assert got.dtype == dtype
    tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == np.float32 else {"rtol": 1e-12,
                                                                   "atol": 1e-15}
    np.testing.assert_allclose(got.numpy(), want, **tol)


def test_second_derivatives_match_closed_forms():
    x = np.linspace(-5, 5, 101) + 0.013               # no point on a kink
    s = expit(x)
    phi = np.exp(-x * x / 2) / np.sqrt(2 * np.pi)
    cases = [
        (nb.tanh, -2 * np.tanh(x) * (1 - np.tanh(x) ** 2)),
        (nb.sigmoid, s * (1 - s) * (1 - 2 * s)),
        (nb.relu, 0 * x),
        (lambda t: nb.leaky_relu(t, 0.2), 0 * x),
        (lambda t: nb.elu(t, 1.5), np.where(x > 0, 0.0, 1.5 * np.exp(x))),
        (nb.gelu, phi * (2 - x * x)),
        (nb.silu, s * (1 - s) * (2 + x * (1 - 2 * s))),
        (lambda t: nb.softplus(t, 2.0, 5.0), np.where(2 * x > 5, 0.0,
                                                      2 * expit(2 * x) * (1 - expit(2 * x)))),
        (lambda t: nb.clamp(t, -1.0, 2.0), 0 * x),
    ]
    for fn, want in cases:
        np.testing.assert_allclose(_second_derivative(fn, x, np.ones_like(x),
                                                      np.ones_like(x))[1],
                                   want, rtol=1e-10, atol=1e-14)


def _gelu_d2_d3(x, approximate):
    t = nb.tensor(x, requires_grad=True)
    (d1,) = nb.grad(nb.gelu(t, approximate).sum(), t, create_graph=True)
    (d2,) = nb.grad(d1.sum(), t, create_graph=True)
    (d3,) = nb.grad(d2.sum(), t)
    return d2.numpy(), d3.numpy()


def test_third_derivative_of_gelu_through_gelu_derivative():
    x = np.linspace(-3, 3, 13) + 0.01
    phi = np.exp(-x * x / 2) / np.sqrt(2 * np.pi)
    np.testing.assert_allclose(_gelu_d2_d3(x, "none")[1], phi * (x ** 3 - 4 * x),
                               rtol=1e-10, atol=1e-14)
    eps = 1e-6
    numeric = (_gelu_d2_d3(x + eps, "tanh")[0] - _gelu_d2_d3(x - eps, "tanh")[0]) / (2 * eps)
    np.testing.assert_allclose(_gelu_d2_d3(x, "tanh")[1], numeric, rtol=1e-6, atol=1e-8)


def test_float32_gelu_saved_derivative_fast_path_is_twice_differentiable():
    x = np.linspace(-4, 4, 33).astype(np.float32)
    t = nb.tensor(x, requires_grad=True)
    (d1,) = nb.grad(nb.gelu(t).sum(), t, create_graph=True)
    (d2,) = nb.grad(d1.sum(), t)
    x64 = x.astype(np.float64)
    assert d2.dtype == np.float32
    np.testing.assert_allclose(d2.numpy(), np.exp(-x64 ** 2 / 2) / np.sqrt(2 * np.pi)
                               * (2 - x64 ** 2), rtol=1e-5, atol=1e-6)


# -- dim / axis spellings ----------------------------------------------------------------------


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_family_takes_dim_or_axis(op):
    fn = getattr(nb, op)
    x = nb.tensor(np.random.default_rng(16).standard_normal((3, 4, 5)))
    want = fn(x, 1).numpy()
    for got in (fn(x, dim=1), fn(x, axis=1), fn(x, dim=-2), getattr(x, op)(dim=1),
                getattr(x, op)(axis=1)):
        np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_array_equal(fn(x).numpy(), fn(x, dim=-1).numpy())
    with pytest.raises(TypeError, match=rf"{op}: got both dim=1 and axis=2; pass one of them"):
        fn(x, dim=1, axis=2)
    with pytest.raises(TypeError, match=rf"{op}: got both dim=1 and axis=1"):
        fn(x, 1, axis=1)
    with pytest.raises(ValueError, match=rf"{op}: axis 3 is out of range for shape \(3, 4, 5\)"):
        fn(x, dim=3)


def test_logsumexp_takes_dim_keepdim_or_axis_keepdims():
    x = nb.tensor(np.random.default_rng(17).standard_normal((2, 3, 4)))
    want = nb.logsumexp(x, (0, 2), True).numpy()
    assert want.shape == (1, 3, 1)
    for got in (nb.logsumexp(x, dim=(0, 2), keepdim=True),
                nb.logsumexp(x, axis=(0, 2), keepdims=True),
                nb.logsumexp(x, dim=(0, 2), keepdims=True),
                nb.logsumexp(x, axis=(2, 0), keepdim=True),
                x.logsumexp(dim=(0, 2), keepdim=True)):
        np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_array_equal(nb.logsumexp(x, axis=1).numpy(),
                                  nb.logsumexp(x, 1).numpy())
    assert nb.logsumexp(x).shape == ()
    with pytest.raises(TypeError, match=r"logsumexp: got both dim=1 and axis=0"):
        nb.logsumexp(x, dim=1, axis=0)
    with pytest.raises(TypeError, match=r"logsumexp: got both keepdim=True and keepdims=False"):
        nb.logsumexp(x, 1, True, keepdims=False)


# -- the point-wise table ------------------------------------------------------------------------

TABLE = [("tanh", (), "output"), ("sigmoid", (), "output"), ("relu", (), "output"),
         ("leaky_relu", (0.2,), "input"), ("elu", (0.7,), "input"),
         ("gelu_quick", (), "input"), ("silu", (), "input"), ("softplus", (1.5, 2.0), "input")]


@pytest.mark.parametrize("name, args, saves", TABLE, ids=[c[0] for c in TABLE])
def test_table_ops_run_their_kernels_bit_for_bit(name, args, saves):
    from nbgrad.kernels import activation as K
    rng = np.random.default_rng(18)
    x = (rng.standard_normal((31, 17)) * 3).astype(np.float32)
    g = rng.standard_normal(x.shape).astype(np.float32)
    y, gx = _forward_backward(lambda t: getattr(nb, name)(t, *args), x, g)
    y_ref, gx_ref = np.empty_like(x), np.empty_like(x)
    getattr(K, f"{name}_forward")(x.reshape(-1), *args, y_ref.reshape(-1))
    saved = y_ref if saves == "output" else x
    getattr(K, f"{name}_backward")(g.reshape(-1), saved.reshape(-1), *args, gx_ref.reshape(-1))
    assert_same_bits(y, y_ref)
    assert_same_bits(gx, gx_ref)


def test_table_ops_take_parameters_by_position_or_keyword():
    import inspect
    x = nb.tensor(np.linspace(-3, 3, 7))
    np.testing.assert_array_equal(nb.leaky_relu(x, negative_slope=0.2).numpy(),
                                  nb.leaky_relu(x, 0.2).numpy())
    np.testing.assert_array_equal(nb.softplus(x, threshold=1.0).numpy(),
                                  nb.softplus(x, 1.0, 1.0).numpy())
    np.testing.assert_array_equal(nb.softplus(x=x, beta=2).numpy(),
                                  nb.softplus(x, 2.0).numpy())
    assert list(inspect.signature(nb.softplus).parameters) == ["x", "beta", "threshold"]
    assert inspect.signature(nb.elu).parameters["alpha"].default == 1.0
    assert nb.tanh.__name__ == "tanh" and "1 - y^2" in nb.tanh.__doc__
    with pytest.raises(TypeError, match="unexpected keyword argument 'slope'"):
        nb.leaky_relu(x, slope=0.2)
    with pytest.raises(TypeError, match="multiple values for argument 'beta'"):
        nb.softplus(x, 1.0, beta=2.0)
    with pytest.raises(TypeError, match=r"tanh\(\) takes 1 positional argument"):
        nb.tanh(x, 1.0)
    with pytest.raises(TypeError, match="softplus: threshold must be a real number, got str"):
        nb.softplus(x, 1.0, "a")
    with pytest.raises(TypeError, match="elu: alpha must be a real number, got bool"):
        nb.elu(x, True)


# -- NaN inputs and NaN bounds (PyTorch 2.13's results) ---------------------------------------
def test_nan_inputs_get_pytorchs_gradients():
    x = np.array([np.nan, -1.0, 2.0], np.float32)
    g = np.array([3.0, 3.0, 3.0], np.float32)
    want = {"relu": [3.0, 0.0, 3.0], "leaky_relu": [0.03, 0.03, 3.0],
            "elu": [np.nan, 3 * np.exp(-1.0), 3.0]}
    for name, expected in want.items():
        for create_graph in (False, True):
            t = nb.tensor(x, requires_grad=True)
            (gx,) = nb.grad(getattr(nb, name)(t), [t], grad_outputs=g,
                            create_graph=create_graph)
            np.testing.assert_allclose(gx.numpy(), expected, rtol=1e-6,
                                       err_msg=f"{name} create_graph={create_graph}")


@pytest.mark.parametrize("bounds", [dict(min=np.nan), dict(max=np.nan),
                                    dict(min=0.0, max=np.nan), dict(min=np.nan, max=0.0)])
def test_a_nan_clamp_bound_gives_nan_with_zero_gradient(bounds):
    x = nb.tensor([1.0, np.nan, -2.0, 5.0], requires_grad=True)
    y = nb.clamp(x, **bounds)
    assert np.isnan(y.numpy()).all()
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros(4))
    lo = None if "min" not in bounds else nb.full((4,), bounds["min"])
    hi = None if "max" not in bounds else nb.full((4,), bounds["max"])
    assert np.isnan(nb.clamp(x, lo, hi).numpy()).all()


def test_gelu_quick_float64_gradient_is_exact_in_the_far_negative_tail():
    x = np.array([-150.0, -300.0, -1e30])
    t = nb.tensor(x, requires_grad=True)
    nb.gelu_quick(t).sum().backward()
    s = expit(1.702 * x)
    np.testing.assert_allclose(t.grad.numpy(), s * (1 + 1.702 * x * (1 - s)), rtol=1e-12)
    assert t.grad.numpy()[2] == 0.0


def test_log_softmax_keeps_the_log_sum_next_to_huge_values():
    for dtype in (np.float32, np.float64):
        y = nb.log_softmax(nb.tensor(np.array([1e30, 1e30, -1e30], dtype)))
        np.testing.assert_allclose(y.numpy(), [-np.log(2), -np.log(2), -2e30], rtol=1e-6)


# -- clamp at infinite and NaN bounds: PyTorch's clamp / clamp_min / clamp_max rules ------------
_CLAMP_X = [-np.inf, -2.0, -0.0, 0.0, 1.0, np.inf, np.nan]
_CLAMP_BOUNDS = [-np.inf, -1.0, 0.0, 1.0, np.inf, np.nan]


def _clamp_grid(which):
    """x against every bound value (and, for both bounds, every pair), flattened."""
    if which == "both":
        x, lo, hi = np.meshgrid(_CLAMP_X, _CLAMP_BOUNDS, _CLAMP_BOUNDS, indexing="ij")
        return x.ravel(), lo.ravel(), hi.ravel()
    x, b = (a.ravel() for a in np.meshgrid(_CLAMP_X, _CLAMP_BOUNDS, indexing="ij"))
    return (x, b, None) if which == "min" else (x, None, b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("which", ["min", "max", "both"])
def test_pytorch_oracle_clamp_tensor_bounds_at_inf_and_nan(which, dtype):
    """Values and the gradients of x, min and max; with one bound PyTorch uses
    clamp_min's (clamp_max's) rule, so a min of +inf gets the gradient where x < min."""
    torch = pytest.importorskip("torch")
    arrays = [None if a is None else a.astype(dtype) for a in _clamp_grid(which)]
    g = np.linspace(0.5, 2.0, arrays[0].size).astype(dtype)
    ts = [None if a is None else torch.tensor(a, requires_grad=True) for a in arrays]
    ty = torch.clamp(ts[0], min=ts[1], max=ts[2])
    ty.backward(torch.tensor(g))
    ns = [None if a is None else nb.tensor(a, requires_grad=True) for a in arrays]
    y = nb.clamp(ns[0], min=ns[1], max=ns[2])
    y.backward(nb.tensor(g))
    np.testing.assert_array_equal(y.numpy(), ty.detach().numpy())
    for name, a, b in zip(["x", "min", "max"], ns, ts):
        if a is not None:
            np.testing.assert_array_equal(a.grad.numpy(), b.grad.numpy(), err_msg=name)
    # the second-order path (create_graph) splits g the same way
    grads = nb.grad(nb.clamp(ns[0], min=ns[1], max=ns[2]), [a for a in ns if a is not None],
                    grad_outputs=nb.tensor(g), create_graph=True)
    for got, b in zip(grads, [b for b in ts if b is not None]):
        np.testing.assert_array_equal(got.numpy(), b.grad.numpy())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bounds", [dict(min=b) for b in _CLAMP_BOUNDS]
                         + [dict(max=b) for b in _CLAMP_BOUNDS]
                         + [dict(min=-np.inf, max=np.inf), dict(min=np.inf, max=-np.inf),
                            dict(min=np.nan, max=np.inf), dict(min=1.0, max=-1.0)])
def test_pytorch_oracle_clamp_number_bounds_at_inf_and_nan(bounds, dtype):
    torch = pytest.importorskip("torch")
    x = np.array(_CLAMP_X, dtype)
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.clamp(tx, **bounds)
    ty.sum().backward()
    nx = nb.tensor(x, requires_grad=True)
    y = nb.clamp(nx, **bounds)
    y.sum().backward()
    np.testing.assert_array_equal(y.numpy(), ty.detach().numpy())
    np.testing.assert_array_equal(nx.grad.numpy(), tx.grad.numpy())


def test_clamp_min_of_plus_inf_passes_the_gradient_to_min():
    """The issue's case, without torch: clamp_min(x, m) = m where x < m, so dm = 1."""
    x = nb.tensor([0.0], requires_grad=True)
    m = nb.tensor([np.inf], requires_grad=True)
    gx, gm = nb.grad(nb.clamp(x, min=m), [x, m])
    assert gx.numpy().tolist() == [0.0] and gm.numpy().tolist() == [1.0]
    h = nb.tensor([-np.inf], requires_grad=True)  # clamp_max(x, -inf) = -inf: dh = 1
    gx, gh = nb.grad(nb.clamp(x, max=h), [x, h])
    assert gx.numpy().tolist() == [0.0] and gh.numpy().tolist() == [1.0]
