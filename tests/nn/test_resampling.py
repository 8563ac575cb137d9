"""The resampling layers: PyTorch's results and extra_repr text."""

import numpy as np
import pytest

import nbgrad as nb
from nbgrad.nn.resampling import (
    AdaptiveAvgPool1d,
    AdaptiveAvgPool2d,
    AdaptiveMaxPool2d,
    PixelShuffle,
    PixelUnshuffle,
    Unflatten,
    Upsample,
    UpsamplingBilinear2d,
    UpsamplingNearest2d,
)

torch = pytest.importorskip("torch")
tnn = torch.nn

CASES = [
    (lambda m: m.Upsample(scale_factor=2, mode="bilinear"), (2, 3, 4, 5)),
    (lambda m: m.Upsample(size=(3, 7), mode="nearest-exact"), (2, 3, 4, 5)),
    (lambda m: m.Upsample(scale_factor=(1.5, 2.5), mode="bilinear", align_corners=True),
     (1, 2, 4, 5)),
    (lambda m: m.Upsample(size=9, mode="linear"), (2, 3, 4)),
    (lambda m: m.UpsamplingNearest2d(scale_factor=3), (1, 2, 3, 3)),
    (lambda m: m.UpsamplingBilinear2d(size=(5, 6)), (1, 2, 3, 3)),
    (lambda m: m.AdaptiveAvgPool1d(3), (2, 3, 8)),
    (lambda m: m.AdaptiveAvgPool2d((None, 2)), (2, 3, 5, 7)),
    (lambda m: m.AdaptiveAvgPool2d(1), (2, 3, 5, 7)),
    (lambda m: m.AdaptiveMaxPool2d((2, 3)), (2, 3, 5, 7)),
    (lambda m: m.PixelShuffle(2), (2, 8, 3, 4)),
    (lambda m: m.PixelUnshuffle(2), (2, 2, 4, 6)),
    (lambda m: m.Unflatten(1, (2, 3)), (4, 6, 5)),
    (lambda m: m.Unflatten(-1, [5, -1]), (4, 10)),
]

OURS = {c.__name__: c for c in (AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveMaxPool2d,
                                PixelShuffle, PixelUnshuffle, Unflatten, Upsample,
                                UpsamplingBilinear2d, UpsamplingNearest2d)}


class _Ours:
    def __getattr__(self, name):
        return OURS[name]


@pytest.mark.parametrize("make,shape", CASES)
def test_layers_match_torch(make, shape):
    x = np.random.default_rng(0).standard_normal(shape)
    ours, theirs = make(_Ours()), make(tnn)
    assert repr(ours) == repr(theirs)
    xt = nb.tensor(x, requires_grad=True)
    y = ours(xt)
    xq = torch.tensor(x, requires_grad=True)
    yq = theirs(xq)
    np.testing.assert_allclose(y.numpy(), yq.detach().numpy(), rtol=1e-12, atol=1e-12)
    g = np.cos(np.arange(y.numel())).reshape(y.shape)
    y.backward(g)
    yq.backward(torch.tensor(g))
    np.testing.assert_allclose(xt.grad.numpy(), xq.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_adaptive_max_pool_layer_returns_indices():
    x = np.random.default_rng(0).standard_normal((2, 3, 5, 7))
    y, idx = AdaptiveMaxPool2d(3, return_indices=True)(nb.tensor(x))
    yt, it = tnn.AdaptiveMaxPool2d(3, return_indices=True)(torch.tensor(x))
    np.testing.assert_array_equal(idx.numpy(), it.numpy())
    assert repr(AdaptiveMaxPool2d(3, True)) == repr(tnn.AdaptiveMaxPool2d(3, True))


def test_unflatten_bad_size():
    with pytest.raises(ValueError, match=r"Unflatten: .*\(4, 6, 5\)"):
        Unflatten(1, (4, 2))(nb.tensor(np.zeros((4, 6, 5))))
    with pytest.raises(TypeError, match="unflattened_size"):
        Unflatten(1, 6)
