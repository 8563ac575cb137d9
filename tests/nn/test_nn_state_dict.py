"""Module.state_dict / load_state_dict with shared submodules and tied weights: every name
by which a tensor is reachable, as PyTorch lists them (compared with torch.nn's keys when
torch is installed), ``prefix`` and ``keep_vars``, and loading that assigns each tensor
once."""

import io

import numpy as np
import pytest

import nbgrad as nb
from nbgrad import nn


def _models(lib):
    """The same three models built with ``lib`` (nbgrad.nn or torch.nn): a shared
    encoder/decoder, a nested shared block, and an embedding tied to the output layer."""

    class Shared(lib.Module):
        def __init__(self):
            super().__init__()
            self.enc = lib.Sequential(lib.Linear(3, 4), lib.BatchNorm1d(4))
            self.mid = lib.Linear(4, 4)
            self.dec = self.enc

    class Nested(lib.Module):
        def __init__(self):
            super().__init__()
            block = lib.Linear(2, 2)
            self.blocks = lib.ModuleList([block, lib.Linear(2, 2), block])
            self.outer = lib.Sequential(lib.Sequential(block), Shared())

    class Tied(lib.Module):
        def __init__(self):
            super().__init__()
            self.emb = lib.Embedding(5, 3)
            self.mid = lib.Linear(3, 3)
            self.out = lib.Linear(3, 5, bias=False)
            self.out.weight = self.emb.weight

    return {"shared": Shared, "nested": Nested, "tied": Tied}


_NAMES = ["shared", "nested", "tied"]


def test_shared_submodules_appear_under_every_name():
    model = _models(nn)["shared"]()
    keys = list(model.state_dict())
    assert keys[:3] == ["enc.0.weight", "enc.0.bias", "enc.1.weight"]
    assert [k for k in keys if k.startswith("dec.")] == [
        "dec." + k[len("enc."):] for k in keys if k.startswith("enc.")]
    state = model.state_dict(keep_vars=True)
    assert state["dec.0.weight"] is state["enc.0.weight"] is model.enc[0].weight
    detached = model.state_dict()
    assert detached["dec.0.weight"]._data is model.enc[0].weight._data
    assert not detached["dec.0.weight"].requires_grad
    # parameters() and named_parameters() still list each once, as PyTorch's
    assert [n for n, _ in model.named_parameters()] == [
        "enc.0.weight", "enc.0.bias", "enc.1.weight", "enc.1.bias", "mid.weight", "mid.bias"]


def test_tied_weights_appear_under_both_names():
    model = _models(nn)["tied"]()
    assert list(model.state_dict()) == ["emb.weight", "mid.weight", "mid.bias", "out.weight"]
    assert model.state_dict(keep_vars=True)["out.weight"] is model.emb.weight
    assert len(list(model.parameters())) == 3


def test_prefix_is_prepended_as_given():
    model = _models(nn)["tied"]()
    assert list(model.state_dict(prefix="model.")) == [
        "model.emb.weight", "model.mid.weight", "model.mid.bias", "model.out.weight"]


@pytest.mark.parametrize("name", _NAMES)
def test_keys_are_pytorchs(name):
    torch = pytest.importorskip("torch")
    ours, theirs = _models(nn)[name](), _models(torch.nn)[name]()
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert list(ours.state_dict(prefix="m.")) == list(theirs.state_dict(prefix="m."))
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert [n for n, _ in ours.named_buffers()] == [n for n, _ in theirs.named_buffers()]


@pytest.mark.parametrize("name", _NAMES)
def test_a_pytorch_state_dict_loads_strictly_and_as_pytorch_loads_it(name):
    """Every alias of a tensor in the dict holds a different value: PyTorch copies each
    name in turn, so the last wins; nbgrad assigns each tensor once, with that value."""
    torch = pytest.importorskip("torch")
    ours, theirs = _models(nn)[name](), _models(torch.nn)[name]()
    rng = np.random.default_rng(0)
    state = {k: rng.standard_normal(tuple(v.shape)).astype(np.float32)
             if v.is_floating_point() else np.asarray(7) for k, v in theirs.state_dict().items()}
    result = ours.load_state_dict(state)
    assert result.missing_keys == [] and result.unexpected_keys == []
    theirs.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in state.items()})
    for key, value in theirs.state_dict().items():
        np.testing.assert_array_equal(ours.state_dict()[key].numpy(), value.numpy(), key)


def test_loading_assigns_each_tensor_once_from_its_last_name():
    model = _models(nn)["tied"]()
    state = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    state["emb.weight"][:] = 1.0
    state["out.weight"][:] = 2.0
    model.load_state_dict(state)
    np.testing.assert_array_equal(model.emb.weight.numpy(), 2.0)
    assert model.out.weight is model.emb.weight
    del state["out.weight"]  # only one of the names: that one is loaded
    result = model.load_state_dict(state, strict=False)
    assert result.missing_keys == ["out.weight"]
    np.testing.assert_array_equal(model.emb.weight.numpy(), 1.0)
    with pytest.raises(RuntimeError, match="missing keys: out.weight"):
        model.load_state_dict(state)


def test_a_shared_model_round_trips_through_a_checkpoint():
    model = _models(nn)["shared"]()
    buffer = io.BytesIO()
    nb.save(model.state_dict(), buffer)
    buffer.seek(0)
    state = nb.load(buffer)
    assert state["dec.0.weight"]._data is state["enc.0.weight"]._data  # stored once
    other = _models(nn)["shared"]()
    other.load_state_dict(state)
    np.testing.assert_array_equal(other.dec[0].weight.numpy(), model.enc[0].weight.numpy())


def test_a_cycle_of_submodules_is_an_error():
    outer = nn.Sequential(nn.Linear(2, 2))
    inner = nn.Sequential(outer)
    outer.add_module("back", inner)
    with pytest.raises(ValueError, match="state_dict of Sequential: the module at "
                                         "'back.0' encloses itself"):
        outer.state_dict()
