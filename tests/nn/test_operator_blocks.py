"""The neural-operator blocks of nbgrad/nn/operator_blocks.py (ChannelMLP, DomainPadding)
and nbgrad/nn/embeddings.py (GridEmbeddingND, GridEmbedding2D, SinusoidalEmbedding):
forward and every gradient against PyTorch references of the same math written here
(neuraloperator's formulas), the shapes the padding fractions give, second derivatives,
and the errors for bad arguments."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.nn.embeddings import GridEmbedding2D, GridEmbeddingND, SinusoidalEmbedding
from nbgrad.nn.operator_blocks import ChannelMLP, DomainPadding
from nbgrad.testing import gradcheck, gradgradcheck

RTOL = {np.float64: 1e-10, np.float32: 2e-5}
ATOL = {np.float64: 1e-12, np.float32: 1e-5}


def _torch():
    return pytest.importorskip("torch")


def _close(ours, theirs, dtype):
    theirs = theirs.detach().numpy() if hasattr(theirs, "detach") else np.asarray(theirs)
    np.testing.assert_allclose(np.asarray(ours), theirs, rtol=RTOL[dtype], atol=ATOL[dtype])


# ---------------------------------------------------------------- ChannelMLP


def torch_channel_mlp(torch, x, weights, biases, act):
    """h <- act(W_i h + b_i) at every spatial point, no act after the last layer; W_i
    [c_out, c_in, 1] as a 1x1 convolution's weight."""
    h = x
    for i, (w, b) in enumerate(zip(weights, biases)):
        h = torch.einsum("oi,bi...->bo...", w[:, :, 0], h) + b.reshape(1, -1, *[1] * (x.ndim - 2))
        if i < len(weights) - 1:
            h = act(h)
    return h


