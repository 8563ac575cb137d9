"""FNOBlocks, FNO and TFNO (neuraloperator's configuration, grids of 1-3 dims) against a
PyTorch reference of the same architecture from the reference library's code
(nbgrad.testing.torch_reference: rfftn + centred mode slices + irfft, 1x1 convolutions,
gelu, group / instance / batch norm, soft-gating, symmetric domain padding, the grid
embedding): the reference takes the nbgrad model's parameters by name and must reproduce
its forward and every gradient (input and parameters), float64 and float32, for the
skips, channel-MLP, padding, embedding, norms, preactivation and n_modes settings;
hypothesis over small configurations; training; bad input."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.nn.embeddings import GridEmbedding2D, GridEmbeddingND
from nbgrad.nn.fno import FNO, TFNO, FNOBlocks, SoftGating, skip_connection
from nbgrad.nn.operator_blocks import AdaIN
from nbgrad.testing import gradcheck, gradgradcheck
from nbgrad.testing.torch_reference import fno_block, fno_forward, norm, torch_parameters


# -- comparison ----------------------------------------------------------------------------
def compare(torch, model, x_shape, run_torch, dtype=np.float64, seed=0):
    """Forward and every gradient of ``model`` (nbgrad, ``dtype``) against ``run_torch``
    (float64, the same parameters by name)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape)
    names = [n for n, _ in model.named_parameters()]
    params = dict(model.named_parameters())
    for q in params.values():
        q.grad = None
    xt = nb.tensor(x.astype(dtype), requires_grad=True)
    y = model(xt)
    g = rng.standard_normal(y.shape)
    y.backward(nb.tensor(g.astype(dtype)))
    tx = torch.tensor(x, requires_grad=True)
    tp = torch_parameters(torch, model, torch.float64)
    ty = run_torch(tx, tp)
    ty.backward(torch.tensor(g))
    tol = (dict(rtol=1e-9, atol=1e-11) if dtype == np.float64
           else dict(rtol=2e-3, atol=2e-4))
    assert y.dtype == dtype
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), err_msg="y", **tol)
    np.testing.assert_allclose(xt.grad.numpy(), tx.grad.numpy(), err_msg="x.grad", **tol)
    for n in names:
        # gradient scales differ by orders between parameters: compare each to its own size
        if tp[n].grad is None:   # a parameter of another layer than the one run
            assert params[n].grad is None or not np.any(params[n].grad.numpy()), n
            continue
        ref = tp[n].grad.numpy()
        atol = tol["atol"] * max(1.0, float(np.abs(ref).max()))
        np.testing.assert_allclose(params[n].grad.numpy(), ref, rtol=tol["rtol"], atol=atol,
                                   err_msg=n)


def compare_fno(torch, model, x_shape, dtype=np.float64, seed=0):
    compare(torch, model, x_shape, lambda tx, tp: fno_forward(torch, tx, tp, model), dtype, seed)


def make(n_modes, cin, cout, hidden, seed=0, **kw):
    nb.manual_seed(seed)
    kw.setdefault("dtype", np.float64)
    return FNO(n_modes, cin, cout, hidden, **kw)


def perturb(model, seed=1):
    """Move the parameters off their initial values (soft-gating weights and norm
    weights start at 1, biases at 0), so every term of the reference is exercised."""
    rng = np.random.default_rng(seed)
    with nb.no_grad():
        for _, q in model.named_parameters():
            q.copy_(nb.tensor((q.numpy() + 0.3 * rng.standard_normal(q.shape))
                              .astype(q.numpy().dtype)))
    return model


