"""interpolate, adaptive pooling and pixel (un)shuffle: PyTorch as the oracle over drawn
shapes, sizes, scales and modes (forward and gradient), gradcheck and gradgradcheck of the
registered ops, the same bits at 1 and 2 threads, bad input."""

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads
from hypothesis import given, settings
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.ops import resample as R
from nbgrad.testing import check_registered

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _both(ours, theirs, x, g_seed=1, **kwargs):
    """Forward and input gradient of ours and torch's on the same x and upstream g."""
    xt = nb.tensor(x, requires_grad=True)
    y = ours(xt, **kwargs)
    g = np.random.default_rng(g_seed).standard_normal(y.shape).astype(x.dtype)
    y.backward(g)
    xq = torch.tensor(x, requires_grad=True)
    yq = theirs(xq, **kwargs)
    yq.backward(torch.tensor(g))
    return y.numpy(), xt.grad.numpy(), yq.detach().numpy(), xq.grad.numpy()


def _close(ours, theirs, dtype):
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(ours, theirs, rtol=tol, atol=tol)


spatial = st.integers(1, 9)
modes_3d = st.sampled_from(["nearest", "nearest-exact", "linear", "area"])
modes_4d = st.sampled_from(["nearest", "nearest-exact", "bilinear", "bicubic", "area"])
modes_5d = st.sampled_from(["nearest", "nearest-exact", "trilinear", "area"])


@st.composite
def interp_cases(draw):
    ndim = draw(st.sampled_from([3, 4, 4, 5]))
    mode = draw({3: modes_3d, 4: modes_4d, 5: modes_5d}[ndim])
    sizes = spatial if ndim < 5 else st.integers(1, 5)
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 3))) + tuple(
        draw(sizes) for _ in range(ndim - 2))
    kwargs = {"mode": mode}
    if mode in ("linear", "bilinear", "bicubic", "trilinear"):
        kwargs["align_corners"] = draw(st.booleans())
    if draw(st.booleans()):
        sizes = tuple(draw(spatial) for _ in range(ndim - 2))
        if draw(st.booleans()):  # out == in on some axes (PyTorch's copy shortcuts)
            sizes = tuple(n if draw(st.booleans()) else o for n, o in zip(shape[2:], sizes))
        kwargs["size"] = sizes if draw(st.booleans()) or ndim == 3 else sizes[0]
    else:
        scale = st.floats(0.3, 3.5).map(lambda s: round(s, 3))
        scales = tuple(draw(scale) for _ in range(ndim - 2))
        if any(int(n * s) < 1 for n, s in zip(shape[2:], scales)):
            scales = tuple(max(s, 1.0) for s in scales)
        kwargs["scale_factor"] = scales if draw(st.booleans()) else scales[0]
        if isinstance(kwargs["scale_factor"], float) and min(
                int(n * scales[0]) for n in shape[2:]) < 1:
            kwargs["scale_factor"] = max(scales[0], 1.0)
        kwargs["recompute_scale_factor"] = draw(st.sampled_from([None, False, True]))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    return shape, dtype, kwargs


@settings(max_examples=80, deadline=None)
@given(interp_cases(), st.integers(0, 2**31))
def test_interpolate_matches_torch(case, seed):
    shape, dtype, kwargs = case
    x = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    y, dx, yt, dxt = _both(R.interpolate, F.interpolate, x, **kwargs)
    assert y.shape == yt.shape and y.dtype == yt.dtype
    _close(y, yt, dtype)
    if kwargs["mode"].startswith("nearest"):
        assert_same_bits(y, yt)  # a gather: the same source index gives the same bits
        # PyTorch's nearest backward maps out == in and out == 2 in by shortcuts that its
        # forward does not take (given scales): the reference is the exact adjoint of its
        # forward, the source positions read off a forward of the flat positions.
        dxt = _adjoint_of_torch_forward(x, y.shape, kwargs)
    elif kwargs["mode"] == "bicubic" and y.shape == x.shape:
        # likewise its bicubic backward copies g when out == in, which its forward (given
        # scales) does not
        dxt = _adjoint_of_torch_forward(x, y.shape, kwargs)
    _close(dx, dxt, dtype)


