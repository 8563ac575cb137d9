"""Checkpoints without pickle: ``save(obj, f)`` and ``load(f)``.

The file is an ``.npz`` archive (``numpy.savez``, readable with ``allow_pickle=False``):

* ``__nbgrad__``: a uint8 array holding the UTF-8 (in fact ASCII) JSON document
  ``{"format": "nbgrad-checkpoint", "version": 1, "tree": NODE}``;
* ``a0``, ``a1``, ...: the arrays the tree refers to.

A NODE is ``null``, ``true``/``false``, a JSON string (a Python str), a JSON array (a
list of NODEs), or an object with one key, the tag:

* ``{"int": "-0x1f"}``: a Python int in hexadecimal (any size: hex conversion has no
  digit limit, unlike decimal);
* ``{"float": "0.1"}``: a Python float as its ``repr`` (exact; also ``inf``,
  ``-inf``); a NaN is ``"nan:"`` and its 8 IEEE bytes in hex (sign and payload kept);
* ``{"tuple": [NODE, ...]}``;
* ``{"dict": [[KEY, NODE], ...]}`` and ``{"ordered_dict": ...}`` (``OrderedDict``),
  pairs in insertion order; a KEY is the NODE of a str, int, bool, float or None, so
  integer keys load back as ints;
* ``{"array": "a0"}``, ``{"tensor": "a0"}`` (an nbgrad Tensor; requires_grad is not
  stored), ``{"scalar": "a0"}`` (a numpy scalar, stored as a 0-d array): references to
  array entries. Objects that held the same ndarray when saved share one loaded array.
"""

from __future__ import annotations

import json
import os
import secrets
import struct
import zipfile
import zlib
from collections import OrderedDict
from typing import IO, Any

import numpy as np

from .tensor import SUPPORTED_DTYPES, Tensor

FORMAT = "nbgrad-checkpoint"
VERSION = 1
HEADER_ENTRY = "__nbgrad__"
ZIP_MAGIC = b"PK\x03\x04"

FileLike = str | os.PathLike | IO[bytes]
_KEY_TYPES = (str, int, bool, float, type(None))
_CONTAINERS = (list, tuple, dict, OrderedDict)


class CheckpointError(ValueError):
    """A file that is not an nbgrad checkpoint, or a corrupt or truncated one."""


class CheckpointVersionError(RuntimeError):
    """A checkpoint in a format version newer than this nbgrad reads."""


def save(obj: Any, f: FileLike) -> None:
    """Write ``obj`` to ``f`` (a path or a writable binary file object) as a checkpoint.

    ``obj`` is a tree of dicts (str, int, bool, float or None keys), ``OrderedDict``s,
    lists, tuples, ndarrays (not object arrays), Tensors, numpy scalars and Python
    ``int``/``float``/``bool``/``str``/``None``. Anything else is a TypeError naming
    where it is (``obj['layers'][2]``), raised before anything is written. A path is
    written atomically: to a temporary file in the same directory, flushed to disk,
    then renamed over ``f``, so ``f`` holds either the old or the new checkpoint.
    """
    entries = _Encoder().encode(obj)
    if isinstance(f, str | os.PathLike):
        _write_atomically(os.fspath(f), entries)
    else:
        np.savez(f, **entries)


def load(f: FileLike) -> Any:
    """The object saved in ``f`` (a path or a readable, seekable binary file object).

    Arrays are read with ``allow_pickle=False``, so loading never runs pickled code.
    A file that is not an nbgrad checkpoint, or is corrupt or truncated, raises
    ``CheckpointError`` (a ValueError) naming the file; a checkpoint written in a newer
    format version raises ``CheckpointVersionError`` (a RuntimeError).
    """
    if isinstance(f, str | os.PathLike):
        with open(f, "rb") as file:
            return _read(file, repr(os.fspath(f)))
    return _read(f, f"the {type(f).__name__} {getattr(f, 'name', '')}".rstrip())