# -- PyTorch oracle ------------------------------------------------------------------------
FNO_CASES = [
    # (n_modes, grid, kwargs)
    ((8,), (16,), {}),
    ((6, 6), (10, 9), {}),
    ((4, 4, 4), (6, 5, 6), dict(n_layers=2)),
    ((5,), (12,), dict(fno_skip="soft-gating", channel_mlp_skip="linear")),
    ((4, 6), (8, 8), dict(fno_skip="identity", channel_mlp_skip="identity", n_layers=3)),
    ((4, 6), (8, 8), dict(fno_skip=None, channel_mlp_skip=None, n_layers=2)),
    ((4, 4), (8, 7), dict(use_channel_mlp=False, n_layers=3)),
    ((6, 4), (9, 8), dict(domain_padding=0.25, n_layers=2)),
    ((4, 4, 2), (5, 6, 4), dict(domain_padding=[0.2, 0.0, 0.5], n_layers=2)),
    ((4, 4), (8, 8), dict(positional_embedding=None, n_layers=2)),
    ((4, 4), (8, 8), dict(positional_embedding=GridEmbedding2D(2, [[-1, 1], [0, 2]]),
                          n_layers=2)),
    ((6,), (10,), dict(norm="group_norm", norm_groups=2, n_layers=2)),
    ((4, 4), (8, 8), dict(norm="instance_norm", n_layers=2)),
    ((4, 4, 4), (4, 5, 6), dict(norm="batch_norm", n_layers=2)),
    ((6,), (12,), dict(preactivation=True, n_layers=3)),
    ((4, 6), (8, 8), dict(preactivation=True, norm="group_norm", norm_groups=2,
                          domain_padding=0.125, n_layers=2)),
    ((6,), (12,), dict(stabilizer="tanh", n_layers=2, lifting_channel_ratio=1.5,
                       projection_channel_ratio=3, channel_mlp_expansion=1.0)),
    ((6, 6), (8, 8), dict(separable=True, max_n_modes=(8, 4), n_layers=2)),
    ((5,), (12,), dict(conv_bias_kernel=3, n_layers=2)),
    ((4, 4), (8, 8), dict(conv_bias_kernel=2, n_layers=2)),
]


@pytest.mark.parametrize("n_modes, grid, kw", FNO_CASES)
def test_fno_forward_and_gradients_against_torch_float64(n_modes, grid, kw):
    torch = pytest.importorskip("torch")
    model = perturb(make(n_modes, 2, 3, 4, **kw))
    compare_fno(torch, model, (2, 2) + grid)


@pytest.mark.parametrize("case", [0, 1, 2, 7, 15])
def test_fno_float32_against_torch_float64(case):
    torch = pytest.importorskip("torch")
    n_modes, grid, kw = FNO_CASES[case]
    model = perturb(make(n_modes, 2, 3, 4, **dict(kw, dtype=np.float32)))
    compare_fno(torch, model, (2, 2) + grid, dtype=np.float32)


def test_fno_blocks_alone_in_and_out_channels_differ():
    torch = pytest.importorskip("torch")
    nb.manual_seed(2)
    blocks = perturb(FNOBlocks(3, 5, (4, 4), n_layers=2, channel_mlp_skip="linear",
                               dtype=np.float64))
    # forward(x, index) runs layer index: layer 0 (not the last) ends in gelu, layer 1 not
    for i in (0, 1):
        compare(torch, _Indexed(blocks, i), (2, 3, 6, 8),
                lambda tx, tp, i=i: fno_block(torch, tx, tp, blocks, i, pre=""), seed=i)


class _Indexed(nb.nn.Module):
    def __init__(self, blocks, index):
        super().__init__()
        self.blocks, self.index = blocks, index

    def named_parameters(self, *args, **kwargs):
        return self.blocks.named_parameters(*args, **kwargs)

    def forward(self, x):
        return self.blocks(x, self.index)


def test_n_modes_set_after_construction_against_torch():
    torch = pytest.importorskip("torch")
    model = perturb(make((8, 8), 1, 1, 4, n_layers=2))
    assert model.n_modes == (8, 8) and model.fno_blocks.convs[0].n_modes == [8, 5]
    model.n_modes = (5, 4)
    assert model.n_modes == (5, 4) and model.fno_blocks.n_modes == (5, 4)
    assert all(c.n_modes == [5, 3] for c in model.fno_blocks.convs)
    assert model.fno_blocks.convs[1].weight_real.shape == (4, 4, 8, 5)
    compare_fno(torch, model, (2, 1, 6, 7))


