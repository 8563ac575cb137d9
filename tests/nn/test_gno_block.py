"""GNOBlock (nbgrad/nn/gno_block.py) against a PyTorch reference of the same math written
here: neighbourhoods from a brute-force distance matrix, the sinusoidal embedding, the
LinearChannelMLP kernel, the four transforms, sum/mean reductions and the half-cos
weighting; forward and every gradient (f_y, the points, each parameter) in float64 from
the same weights copied by name; float32; double backward; bad input."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.nn.gno_block import (
    GNOBlock,
    LinearChannelMLP,
    dispatch_weighting_fn,
    half_cos_weighting,
)
from nbgrad.testing.gradcheck import gradcheck, gradgradcheck
from nbgrad.testing.torch_reference_gino import sinusoidal_embedding

TRANSFORMS = ["linear", "nonlinear_kernelonly", "nonlinear"]


# -- the PyTorch reference -------------------------------------------------------------------


def brute_neighbours(y: np.ndarray, x: np.ndarray, radius: float):
    """(row, col) of every pair |x_i - y_j| <= radius, rows in order, columns increasing."""
    d2 = ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1)
    row, col = np.nonzero(d2 <= radius * radius)
    return row, col, d2[row, col]


def torch_gno(torch, block, params, y, x, f, weighting=None):
    """The reference's integral transform on brute-force neighbourhoods."""
    row, col, d2 = brute_neighbours(y.detach().numpy().astype(np.float64),
                                    x.detach().numpy().astype(np.float64), block.radius)
    row_t, col_t = torch.as_tensor(row), torch.as_tensor(col)
    feats = torch.cat([sinusoidal_embedding(torch, y, block.pos_embedding)[col_t],
                       sinusoidal_embedding(torch, x, block.pos_embedding)[row_t]], -1)
    f_nb = None
    if f is not None:
        f_nb = f[col_t] if f.ndim == 2 else f[:, col_t, :]
    if block.transform_type.startswith("nonlinear"):
        if f_nb.ndim == 3:
            feats = feats.unsqueeze(0).expand(f_nb.shape[0], *feats.shape)
        feats = torch.cat([feats, f_nb], -1)
    n_layers = block.integral_transform.channel_mlp.n_layers
    for k in range(n_layers):
        pre = "integral_transform.channel_mlp.fcs"
        feats = feats @ params[f"{pre}.{k}.weight"].T + params[f"{pre}.{k}.bias"]
        if k < n_layers - 1:
            feats = torch.nn.functional.gelu(feats)
    rep = feats
    if f_nb is not None and block.transform_type != "nonlinear_kernelonly":
        rep = rep * f_nb
    reduction = block.reduction
    if weighting is not None:
        rep = rep * weighting(torch.as_tensor(d2, dtype=rep.dtype))[:, None]
        reduction = "sum"
    m = x.shape[0]
    out = torch.zeros(*rep.shape[:-2], m, rep.shape[-1], dtype=rep.dtype)
    out = out.index_add(out.ndim - 2, row_t, rep)
    if reduction == "mean":
        counts = torch.bincount(row_t, minlength=m).clamp(min=1).to(rep.dtype)
        out = out / counts[:, None]
    return out


# -- comparison ------------------------------------------------------------------------------


