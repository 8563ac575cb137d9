"""nbgrad.nn: registration, state dicts, containers, default initialisation, and every
layer against torch.nn with the same weights (oracle)."""

import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad import nn


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(),
                                      nn.MaxPool2d(2))
        self.head = nn.Linear(4 * 2 * 2, 3)
        self.register_buffer("steps", nb.tensor(np.zeros(1)))
        self.scale = 2.0  # a plain attribute: not registered

    def forward(self, x):
        return self.head(self.features(x).flatten(1)) * self.scale


def test_registration_order_names_and_modes():
    net = _Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["features.0.weight", "features.0.bias", "head.weight", "head.bias"]
    assert list(net.state_dict()) == ["steps"] + names  # own entries, then children (PyTorch)
    assert [n for n, _ in net.named_children()] == ["features", "head"]
    assert len(list(net.modules())) == 6
    net.eval()
    assert not any(m.training for m in net.modules())
    net.train()
    assert all(m.training for m in net.modules())
    with pytest.raises(TypeError, match="cannot assign ndarray to 'weight'"):
        net.head.weight = np.zeros((3, 16))
    shared = nn.Linear(2, 2)
    pair = nn.Sequential(shared, shared)
    assert len(list(pair.parameters())) == 2  # shared parameters are listed once


def test_state_dict_round_trip_and_strict_errors_load_nothing():
    a, b = _Net(), _Net()
    nn.init.normal_(b.head.weight, generator=1)
    b.load_state_dict(a.state_dict())
    for (_, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
        np.testing.assert_array_equal(pa.numpy(), pb.numpy())
    before = b.head.weight.numpy().copy()
    bad = dict(a.state_dict())
    bad["head.bias"] = np.zeros(5, np.float32)
    bad["extra"] = np.zeros(1)
    del bad["features.0.bias"]
    bad["head.weight"] = np.ones((3, 16), np.float32)
    with pytest.raises(RuntimeError) as info:
        b.load_state_dict(bad)
    message = str(info.value)
    for part in ("missing keys: features.0.bias", "unexpected keys: extra",
                 "head.bias: checkpoint (5,), model (3,)", "nothing loaded"):
        assert part in message
    np.testing.assert_array_equal(b.head.weight.numpy(), before)
    del bad["head.bias"]
    result = b.load_state_dict(bad, strict=False)
    assert result.missing_keys == ["features.0.bias", "head.bias"]
    assert result.unexpected_keys == ["extra"]
    np.testing.assert_array_equal(b.head.weight.numpy(), 1.0)


def test_zero_grad_to_and_repr():
    net = _Net()
    net(nb.randn(2, 1, 4, 4, seed=0)).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad(set_to_none=False)
    assert all(np.all(p.grad.numpy() == 0) for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())
    net.double()
    assert all(p.dtype == np.float64 for p in net.parameters())
    assert net.steps.dtype == np.float64
    text = repr(net)
    assert "(0): Conv2d(1, 4, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))" in text
    assert "(head): Linear(in_features=16, out_features=3, bias=True)" in text


def test_containers():
    seq = nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1))
    assert len(seq) == 3 and isinstance(seq[1], nn.Tanh) and isinstance(seq[-1], nn.Linear)
    assert len(seq[:2]) == 2
    del seq[1]
    assert [n for n, _ in seq.named_children()] == ["0", "1"]
    layers = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    layers.append(nn.Linear(2, 1))
    assert len(list(layers.parameters())) == 8
    with pytest.raises(IndexError, match="index 4 is out of range"):
        layers[4]
    heads = nn.ModuleDict({"a": nn.Linear(2, 1), "b": nn.Linear(2, 2)})
    assert list(heads) == ["a", "b"] and "b" in heads
    with pytest.raises(TypeError, match="expected a Module"):
        nn.Sequential(nb.tanh)


@settings(max_examples=25, deadline=None)
@given(fan_in=st.integers(1, 300), fan_out=st.integers(1, 40), seed=st.integers(0, 2**31))
def test_default_linear_init_is_pytorchs_uniform(fan_in, fan_out, seed):
    nb.manual_seed(seed)
    layer = nn.Linear(fan_in, fan_out)
    bound = 1 / math.sqrt(fan_in)
    for p in (layer.weight, layer.bias):
        assert np.all(np.abs(p.numpy()) <= bound)
    w = layer.weight.numpy()
    if w.size >= 2000:  # U(-b, b) has standard deviation b / sqrt 3
        assert abs(w.std() / (bound / math.sqrt(3)) - 1) < 0.1