def _mlp_pair(torch, mlp, x, dtype):
    """Our and PyTorch's output and gradients (x, every weight and bias) for the loss
    sum(g * y) with a fixed random g."""
    xn = nb.tensor(x, requires_grad=True)
    xt = torch.tensor(x, requires_grad=True)
    ws = [torch.tensor(fc.weight.numpy(), requires_grad=True) for fc in mlp.fcs]
    bs = [torch.tensor(fc.bias.numpy(), requires_grad=True) for fc in mlp.fcs]
    yn = mlp(xn)
    act = torch.nn.functional.gelu if mlp.non_linearity is nb.gelu else torch.tanh
    yt = torch_channel_mlp(torch, xt, ws, bs, act)
    g = np.random.default_rng(1).standard_normal(yt.shape).astype(dtype)
    (yn * nb.tensor(g)).sum().backward()
    (yt * torch.tensor(g)).sum().backward()
    _close(yn.numpy(), yt, dtype)
    _close(xn.grad.numpy(), xt.grad, dtype)
    for fc, w, b in zip(mlp.fcs, ws, bs):
        _close(fc.weight.grad.numpy(), w.grad, dtype)
        _close(fc.bias.grad.numpy(), b.grad, dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@given(n_spatial=st.integers(1, 3), batch=st.integers(1, 3), c_in=st.integers(1, 5),
       c_out=st.integers(1, 5), hidden=st.integers(1, 6), n_layers=st.integers(1, 4),
       seed=st.integers(0, 2**31))
def test_channel_mlp_matches_torch(dtype, n_spatial, batch, c_in, c_out, hidden, n_layers,
                                   seed):
    torch = _torch()
    rng = np.random.default_rng(seed)
    spatial = tuple(rng.integers(1, 6, n_spatial))
    mlp = ChannelMLP(c_in, c_out, hidden, n_layers=n_layers, n_dim=n_spatial, dtype=dtype)
    assert [tuple(fc.weight.shape) for fc in mlp.fcs] == (
        [(c_out, c_in, 1)] if n_layers == 1 else
        [(hidden, c_in, 1)] + [(hidden, hidden, 1)] * (n_layers - 2) + [(c_out, hidden, 1)])
    x = rng.standard_normal((batch, c_in) + spatial).astype(dtype)
    _mlp_pair(torch, mlp, x, dtype)


def test_channel_mlp_custom_non_linearity_and_defaults():
    torch = _torch()
    mlp = ChannelMLP(3, non_linearity=nb.tanh, n_layers=3, dtype=np.float64)
    assert (mlp.in_channels, mlp.out_channels, mlp.hidden_channels) == (3, 3, 3)
    x = np.random.default_rng(2).standard_normal((2, 3, 4, 2, 3))
    _mlp_pair(torch, mlp, x, np.float64)


def test_channel_mlp_parameter_names_and_dropout():
    mlp = ChannelMLP(2, 4, 8, dropout=0.5, dtype=np.float64)
    assert list(mlp.state_dict()) == ["fcs.0.weight", "fcs.0.bias", "fcs.1.weight",
                                      "fcs.1.bias"]
    assert mlp.dropout is not None and len(mlp.dropout) == 2
    assert ChannelMLP(2).dropout is None
    x = nb.tensor(np.random.default_rng(3).standard_normal((2, 2, 5, 5)))
    plain = ChannelMLP(2, 4, 8, dtype=np.float64)
    plain.load_state_dict(mlp.state_dict())
    mlp.eval()
    np.testing.assert_array_equal(mlp(x).numpy(), plain(x).numpy())  # eval: no dropout
    mlp.train()
    y = mlp(x).numpy()
    # in training, dropout after the last layer zeroes about half of the outputs
    assert 0.2 < np.mean(y == 0) < 0.8


def test_channel_mlp_second_derivatives():
    mlp = ChannelMLP(2, 2, 3, n_layers=2, dtype=np.float64)
    x = nb.tensor(np.random.default_rng(4).standard_normal((1, 2, 3, 2)), requires_grad=True)
    w0, b0, w1, b1 = mlp.fcs[0].weight, mlp.fcs[0].bias, mlp.fcs[1].weight, mlp.fcs[1].bias

    def fn(x, w0, b0, w1, b1):
        h = nb.conv1d(x.reshape(1, 2, -1), w0, b0)
        return nb.conv1d(nb.gelu(h), w1, b1)

    # the module is this composition (checked against PyTorch above); check it to 2nd order
    np.testing.assert_allclose(mlp(x).numpy().reshape(1, 2, -1),
                               fn(x, w0, b0, w1, b1).numpy(), rtol=1e-14)
    params = [nb.tensor(p.numpy(), requires_grad=True) for p in (w0, b0, w1, b1)]
    assert gradcheck(fn, [x, *params])
    assert gradgradcheck(fn, [x, *params])
    assert gradgradcheck(lambda x: mlp(x), [x])


def test_channel_mlp_bad_input():
    with pytest.raises(ValueError, match="ChannelMLP: in_channels"):
        ChannelMLP(0)
    with pytest.raises(ValueError, match="ChannelMLP: n_layers"):
        ChannelMLP(2, n_layers=0)
    with pytest.raises(ValueError, match="ChannelMLP: hidden_channels"):
        ChannelMLP(2, hidden_channels=-1)
    with pytest.raises(ValueError, match="ChannelMLP: dropout"):
        ChannelMLP(2, dropout=1.5)
    with pytest.raises(TypeError, match="ChannelMLP: non_linearity"):
        ChannelMLP(2, non_linearity="gelu")
    mlp = ChannelMLP(3, dtype=np.float64)
    with pytest.raises(ValueError, match=r"ChannelMLP: .*in_channels=3.*\(2, 4, 5\)"):
        mlp(nb.tensor(np.zeros((2, 4, 5))))
    with pytest.raises(ValueError, match=r"ChannelMLP: .*\(3, 5\)"):
        mlp(nb.tensor(np.zeros((3, 5))))


# ---------------------------------------------------------------- DomainPadding


@st.composite
def padding_cases(draw):
    n = draw(st.integers(1, 3))
    spatial = tuple(draw(st.lists(st.integers(1, 9), min_size=n, max_size=n)))
    fraction = st.floats(0.0, 0.99, allow_nan=False)
    padding = draw(st.one_of(fraction, st.lists(fraction, min_size=n, max_size=n)))
    mode = draw(st.sampled_from(["symmetric", "one-sided"]))
    return spatial, padding, mode


@given(case=padding_cases(), seed=st.integers(0, 2**31))
def test_domain_padding_shapes_values_and_round_trip(case, seed):
    spatial, padding, mode = case
    fractions = padding if isinstance(padding, list) else [padding] * len(spatial)
    p = [round(f * n) for f, n in zip(fractions, spatial)]
    x = np.random.default_rng(seed).standard_normal((2, 3) + spatial)
    dp = DomainPadding(padding, padding_mode=mode)
    y = dp.pad(nb.tensor(x)).numpy()
    sides = 2 if mode == "symmetric" else 1
    assert y.shape == (2, 3) + tuple(n + sides * q for n, q in zip(spatial, p))
    # x sits at offset p_k (symmetric) or 0 (one-sided) in each dim, zeros elsewhere
    inner = tuple(slice(q if mode == "symmetric" else 0, (q if mode == "symmetric" else 0) + n)
                  for q, n in zip(p, spatial))
    np.testing.assert_array_equal(y[(Ellipsis, *inner)], x)
    mask = np.ones(y.shape, bool)
    mask[(Ellipsis, *inner)] = False
    assert not y[mask].any()
    np.testing.assert_array_equal(dp.unpad(nb.tensor(y)).numpy(), x)
    np.testing.assert_array_equal(dp(nb.tensor(x)).numpy(), y)  # forward is pad


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("mode", ["symmetric", "one-sided"])
def test_domain_padding_matches_torch_with_gradients(dtype, mode):
    torch = _torch()
    F = torch.nn.functional
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 7, 10, 4)).astype(dtype)
    dp = DomainPadding([0.3, 0.1, 0.0], padding_mode=mode)
    p = [2, 1, 0]  # round(0.3 * 7), round(0.1 * 10), round(0.0 * 4)
    pairs = [q for k in reversed(p) for q in ((k, k) if mode == "symmetric" else (0, k))]
    xn, xt = nb.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    yn, yt = dp.pad(xn), F.pad(xt, pairs)
    _close(yn.numpy(), yt, dtype)
    g = rng.standard_normal(yt.shape).astype(dtype)
    zn = dp.unpad(yn * nb.tensor(g))
    lo = [k if mode == "symmetric" else 0 for k in p]
    zt = (yt * torch.tensor(g))[:, :, lo[0]:lo[0] + 7, lo[1]:lo[1] + 10, lo[2]:lo[2] + 4]
    _close(zn.numpy(), zt, dtype)
    (zn * zn).sum().backward()
    (zt * zt).sum().backward()
    _close(xn.grad.numpy(), xt.grad, dtype)


