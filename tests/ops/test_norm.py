"""layer_norm, batch_norm and dropout: NumPy references, gradchecks (samples and
hypothesis), properties, threads, non-finite values."""

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from ops.norm_cases import assert_close, run

import nbgrad as nb
from nbgrad.kernels import norm as norm_kernels
from nbgrad.testing import check_registered, gradcheck, gradgradcheck
from nbgrad.testing import strategies as nbst

OPS = ["layer_norm", "batch_norm", "dropout"]


# -- NumPy references (float64) ------------------------------------------------------------------


def _standardize(x, axes, eps):
    mu = x.mean(axis=axes, keepdims=True)
    rstd = 1 / np.sqrt(((x - mu) ** 2).mean(axis=axes, keepdims=True) + eps)
    return (x - mu) * rstd, rstd


def _input_grad(xhat, rstd, h, axes):
    """rstd (h - mean(h) - xhat mean(h xhat)): docs/derivations.md#normalisation-and-dropout."""
    return rstd * (h - h.mean(axis=axes, keepdims=True)
                   - xhat * (h * xhat).mean(axis=axes, keepdims=True))


def _layer_norm_reference(x, dims, w, b, eps, g):
    """(y, dx, dw, db) of layer norm over the last ``dims`` dims."""
    axes = tuple(range(x.ndim - dims, x.ndim))
    xhat, rstd = _standardize(x, axes, eps)
    w1 = np.ones(x.shape[x.ndim - dims:]) if w is None else w
    y = xhat * w1 + (0 if b is None else b)
    lead = tuple(range(x.ndim - dims))
    return y, _input_grad(xhat, rstd, g * w1, axes), (g * xhat).sum(lead), g.sum(lead)


def _batch_norm_reference(x, running_mean, running_var, w, b, training, eps, g):
    """(y, dx, dw, db) of batch norm over every dim but 1."""
    axes = (0,) + tuple(range(2, x.ndim))
    per_channel = (x.shape[1],) + (1,) * (x.ndim - 2)
    if training:
        xhat, rstd = _standardize(x, axes, eps)
    else:
        rstd = 1 / np.sqrt(running_var.reshape(per_channel) + eps)
        xhat = (x - running_mean.reshape(per_channel)) * rstd
    w1 = (np.ones(x.shape[1]) if w is None else w).reshape(per_channel)
    y = xhat * w1 + (0 if b is None else b.reshape(per_channel))
    dx = _input_grad(xhat, rstd, g * w1, axes) if training else g * w1 * rstd
    return y, dx, (g * xhat).sum(axes), g.sum(axes)



# -- gradchecks -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", OPS)
def test_samples_pass_gradcheck_and_gradgradcheck(name):
    for second_order in (False, True):
        report = check_registered(name, second_order=second_order)
        assert report.samples > 0
        assert report.passed, "\n".join(report.failures)


def _spread(x, axes):
    """Groups with a clear spread: finite differences of 1 / sqrt(var + eps) are noisy
    when var is near 0."""
    return bool(np.all(x.var(axis=axes) > 0.05))


@given(data=st.data(), lead=st.lists(st.integers(1, 3), max_size=2),
       normalized=st.lists(st.integers(1, 4), min_size=1, max_size=2),
       affine=st.sampled_from(["both", "weight", "none"]),
       eps=st.sampled_from([1e-5, 0.1, 1.0]))
def test_layer_norm_gradcheck_hypothesis(data, lead, normalized, affine, eps):
    shape = tuple(lead + normalized)
    assume(np.prod(normalized) > 1)
    x = data.draw(nbst.arrays(np.float64, shape))
    assume(_spread(x.reshape(-1, int(np.prod(normalized))), 1))
    dims = tuple(normalized)
    w = data.draw(nbst.arrays(np.float64, dims, 0.5, 2.0)) if affine != "none" else None
    b = data.draw(nbst.arrays(np.float64, dims)) if affine == "both" else None
    inputs = [x] + [p for p in (w, b) if p is not None]

    def fn(xx, *params):
        return nb.layer_norm(xx, dims, *params, eps=eps)

    gradcheck(fn, inputs)
    gradgradcheck(fn, inputs)


@given(data=st.data(), n=st.integers(1, 4), c=st.integers(1, 3),
       spatial=st.lists(st.integers(1, 3), max_size=2), training=st.booleans(),
       affine=st.booleans())
