"""max_pool2d's ceil_mode and return_indices, avg_pool2d's ceil_mode, count_include_pad and
divisor_override, and the MaxPool2d/AvgPool2d layers that pass them: Python loop
references, PyTorch oracles (output sizes, values, indices, gradients, second
derivatives, non-finite inputs), gradchecks over drawn parameters, threads, bad input."""

import itertools

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad import nn
from nbgrad.function import REGISTRY
from nbgrad.ops import pool as pool_ops
from nbgrad.testing import gradcheck

DTYPES = st.sampled_from([np.float32, np.float64])
DIVISORS = st.sampled_from([None, 1, 3, 7, -2])


# -- references -----------------------------------------------------------------------------
def ref_out_len(size, kernel, stride, pad, dilation, ceil_mode):
    """The output size of PyTorch's pooling docs: floor or ceil of
    (size + 2 pad - dilation (kernel - 1) - 1) / stride, plus 1; in ceil_mode a last
    window that would start in the right padding is dropped."""
    frac = (size + 2 * pad - dilation * (kernel - 1) - 1) / stride
    out = int(np.ceil(frac) if ceil_mode else np.floor(frac)) + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def _windows(H, W, kernel, stride, padding, dilation, ceil_mode):
    """{(oh, ow): (in-bounds taps in row-major window order, top-left tap)}."""
    stride = kernel if stride is None else stride
    OH, OW = (ref_out_len(n, k, s, p, d, ceil_mode)
              for n, k, s, p, d in zip((H, W), kernel, stride, padding, dilation))
    out = {}
    for oh, ow in itertools.product(range(OH), range(OW)):
        i0, j0 = oh * stride[0] - padding[0], ow * stride[1] - padding[1]
        taps = [(i0 + kh * dilation[0], j0 + kw * dilation[1])
                for kh in range(kernel[0]) for kw in range(kernel[1])]
        out[oh, ow] = ([(i, j) for i, j in taps if 0 <= i < H and 0 <= j < W], (i0, j0))
    return out, (OH, OW)


def ref_max_pool2d(x, g, kernel, stride, padding, dilation, ceil_mode):
    """(y, indices, dx): the first maximum of each window (row-major), or its last NaN;
    a window with no tap in x gives -inf, index -1 and no gradient."""
    N, C, H, W = x.shape
    wins, (OH, OW) = _windows(H, W, kernel, stride, padding, dilation, ceil_mode)
    y = np.full((N, C, OH, OW), -np.inf, x.dtype)
    idx = np.full((N, C, OH, OW), -1, np.int64)
    dx = np.zeros_like(x)
    for n, c in itertools.product(range(N), range(C)):
        for (oh, ow), (taps, _) in wins.items():
            if not taps:
                continue
            vals = [x[n, c, i, j] for i, j in taps]
            nans = np.flatnonzero(np.isnan(vals))
            pick = int(nans[-1]) if nans.size else int(np.argmax(vals))
            i, j = taps[pick]
            y[n, c, oh, ow], idx[n, c, oh, ow] = vals[pick], i * W + j
            dx[n, c, i, j] += g[n, c, oh, ow]
    return y, idx, dx


def ref_divisor(i0, j0, kernel, H, W, padding, count_include_pad, divisor_override):
    """PyTorch's avg_pool2d divisor: the override; else the window cut at the padded
    input's end H + p (count_include_pad); else the window cut to the input."""
    if divisor_override is not None:
        return divisor_override
    i1, j1 = min(i0 + kernel[0], H + padding[0]), min(j0 + kernel[1], W + padding[1])
    if count_include_pad:
        return (i1 - i0) * (j1 - j0)
    return (min(i1, H) - max(i0, 0)) * (min(j1, W) - max(j0, 0))


