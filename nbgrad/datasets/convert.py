"""Convert neuraloperator's published ``.pt`` data files to ``.npz``, once, with PyTorch:
``convert_neuralop(src, dst=None)`` or ``python -m nbgrad.datasets.convert SRC...
[--out DIR]``.

A ``.pt`` file is a pickle, and unpickling can run code, so nbgrad's loaders
(``load_darcy_flow``, ``load_burgers``) read only the ``.npz`` copies this writes. The
conversion itself loads each file with ``torch.load(..., weights_only=True)``, PyTorch's
restricted unpickler that accepts tensors and plain containers only, and needs PyTorch
(``pip install nbgrad[torch]``). Each file must hold a dict of tensors (or numbers);
the ``.npz`` holds one array per key, with the same name, shape, dtype and values
(bitwise; a tensor stored with strides is written in C order).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .neuralop_files import FILE_PATTERN

_FN = "convert_neuralop"


def _import_torch() -> Any:
    try:
        import torch
    except ImportError as err:
        raise ImportError(f"{_FN}: reading neuraloperator's .pt files needs PyTorch, which "
                          "is not installed: pip install nbgrad[torch] (or pip install "
                          "torch). Only this one-off conversion needs it; the loaders read "
                          "the .npz files it writes.") from err
    return torch


def _sources(src: Path) -> list[Path]:
    """``src`` itself, or the neuraloperator data files (``darcy_train_16.pt`` ...) in
    the directory ``src``."""
    if src.is_dir():
        found = sorted(p for p in src.iterdir()
                       if p.suffix == ".pt" and FILE_PATTERN.match(p.stem) and p.is_file())
        if not found:
            raise FileNotFoundError(f"{_FN}: no neuraloperator data files "
                                    "({darcy,burgers}_{train,test}_<R>.pt) in the "
                                    f"directory {src}")
        return found
    if not src.is_file():
        raise FileNotFoundError(f"{_FN}: {src} does not exist")
    return [src]


def _arrays(torch: Any, path: Path) -> dict[str, np.ndarray]:
    """The dict of tensors in ``path`` as NumPy arrays of the same dtypes and values."""
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # any failure: not a file the restricted unpickler accepts
        raise ValueError(f"{_FN}: cannot read {path} as a PyTorch file of tensors "
                         f"({type(err).__name__}: {err})") from err
    if not isinstance(data, dict) or not data:
        raise ValueError(f"{_FN}: {path} holds a {type(data).__name__}, not a dict of "
                         "tensors (neuraloperator's files hold {'x': ..., 'y': ...})")
    out = {}
    for key, value in data.items():
        if not isinstance(key, str):
            raise ValueError(f"{_FN}: {path} has a non-string key {key!r}")
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu().resolve_conj().resolve_neg()
            try:
                arr = value.numpy()
            except TypeError as err:  # bfloat16 and other dtypes NumPy lacks
                raise ValueError(f"{_FN}: {path}[{key!r}] has dtype {value.dtype}, which "
                                 "NumPy cannot hold") from err
        elif isinstance(value, bool | int | float):
            arr = np.asarray(value)
        else:
            raise ValueError(f"{_FN}: {path}[{key!r}] is a {type(value).__name__}; only "
                             "tensors and numbers can be converted")
        out[key] = np.ascontiguousarray(arr)  # copies out of the tensor's storage
    return out


def _write(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """``np.savez`` to a temporary file in the same directory, then ``os.replace``: a
    reader never sees a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def convert_neuralop(src: str | Path | Sequence[str | Path],
                     dst: str | Path | None = None) -> list[Path]:
    """Convert neuraloperator ``.pt`` files to ``.npz`` files with the same keys; returns
    the paths written.

    ``src``: a ``.pt`` file, a directory (every ``{darcy,burgers}_{train,test}_<R>.pt``
    in it) or a list of these. ``dst``: ``None`` writes ``name.npz`` next to each
    ``name.pt``; a directory (created if missing) receives them all; a path ending in
    ``.npz`` names the output of a single source file. Needs PyTorch
    (``pip install nbgrad[torch]``); each file is loaded once, with
    ``weights_only=True``.
    """
    items = [src] if isinstance(src, str | os.PathLike) else list(src)
    if not items:
        raise ValueError(f"{_FN}: src is empty")
    sources = [p for item in items for p in _sources(Path(item).expanduser())]
    out_file = out_dir = None
    if dst is not None:
        dst = Path(dst).expanduser()
        if dst.suffix == ".npz":
            if len(sources) != 1:
                raise ValueError(f"{_FN}: dst {dst} names one .npz file but src gives "
                                 f"{len(sources)} files; pass a directory")
            out_file = dst
        else:
            out_dir = dst
    torch = _import_torch()
    written = []
    for path in sources:
        arrays = _arrays(torch, path)
        target = out_file or (out_dir or path.parent) / (path.stem + ".npz")
        _write(target, arrays)
        written.append(target)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: ``python -m nbgrad.datasets.convert SRC... [--out DIR]``."""
    parser = argparse.ArgumentParser(
        prog="python -m nbgrad.datasets.convert",
        description="Convert neuraloperator's .pt data files (darcy_train_16.pt, ...) to "
                    ".npz files that nbgrad.datasets.load_darcy_flow and load_burgers "
                    "read. Needs PyTorch (pip install nbgrad[torch]).")
    parser.add_argument("src", nargs="+", help=".pt files or directories holding them")
    parser.add_argument("--out", default=None,
                        help="directory for the .npz files (default: next to each .pt)")
    args = parser.parse_args(argv)
    try:
        written = convert_neuralop(args.src, args.out)
    except (ImportError, OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