def test_batch_norm_gradcheck_hypothesis(data, n, c, spatial, training, affine):
    shape = (n, c) + tuple(spatial)
    assume(not training or n * np.prod(spatial) > 1)
    x = data.draw(nbst.arrays(np.float64, shape))
    axes = (0,) + tuple(range(2, x.ndim))
    assume(not training or _spread(x, axes))
    rm = data.draw(nbst.arrays(np.float64, (c,)))
    rv = data.draw(nbst.arrays(np.float64, (c,), 0.2, 2.0))
    params = ([data.draw(nbst.arrays(np.float64, (c,), 0.5, 2.0)),
               data.draw(nbst.arrays(np.float64, (c,)))] if affine else [])

    def fn(xx, *wb):
        return nb.batch_norm(xx, rm.copy(), rv.copy(), *wb, training=training)

    gradcheck(fn, [x] + params)
    gradgradcheck(fn, [x] + params)


# -- NumPy reference values and gradients -------------------------------------------------------


LAYER_NORM_CASES = [((7, 33), 1, True, True), ((3, 4, 5), 2, True, True),
                    ((6, 10), 1, False, False), ((2, 3, 8), 1, True, False), ((9,), 1, True, True)]


@pytest.mark.parametrize("shape, dims, with_w, with_b", LAYER_NORM_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layer_norm_matches_reference(shape, dims, with_w, with_b, dtype):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(shape) * 2 + 0.5).astype(dtype)
    pshape = shape[len(shape) - dims:]
    w = rng.uniform(0.5, 1.5, pshape).astype(dtype) if with_w else None
    b = rng.standard_normal(pshape).astype(dtype) if with_b else None
    g = rng.standard_normal(shape).astype(dtype)
    ours = run(lambda xt, *p: nb.layer_norm(xt, pshape, *p), x, [w, b], g)
    y, dx, dw, db = _layer_norm_reference(x.astype(np.float64), dims, w, b, 1e-5,
                                          g.astype(np.float64))
    assert_close(ours, [y, dx, dw if with_w else None, db if with_b else None], dtype)


@pytest.mark.parametrize("shape", [(16, 5), (4, 3, 7), (3, 4, 5, 6)])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batch_norm_matches_reference_and_updates_running_stats(shape, training, dtype):
    rng = np.random.default_rng(2)
    c = shape[1]
    x = (rng.standard_normal(shape) * 3 - 1).astype(dtype)
    w = rng.uniform(0.5, 1.5, c).astype(dtype)
    b = rng.standard_normal(c).astype(dtype)
    rm, rv = rng.standard_normal(c).astype(dtype), rng.uniform(0.5, 2, c).astype(dtype)
    rm0, rv0 = rm.astype(np.float64), rv.astype(np.float64)
    g = rng.standard_normal(shape).astype(dtype)
    ours = run(lambda xt, *p: nb.batch_norm(xt, rm, rv, *p, training=training,
                                             momentum=0.3), x, [w, b], g)
    x64 = x.astype(np.float64)
    want = _batch_norm_reference(x64, rm0, rv0, w.astype(np.float64), b.astype(np.float64),
                                 training, 1e-5, g.astype(np.float64))
    assert_close(ours, want, dtype)
    axes = (0,) + tuple(range(2, x.ndim))
    if training:
        m = x64.size // c
        want_rm = 0.7 * rm0 + 0.3 * x64.mean(axis=axes)
        want_rv = 0.7 * rv0 + 0.3 * x64.var(axis=axes) * m / (m - 1)
    else:
        want_rm, want_rv = rm0, rv0
    assert_close([rm, rv], [want_rm, want_rv], dtype)


@pytest.mark.parametrize("shape", [(8, 256), (512, 3), (64, 3, 8, 8)])
def test_float32_statistics_are_accurate_for_a_large_mean(shape):
    """The two-pass variance: groups of 1e4 + N(0, 1) keep their spread in float32."""
    rng = np.random.default_rng(3)
    x = (1e4 + rng.standard_normal(shape)).astype(np.float32)
    g = rng.standard_normal(x.shape).astype(np.float32)
    x64, g64 = x.astype(np.float64), g.astype(np.float64)
    if len(shape) == 2 and shape[1] == 256:
        got = run(lambda t: nb.layer_norm(t, 256), x, [], g)
        want = _layer_norm_reference(x64, 1, None, None, 1e-5, g64)
    else:
        got = run(lambda t: nb.batch_norm(t, None, None, training=True), x, [], g)
        want = _batch_norm_reference(x64, None, None, None, None, True, 1e-5, g64)
    np.testing.assert_allclose(got[0], want[0], atol=1e-3)
    np.testing.assert_allclose(got[1], want[1], atol=1e-3)


