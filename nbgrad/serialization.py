"""Checkpoints without pickle: ``save(obj, f)`` and ``load(f)``.

The file is an ``.npz`` archive (``numpy.savez``, readable with ``allow_pickle=False``):

* ``__nbgrad__``: a uint8 array holding the UTF-8 (in fact ASCII) JSON document
  ``{"format": "nbgrad-checkpoint", "version": 1, "tree": NODE, "arrays": SCHEMA}``;
* ``a0``, ``a1``, ...: the arrays the tree refers to, each C-ordered.

SCHEMA is ``{"a0": {"dtype": "<f4", "shape": [3, 4], "crc32": 305419896}, ...}``: every
array entry's npy dtype string, shape and the CRC-32 of its data bytes. The archive holds
exactly the header and the entries the schema lists, and the tree refers to each of them.
(Files written before the schema existed have no ``"arrays"``: their members are read
with the same checks, without the schema's.)

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

Reading trusts nothing: every member goes through one npy reader that checks the zip
entry, the npy header, the dtype (``ALLOWED_DTYPES``: no object, structured or
platform-dependent dtypes) and that the shape's byte count is the member's before
anything is allocated, so no allocation exceeds the file's size; then the decoded arrays
must match the schema and the tree.
"""

from __future__ import annotations

import ast
import errno
import json
import os
import re
import secrets
import stat
import struct
import zipfile
import zlib
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import IO, Any

import numpy as np

from .device import check_device, device
from .tensor import SUPPORTED_DTYPES, Tensor

FORMAT = "nbgrad-checkpoint"
VERSION = 1
HEADER_ENTRY = "__nbgrad__"
ZIP_MAGIC = b"PK\x03\x04"

FileLike = str | os.PathLike | IO[bytes]
_KEY_TYPES = (str, int, bool, float, type(None))
_CONTAINERS = (list, tuple, dict, OrderedDict)

#: dtype kind -> the item sizes a checkpoint may hold (None: any, for bytes and str).
#: No object arrays (pickle), structured or sub-array dtypes, datetimes, or float128
#: (whose layout depends on the platform).
ALLOWED_DTYPES: dict[str, tuple[int, ...] | None] = {
    "b": (1,), "i": (1, 2, 4, 8), "u": (1, 2, 4, 8), "f": (2, 4, 8), "c": (8, 16),
    "S": None, "U": None}


class CheckpointError(ValueError):
    """A file that is not an nbgrad checkpoint, or a corrupt, truncated or crafted one:
    what every failed ``load`` raises (``CheckpointVersionError`` included)."""


class CheckpointVersionError(CheckpointError, RuntimeError):
    """A checkpoint in a format version newer than this nbgrad reads (a RuntimeError, as
    before ``CheckpointError`` covered it, and a CheckpointError)."""


def save(obj: Any, f: FileLike) -> None:
    """Write ``obj`` to ``f`` (a path or a writable binary file object) as a checkpoint.

    ``obj`` is a tree of dicts (str, int, bool, float or None keys), ``OrderedDict``s,
    lists, tuples, ndarrays (not object arrays), Tensors, numpy scalars and Python
    ``int``/``float``/``bool``/``str``/``None``. Anything else is a TypeError naming
    where it is (``obj['layers'][2]``), raised before anything is written. A path is
    written atomically: to a temporary file in the same directory, flushed to disk,
    then renamed over ``f`` (and the directory flushed), so ``f`` holds either the old or
    the new checkpoint. Overwriting keeps the file's permission bits, and a symlink ``f``
    stays a link: its target is written, as ``torch.save`` does.
    """
    entries = _Encoder().encode(obj)
    if isinstance(f, str | os.PathLike):
        _write_path(os.fspath(f), entries)
    else:
        np.savez(f, **entries)


