"""UNO, ScaledSpectralConv and resample (nbgrad/nn/uno.py) against a PyTorch reference of
the same math written out below: neuraloperator's UNO forward (grid embedding, lifting,
symmetric domain padding scaled end to end, FNOBlocks of one layer each, horizontal skips
resampled by linear / bicubic interpolation with align_corners=True, projection), its
resample (the Fourier one for 3 grid dims), and the spectral convolution onto a scaled
grid with each kept frequency kept in place (band-limited; the documented choice where
the reference's ifftn(s=...) pads at the end). The reference takes the nbgrad model's
parameters by name and must reproduce its forward and every gradient, float64 and
float32; hypothesis over small configurations; bad input."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.nn.spectral import SpectralConv
from nbgrad.nn.uno import UNO, ScaledSpectralConv, resample
from nbgrad.testing import gradgradcheck

NORM_EXP = {"forward": 1.0, "backward": 0.0, "ortho": 0.5}


# -- the PyTorch reference ----------------------------------------------------------------
def t_scaled_spectral(torch, x, p, pre, conv, out_grid):
    """rfftn, centred kept modes times the weights, the same frequencies placed into the
    spectrum of ``out_grid``, irfftn there (norm conv.fft_norm on both transforms)."""
    d = conv.order
    dims = list(range(-d, 0))
    grid = list(x.shape[2:])
    out_grid = list(out_grid)
    X = torch.fft.rfftn(x, norm=conv.fft_norm, dim=dims)
    if d > 1:
        X = torch.fft.fftshift(X, dim=dims[:-1])
    k = conv.n_modes   # kept: counts centred on 0 along the full axes, rfft bins last
    sx = [slice(None), slice(None)]
    so = [slice(None), slice(None)]
    for n, no, m in zip(grid[:-1], out_grid[:-1], k[:-1]):
        sx.append(slice(n // 2 - m // 2, n // 2 - m // 2 + m))
        so.append(slice(no // 2 - m // 2, no // 2 - m // 2 + m))
    sx.append(slice(0, k[-1]))
    so.append(slice(0, k[-1]))
    w = torch.complex(p[pre + "weight_real"], p[pre + "weight_imag"])
    key = conv._active_index()
    w = w[key]
    letters = "xyz"[:d]
    if conv.separable:
        Y = X[tuple(sx)] * w
    else:
        Y = torch.einsum(f"bi{letters},io{letters}->bo{letters}", X[tuple(sx)], w)
    out = torch.zeros([x.shape[0], conv.out_channels] + out_grid[:-1]
                      + [out_grid[-1] // 2 + 1], dtype=X.dtype)
    out[tuple(so)] = Y
    if d > 1:
        out = torch.fft.ifftshift(out, dim=dims[:-1])
        out = torch.fft.ifftn(out, dim=dims[:-1], norm=conv.fft_norm)
    keep = torch.ones(out.shape[-1], dtype=x.dtype)
    keep[0] = 0
    if out_grid[-1] % 2 == 0:
        keep[-1] = 0
    out = torch.complex(out.real, out.imag * keep)
    y = torch.fft.irfft(out, n=out_grid[-1], dim=-1, norm=conv.fft_norm)
    return y + p[pre + "bias"] if pre + "bias" in p else y


def t_resample(torch, x, out):
    """neuraloperator's resample(x, 1.0, dims, output_shape=out) in float64."""
    F = torch.nn.functional
    out = list(out)
    if list(x.shape[2:]) == out:
        return x
    if x.ndim == 3:
        return F.interpolate(x, size=out, mode="linear", align_corners=True)
    if x.ndim == 4:
        return F.interpolate(x, size=out, mode="bicubic", align_corners=True)
    dims = [2, 3, 4]
    X = torch.fft.rfftn(x, norm="forward", dim=dims)
    fft_out = out[:-1] + [out[-1] // 2 + 1]
    m = [min(a, b) for a, b in zip(fft_out, X.shape[2:])]
    Y = torch.zeros(list(x.shape[:2]) + fft_out, dtype=X.dtype)
    for a in ((None, m[0] // 2), (-m[0] // 2, None)):   # -m // 2 is -ceil(m / 2)
        for b in ((None, m[1] // 2), (-m[1] // 2, None)):
            idx = (slice(None), slice(None), slice(*a), slice(*b), slice(None, m[2]))
            Y[idx] = X[idx]
    return torch.fft.irfftn(Y, s=out, norm="forward", dim=dims)


def t_conv1x1(torch, x, w, b=None):
    size = list(x.shape)
    y = torch.nn.functional.conv1d(x.reshape(size[0], size[1], -1), w, b)
    return y.reshape([size[0], w.shape[0]] + size[2:])


def t_mlp(torch, x, p, pre):
    h = torch.nn.functional.gelu(t_conv1x1(torch, x, p[pre + "fcs.0.weight"],
                                           p[pre + "fcs.0.bias"]))
    return t_conv1x1(torch, h, p[pre + "fcs.1.weight"], p[pre + "fcs.1.bias"])


def t_skip(torch, x, p, pre, kind):
    if kind == "identity":
        return x
    if kind == "soft-gating":
        return p[pre + "weight"] * x
    return t_conv1x1(torch, x, p[pre + "conv.weight"])


def t_block(torch, x, p, model, i, out_grid):
    """FNOBlocks of one layer (index 0 = the last: no non-linearity after the MLP)."""
    pre = f"fno_blocks.{i}."
    F = torch.nn.functional
    blocks = model.fno_blocks[i]
    gn = (lambda v, j: F.group_norm(v, 1, p[f"{pre}norm.{j}.weight"],  # noqa: E731
                                    p[f"{pre}norm.{j}.bias"], eps=1e-5))
    if model.preactivation:
        x = F.gelu(x)
        if blocks.norm is not None:
            x = gn(x, 0)
    sf = t_resample(torch, t_skip(torch, x, p, pre + "fno_skips.0.", model.fno_skip),
                    out_grid)
    sm = t_resample(torch, t_skip(torch, x, p, pre + "channel_mlp_skips.0.",
                                  model.channel_mlp_skip), out_grid)
    u = t_scaled_spectral(torch, x, p, pre + "convs.0.", blocks.convs[0], out_grid)
    if blocks.norm is not None and not model.preactivation:
        u = gn(u, 0)
    u = u + sf
    if blocks.norm is not None and model.preactivation:
        u = gn(u, 1)
    u = t_mlp(torch, u, p, pre + "channel_mlp.0.") + sm
    if blocks.norm is not None and not model.preactivation:
        u = gn(u, 1)
    return u


def t_uno(torch, x, p, model):
    d = model.n_dim
    if model.positional_embedding is not None:
        axes = [torch.arange(n, dtype=torch.float64) / n for n in x.shape[2:]]
        grid = torch.stack(torch.meshgrid(*axes, indexing="ij")).to(x.dtype)
        x = torch.cat([x, grid[None].expand(x.shape[0], *grid.shape)], dim=1)
    v = t_mlp(torch, x, p, "lifting.")
    pads = None
    if model.domain_padding is not None:
        f = model.domain_padding.domain_padding
        f = f if isinstance(f, list) else [f] * d
        pads = [round(fk * n) for fk, n in zip(f, v.shape[2:])]
        v = torch.nn.functional.pad(v, [q for pk in reversed(pads) for q in (pk, pk)])
    e2e = [1.0] * d
    for s in model.uno_scalings:
        s = [s] * d if np.isscalar(s) else (list(s) * d if len(s) == 1 else list(s))
        e2e = [a * b for a, b in zip(e2e, s)]
    final = [round(n * s) for n, s in zip(v.shape[2:], e2e)]
    saved = {}
    for i in range(model.n_layers):
        if i in model.horizontal_skips_map:
            h = t_resample(torch, saved[model.horizontal_skips_map[i]], v.shape[2:])
            v = torch.cat([v, h], dim=1)
        s = model.uno_scalings[i]
        s = [s] * d if np.isscalar(s) else (list(s) * d if len(s) == 1 else list(s))
        out = final if i == model.n_layers - 1 else [round(n * f)
                                                      for n, f in zip(v.shape[2:], s)]
        v = t_block(torch, v, p, model, i, out)
        if i in model.horizontal_skips_map.values():
            saved[i] = t_skip(torch, v, p, f"horizontal_skips.{i}.", model.horizontal_skip)
    if pads is not None:
        crop = [round(s * pk) for s, pk in zip(e2e, pads)]
        v = v[(Ellipsis,) + tuple(slice(c, -c) if c else slice(None) for c in crop)]
    return t_mlp(torch, v, p, "projection.")


# -- comparison ----------------------------------------------------------------------------
def compare(torch, model, x_shape, run_torch, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape)
    params = dict(model.named_parameters())
    for q in params.values():
        q.grad = None
    xt = nb.tensor(x.astype(dtype), requires_grad=True)
    y = model(xt)
    g = rng.standard_normal(y.shape)
    y.backward(nb.tensor(g.astype(dtype)))
    tx = torch.tensor(x, requires_grad=True)
    tp = {n: torch.tensor(q.numpy().astype(np.float64), requires_grad=True)
          for n, q in params.items()}
    ty = run_torch(tx, tp)
    assert tuple(ty.shape) == tuple(y.shape)
    ty.backward(torch.tensor(g))
    tol = (dict(rtol=1e-9, atol=1e-11) if dtype == np.float64
           else dict(rtol=2e-3, atol=2e-4))
    assert y.dtype == dtype
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), err_msg="y", **tol)
    np.testing.assert_allclose(xt.grad.numpy(), tx.grad.numpy(), err_msg="x.grad", **tol)
    for n, q in params.items():
        ref = tp[n].grad.numpy()
        atol = tol["atol"] * max(1.0, float(np.abs(ref).max()))
        np.testing.assert_allclose(q.grad.numpy(), ref, rtol=tol["rtol"], atol=atol,
                                   err_msg=n)


def perturb(model, seed=1):
    """Move every parameter off its initial value (gates start at 1, biases at 0)."""
    rng = np.random.default_rng(seed)
    with nb.no_grad():
        for _, q in model.named_parameters():
            q.copy_(nb.tensor((q.numpy() + 0.3 * rng.standard_normal(q.shape))
                              .astype(q.numpy().dtype)))
    return model


def make_uno(seed=0, **kw):
    nb.manual_seed(seed)
    kw.setdefault("dtype", np.float64)
    kw.setdefault("lifting_channels", 5)
    kw.setdefault("projection_channels", 4)
    kw.setdefault("channel_mlp_skip", "linear")
    return UNO(**kw)


UNO_CASES = [
    # 1-D, down / same / up, the default skip map {2: 0}, identity horizontal skip
    (dict(in_channels=2, out_channels=1, hidden_channels=3, n_layers=3,
          uno_out_channels=[4, 3, 3], uno_n_modes=[[6], [4], [6]],
          uno_scalings=[0.5, 1, 2], horizontal_skip="identity"), (16,)),
    # 2-D, per-dim scalings, odd grids, explicit skips from both earlier layers
    (dict(in_channels=2, out_channels=2, hidden_channels=3, n_layers=4,
          uno_out_channels=[3, 4, 4, 3], uno_n_modes=[[5, 4], [4, 4], [4, 4], [5, 6]],
          uno_scalings=[[0.5, 1], [1, 0.5], [1, 2], [2, 1]],
          horizontal_skips_map={3: 0, 2: 1}), (10, 9)),
    # 2-D, domain padding rescaled end to end (x 1.5), soft-gating horizontal skips
    (dict(in_channels=1, out_channels=1, hidden_channels=3, n_layers=3,
          uno_out_channels=[3, 4, 3], uno_n_modes=[[4, 4], [4, 4], [4, 4]],
          uno_scalings=[[1.5], [0.5], [2]], domain_padding=0.2,
          horizontal_skip="soft-gating"), (8, 10)),
    # 1-D, preactivation, group norm, identity fno skip, no embedding, ortho norm
    (dict(in_channels=2, out_channels=1, hidden_channels=3, n_layers=2,
          uno_out_channels=[3, 3], uno_n_modes=[[4], [5]], uno_scalings=[[2], [0.75]],
          preactivation=True, norm="group_norm", fno_skip="identity",
          channel_mlp_skip="soft-gating", positional_embedding=None,
          horizontal_skips_map={}), (12,)),
    # 2-D, separable spectral weights (square channel counts, so no horizontal skips)
    (dict(in_channels=1, out_channels=2, hidden_channels=3, n_layers=2,
          uno_out_channels=[3, 3], uno_n_modes=[[4, 4], [4, 4]],
          uno_scalings=[[2, 2], [0.5, 1]], separable=True, horizontal_skips_map={}),
     (6, 8)),
    # 3-D: the Fourier resampling of the skips
    (dict(in_channels=1, out_channels=1, hidden_channels=2, n_layers=3,
          uno_out_channels=[2, 3, 2], uno_n_modes=[[3, 3, 4]] * 3,
          uno_scalings=[[0.5, 1, 1], [1, 1.5, 1], [2, 1, 0.75]]), (6, 5, 8)),
]


@pytest.mark.parametrize("case", range(len(UNO_CASES)))
def test_uno_forward_and_gradients_against_torch_float64(case):
    torch = pytest.importorskip("torch")
    kw, grid = UNO_CASES[case]
    model = perturb(make_uno(**kw))
    compare(torch, model, (2, kw["in_channels"]) + grid,
            lambda tx, tp: t_uno(torch, tx, tp, model))


@pytest.mark.parametrize("case", [0, 1])
def test_uno_float32_against_torch_float64(case):
    torch = pytest.importorskip("torch")
    kw, grid = UNO_CASES[case]
    model = perturb(make_uno(**dict(kw, dtype=np.float32)))
    compare(torch, model, (2, kw["in_channels"]) + grid,
            lambda tx, tp: t_uno(torch, tx, tp, model), dtype=np.float32)


def test_uno_output_grid_and_layout_as_the_reference():
    model = make_uno(in_channels=3, out_channels=2, hidden_channels=4, n_layers=5,
                     uno_out_channels=[4, 6, 6, 6, 4], uno_n_modes=[[4, 4]] * 5,
                     uno_scalings=[[1, 1], [0.5, 0.5], [1, 1], [1, 1], [2, 2]],
                     domain_padding=0.2)
    assert model.horizontal_skips_map == {4: 0, 3: 1}
    assert model.end_to_end_scaling_factor == [1.0, 1.0]
    y = model(nb.tensor(np.random.default_rng(0).standard_normal((2, 3, 16, 13))))
    assert y.shape == (2, 2, 16, 13)
    names = dict(model.named_parameters())
    assert "fno_blocks.3.convs.0.weight_real" in names
    assert names["fno_blocks.3.fno_skips.0.conv.weight"].shape == (6, 12, 1)  # 6 + 6 in
    assert sorted(k for k in names if k.startswith("horizontal_skips")) == [
        "horizontal_skips.0.conv.weight", "horizontal_skips.1.conv.weight"]


# -- the pieces ----------------------------------------------------------------------------
CONV_CASES = [
    # (n_modes, grid, output grid, kwargs)
    ((6,), (12,), (24,), {}),
    ((5,), (12,), (7,), dict(fft_norm="backward")),
    ((4, 6), (8, 9), (16, 7), {}),
    ((5, 4), (9, 8), (5, 13), dict(fft_norm="ortho", separable=True)),
    ((3, 4, 4), (4, 5, 6), (7, 4, 9), {}),
    ((4, 4), (8, 8), (12, 6), dict(max_n_modes=(6, 4), bias=False)),
]


@pytest.mark.parametrize("n_modes, grid, out, kw", CONV_CASES)
def test_scaled_spectral_conv_against_torch(n_modes, grid, out, kw):
    torch = pytest.importorskip("torch")
    nb.manual_seed(0)
    cin = 3
    cout = cin if kw.get("separable") else 2
    conv = ScaledSpectralConv(cin, cout, n_modes, dtype=np.float64, **kw)
    conv.n_modes = n_modes
    perturb(conv)

    class Run(nb.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = conv

        def forward(self, x):
            return self.conv(x, output_shape=out)

    compare(torch, Run(), (2, cin) + grid,
            lambda tx, tp: t_scaled_spectral(torch, tx, tp, "conv.", conv, out))


def test_scaled_spectral_conv_interpolates_the_same_grid_layer():
    """Doubling the grid is band-limited interpolation of the layer's output: every
    second point of the fine output is the layer on the coarse grid (forward norm;
    kept modes below the coarse Nyquist), and the same grid is SpectralConv."""
    nb.manual_seed(3)
    scaled = perturb(ScaledSpectralConv(2, 3, (4, 6), resolution_scaling_factor=2,
                                        dtype=np.float64))
    nb.manual_seed(3)
    plain = perturb(SpectralConv(2, 3, (4, 6), dtype=np.float64))
    x = nb.tensor(np.random.default_rng(0).standard_normal((2, 2, 9, 10)))
    fine = scaled(x).numpy()
    assert fine.shape == (2, 3, 18, 20)
    np.testing.assert_allclose(fine[:, :, ::2, ::2], plain(x).numpy(), rtol=1e-10,
                               atol=1e-12)
    scaled.resolution_scaling_factor = 1
    np.testing.assert_allclose(scaled(x).numpy(), plain(x).numpy(), rtol=0, atol=0)


def test_scaled_spectral_conv_factorized_matches_reconstructed():
    nb.manual_seed(4)
    a = ScaledSpectralConv(3, 2, (4, 4), factorization="tucker", rank=0.5,
                           implementation="factorized", resolution_scaling_factor=[1.5, 0.75],
                           dtype=np.float64)
    assert a.factorization == "tucker" and a.implementation == "factorized"
    x = nb.tensor(np.random.default_rng(1).standard_normal((2, 3, 8, 10)))
    y1 = a(x).numpy()
    a.implementation = "reconstructed"
    np.testing.assert_allclose(y1, a(x).numpy(), rtol=1e-10, atol=1e-12)
    assert y1.shape == (2, 2, 12, 8)


def test_scaled_spectral_conv_double_backward():
    nb.manual_seed(5)
    conv = ScaledSpectralConv(2, 2, (3,), resolution_scaling_factor=1.5, dtype=np.float64)
    x = nb.tensor(np.random.default_rng(2).standard_normal((1, 2, 6)), requires_grad=True)
    assert gradgradcheck(lambda t: conv(t) ** 2, [x])


@pytest.mark.parametrize("grid, out", [((7,), (12,)), ((12,), (5,)), ((5, 6), (9, 4)),
                                       ((6, 5, 4), (3, 8, 7)), ((5, 6, 7), (9, 4, 4))])
def test_resample_against_torch(grid, out):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3) + grid)
    g = rng.standard_normal((2, 3) + out)
    xt = nb.tensor(x, requires_grad=True)
    y = resample(xt, out)
    y.backward(nb.tensor(g))
    tx = torch.tensor(x, requires_grad=True)
    ty = t_resample(torch, tx, out)
    ty.backward(torch.tensor(g))
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(xt.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-12)


# -- hypothesis over small configurations --------------------------------------------------
@settings(max_examples=12, deadline=None)
@given(n_layers=st.integers(1, 3), d=st.integers(1, 2), data=st.data())
def test_uno_hypothesis_against_torch(n_layers, d, data):
    torch = pytest.importorskip("torch")
    scal = st.sampled_from([0.5, 1.0, 1.5, 2.0])
    scalings = [[data.draw(scal) for _ in range(d)] for _ in range(n_layers)]
    grid = tuple(data.draw(st.integers(6, 12)) for _ in range(d))
    # the grids each layer maps between, as UNO computes them (the last: end to end)
    grids = [grid]
    for s in scalings:
        grids.append(tuple(round(n * f) for n, f in zip(grids[-1], s)))
    grids[-1] = tuple(round(n * float(np.prod([s[j] for s in scalings])))
                      for j, n in enumerate(grid))
    # modes that fit the input and output grid of their layer (Nyquist)
    modes = [[data.draw(st.integers(1, min(4, grids[i][j], grids[i + 1][j])))
              for j in range(d)] for i in range(n_layers)]
    outs = [data.draw(st.integers(2, 3)) for _ in range(n_layers)]
    skips = {}
    if n_layers == 3 and data.draw(st.booleans()):
        skips = {2: 0}
    kw = dict(in_channels=1, out_channels=2, hidden_channels=2, n_layers=n_layers,
              uno_out_channels=outs, uno_n_modes=modes, uno_scalings=scalings,
              horizontal_skips_map=skips)
    model = perturb(make_uno(**kw))
    compare(torch, model, (1, 1) + grid, lambda tx, tp: t_uno(torch, tx, tp, model))


# -- bad input -----------------------------------------------------------------------------
BASE = dict(in_channels=1, out_channels=1, hidden_channels=2, n_layers=2,
            uno_out_channels=[2, 2], uno_n_modes=[[4], [4]], uno_scalings=[1, 1])


@pytest.mark.parametrize("change, match", [
    (dict(uno_out_channels=[2]), r"UNO: uno_out_channels has 1 entries but n_layers = 2"),
    (dict(uno_n_modes=[[4], [4], [4]]), r"UNO: uno_n_modes has 3 entries but n_layers"),
    (dict(uno_scalings=[1]), r"UNO: uno_scalings has 1 entries but n_layers = 2"),
    (dict(uno_scalings=None), r"UNO: uno_scalings is required"),
    (dict(uno_scalings=[1, [1, 2, 3]]), r"uno_scalings\[1\] \(layer 1\) must be a number "),
    (dict(uno_scalings=[1, -0.5]), r"uno_scalings\[1\] \(layer 1\) must be positive"),
    (dict(uno_n_modes=[[4], [4, 4]]), r"uno_n_modes\[1\] \(layer 1\) = \[4, 4\] has not"),
    (dict(uno_out_channels=[2, 0]), r"uno_out_channels\[1\] \(layer 1\) must be a posit"),
    (dict(horizontal_skips_map={0: 1}), r"horizontal_skips_map entry 0: 1 must map"),
    (dict(horizontal_skip="nope"), r"UNO: horizontal_skip: .*must be one of"),
    (dict(uno_out_channels=[2, 3], channel_mlp_skip="soft-gating"),
     r"UNO: layer 1 \(4 -> uno_out_channels\[1\] = 3 channels\): SoftGating"),
    (dict(operator_block=int), r"operator_block"),
])
def test_uno_bad_arguments(change, match):
    error = NotImplementedError if "operator_block" in change else ValueError
    with pytest.raises(error, match=match):
        make_uno(**dict(BASE, **change))


def test_uno_modes_above_the_nyquist_of_a_scaled_grid():
    model = make_uno(**dict(BASE, uno_n_modes=[[4], [8]], uno_scalings=[0.5, 2]))
    x = nb.tensor(np.zeros((1, 1, 16)))
    # 16 -> 8 -> 16 points: 12 modes keep 7 rfft bins, the 8-point grid has 5
    with pytest.raises(ValueError, match=r"UNO: layer 0 \(uno_n_modes\[0\] = \[12\]\): .*"
                                         r"layer output \(uno_scalings\[0\] = 0.5\)"):
        make_uno(**dict(BASE, uno_n_modes=[[12], [4]], uno_scalings=[0.5, 2]))(x)
    with pytest.raises(ValueError, match=r"UNO: layer 1 \(uno_n_modes\[1\] = \[12\]\): "
                                         r"n_modes\[0\] keeps 7 rfft bins .* layer input "
                                         r"\(8,\) has only 5"):
        make_uno(**dict(BASE, uno_n_modes=[[4], [12]], uno_scalings=[0.5, 2]))(x)
    assert model(x).shape == (1, 1, 16)
    conv = ScaledSpectralConv(1, 1, (6, 4), resolution_scaling_factor=[0.5, 1],
                              dtype=np.float64)
    with pytest.raises(ValueError, match=r"ScaledSpectralConv: n_modes\[0\] keeps 6 modes "
                                         r"but grid dim 0 of the output \(4, 8\) has only 4"):
        conv(nb.tensor(np.zeros((1, 1, 8, 8))))
    with pytest.raises(ValueError, match=r"ScaledSpectralConv: output_shape must be 2"):
        conv(nb.tensor(np.zeros((1, 1, 8, 8))), output_shape=(8,))


def test_uno_wrong_input_and_ignored_kwargs():
    model = make_uno(**BASE)
    with pytest.raises(ValueError, match=r"UNO: input must be \[B, in_channels=1"):
        model(nb.tensor(np.zeros((1, 2, 8))))
    with pytest.warns(UserWarning, match="unexpected keyword arguments"):
        model(nb.tensor(np.zeros((1, 1, 8))), output_shape=(8,))
    with pytest.raises(ValueError, match=r"resample: x must be \[B, C, \*grid\]"):
        resample(nb.tensor(np.zeros((1, 1, 8))), (4, 4))