def test_init_functions_follow_their_formulas_and_seeds():
    w = nb.tensor(np.zeros((200, 300)))
    nn.init.xavier_uniform_(w, generator=3)
    assert np.abs(w.numpy()).max() <= math.sqrt(6 / 500)
    first = w.numpy().copy()
    nn.init.xavier_uniform_(w, generator=3)
    np.testing.assert_array_equal(w.numpy(), first)
    nn.init.kaiming_normal_(w, nonlinearity="relu", generator=np.random.default_rng(4))
    assert abs(w.numpy().std() / math.sqrt(2 / 300) - 1) < 0.02
    nn.init.ones_(w)
    assert np.all(w.numpy() == 1)
    with pytest.raises(ValueError, match="at least 2 dims"):
        nn.init.xavier_normal_(nb.tensor(np.zeros(3)))
    with pytest.raises(ValueError, match=re.escape("mode must be 'fan_in' or 'fan_out'")):
        nn.init.kaiming_uniform_(w, mode="fan")


def _copy_to_torch(torch, nb_module, torch_module):
    with torch.no_grad():
        for (name, p), (tname, tp) in zip(nb_module.named_parameters(),
                                          torch_module.named_parameters()):
            assert name == tname and tuple(p.shape) == tuple(tp.shape)
            tp.copy_(torch.from_numpy(p.numpy().copy()))


LAYERS = [
    ("Linear", (5, 3), {}, (4, 5)),
    ("Linear", (5, 3), {"bias": False}, (2, 6, 5)),
    ("Conv1d", (2, 4, 3), {"padding": 1, "stride": 2}, (3, 2, 9)),
    ("Conv2d", (2, 4, 3), {"padding": 1}, (2, 2, 6, 6)),
    ("Conv2d", (4, 6, (3, 2)), {"stride": 2, "groups": 2, "bias": False}, (2, 4, 7, 6)),
    ("ConvTranspose2d", (3, 2, 3), {"stride": 2, "padding": 1, "output_padding": 1},
     (2, 3, 4, 4)),
    ("MaxPool2d", (2,), {}, (2, 3, 6, 6)),
    ("AvgPool2d", (3,), {"stride": 2, "padding": 1}, (2, 3, 7, 7)),
    ("Flatten", (), {}, (2, 3, 4)),
    ("ReLU", (), {}, (3, 4)), ("Tanh", (), {}, (3, 4)), ("Sigmoid", (), {}, (3, 4)),
    ("SiLU", (), {}, (3, 4)), ("LeakyReLU", (0.2,), {}, (3, 4)), ("ELU", (0.5,), {}, (3, 4)),
    ("GELU", (), {"approximate": "tanh"}, (3, 4)), ("Softplus", (2.0,), {}, (3, 4)),
    ("Softmax", (), {"dim": 1}, (3, 4)), ("LogSoftmax", (), {"dim": 0}, (3, 4)),
]


@pytest.mark.parametrize("name,args,kwargs,shape", LAYERS,
                         ids=[f"{layer[0]}-{i}" for i, layer in enumerate(LAYERS)])
def test_layers_match_torch_nn(name, args, kwargs, shape):
    torch = pytest.importorskip("torch")
    ours = getattr(nn, name)(*args, **kwargs)
    theirs = getattr(torch.nn, name)(*args, **kwargs).double()
    ours.double()
    _copy_to_torch(torch, ours, theirs)
    assert repr(ours) == repr(theirs)
    x0 = np.random.default_rng(0).standard_normal(shape)
    x = nb.tensor(x0, requires_grad=True)
    tx = torch.tensor(x0, requires_grad=True)
    y, ty = ours(x), theirs(tx)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-12, atol=1e-12)
    g = np.random.default_rng(1).standard_normal(ty.shape)
    y.backward(g)
    ty.backward(torch.from_numpy(g))
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-11, atol=1e-12)
    for p, tp in zip(ours.parameters(), theirs.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-11, atol=1e-12)


def test_losses_as_modules_match_torch():
    torch = pytest.importorskip("torch")
    logits = np.random.default_rng(2).standard_normal((5, 4))
    labels = np.array([0, 3, 1, 1, 2])
    ours = nn.CrossEntropyLoss()(nb.tensor(logits), labels).item()
    theirs = torch.nn.CrossEntropyLoss()(torch.tensor(logits), torch.tensor(labels)).item()
    assert ours == pytest.approx(theirs, rel=1e-12)
    assert nn.MSELoss(reduction="sum")(nb.tensor(logits), np.zeros((5, 4))).item() \
        == pytest.approx(float((logits ** 2).sum()), rel=1e-12)


def test_layer_argument_errors():
    with pytest.raises(ValueError, match="in_features must be a positive int"):
        nn.Linear(0, 3)
    with pytest.raises(ValueError, match="divisible by groups"):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(NotImplementedError, match="padding_mode 'reflect'"):
        nn.Conv2d(1, 1, 3, padding_mode="reflect")
    with pytest.raises(ValueError, match=re.escape("input of shape (2, 4)")):
        nn.Linear(3, 1)(nb.zeros(2, 4))