# -- writing --------------------------------------------------------------------------------
class _Encoder:
    """Turns an object tree into the JSON tree and the array entries it refers to."""

    def __init__(self):
        self.entries: dict[str, np.ndarray] = {}
        self._entry_of: dict[int, str] = {}  # id(saved ndarray) -> its entry: stored once
        self._enclosing: set[int] = set()  # ids of the containers around the current node

    def encode(self, obj: Any) -> dict[str, np.ndarray]:
        """The npz entries, header first."""
        tree = self.node(obj, ())
        header = json.dumps({"format": FORMAT, "version": VERSION, "tree": tree},
                            ensure_ascii=True, allow_nan=False, separators=(",", ":"))
        return {HEADER_ENTRY: np.frombuffer(header.encode("ascii"), np.uint8),
                **self.entries}

    def node(self, obj: Any, path: tuple) -> Any:
        kind = type(obj)
        if obj is None or kind is bool or kind is str:
            return obj
        if kind is int:
            return {"int": hex(obj)}
        if kind is float:
            return {"float": _float_text(obj)}
        if kind is np.ndarray:
            return {"array": self._array_entry(obj, path)}
        if isinstance(obj, Tensor):
            return {"tensor": self._array_entry(obj.data, path)}
        if isinstance(obj, np.generic):
            return {"scalar": self._scalar_entry(obj, path)}
        if kind in _CONTAINERS:
            return self._container(obj, path)
        raise TypeError(f"save: cannot save {_place(path)}: type {kind.__module__}."
                        f"{kind.__qualname__} is not supported (dicts, lists, tuples, "
                        "ndarrays, Tensors, numpy scalars, int, float, bool, str and None are)")

    def _container(self, obj: list | tuple | dict, path: tuple) -> Any:
        if id(obj) in self._enclosing:
            raise ValueError(f"save: {_place(path)} is a container that encloses it (a "
                             "cycle); a checkpoint holds a tree")
        self._enclosing.add(id(obj))
        if isinstance(obj, dict):
            pairs = [[self._key(key, path), self.node(value, path + (key,))]
                     for key, value in obj.items()]
            node = {"ordered_dict" if type(obj) is OrderedDict else "dict": pairs}
        else:
            items = [self.node(item, path + (i,)) for i, item in enumerate(obj)]
            node = items if type(obj) is list else {"tuple": items}
        self._enclosing.remove(id(obj))
        return node

    def _key(self, key: Any, path: tuple) -> Any:
        if type(key) not in _KEY_TYPES:
            raise TypeError(f"save: {_place(path)} has the key {key!r} of type "
                            f"{type(key).__name__}; keys must be str, int, bool, float or "
                            "None")
        return self.node(key, path)

    def _array_entry(self, array: np.ndarray, path: tuple) -> str:
        if array.dtype.hasobject:
            raise TypeError(f"save: cannot save {_place(path)}: numpy stores arrays of "
                            f"dtype {array.dtype} only with pickle")
        if id(array) not in self._entry_of:
            self._entry_of[id(array)] = self._add_entry(array)
        return self._entry_of[id(array)]

    def _scalar_entry(self, scalar: np.generic, path: tuple) -> str:
        if scalar.dtype.hasobject:
            raise TypeError(f"save: cannot save {_place(path)}: numpy stores scalars of "
                            f"dtype {scalar.dtype} only with pickle")
        return self._add_entry(np.asarray(scalar))

    def _add_entry(self, array: np.ndarray) -> str:
        name = f"a{len(self.entries)}"
        self.entries[name] = array
        return name


def _place(path: tuple) -> str:
    """Where a node sits in the tree, as Python spells it: ``obj['layers'][2]``."""
    return "obj" + "".join(f"[{_short_repr(key)}]" for key in path)


def _short_repr(key: Any) -> str:
    # repr of an int of more than 4300 digits raises (sys.get_int_max_str_digits).
    return hex(key) if type(key) is int and key.bit_length() > 4096 else repr(key)


def _float_text(x: float) -> str:
    """``repr(x)``, which reads back as exactly ``x``, except for a NaN: repr prints
    every NaN as ``nan``, so a NaN is written as its 8 IEEE bytes (sign and payload)."""
    if x != x:
        return "nan:" + struct.pack(">d", x).hex()
    return repr(x)


def _write_atomically(path: str, entries: dict[str, np.ndarray]) -> None:
    """``entries`` as an npz at ``path``: written to a new file beside it, flushed to
    disk, then renamed over ``path`` (``os.replace`` is atomic), so a crash or an error
    leaves the previous file under ``path`` intact. The temporary file is removed on
    error."""
    directory, name = os.path.split(os.path.abspath(path))
    temporary = os.path.join(directory, f".{name}.{secrets.token_hex(8)}.tmp")
    # Created with 0o666 (less the umask) as open() would; O_EXCL: never another's file.
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0),
                 0o666)
    try:
        with os.fdopen(fd, "wb") as file:
            np.savez(file, **entries)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


# -- reading --------------------------------------------------------------------------------
# What reading a damaged archive raises, from zipfile (RuntimeError: a member flagged as
# encrypted), zlib, numpy's npy reader and json.
_READ_ERRORS = (ValueError, KeyError, EOFError, OSError, RuntimeError, zipfile.BadZipFile,
                zlib.error, NotImplementedError, struct.error)


def _read(file: IO[bytes], source: str) -> Any:
    start = file.tell()
    magic = file.read(len(ZIP_MAGIC))
    file.seek(start)
    if magic != ZIP_MAGIC:
        raise CheckpointError(f"load: {source} is not an nbgrad checkpoint (not an npz "
                              "archive)")
    try:
        with np.load(file, allow_pickle=False) as archive:
            return _Decoder(archive, source).decode()
    except (CheckpointError, CheckpointVersionError):
        raise
    except _READ_ERRORS as e:
        raise CheckpointError(f"load: {source} is corrupt or truncated: "
                              f"{type(e).__name__}: {e}") from e