def load(f: FileLike, map_location: Any = None, pickle_module: Any = None, *,
         weights_only: bool | None = None, mmap: bool | None = None,
         **pickle_load_args: Any) -> Any:
    """The object saved in ``f`` (a path or a readable, seekable binary file object).

    Loading never runs pickled code and never trusts the file: a file that is not an
    nbgrad checkpoint, or is corrupt, truncated or crafted (a member that is not npy, an
    object or other dtype outside ``ALLOWED_DTYPES``, a shape the member's bytes do not
    hold, arrays that differ from the header's schema, members of other names) raises
    ``CheckpointError`` (a ValueError) naming the file, the entry and the problem, before
    allocating more than the file's size; a checkpoint written in a newer format version
    raises ``CheckpointVersionError`` (a CheckpointError and a RuntimeError).

    ``torch.load``'s other arguments are accepted so that ported calls run unchanged:

    * ``map_location``: every tensor is on the CPU, so None, ``'cpu'``, ``'cpu:0'``,
      ``nb.device('cpu')`` (or any object whose ``str`` is one of these), a dict mapping
      locations to one of these, or a callable ``fn(tensor, 'cpu')`` returning None (keep
      the tensor) or a Tensor (use it instead) all load onto the CPU; any other device
      raises a RuntimeError, as ``nb.device`` does ("nbgrad runs on the CPU").
    * ``weights_only`` (True, False or None) and ``pickle_module``: nbgrad checkpoints
      hold only data and loading never unpickles, so every value means the same, the
      safety of ``weights_only=True``.
    * ``mmap`` (True, False or None): the archive's arrays are read into memory either
      way (an npz member cannot be memory-mapped); the result is the same.
    * ``encoding``, ``errors``, ``fix_imports`` (``torch.load``'s ``pickle_load_args``):
      accepted and unused, since nothing is unpickled. Any other keyword is a TypeError.
    """
    unknown = sorted(set(pickle_load_args) - _PICKLE_LOAD_ARGS)
    if unknown:
        raise TypeError(f"load() got an unexpected keyword argument {unknown[0]!r}")
    for name, value in (("weights_only", weights_only), ("mmap", mmap)):
        if value is not None and not isinstance(value, bool):
            raise TypeError(f"load: {name} must be True, False or None, got "
                            f"{type(value).__name__}")
    place = _map_location(map_location)
    if isinstance(f, str | os.PathLike):
        with open(f, "rb") as file:
            obj = _read(file, repr(os.fspath(f)))
    else:
        obj = _read(f, f"the {type(f).__name__} {getattr(f, 'name', '')}".rstrip())
    return obj if place is None else _map_tensors(obj, place)


_PICKLE_LOAD_ARGS = frozenset({"encoding", "errors", "fix_imports"})


def _map_location(map_location: Any) -> Callable | None:
    """None, or the callable of a callable ``map_location``, after checking that any
    device it names is the CPU."""
    if map_location is None:
        return None
    if callable(map_location) and not isinstance(map_location, device):
        return map_location
    targets = map_location.values() if isinstance(map_location, Mapping) else [map_location]
    for target in targets:
        check_device(target if isinstance(target, str | device | int) else str(target),
                     "load(map_location)")
    return None


