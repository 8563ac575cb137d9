"""UNO, ScaledSpectralConv and resample (nbgrad/nn/uno.py) against a PyTorch reference of
the same math (nbgrad.testing.torch_reference): neuraloperator's UNO forward (grid
embedding, lifting, symmetric domain padding scaled end to end, FNOBlocks of one layer
each, horizontal skips resampled by linear / bicubic interpolation with
align_corners=True, projection), its resample (the Fourier one for 3 grid dims), and the
spectral convolution onto a scaled grid with each kept frequency kept in place (band-limited;
the documented choice where the reference's ifftn(s=...) pads at the end). The reference
takes the nbgrad model's parameters by name and must reproduce its forward and
every gradient, float64 and float32; hypothesis over small configurations; bad input."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.nn.spectral import SpectralConv
from nbgrad.nn.uno import UNO, ScaledSpectralConv, resample
from nbgrad.testing import gradgradcheck
from nbgrad.testing.torch_reference import resample as torch_resample
from nbgrad.testing.torch_reference import spectral_conv, torch_parameters, uno_forward

NORM_EXP = {"forward": 1.0, "backward": 0.0, "ortho": 0.5}


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
    tp = torch_parameters(torch, model, torch.float64)
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
            lambda tx, tp: uno_forward(torch, tx, tp, model))


@pytest.mark.parametrize("case", [0, 1])
def test_uno_float32_against_torch_float64(case):
    torch = pytest.importorskip("torch")
    kw, grid = UNO_CASES[case]
    model = perturb(make_uno(**dict(kw, dtype=np.float32)))
    compare(torch, model, (2, kw["in_channels"]) + grid,
            lambda tx, tp: uno_forward(torch, tx, tp, model), dtype=np.float32)


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
            lambda tx, tp: spectral_conv(torch, tx, tp, "conv.", conv, out))


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
    ty = torch_resample(torch, tx, out)
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
    compare(torch, model, (1, 1) + grid, lambda tx, tp: uno_forward(torch, tx, tp, model))


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