def test_second_derivatives_against_torch():
    torch = pytest.importorskip("torch")
    model = perturb(make((4,), 1, 1, 3, n_layers=2, norm="group_norm"))
    rng = np.random.default_rng(3)
    x, g = rng.standard_normal((2, 1, 8)), rng.standard_normal((2, 1, 8))
    names = [n for n, _ in model.named_parameters()]
    params = [q for _, q in model.named_parameters()]
    xt = nb.tensor(x, requires_grad=True)
    first = nb.grad((model(xt) * nb.tensor(g)).sum(), [xt] + params, create_graph=True)
    # the last bias's first derivative is sum(g), which no leaf changes: leave it out
    keep = [k for k, n in enumerate(["x"] + names) if n != "projection.fcs.1.bias"]
    leaves = [xt] + params
    second = nb.grad(sum((d * d).sum() for d in first), [leaves[k] for k in keep])
    tx = torch.tensor(x, requires_grad=True)
    tp = {n: torch.tensor(q.numpy(), requires_grad=True) for n, q in zip(names, params)}
    ty = fno_forward(torch, tx, tp, model)
    tleaves = [tx] + [tp[n] for n in names]
    tfirst = torch.autograd.grad((ty * torch.tensor(g)).sum(), tleaves, create_graph=True)
    tsecond = torch.autograd.grad(sum((d * d).sum() for d in tfirst),
                                  [tleaves[k] for k in keep])
    for n, a, b in zip([(["x"] + names)[k] for k in keep], second, tsecond):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-9, atol=1e-10, err_msg=n)


# -- hypothesis: small configurations -----------------------------------------------------
SKIPS = st.sampled_from(["linear", "identity", "soft-gating", None])


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 3), st.integers(1, 2), SKIPS, SKIPS, st.booleans(), st.booleans(),
       st.sampled_from([None, "group_norm", "instance_norm"]), st.data())
def test_property_against_torch(d, n_layers, fno_skip, mlp_skip, use_mlp, pre, norm, data):
    torch = pytest.importorskip("torch")
    grid = tuple(data.draw(st.lists(st.integers(3, 7), min_size=d, max_size=d), label="grid"))
    n_modes = [data.draw(st.integers(1, n), label=f"n_modes[{j}]")
               for j, n in enumerate(grid)]
    padding = data.draw(st.sampled_from([None, 0.0, 0.2]), label="domain_padding")
    embed = data.draw(st.sampled_from(["grid", None]), label="positional_embedding")
    model = perturb(make(n_modes, 2, 1, 2, n_layers=n_layers, fno_skip=fno_skip,
                         channel_mlp_skip=mlp_skip, use_channel_mlp=use_mlp,
                         preactivation=pre, norm=norm, domain_padding=padding,
                         positional_embedding=embed, seed=sum(grid)), seed=len(grid))
    compare_fno(torch, model, (2, 2) + grid, seed=n_layers)


# -- layout, defaults, skips ---------------------------------------------------------------
def test_reference_defaults_and_state_dict_layout():
    model = FNO((8, 8), 1, 1, 16)
    keys = set(model.state_dict())
    assert model.n_layers == 4 and model.lifting_channels == 32
    assert model.projection_channels == 32
    assert isinstance(model.positional_embedding, GridEmbeddingND)
    assert model.domain_padding is None and model.fno_blocks.norm is None
    for key in ("lifting.fcs.0.weight", "lifting.fcs.1.bias", "projection.fcs.1.weight",
                "fno_blocks.convs.3.weight_real", "fno_blocks.convs.0.bias",
                "fno_blocks.fno_skips.0.conv.weight", "fno_blocks.channel_mlp.2.fcs.0.weight",
                "fno_blocks.channel_mlp_skips.1.weight"):
        assert key in keys, key
    assert model.state_dict()["lifting.fcs.0.weight"].shape == (32, 3, 1)   # 1 + 2 coords
    assert model.state_dict()["fno_blocks.channel_mlp.0.fcs.0.weight"].shape == (8, 16, 1)
    assert "fno_blocks.fno_skips.0.conv.bias" not in keys
    assert model.state_dict()["fno_blocks.convs.0.weight_real"].shape == (16, 16, 8, 5)
    np.testing.assert_array_equal(
        model.state_dict()["fno_blocks.channel_mlp_skips.0.weight"].numpy(),
        np.ones((1, 16, 1, 1)))
    assert model(nb.randn(2, 1, 10, 12)).shape == (2, 1, 10, 12)
    # a state dict loads into a model of the same configuration
    other = FNO((8, 8), 1, 1, 16)
    other.load_state_dict(model.state_dict())
    x = nb.randn(1, 1, 9, 9)
    np.testing.assert_array_equal(other(x).numpy(), model(x).numpy())