def ref_avg_pool2d(x, g, kernel, stride, padding, ceil_mode, count_include_pad,
                   divisor_override):
    N, C, H, W = x.shape
    wins, (OH, OW) = _windows(H, W, kernel, stride, padding, (1, 1), ceil_mode)
    y, dx = np.zeros((N, C, OH, OW)), np.zeros(x.shape)
    for n, c in itertools.product(range(N), range(C)):
        for (oh, ow), (taps, (i0, j0)) in wins.items():
            div = ref_divisor(i0, j0, kernel, H, W, padding, count_include_pad,
                              divisor_override)
            y[n, c, oh, ow] = sum(x[n, c, i, j] for i, j in taps) / div
            for i, j in taps:
                dx[n, c, i, j] += g[n, c, oh, ow] / div
    return y, dx


# -- drawn configurations -------------------------------------------------------------------
def _all_windows_hit(cfg) -> bool:
    H, W = cfg["x_shape"][-2:]
    wins, _ = _windows(H, W, cfg["kernel_size"], cfg["stride"], cfg["padding"],
                       cfg["dilation"], cfg["ceil_mode"])
    return all(taps for taps, _ in wins.values())


@st.composite
def configs(draw, dilation=True, max_kernel=4, max_batch=2, max_channels=3, max_side=10,
            ceil_mode=None):
    """dict(x_shape, kernel_size, stride, padding, dilation, ceil_mode) with a non-empty
    output; ceil_mode drawn unless given. The kernel may be larger than x (ceil_mode)."""
    kernel = tuple(draw(st.integers(1, max_kernel)) for _ in range(2))
    stride = draw(st.none() | st.tuples(st.integers(1, 3), st.integers(1, 3)))
    padding = tuple(draw(st.integers(0, k // 2)) for k in kernel)
    dil = tuple(draw(st.integers(1, 2)) for _ in range(2)) if dilation else (1, 1)
    ceil = draw(st.booleans()) if ceil_mode is None else ceil_mode
    H, W = draw(st.integers(1, max_side)), draw(st.integers(1, max_side))
    s = kernel if stride is None else stride
    assume(all(ref_out_len(n, k, st_, p, d, ceil) >= 1
               for n, k, st_, p, d in zip((H, W), kernel, s, padding, dil)))
    shape = (draw(st.integers(1, max_batch)), draw(st.integers(1, max_channels)), H, W)
    return dict(x_shape=shape, kernel_size=kernel, stride=stride, padding=padding,
                dilation=dil, ceil_mode=ceil)


def _kw(cfg, dilation=True):
    keys = ("kernel_size", "stride", "padding", "ceil_mode") + (("dilation",) if dilation
                                                                else ())
    return {k: cfg[k] for k in keys}


def _distinct(shape, seed=0):
    n = int(np.prod(shape))
    return (np.random.default_rng(seed).permutation(n).reshape(shape) - n / 2) / 7.0


def _run(fn, x, **kwargs):
    """(y, dx, g[, indices]) of fn at x with a drawn g (the indices with return_indices)."""
    xt = nb.tensor(x, requires_grad=True)
    out = fn(xt, **kwargs)
    y, extra = (out[0], (out[1].numpy(),)) if isinstance(out, tuple) else (out, ())
    g = np.random.default_rng(1).standard_normal(y.shape).astype(x.dtype)
    y.backward(g)
    return (y.numpy(), xt.grad.numpy(), g) + extra


# -- output sizes ---------------------------------------------------------------------------
@given(size=st.integers(1, 12), kernel=st.integers(1, 5), stride=st.integers(1, 4),
       dilation=st.integers(1, 3), ceil_mode=st.booleans(), data=st.data())
def test_output_size_and_its_error_match_torch(size, kernel, stride, dilation, ceil_mode,
                                               data):
    torch = pytest.importorskip("torch")
    pad = data.draw(st.integers(0, kernel // 2))
    kw = dict(kernel_size=(kernel, 1), stride=(stride, 1), padding=(pad, 0),
              dilation=(dilation, 1), ceil_mode=ceil_mode)
    x = np.zeros((1, 1, size, 2))
    try:
        expected = tuple(torch.nn.functional.max_pool2d(torch.tensor(x), **kw).shape)
    except RuntimeError as e:
        assert "Output size is too small" in str(e)
        with pytest.raises(ValueError, match=r"max_pool2d: the dilated kernel .* is larger "
                                             r"than the padded input .* below 1"):
            nb.max_pool2d(x, **kw)
        return
    assert nb.max_pool2d(x, **kw).shape == expected
    assert expected[2] == ref_out_len(size, kernel, stride, pad, dilation, ceil_mode)
    if dilation == 1:
        kw.pop("dilation")
        assert nb.avg_pool2d(x, **kw).shape == expected


def test_ceil_mode_examples():
    """H = 6, kernel 3, stride 2: floor gives 2 windows, ceil 3 (the last covers rows 4, 5
    only). H = 5, kernel 2, stride 2, padding 1: ceil's 4th window would start at row 5 =
    H + p - 1 + 1, in the right padding, so it is dropped (3 windows, as floor)."""
    assert nb.max_pool2d(np.zeros((1, 6, 6)), 3, 2).shape == (1, 2, 2)
    assert nb.max_pool2d(np.zeros((1, 6, 6)), 3, 2, ceil_mode=True).shape == (1, 3, 3)
    assert nb.avg_pool2d(np.zeros((1, 5, 5)), 2, 2, 1, ceil_mode=True).shape == (1, 3, 3)
    # kernel 4 on a 3-wide input: an error without ceil_mode, one clipped window with it
    x = np.arange(9.0).reshape(1, 1, 3, 3)
    assert nb.max_pool2d(x, 4, 2, ceil_mode=True).numpy().item() == 8.0
    # count_include_pad divides by the window cut at H + p = 3: 3 * 3 positions
    assert nb.avg_pool2d(x, 4, 2, ceil_mode=True).numpy().item() == 36.0 / 9
    with pytest.raises(ValueError, match=r"max_pool2d: the dilated kernel \(4, 4\) is larger "
                                         r"than the padded input \(3, 3\)"):
        nb.max_pool2d(x, 4, 2)


# -- max_pool2d: reference and PyTorch -----------------------------------------------------
@given(cfg=configs(), dtype=DTYPES)
def test_max_pool2d_matches_reference(cfg, dtype):
    x = _distinct(cfg["x_shape"]).astype(dtype)
    y, dx, g, idx = _run(nb.max_pool2d, x, return_indices=True, **_kw(cfg))
    y_ref, idx_ref, dx_ref = ref_max_pool2d(x, g, cfg["kernel_size"], cfg["stride"],
                                            cfg["padding"], cfg["dilation"],
                                            cfg["ceil_mode"])
    np.testing.assert_array_equal(y, y_ref)
    np.testing.assert_array_equal(idx, idx_ref)
    np.testing.assert_allclose(dx, dx_ref, rtol=1e-6, atol=1e-6)


@given(cfg=configs(), dtype=DTYPES, ties=st.booleans())
def test_max_pool2d_with_indices_torch_oracle(cfg, dtype, ties):
    torch = pytest.importorskip("torch")
    # PyTorch's index for a window that misses x is past its last tap: compare elsewhere
    assume(_all_windows_hit(cfg))
    rng = np.random.default_rng(7)
    x = (rng.integers(0, 3, cfg["x_shape"]) if ties else _distinct(cfg["x_shape"]))
    x = x.astype(dtype)
    y, dx, g, idx = _run(nb.max_pool2d, x, return_indices=True, **_kw(cfg))
    xt = torch.tensor(x, requires_grad=True)
    yt, it = torch.nn.functional.max_pool2d(xt, return_indices=True, **_kw(cfg))
    yt.backward(torch.tensor(g))
    np.testing.assert_array_equal(y, yt.detach().numpy())
    np.testing.assert_array_equal(idx, it.numpy())
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-6, atol=1e-6)


@given(cfg=configs(max_channels=2), dtype=DTYPES, seed=st.integers(0, 2**16),
       nan_share=st.sampled_from([0.1, 0.3, 0.6]))
def test_nan_windows_give_the_index_of_their_last_nan_as_torch(cfg, dtype, seed, nan_share):
    """The index returned is the element the gradient goes to: the last NaN of a window
    with NaNs (and -inf/+inf take part as ordinary values)."""
    torch = pytest.importorskip("torch")
    assume(_all_windows_hit(cfg))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(cfg["x_shape"]).astype(dtype)
    x[rng.random(x.shape) < nan_share] = np.nan
    x[rng.random(x.shape) < 0.1] = -np.inf
    y, dx, g, idx = _run(nb.max_pool2d, x, return_indices=True, **_kw(cfg))
    xt = torch.tensor(x, requires_grad=True)
    yt, it = torch.nn.functional.max_pool2d(xt, return_indices=True, **_kw(cfg))
    yt.backward(torch.tensor(g))
    np.testing.assert_array_equal(y, yt.detach().numpy())  # NaN positions equal too
    np.testing.assert_array_equal(idx, it.numpy())
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-6, atol=1e-6)
    # and the gradient lands where the index points
    N, C = idx.shape[:2]
    planes = np.zeros((N, C, x.shape[2] * x.shape[3]))
    for n, c in itertools.product(range(N), range(C)):
        np.add.at(planes[n, c], idx[n, c].ravel(), g[n, c].ravel().astype(np.float64))
    np.testing.assert_allclose(dx, planes.reshape(x.shape), rtol=1e-6, atol=1e-6)


def test_return_indices_is_an_int64_tensor_without_grad_and_a_copy():
    x = _distinct((2, 7, 5))  # unbatched [C, H, W]
    xt = nb.tensor(x, requires_grad=True)
    y, idx = nb.max_pool2d(xt, 3, 2, 1, ceil_mode=True, return_indices=True)
    assert y.shape == idx.shape == (2, 4, 3)
    assert idx.dtype == np.int64 and not idx.requires_grad and idx.grad_fn is None
    y_plain = nb.max_pool2d(xt, 3, 2, 1, ceil_mode=True)
    np.testing.assert_array_equal(y.numpy(), y_plain.numpy())
    np.testing.assert_array_equal(np.take_along_axis(x.reshape(2, -1),
                                                     idx.numpy().reshape(2, -1), 1),
                                  y.numpy().reshape(2, -1))
    idx.numpy()[...] = 0  # the caller's copy: the backward keeps its own indices
    g = np.ones(y.shape)
    y.backward(g)
    xr = nb.tensor(x, requires_grad=True)
    nb.max_pool2d(xr, 3, 2, 1, ceil_mode=True).backward(g)
    np.testing.assert_array_equal(xt.grad.numpy(), xr.grad.numpy())
    with nb.no_grad():
        y2, idx2 = nb.max_pool2d(x, 3, 2, 1, ceil_mode=True, return_indices=True)
    np.testing.assert_array_equal(y2.numpy(), y.numpy())
    assert idx2.shape == (2, 4, 3) and idx2.dtype == np.int64


def test_window_missing_x_gives_index_minus_one():
    y, idx = nb.max_pool2d(np.ones((1, 1, 4, 4)), 2, stride=1, padding=1, dilation=5,
                           return_indices=True)
    assert y.numpy().item() == -np.inf and idx.numpy().item() == -1


@pytest.mark.parametrize("h, w", [(5, 7), (6, 8), (1, 3)])
def test_2x2_ceil_mode_leaves_the_fast_path_only_when_it_adds_windows(h, w):
    torch = pytest.importorskip("torch")
    x = _distinct((2, 3, h, w))
    y, dx, g, idx = _run(nb.max_pool2d, x, kernel_size=2, ceil_mode=True,
                         return_indices=True)
    xt = torch.tensor(x, requires_grad=True)
    yt, it = torch.nn.functional.max_pool2d(xt, 2, ceil_mode=True, return_indices=True)
    yt.backward(torch.tensor(g))
    np.testing.assert_array_equal(y, yt.detach().numpy())
    np.testing.assert_array_equal(idx, it.numpy())
    np.testing.assert_array_equal(dx, xt.grad.numpy())


# -- avg_pool2d: reference and PyTorch -----------------------------------------------------
@given(cfg=configs(dilation=False), include=st.booleans(), divisor=DIVISORS)
def test_avg_pool2d_matches_reference(cfg, include, divisor):
    x = np.random.default_rng(3).standard_normal(cfg["x_shape"])
    y, dx, g = _run(nb.avg_pool2d, x, count_include_pad=include, divisor_override=divisor,
                    **_kw(cfg, dilation=False))
    y_ref, dx_ref = ref_avg_pool2d(x, g, cfg["kernel_size"], cfg["stride"], cfg["padding"],
                                   cfg["ceil_mode"], include, divisor)
    np.testing.assert_allclose(y, y_ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dx, dx_ref, rtol=1e-12, atol=1e-12)


@settings(max_examples=80)
@given(cfg=configs(dilation=False), include=st.booleans(), divisor=DIVISORS, dtype=DTYPES)
def test_avg_pool2d_torch_oracle_every_combination(cfg, include, divisor, dtype):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(5).standard_normal(cfg["x_shape"]).astype(dtype)
    kw = dict(count_include_pad=include, divisor_override=divisor, **_kw(cfg, dilation=False))
    y, dx, g = _run(nb.avg_pool2d, x, **kw)
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.nn.functional.avg_pool2d(xt, **kw)
    yt.backward(torch.tensor(g))
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize("include", [False, True])
@pytest.mark.parametrize("divisor", [None, 2])
def test_avg_pool2d_fixed_combinations_torch(ceil_mode, include, divisor):
    """Each of the eight combinations on a case where they all differ: 3x3 windows,
    stride 2, padding 1 on 6x7 (ceil_mode adds a window cut at H + p = 7 on rows)."""
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(6).standard_normal((2, 3, 6, 7))
    kw = dict(kernel_size=3, stride=2, padding=1, ceil_mode=ceil_mode,
              count_include_pad=include, divisor_override=divisor)
    y, dx, g = _run(nb.avg_pool2d, x, **kw)
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.nn.functional.avg_pool2d(xt, **kw)
    yt.backward(torch.tensor(g))
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-13, atol=1e-13)


# -- gradchecks -------------------------------------------------------------------------
@given(cfg=configs(max_batch=1, max_channels=2, max_side=7))
def test_max_pool2d_gradcheck(cfg):
    assume(_all_windows_hit(cfg))  # a window missing x outputs -inf
    gradcheck(lambda x: nb.max_pool2d(x, **_kw(cfg)), [_distinct(cfg["x_shape"])])


@given(cfg=configs(dilation=False, max_batch=1, max_channels=2, max_side=7),
       include=st.booleans(), divisor=DIVISORS)
def test_avg_pool2d_gradcheck(cfg, include, divisor):
    x = np.random.default_rng(2).standard_normal(cfg["x_shape"])
    gradcheck(lambda x: nb.avg_pool2d(x, count_include_pad=include, divisor_override=divisor,
                                      **_kw(cfg, dilation=False)), [x])


def test_registered_samples_cover_the_new_arguments():
    """tests/ops/test_pool.py gradchecks and gradgradchecks every registered sample; these
    must include ceil_mode windows and divisor_override."""
    rng = np.random.default_rng(0)
    for name in ("max_pool2d", "max_pool2d_grad", "avg_pool2d", "avg_pool2d_grad"):
        labels = " | ".join(s.label for s in REGISTRY[name].samples(rng))
        assert "ceil_mode" in labels, name
    avg = list(REGISTRY["avg_pool2d"].samples(rng))
    assert any(s.params["divisor_override"] is not None for s in avg)


def _second_derivative_against_torch(ours, theirs, x, v):
    """With L = <pool(x)^2, v>: grad of |dL/dx|^2 w.r.t. x and v, ours against torch."""
    torch = pytest.importorskip("torch")
    xt, vt = torch.tensor(x, requires_grad=True), torch.tensor(v, requires_grad=True)
    (dt,) = torch.autograd.grad((theirs(xt) ** 2 * vt).sum(), [xt], create_graph=True)
    expected = torch.autograd.grad((dt * dt).sum(), [xt, vt])
    xn, vn = nb.tensor(x, requires_grad=True), nb.tensor(v, requires_grad=True)
    (dn,) = nb.grad((ours(xn) ** 2 * vn).sum(), [xn], create_graph=True)
    np.testing.assert_allclose(dn.numpy(), dt.detach().numpy(), rtol=1e-12, atol=1e-12)
    for got, e in zip(nb.grad((dn * dn).sum(), [xn, vn]), expected):
        np.testing.assert_allclose(got.numpy(), e.numpy(), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("shape, kw", [
    ((2, 3, 6, 7), dict(kernel_size=3, stride=2, ceil_mode=True)),
    ((1, 2, 5, 3), dict(kernel_size=(2, 4), stride=2, padding=(1, 0), ceil_mode=True)),
])
def test_max_pool2d_ceil_mode_second_derivative_torch(shape, kw):
    torch = pytest.importorskip("torch")
    x = _distinct(shape, seed=3)
    v = np.random.default_rng(4).standard_normal(nb.max_pool2d(x, **kw).shape)
    _second_derivative_against_torch(lambda t: nb.max_pool2d(t, **kw),
                                     lambda t: torch.nn.functional.max_pool2d(t, **kw), x, v)


@pytest.mark.parametrize("include", [True, False])
@pytest.mark.parametrize("kw", [
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, divisor_override=5),
    dict(kernel_size=(2, 3), stride=2, padding=(1, 0), divisor_override=-2),
])
def test_avg_pool2d_second_derivative_torch(kw, include):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 6, 7))
    v = rng.standard_normal(nb.avg_pool2d(x, **kw).shape)
    _second_derivative_against_torch(
        lambda t: nb.avg_pool2d(t, count_include_pad=include, **kw),
        lambda t: torch.nn.functional.avg_pool2d(t, count_include_pad=include, **kw), x, v)