def test_domain_padding_resolution_scaling_factor():
    # 8 points, fraction 0.25: 2 zeros a side, padded 12; a model doubling the resolution
    # returns 24 points, of which round(2 * 2) = 4 a side are padding.
    dp = DomainPadding(0.25, resolution_scaling_factor=2)
    assert dp.pad(nb.tensor(np.zeros((1, 1, 8)))).shape == (1, 1, 12)
    out = np.arange(24.0).reshape(1, 1, 24)
    np.testing.assert_array_equal(dp.unpad(nb.tensor(out)).numpy(), out[..., 4:20])
    # per-dim factors, one-sided: dim 1 halves (crop round(0.5 * 1) = 0), dim 2 keeps
    dp = DomainPadding([0.2, 0.5], resolution_scaling_factor=[0.5, 1],
                       padding_mode="one-sided")
    assert dp.pad(nb.tensor(np.zeros((1, 1, 5, 4)))).shape == (1, 1, 6, 6)
    out = np.arange(18.0).reshape(1, 1, 3, 6)
    np.testing.assert_array_equal(dp.unpad(nb.tensor(out)).numpy(), out[..., :, :4])


def test_domain_padding_second_derivatives():
    dp = DomainPadding([0.25, 0.5])
    x = nb.tensor(np.random.default_rng(6).standard_normal((1, 2, 4, 2)), requires_grad=True)

    def fn(x):
        y = dp.pad(x)
        return dp.unpad(y * y * y) + y.sum()

    assert gradcheck(fn, [x]) and gradgradcheck(fn, [x])


def test_domain_padding_bad_input():
    for bad in (1.0, -0.1, [0.2, 1.5], 2):
        with pytest.raises(ValueError, match=r"DomainPadding: domain_padding .*\[0, 1\)"):
            DomainPadding(bad)
    for bad in ("0.1", [], None, [0.1, "a"]):
        with pytest.raises(ValueError, match="DomainPadding: domain_padding"):
            DomainPadding(bad)
    with pytest.raises(ValueError, match="DomainPadding: resolution_scaling_factor"):
        DomainPadding(0.1, resolution_scaling_factor=0)
    with pytest.raises(ValueError, match="DomainPadding: padding_mode"):
        DomainPadding(0.1, padding_mode="circular")
    dp = DomainPadding([0.1, 0.2])
    with pytest.raises(ValueError, match=r"DomainPadding: domain_padding has 2 .*\(1, 1, 8\)"):
        dp.pad(nb.tensor(np.zeros((1, 1, 8))))
    with pytest.raises(ValueError, match=r"DomainPadding: .*\(4, 5\)"):
        dp.pad(nb.tensor(np.zeros((4, 5))))
    with pytest.raises(ValueError, match=r"DomainPadding: unpad .*\(1, 1, 3, 3\)"):
        dp.unpad(nb.tensor(np.zeros((1, 1, 3, 3))))


# ---------------------------------------------------------------- GridEmbedding