def test_skip_connection_kinds():
    x = nb.tensor(np.random.default_rng(0).standard_normal((2, 3, 4, 5)))
    gate = skip_connection(3, 3, n_dim=2, skip_type="soft-gating", dtype=np.float64)
    assert isinstance(gate, SoftGating) and gate.weight.shape == (1, 3, 1, 1)
    np.testing.assert_array_equal(gate(x).numpy(), x.numpy())
    assert skip_connection(3, 3, skip_type="identity")(x) is x
    lin = skip_connection(3, 2, n_dim=2, skip_type="LINEAR", dtype=np.float64)
    w = lin.conv.weight.numpy()[:, :, 0]
    np.testing.assert_allclose(lin(x).numpy(), np.einsum("oi,bihw->bohw", w, x.numpy()),
                               rtol=1e-12)
    biased = SoftGating(3, n_dim=2, bias=True, dtype=np.float64)
    np.testing.assert_array_equal(biased(x).numpy(), x.numpy() + 1)


def test_tfno_defaults_pass_to_spectral_conv():
    # TFNO = FNO with factorization='Tucker', rank=0.1 unless given; the factorised
    # weights are SpectralConv's: either it builds them or it says it cannot
    for kwargs, fac, rank in [({}, "tucker", 0.1), (dict(factorization="cp", rank=0.5),
                                                    "cp", 0.5)]:
        try:
            model = TFNO((8, 8), 1, 1, 8, n_layers=2, **kwargs)
        except NotImplementedError as e:
            assert "SpectralConv" in str(e) and "factorization" in str(e), e
            continue
        assert model.factorization.lower() == fac and model.rank == rank
        for conv in model.fno_blocks.convs:
            assert conv.factorization.lower() == fac and conv.rank == rank
        assert model(nb.randn(1, 1, 8, 8)).shape == (1, 1, 8, 8)


@pytest.mark.parametrize("n_modes, grid, padding", [((8, 8), (12, 12), None),
                                                  ((8, 6), (10, 12), 0.2),
                                                  ((10,), (24,), 0.125),
                                                  ((4, 4, 4), (6, 6, 6), 0.25)])
def test_forward_shape_and_adam_reduces_the_loss(n_modes, grid, padding):
    nb.manual_seed(1)
    rng = np.random.default_rng(1)
    model = FNO(n_modes, 2, 1, 8, n_layers=2, domain_padding=padding)
    x = nb.tensor(rng.standard_normal((4, 2) + grid).astype(np.float32))
    target = nb.tensor(np.sin(x.numpy().sum(1, keepdims=True)))
    assert model(x).shape == (4, 1) + grid and model(x).dtype == np.float32
    opt = nb.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(20):
        opt.zero_grad()
        loss = nb.mse_loss(model(x), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0]


def test_learns_a_smoothing_operator():
    nb.manual_seed(4)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((8, 1, 16))
    # target: a fixed low-pass filter of x (a linear operator an FNO can represent)
    X = np.fft.rfft(x, axis=-1)
    X[..., 4:] = 0
    y = np.fft.irfft(X, n=16, axis=-1)
    model = FNO((8,), 1, 1, 8, n_layers=2, dtype=np.float64)
    opt = nb.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(40):
        opt.zero_grad()
        loss = nb.mse_loss(model(nb.tensor(x)), nb.tensor(y))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.3 * losses[0]


# -- bad input -----------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, error, match", [
    (dict(fno_skip="gated"), ValueError, r"FNOBlocks: fno_skip must be one of .*'gated'"),
    (dict(channel_mlp_skip="id"), ValueError, r"FNOBlocks: channel_mlp_skip must be"),
    (dict(domain_padding=1.0), ValueError, r"FNO: domain_padding must be fractions in "
                                           r"\[0, 1\)"),
    (dict(domain_padding=-0.1), ValueError, r"FNO: domain_padding"),
    (dict(domain_padding=[0.1]), ValueError, r"FNO: domain_padding must be None, a number "
                                             r"or 2 numbers"),
    (dict(norm="layer_norm"), ValueError, r"FNOBlocks: norm must be None or one of"),
    (dict(norm="ada_in"), ValueError, r"FNOBlocks: norm='ada_in' needs ada_in_features"),
    (dict(complex_data=True), NotImplementedError, r"FNO: complex_data"),
    (dict(resolution_scaling_factor=2), NotImplementedError,
     r"FNO: resolution_scaling_factor"),
    (dict(stabilizer="relu"), ValueError, r"FNOBlocks: stabilizer"),
    (dict(positional_embedding="sine"), ValueError, r"FNO: positional_embedding must be"),
    (dict(positional_embedding=GridEmbeddingND(1, dim=3)), ValueError,
     r"FNO: positional_embedding has dim=3"),
    (dict(fno_skip="identity", conv_bias_kernel=3), ValueError,
     r"FNOBlocks: conv_bias_kernel=3 needs fno_skip='linear'"),
    (dict(lifting_channel_ratio=0), ValueError, r"FNO: lifting_channel_ratio"),
    (dict(n_modes=(4, 4, 4, 4)), ValueError, r"FNO: n_modes must be 1 to 3"),
    (dict(n_modes=(4, 0)), ValueError, r"FNO: n_modes must be 1 to 3 positive ints"),
    (dict(hidden_channels=0), ValueError, r"FNO: hidden_channels must be a positive int"),
    (dict(max_n_modes=(2, 2)), ValueError, r"SpectralConv: n_modes\[0\] keeps 4 modes"),
])
def test_bad_construction_names_layer_and_argument(kwargs, error, match):
    args = dict(n_modes=(4, 4), in_channels=1, out_channels=1, hidden_channels=4)
    args.update(kwargs)
    with pytest.raises(error, match=match):
        FNO(**args)