# -- non-finite input, threads, inputs untouched -----------------------------------------
@settings(max_examples=30)
@given(cfg=configs(dilation=False, ceil_mode=True), include=st.booleans(), divisor=DIVISORS,
       dtype=DTYPES, seed=st.integers(0, 2**16))
def test_avg_pool2d_ceil_mode_non_finite_matches_torch(cfg, include, divisor, dtype, seed):
    """NaN and +-inf in x or g: the same NaN/inf positions as PyTorch in y and dx."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(cfg["x_shape"]).astype(dtype)
    x.flat[rng.integers(0, x.size, 3)] = [np.nan, np.inf, -np.inf]
    kw = dict(count_include_pad=include, divisor_override=divisor, **_kw(cfg, dilation=False))
    y, dx, g = _run(nb.avg_pool2d, x, **kw)
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.nn.functional.avg_pool2d(xt, **kw)
    yt.backward(torch.tensor(g))
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("fn, kwargs", [
    (nb.max_pool2d, dict(kernel_size=3, stride=2, ceil_mode=True, return_indices=True)),
    (nb.avg_pool2d, dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    (nb.avg_pool2d, dict(kernel_size=(2, 3), stride=2, ceil_mode=True,
                         count_include_pad=False, divisor_override=3)),
])
def test_one_and_two_threads_bitwise_serial_too(fn, kwargs):
    x = np.random.default_rng(4).standard_normal((4, 5, 13, 12)).astype(np.float32)
    x0 = x.copy()
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
    assert_same_bits(x, x0)


# -- layers -------------------------------------------------------------------------------
@pytest.mark.parametrize("name, args, kwargs, shape", [
    ("MaxPool2d", (3,), dict(stride=2, ceil_mode=True), (2, 3, 6, 7)),
    ("MaxPool2d", (2,), dict(padding=1, dilation=2, return_indices=True, ceil_mode=True),
     (2, 3, 7, 6)),
    ("AvgPool2d", (3,), dict(stride=2, padding=1, ceil_mode=True), (2, 3, 6, 7)),
    ("AvgPool2d", ((2, 3),), dict(stride=2, ceil_mode=True, count_include_pad=False,
                                  divisor_override=4), (3, 5, 6)),
])
def test_layers_pass_the_arguments_as_torch(name, args, kwargs, shape):
    torch = pytest.importorskip("torch")
    ours, theirs = getattr(nn, name)(*args, **kwargs), getattr(torch.nn, name)(*args, **kwargs)
    assert repr(ours) == repr(theirs)
    x = np.random.default_rng(0).standard_normal(shape)
    xt, tx = nb.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    y, ty = ours(xt), theirs(tx)
    if kwargs.get("return_indices"):
        (y, idx), (ty, tidx) = y, ty
        np.testing.assert_array_equal(idx.numpy(), tidx.numpy())
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-13, atol=1e-13)
    g = np.random.default_rng(1).standard_normal(ty.shape)
    y.backward(g)
    ty.backward(torch.tensor(g))
    np.testing.assert_allclose(xt.grad.numpy(), tx.grad.numpy(), rtol=1e-13, atol=1e-13)


# -- bad input ------------------------------------------------------------------------------
X = np.zeros((2, 3, 5, 5))


@pytest.mark.parametrize("fn", [nb.max_pool2d, nb.avg_pool2d])
@pytest.mark.parametrize("args, kwargs, err, match", [
    ((X, 3), dict(padding=2, ceil_mode=True), ValueError,
     r"padding \(2, 2\) must be at most half the kernel size \(3, 3\)"),
    ((X, (2, 0)), dict(ceil_mode=True), ValueError, r"kernel_size must be positive"),
    ((X, -1), {}, ValueError, r"kernel_size must be positive"),
    ((X, 2), dict(stride=(1, 0), ceil_mode=True), ValueError, r"stride must be positive"),
    ((X, 2), dict(stride=-2), ValueError, r"stride must be positive"),
    ((np.zeros((2, 3, 2, 5)), 5), dict(stride=1, padding=(1, 0), ceil_mode=True), ValueError,
     r"the dilated kernel \(5, 5\) is larger than the padded input \(4, 5\) \(input "
     r"\(2, 5\), padding \(1, 0\), stride \(1, 1\), ceil_mode=True\): the output size "
     r"\(0, 1\) is below 1"),
])
def test_value_errors(fn, args, kwargs, err, match):
    with pytest.raises(err, match=f"{fn.__name__}: {match}"):
        fn(*args, **kwargs)


def test_divisor_override_errors():
    with pytest.raises(ValueError, match=r"avg_pool2d: divisor_override must be non-zero"):
        nb.avg_pool2d(X, 2, divisor_override=0)
    for bad in (2.5, True, "2"):
        with pytest.raises(TypeError, match=r"avg_pool2d: divisor_override must be None or "
                                            r"an int"):
            nb.avg_pool2d(X, 2, divisor_override=bad)


@pytest.mark.parametrize("name", ["max_pool2d", "avg_pool2d"])
@pytest.mark.parametrize("args", [((3, 3), (1, 1), (1,)), ((2, 2), ()), ((4, 4), (2, 2), (2,)),
                                  ((3,), (2,), (1,)), ((2, 3), [], (1, 0))])
def test_pool2d_one_tuples_and_empty_stride_like_torch(name, args):
    """A 1-tuple stands for both dims; stride () or [] is the kernel size (torch)."""
    torch = pytest.importorskip("torch")
    x0 = np.random.default_rng(1).standard_normal((1, 2, 6, 7)).astype(np.float32)
    y = getattr(nb.nn.functional, name)(nb.tensor(x0), *args)
    ty = getattr(torch.nn.functional, name)(torch.tensor(x0), *args)
    np.testing.assert_allclose(y.numpy(), ty.numpy(), rtol=1e-6)
    for one_d in ("max_pool1d", "avg_pool1d"):
        y = getattr(nb.nn.functional, one_d)(nb.tensor(x0[0]), 2, ())
        ty = getattr(torch.nn.functional, one_d)(torch.tensor(x0[0]), 2, ())
        np.testing.assert_allclose(y.numpy(), ty.numpy(), rtol=1e-6)
    with pytest.raises(TypeError, match=rf"{name}: padding must be an int or a pair of ints, "
                                        r"got \(1, 1, 1\)"):
        getattr(nb.nn.functional, name)(nb.tensor(x0), 3, 1, (1, 1, 1))
