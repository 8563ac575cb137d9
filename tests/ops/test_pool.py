"""max_pool2d and avg_pool2d: gradchecks over drawn parameters, Python loop references,
tie and NaN rules, the 2x2 fast path against the general kernel, PyTorch oracle, threads,
bad input."""

import itertools

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads
from hypothesis import given
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.kernels import pool as K
from nbgrad.ops import pool as pool_ops
from nbgrad.testing import check_registered, gradcheck
from nbgrad.testing.strategies_conv import pool2d_configs


def _pool_kwargs(cfg, dilation=True):
    keys = ("kernel_size", "stride", "padding") + (("dilation",) if dilation else ())
    return {k: cfg[k] for k in keys}


def _distinct(shape, seed=0):
    """Distinct values (no ties): a shuffled grid spaced 1/7 apart, centred on 0."""
    n = int(np.prod(shape))
    return (np.random.default_rng(seed).permutation(n).reshape(shape) - n / 2) / 7.0


def _windows(H, W, kernel, stride, padding, dilation):
    """For each output (oh, ow): the in-bounds input positions of its window, row-major,
    and the full window size."""
    stride = kernel if stride is None else stride
    OH = (H + 2 * padding[0] - dilation[0] * (kernel[0] - 1) - 1) // stride[0] + 1
    OW = (W + 2 * padding[1] - dilation[1] * (kernel[1] - 1) - 1) // stride[1] + 1
    out = {}
    for oh, ow in itertools.product(range(OH), range(OW)):
        taps = [(oh * stride[0] - padding[0] + kh * dilation[0],
                 ow * stride[1] - padding[1] + kw * dilation[1])
                for kh in range(kernel[0]) for kw in range(kernel[1])]
        out[oh, ow] = [(i, j) for i, j in taps if 0 <= i < H and 0 <= j < W]
    return out, (OH, OW)


def ref_max_pool2d(x, g, kernel, stride, padding, dilation):
    """y and dx from the definition: the gradient goes to the first maximum (row-major),
    or to the last NaN of a window that has one (PyTorch's rule)."""
    N, C, H, W = x.shape
    wins, (OH, OW) = _windows(H, W, kernel, stride, padding, dilation)
    y, dx = np.full((N, C, OH, OW), -np.inf), np.zeros_like(x)
    for n, c in itertools.product(range(N), range(C)):
        for (oh, ow), taps in wins.items():
            if not taps:  # dilation stepped over the whole input: -inf, no gradient
                continue
            vals = [x[n, c, i, j] for i, j in taps]
            nans = np.flatnonzero(np.isnan(vals))
            pick = int(nans[-1]) if nans.size else int(np.argmax(vals))
            y[n, c, oh, ow] = vals[pick]
            dx[n, c, taps[pick][0], taps[pick][1]] += g[n, c, oh, ow]
    return y, dx


def ref_avg_pool2d(x, g, kernel, stride, padding, count_include_pad):
    N, C, H, W = x.shape
    wins, (OH, OW) = _windows(H, W, kernel, stride, padding, (1, 1))
    y, dx = np.zeros((N, C, OH, OW)), np.zeros_like(x)
    for n, c in itertools.product(range(N), range(C)):
        for (oh, ow), taps in wins.items():
            div = kernel[0] * kernel[1] if count_include_pad else len(taps)
            y[n, c, oh, ow] = sum(x[n, c, i, j] for i, j in taps) / div
            for i, j in taps:
                dx[n, c, i, j] += g[n, c, oh, ow] / div
    return y, dx


def _run(fn, x, **kwargs):
    xt = nb.tensor(x, requires_grad=True)
    y = fn(xt, **kwargs)
    g = np.random.default_rng(1).standard_normal(y.shape).astype(x.dtype)
    y.backward(g)
    return y.numpy(), xt.grad.numpy(), g


# -- gradchecks and references over drawn parameters -------------------------------------
@given(cfg=pool2d_configs(max_batch=1, max_channels=2))
def test_max_pool2d_gradcheck(cfg):
    gradcheck(lambda x: nb.max_pool2d(x, **_pool_kwargs(cfg)), [_distinct(cfg["x_shape"])])


