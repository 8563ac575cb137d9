"""Fuzzing nbgrad.load with damaged and crafted checkpoints.

Every mutation of a valid checkpoint — truncation, bit flips, swapped members, crafted npy
headers (huge, negative and transposed shapes, object and structured dtypes), members
that are not npy, path-like and duplicate member names, an altered schema — must load as
exactly the saved value or raise CheckpointError: never another exception, never a
partial or different result, and never an allocation beyond what the file's size allows
(traced with tracemalloc, which sees NumPy's allocations).

A crafted nbgrad header (the JSON itself rewritten, its CRC made valid) can describe any
tree, so there the property is weaker: a value or CheckpointError, nothing else. (The
schema alterations above change one field of it, which must not agree with the arrays;
they are applied alone, since a schema shape rewritten to agree with a rewritten npy
shape is such a crafted file.)

The number of examples: ``NBGRAD_FUZZ_EXAMPLES`` (100 by default; ``nox -s fuzz`` runs
many more).
"""

import ast
import io
import json
import os
import random
import struct
import tracemalloc
import warnings
import zipfile

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from test_serialization import _assert_same

import nbgrad as nb
from nbgrad.serialization import CheckpointError, load, save

FUZZ_EXAMPLES = int(os.environ.get("NBGRAD_FUZZ_EXAMPLES", "100"))
fuzz_settings = settings(max_examples=FUZZ_EXAMPLES)

# -- valid checkpoints -------------------------------------------------------------------
_DTYPES = [np.float32, np.float64, ">f4", np.int8, np.int64, np.uint16, np.bool_,
           np.complex64, "<U2", "S3"]
_shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)
_arrays = st.sampled_from(_DTYPES).flatmap(lambda d: hnp.arrays(np.dtype(d), _shapes))
_tensors = st.sampled_from([np.float32, np.float64, np.int64]).flatmap(
    lambda d: hnp.arrays(np.dtype(d), _shapes)).map(lambda a: nb.tensor(a, dtype=a.dtype))
_leaves = (st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4)
           | _arrays | _tensors)
_trees = st.dictionaries(st.text(max_size=3) | st.integers(-3, 3),
                         st.recursive(_leaves, lambda c: st.lists(c, max_size=3)
                                      | st.lists(c, max_size=3).map(tuple), max_leaves=6),
                         min_size=1, max_size=5)


def _saved(tree) -> bytes:
    buffer = io.BytesIO()
    save(tree, buffer)
    return buffer.getvalue()


# -- the archive, member by member ---------------------------------------------------------
def _members(data: bytes) -> list[tuple[str, bytes]]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return [(info.filename, archive.read(info)) for info in archive.infolist()]


def _rezip(members: list[tuple[str, bytes]]) -> bytes:
    """A stored zip of ``members`` in order, with valid CRCs (duplicates allowed)."""
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # zipfile: "Duplicate name"
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
            for name, content in members:
                archive.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), content)
    return buffer.getvalue()


def _npy_parts(content: bytes) -> tuple[bytes, bytes]:
    """(header dict text, data) of an npy version 1.0 member, as numpy writes them."""
    length = struct.unpack("<H", content[8:10])[0]
    return content[10:10 + length], content[10 + length:]


def _npy(header: bytes, data: bytes, version: bytes = b"\x01\x00") -> bytes:
    field = struct.pack("<H" if version == b"\x01\x00" else "<I", len(header))
    return b"\x93NUMPY" + version + field + header + data