def test_bad_construction_of_blocks_and_skips():
    with pytest.raises(ValueError, match=r"FNOBlocks: channel_mlp_expansion=0.1 gives"):
        FNOBlocks(4, 4, 4, channel_mlp_expansion=0.1)
    with pytest.raises(ValueError, match=r"FNOBlocks: fno_skip='identity' needs"):
        FNOBlocks(4, 2, 4, fno_skip="identity")
    with pytest.raises(ValueError, match=r"SoftGating: in_features=4 and out_features=2"):
        FNOBlocks(4, 2, 4, fno_skip="soft-gating")
    with pytest.raises(ValueError, match=r"skip_connection: skip_type must be one of"):
        skip_connection(2, 2, skip_type="dense")
    with pytest.raises(NotImplementedError, match=r"FNOBlocks: conv_bias_kernel > 1"):
        FNOBlocks(2, 2, (4, 4, 4), conv_bias_kernel=3)
    with pytest.raises(TypeError, match=r"FNOBlocks: conv_module must be a Module class"):
        FNOBlocks(2, 2, 4, conv_module=len)


@pytest.mark.parametrize("n_modes, x_shape, match", [
    ((4, 4), (2, 1, 8), r"FNO: input must be \[B, in_channels=1, d_1, d_2\] .* got shape "
                        r"\(2, 1, 8\)"),
    ((4,), (2, 2, 8), r"FNO: input must be \[B, in_channels=1, d_1\]"),
    ((8, 4), (2, 1, 6, 8), r"FNO: n_modes\[0\] keeps 8 modes but grid dim 0 of the input "
                           r"\(shape \(2, 4, 6, 8\)\) has only 6"),
    ((4, 12), (2, 1, 8, 8), r"FNO: n_modes\[1\] keeps 7 rfft bins .* only 5 Fourier"),
])
def test_bad_input_names_layer_argument_and_shapes(n_modes, x_shape, match):
    model = FNO(n_modes, 1, 1, 4)
    with pytest.raises(ValueError, match=match):
        model(nb.zeros(*x_shape))


def test_modes_above_nyquist_after_padding_and_in_blocks():
    model = FNO((10,), 1, 1, 4, domain_padding=0.25)
    assert model(nb.zeros(1, 1, 6)).shape == (1, 1, 6)      # 6 + 2 * 2 = 10 points
    with pytest.raises(ValueError, match=r"FNO: n_modes\[0\] keeps 6 rfft bins .* input "
                                         r"after domain padding"):
        model(nb.zeros(1, 1, 4))                            # 4 + 2 * 1 = 6 points
    blocks = FNOBlocks(2, 2, (6, 6))
    with pytest.raises(ValueError, match=r"FNOBlocks: n_modes\[0\] keeps 6 modes"):
        blocks(nb.zeros(1, 2, 5, 8))
    with pytest.raises(ValueError, match=r"FNOBlocks: input must be \[B, in_channels=2"):
        blocks(nb.zeros(1, 3, 8, 8))
    with pytest.raises(IndexError, match=r"FNOBlocks: index must be an int in \[0, 1\)"):
        blocks(nb.zeros(1, 2, 8, 8), 1)
    with pytest.raises(NotImplementedError, match=r"output_shape"):
        blocks(nb.zeros(1, 2, 8, 8), output_shape=(16, 16))


