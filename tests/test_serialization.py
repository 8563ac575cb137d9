"""nbgrad.serialization: bitwise round trips of random trees, damaged and foreign files,
loading without pickle, atomic writes, and errors that name the offending entry."""

import collections
import enum
import io
import json
import os
import struct
from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nbgrad as nb
from nbgrad import nn
from nbgrad.serialization import (
    CheckpointError,
    CheckpointVersionError,
    load,
    save,
)


def _round_trip(obj):
    buffer = io.BytesIO()
    save(obj, buffer)
    buffer.seek(0)
    return load(buffer)


def _assert_same(a, b, where="obj"):
    """Equal types, order, dtypes and bits, recursively (NaN bits and -0.0 included)."""
    assert type(a) is type(b), f"{where}: {type(a)} != {type(b)}"
    if isinstance(a, float):
        assert struct.pack(">d", a) == struct.pack(">d", b), where
    elif isinstance(a, np.ndarray | np.generic | nb.Tensor):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape, where
        assert a.tobytes() == b.tobytes(), where
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, dict):
        assert len(a) == len(b), where
        for n, ((ka, va), (kb, vb)) in enumerate(zip(a.items(), b.items())):
            _assert_same(ka, kb, f"{where} key {n}")
            _assert_same(va, vb, f"{where} value {n}")
    else:
        assert a == b, where


# -- round trips ----------------------------------------------------------------------------
_ARRAY_DTYPES = [np.float32, np.float64, ">f8", np.int8, np.int32, np.int64, np.uint16,
                 np.bool_, np.complex128, "<U3", "S2"]
_TENSOR_DTYPES = [np.float32, np.float64, np.int32, np.int64, np.bool_]
_shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)
_arrays = st.sampled_from(_ARRAY_DTYPES).flatmap(lambda d: hnp.arrays(np.dtype(d), _shapes))
_tensors = st.sampled_from(_TENSOR_DTYPES).flatmap(
    lambda d: hnp.arrays(np.dtype(d), _shapes)).map(lambda a: nb.tensor(a, dtype=a.dtype))
_numpy_scalars = st.sampled_from(_ARRAY_DTYPES).flatmap(
    lambda d: hnp.arrays(np.dtype(d), ())).map(lambda a: a[()])
_ints = (st.integers() | st.integers(min_value=2**63)
         | st.integers(0, 9).map(lambda k: -(7 ** 9000) - k))  # 7600 digits
_leaves = (st.none() | st.booleans() | _ints | st.floats() | st.text(max_size=8) | _arrays
           | _tensors | _numpy_scalars)
_keys = (st.text(max_size=5) | st.integers() | st.booleans() | st.floats(allow_nan=False)
         | st.none())


def _containers(children):
    items = st.lists(children, max_size=4)
    pairs = st.dictionaries(_keys, children, max_size=4)
    return items | items.map(tuple) | pairs | pairs.map(OrderedDict)


_trees = st.recursive(_leaves, _containers, max_leaves=20)


@given(_trees)
def test_random_trees_round_trip_bitwise(tree):
    _assert_same(tree, _round_trip(tree))


def test_floats_keep_every_bit():
    nans = [struct.unpack(">d", bytes.fromhex(h))[0]
            for h in ("7ff8000000000000", "fff8000000000000", "7ff0000000000001",
                      "7ffdeadbeef00001")]
    floats = [0.1, -0.0, 5e-324, 1.7976931348623157e308, float("inf"), float("-inf"), *nans]
    _assert_same(floats, _round_trip(floats))


def test_ints_of_any_size_strings_and_key_types_survive():
    huge = 3 ** 20000  # 9500 digits: more than str(int) converts by default
    tree = {0: huge, -3: -(2**64), "s": "héllo \ud800 \x00", 1.5: None, None: True,
            True: (1, 2.0), huge: [huge]}
    back = _round_trip(tree)
    _assert_same(tree, back)
    assert list(back) == [0, -3, "s", 1.5, None, True, huge]
    with pytest.raises(TypeError, match=r"cannot save obj\[0x[0-9a-f]+\]\[0\]: type builtins.set"):
        save({huge: [{1}]}, io.BytesIO())