class _Decoder:
    """Rebuilds the object tree from the header's JSON tree and the archive's arrays,
    checking every node, so a damaged file is an error, never a partial result."""

    def __init__(self, archive: Any, source: str):
        self.archive = archive
        self.source = source
        self._arrays: dict[str, np.ndarray] = {}  # entry name -> loaded array (shared)
        self._tags = {"int": self._int, "float": self._float, "tuple": self._tuple,
                      "dict": self._dict, "ordered_dict": self._ordered_dict,
                      "array": self._array, "tensor": self._tensor, "scalar": self._scalar}

    def fail(self, problem: str, path: tuple | None = None) -> CheckpointError:
        """The error for a damaged file; ``path``: the node at fault."""
        place = f"{_place(path)} " if path is not None else ""
        return CheckpointError(f"load: {self.source} is corrupt: {place}{problem}")

    def decode(self) -> Any:
        header = self._header()
        if header.get("format") != FORMAT or "tree" not in header:
            raise CheckpointError(f"load: {self.source} is not an nbgrad checkpoint (its "
                                  f"header has no format {FORMAT!r} and tree)")
        version = header.get("version")
        if type(version) is not int or version < 1:
            raise self.fail(f"the format version is {version!r}")
        if version > VERSION:
            raise CheckpointVersionError(
                f"load: {self.source} is a checkpoint of format version {version}, written "
                f"by a newer nbgrad; this one reads versions up to {VERSION}")
        return self.node(header["tree"], ())

    def _header(self) -> dict:
        if HEADER_ENTRY not in self.archive.files:
            raise CheckpointError(f"load: {self.source} is not an nbgrad checkpoint (an "
                                  f"npz archive without the {HEADER_ENTRY} entry)")
        raw = self.archive[HEADER_ENTRY]
        if raw.dtype != np.uint8 or raw.ndim != 1:
            raise self.fail(f"the header is a {raw.dtype} array of shape {raw.shape}")
        header = json.loads(raw.tobytes().decode("utf-8"))
        if not isinstance(header, dict):
            raise self.fail("the header is not a JSON object")
        return header

    def node(self, node: Any, path: tuple) -> Any:
        if node is None or isinstance(node, bool | str):
            return node
        if isinstance(node, list):
            return [self.node(item, path + (i,)) for i, item in enumerate(node)]
        if not (isinstance(node, dict) and len(node) == 1):
            raise self.fail(f"is not a node: {str(node)[:80]}", path)
        [(tag, value)] = node.items()
        if tag not in self._tags:
            raise self.fail(f"has the unknown tag {tag!r}", path)
        return self._tags[tag](value, path)

    def _text(self, value: Any, path: tuple) -> str:
        if not isinstance(value, str):
            raise self.fail(f"holds {str(value)[:80]} where a string belongs", path)
        return value

    def _int(self, value: Any, path: tuple) -> int:
        return int(self._text(value, path), 16)

    def _float(self, value: Any, path: tuple) -> float:
        text = self._text(value, path)
        if not text.startswith("nan:"):
            return float(text)
        x = struct.unpack(">d", bytes.fromhex(text[4:]))[0]
        if x == x:
            raise self.fail(f"is {text!r}, a NaN with the bits of a number", path)
        return x

    def _items(self, value: Any, path: tuple) -> list:
        if not isinstance(value, list):
            raise self.fail(f"holds {str(value)[:80]} where a list belongs", path)
        return value

    def _tuple(self, value: Any, path: tuple) -> tuple:
        return tuple(self.node(item, path + (i,))
                     for i, item in enumerate(self._items(value, path)))

    def _dict(self, value: Any, path: tuple) -> dict:
        out = {}
        for pair in self._items(value, path):
            if not (isinstance(pair, list) and len(pair) == 2):
                raise self.fail(f"holds {str(pair)[:80]} where a [key, value] pair "
                                "belongs", path)
            key = self.node(pair[0], path)
            if type(key) not in _KEY_TYPES:
                raise self.fail(f"has a key of type {type(key).__name__}", path)
            out[key] = self.node(pair[1], path + (key,))
        return out

    def _ordered_dict(self, value: Any, path: tuple) -> OrderedDict:
        return OrderedDict(self._dict(value, path))

    def _array(self, value: Any, path: tuple) -> np.ndarray:
        name = self._text(value, path)
        if name == HEADER_ENTRY or name not in self.archive.files:
            raise self.fail(f"refers to the missing array entry {name!r}", path)
        if name not in self._arrays:
            self._arrays[name] = self.archive[name]
        return self._arrays[name]

    def _tensor(self, value: Any, path: tuple) -> Tensor:
        array = self._array(value, path)
        native = array.dtype.newbyteorder("=")
        if native not in SUPPORTED_DTYPES:
            raise self.fail(f"is a tensor of the unsupported dtype {array.dtype}", path)
        return Tensor._wrap(array.astype(native, copy=False), None, 0)

    def _scalar(self, value: Any, path: tuple) -> np.generic:
        array = self._array(value, path)
        if array.ndim != 0:
            raise self.fail(f"is a numpy scalar stored with shape {array.shape}", path)
        return array[()]
