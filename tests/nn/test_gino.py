"""GINO and FNOGNO (nbgrad/nn/gino.py) against a PyTorch reference of the same composition
in nbgrad.testing.torch_reference_gino (from neuraloperator's models): GNO blocks on
brute-force neighbourhoods (sinusoidal embedding, kernel MLP, transforms, mean/sum
reductions, weighting), the ChannelMLP lifting/projection, and FNOBlocks (rfftn +
centred modes + irfft, linear skip, channel-MLP with soft-gating skip, gelu). Forward
and every gradient (features, coordinates, parameters) in float64 from weights copied by
name, in 2-D and 3-D; float32; the neighbour-graph cache; training on
poisson_point_cloud; bad input."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.datasets.point_cloud import poisson_point_cloud
from nbgrad.nn.gino import FNOGNO, GINO
from nbgrad.testing.gradcheck import gradcheck, gradgradcheck
from nbgrad.testing.torch_reference import torch_parameters
from nbgrad.testing.torch_reference_gino import fnogno_forward, gino_forward


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
    tp = torch_parameters(torch, model, torch.float64)
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
            lambda a, p: gino_forward(torch, model, p, a["geom"], a["latent"], a["queries"],
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
            lambda a, p: fnogno_forward(torch, model, p, a["in_p"], a["out_p"], a["f"]))


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