def _adjoint_of_torch_forward(x, y_shape, kwargs):
    """A^T g for the matrix A of torch's forward, read off (in float64) from its action on
    the one-hot planes; g as drawn by ``_both``."""
    n = int(np.prod(x.shape[2:]))
    basis = np.eye(n).reshape((n, 1) + x.shape[2:])
    a = F.interpolate(torch.tensor(basis), **kwargs).numpy().reshape(n, -1)  # [in, out]
    g = np.random.default_rng(1).standard_normal(y_shape).astype(x.dtype)
    planes = g.reshape(x.shape[0] * x.shape[1], -1).astype(np.float64)
    return (planes @ a.T).astype(x.dtype).reshape(x.shape)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n_in,n_out", [(7, 13), (13, 7), (100, 37), (37, 100), (5, 500),
                                        (50, 51), (3, 3), (1, 4)])
def test_bicubic_coefficients_on_long_axes(n_in, n_out, dtype):
    # one-hot planes: each output is one tap's weight (or the sum of the clamped taps at
    # the borders). PyTorch's vectorised CPU builds contract some multiply-adds into FMAs
    # (the source index, one step of the outer cubic), a few ulps of the weights.
    x = np.eye(n_in, dtype=dtype)[:, None, None, :]
    tol = 4e-6 if dtype == np.float32 else 1e-14
    for kw in ({"size": (1, n_out)}, {"size": (1, n_out), "align_corners": True},
               {"scale_factor": (1, n_out / n_in + 0.013)}):
        y = R.interpolate(nb.tensor(x), mode="bicubic", **kw).numpy()
        yt = F.interpolate(torch.tensor(x), mode="bicubic", **kw).numpy()
        np.testing.assert_allclose(y, yt, rtol=0, atol=tol)
        np.testing.assert_allclose(y.sum(axis=0), 1, atol=tol * 4)  # a partition of unity


@pytest.mark.parametrize("n_in,n_out", [(7, 13), (13, 7), (100, 37), (37, 100), (5, 500)])
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact", "linear"])
def test_source_index_rounding_on_long_axes(n_in, n_out, mode):
    x = np.arange(n_in, dtype=np.float32)[None, None] * 1.25
    for kw in ({"size": n_out}, {"scale_factor": n_out / n_in + 0.013},
               {"scale_factor": n_out / n_in + 0.013, "recompute_scale_factor": True}):
        y = R.interpolate(nb.tensor(x), mode=mode, **kw).numpy()
        yt = F.interpolate(torch.tensor(x), mode=mode, **kw).numpy()
        if mode == "linear":
            np.testing.assert_allclose(y, yt, rtol=1e-6, atol=1e-5)
        else:
            assert_same_bits(y, yt)


def test_deprecated_aliases():
    x = np.random.default_rng(0).standard_normal((1, 2, 3, 4))
    with pytest.warns(UserWarning):
        y = R.upsample(nb.tensor(x), scale_factor=2, mode="bilinear")
    np.testing.assert_allclose(y.numpy(), F.interpolate(torch.tensor(x), scale_factor=2,
                                                        mode="bilinear").numpy())
    with pytest.warns(UserWarning):
        y = R.upsample_bilinear(nb.tensor(x), size=(5, 6))
    np.testing.assert_allclose(y.numpy(), F.interpolate(
        torch.tensor(x), size=(5, 6), mode="bilinear", align_corners=True).numpy())
    with pytest.warns(UserWarning):
        y = R.upsample_nearest(nb.tensor(x), scale_factor=3)
    assert_same_bits(y.numpy(), F.interpolate(torch.tensor(x), scale_factor=3).numpy())