def test_optimizer_state_keeps_integer_keys_and_tuples():
    state = {"state": {0: {"step": 3, "exp_avg": nb.tensor(np.ones(3))}, 1: {"step": 3}},
             "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "params": [0, 1]}]}
    back = _round_trip(state)
    _assert_same(state, back)
    assert isinstance(back["state"][0]["exp_avg"], nb.Tensor)


def test_tensors_keep_dtype_and_drop_requires_grad():
    for dtype in _TENSOR_DTYPES:
        t = nb.tensor(np.arange(4), dtype=dtype)
        back = _round_trip(t)
        assert type(back) is nb.Tensor and back.dtype == dtype and not back.requires_grad
    back = _round_trip(nb.tensor([1.0, 2.0], requires_grad=True))
    assert not back.requires_grad and back.is_leaf


def test_objects_sharing_an_array_share_it_after_loading():
    weight = np.arange(6.0)
    t = nb.tensor(weight)
    buffer = io.BytesIO()
    save({"a": weight, "b": weight, "t": t, "u": t.detach()}, buffer)
    with np.load(io.BytesIO(buffer.getvalue()), allow_pickle=False) as archive:
        assert len(archive.files) == 3  # the header, weight, t's array
    back = load(io.BytesIO(buffer.getvalue()))
    assert back["a"] is back["b"]
    assert back["t"].data is back["u"].data and back["t"] is not back["u"]


def test_module_state_dict_round_trips_through_a_file(tmp_path):
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    save(net.state_dict(), tmp_path / "net.ckpt")
    other = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    other.load_state_dict(load(tmp_path / "net.ckpt"))
    for (name, p), (_, q) in zip(net.named_parameters(), other.named_parameters()):
        assert p.data.tobytes() == q.data.tobytes(), name


# -- the file itself ------------------------------------------------------------------------
def test_the_file_is_an_npz_with_a_json_header_at_the_exact_path(tmp_path):
    path = tmp_path / "model.pt"
    save({"w": np.ones(2, np.float32), "n": 3}, str(path))
    assert sorted(os.listdir(tmp_path)) == ["model.pt"]  # no ".npz" added, no temp left
    with np.load(path, allow_pickle=False) as archive:
        header = json.loads(archive["__nbgrad__"].tobytes())
        assert header["format"] == "nbgrad-checkpoint" and header["version"] == 1
        assert header["tree"] == {"dict": [["w", {"array": "a0"}], ["n", {"int": "0x3"}]]}
        assert archive["a0"].dtype == np.float32


def test_open_file_objects(tmp_path):
    with open(tmp_path / "c", "wb") as f:
        save([1, np.zeros(3)], f)
    with open(tmp_path / "c", "rb") as f:
        _assert_same([1, np.zeros(3)], load(f))


# -- damaged and foreign files --------------------------------------------------------------
def _sample_bytes():
    buffer = io.BytesIO()
    save({"w": np.linspace(0, 1, 12).reshape(3, 4), "state": {0: {"step": 7}},
          "t": nb.tensor([1, 2, 3])}, buffer)
    return buffer.getvalue()


def test_every_truncation_raises():
    data = _sample_bytes()
    for cut in range(len(data)):
        with pytest.raises(CheckpointError, match="load: the BytesIO is "):
            load(io.BytesIO(data[:cut]))


def test_a_truncated_file_error_names_the_path(tmp_path):
    data = _sample_bytes()
    for cut in (0, 3, 100, len(data) // 2, len(data) - 1):
        path = tmp_path / f"cut{cut}.ckpt"
        path.write_bytes(data[:cut])
        with pytest.raises(ValueError, match=f"load: '{path}' is (corrupt|not an nbgrad)"):
            load(path)


def test_every_corrupted_byte_raises_or_changes_nothing():
    data = _sample_bytes()
    reference = load(io.BytesIO(data))
    for i in range(len(data)):
        damaged = bytearray(data)
        damaged[i] ^= 0xFF
        try:
            back = load(io.BytesIO(bytes(damaged)))
        except CheckpointError:
            continue
        _assert_same(reference, back)  # a byte zipfile and numpy ignore (e.g. a timestamp)


def _handmade(tree, version=1, fmt="nbgrad-checkpoint", **arrays):
    header = json.dumps({"format": fmt, "version": version, "tree": tree}).encode()
    buffer = io.BytesIO()
    np.savez(buffer, __nbgrad__=np.frombuffer(header, np.uint8), **arrays)
    buffer.seek(0)
    return buffer


def test_handmade_file_loads():
    assert load(_handmade({"tuple": [{"int": "-0x10"}, {"array": "a0"}]},
                          a0=np.arange(2)))[0] == -16


@pytest.mark.parametrize("tree, arrays, problem", [
    ({"int": 5}, {}, "obj holds 5 where a string belongs"),
    ({"bogus": 1}, {}, "obj has the unknown tag 'bogus'"),
    (3, {}, "obj is not a node: 3"),
    ({"int": "0x1", "float": "1.0"}, {}, "is not a node"),
    ({"dict": [[1]]}, {}, r"obj holds \[1\] where a \[key, value\] pair belongs"),
    ({"dict": [[["a"], 2]]}, {}, "obj has a key of type list"),
    ({"array": "a9"}, {}, "obj refers to the missing array entry 'a9'"),
    ({"array": "__nbgrad__"}, {}, "missing array entry '__nbgrad__'"),
    ({"tensor": "a0"}, {"a0": np.zeros(2, np.complex64)}, "unsupported dtype complex64"),
    ({"scalar": "a0"}, {"a0": np.zeros(2)}, r"numpy scalar stored with shape \(2,\)"),
    ({"float": "nan:3ff0000000000000"}, {}, "a NaN with the bits of a number"),
    ({"float": "one"}, {}, "could not convert string to float"),
    ([{"int": "zz"}], {}, "invalid literal for int"),
])
def test_malformed_trees_raise(tree, arrays, problem):
    with pytest.raises(CheckpointError, match="load: the BytesIO is corrupt.*" + problem):
        load(_handmade(tree, **arrays))


def test_newer_format_version_raises_runtime_error():
    with pytest.raises(CheckpointVersionError, match="format version 2, written by a newer "
                                                     "nbgrad; this one reads versions up to 1"):
        load(_handmade(None, version=2))
    assert issubclass(CheckpointVersionError, RuntimeError)
    with pytest.raises(CheckpointError, match="the format version is '1'"):
        load(_handmade(None, version="1"))


@pytest.mark.parametrize("make, problem", [
    (lambda b: b.write(b"hello, world"), "not an nbgrad checkpoint \\(not an npz archive\\)"),
    (lambda b: None, "not an nbgrad checkpoint \\(not an npz archive\\)"),
    (lambda b: np.save(b, np.arange(3)), "not an npz archive"),
    (lambda b: np.savez(b, x=np.arange(3)), "an npz archive without the __nbgrad__ entry"),
    (lambda b: np.savez(b, __nbgrad__=np.zeros(3)), "the header is a float64 array"),
    (lambda b: np.savez(b, __nbgrad__=np.frombuffer(b"[1, 2]", np.uint8)),
     "the header is not a JSON object"),
    (lambda b: np.savez(b, __nbgrad__=np.frombuffer(b"{", np.uint8)), "JSONDecodeError"),
    (lambda b: np.savez(b, __nbgrad__=np.frombuffer(b'{"tree": 1}', np.uint8)),
     "not an nbgrad checkpoint \\(its header has no format"),
])
def test_foreign_files_raise(make, problem):
    buffer = io.BytesIO()
    make(buffer)
    buffer.seek(0)
    with pytest.raises(CheckpointError, match=problem):
        load(buffer)


_unpickled = []


def _record_unpickling():
    _unpickled.append(True)


class _Trap:
    """Unpickling it would call _record_unpickling."""

    def __reduce__(self):
        return _record_unpickling, ()


def test_a_pickled_object_array_is_refused_without_unpickling_it():
    trap = np.empty(1, dtype=object)
    trap[0] = _Trap()
    buffer = _handmade({"array": "a0"}, a0=trap)  # np.savez pickles the object array
    with pytest.raises(CheckpointError, match="corrupt.*allow_pickle=False"):
        load(buffer)
    assert _unpickled == []


# -- writing --------------------------------------------------------------------------------
def test_a_save_failing_mid_write_leaves_the_old_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "ckpt"
    save({"epoch": 1, "w": np.ones(4)}, path)
    before = path.read_bytes()

    def fail_midway(file, **entries):
        file.write(b"PK\x03\x04 half a checkpoint")
        raise OSError("No space left on device")

    monkeypatch.setattr(np, "savez", fail_midway)
    with pytest.raises(OSError, match="No space left"):
        save({"epoch": 2, "w": np.zeros(4)}, path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["ckpt"]  # the temporary file is gone
    assert load(path)["epoch"] == 1


def test_an_unsupported_object_is_refused_before_anything_is_written(tmp_path):
    path = tmp_path / "ckpt"
    with pytest.raises(TypeError):
        save({"ok": np.ones(2), "bad": {1, 2}}, path)
    assert os.listdir(tmp_path) == []


class _Color(enum.IntEnum):
    RED = 1


_Point = collections.namedtuple("_Point", "x y")


@pytest.mark.parametrize("obj, message", [
    ({"layers": [1, 2, {3}]}, r"cannot save obj\['layers'\]\[2\]: type builtins.set is not "
                              "supported"),
    ([np.ma.masked_array([1, 2])], r"cannot save obj\[0\]: type numpy.ma.*MaskedArray"),
    ({"p": _Point(1, 2)}, r"cannot save obj\['p'\]: type .*_Point"),
    ((_Color.RED,), r"cannot save obj\[0\]: type .*_Color"),
    ({0: collections.defaultdict(list)}, r"cannot save obj\[0\]: type .*defaultdict"),
    ([1j], r"obj\[0\]: type builtins.complex"),
    ({"b": b"raw"}, r"obj\['b'\]: type builtins.bytes"),
    ({"o": np.array([None, 1])}, r"cannot save obj\['o'\]: numpy stores arrays of dtype "
                                 "object only with pickle"),
    ({"k": {(1, 2): 3}}, r"save: obj\['k'\] has the key \(1, 2\) of type tuple"),
])
def test_unsupported_objects_name_their_place_in_the_tree(obj, message):
    with pytest.raises(TypeError, match=message):
        save(obj, io.BytesIO())


def test_a_cycle_is_refused():
    state = {"a": []}
    state["a"].append(state)
    with pytest.raises(ValueError, match=r"save: obj\['a'\]\[0\] is a container that "
                                         "encloses it \\(a cycle\\)"):
        save(state, io.BytesIO())
    shared = [1]
    _assert_same([shared, shared], _round_trip([shared, shared]))  # shared, not cyclic