def test_strided_input_and_broadcast_upstream_gradient():
    rng = np.random.default_rng(4)
    base = rng.standard_normal((6, 5))
    xt = nb.tensor(base, requires_grad=True)
    y = nb.layer_norm(xt.T, 6)                          # a transposed view: strided
    y.sum().backward()                                  # g broadcast from a scalar
    want = _layer_norm_reference(base.T, 1, None, None, 1e-5, np.ones((5, 6)))
    np.testing.assert_allclose(y.numpy(), want[0], atol=1e-12)
    np.testing.assert_allclose(xt.grad.numpy(), want[1].T, atol=1e-12)


# -- properties --------------------------------------------------------------------------------


@given(x=nbst.arrays(np.float64, st.tuples(st.integers(1, 4), st.integers(2, 6))),
       shift=st.floats(-100, 100), data=st.data())
def test_layer_norm_is_shift_invariant_and_its_gradient_sums_to_zero(x, shift, data):
    assume(_spread(x, 1))
    g = data.draw(nbst.arrays(np.float64, x.shape))
    w = data.draw(nbst.arrays(np.float64, x.shape[1:], 0.5, 2.0))
    y, dx, _ = run(lambda t, wt: nb.layer_norm(t, x.shape[1], wt), x, [w], g)
    y_shifted = nb.layer_norm(x + shift, x.shape[1], w).numpy()
    np.testing.assert_allclose(y_shifted, y, atol=1e-9)
    np.testing.assert_allclose(dx.sum(axis=1), 0, atol=1e-9 * (1 + np.abs(g).max()))


@given(x=nbst.arrays(np.float64, st.tuples(st.integers(2, 5), st.integers(1, 3),
                                           st.integers(1, 3))), data=st.data())
def test_batch_norm_training_output_is_standardized_per_channel(x, data):
    assume(_spread(x, (0, 2)))
    y = nb.batch_norm(x, None, None, training=True, eps=0.0).numpy()
    np.testing.assert_allclose(y.mean(axis=(0, 2)), 0, atol=1e-9)
    np.testing.assert_allclose(y.var(axis=(0, 2)), 1, atol=1e-9)


@given(x=nbst.arrays(np.float32, max_dims=3, max_side=6),
       p=st.one_of(st.sampled_from([0.0, 1.0]), st.floats(0, 1, exclude_max=True)),
       seed=st.integers(0, 2**32 - 1))
def test_dropout_keeps_scaled_values_or_zeros(x, p, seed):
    xt = nb.tensor(x, requires_grad=True)
    y = nb.dropout(xt, p, generator=seed)
    y.backward(np.ones_like(x))
    scale = np.float32(0.0 if p == 1 else 1 / (1 - p))
    kept = y.numpy() != 0
    np.testing.assert_array_equal(y.numpy()[kept], x[kept] * scale)
    # the gradient is the mask times the scale, also where x itself is 0
    grad = xt.grad.numpy()
    assert set(np.unique(grad)) <= {np.float32(0), scale}
    np.testing.assert_array_equal(y.numpy(), x * grad)
    np.testing.assert_array_equal(nb.dropout(x, p, generator=seed).numpy(), y.numpy())


def test_dropout_keeps_about_one_minus_p_and_preserves_the_mean():
    x = np.ones((1000, 1000), np.float32)
    for p in (0.1, 0.5, 0.9):
        y = nb.dropout(x, p, generator=5).numpy()
        assert abs((y != 0).mean() - (1 - p)) < 3e-3
        assert abs(y.mean() - 1) < 1e-2