def torch_grid_embedding(torch, x, boundaries):
    """cat(x, grid): the coordinates linspace(a, b, n + 1)[:-1] per dim, meshgrid 'ij'."""
    axes = [torch.linspace(a, b, n + 1, dtype=torch.float64)[:-1]
            for n, (a, b) in zip(x.shape[2:], boundaries)]
    grids = torch.meshgrid(*axes, indexing="ij")
    grids = [gr.to(x.dtype).expand(x.shape[0], 1, *gr.shape) for gr in grids]
    return torch.cat([x, *grids], dim=1)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@given(dim=st.integers(1, 3), batch=st.integers(1, 3), channels=st.integers(1, 4),
       seed=st.integers(0, 2**31), default=st.booleans())
def test_grid_embedding_nd_matches_torch(dtype, dim, batch, channels, seed, default):
    torch = _torch()
    rng = np.random.default_rng(seed)
    spatial = tuple(rng.integers(1, 7, dim))
    if default:
        emb, boundaries = GridEmbeddingND(channels, dim=dim), [[0.0, 1.0]] * dim
    else:
        starts = rng.uniform(-2, 2, dim)
        boundaries = [[a, a + w] for a, w in zip(starts, rng.uniform(0.1, 3, dim))]
        emb = GridEmbeddingND(channels, dim=dim, grid_boundaries=boundaries)
    assert emb.out_channels == channels + dim
    x = rng.standard_normal((batch, channels) + spatial).astype(dtype)
    xn, xt = nb.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    yn, yt = emb(xn), torch_grid_embedding(torch, xt, boundaries)
    assert yn.dtype == xn.dtype
    _close(yn.numpy(), yt, dtype)
    g = rng.standard_normal(yt.shape).astype(dtype)
    (yn * nb.tensor(g)).sum().backward()
    (yt * torch.tensor(g)).sum().backward()
    _close(xn.grad.numpy(), xt.grad, dtype)


def test_grid_embedding_known_values_and_cache():
    emb = GridEmbedding2D(1, grid_boundaries=[[0, 1], [-1, 1]])
    y = emb(nb.tensor(np.zeros((2, 1, 2, 4)))).numpy()
    # x_1 = 0, 1/2 down dim 1; x_2 = -1, -1/2, 0, 1/2 along dim 2 (the end point left out)
    np.testing.assert_array_equal(y[1, 1], [[0, 0, 0, 0], [0.5, 0.5, 0.5, 0.5]])
    np.testing.assert_array_equal(y[0, 2], [[-1, -0.5, 0, 0.5]] * 2)
    first = emb.grid((2, 4), np.float64)
    assert emb.grid((2, 4), np.float64) is first  # cached for the last resolution
    assert emb.grid((3, 4), np.float64).shape == (1, 2, 3, 4)


def test_grid_embedding_unbatched():
    x = nb.tensor(np.ones((3, 4, 5)))
    assert GridEmbedding2D(3)(x, batched=False).shape == (5, 4, 5)
    assert GridEmbeddingND(3, dim=2)(x, batched=False).shape == (1, 5, 4, 5)
    assert GridEmbeddingND(2, dim=1)(nb.tensor(np.ones((2, 6))), batched=False).shape == (
        1, 3, 6)


def test_grid_embedding_second_derivatives():
    emb = GridEmbeddingND(2, dim=2)
    x = nb.tensor(np.random.default_rng(7).standard_normal((1, 2, 3, 2)), requires_grad=True)
    assert gradgradcheck(lambda x: emb(x) ** 3, [x])


def test_grid_embedding_bad_input():
    with pytest.raises(ValueError, match="GridEmbeddingND: grid_boundaries .*dim=3"):
        GridEmbeddingND(1, dim=3, grid_boundaries=[[0, 1], [0, 1]])
    with pytest.raises(ValueError, match="GridEmbedding2D: grid_boundaries"):
        GridEmbedding2D(1, grid_boundaries=[[0, 1], [0]])
    with pytest.raises(ValueError, match="GridEmbeddingND: dim"):
        GridEmbeddingND(1, dim=0)
    with pytest.raises(ValueError, match="GridEmbeddingND: in_channels"):
        GridEmbeddingND(0)
    with pytest.raises(ValueError, match=r"GridEmbeddingND: .*dim=3.*\(1, 2, 4, 4\)"):
        GridEmbeddingND(2, dim=3)(nb.tensor(np.zeros((1, 2, 4, 4))))
    with pytest.raises(ValueError, match=r"GridEmbedding2D: .*in_channels=3.*\(1, 2, 4, 4\)"):
        GridEmbedding2D(3)(nb.tensor(np.zeros((1, 2, 4, 4))))