@pytest.mark.parametrize("factorization", ["tucker", "cp", "tt"])
def test_factorised_fno_against_torch_rebuilding_the_weights(factorization):
    # the reference rebuilds each dense weight from its factors (the reference library's
    # default implementation), nbgrad contracts with the factors: one function
    torch = pytest.importorskip("torch")
    nb.manual_seed(3)
    model = TFNO((6, 6), 1, 1, 4, n_layers=2, factorization=factorization, rank=0.5,
                 dtype=np.float64)
    perturb(model)
    compare_fno(torch, model, (2, 1, 8, 8))


# -- adaptive instance norm ---------------------------------------------------------------
def test_ada_in_against_torch_float64():
    # y = w (x - mean) / sqrt(var + eps) + b per (sample, channel), [w, b] = mlp(e)
    torch = pytest.importorskip("torch")
    nb.manual_seed(4)
    layer = AdaIN(3, 5, dtype=np.float64)
    perturb(layer)
    rng = np.random.default_rng(5)
    e = rng.standard_normal(3)
    layer.set_embedding(nb.tensor(e, requires_grad=True))
    compare(torch, layer, (2, 5, 4, 3), lambda tx, tp: norm(torch, tx, tp, "", "ada_in",
                                                                layer=layer))
    e_nb = nb.tensor(e, requires_grad=True)
    layer.set_embedding(e_nb)
    x = rng.standard_normal((2, 5, 4, 3))
    (layer(nb.tensor(x)) ** 2).sum().backward()
    te = torch.tensor(e, requires_grad=True)
    tp = torch_parameters(torch, layer, torch.float64)
    h = torch.nn.functional.gelu(torch.nn.functional.linear(te, tp["mlp.0.weight"],
                                                            tp["mlp.0.bias"]))
    affine = torch.nn.functional.linear(h, tp["mlp.2.weight"], tp["mlp.2.bias"])
    ty = torch.nn.functional.group_norm(torch.tensor(x), 5, affine[:5], affine[5:])
    (ty ** 2).sum().backward()
    np.testing.assert_allclose(e_nb.grad.numpy(), te.grad.numpy(), rtol=1e-9)


def test_fno_blocks_with_ada_in_against_torch():
    torch = pytest.importorskip("torch")
    nb.manual_seed(6)
    blocks = FNOBlocks(3, 3, (4, 4), n_layers=2, norm="ada_in", ada_in_features=2,
                       dtype=np.float64)
    perturb(blocks)
    blocks.set_ada_in_embeddings(np.array([0.3, -0.7]))
    compare(torch, _Indexed(blocks, 1), (2, 3, 6, 5),
            lambda tx, tp: fno_block(torch, tx, tp, blocks, 1, pre=""))
    per_norm = [np.array([k, -k], float) for k in range(4)]
    blocks.set_ada_in_embeddings(*per_norm)
    assert [n.embedding.numpy()[0] for n in blocks.norm] == [0.0, 1.0, 2.0, 3.0]


def test_ada_in_gradgradcheck():
    nb.manual_seed(7)
    layer = AdaIN(2, 3, dtype=np.float64)
    layer.set_embedding(np.array([0.5, -1.0]))
    x = nb.tensor(np.random.default_rng(8).standard_normal((2, 3, 5)), requires_grad=True)
    assert gradcheck(layer, (x,))
    assert gradgradcheck(layer, (x,))


def test_ada_in_bad_input():
    layer = AdaIN(2, 3)
    with pytest.raises(RuntimeError, match="AdaIN: call set_embedding"):
        layer(nb.randn(1, 3, 4))
    with pytest.raises(ValueError, match="AdaIN: the embedding must have embed_dim=2"):
        layer.set_embedding(np.ones(3))
    with pytest.raises(ValueError, match="AdaIN: embed_dim"):
        AdaIN(0, 3)
    blocks = FNOBlocks(3, 3, (4, 4), n_layers=1, norm="ada_in", ada_in_features=2)
    with pytest.raises(ValueError, match="give one embedding or 2"):
        blocks.set_ada_in_embeddings(np.ones(2), np.ones(2), np.ones(2))
    with pytest.raises(RuntimeError, match="no 'ada_in' norm"):
        FNOBlocks(3, 3, (4, 4), n_layers=1).set_ada_in_embeddings(np.ones(2))