def test_dropout_draws_from_the_default_generator_reseeded_by_manual_seed():
    x = np.ones(64, np.float32)
    nb.manual_seed(11)
    first = nb.dropout(x).numpy()
    second = nb.dropout(x).numpy()
    nb.manual_seed(11)
    np.testing.assert_array_equal(nb.dropout(x).numpy(), first)
    assert not np.array_equal(first, second)
    gen = np.random.default_rng(3)
    np.testing.assert_array_equal(nb.dropout(x, generator=gen).numpy(),
                                  nb.dropout(x, generator=np.random.default_rng(3)).numpy())


def test_dropout_edge_probabilities_and_evaluation():
    x = nb.tensor(np.array([-1.0, 2.0, np.nan, np.inf], np.float32), requires_grad=True)
    assert nb.dropout(x, 0.3, training=False) is x
    y = nb.dropout(x, 1.0)
    # everything dropped: x * 0, so -0.0, 0.0, NaN, NaN (as PyTorch)
    np.testing.assert_array_equal(np.signbit(y.numpy()[:2]), [True, False])
    assert np.isnan(y.numpy()[2:]).all()
    y.backward(np.ones(4, np.float32))
    np.testing.assert_array_equal(x.grad.numpy(), 0)
    np.testing.assert_array_equal(nb.dropout(x, 0.0).numpy()[[0, 1, 3]], [-1, 2, np.inf])


# -- threads and serial/parallel forms ----------------------------------------------------------


def _layer_norm_all(x, w, b, g):
    return run(lambda t, *p: nb.layer_norm(t, x.shape[-1], *p), x, [w, b], g)


def _batch_norm_all(x, w, b, g, training):
    c = x.shape[1]
    rm, rv = np.zeros(c, x.dtype), np.ones(c, x.dtype)
    out = run(lambda t, *p: nb.batch_norm(t, rm, rv, *p, training=training), x, [w, b], g)
    return out + (rm, rv)


@pytest.mark.parametrize("op, shape", [
    ("layer_norm", (1000, 389)), ("batch_norm train", (64, 16, 12, 12)),
    ("batch_norm eval", (64, 16, 12, 12)), ("batch_norm train", (1000, 389)),
    ("batch_norm eval", (1000, 389))])                       # sizes above PARALLEL_MIN
def test_one_and_two_threads_give_the_same_bits(op, shape):
    rng = np.random.default_rng(6)
    d = shape[-1] if op == "layer_norm" else shape[1]
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    g = rng.standard_normal(shape).astype(np.float32)
    w, b = rng.uniform(0.5, 1.5, d).astype(np.float32), rng.standard_normal(d).astype(np.float32)
    run = _layer_norm_all if op == "layer_norm" else (
        lambda *a: _batch_norm_all(*a, training=op == "batch_norm train"))
    one, two = at_threads(1, run, x, w, b, g), at_threads(2, run, x, w, b, g)
    for a, c in zip(one, two):
        assert_same_bits(a, c)


def test_serial_and_parallel_kernels_give_the_same_bits():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((300, 70)).astype(np.float32)
    g = rng.standard_normal(x.shape).astype(np.float32)
    w, b = rng.standard_normal(70).astype(np.float32), rng.standard_normal(70).astype(np.float32)

    def layer_norm(kernels):
        fwd, bwd = kernels
        y, m, r = np.empty_like(x), np.empty(300, np.float32), np.empty(300, np.float32)
        fwd(x, w, b, 1e-5, y, m, r)
        dx, dw, db = np.empty_like(x), np.empty(70, np.float32), np.empty(70, np.float32)
        bwd(g, x, w, m, r, True, dx, dw, db)
        return y, dx, dw, db

    def batch_norm(kernels):
        fwd, bwd = kernels
        x3, g3 = x.reshape(30, 10, 70), g.reshape(30, 10, 70)
        m, v, r = (np.empty(10, np.float32) for _ in range(3))
        y = np.empty_like(x3)
        fwd(x3, w[:10], b[:10], True, 1e-5, m, v, r, y)
        dx, dw, db = np.empty_like(x3), np.empty(10, np.float32), np.empty(10, np.float32)
        bwd(g3, x3, w[:10], m, r, True, dx, dw, db)
        return y, dx, dw, db

    def batch_norm_columns(kernels):
        fwd, bwd = kernels
        m, v, r = (np.empty(70, np.float32) for _ in range(3))
        y = np.empty_like(x)
        fwd(x, w, b, True, 1e-5, m, v, r, y)
        dx, dw, db = np.empty_like(x), np.empty(70, np.float32), np.empty(70, np.float32)
        bwd(g, x, w, m, r, True, dx, dw, db)
        return y, dx, dw, db

    k = norm_kernels
    for fn, pair in ((layer_norm, (k.layer_norm_forward, k.layer_norm_backward)),
                     (batch_norm, (k.batch_norm_forward, k.batch_norm_backward)),
                     (batch_norm_columns, (k.batch_norm_forward_columns,
                                           k.batch_norm_backward_columns))):
        parallel = fn(pair)
        serial = fn(tuple(kernel.serial for kernel in pair))
        for a, c in zip(parallel, serial):
            assert_same_bits(a, c)