@given(cfg=pool2d_configs(max_batch=1, max_channels=2, dilation=False),
       include=st.booleans())
def test_avg_pool2d_gradcheck(cfg, include):
    x = np.random.default_rng(2).standard_normal(cfg["x_shape"])
    gradcheck(lambda x: nb.avg_pool2d(x, count_include_pad=include,
                                      **_pool_kwargs(cfg, dilation=False)), [x])


@given(cfg=pool2d_configs())
def test_max_pool2d_matches_reference(cfg):
    x = _distinct(cfg["x_shape"])
    y, dx, g = _run(nb.max_pool2d, x, **_pool_kwargs(cfg))
    kernel = cfg["kernel_size"]
    y_ref, dx_ref = ref_max_pool2d(x, g, kernel, cfg["stride"], cfg["padding"],
                                   cfg["dilation"])
    np.testing.assert_array_equal(y, y_ref)
    np.testing.assert_allclose(dx, dx_ref, rtol=1e-14, atol=1e-14)


@given(cfg=pool2d_configs(dilation=False), include=st.booleans())
def test_avg_pool2d_matches_reference(cfg, include):
    x = np.random.default_rng(3).standard_normal(cfg["x_shape"])
    y, dx, g = _run(nb.avg_pool2d, x, count_include_pad=include,
                    **_pool_kwargs(cfg, dilation=False))
    y_ref, dx_ref = ref_avg_pool2d(x, g, cfg["kernel_size"], cfg["stride"], cfg["padding"],
                                   include)
    np.testing.assert_allclose(y, y_ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dx, dx_ref, rtol=1e-12, atol=1e-12)


# -- ties, NaN, fast path -------------------------------------------------------------------
def test_ties_go_to_the_first_maximum_in_row_major_order():
    """All-equal input: each window's gradient lands on its top-left element; with
    overlapping 3x3 windows (stride 1) on a 4x4 plane, windows (0,0), (0,1), (1,0), (1,1)
    pick (0,0), (0,1), (1,0), (1,1)."""
    _, dx, _ = _run(nb.max_pool2d, np.ones((1, 1, 4, 4)), kernel_size=2)
    np.testing.assert_array_equal(dx[0, 0] != 0, [[1, 0, 1, 0], [0, 0, 0, 0],
                                                   [1, 0, 1, 0], [0, 0, 0, 0]])
    xt = nb.tensor(np.ones((1, 1, 4, 4)), requires_grad=True)
    nb.max_pool2d(xt, 3, stride=1).backward(np.array([[[[1.0, 2.0], [4.0, 8.0]]]]))
    np.testing.assert_array_equal(xt.grad.numpy()[0, 0], [[1, 2, 0, 0], [4, 8, 0, 0],
                                                          [0, 0, 0, 0], [0, 0, 0, 0]])


def test_padding_is_minus_infinity_and_nan_propagates():
    x = np.full((1, 1, 2, 2), -5.0)
    y = nb.max_pool2d(x, 3, stride=1, padding=1).numpy()
    np.testing.assert_array_equal(y, np.full((1, 1, 2, 2), -5.0))
    x = np.arange(16.0).reshape(1, 1, 4, 4)
    x[0, 0, 0, 1] = np.nan
    xt = nb.tensor(x, requires_grad=True)
    y = nb.max_pool2d(xt, 2)
    assert np.isnan(y.numpy()[0, 0, 0, 0]) and y.numpy()[0, 0, 1, 1] == 15
    y.backward(np.ones((1, 1, 2, 2)))
    assert xt.grad.numpy()[0, 0, 0, 1] == 1 and xt.grad.numpy()[0, 0, 1, 1] == 0


@pytest.mark.parametrize("kernel, stride, padding", [((2, 2), (2, 2), (0, 0)),  # fast path
                                                    ((2, 2), (2, 2), (1, 1)),
                                                    ((3, 3), (1, 1), (1, 1))])