def _map_tensors(obj: Any, fn: Callable) -> Any:
    """``obj`` with each Tensor ``t`` in its dicts, lists and tuples replaced by
    ``fn(t, 'cpu')`` when that is not None."""
    if isinstance(obj, Tensor):
        mapped = fn(obj, "cpu")
        if mapped is None:
            return obj
        if not isinstance(mapped, Tensor):
            raise TypeError(f"load: map_location(tensor, 'cpu') must return None or a "
                            f"Tensor, got {type(mapped).__name__}")
        return mapped
    if isinstance(obj, dict):
        return type(obj)((key, _map_tensors(value, fn)) for key, value in obj.items())
    if isinstance(obj, list):
        return [_map_tensors(value, fn) for value in obj]
    if isinstance(obj, tuple):
        items = [_map_tensors(value, fn) for value in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
    return obj


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
        schema = {name: _schema_of(array) for name, array in self.entries.items()}
        header = json.dumps({"format": FORMAT, "version": VERSION, "tree": tree,
                             "arrays": schema},
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
            return {"tensor": self._array_entry(obj._data, path)}
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
        _check_savable(array.dtype, "arrays", path)
        if id(array) not in self._entry_of:
            self._entry_of[id(array)] = self._add_entry(array)
        return self._entry_of[id(array)]

    def _scalar_entry(self, scalar: np.generic, path: tuple) -> str:
        array = np.asarray(scalar)  # np.str_('') is <U0; as an array, <U1
        _check_savable(array.dtype, "scalars", path)
        return self._add_entry(array)

    def _add_entry(self, array: np.ndarray) -> str:
        name = f"a{len(self.entries)}"
        # C order, as the schema says (np.ascontiguousarray would make a 0-d array 1-d)
        self.entries[name] = array if array.flags.c_contiguous else array.copy(order="C")
        return name


def _check_savable(dtype: np.dtype, what: str, path: tuple) -> None:
    """A TypeError unless ``load`` reads ``dtype`` back (``ALLOWED_DTYPES``)."""
    if dtype.hasobject:
        raise TypeError(f"save: cannot save {_place(path)}: numpy stores {what} of "
                        f"dtype {dtype} only with pickle")
    if not _allowed(dtype):
        raise TypeError(f"save: cannot save {_place(path)}: {what} of dtype {dtype} are not "
                        "stored (bool, integer, float16/32/64, complex64/128, bytes and str "
                        "are)")


def _allowed(dtype: np.dtype) -> bool:
    """Whether ``dtype`` is in ``ALLOWED_DTYPES`` (a plain dtype, not structured)."""
    if dtype.names is not None or dtype.subdtype is not None or dtype.kind not in ALLOWED_DTYPES:
        return False
    sizes = ALLOWED_DTYPES[dtype.kind]
    return dtype.itemsize > 0 if sizes is None else dtype.itemsize in sizes


def _data_bytes(array: np.ndarray) -> np.ndarray:
    """The bytes of a C-contiguous ``array`` as a flat uint8 view (no copy)."""
    return array.reshape(-1).view(np.uint8)


def _schema_of(array: np.ndarray) -> dict:
    """What the header records of an entry: npy dtype string, shape, CRC-32 of the data."""
    return {"dtype": array.dtype.str, "shape": list(array.shape),
            "crc32": zlib.crc32(_data_bytes(array))}


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


def _write_path(path: str, entries: dict[str, np.ndarray]) -> None:
    """``entries`` as an npz at ``path``, keeping what the user set (as ``torch.save``,
    which truncates and rewrites the file in place): a symlink is followed and its target
    written, and an existing file keeps its permission bits. A path that is not a regular
    file (``/dev/null``, a FIFO) is written in place, never replaced."""
    target = os.path.realpath(path) if os.path.islink(path) else path
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        with open(target, "wb") as file:
            np.savez(file, **entries)
        return
    _write_atomically(target, entries, None if mode is None else stat.S_IMODE(mode))


def _write_atomically(path: str, entries: dict[str, np.ndarray], mode: int | None) -> None:
    """``entries`` as an npz at ``path``: written to a new file beside it (with the
    permission bits ``mode``, when given), fsynced, renamed over ``path`` (``os.replace``
    is atomic), then the directory fsynced so that the rename itself is on disk. A crash
    or an error leaves the previous file under ``path`` intact; the temporary file is
    removed on error."""
    directory, name = os.path.split(os.path.abspath(path))
    temporary = os.path.join(directory, f".{name}.{secrets.token_hex(8)}.tmp")
    # Created with 0o666 (less the umask) as open() would; O_EXCL: never another's file.
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0),
                 0o666)
    try:
        with os.fdopen(fd, "wb") as file:
            if mode is not None:
                os.chmod(temporary, mode)  # before any data is written
            np.savez(file, **entries)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
    _fsync_directory(directory)


def _fsync_directory(directory: str) -> None:
    """fsync ``directory``, which makes a rename in it durable (POSIX); a no-op on Windows,
    for a directory this process may write but not open (mode -wx), and on file systems
    that do not support fsync of a directory."""
    if os.name == "nt":
        return
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except PermissionError:
        return
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise
    finally:
        os.close(fd)


# -- reading --------------------------------------------------------------------------------
# What reading a damaged archive raises from zipfile (RuntimeError: a member flagged as
# encrypted), zlib and json; the checks below name most damage before these are reached.
_READ_ERRORS = (ValueError, KeyError, EOFError, OSError, RuntimeError, zipfile.BadZipFile,
                zlib.error, NotImplementedError, struct.error, OverflowError, IndexError)
_MEMBER_NAME = re.compile(r"(?:__nbgrad__|a(?:0|[1-9][0-9]*))\.npy")
_NPY_MAGIC = b"\x93NUMPY"
_NPY_LENGTH_FIELD = {(1, 0): "<H", (2, 0): "<I", (3, 0): "<I"}  # npy version -> its format
_NPY_MAX_HEADER = 10000  # bytes of an npy header dict (numpy's own limit)
_NPY_KEYS = {"descr", "fortran_order", "shape"}
_CHUNK = 1 << 24  # bytes read at a time into an allocated array