def compare(block, y, x, f, weighting=None, seed=0, rtol=1e-9, atol=1e-11):
    """Forward and all gradients of nbgrad's block against torch_gno (float64 reference)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(seed)
    block.zero_grad()
    yn = nb.tensor(y, requires_grad=True)
    xn = nb.tensor(x, requires_grad=True)
    fn_ = None if f is None else nb.tensor(f, requires_grad=True)
    out = block(yn, xn, fn_)
    g = rng.normal(size=out.shape)
    (out * nb.tensor(g.astype(out.numpy().dtype))).sum().backward()

    params = {name: torch.tensor(p.numpy().astype(np.float64), requires_grad=True)
              for name, p in block.named_parameters()}
    yt = torch.tensor(y.astype(np.float64), requires_grad=True)
    xt = torch.tensor(x.astype(np.float64), requires_grad=True)
    ft = None if f is None else torch.tensor(f.astype(np.float64), requires_grad=True)
    ref = torch_gno(torch, block, params, yt, xt, ft, weighting)
    (ref * torch.tensor(g)).sum().backward()

    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=rtol, atol=atol)
    pairs = [("y", yn, yt), ("x", xn, xt)] + ([] if f is None else [("f_y", fn_, ft)])
    named = dict(block.named_parameters())
    pairs += [(name, named[name], t) for name, t in params.items()]
    for name, mine, theirs in pairs:
        want = np.zeros(theirs.shape) if theirs.grad is None else theirs.grad.numpy()
        got = np.zeros(theirs.shape) if mine.grad is None else mine.grad.numpy()
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=name)


def cloud(rng, n, d):
    return rng.uniform(-1, 1, (n, d))


def small_block(transform, reduction="sum", c_in=3, c_out=3, d=2, radius=0.7, **kw):
    kw.setdefault("channel_mlp_layers", [6, 5])
    kw.setdefault("pos_embedding_channels", 3)
    return GNOBlock(c_in, c_out, d, radius, transform_type=transform, reduction=reduction,
                    dtype=np.float64, **kw)


# -- tests -----------------------------------------------------------------------------------


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("reduction", ["sum", "mean"])
@pytest.mark.parametrize("batched", [False, True])
def test_transforms_match_torch(transform, reduction, batched):
    rng = np.random.default_rng(1)
    y, x = cloud(rng, 14, 2), cloud(rng, 9, 2)
    f = rng.normal(size=(2, 14, 3) if batched else (14, 3))
    compare(small_block(transform, reduction), y, x, f)


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_linear_kernel_only_matches_torch(reduction):
    """'linear' without f: out(x) = R k(x, y), out_channels free."""
    rng = np.random.default_rng(2)
    y, x = cloud(rng, 12, 3), cloud(rng, 6, 3)
    compare(small_block("linear", reduction, c_in=2, c_out=4, d=3, radius=1.1), y, x, None)


@pytest.mark.parametrize("embedding", ["nerf", None])
def test_other_embeddings_match_torch(embedding):
    rng = np.random.default_rng(3)
    y, x = cloud(rng, 10, 2), cloud(rng, 5, 2)
    block = small_block("nonlinear", pos_embedding_type=embedding)
    compare(block, y, x, rng.normal(size=(10, 3)))


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_half_cos_weighting_matches_torch(transform):
    """A weighting function multiplies each term by w(|x - y|^2) and forces the sum."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    y, x = cloud(rng, 13, 2), cloud(rng, 7, 2)
    r = 0.8
    block = small_block(transform, "mean", radius=r, weighting_fn="half_cos")

    def weighting(s):
        return 0.5 * torch.cos(math.pi * s / r ** 2) + 0.5
    compare(block, y, x, rng.normal(size=(13, 3)), weighting=weighting)
    # the same through dispatch_weighting_fn, with a scale
    block.weighting_fn = dispatch_weighting_fn("half_cos", r ** 2, 2.0)
    compare(block, y, x, rng.normal(size=(13, 3)), weighting=lambda s: 2.0 * weighting(s))


def test_default_block_matches_torch():
    """The reference's defaults: transformer embedding of 32 frequencies, MLP
    [2*128, 128, 256, 128, out], gelu."""
    rng = np.random.default_rng(5)
    y, x = cloud(rng, 11, 2), cloud(rng, 6, 2)
    block = GNOBlock(2, 2, 2, 0.6, dtype=np.float64)
    assert block.integral_transform.channel_mlp.layers == [256, 128, 256, 128, 2]
    compare(block, y, x, rng.normal(size=(11, 2)))


def test_float32_close_to_float64_reference():
    rng = np.random.default_rng(6)
    y, x = cloud(rng, 12, 2), cloud(rng, 8, 2)
    block = GNOBlock(3, 3, 2, 0.7, transform_type="nonlinear", channel_mlp_layers=[8, 8],
                     pos_embedding_channels=4, dtype=np.float32)
    out = block(y.astype(np.float32), x.astype(np.float32),
                nb.tensor(rng.normal(size=(12, 3)).astype(np.float32)))
    assert out.numpy().dtype == np.float32
    compare(block, y.astype(np.float32), x.astype(np.float32),
            rng.normal(size=(12, 3)).astype(np.float32), rtol=2e-4, atol=2e-5)


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 12), m=st.integers(1, 8), d=st.sampled_from([2, 3]),
       radius=st.floats(0.05, 2.0), transform=st.sampled_from(TRANSFORMS),
       reduction=st.sampled_from(["sum", "mean"]), seed=st.integers(0, 2 ** 16))
def test_property_point_counts_dims_radius(n, m, d, radius, transform, reduction, seed):
    """Any point counts, 2-D or 3-D, any radius (empty neighbourhoods give 0)."""
    rng = np.random.default_rng(seed)
    block = small_block(transform, reduction, c_in=2, c_out=2, d=d, radius=radius)
    compare(block, cloud(rng, n, d), cloud(rng, m, d), rng.normal(size=(n, 2)), seed=seed)


def test_empty_neighbourhoods_give_zero():
    y = np.zeros((3, 2))
    x = np.full((2, 2), 5.0)
    block = small_block("linear", "mean")
    out = block(y, x, nb.tensor(np.ones((3, 3))))
    np.testing.assert_array_equal(out.numpy(), np.zeros((2, 3)))