@st.composite
def pool_cases(draw):
    spatial_dims = draw(st.sampled_from([1, 2, 3]))
    batched = draw(st.booleans())
    shape = ((draw(st.integers(1, 2)),) if batched else ()) + (draw(st.integers(1, 3)),) + \
        tuple(draw(st.integers(1, 11)) for _ in range(spatial_dims))
    out = tuple(draw(st.one_of(st.integers(1, 12), st.none())) for _ in range(spatial_dims))
    if spatial_dims == 3:
        shape = shape[:-3] + tuple(min(n, 6) for n in shape[-3:])
    if spatial_dims == 1 or draw(st.booleans()):
        out = out[0] if out[0] is not None else 3
    return spatial_dims, shape, out, draw(st.sampled_from([np.float32, np.float64]))


@settings(max_examples=60, deadline=None)
@given(pool_cases(), st.integers(0, 2**31))
def test_adaptive_pools_match_torch(case, seed):
    spatial_dims, shape, out, dtype = case
    rng = np.random.default_rng(seed)
    x = rng.permutation(np.prod(shape)).reshape(shape).astype(dtype) / 7  # no ties
    name = f"adaptive_avg_pool{spatial_dims}d"
    y, dx, yt, dxt = _both(getattr(R, name), getattr(F, name), x, output_size=out)
    assert y.shape == yt.shape
    _close(y, yt, dtype)
    _close(dx, dxt, dtype)
    if spatial_dims == 3:
        return
    mx = R.adaptive_max_pool1d if spatial_dims == 1 else R.adaptive_max_pool2d
    mx_t = F.adaptive_max_pool1d if spatial_dims == 1 else F.adaptive_max_pool2d
    y, dx, yt, dxt = _both(mx, mx_t, x, output_size=out)
    assert_same_bits(y, yt)
    assert_same_bits(dx, dxt)
    _, idx = mx(nb.tensor(x), out, return_indices=True)
    _, idx_t = mx_t(torch.tensor(x), out, return_indices=True)
    assert idx.dtype == np.int64
    np.testing.assert_array_equal(idx.numpy(), idx_t.numpy())


def test_adaptive_max_ties_and_nan_follow_torch():
    x = np.array([[[[1.0, 3.0, 3.0, np.nan], [3.0, 0.0, np.nan, 2.0],
                    [-np.inf, -np.inf, 5.0, 5.0]]]])
    for out in [(1, 1), (2, 2), (3, 3), (2, 3)]:
        y, idx = R.adaptive_max_pool2d(nb.tensor(x), out, return_indices=True)
        yt, idx_t = F.adaptive_max_pool2d(torch.tensor(x), out, return_indices=True)
        assert_same_bits(y.numpy(), yt.numpy())
        np.testing.assert_array_equal(idx.numpy(), idx_t.numpy())
    ninf = np.full((1, 1, 2, 2), -np.inf)
    y, idx = R.adaptive_max_pool2d(nb.tensor(ninf), 1, return_indices=True)
    assert idx.numpy().item() == F.adaptive_max_pool2d(torch.tensor(ninf), 1,
                                                       return_indices=True)[1].item()


@pytest.mark.parametrize("shape,r", [((2, 8, 3, 5), 2), ((9, 2, 2), 3), ((2, 1, 4, 3, 1), 1),
                                     ((1, 18, 1, 2), 3)])
def test_pixel_shuffle_roundtrip_and_torch(shape, r):
    x = np.random.default_rng(0).standard_normal(shape)
    y, dx, yt, dxt = _both(R.pixel_shuffle, F.pixel_shuffle, x, upscale_factor=r)
    assert_same_bits(y, yt)
    assert_same_bits(dx, dxt)
    z, dz, zt, dzt = _both(R.pixel_unshuffle, F.pixel_unshuffle, y, downscale_factor=r)
    assert_same_bits(z, x)
    assert_same_bits(z, zt)
    assert_same_bits(dz, dzt)


def test_inputs_are_not_modified():
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5))
    keep = x.copy()
    xt = nb.tensor(x, requires_grad=True)
    (R.interpolate(xt, scale_factor=1.5, mode="bilinear").sum()
     + R.adaptive_avg_pool2d(xt, 3).sum() + R.adaptive_max_pool2d(xt, 2).sum()
     + R.pixel_shuffle(xt[:, :1].expand(2, 4, 4, 5), 2).sum()).backward()
    assert_same_bits(x, keep)


