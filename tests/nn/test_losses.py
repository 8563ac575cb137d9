"""The loss modules of nbgrad/nn/losses.py and the activation modules of
nbgrad/nn/activation_extra.py against PyTorch's: constructor arguments, reprs, values and
gradients, weight buffers, legacy size_average / reduce."""

import warnings

import numpy as np
import pytest

import nbgrad as nb
from nbgrad.nn.activation_extra import (
    CELU,
    GLU,
    SELU,
    Hardsigmoid,
    Hardswish,
    Mish,
    Softsign,
    Tanhshrink,
)
from nbgrad.nn.losses import (
    BCELoss,
    CosineEmbeddingLoss,
    GaussianNLLLoss,
    HingeEmbeddingLoss,
    KLDivLoss,
    MarginRankingLoss,
    MultiLabelSoftMarginLoss,
    PoissonNLLLoss,
    SoftMarginLoss,
    TripletMarginLoss,
)

torch = pytest.importorskip("torch")
tnn = torch.nn

rng = np.random.default_rng(7)
P = rng.uniform(0.05, 0.95, (3, 4))
T = rng.uniform(0.1, 1, (3, 4))
W = rng.uniform(0.5, 2, 4)
SIGNS = rng.choice([-1.0, 1.0], (3, 4))

LOSSES = [
    (lambda: BCELoss(), lambda: tnn.BCELoss(), (P, T)),
    (lambda: BCELoss(nb.tensor(W), reduction="sum"),
     lambda: tnn.BCELoss(torch.tensor(W), reduction="sum"), (P, T)),
    (lambda: KLDivLoss(reduction="batchmean", log_target=False),
     lambda: tnn.KLDivLoss(reduction="batchmean"), (np.log(P), T)),
    (lambda: KLDivLoss(reduction="none", log_target=True),
     lambda: tnn.KLDivLoss(reduction="none", log_target=True), (np.log(P), np.log(T))),
    (lambda: PoissonNLLLoss(), lambda: tnn.PoissonNLLLoss(), (P, T * 3)),
    (lambda: PoissonNLLLoss(log_input=False, full=True, eps=1e-3, reduction="sum"),
     lambda: tnn.PoissonNLLLoss(log_input=False, full=True, eps=1e-3, reduction="sum"),
     (P, T * 3)),
    (lambda: GaussianNLLLoss(full=True, eps=1e-3), lambda: tnn.GaussianNLLLoss(full=True,
                                                                              eps=1e-3),
     (P, T, T[:, :1])),
    (lambda: MarginRankingLoss(0.2), lambda: tnn.MarginRankingLoss(0.2), (P, T, SIGNS)),
    (lambda: HingeEmbeddingLoss(0.5, reduction="none"),
     lambda: tnn.HingeEmbeddingLoss(0.5, reduction="none"), (P, SIGNS)),
    (lambda: SoftMarginLoss(), lambda: tnn.SoftMarginLoss(), (P, SIGNS)),
    (lambda: MultiLabelSoftMarginLoss(nb.tensor(W)),
     lambda: tnn.MultiLabelSoftMarginLoss(torch.tensor(W)), (P, T)),
    (lambda: CosineEmbeddingLoss(0.1), lambda: tnn.CosineEmbeddingLoss(0.1),
     (P, T, SIGNS[:, 0])),
    (lambda: TripletMarginLoss(2.0, p=1.0, swap=True),
     lambda: tnn.TripletMarginLoss(2.0, p=1.0, swap=True), (P, T, W[:3, None] * T)),
]


@pytest.mark.parametrize(("ours", "theirs", "arrays"), LOSSES)
def test_loss_modules_match_torch(ours, theirs, arrays):
    mn, mt = ours(), theirs()
    assert repr(mn) == repr(mt)
    xn, xt = nb.tensor(arrays[0], requires_grad=True), torch.tensor(arrays[0], requires_grad=True)
    rest_n = [nb.tensor(a) for a in arrays[1:]]
    rest_t = [torch.tensor(a) for a in arrays[1:]]
    ln, lt = mn(xn, *rest_n), mt(xt, *rest_t)
    ln.sum().backward()
    lt.sum().backward()
    np.testing.assert_allclose(ln.numpy(), lt.detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(xn.grad.numpy(), xt.grad.numpy(), rtol=1e-10, atol=1e-14)


def test_bce_weight_is_a_buffer():
    m = BCELoss(weight=np.array([1.0, 2.0]))
    assert set(m.state_dict()) == {"weight"}
    assert BCELoss().weight is None


def test_legacy_size_average_and_reduce_like_torch():
    for kw in ({"size_average": False}, {"reduce": False}, {"size_average": True}):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = tnn.KLDivLoss(**kw).reduction
        with pytest.warns(UserWarning, match="reduction="):
            assert KLDivLoss(**kw).reduction == theirs
        with pytest.warns(UserWarning):
            assert BCELoss(**kw).reduction == theirs


ACTIVATIONS = [
    (Hardswish, tnn.Hardswish, {}), (Hardswish, tnn.Hardswish, {"inplace": True}),
    (Hardsigmoid, tnn.Hardsigmoid, {}), (Mish, tnn.Mish, {}), (Mish, tnn.Mish, {"inplace": True}),
    (SELU, tnn.SELU, {}), (SELU, tnn.SELU, {"inplace": True}), (CELU, tnn.CELU, {}),
    (CELU, tnn.CELU, {"alpha": 0.5, "inplace": True}), (Softsign, tnn.Softsign, {}),
    (Tanhshrink, tnn.Tanhshrink, {}), (GLU, tnn.GLU, {}), (GLU, tnn.GLU, {"dim": 0}),
]


@pytest.mark.parametrize(("ours", "theirs", "kw"), ACTIVATIONS)
def test_activation_modules_match_torch(ours, theirs, kw):
    mn, mt = ours(**kw), theirs(**kw)
    assert repr(mn) == repr(mt)
    x = rng.standard_normal((4, 6)) * 3
    xn, xt = nb.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    yn = mn(xn)
    yt = mt(xt.clone()) if kw.get("inplace") else mt(xt)
    yn.sum().backward()
    yt.sum().backward()
    np.testing.assert_allclose(yn.numpy(), yt.detach().numpy(), rtol=2e-7, atol=1e-12)
    np.testing.assert_allclose(xn.grad.numpy(), xt.grad.numpy(), rtol=2e-7, atol=1e-12)
    np.testing.assert_array_equal(xn.numpy(), x)     # computed out of place
