"""The file cache of the generated data sets.

A generator's arrays are stored in ``<cache dir>/<name>-v<FORMAT>-<hash>.npz``, where
the hash is the first 16 hex digits of SHA-256 over the generator's name, the format
version and all its parameters. The file also holds a JSON record (``__meta__``) of the
name, the format, the parameters, each array's shape and dtype, and a SHA-256 checksum
of the arrays. A file is used only if it loads, its record matches the request, every
array has the expected shape and dtype and is finite, and the checksum agrees; anything
else (a truncated or corrupted file, a hash collision, an older format) is reported
with a ``RuntimeWarning`` and the file is regenerated and overwritten. Files are written
to a temporary name in the same directory and moved into place with ``os.replace``, so
a reader never sees a half-written file.

The cache directory is ``$NBGRAD_DATA_DIR`` if set, else ``$XDG_CACHE_HOME/nbgrad/datasets``
(default ``~/.cache/nbgrad/datasets``; ``~/Library/Caches/nbgrad/datasets`` on macOS
and ``%LOCALAPPDATA%/nbgrad/Cache/datasets`` on Windows when ``XDG_CACHE_HOME`` is unset).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = 1  # bump when a generator's arrays change for the same parameters
_META = "__meta__"


def cache_dir() -> Path:
    """The directory the generated data sets are cached in (see the module docstring)."""
    env = os.environ.get("NBGRAD_DATA_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        base = Path(xdg).expanduser()
    elif sys.platform == "win32":
        local = os.environ.get("LOCALAPPDATA")
        base = Path(local) if local else Path.home() / "AppData" / "Local"
        return base / "nbgrad" / "Cache" / "datasets"
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    else:
        base = Path.home() / ".cache"
    return base / "nbgrad" / "datasets"


def _record(name: str, params: dict[str, Any]) -> str:
    """The canonical JSON of what identifies a file: name, format and parameters."""
    return json.dumps({"name": name, "format": FORMAT, "params": params}, sort_keys=True)


def cache_path(name: str, params: dict[str, Any]) -> Path:
    """The file that holds ``name(**params)``."""
    digest = hashlib.sha256(_record(name, params).encode()).hexdigest()[:16]
    return cache_dir() / f"{name}-v{FORMAT}-{digest}.npz"


def checksum(arrays: dict[str, np.ndarray]) -> str:
    """SHA-256 over each array's name, dtype, shape and bytes, in name order."""
    h = hashlib.sha256()
    for key in sorted(arrays):
        arr = np.ascontiguousarray(arrays[key])
        h.update(f"{key}|{arr.dtype.str}|{arr.shape}|".encode())
        h.update(arr.tobytes())
    return h.hexdigest()


def _load(path: Path, name: str, params: dict[str, Any],
          shapes: dict[str, tuple[int, ...]]) -> tuple[dict[str, np.ndarray] | None, str]:
    """(the verified arrays, "") or (None, why the file cannot be used)."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            data = {key: archive[key] for key in archive.files}
        meta = json.loads(str(data.pop(_META)[()]))
    except Exception as err:  # any failure to read means a damaged file: regenerate it
        return None, f"unreadable ({type(err).__name__}: {err})"
    if not isinstance(meta, dict):
        return None, "missing its record"
    stored = {k: meta.get(k) for k in ("name", "format", "params")}
    if json.dumps(stored, sort_keys=True) != _record(name, params):
        return None, "for other parameters or another format"
    if set(data) != set(shapes):
        return None, f"holding arrays {sorted(data)} instead of {sorted(shapes)}"
    for key, shape in shapes.items():
        arr = data[key]
        if arr.shape != tuple(shape) or arr.dtype != np.float64:
            return None, (f"holding {key} of shape {arr.shape} and dtype {arr.dtype} "
                          f"instead of {tuple(shape)} float64")
        if not np.isfinite(arr).all():
            return None, f"holding non-finite values in {key}"
    if meta.get("checksum") != checksum(data):
        return None, "failing its checksum"
    return data, ""


def _save(path: Path, name: str, params: dict[str, Any],
          arrays: dict[str, np.ndarray]) -> None:
    """Write atomically: a temporary file in the same directory, then ``os.replace``."""
    meta = json.loads(_record(name, params))
    meta["checksum"] = checksum(arrays)
    meta["shapes"] = {k: list(v.shape) for k, v in arrays.items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays, **{_META: np.array(json.dumps(meta, sort_keys=True))})
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def cached(name: str, params: dict[str, Any], shapes: dict[str, tuple[int, ...]],
           make: Callable[[], dict[str, np.ndarray]], cache: bool) -> dict[str, np.ndarray]:
    """The arrays of ``name(**params)``: from the cache file if it verifies, else from
    ``make()`` (written to the cache when ``cache`` is true). ``shapes`` gives the
    expected shape of every array; all arrays are float64."""
    path = cache_path(name, params) if cache else None
    if path is not None and path.exists():
        data, why = _load(path, name, params, shapes)
        if data is not None:
            return data
        warnings.warn(f"nbgrad.datasets.{name}: the cache file {path} is {why}; "
                      "regenerating it", RuntimeWarning, stacklevel=3)
    arrays = {k: np.ascontiguousarray(v, dtype=np.float64) for k, v in make().items()}
    for key, shape in shapes.items():  # the generators' own contract
        if arrays[key].shape != tuple(shape) or not np.isfinite(arrays[key]).all():
            raise RuntimeError(f"nbgrad.datasets.{name}: the solver produced {key} of "
                               f"shape {arrays[key].shape} (expected {tuple(shape)}) or "
                               "with non-finite values")
    if path is not None:
        try:
            _save(path, name, params, arrays)
        except OSError as err:
            warnings.warn(f"nbgrad.datasets.{name}: could not write the cache file {path} "
                          f"({err}); returning the arrays uncached", RuntimeWarning,
                          stacklevel=3)
    return arrays