# -- registered ops -------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["interpolate", "interpolate_grad", "adaptive_avg_pool2d",
                                  "adaptive_avg_pool2d_grad", "adaptive_max_pool2d"])
def test_gradcheck_and_gradgradcheck_registered(name):
    for second_order in (False, True):
        report = check_registered(name, second_order=second_order)
        assert report.passed, "\n".join(report.failures)


def test_second_derivative_against_torch():
    rng = np.random.default_rng(3)
    x, v = rng.standard_normal((1, 2, 4, 5)), rng.standard_normal((1, 2, 7, 3))

    def ours():
        xt, vt = nb.tensor(x, requires_grad=True), nb.tensor(v, requires_grad=True)
        y = R.interpolate(xt, size=(7, 3), mode="bilinear")
        (gx,) = nb.autograd.grad((y * y * vt).sum(), [xt], create_graph=True)
        return nb.autograd.grad((gx * gx).sum(), [xt, vt])

    xq, vq = torch.tensor(x, requires_grad=True), torch.tensor(v, requires_grad=True)
    yq = F.interpolate(xq, size=(7, 3), mode="bilinear")
    (gq,) = torch.autograd.grad((yq * yq * vq).sum(), [xq], create_graph=True)
    theirs = torch.autograd.grad((gq * gq).sum(), [xq, vq])
    for a, b in zip(ours(), theirs):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-12)


# -- threads --------------------------------------------------------------------------------
@pytest.mark.parametrize("call", [
    lambda x: R.interpolate(x, scale_factor=2.3, mode="bilinear"),
    lambda x: R.interpolate(x, size=(5, 70), mode="nearest-exact"),
    lambda x: R.interpolate(x, scale_factor=2, mode="nearest"),
    lambda x: R.adaptive_avg_pool2d(x, (7, 3)),
    lambda x: R.adaptive_max_pool2d(x, (5, 5)),
    lambda x: R.interpolate(x, scale_factor=(1.7, 0.8), mode="bicubic"),
    lambda x: R.interpolate(x, size=(13, 50), mode="bicubic", align_corners=True),
    lambda x: R.interpolate(x.reshape(4, 8, 2, 24, 40), scale_factor=(2.5, 1.3, 0.7),
                            mode="trilinear"),
    lambda x: R.interpolate(x.reshape(4, 4, 4, 24, 40), size=(7, 9, 11), mode="nearest"),
    lambda x: R.interpolate(x.reshape(4, 4, 4, 24, 40), size=(3, 13, 6), mode="area"),
])
def test_same_bits_at_1_and_2_threads(call):
    x = np.random.default_rng(0).standard_normal((4, 16, 24, 40)).astype(np.float32)

    def run():
        xt = nb.tensor(x, requires_grad=True)
        y = call(xt)
        y.backward(np.cos(np.arange(y.numel(), dtype=np.float32)).reshape(y.shape))
        return y.numpy(), xt.grad.numpy()

    for a, b in zip(at_threads(1, run), at_threads(2, run)):
        assert_same_bits(a, b)


# -- bad input ------------------------------------------------------------------------------
X4 = np.zeros((1, 2, 4, 4), np.float32)
X3 = np.zeros((1, 2, 4), np.float32)
X5 = np.zeros((1, 2, 2, 4, 4), np.float32)


