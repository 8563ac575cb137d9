"""Activations and the softmax family: float64 gradchecks (samples and hypothesis), float32
against float64 NumPy/SciPy references, kinks, stability sweeps, threads, bad input."""

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads
from hypothesis import given
from hypothesis import strategies as st
from ops.activation_cases import ELEMENTWISE, EW_IDS, OPS, forward_backward
from scipy.special import expit
from scipy.special import logsumexp as scipy_logsumexp

import nbgrad as nb
from nbgrad import REGISTRY
from nbgrad.testing import gradcheck
from nbgrad.testing import strategies as nbst

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
    y, gx = forward_backward(fn, x, g)
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
    y, gx = forward_backward(nb.softmax, x, g)
    np.testing.assert_allclose(y, sm, rtol=2e-6, atol=1e-9)
    dot = (g64 * sm).sum(1, keepdims=True)
    # g - dot cancels: bound the error by the size of the terms, not of the result
    assert np.all(np.abs(gx - sm * (g64 - dot)) <= 1e-5 * sm * (np.abs(g64) + np.abs(dot)))
    y, gx = forward_backward(nb.log_softmax, x, g)
    np.testing.assert_allclose(y, np.log(sm), rtol=1e-6, atol=1e-5)
    sg = g64.sum(1, keepdims=True)
    assert np.all(np.abs(gx - (g64 - sm * sg)) <= 1e-5 * (np.abs(g64) + sm * np.abs(sg)))
    gl = rng.standard_normal(37).astype(np.float32)
    y, gx = forward_backward(lambda t: nb.logsumexp(t, 1), x, gl)
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
    return forward_backward(fn, np.array(values, dtype), np.ones(len(values), dtype))[1]


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
    y, gx = forward_backward(fn, SWEEP, np.ones_like(SWEEP))
    assert np.isfinite(y).all(), SWEEP[~np.isfinite(y)]
    assert np.isfinite(gx).all(), SWEEP[~np.isfinite(gx)]
    with np.errstate(all="ignore"):
        want = f(SWEEP.astype(np.float64))
    ok = np.isfinite(want) & (np.abs(want) < 1e30)
    np.testing.assert_allclose(y[ok], want[ok], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fn", [nb.softmax, nb.log_softmax,
                                lambda t: nb.logsumexp(t, 0, True)])
def test_softmax_family_sweep_is_finite(fn):
    y, gx = forward_backward(fn, SWEEP, np.ones(fn(SWEEP).shape, np.float32))
    assert np.isfinite(gx).all()
    # log_softmax(-3.4e38) next to 3.4e38 is -6.8e38: below float32's range, so -inf
    # is the right answer there; every value inside the range is finite
    exact = SWEEP.astype(np.float64) - 3.4e38 if fn is nb.log_softmax else 0.0
    assert np.isfinite(y[np.abs(exact) < 3.4e38]).all()


def test_named_extremes_are_finite_and_right():
    y, gx = forward_backward(nb.gelu_quick, np.array([-60.0], np.float32),
                              np.ones(1, np.float32))
    assert np.isfinite(y).all() and np.isfinite(gx).all()
    # the exact value, -2.7e-43, is subnormal in float32 (8 significant bits at most)
    np.testing.assert_allclose(y, -60 * expit(-102.12), rtol=0.1)
    assert abs(gx[0]) < 1e-40
    y, gx = forward_backward(lambda t: nb.gelu(t, "tanh"),
                              np.array([1e4, -1e4], np.float32), np.ones(2, np.float32))
    np.testing.assert_array_equal(y, [1e4, 0.0])
    np.testing.assert_array_equal(gx, [1.0, 0.0])
    logits = np.array([0.0, 1e4, -1e4], np.float32)
    g = np.array([1.0, 2.0, 3.0], np.float32)
    y, gx = forward_backward(nb.softmax, logits, g)
    np.testing.assert_array_equal(y, [0.0, 1.0, 0.0])
    np.testing.assert_array_equal(gx, [0.0, 0.0, 0.0])
    y, gx = forward_backward(nb.log_softmax, logits, g)
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
    return forward_backward(fn, x, g)


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
            y, gx = forward_backward(fn, x, np.ones_like(x))
            assert y.dtype == dtype and gx.dtype == dtype, name


def test_forward_does_not_modify_its_input():
    x = np.random.default_rng(8).standard_normal((5, 7)).astype(np.float32)
    keep = x.copy()
    for _, fn, _, _ in ELEMENTWISE:
        forward_backward(fn, x, np.ones_like(x))
    for fn in (nb.softmax, nb.log_softmax):
        forward_backward(fn, x, np.ones_like(x))
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
    with pytest.raises(ValueError,
                       match=r"softmax: axis=2 is out of range for x of shape \(2, 3\)"):
        nb.softmax(x, 2)
    with pytest.raises(ValueError, match=r"log_softmax: axis=-3 is out of range"):
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


# -- what each backward reads (issue 49: a point-wise backward reads only what it needs) --------


@pytest.mark.parametrize("name, saves", [("tanh", "output"), ("sigmoid", "output"),
                                         ("silu", "input")])
def test_pointwise_backward_saves_one_array_output_or_input(name, saves):
    """tanh and sigmoid keep only their output y for the backward (g (1 - y^2),
    g y (1 - y)), silu only its input x: one saved array, no derivative array, the
    memory of y or x itself (not a copy)."""
    x = nb.tensor(np.random.default_rng(3).standard_normal(300_000).astype(np.float32),
                  requires_grad=True)
    y = getattr(nb, name)(x)
    (saved,) = y.grad_fn.saved_tensors
    kept = (y if saves == "output" else x).numpy()
    assert np.shares_memory(saved, kept)
    other = (x if saves == "output" else y).numpy()
    assert not np.shares_memory(saved, other)


@pytest.mark.parametrize("name", ["tanh", "sigmoid"])
def test_backward_from_the_output_matches_the_formula(name):
    """dx from y alone: g (1 - y^2) for tanh, g y (1 - y) for sigmoid, evaluated in float64
    on the float32 output the forward returned (large enough for the parallel kernels)."""
    rng = np.random.default_rng(4)
    x = nb.tensor((rng.standard_normal(300_000) * 3).astype(np.float32), requires_grad=True)
    g = rng.standard_normal(300_000).astype(np.float32)
    y = getattr(nb, name)(x)
    y.backward(g)
    y64, g64 = y.numpy().astype(np.float64), g.astype(np.float64)
    want = g64 * (1 - y64 * y64) if name == "tanh" else g64 * y64 * (1 - y64)
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=2e-6, atol=1e-30)