def test_nan_windows_send_the_gradient_to_their_last_nan(kernel, stride, padding):
    """As PyTorch: every NaN replaces the running maximum, so a window with several NaNs
    outputs NaN and routes its gradient to the last one in row-major order (x[1, 0] for
    the 2x2 window over x[0, 1] and x[1, 0])."""
    x = np.arange(16.0).reshape(1, 1, 4, 4)
    x[0, 0, 0, 1] = x[0, 0, 1, 0] = x[0, 0, 2, 3] = np.nan
    y, dx, g = _run(nb.max_pool2d, x, kernel_size=kernel, stride=stride, padding=padding)
    y_ref, dx_ref = ref_max_pool2d(x, g, kernel, stride, padding, (1, 1))
    np.testing.assert_array_equal(y, y_ref)
    np.testing.assert_allclose(dx, dx_ref, rtol=1e-14, atol=1e-14)
    if padding == (0, 0):
        assert dx[0, 0, 1, 0] == g[0, 0, 0, 0] and dx[0, 0, 0, 1] == 0


def test_window_missing_the_input_gives_minus_infinity_and_no_gradient():
    """kernel 2, padding 1, dilation 5 on 4x4: window (0, 0) taps rows/cols -1 and 4."""
    xt = nb.tensor(np.ones((1, 1, 4, 4)), requires_grad=True)
    y = nb.max_pool2d(xt, 2, stride=1, padding=1, dilation=5)
    assert y.shape == (1, 1, 1, 1) and y.numpy()[0, 0, 0, 0] == -np.inf
    y.backward(np.ones((1, 1, 1, 1)))
    assert np.all(xt.grad.numpy() == 0)


@given(n=st.integers(1, 12), h=st.integers(2, 9), w=st.integers(2, 21),
       dtype=st.sampled_from([np.float32, np.float64]), ties=st.booleans(),
       nans=st.integers(0, 6))
def test_2x2_fast_path_matches_general_kernel(n, h, w, dtype, ties, nans):
    """The fast path (runs of whole planes through a table of windows, several runs and a
    partial one once n*3 planes exceed WINDOW_RUN windows; row by row from WINDOW_ROW_MIN
    windows per row, w >= 16) against the general loop nest, ties and NaNs included."""
    rng = np.random.default_rng(h * 10 + w)
    x = rng.integers(0, 3, (n, 3, h, w)) if ties else rng.standard_normal((n, 3, h, w))
    x = x.astype(dtype)
    x.flat[rng.integers(0, x.size, nans)] = np.nan
    y_fast, i_fast = K.max_pool2d_2x2_forward(x)
    y_gen, i_gen = K.max_pool2d_forward(x, 2, 2, 2, 2, 0, 0, 1, 1, h // 2, w // 2)
    assert_same_bits(y_fast, y_gen)
    assert_same_bits(i_fast, i_gen)


# -- dtype, unbatched, threads -------------------------------------------------------------
def test_float32_stays_float32_and_unbatched():
    x = _distinct((3, 6, 5)).astype(np.float32)
    for fn in (nb.max_pool2d, nb.avg_pool2d):
        y, dx, _ = _run(fn, x, kernel_size=3, stride=2, padding=1)
        assert y.dtype == dx.dtype == np.float32 and y.shape == (3, 3, 3)
        y4, dx4, _ = _run(fn, x[None], kernel_size=3, stride=2, padding=1)
        np.testing.assert_array_equal(y, y4[0])


@pytest.mark.parametrize("fn, kwargs", [
    (nb.max_pool2d, dict(kernel_size=2)),
    (nb.max_pool2d, dict(kernel_size=(3, 2), stride=(2, 1), padding=1, dilation=(1, 2))),
    (nb.avg_pool2d, dict(kernel_size=3, stride=1, padding=1, count_include_pad=False)),
])
def test_one_and_two_threads_bitwise(fn, kwargs):
    x = np.random.default_rng(4).standard_normal((4, 5, 12, 13)).astype(np.float32)
    one = at_threads(1, _run, fn, x, **kwargs)
    two = at_threads(2, _run, fn, x, **kwargs)
    for a, b in zip(one, two):
        assert_same_bits(a, b)


# -- PyTorch oracle -------------------------------------------------------------------------
@given(cfg=pool2d_configs(max_kernel=4), dtype=st.sampled_from([np.float32, np.float64]))
def test_max_pool2d_torch_oracle(cfg, dtype):
    torch = pytest.importorskip("torch")
    x = _distinct(cfg["x_shape"]).astype(dtype)
    y, dx, g = _run(nb.max_pool2d, x, **_pool_kwargs(cfg))
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.nn.functional.max_pool2d(xt, **_pool_kwargs(cfg))
    yt.backward(torch.tensor(g))
    np.testing.assert_array_equal(y, yt.detach().numpy())
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-6, atol=1e-6)