# ---------------------------------------------------------------- SinusoidalEmbedding


def torch_sinusoidal(torch, x, num_frequencies, embedding_type, max_positions):
    """sin, cos of w_k p interleaved per coordinate: channel 2 L c + 2 k + j."""
    k = torch.arange(num_frequencies, dtype=torch.float64)
    if embedding_type == "nerf":
        w = 2.0 ** k * torch.pi
    else:
        w = (1.0 / max_positions) ** (2 * k / num_frequencies)
    phase = torch.einsum("...c,k->...ck", x, w.to(x.dtype))
    pairs = torch.stack((phase.sin(), phase.cos()), dim=-1)
    return pairs.reshape(*x.shape[:-1], -1)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@given(batched=st.booleans(), n_in=st.integers(1, 6), channels=st.integers(1, 4),
       num_frequencies=st.one_of(st.none(), st.integers(1, 6)),
       embedding_type=st.sampled_from(["transformer", "nerf"]),
       max_positions=st.sampled_from([10000, 100, 7.5]), seed=st.integers(0, 2**31))
def test_sinusoidal_embedding_matches_torch(dtype, batched, n_in, channels, num_frequencies,
                                            embedding_type, max_positions, seed):
    torch = _torch()
    rng = np.random.default_rng(seed)
    emb = SinusoidalEmbedding(channels, num_frequencies, embedding_type, max_positions)
    L = channels if num_frequencies is None else num_frequencies
    assert emb.out_channels == 2 * L * channels
    shape = ((2,) if batched else ()) + (n_in, channels)
    x = rng.uniform(-1, 1, shape).astype(dtype)
    xn, xt = nb.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    yn, yt = emb(xn), torch_sinusoidal(torch, xt, L, embedding_type, max_positions)
    assert yn.shape == shape[:-1] + (2 * L * channels,)
    # float32: the phases reach 2^5 pi, so compare at their scale
    tol = 1e-10 if dtype == np.float64 else 2e-6 * 2.0 ** L
    np.testing.assert_allclose(yn.numpy(), yt.detach().numpy(), rtol=tol, atol=tol)
    g = rng.standard_normal(yt.shape).astype(dtype)
    (yn * nb.tensor(g)).sum().backward()
    (yt * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(xn.grad.numpy(), xt.grad.numpy(), rtol=tol,
                               atol=tol * 2.0 ** L * math.pi)


def test_sinusoidal_embedding_known_values():
    # nerf, L = 2: p -> sin(pi p), cos(pi p), sin(2 pi p), cos(2 pi p)
    y = SinusoidalEmbedding(1, 2, "nerf")(nb.tensor(np.array([[0.25]]))).numpy()
    r = math.sqrt(0.5)
    np.testing.assert_allclose(y, [[r, r, 1.0, 0.0]], atol=1e-15)
    # transformer, L = 2, max_positions 100: w = 1, 1/100
    y = SinusoidalEmbedding(2, 2, max_positions=100)(nb.tensor(np.array([[1.0, 2.0]])))
    expected = [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01),
                math.sin(2), math.cos(2), math.sin(0.02), math.cos(0.02)]
    np.testing.assert_allclose(y.numpy(), [expected], rtol=1e-15)


def test_sinusoidal_embedding_second_derivatives():
    emb = SinusoidalEmbedding(2, 3, "nerf")
    x = nb.tensor(np.random.default_rng(8).uniform(-1, 1, (2, 3, 2)), requires_grad=True)
    assert gradcheck(emb, [x]) and gradgradcheck(emb, [x])


def test_sinusoidal_embedding_bad_input():
    with pytest.raises(ValueError, match="SinusoidalEmbedding: embedding_type"):
        SinusoidalEmbedding(2, 3, "rotary")
    with pytest.raises(ValueError, match="SinusoidalEmbedding: num_frequencies"):
        SinusoidalEmbedding(2, 0)
    with pytest.raises(ValueError, match="SinusoidalEmbedding: max_positions"):
        SinusoidalEmbedding(2, 3, max_positions=None)
    SinusoidalEmbedding(2, 3, "nerf", max_positions=None)  # unused by nerf
    emb = SinusoidalEmbedding(2, 3)
    with pytest.raises(ValueError, match=r"SinusoidalEmbedding: .*in_channels=2.*\(4, 3\)"):
        emb(nb.tensor(np.zeros((4, 3))))
    with pytest.raises(ValueError, match=r"SinusoidalEmbedding: .*\(1, 4, 3, 2\)"):
        emb(nb.tensor(np.zeros((1, 4, 3, 2))))