_CRAFTED_HEADERS = [
    "{'descr': '<f8', 'fortran_order': False, 'shape': (10000000000000,), }",
    "{'descr': '<f8', 'fortran_order': False, 'shape': (1000000,), }",  # 8 MB: traced
    "{'descr': '<f8', 'fortran_order': False, 'shape': (-1,), }",
    "{'descr': '<f8', 'fortran_order': False, 'shape': (18446744073709551616,), }",
    "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }",
    "{'descr': '<f8', 'fortran_order': False, 'shape': (True,), }",
    "{'descr': '|O', 'fortran_order': False, 'shape': (1,), }",
    "{'descr': '<f16', 'fortran_order': False, 'shape': (1,), }",
    "{'descr': [('a', '<f8')], 'fortran_order': False, 'shape': (1,), }",
    "{'descr': '<M8[ns]', 'fortran_order': False, 'shape': (1,), }",
    "{'descr': '|V8', 'fortran_order': False, 'shape': (1,), }",
    "{'descr': 'f8', 'fortran_order': False, 'shape': (1,), }",
    "{'descr': '(1000000000,)<f8', 'fortran_order': False, 'shape': (), }",
    "{'descr': '<f8', 'fortran_order': 1, 'shape': (1,), }",
    "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), 'extra': 0}",
    "{'descr': '<f8', 'shape': (1,)}",
    "[1, 2, 3]",
    "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), ",
    "(" * 3000 + ")" * 3000,
    "__import__('os').system('false')",
    "{'descr': '\udcff', 'fortran_order': False, 'shape': (1,), }",
]
_PATH_NAMES = ["../a0.npy", "/a0.npy", "dir/a0.npy", "a0.npy/../a0.npy", "a0", "A0.npy",
               "a00.npy", "a0.NPY", "..\\a0.npy", "C:\\a0.npy", "a0.npy\x00.txt", "",
               "__nbgrad__", "x.npy", "a-1.npy", "a99.npy"]


def _pick(rng, members):
    return rng.randrange(len(members))


def _truncate(rng, data):
    return data[:rng.randrange(len(data))]


