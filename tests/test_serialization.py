"""nbgrad.serialization: bitwise round trips of random trees, damaged and foreign files,
loading without pickle, atomic writes, and errors that name the offending entry."""

import collections
import enum
import io
import json
import os
import re
import stat
import struct
import zipfile
import zlib
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
    assert back["t"]._data is back["u"]._data and back["t"] is not back["u"]


def test_module_state_dict_round_trips_through_a_file(tmp_path):
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    save(net.state_dict(), tmp_path / "net.ckpt")
    other = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    other.load_state_dict(load(tmp_path / "net.ckpt"))
    for (name, p), (_, q) in zip(net.named_parameters(), other.named_parameters()):
        assert p._data.tobytes() == q._data.tobytes(), name


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
    assert issubclass(CheckpointVersionError, CheckpointError)  # every failed load is one
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
    with pytest.raises(CheckpointError, match=r"corrupt: the entry 'a0' has the dtype \|O, "
                                              "which a checkpoint does not hold"):
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


# -- crafted archives: one reader checks every member ------------------------------------
def _zip(*members):
    """A stored zip of (name, bytes) members, with valid CRCs."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name, content in members:
            archive.writestr(name, content)
    buffer.seek(0)
    return buffer


def _npy_bytes(array):
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def _npy_with_header(text, data=b""):
    header = text.encode() + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + data


def _header_npy(tree, **extra):
    text = json.dumps({"format": "nbgrad-checkpoint", "version": 1, "tree": tree, **extra})
    return _npy_bytes(np.frombuffer(text.encode(), np.uint8))


def test_checkpoint_error_is_public_and_a_value_error():
    assert nb.CheckpointError is CheckpointError and issubclass(CheckpointError, ValueError)
    assert nb.CheckpointVersionError is CheckpointVersionError


def test_an_array_member_without_npy_header_is_an_error_not_bytes():
    buffer = _zip(("__nbgrad__.npy", _header_npy({"array": "a0"})), ("a0.npy", b"raw bytes"))
    with pytest.raises(CheckpointError, match="BytesIO is corrupt: the entry 'a0' is not an "
                                              "npy array"):
        load(buffer)


def test_a_header_member_that_is_not_npy_is_an_error():
    with pytest.raises(CheckpointError, match="the entry '__nbgrad__' is not an npy array"):
        load(_zip(("__nbgrad__.npy", b'{"format": "nbgrad-checkpoint"}')))


@pytest.mark.parametrize("shape", ["(10000000000000,)", "(4294967296, 4294967296)",
                                   "(100000,)"])
def test_a_huge_shape_is_refused_before_allocating(tmp_path, shape):
    member = _npy_with_header(f"{{'descr': '<f8', 'fortran_order': False, 'shape': {shape}, }}",
                              b"\0" * 16)
    path = tmp_path / "huge.ckpt"
    path.write_bytes(_zip(("__nbgrad__.npy", _header_npy({"array": "a0"})),
                          ("a0.npy", member)).getvalue())
    with pytest.raises(CheckpointError, match=f"load: '{path}' is corrupt: the entry 'a0' has "
                                              rf"the shape {re.escape(shape)} of <f8, which "
                                              r"needs \d+ bytes, but holds 16"):
        load(path)


@pytest.mark.parametrize("descr, problem", [
    ("'|O'", r"dtype \|O"), ("\"[('a', '<f8')]\"", "dtype"), ("'<M8[ns]'", r"dtype <M8\[ns\]"),
    ("'|V8'", r"dtype \|V8"), ("'f8'", "dtype f8"), ("'(1000000000,)<f8'", "dtype"),
])
def test_dtypes_outside_the_allow_list_are_refused(descr, problem):
    member = _npy_with_header(f"{{'descr': {descr}, 'fortran_order': False, 'shape': (1,), }}",
                              b"\0" * 8)
    buffer = _zip(("__nbgrad__.npy", _header_npy({"array": "a0"})), ("a0.npy", member))
    with pytest.raises(CheckpointError, match=f"the entry 'a0' has the {problem}"):
        load(buffer)


@pytest.mark.parametrize("name", ["../a0.npy", "/tmp/a0.npy", "dir/a0.npy", "a0", "A0.npy",
                                  "a01.npy", "__nbgrad__"])
def test_members_with_other_names_are_refused(name):
    buffer = _zip(("__nbgrad__.npy", _header_npy(None)), (name, _npy_bytes(np.zeros(1))))
    with pytest.raises(CheckpointError, match=f"the archive holds the member "
                                              f"{re.escape(repr(name))}, which is not an "
                                              "nbgrad entry"):
        load(buffer)


def test_a_duplicate_or_compressed_member_is_refused():
    member = _npy_bytes(np.zeros(2))
    with pytest.warns(UserWarning, match="Duplicate name"):
        buffer = _zip(("__nbgrad__.npy", _header_npy({"array": "a0"})), ("a0.npy", member),
                      ("a0.npy", member))
    with pytest.raises(CheckpointError, match="the entry 'a0' appears more than once"):
        load(buffer)
    compressed = io.BytesIO()
    np.savez_compressed(compressed, __nbgrad__=np.frombuffer(b'{"format": "x"}', np.uint8))
    compressed.seek(0)
    with pytest.raises(CheckpointError, match="the entry '__nbgrad__' is compressed"):
        load(compressed)


def _schema(array):
    return {"dtype": array.dtype.str, "shape": list(array.shape),
            "crc32": zlib.crc32(array.tobytes())}


_A0 = np.arange(2.0)


@pytest.mark.parametrize("arrays, problem", [
    ({"a0": {"dtype": "<f4", "shape": [2], "crc32": 0}},
     r"the entry 'a0' is <f8 of shape \(2,\); the header says <f4 of shape \(2,\)"),
    ({"a0": {"dtype": "<f8", "shape": [1, 2], "crc32": 0}},
     r"the header says <f8 of shape \(1, 2\)"),
    ({"a0": "x"}, "the entry 'a0' has the schema x in the header"),
    ({"a0": {"dtype": "<f8", "shape": [2], "crc32": -1}}, "has the schema"),
    ({}, "the archive's entries differ from its header's: not listed: a0"),
    ({"a0": _schema(_A0), "a1": _schema(_A0)}, "differ from its header's: missing: a1"),
    ([], "the header's arrays is not a JSON object"),
])
def test_arrays_that_differ_from_the_schema_are_refused(arrays, problem):
    buffer = _zip(("__nbgrad__.npy", _header_npy({"array": "a0"}, arrays=arrays)),
                  ("a0.npy", _npy_bytes(_A0)))
    with pytest.raises(CheckpointError, match=problem):
        load(buffer)


def test_swapped_members_of_one_shape_are_refused_by_the_checksum():
    data = io.BytesIO()
    save({"a": np.zeros(3), "b": np.ones(3)}, data)
    with zipfile.ZipFile(io.BytesIO(data.getvalue())) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    swapped = _zip(("__nbgrad__.npy", members["__nbgrad__.npy"]), ("a0.npy", members["a1.npy"]),
                   ("a1.npy", members["a0.npy"]))
    with pytest.raises(CheckpointError, match=r"the entry 'a0' has data of CRC-32 0x[0-9a-f]{8}, "
                                              r"not the header's 0x[0-9a-f]{8} \(altered or "
                                              "swapped\\)"):
        load(swapped)


def test_an_entry_the_tree_does_not_use_is_refused():
    a0, a1 = np.zeros(1), np.ones(1)
    buffer = _zip(("__nbgrad__.npy", _header_npy({"array": "a0"}, arrays={
        "a0": _schema(a0), "a1": _schema(a1)})), ("a0.npy", _npy_bytes(a0)),
        ("a1.npy", _npy_bytes(a1)))
    with pytest.raises(CheckpointError, match="the entries a1 are not in the tree"):
        load(buffer)


@pytest.mark.parametrize("node, problem", [
    ({"int": "0X1F"}, "holds the int '0X1F', not as save writes it"),
    ({"int": "0x_1f"}, "holds the int"),
    ({"float": "nan"}, "holds the float 'nan', not as save writes it"),
    ({"float": " 1.5"}, "holds the float"),
    ({"float": "nan:7ff8 00000000000"}, "not 16 hex digits"),
    ({"dict": [["k", None], ["k", True]]}, "has the key 'k' twice"),
])
def test_leaves_must_be_written_as_save_writes_them(node, problem):
    with pytest.raises(CheckpointError, match=problem):
        load(_handmade(node))


@pytest.mark.parametrize("value", [np.zeros(2, "M8[ns]"), np.zeros(2, [("a", "<f8")]),
                                   np.zeros(2, np.longdouble), np.zeros(2, "V4")])
def test_save_refuses_dtypes_load_would_refuse(value):
    if value.dtype == np.float64:
        pytest.skip("longdouble is float64 on this platform")
    with pytest.raises(TypeError, match=r"save: cannot save obj\['x'\]: (arrays of dtype .* "
                                        "are not stored|numpy stores)"):
        save({"x": value}, io.BytesIO())


def test_fortran_ordered_arrays_round_trip_as_c_order():
    a = np.asfortranarray(np.arange(6.0).reshape(2, 3))
    back = _round_trip({"a": a, "t": nb.tensor(a)})
    np.testing.assert_array_equal(back["a"], a)
    assert back["a"].flags.c_contiguous


def test_files_written_before_the_schema_still_load():
    """A header without "arrays" (nbgrad before the schema): the members are still read
    through the checked reader."""
    buffer = _handmade({"tuple": [{"array": "a0"}, {"tensor": "a0"}]},
                       a0=np.asfortranarray(np.arange(6.0).reshape(2, 3)))
    a, t = load(buffer)
    np.testing.assert_array_equal(a, np.arange(6.0).reshape(2, 3))
    assert a is t._data


# -- saving keeps what the user set --------------------------------------------------------
@pytest.mark.skipif(os.name == "nt", reason="POSIX permission bits")
@pytest.mark.parametrize("mode", [0o600, 0o640, 0o444])
def test_overwriting_keeps_the_file_mode(tmp_path, mode):
    path = tmp_path / "ckpt"
    save({"epoch": 1}, path)
    os.chmod(path, mode)
    save({"epoch": 2}, path)
    assert stat.S_IMODE(os.stat(path).st_mode) == mode
    assert load(path)["epoch"] == 2


@pytest.mark.skipif(os.name == "nt", reason="symlinks need privileges on Windows")
def test_saving_through_a_symlink_writes_its_target(tmp_path):
    target = tmp_path / "runs" / "ckpt-1"
    target.parent.mkdir()
    save({"epoch": 1}, target)
    os.chmod(target, 0o600)
    link = tmp_path / "latest"
    link.symlink_to(os.path.relpath(target, tmp_path))
    save({"epoch": 2}, link)
    assert link.is_symlink() and os.readlink(link) == os.path.join("runs", "ckpt-1")
    assert load(target)["epoch"] == 2 and load(link)["epoch"] == 2
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
    assert sorted(os.listdir(target.parent)) == ["ckpt-1"]  # the temporary file beside it
    dangling = tmp_path / "next"
    dangling.symlink_to(tmp_path / "runs" / "ckpt-2")
    save({"epoch": 3}, dangling)
    assert dangling.is_symlink() and load(tmp_path / "runs" / "ckpt-2")["epoch"] == 3


@pytest.mark.skipif(os.name == "nt", reason="directories are not fsynced on Windows")
def test_the_file_is_fsynced_before_the_rename_and_the_directory_after(tmp_path,
                                                                          monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append("fsync dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync file")
        real_fsync(fd)

    def replace(src, dst):
        events.append("rename")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    save({"w": np.ones(3)}, tmp_path / "ckpt")
    assert events == ["fsync file", "rename", "fsync dir"]