@given(cfg=pool2d_configs(max_kernel=4, dilation=False), include=st.booleans(),
       dtype=st.sampled_from([np.float32, np.float64]))
def test_avg_pool2d_torch_oracle(cfg, include, dtype):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(5).standard_normal(cfg["x_shape"]).astype(dtype)
    kwargs = _pool_kwargs(cfg, dilation=False)
    y, dx, g = _run(nb.avg_pool2d, x, count_include_pad=include, **kwargs)
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.nn.functional.avg_pool2d(xt, count_include_pad=include, **kwargs)
    yt.backward(torch.tensor(g))
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=tol, atol=tol)


# -- bad input ------------------------------------------------------------------------------
X = np.zeros((2, 3, 5, 5))


@pytest.mark.parametrize("fn", [nb.max_pool2d, nb.avg_pool2d])
@pytest.mark.parametrize("args, kwargs, match", [
    ((X, 3), {"padding": 2}, r"padding \(2, 2\) must be at most half the kernel size \(3, 3\)"),
    ((X, 6), {}, r"the dilated kernel \(6, 6\) is larger than the padded input \(5, 5\)"),
    ((X, 2), {"stride": 0}, r"stride must be positive, got 0"),
    ((X, (0, 2)), {}, r"kernel_size must be positive"),
    ((X, 2), {"padding": -1}, r"padding must be non-negative"),
    ((np.zeros((5, 5)), 2), {}, r"x must be \[N, C, H, W\] or unbatched \[C, H, W\], "
                                r"got shape \(5, 5\)"),
    # PyTorch's rule: only the batch may be empty
    ((np.zeros((2, 0, 5, 5)), 2), {}, r"x must have channels, rows and columns \(only the "
                                      r"batch may be empty\), got shape \(2, 0, 5, 5\)"),
    ((np.zeros((0, 5, 5)), 2), {}, r"x must have channels, rows and columns"),
    ((np.zeros((2, 3, 0, 5)), 2), {"padding": 1}, r"x must have channels, rows and columns"),
    ((np.zeros((2, 3, 5, 0)), 2), {}, r"x must have channels, rows and columns"),
])
def test_value_errors(fn, args, kwargs, match):
    with pytest.raises(ValueError, match=f"{fn.__name__}: {match}"):
        fn(*args, **kwargs)


def test_type_errors_and_dilation():
    with pytest.raises(TypeError,
                       match=r"max_pool2d: x must be float32 or float64, got nbgrad.int64"):
        nb.max_pool2d(X.astype(np.int64), 2)
    with pytest.raises(TypeError, match=r"avg_pool2d: kernel_size must be an int or a pair"):
        nb.avg_pool2d(X, (2, 2, 2))
    with pytest.raises(ValueError, match=r"max_pool2d: the dilated kernel \(9, 3\) is larger"):
        nb.max_pool2d(X, (3, 2), dilation=(4, 2))


# -- second derivatives ---------------------------------------------------------------------
@pytest.mark.parametrize("name", ["max_pool2d", "avg_pool2d", "max_pool2d_grad",
                                  "avg_pool2d_grad"])
def test_gradgradcheck_registered(name):
    for second_order in (False, True):
        report = check_registered(name, second_order=second_order)
        assert report.passed, "\n".join(report.failures)