@pytest.mark.parametrize("x,kwargs,exc,match", [
    (X4, dict(size=2, scale_factor=2), ValueError, "only one of size or scale_factor"),
    (X4, dict(), ValueError, "either size or scale_factor"),
    (X4, dict(size=2, align_corners=True), ValueError, "align_corners option"),
    (X4, dict(size=2, mode="nearest-exact", align_corners=False), ValueError, "align_corners"),
    (X4, dict(size=2, mode="linear"), NotImplementedError, r"4D input.*linear mode needs 3D"),
    (X3, dict(size=2, mode="bilinear"), NotImplementedError, r"3D input.*bilinear"),
    (X4, dict(size=(2, 3, 4)), ValueError, r"spatial dimensions of \[4, 4\]"),
    (X4, dict(size=0), ValueError, r"greater than 0.*output \(0, 0\)"),
    (X4, dict(size=(-1, 2)), ValueError, "greater than 0"),
    (X4, dict(scale_factor=0.1), ValueError, r"greater than 0.*scale_factor=0.1"),
    (X4, dict(size=2.5), TypeError, "size"),
    (X4, dict(size=2, recompute_scale_factor=True), ValueError, "recompute_scale_factor"),
    (X4, dict(size=2, mode="bilinear", antialias=True), NotImplementedError, "antialias"),
    (X4, dict(size=2, mode="bicubic", antialias=True), NotImplementedError, "antialias"),
    (X5, dict(size=2, mode="bicubic"), NotImplementedError, r"5D input.*bicubic.*needs 4D"),
    (X4, dict(size=2, mode="trilinear"), NotImplementedError, r"4D input.*needs 5D"),
    (X5, dict(size=(2, 3)), ValueError, r"spatial dimensions of \[2, 4, 4\]"),
    (np.zeros((1, 1, 2, 2, 2, 2), np.float32), dict(size=2), NotImplementedError, "6-D"),
    (X4, dict(size=2, mode="cubic"), NotImplementedError, "mode 'cubic'"),
    (np.zeros((2, 4), np.float32), dict(size=2), NotImplementedError, r"shape \(2, 4\)"),
])
def test_interpolate_bad_input(x, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        R.interpolate(nb.tensor(x), **kwargs)
    # PyTorch raises the same type, or RuntimeError from its C++ checks (nbgrad: ValueError)
    if match == "antialias":  # what nbgrad leaves out: PyTorch computes it
        return
    with pytest.raises((exc, RuntimeError) if exc is ValueError else exc):
        F.interpolate(torch.tensor(x), **kwargs)


@pytest.mark.parametrize("fn,x,args,exc,match", [
    (R.adaptive_avg_pool2d, X4, ((1, 2, 3),), ValueError, r"output_size must have 2"),
    (R.adaptive_avg_pool2d, X4, ((-1, 2),), ValueError, "greater than or equal to 0"),
    (R.adaptive_avg_pool2d, np.zeros((4, 4), np.float32), (2,), ValueError, r"\(4, 4\)"),
    (R.adaptive_avg_pool2d, np.zeros((1, 0, 4, 4), np.float32), (2,), ValueError, "non-zero"),
    (R.adaptive_avg_pool1d, X4, (2,), ValueError, r"3-D input.*\(1, 2, 4, 4\)"),
    (R.adaptive_max_pool2d, X4, ((1, 2, 3),), ValueError, r"output_size must have 2"),
    (R.adaptive_avg_pool2d, X4, (2.5,), TypeError, "output_size"),
    (R.pixel_shuffle, X4, (0,), ValueError, "positive upscale_factor"),
    (R.pixel_shuffle, X4, (3,), ValueError, r"input.size\(-3\)=2 is not divisible by 9"),
    (R.pixel_shuffle, np.zeros((4, 4), np.float32), (2,), ValueError, "at least 3"),
    (R.pixel_unshuffle, X4, (3,), ValueError, "divisible by downscale_factor=3"),
])
def test_pool_and_shuffle_bad_input(fn, x, args, exc, match):
    with pytest.raises(exc, match=match):
        fn(nb.tensor(x), *args)


def test_integer_input_is_a_type_error():
    with pytest.raises(TypeError, match="interpolate: input must be float32 or float64"):
        R.interpolate(nb.tensor(np.zeros((1, 1, 3), np.int64)), size=4)
    with pytest.raises(TypeError, match="adaptive_avg_pool2d: input must be float"):
        R.adaptive_avg_pool2d(nb.tensor(np.zeros((1, 1, 3, 3), np.int64)), 2)