def test_gradcheck_and_gradgradcheck():
    """Double backward through the registry (f_y; the parameters are compared above)."""
    rng = np.random.default_rng(8)
    y, x = cloud(rng, 6, 2), cloud(rng, 4, 2)
    block = small_block("nonlinear", "mean", c_in=2, c_out=2, channel_mlp_layers=[4],
                        pos_embedding_channels=2, channel_mlp_non_linearity=nb.tanh)
    f = nb.tensor(rng.normal(size=(6, 2)), requires_grad=True)
    w = block.integral_transform.channel_mlp.fcs[0].weight
    assert gradcheck(lambda f_: block(y, x, f_), [f])
    assert gradgradcheck(lambda f_: block(y, x, f_), [f])
    assert w.shape == (4, 2 * 2 * 2 * 2 + 2)


def test_weighting_functions_values():
    s = nb.tensor(np.array([0.0, 0.25, 1.0]))
    np.testing.assert_allclose(half_cos_weighting(s, radius=1.0).numpy(),
                               0.5 * np.cos(np.pi * np.array([0.0, 0.25, 1.0])) + 0.5)
    for name in ("half_cos", "quartic", "octic", "bump"):
        w = dispatch_weighting_fn(name, 1.0, 1.0)(nb.tensor(np.array([0.0, 1.0])))
        np.testing.assert_allclose(w.numpy(), [1.0, 0.0], atol=1e-6, err_msg=name)


def test_linear_channel_mlp_shapes():
    mlp = LinearChannelMLP([3, 5, 2], dtype=np.float64)
    assert mlp(nb.tensor(np.ones((4, 7, 3)))).shape == (4, 7, 2)
    with pytest.raises(ValueError, match="LinearChannelMLP: layers"):
        LinearChannelMLP([3])


# -- bad input -------------------------------------------------------------------------------


def test_mismatched_coordinate_dims():
    block = small_block("linear", d=2)
    with pytest.raises(ValueError, match=r"GNOBlock: x has shape \(4, 3\).*coord_dim=2"):
        block(np.zeros((5, 2)), np.zeros((4, 3)), nb.tensor(np.zeros((5, 3))))
    with pytest.raises(ValueError, match=r"GNOBlock: y has shape \(5, 3\)"):
        block(np.zeros((5, 3)), np.zeros((4, 2)), nb.tensor(np.zeros((5, 3))))


def test_wrong_feature_shape():
    block = small_block("nonlinear")
    with pytest.raises(ValueError, match=r"GNOBlock: f_y has shape \(4, 3\), expected \[5, 3\]"):
        block(np.zeros((5, 2)), np.zeros((4, 2)), nb.tensor(np.zeros((4, 3))))
    with pytest.raises(ValueError, match=r"GNOBlock: f_y has shape \(5, 2\)"):
        block(np.zeros((5, 2)), np.zeros((4, 2)), nb.tensor(np.zeros((5, 2))))
    with pytest.raises(ValueError, match="GNOBlock: transform_type='nonlinear' needs f_y"):
        block(np.zeros((5, 2)), np.zeros((4, 2)))
    lin = small_block("linear", c_in=3, c_out=4)
    with pytest.raises(ValueError, match=r"out_channels \(4\) must equal in_channels \(3\)"):
        lin(np.zeros((5, 2)), np.zeros((4, 2)), nb.tensor(np.zeros((5, 3))))


@pytest.mark.parametrize("kwargs, match", [
    (dict(transform_type="linear_kernel"), "GNOBlock: transform_type must be one of"),
    (dict(reduction="max"), "GNOBlock: reduction must be"),
    (dict(radius=0.0), "GNOBlock: radius must be a finite positive number"),
    (dict(radius=float("nan")), "GNOBlock: radius"),
    (dict(pos_embedding_type="grid"), "GNOBlock: pos_embedding_type"),
    (dict(weighting_fn="gauss"), "dispatch_weighting_fn: weight_function_name"),
    (dict(transform_type="nonlinear", out_channels=4), "out_channels \\(4\\) must equal"),
])
def test_bad_constructor_arguments(kwargs, match):
    args = dict(in_channels=3, out_channels=3, coord_dim=2, radius=0.5)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        GNOBlock(**args)
    with pytest.raises(TypeError, match="GNOBlock: weighting_fn"):
        GNOBlock(3, 3, 2, 0.5, weighting_fn=3)


def test_nan_points_rejected():
    block = small_block("linear")
    with pytest.raises(ValueError, match="GNOBlock: y has a NaN"):
        block(np.array([[np.nan, 0.0]]), np.zeros((2, 2)), nb.tensor(np.zeros((1, 3))))