def _read(file: IO[bytes], source: str) -> Any:
    start = file.tell()
    magic = file.read(len(ZIP_MAGIC))
    size = file.seek(0, os.SEEK_END) - start
    file.seek(start)
    if magic != ZIP_MAGIC:
        raise CheckpointError(f"load: {source} is not an nbgrad checkpoint (not an npz "
                              "archive)")
    try:
        with zipfile.ZipFile(file) as archive:
            return _Reader(archive, size, source).load()
    except CheckpointError:
        raise
    except RecursionError as e:
        raise CheckpointError(f"load: {source} is corrupt: its header is nested too "
                              "deeply") from e
    except _READ_ERRORS as e:
        raise CheckpointError(f"load: {source} is corrupt or truncated: "
                              f"{type(e).__name__}: {e}") from e


class _Reader:
    """Reads a checkpoint's zip archive, checking every member before trusting it: the zip
    entry, the npy header, the dtype, the size, and the header's schema."""

    def __init__(self, archive: zipfile.ZipFile, size: int, source: str):
        self.archive = archive
        self.size = size  # bytes of the file from the archive's start: a bound on members
        self.source = source

    def fail(self, problem: str, entry: str | None = None) -> CheckpointError:
        """The error for a damaged file; ``entry``: the member at fault."""
        place = f"the entry {entry!r} " if entry is not None else ""
        return CheckpointError(f"load: {self.source} is corrupt: {place}{problem}")

    def load(self) -> Any:
        members = self.members()
        header = self.header(members.pop(HEADER_ENTRY))
        version = header.get("version")
        if type(version) is not int or version < 1:
            raise self.fail(f"the format version is {version!r}")
        if version > VERSION:
            raise CheckpointVersionError(
                f"load: {self.source} is a checkpoint of format version {version}, written "
                f"by a newer nbgrad; this one reads versions up to {VERSION}")
        schema = self.schema(header, members)
        arrays = {name: self.entry(info, name, schema) for name, info in members.items()}
        decoder = _Decoder(arrays, self.source)
        obj = decoder.node(header["tree"], ())
        unused = sorted(set(arrays) - decoder.used)
        if unused:
            raise self.fail(f"the entries {', '.join(unused)} are not in the tree")
        return obj

    # -- the zip archive -----------------------------------------------------------------
    def members(self) -> dict[str, zipfile.ZipInfo]:
        """{entry name: zip entry}, after checking names, flags, compression and sizes."""
        infos = self.archive.infolist()
        names = [info.filename for info in infos]
        if f"{HEADER_ENTRY}.npy" not in names:
            raise CheckpointError(f"load: {self.source} is not an nbgrad checkpoint (an "
                                  f"npz archive without the {HEADER_ENTRY} entry)")
        total, seen = 0, set()
        for info in infos:
            self.check_member(info, info.filename in seen)
            seen.add(info.filename)
            total += info.compress_size
        if total > self.size:
            raise self.fail(f"its members claim {total} bytes, more than the file's "
                            f"{self.size}")
        return {info.filename[:-len(".npy")]: info for info in infos}

    def check_member(self, info: zipfile.ZipInfo, repeated: bool) -> None:
        """A member must have an entry's name (no paths), appear once, and be stored
        unencrypted and uncompressed within the file's size."""
        name = info.filename
        if not _MEMBER_NAME.fullmatch(name):
            raise self.fail(f"the archive holds the member {name[:80]!r}, which is not an "
                            "nbgrad entry (__nbgrad__.npy, a0.npy, a1.npy, ...)")
        entry = name[:-len(".npy")]
        if repeated:
            raise self.fail("appears more than once in the archive", entry)
        if info.flag_bits & 0x1:
            raise self.fail("is encrypted", entry)
        if info.compress_type != zipfile.ZIP_STORED:
            raise self.fail(f"is compressed (method {info.compress_type}); nbgrad stores "
                            "its entries uncompressed", entry)
        if info.file_size != info.compress_size or info.file_size > self.size:
            raise self.fail(f"claims {info.file_size} bytes ({info.compress_size} stored) "
                            f"in a file of {self.size}", entry)

    # -- the header ------------------------------------------------------------------------
    def header(self, info: zipfile.ZipInfo) -> dict:
        raw = self.entry(info, HEADER_ENTRY, None)
        if raw.dtype != np.uint8 or raw.ndim != 1:
            raise self.fail(f"the header is a {raw.dtype} array of shape {raw.shape}")
        header = json.loads(raw.tobytes().decode("utf-8"))
        if not isinstance(header, dict):
            raise self.fail("the header is not a JSON object")
        if header.get("format") != FORMAT or "tree" not in header:
            raise CheckpointError(f"load: {self.source} is not an nbgrad checkpoint (its "
                                  f"header has no format {FORMAT!r} and tree)")
        return header

    def schema(self, header: dict, members: dict) -> dict[str, tuple[str, tuple, int]] | None:
        """{entry: (dtype string, shape, crc32)} from the header's ``arrays``, checked
        against the archive's members; None for a file written before the schema."""
        if "arrays" not in header:
            return None
        listed = header["arrays"]
        if not isinstance(listed, dict):
            raise self.fail("the header's arrays is not a JSON object")
        extra, absent = sorted(set(members) - set(listed)), sorted(set(listed) - set(members))
        if extra or absent:
            raise self.fail("the archive's entries differ from its header's: "
                            + "; ".join(f"{what}: {', '.join(names)[:200]}" for what, names in
                                        (("not listed", extra), ("missing", absent)) if names))
        return {name: self.schema_entry(name, value) for name, value in listed.items()}

    def schema_entry(self, name: str, value: Any) -> tuple[str, tuple, int]:
        if isinstance(value, dict) and set(value) == {"dtype", "shape", "crc32"}:
            dtype, shape, crc = value["dtype"], value["shape"], value["crc32"]
            if (isinstance(dtype, str) and isinstance(shape, list)
                    and all(type(d) is int for d in shape)
                    and type(crc) is int and 0 <= crc < 2**32):
                return dtype, tuple(shape), crc
        raise self.fail(f"has the schema {str(value)[:80]} in the header (expected "
                        "dtype, shape and crc32)", name)

    # -- the one npy reader ----------------------------------------------------------------
    def entry(self, info: zipfile.ZipInfo, name: str,
              schema: dict[str, tuple[str, tuple, int]] | None) -> np.ndarray:
        """The array in member ``info`` (entry ``name``), read through its npy header and
        checked against the schema: nothing is allocated before the header's shape and
        dtype are found to need exactly the member's bytes."""
        with self.archive.open(info) as stream:
            dtype, shape, fortran, offset = self.npy_header(stream, info.file_size, name)
            count = 1
            for d in shape:
                count *= d
            needed = count * dtype.itemsize
            if needed != info.file_size - offset:
                raise self.fail(f"has the shape {shape[:8]} of {dtype.str}, which needs "
                                f"{needed} bytes, but holds {info.file_size - offset}", name)
            if schema is not None:
                self.check_schema(name, schema[name], dtype, shape, fortran)
            array = np.empty(count, dtype)
            crc = self.read_data(stream, _data_bytes(array), name)
        if schema is not None and crc != schema[name][2]:
            raise self.fail(f"has data of CRC-32 {crc:#010x}, not the header's "
                            f"{schema[name][2]:#010x} (altered or swapped)", name)
        return array.reshape(shape[::-1]).T if fortran else array.reshape(shape)

    def npy_header(self, stream: IO[bytes], size: int, name: str
                   ) -> tuple[np.dtype, tuple[int, ...], bool, int]:
        """(dtype, shape, fortran_order, bytes before the data) of an npy member."""
        prefix = self.read_exactly(stream, len(_NPY_MAGIC) + 2, name)
        if prefix[:len(_NPY_MAGIC)] != _NPY_MAGIC:
            raise self.fail("is not an npy array (no npy magic)", name)
        version = (prefix[-2], prefix[-1])
        if version not in _NPY_LENGTH_FIELD:
            raise self.fail(f"has the unknown npy version {version}", name)
        field = _NPY_LENGTH_FIELD[version]
        length = struct.unpack(field, self.read_exactly(stream, struct.calcsize(field), name))[0]
        offset = len(prefix) + struct.calcsize(field) + length
        if length > _NPY_MAX_HEADER or offset > size:
            raise self.fail(f"has an npy header of {length} bytes in a member of {size}", name)
        text = self.read_exactly(stream, length, name).decode(
            "utf-8" if version == (3, 0) else "latin-1")
        dtype, shape, fortran = self.npy_fields(text, name)
        return dtype, shape, fortran, offset

    def npy_fields(self, text: str, name: str) -> tuple[np.dtype, tuple[int, ...], bool]:
        """The checked ``descr``, ``shape`` and ``fortran_order`` of an npy header dict."""
        try:
            fields = ast.literal_eval(text)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            fields = None
        if not (isinstance(fields, dict) and set(fields) == _NPY_KEYS):
            raise self.fail(f"has the npy header {text[:80]!r}, not a dict of "
                            f"{sorted(_NPY_KEYS)}", name)
        descr, shape, fortran = fields["descr"], fields["shape"], fields["fortran_order"]
        if not (isinstance(shape, tuple) and all(type(d) is int and d >= 0 for d in shape)):
            raise self.fail(f"has the npy shape {str(shape)[:80]}", name)
        if type(fortran) is not bool:
            raise self.fail(f"has the npy fortran_order {str(fortran)[:80]}", name)
        return self.npy_dtype(descr, name), shape, fortran

    def npy_dtype(self, descr: Any, name: str) -> np.dtype:
        """The dtype an npy ``descr`` names, if ``ALLOWED_DTYPES`` has it."""
        dtype = None
        if isinstance(descr, str):
            try:
                dtype = np.dtype(descr)
            except (TypeError, ValueError, SyntaxError):
                dtype = None
        if dtype is None or dtype.str != descr or not _allowed(dtype):
            raise self.fail(f"has the dtype {str(descr)[:80]}, which a checkpoint does not "
                            "hold (no object arrays: they need pickle; bool, integer, "
                            "float16/32/64, complex64/128, bytes and str are allowed)", name)
        return dtype

    def check_schema(self, name: str, expected: tuple[str, tuple, int], dtype: np.dtype,
                     shape: tuple[int, ...], fortran: bool) -> None:
        found = (dtype.str, shape)
        if found != expected[:2] or fortran:
            order = " in Fortran order" if fortran else ""
            raise self.fail(f"is {dtype.str} of shape {shape[:8]}{order}; the header says "
                            f"{expected[0]} of shape {expected[1][:8]}", name)

    def read_data(self, stream: IO[bytes], out: np.ndarray, name: str) -> int:
        """Fill the uint8 array ``out`` from ``stream`` in chunks; the CRC-32 of the data.
        zipfile checks the member's own CRC when the last byte is read."""
        crc, position = 0, 0
        while position < out.size:
            chunk = self.read_exactly(stream, min(_CHUNK, out.size - position), name)
            out[position:position + len(chunk)] = np.frombuffer(chunk, np.uint8)
            crc = zlib.crc32(chunk, crc)
            position += len(chunk)
        if stream.read(1):
            raise self.fail("holds bytes after its data", name)
        return crc

    def read_exactly(self, stream: IO[bytes], n: int, name: str) -> bytes:
        data = stream.read(n)
        if len(data) != n:
            raise self.fail(f"is truncated ({len(data)} of {n} bytes read)", name)
        return data