def _flip_bits(rng, data):
    damaged = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        position = rng.randrange(8 * len(data))
        damaged[position // 8] ^= 1 << (position % 8)
    return bytes(damaged)


def _swap_members(rng, data):
    members = _members(data)
    i, j = _pick(rng, members), _pick(rng, members)
    contents = [content for _, content in members]
    contents[i], contents[j] = contents[j], contents[i]
    return _rezip([(name, content) for (name, _), content in zip(members, contents)])


def _junk_member(rng, data):
    members = _members(data)
    i = _pick(rng, members)
    junk = rng.choice([rng.randbytes(rng.randrange(64)), b"\x93NUMPY", b"\x93NUMPY\x01\x00"])
    members[i] = (members[i][0], junk)
    return _rezip(members)


def _crafted_npy_header(rng, data):
    members = _members(data)
    i = _pick(rng, members)
    header, body = _npy_parts(members[i][1])
    flipped = header.decode("latin-1").replace("False", "True")  # fortran_order flipped
    text = rng.choice(_CRAFTED_HEADERS + [flipped])
    encoded = text.encode("utf-8", "surrogateescape") + b"\n"
    version = rng.choice([b"\x01\x00", b"\x02\x00", b"\x03\x00", b"\x09\x09"])
    members[i] = (members[i][0], _npy(encoded, body, version))
    return _rezip(members)


def _crafted_npy_length(rng, data):
    members = _members(data)
    i = _pick(rng, members)
    content = bytearray(members[i][1])
    content[8:10] = struct.pack("<H", rng.randrange(2**16))
    members[i] = (members[i][0], bytes(content))
    return _rezip(members)


def _transposed_shape(rng, data):
    """Reverse the shape of an array member (same byte count, another value), or add an
    axis of 1."""
    members = _members(data)
    i = _pick(rng, members)
    header, body = _npy_parts(members[i][1])
    fields = ast.literal_eval(header.decode("latin-1"))
    fields["shape"] = tuple(reversed(fields["shape"])) + rng.choice([(), (1,)])
    members[i] = (members[i][0], _npy(repr(fields).encode() + b"\n", body))
    return _rezip(members)


def _rename_member(rng, data):
    members = _members(data)
    i = _pick(rng, members)
    members[i] = (rng.choice(_PATH_NAMES + [n for n, _ in members]), members[i][1])
    return _rezip(members)


def _add_member(rng, data):
    members = _members(data)
    name = rng.choice(_PATH_NAMES + [n for n, _ in members])
    members.insert(rng.randint(0, len(members)), (name, members[_pick(rng, members)][1]))
    return _rezip(members)


def _remove_member(rng, data):
    members = _members(data)
    del members[_pick(rng, members)]
    return _rezip(members)


def _altered_schema(rng, data):
    """Change what the header's schema says of one entry (its shape, dtype or crc32),
    drop an entry from it or add one: the arrays no longer match it."""
    members = _members(data)
    at = [name for name, _ in members].index("__nbgrad__.npy")
    header = json.loads(_npy_parts(members[at][1])[1])
    schema = header["arrays"]
    change = rng.choice(["shape", "dtype", "crc32", "drop", "add"])
    if change == "add" or not schema:
        schema[f"a{len(schema)}"] = {"dtype": "<f8", "shape": [], "crc32": 0}
    else:
        entry = rng.choice(sorted(schema))
        if change == "drop":
            del schema[entry]
        elif change == "shape":
            schema[entry]["shape"] += [1]
        elif change == "dtype":
            schema[entry]["dtype"] = rng.choice(
                [d for d in ("<f8", "|O", "<i4", "|u1") if d != schema[entry]["dtype"]])
        else:
            schema[entry]["crc32"] ^= 1 << rng.randrange(32)
    members[at] = ("__nbgrad__.npy", _header_member(json.dumps(header).encode()))
    return _rezip(members)


def _header_member(text: bytes) -> bytes:
    """The npy member holding the header JSON ``text`` as uint8."""
    return _npy(f"{{'descr': '|u1', 'fortran_order': False, 'shape': ({len(text)},), }}"
                "\n".encode(), text)


_DAMAGE = [_truncate, _flip_bits, _swap_members, _junk_member, _crafted_npy_header,
           _crafted_npy_length, _transposed_shape, _rename_member, _add_member,
           _remove_member, _altered_schema]


@st.composite
def _damaged(draw):
    """(saved tree, its checkpoint after one to three kinds of damage). The damage is
    drawn from a Random seeded by a hypothesis integer and the file: hypothesis's own
    integers favour 0 and the ends (most cuts would leave nothing, most bit flips hit the
    zip's magic), and it draws the seed 0 often."""
    tree = draw(_trees)
    data = _saved(tree)
    rng = random.Random(f"{draw(st.integers(0, 2**64 - 1))}:{data.hex()}")
    damages = [rng.choice(_DAMAGE) for _ in range(rng.randint(1, 3))]
    if _altered_schema in damages:
        # Alone: a schema rewritten to agree with a rewritten npy header (both shapes
        # given an axis of 1) is a crafted file that loads another value, by design.
        damages = [_altered_schema]
    for damage in damages:
        if len(data) < 2:
            break
        try:
            data = damage(rng, data)
        except Exception:  # zipfile or npy parsing of what an earlier damage left:
            break  # this one cannot take it apart, so load it as it is
    return tree, data


def _load_within_memory(data: bytes):
    """load(data); asserts that the peak of traced allocations stays within a few times
    the file's size (plus the interpreter's own small change)."""
    tracemalloc.start()
    try:
        return load(io.BytesIO(data))
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak <= 4 * len(data) + 2**20, f"{peak} bytes allocated for {len(data)}"


@fuzz_settings
@given(_damaged())
def test_damaged_checkpoints_load_exactly_or_raise_checkpoint_error(case):
    tree, data = case
    try:
        back = _load_within_memory(data)
    except CheckpointError:
        return
    _assert_same(tree, back)


@fuzz_settings
@given(_trees, st.data())
def test_crafted_headers_load_or_raise_checkpoint_error(tree, data):
    """The header JSON itself rewritten (bytes flipped, cut or inserted; the member's CRC
    recomputed): any value, or CheckpointError."""
    members = _members(_saved(tree))
    text = bytearray(_npy_parts(members[0][1])[1])
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(text) - 1))
        byte = data.draw(st.sampled_from(b'{}[]",:0189afx-"') | st.integers(0, 255))
        how = data.draw(st.sampled_from(["set", "insert", "cut"]))
        if how == "set":
            text[at] = byte
        elif how == "insert":
            text.insert(at, byte)
        else:
            del text[at:]
        if not text:
            break
    members[0] = (members[0][0], _header_member(bytes(text)))
    try:
        _load_within_memory(_rezip(members))
    except CheckpointError:
        pass


def test_a_deeply_nested_header_is_a_checkpoint_error():
    text = json.dumps({"format": "nbgrad-checkpoint", "version": 1,
                       "tree": None}).replace("null", "[" * 100000 + "]" * 100000).encode()
    data = _rezip([("__nbgrad__.npy", _header_member(text))])
    try:
        load(io.BytesIO(data))
    except CheckpointError as error:
        assert "nested too deeply" in str(error)
    else:
        raise AssertionError("a header nested 100000 deep loaded")