def _second_derivative_against_torch(ours, theirs, x, v):
    """With L = <pool(x)^2, v>: grad of |dL/dx|^2 w.r.t. x and v (double backward through
    the pooling backward), ours against torch.autograd.grad with create_graph."""
    torch = pytest.importorskip("torch")
    xt, vt = torch.tensor(x, requires_grad=True), torch.tensor(v, requires_grad=True)
    (dt,) = torch.autograd.grad((theirs(xt) ** 2 * vt).sum(), [xt], create_graph=True)
    expected = torch.autograd.grad((dt * dt).sum(), [xt, vt])
    xn, vn = nb.tensor(x, requires_grad=True), nb.tensor(v, requires_grad=True)
    y = ours(xn)
    (dn,) = nb.grad((y * y * vn).sum(), [xn], create_graph=True)
    np.testing.assert_allclose(dn.numpy(), dt.detach().numpy(), rtol=1e-12, atol=1e-12)
    for got, e in zip(nb.grad((dn * dn).sum(), [xn, vn]), expected):
        np.testing.assert_allclose(got.numpy(), e.numpy(), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("shape, kw", [
    ((2, 3, 6, 7), dict(kernel_size=2)),
    ((1, 2, 7, 6), dict(kernel_size=(3, 2), stride=(2, 1), padding=1, dilation=(1, 2))),
    ((2, 5, 5), dict(kernel_size=3, stride=2, padding=1)),
])
def test_max_pool2d_second_derivative_torch_oracle(shape, kw):
    torch = pytest.importorskip("torch")
    x = _distinct(shape, seed=3)
    v = np.random.default_rng(4).standard_normal(nb.max_pool2d(x, **kw).shape)
    _second_derivative_against_torch(lambda t: nb.max_pool2d(t, **kw),
                                     lambda t: torch.nn.functional.max_pool2d(t, **kw), x, v)


@pytest.mark.parametrize("include", [True, False])
@pytest.mark.parametrize("shape, kw", [
    ((2, 3, 6, 7), dict(kernel_size=2)),
    ((1, 2, 7, 6), dict(kernel_size=(3, 2), stride=(2, 1), padding=1)),
    ((2, 5, 5), dict(kernel_size=3, stride=2, padding=1)),
])
def test_avg_pool2d_second_derivative_torch_oracle(shape, kw, include):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    x = rng.standard_normal(shape)
    v = rng.standard_normal(nb.avg_pool2d(x, **kw).shape)
    _second_derivative_against_torch(
        lambda t: nb.avg_pool2d(t, count_include_pad=include, **kw),
        lambda t: torch.nn.functional.avg_pool2d(t, count_include_pad=include, **kw), x, v)


def test_max_pool2d_vjp_is_linear_in_g_with_zero_second_derivative_in_x():
    x = nb.tensor(_distinct((1, 2, 4, 4)), requires_grad=True)
    g = nb.tensor(np.random.default_rng(6).standard_normal((1, 2, 2, 2)), requires_grad=True)
    (dx,) = nb.grad(nb.max_pool2d(x, 2), [x], grad_outputs=[g], create_graph=True)
    hx, hg = nb.grad((dx * dx).sum(), [x, g])
    assert hx is None or not np.any(hx.numpy())
    np.testing.assert_array_equal(hg.numpy(), 2 * g.numpy())


@pytest.mark.parametrize("fn, kwargs", [
    (nb.max_pool2d, dict(kernel_size=2)),
    (nb.max_pool2d, dict(kernel_size=3, stride=2, padding=1)),
    (nb.avg_pool2d, dict(kernel_size=2)),
    (nb.avg_pool2d, dict(kernel_size=3, stride=1, padding=1, count_include_pad=False)),
])
@pytest.mark.parametrize("shape", [(37, 16, 8, 8), (37, 32, 4, 4), (0, 3, 4, 4)])
def test_small_maps_serial_and_parallel_forms_bitwise(fn, kwargs, shape):
    """Digits-like small maps (and an empty batch): the serial kernels and the parallel
    ones at 1 and 2 threads give the same bits; N = 0 gives an empty gradient."""
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    saved = pool_ops.POOL_PARALLEL_MIN
    try:
        pool_ops.POOL_PARALLEL_MIN = 1 << 62
        serial = _run(fn, x, **kwargs)
        pool_ops.POOL_PARALLEL_MIN = 0
        one = at_threads(1, _run, fn, x, **kwargs)
        two = at_threads(2, _run, fn, x, **kwargs)
    finally:
        pool_ops.POOL_PARALLEL_MIN = saved
    for s, a, b in zip(serial, one, two):
        assert_same_bits(s, a)
        assert_same_bits(s, b)