class _Decoder:
    """Rebuilds the object tree from the header's JSON tree and the checked arrays,
    checking every node, so a damaged file is an error, never a partial result."""

    def __init__(self, arrays: dict[str, np.ndarray], source: str):
        self.arrays = arrays  # entry name -> loaded array (shared by its references)
        self.source = source
        self.used: set[str] = set()  # the entries the tree refers to
        self._tags = {"int": self._int, "float": self._float, "tuple": self._tuple,
                      "dict": self._dict, "ordered_dict": self._ordered_dict,
                      "array": self._array, "tensor": self._tensor, "scalar": self._scalar}

    def fail(self, problem: str, path: tuple | None = None) -> CheckpointError:
        """The error for a damaged file; ``path``: the node at fault."""
        place = f"{_place(path)} " if path is not None else ""
        return CheckpointError(f"load: {self.source} is corrupt: {place}{problem}")

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
        text = self._text(value, path)
        x = int(text, 16)
        if hex(x) != text:  # only what save writes: no spaces, underscores or capitals
            raise self.fail(f"holds the int {text[:80]!r}, not as save writes it", path)
        return x

    def _float(self, value: Any, path: tuple) -> float:
        text = self._text(value, path)
        if not text.startswith("nan:"):
            x = float(text)
            if x != x or repr(x) != text:  # a NaN is "nan:" and its bits
                raise self.fail(f"holds the float {text[:80]!r}, not as save writes it", path)
            return x
        if not re.fullmatch("[0-9a-f]{16}", text[4:]):
            raise self.fail(f"holds the NaN {text[:80]!r}, not 16 hex digits", path)
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
            if key in out:
                raise self.fail(f"has the key {_short_repr(key)[:80]} twice", path)
            out[key] = self.node(pair[1], path + (key,))
        return out

    def _ordered_dict(self, value: Any, path: tuple) -> OrderedDict:
        return OrderedDict(self._dict(value, path))

    def _array(self, value: Any, path: tuple) -> np.ndarray:
        name = self._text(value, path)
        if name not in self.arrays:
            raise self.fail(f"refers to the missing array entry {name[:80]!r}", path)
        self.used.add(name)
        return self.arrays[name]

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
