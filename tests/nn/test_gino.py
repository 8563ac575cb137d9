"""GINO and FNOGNO (nbgrad/nn/gino.py) against a PyTorch reference of the same
composition written here from neuraloperator's models: GNO blocks on brute-force
neighbourhoods (sinusoidal embedding, kernel MLP, transforms, mean/sum reductions,
weighting), the ChannelMLP lifting/projection, and FNOBlocks (rfftn + centred modes +
irfft, linear skip, channel-MLP with soft-gating skip, gelu). Forward and every gradient
(features, coordinates, parameters) in float64 from weights copied by name, in 2-D and
3-D; float32; the neighbour-graph cache; training on poisson_point_cloud; bad input."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.datasets.point_cloud import poisson_point_cloud
from nbgrad.nn.gino import FNOGNO, GINO
from nbgrad.testing.gradcheck import gradcheck, gradgradcheck


# -- the PyTorch reference ----------------------------------------------------------------
def t_embed(torch, p, block):
    """Sinusoidal embedding: sin/cos of w_k p per coordinate (channels 2 L c + 2 k (+1))."""
    emb = block.pos_embedding
    if emb is None:
        return p
    k = torch.arange(emb.num_frequencies, dtype=torch.float64)
    if emb.embedding_type == "nerf":
        w = 2.0 ** k * math.pi
    else:
        w = (1.0 / emb.max_positions) ** (2.0 * k / emb.num_frequencies)
    phase = p[..., None] * w.to(p.dtype)
    return torch.stack([torch.sin(phase), torch.cos(phase)], -1).reshape(*p.shape[:-1], -1)


def t_gno(torch, block, p, pre, y, x, f):
    """GNOBlock: out_i = R_{|y_j - x_i| <= r} k([e(y_j), e(x_i)(, f_j)]) (* f_j) (* w)."""
    yd, xd = y.detach().numpy(), x.detach().numpy()
    d2 = ((xd[:, None, :] - yd[None, :, :]) ** 2).sum(-1)
    row, col = np.nonzero(d2 <= block.radius ** 2)
    rt, ct = torch.as_tensor(row), torch.as_tensor(col)
    h = torch.cat([t_embed(torch, y, block)[ct], t_embed(torch, x, block)[rt]], -1)
    f_nb = None if f is None else (f[ct] if f.ndim == 2 else f[:, ct, :])
    if block.transform_type.startswith("nonlinear"):
        if f_nb.ndim == 3:
            h = h.unsqueeze(0).expand(f_nb.shape[0], *h.shape)
        h = torch.cat([h, f_nb], -1)
    n = block.integral_transform.channel_mlp.n_layers
    for k in range(n):
        q = f"{pre}integral_transform.channel_mlp.fcs.{k}."
        h = h @ p[q + "weight"].T + p[q + "bias"]
        if k < n - 1:
            h = torch.nn.functional.gelu(h)
    if f_nb is not None and block.transform_type != "nonlinear_kernelonly":
        h = h * f_nb
    reduction = block.reduction
    if block.weighting_fn is not None:   # half_cos on the squared radius
        s = torch.as_tensor(d2[row, col])
        h = h * (0.5 * torch.cos(math.pi * s / block.radius ** 2) + 0.5)[:, None]
        reduction = "sum"
    out = torch.zeros(*h.shape[:-2], x.shape[0], h.shape[-1], dtype=h.dtype)
    out = out.index_add(out.ndim - 2, rt, h)
    if reduction == "mean":
        out = out / torch.bincount(rt, minlength=x.shape[0]).clamp(min=1).to(h.dtype)[:, None]
    return out


def t_mlp(torch, x, p, pre, n_layers):
    """ChannelMLP: 1x1 convolutions over [B, C, *grid], gelu between."""
    shape = list(x.shape)
    h = x.reshape(shape[0], shape[1], -1)
    for i in range(n_layers):
        h = torch.nn.functional.conv1d(h, p[f"{pre}fcs.{i}.weight"], p[f"{pre}fcs.{i}.bias"])
        if i < n_layers - 1:
            h = torch.nn.functional.gelu(h)
    return h.reshape([shape[0], h.shape[1]] + shape[2:])


def t_spectral(torch, x, p, pre):
    """SpectralConv (dense, max_n_modes = n_modes): rfftn(norm='forward'), the centred
    block of modes (fftshift on all but the last dim) times W, irfft with the zero and
    Nyquist bins made real."""
    d = x.ndim - 2
    dims = list(range(-d, 0))
    grid = list(x.shape[2:])
    size = grid[:-1] + [grid[-1] // 2 + 1]
    X = torch.fft.fftshift(torch.fft.rfftn(x, norm="forward", dim=dims), dim=dims[:-1])
    w = torch.complex(p[pre + "weight_real"], p[pre + "weight_imag"])
    sx = [slice(None), slice(None)]
    for n, k in zip(size[:-1], w.shape[2:-1]):
        sx.append(slice(n // 2 - k // 2, n // 2 + k // 2 + k % 2))
    sx.append(slice(None, w.shape[-1]))
    out = torch.zeros([x.shape[0], w.shape[1]] + size, dtype=X.dtype)
    letters = "xyz"[:d]
    out[tuple(sx)] = torch.einsum(f"bi{letters},io{letters}->bo{letters}", X[tuple(sx)], w)
    out = torch.fft.ifftn(torch.fft.ifftshift(out, dim=dims[:-1]), s=grid[:-1],
                          dim=dims[:-1], norm="forward")
    keep = torch.ones(size[-1], dtype=x.dtype)
    keep[0] = 0
    if grid[-1] % 2 == 0:
        keep[-1] = 0
    out = torch.complex(out.real, out.imag * keep)
    return torch.fft.irfft(out, n=grid[-1], dim=-1, norm="forward") + p[pre + "bias"]


def t_blocks(torch, v, p, n_layers):
    """FNOBlocks with the models' defaults: u = K(v) + W v; gelu; u = M(u) + s * v; gelu
    (no gelu after the last layer)."""
    gelu = torch.nn.functional.gelu
    for i in range(n_layers):
        pre = f"fno_blocks.{{}}.{i}."
        skip = torch.nn.functional.conv1d(v.reshape(v.shape[0], v.shape[1], -1),
                                          p[pre.format("fno_skips") + "conv.weight"])
        u = t_spectral(torch, v, p, pre.format("convs")) + skip.reshape(v.shape)
        last = i == n_layers - 1
        u = u if last else gelu(u)
        u = t_mlp(torch, u, p, pre.format("channel_mlp"), 2) + \
            p[pre.format("channel_mlp_skips") + "weight"] * v
        v = u if last else gelu(u)
    return v


def t_gino(torch, m, p, geom, latent, queries, x, lat_feat):
    """GINO.forward: gno_in (mean) on the latent grid, lifting, FNOBlocks, gno_out (sum)
    to the queries, projection."""
    grid = latent.shape[:-1]
    flat = latent.reshape(-1, latent.shape[-1])
    v = t_gno(torch, m.gno_in, p, "gno_in.", geom, flat, x)
    b = 1 if x is None else x.shape[0]
    v = v.reshape(b, *grid, v.shape[-1])
    if lat_feat is not None:
        v = torch.cat([v, lat_feat.expand(b, *lat_feat.shape[1:])], -1)
    v = v.permute(0, v.ndim - 1, *range(1, v.ndim - 1))
    v = t_blocks(torch, t_mlp(torch, v, p, "lifting.", 2), p, m.fno_blocks.n_layers)
    v = v.permute(0, *range(2, v.ndim), 1).reshape(b, -1, v.shape[1])
    if m.out_gno_tanh in ("latent_embed", "both"):
        v = torch.tanh(v)
    out = t_gno(torch, m.gno_out, p, "gno_out.", flat, queries, v)
    return t_mlp(torch, out.permute(0, 2, 1), p, "projection.", 2).permute(0, 2, 1)


def t_fnogno(torch, m, p, in_p, out_p, f):
    """FNOGNO.forward: lifting([f, coordinates]), FNOBlocks, gno to out_p, projection."""
    batched = f.ndim == in_p.ndim + 1
    fb = f if batched else f[None]
    v = torch.cat([fb, in_p[None].expand(fb.shape[0], *in_p.shape)], -1)
    v = v.permute(0, v.ndim - 1, *range(1, v.ndim - 1))
    v = t_blocks(torch, t_mlp(torch, v, p, "lifting.", 3), p, m.fno_blocks.n_layers)
    v = v.permute(0, *range(2, v.ndim), 1).reshape(v.shape[0], -1, v.shape[1])
    out = t_gno(torch, m.gno, p, "gno.", in_p.reshape(-1, in_p.shape[-1]), out_p,
                v if batched else v[0])
    out = out if batched else out[None]
    out = t_mlp(torch, out.permute(0, 2, 1), p, "projection.", 2).permute(0, 2, 1)
    return out if batched else out[0]


# -- comparison ----------------------------------------------------------------------------
def perturb(model, seed=1):
    """Move parameters off their initial values (soft-gating weights start at 1)."""
    rng = np.random.default_rng(seed)
    with nb.no_grad():
        for _, q in model.named_parameters():
            q.copy_(nb.tensor((q.numpy() + 0.2 * rng.standard_normal(q.shape))
                              .astype(q.numpy().dtype)))
    return model


def compare(torch, model, inputs, run_nb, run_torch, dtype=np.float64, seed=0):
    """Forward and the gradient of every input and parameter: nbgrad (``dtype``) against
    the float64 reference with the same parameters by name."""
    rng = np.random.default_rng(seed)
    for q in model.parameters():
        q.grad = None
    mine = {k: None if v is None else nb.tensor(v.astype(dtype), requires_grad=True)
            for k, v in inputs.items()}
    y = run_nb(mine)
    g = rng.standard_normal(y.shape)
    y.backward(nb.tensor(g.astype(dtype)))
    theirs = {k: None if v is None else torch.tensor(v, requires_grad=True)
              for k, v in inputs.items()}
    tp = {n: torch.tensor(q.numpy().astype(np.float64), requires_grad=True)
          for n, q in model.named_parameters()}
    ty = run_torch(theirs, tp)
    ty.backward(torch.tensor(g))
    tol = dict(rtol=1e-8, atol=1e-10) if dtype == np.float64 else dict(rtol=3e-3, atol=3e-4)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), err_msg="out", **tol)
    pairs = [(k, mine[k], theirs[k]) for k in inputs if inputs[k] is not None]
    params = dict(model.named_parameters())
    pairs += [(n, params[n], tp[n]) for n in tp]
    for name, a, b in pairs:
        want = np.zeros(b.shape) if b.grad is None else b.grad.numpy()
        got = np.zeros(b.shape) if a.grad is None else a.grad.numpy()
        atol = tol["atol"] * max(1.0, float(np.abs(want).max(initial=0.0)))
        np.testing.assert_allclose(got, want, rtol=tol["rtol"], atol=atol, err_msg=name)


def latent_grid(shape):
    axes = [np.linspace(0.0, 1.0, n) for n in shape]
    return np.stack(np.meshgrid(*axes, indexing="ij"), -1)


def small_gino(d, grid_modes, seed=0, dtype=np.float64, **kw):
    nb.manual_seed(seed)
    cfg = dict(gno_coord_dim=d, in_gno_radius=0.45, out_gno_radius=0.4, fno_in_channels=2,
               fno_n_modes=grid_modes, fno_hidden_channels=4, fno_n_layers=2,
               gno_embed_channels=2, in_gno_channel_mlp_hidden_layers=[6, 5],
               out_gno_channel_mlp_hidden_layers=[5], projection_channel_ratio=2,
               dtype=dtype)
    cfg.update(kw)
    return perturb(GINO(2, 2, **cfg))


GINO_CASES = [
    # (d, latent grid, fno_n_modes, batch (None: x omitted), kwargs)
    (2, (6, 5), (4, 4), 3, {}),
    (2, (5, 6), (4, 4), None, dict(in_gno_transform_type="linear")),
    (2, (6, 6), (4, 2), 2, dict(in_gno_transform_type="nonlinear",
                                out_gno_transform_type="nonlinear_kernelonly",
                                gno_weighting_function="half_cos")),
    (2, (6, 4), (2, 4), 2, dict(latent_feature_channels=3, out_gno_tanh="latent_embed",
                                in_gno_pos_embed_type=None, out_gno_pos_embed_type="nerf")),
    (3, (4, 4, 3), (2, 2, 2), 2, dict(in_gno_transform_type="nonlinear_kernelonly")),
    (3, (4, 3, 4), (4, 2, 2), None, dict(out_gno_transform_type="nonlinear",
                                         fno_n_layers=1)),
]


def gino_inputs(d, grid, batch, lat_channels, seed=0, n_in=24, n_out=9):
    rng = np.random.default_rng(seed)
    return dict(geom=rng.uniform(0, 1, (n_in, d)), latent=latent_grid(grid),
                queries=rng.uniform(0, 1, (n_out, d)),
                x=None if batch is None else rng.standard_normal((batch, n_in, 2)),
                lat=None if lat_channels is None else
                rng.standard_normal((1,) + tuple(grid) + (lat_channels,)))


def run_gino_both(torch, model, inputs, dtype=np.float64):
    compare(torch, model, inputs,
            lambda a: model(a["geom"][None], a["latent"][None], a["queries"][None], x=a["x"],
                            latent_features=a["lat"]),
            lambda a, p: t_gino(torch, model, p, a["geom"], a["latent"], a["queries"],
                                a["x"], a["lat"]), dtype=dtype)


# -- GINO against the reference ------------------------------------------------------------
@pytest.mark.parametrize("d, grid, modes, batch, kw", GINO_CASES)
def test_gino_forward_and_gradients_against_torch(d, grid, modes, batch, kw):
    torch = pytest.importorskip("torch")
    model = small_gino(d, modes, **kw)
    inputs = gino_inputs(d, grid, batch, kw.get("latent_feature_channels"))
    run_gino_both(torch, model, inputs)


def test_gino_float32_against_float64_reference():
    torch = pytest.importorskip("torch")
    model = small_gino(2, (4, 4), dtype=np.float32)
    run_gino_both(torch, model, gino_inputs(2, (6, 5), 2, None), dtype=np.float32)


@settings(max_examples=6)
@given(d=st.sampled_from([2, 3]), n_in=st.integers(1, 20), n_out=st.integers(1, 8),
       batch=st.sampled_from([None, 1, 2]), seed=st.integers(0, 50))
def test_gino_property_against_torch(d, n_in, n_out, batch, seed):
    torch = pytest.importorskip("torch")
    grid, modes = ((5, 4), (4, 2)) if d == 2 else ((3, 4, 3), (2, 2, 2))
    model = small_gino(d, modes, seed=seed)
    run_gino_both(torch, model, gino_inputs(d, grid, batch, None, seed, n_in, n_out))


def test_gino_dict_queries_and_reference_defaults():
    model = GINO(3, 1)
    assert model.gno_in.radius == model.gno_out.radius == 0.033
    assert model.gno_in.reduction == "mean" and model.gno_out.reduction == "sum"
    assert model.lifting.n_layers == 2 and model.lifting.hidden_channels == 128
    assert model.projection.hidden_channels == 256 and model.fno_blocks.n_layers == 4
    assert model.gno_in.integral_transform.channel_mlp.layers == [384, 80, 80, 80, 3]
    # kernel input: [e(y), e(x)], e of 2 * 32 frequencies * 3 coordinates each
    assert model.gno_out.integral_transform.channel_mlp.layers == [384, 512, 256, 64]
    small = small_gino(2, (4, 4))
    inp = gino_inputs(2, (6, 5), 2, None)
    q2 = inp["queries"][:4] * 0.5
    out = small(inp["geom"][None], inp["latent"][None], {"a": inp["queries"][None], "b": q2},
                x=inp["x"])
    ref = small(inp["geom"], inp["latent"], q2[None], x=inp["x"])
    assert set(out) == {"a", "b"} and out["a"].shape == (2, 9, 2)
    np.testing.assert_allclose(out["b"].numpy(), ref.numpy(), rtol=1e-12, atol=1e-14)


def test_neighbour_graphs_cached_per_coordinates():
    model = small_gino(2, (4, 4))
    inp = gino_inputs(2, (6, 5), 2, None)
    first = model(inp["geom"], inp["latent"], inp["queries"], x=inp["x"]).numpy()
    assert (model.gno_in.graph_cache_misses, model.gno_out.graph_cache_misses) == (1, 1)
    # equal coordinates in new arrays (and as Tensors) reuse both graphs
    again = model(nb.tensor(inp["geom"].copy()), inp["latent"].copy(), inp["queries"],
                  x=inp["x"]).numpy()
    assert (model.gno_in.graph_cache_hits, model.gno_out.graph_cache_hits) == (1, 1)
    np.testing.assert_array_equal(first, again)
    # coordinates edited in place are a new geometry: a new graph for gno_out only
    q = inp["queries"]
    q[0] = [0.0, 0.0]
    model(inp["geom"], inp["latent"], q, x=inp["x"])
    assert (model.gno_in.graph_cache_misses, model.gno_out.graph_cache_misses) == (1, 2)
    assert model.gno_in.graph_cache_hits == 2
    model.gno_out.clear_graph_cache()
    model(inp["geom"], inp["latent"], q, x=inp["x"])
    assert model.gno_out.graph_cache_misses == 3


def test_gino_double_backward():
    """Second derivatives through both GNOs and the FNO (nbgrad ops all the way)."""
    model = small_gino(2, (2, 2), in_gno_transform_type="nonlinear", fno_n_layers=1,
                       gno_channel_mlp_non_linearity=nb.tanh)
    inp = gino_inputs(2, (3, 3), 1, None, n_in=6, n_out=3)
    x = nb.tensor(inp["x"], requires_grad=True)

    def fn(x_):
        return model(inp["geom"], inp["latent"], inp["queries"], x=x_)

    assert gradcheck(fn, [x])
    assert gradgradcheck(fn, [x])


# -- FNOGNO --------------------------------------------------------------------------------
def small_fnogno(d, modes, seed=0, dtype=np.float64, **kw):
    nb.manual_seed(seed)
    cfg = dict(gno_coord_dim=d, fno_n_modes=modes, fno_hidden_channels=4, fno_n_layers=2,
               fno_lifting_channel_ratio=2, gno_radius=0.4, gno_embed_channels=2,
               gno_channel_mlp_hidden_layers=[6, 5], projection_channel_ratio=2, dtype=dtype)
    cfg.update(kw)
    return perturb(FNOGNO(2, 3, **cfg))


@pytest.mark.parametrize("d, grid, modes, batch, kw", [
    (2, (6, 5), (4, 4), None, {}),
    (2, (6, 6), (2, 4), 3, dict(gno_batched=True, gno_transform_type="nonlinear")),
    (2, (5, 6), (4, 4), None, dict(gno_weighting_function="half_cos",
                                   gno_pos_embed_type="nerf")),
    (3, (4, 4, 3), (2, 2, 2), None, dict(gno_transform_type="nonlinear_kernelonly")),
    (3, (3, 4, 4), (2, 4, 2), 2, dict(gno_batched=True, gno_pos_embed_type=None)),
])
def test_fnogno_forward_and_gradients_against_torch(d, grid, modes, batch, kw):
    torch = pytest.importorskip("torch")
    model = small_fnogno(d, modes, **kw)
    rng = np.random.default_rng(3)
    lead = () if batch is None else (batch,)
    inputs = dict(in_p=latent_grid(grid), out_p=rng.uniform(0, 1, (7, d)),
                  f=rng.standard_normal(lead + tuple(grid) + (2,)))
    compare(torch, model, inputs, lambda a: model(a["in_p"], a["out_p"], a["f"]),
            lambda a, p: t_fnogno(torch, model, p, a["in_p"], a["out_p"], a["f"]))


def test_fnogno_reference_defaults():
    model = FNOGNO(2, 1)
    assert model.lifting.n_layers == 3 and model.lifting.in_channels == 5
    assert model.lifting.hidden_channels == 256 and model.projection.hidden_channels == 256
    assert model.gno.reduction == "sum" and model.gno.radius == 0.033
    assert model.gno.integral_transform.channel_mlp.layers == [384, 512, 256, 64]


# -- training ------------------------------------------------------------------------------
def test_gino_training_on_poisson_point_cloud_reduces_the_loss():
    data = poisson_point_cloud(n_samples=3, n_points=60, n_queries=30, seed=0, dim=2,
                               cache=False)
    nb.manual_seed(0)
    model = GINO(2, 1, gno_coord_dim=2, in_gno_radius=0.5, out_gno_radius=0.4,
                 in_gno_transform_type="nonlinear_kernelonly", fno_n_modes=(4, 4),
                 fno_hidden_channels=6, fno_n_layers=2, gno_embed_channels=3,
                 in_gno_channel_mlp_hidden_layers=[16], out_gno_channel_mlp_hidden_layers=[16],
                 projection_channel_ratio=2, dtype=np.float64)
    latent = latent_grid((8, 8)) * 2.0 - 1.0   # the grid covers the unit disc's box
    opt = nb.optim.Adam(model.parameters(), lr=5e-3)

    def epoch(train):
        total = 0.0
        for s in range(3):
            out = model(data["points"][s][None], latent[None], data["queries"][s][None],
                        x=data["features"][s][None])
            loss = ((out - nb.tensor(data["u"][s][None])) ** 2).mean()
            if train:
                opt.zero_grad()
                loss.backward()
                opt.step()
            total += float(loss.item())
        return total

    before = epoch(False)
    for _ in range(15):
        epoch(True)
    after = epoch(False)
    assert after < 0.5 * before, (before, after)
    # one latent grid for every sample: its graphs were built once per sample geometry
    assert model.gno_out.graph_cache_misses == 3


# -- bad input -----------------------------------------------------------------------------
def test_mismatched_coordinate_dims_name_layer_and_argument():
    model = small_gino(2, (4, 4))
    inp = gino_inputs(2, (6, 5), 2, None)
    with pytest.raises(ValueError, match=r"GINO: output_queries has shape \(1, 9, 3\).*"
                                         r"gno_coord_dim=2"):
        model(inp["geom"], inp["latent"], np.zeros((1, 9, 3)), x=inp["x"])
    with pytest.raises(ValueError, match=r"GINO: input_geom has shape \(24, 3\)"):
        model(np.zeros((24, 3)), inp["latent"], inp["queries"], x=inp["x"])
    with pytest.raises(ValueError, match=r"GINO: latent_queries has shape \(6, 5, 3\)"):
        model(inp["geom"], np.zeros((6, 5, 3)), inp["queries"], x=inp["x"])
    with pytest.raises(ValueError, match=r"GINO: x has shape \(2, 23, 2\)"):
        model(inp["geom"], inp["latent"], inp["queries"], x=inp["x"][:, :23])
    with pytest.raises(ValueError, match="GINO: latent_features given"):
        model(inp["geom"], inp["latent"], inp["queries"], latent_features=np.zeros((1, 6, 5, 1)))
    fg = small_fnogno(2, (4, 4))
    with pytest.raises(ValueError, match=r"FNOGNO: out_p has shape \(7, 3\)"):
        fg(latent_grid((6, 5)), np.zeros((7, 3)), np.zeros((6, 5, 2)))
    with pytest.raises(ValueError, match=r"FNOGNO: f has shape \(6, 4, 2\)"):
        fg(latent_grid((6, 5)), np.zeros((7, 2)), np.zeros((6, 4, 2)))
    with pytest.raises(ValueError, match="FNOGNO: fno_n_modes .* gno_coord_dim=3"):
        FNOGNO(2, 1, gno_coord_dim=3, fno_n_modes=(4, 4))


@pytest.mark.parametrize("grid, match", [
    ((3, 5), r"fno_n_modes\[0\] = 4 keeps 4 modes but grid dim 0 of latent_queries"),
    ((6, 1), r"fno_n_modes\[1\] = 4 keeps 3 rfft bins .* only 1 Fourier"),
])
def test_modes_above_nyquist_name_layer_and_argument(grid, match):
    model = small_gino(2, (4, 4))
    inp = gino_inputs(2, grid, 1, None)
    with pytest.raises(ValueError, match="GINO: " + match):
        model(inp["geom"], inp["latent"], inp["queries"], x=inp["x"])
    fg = small_fnogno(2, (4, 4))
    with pytest.raises(ValueError, match=r"FNOGNO: fno_n_modes\[.\] = 4 .* of in_p"):
        fg(latent_grid(grid), np.zeros((7, 2)), np.zeros(grid + (2,)))


def test_bad_construction_and_unsupported_options():
    with pytest.raises(ValueError, match="GINO: out_gno_tanh"):
        GINO(2, 1, out_gno_tanh="yes")
    with pytest.raises(ValueError, match="GINO: fno_n_modes"):
        GINO(2, 1, fno_n_modes=(4, 4, 4, 4))
    with pytest.raises(NotImplementedError, match="ada_in"):
        GINO(2, 1, fno_norm="ada_in")
    model = small_gino(2, (4, 4))
    inp = gino_inputs(2, (6, 5), 1, None)
    with pytest.raises(NotImplementedError, match="GINO: ada_in"):
        model(inp["geom"], inp["latent"], inp["queries"], x=inp["x"], ada_in=np.ones(1))
    with pytest.warns(UserWarning, match="unexpected keyword"):
        model(inp["geom"], inp["latent"], inp["queries"], x=inp["x"], extra=1)