# -- non-finite values -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nan_and_inf_poison_only_their_group_like_pytorch(dtype):
    torch = pytest.importorskip("torch")
    f = torch.nn.functional
    rng = np.random.default_rng(8)
    x = rng.standard_normal((4, 5)).astype(dtype)
    x[1, 2], x[2, 0] = np.nan, np.inf
    g = rng.standard_normal(x.shape).astype(dtype)
    w, b = rng.uniform(0.5, 1.5, 5).astype(dtype), rng.standard_normal(5).astype(dtype)
    cases = [(lambda t, *p: nb.layer_norm(t, 5, *p), lambda t, *p: f.layer_norm(t, (5,), *p)),
             (lambda t, *p: nb.batch_norm(t, None, None, *p, training=True),
              lambda t, *p: f.batch_norm(t, None, None, *p, training=True))]
    for ours, theirs in cases:
        got = run(ours, x, [w, b], g)
        tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
        ty = theirs(tx, tw, tb)
        ty.backward(torch.tensor(g))
        want = [ty.detach().numpy(), tx.grad.numpy(), tw.grad.numpy(), tb.grad.numpy()]
        for a, c in zip(got, want):
            np.testing.assert_array_equal(np.isnan(a), np.isnan(c))
            np.testing.assert_allclose(a, c, rtol=1e-4, atol=1e-5)


# NaN, infinities, signed zeros and subnormals among ordinary values; not the huge ones,
# whose squares overflow (docs/derivations.md#normalisation-and-dropout).
_SPECIAL_OR_ORDINARY = st.one_of(
    st.sampled_from([v for v in nbst.special_values(np.float32, huge=False) if abs(v) < 1e30]),
    st.floats(-3, 3, width=32))


@given(x=hnp.arrays(np.float32, st.tuples(st.integers(2, 4), st.integers(1, 5)),
                         elements=_SPECIAL_OR_ORDINARY),
       op=st.sampled_from(["layer_norm", "batch_norm"]))
def test_special_values_give_pytorchs_nans_and_infinities(x, op):
    torch = pytest.importorskip("torch")
    f = torch.nn.functional
    g = np.full(x.shape, 0.7, np.float32)
    if op == "layer_norm":
        got = run(lambda t: nb.layer_norm(t, x.shape[1]), x, [], g)
        theirs = lambda t: f.layer_norm(t, x.shape[1:])  # noqa: E731
    else:
        got = run(lambda t: nb.batch_norm(t, None, None, training=True), x, [], g)
        theirs = lambda t: f.batch_norm(t, None, None, training=True)  # noqa: E731
    tx = torch.tensor(x, requires_grad=True)
    ty = theirs(tx)
    ty.backward(torch.tensor(g))
    # x's gradient is a difference of terms of size |g| / std, which cancel exactly for a
    # constant g: both sides' rounding errors grow with 1 / std (a row [-0.90625, -0.875]:
    # nbgrad 5e-7, PyTorch 1.3e-4, exactly 0)
    with np.errstate(all="ignore"):
        rstd = 1 / np.sqrt(np.var(x.astype(np.float64), axis=int(op == "layer_norm")) + 1e-5)
    grad_atol = 1e-4 * max(1.0, 0.7 * float(np.max(rstd, where=np.isfinite(rstd), initial=1)))
    for a, c, atol in zip(got, [ty.detach().numpy(), tx.grad.numpy()], [1e-4, grad_atol]):
        np.testing.assert_array_equal(np.isnan(a), np.isnan(c))
        np.testing.assert_allclose(a, c, rtol=1e-4, atol=atol)
