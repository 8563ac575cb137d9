"""nb.load with torch.load's arguments: map_location (CPU spellings, dicts, callables,
other devices refused), weights_only, pickle_module, mmap and pickle_load_args."""

import inspect

import numpy as np
import pytest

import nbgrad as nb
from nbgrad.serialization import load, save


@pytest.fixture
def checkpoint(tmp_path):
    path = tmp_path / "ckpt.nbg"
    save({"w": nb.tensor(np.arange(6.0).reshape(2, 3)), "layers": [nb.ones(2)],
          "step": 3}, path)
    return path


def _same(a, b):
    assert a.keys() == b.keys() and a["step"] == b["step"]
    np.testing.assert_array_equal(a["w"].numpy(), b["w"].numpy())
    np.testing.assert_array_equal(a["layers"][0].numpy(), b["layers"][0].numpy())


@pytest.mark.parametrize("map_location", [None, "cpu", "cpu:0", nb.device("cpu"),
                                          {"cuda:0": "cpu"}, {"cpu": "cpu"}])
@pytest.mark.parametrize("weights_only", [None, True, False])
def test_cpu_map_locations_and_weights_only_load_the_same(checkpoint, map_location,
                                                          weights_only):
    _same(load(checkpoint, map_location=map_location, weights_only=weights_only),
          load(checkpoint))


def test_torch_devices_and_callables(checkpoint):
    torch = pytest.importorskip("torch")
    _same(load(checkpoint, map_location=torch.device("cpu")), load(checkpoint))
    _same(load(checkpoint, lambda storage, location: storage), load(checkpoint))
    seen = []
    doubled = load(checkpoint, map_location=lambda t, loc: seen.append(loc) or t * 2)
    assert seen == ["cpu", "cpu"]
    np.testing.assert_array_equal(doubled["w"].numpy(), np.arange(6.0).reshape(2, 3) * 2)
    with pytest.raises(TypeError, match="must return None or a Tensor"):
        load(checkpoint, map_location=lambda t, loc: "gpu")
    with pytest.raises(RuntimeError, match="nbgrad runs on the CPU"):
        load(checkpoint, map_location=torch.device("meta"))


@pytest.mark.parametrize("map_location", ["cuda", "cuda:1", {"cpu": "cuda:0"}, "mps"])
def test_other_devices_raise(checkpoint, map_location):
    with pytest.raises(RuntimeError, match="load\\(map_location\\): nbgrad runs on the CPU"):
        load(checkpoint, map_location=map_location)


def test_mmap_pickle_module_and_pickle_load_args_are_accepted(checkpoint):
    import pickle
    for kwargs in [dict(mmap=True), dict(mmap=False), dict(pickle_module=pickle),
                   dict(encoding="latin1"), dict(weights_only=True, mmap=None)]:
        _same(load(checkpoint, **kwargs), load(checkpoint))
    with open(checkpoint, "rb") as f:
        _same(load(f, "cpu", None, weights_only=True), load(checkpoint))


def test_bad_arguments(checkpoint):
    with pytest.raises(TypeError, match="load\\(\\) got an unexpected keyword argument 'strict'"):
        load(checkpoint, strict=True)
    with pytest.raises(TypeError, match="weights_only must be True, False or None"):
        load(checkpoint, weights_only="yes")
    with pytest.raises(TypeError, match="mmap must be"):
        load(checkpoint, mmap=1)
    with pytest.raises(TypeError):
        load(checkpoint, "cpu", None, True)  # weights_only is keyword-only, as in torch


def test_the_signature_is_torchs():
    torch = pytest.importorskip("torch")
    ours = inspect.signature(load).parameters
    theirs = inspect.signature(torch.load).parameters
    assert [(p.name, p.kind) for p in ours.values()][1:] == \
        [(p.name, p.kind) for p in theirs.values()][1:]
