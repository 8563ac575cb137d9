"""The reference library's (neuraloperator's) published Darcy-flow and Burgers files,
read from ``.npz`` copies: ``load_darcy_flow`` and ``load_burgers``.

neuraloperator ships ``darcy_train_16.pt``, ``darcy_test_16.pt``, ``darcy_test_32.pt``
(and, on its Zenodo record 10994262, ``darcy_{64,128,421}``) and
``burgers_train_16.pt``, ``burgers_test_16.pt``: PyTorch pickles of dicts of tensors.
Unpickling runs code from the file, so these loaders never do it: convert each file
once to an ``.npz`` with the same keys (``nbgrad.datasets.convert``, which needs PyTorch:
``pip install nbgrad[torch]``) and the loaders read only the ``.npz`` files
(``np.load(..., allow_pickle=False)``). No PyTorch is needed to load.

The files hold (as published):

- ``darcy_{split}_{R}.npz``: ``x`` [n, R, R] bool (the permeability's two-valued
  indicator), ``y`` [n, R, R] float32 (the pressure);
- ``burgers_{split}_{R}.npz``: ``x`` [n, R] float64 (the initial condition), ``y``
  [n, T, R] float64 (the solution at T times, ``y[:, 0] == x``), ``visc`` [1, 1].

The loaders follow neuraloperator's ``PTDataset``: the first ``n`` samples, every
``rate``-th point along each data axis (``x[:n, ::r1, ::r2]``), a channel axis inserted
at ``channel_dim`` (``[n, 1, H, W]``), ``x`` as float32. The output encoders it fits
(``encode_output``) are left to the caller: ``nbgrad.data.UnitGaussianNormalizer``
fitted on the training ``y``.
"""

from __future__ import annotations

import numbers
import re
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..data.dataset import TensorDataset
from . import _checks

#: (dataset name, split, resolution) of every file neuraloperator publishes
FILE_PATTERN = re.compile(r"^(darcy|burgers)_(train|test)_(\d+)$")

_WHERE = ("neuraloperator's repository ships darcy_train_16.pt, darcy_test_16.pt, "
          "darcy_test_32.pt, burgers_train_16.pt and burgers_test_16.pt in "
          "neuralop/data/datasets/data/; other Darcy resolutions are the darcy_<R>.tgz "
          "archives of Zenodo record 10994262")


def neuralop_file(dataset_name: str, split: str, resolution: int, suffix: str = ".npz"
                  ) -> str:
    """The file name ``{dataset_name}_{split}_{resolution}{suffix}`` of the reference."""
    return f"{dataset_name}_{split}_{resolution}{suffix}"


def read_npz(path: str | Path, fn: str = "read_npz") -> dict[str, np.ndarray]:
    """Every array of the ``.npz`` file ``path``, read without unpickling
    (``allow_pickle=False``: a file holding Python objects is refused, not executed)."""
    path = Path(path)
    if path.is_file() and not zipfile.is_zipfile(path):
        raise ValueError(f"{fn}: {path} is not a readable .npz file (not a zip archive)")
    try:
        with np.load(path, allow_pickle=False) as archive:
            data = {key: archive[key] for key in archive.files}
    except ValueError as err:
        if "pickle" not in str(err):  # a damaged .npy header or member
            raise ValueError(f"{fn}: {path} is not a readable .npz file ({err})") from err
        # NumPy's refusal to unpickle an object array
        raise ValueError(f"{fn}: {path} holds pickled Python objects, which nbgrad does "
                         f"not load ({err}); convert the .pt file with "
                         "nbgrad.datasets.convert_neuralop") from err
    except (OSError, EOFError, zipfile.BadZipFile) as err:
        raise ValueError(f"{fn}: {path} is not a readable .npz file ({err})") from err
    # np.load returns the raw bytes of a zip member that is not .npy: a .pt file
    # (PyTorch's zip format, its pickle in data.pkl) renamed to .npz lands here
    raw = sorted(key for key, value in data.items() if not isinstance(value, np.ndarray))
    if raw:
        kind = ("a PyTorch .pt file" if any(k.endswith("data.pkl") for k in raw)
                else "not an .npz file of arrays")
        raise ValueError(f"{fn}: {path} is {kind} (it holds {', '.join(raw[:3])}); convert "
                         ".pt files with nbgrad.datasets.convert_neuralop")
    return data


def _count(fn: str, name: str, value: Any) -> int:
    return _checks.integer(fn, name, value, 0)


def _rates(fn: str, name: str, rate: Any, ndim: int) -> list[int]:
    """One subsampling stride per data axis: ``None`` or 0 means 1 (the reference's
    convention), an int applies to every axis, a list gives one per axis."""
    if rate is None or (isinstance(rate, numbers.Integral) and not isinstance(rate, bool)
                        and rate == 0):
        return [1] * ndim
    if isinstance(rate, Sequence) and not isinstance(rate, str):
        rates = list(rate)
        if len(rates) != ndim:
            raise ValueError(f"{fn}: {name} must give one rate per data axis ({ndim}), "
                             f"got {rate!r}")
        return [1 if r is None or (isinstance(r, numbers.Integral) and r == 0
                                   and not isinstance(r, bool))
                else _checks.integer(fn, name, r, 1) for r in rates]
    return [_checks.integer(fn, name, rate, 1)] * ndim


def _dtype(fn: str, dtype: Any) -> np.dtype | None:
    return None if dtype is None else _checks.float_dtype(fn, dtype)


def _channel_dim(fn: str, channel_dim: Any, ndim: int) -> int:
    """A position for the new channel axis of an ``ndim``-axis sample array, after the
    sample axis: 1..ndim or -ndim..-1 (``numpy.expand_dims``' counting)."""
    if isinstance(channel_dim, bool) or not isinstance(channel_dim, numbers.Integral) or \
            not (1 <= channel_dim <= ndim or -ndim <= channel_dim <= -1):
        raise ValueError(f"{fn}: channel_dim must be an integer in 1..{ndim} or "
                         f"-{ndim}..-1 (after the sample axis), got {channel_dim!r}")
    return int(channel_dim)


def _locate(fn: str, root: Path, dataset_name: str, names: list[str]) -> list[Path]:
    """The paths of ``names`` under ``root``, or a FileNotFoundError that lists the
    missing ones, and points to the converter when the ``.pt`` files are there."""
    if not root.is_dir():
        raise FileNotFoundError(f"{fn}: the data directory {root} does not exist (expected "
                                f"{', '.join(names)} in it; {_WHERE})")
    missing = [n for n in names if not (root / n).is_file()]
    if not missing:
        return [root / n for n in names]
    pts = [n for n in missing if (root / (n[:-len(".npz")] + ".pt")).is_file()]
    msg = (f"{fn}: missing {', '.join(missing)} in {root} (expected "
           f"{', '.join(names)}).")
    if pts:
        msg += (f" The PyTorch file(s) {', '.join(p[:-4] + '.pt' for p in pts)} are there: "
                f"convert them once with `python -m nbgrad.datasets.convert {root}` or "
                "nbgrad.datasets.convert_neuralop(root) (needs PyTorch: "
                "pip install nbgrad[torch]); nbgrad never unpickles .pt files.")
    else:
        msg += (f" Get the {dataset_name} .pt files ({_WHERE}) and convert them with "
                "`python -m nbgrad.datasets.convert DIR` (pip install nbgrad[torch]).")
    raise FileNotFoundError(msg)


def _field(fn: str, path: Path, data: dict[str, np.ndarray], key: str, ndim: int,
           what: str) -> np.ndarray:
    """``data[key]``, checked to be a real array of ``ndim`` axes with finite values."""
    if key not in data:
        raise ValueError(f"{fn}: {path.name} has no array {key!r} (it holds "
                         f"{sorted(data)}; expected keys 'x' and 'y' as in the reference's "
                         ".pt files)")
    arr = data[key]
    if arr.ndim != ndim:
        raise ValueError(f"{fn}: {path.name}[{key!r}] must be {what}, got shape {arr.shape}")
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{fn}: {path.name}[{key!r}] must hold real numbers, got dtype "
                         f"{arr.dtype}")
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise ValueError(f"{fn}: {path.name}[{key!r}] holds non-finite values")
    return arr


def _take(fn: str, path: Path, arr: np.ndarray, n: int, name: str, rates: list[int],
          channel_dim: int, dtype: np.dtype | None) -> np.ndarray:
    """``arr[:n, ::r1, ::r2, ...]`` with a channel axis at ``channel_dim``, as ``dtype``
    (contiguous, a copy)."""
    if n > arr.shape[0]:
        raise ValueError(f"{fn}: {name}={n} but {path.name} holds {arr.shape[0]} samples")
    out = arr[(slice(0, n),) + tuple(slice(None, None, r) for r in rates)]
    out = np.expand_dims(out, channel_dim)
    return np.array(out, dtype=dtype if dtype is not None else out.dtype, order="C")


def _resolutions(fn: str, name: str, value: Any) -> list[int]:
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, Sequence) or isinstance(value, str) or not value:
        raise ValueError(f"{fn}: {name} must be a non-empty list of resolutions, got "
                         f"{value!r}")
    return [_checks.integer(fn, name, r, 1) for r in value]


def _n_tests(fn: str, n_tests: Any, count: int) -> list[int]:
    """One sample count per test resolution; an int applies to all."""
    if isinstance(n_tests, numbers.Integral) and not isinstance(n_tests, bool):
        return [_count(fn, "n_tests", n_tests)] * count
    if not isinstance(n_tests, Sequence) or isinstance(n_tests, str) or \
            len(n_tests) != count:
        raise ValueError(f"{fn}: n_tests must give one sample count per test resolution "
                         f"({count}), got {n_tests!r}")
    return [_count(fn, "n_tests", n) for n in n_tests]


def _pack(x: np.ndarray, y: np.ndarray, as_arrays: bool) -> Any:
    return (x, y) if as_arrays else TensorDataset(x, y)


def _load(fn: str, root: str | Path, dataset_name: str, n_train: Any, n_tests: Any,
          train_resolution: Any, test_resolutions: Any, x_rates: list[int],
          y_rates: list[int], channel_dim: Any, dtype: Any, as_arrays: Any) -> Any:
    """The shared body of the loaders: the reference's ``PTDataset`` on ``.npz`` files.
    ``x_rates`` and ``y_rates`` are the strides along each data axis of ``x`` and ``y``
    (``y`` may have axes before the spatial ones: Burgers' time axis)."""
    n_train = _count(fn, "n_train", n_train)
    train_res = _checks.integer(fn, "train_resolution", train_resolution, 1)
    test_res = _resolutions(fn, "test_resolutions", test_resolutions)
    counts = _n_tests(fn, n_tests, len(test_res))
    dtype = _dtype(fn, dtype)
    as_arrays = _checks.flag(fn, "as_arrays", as_arrays)
    x_cdim = _channel_dim(fn, channel_dim, len(x_rates) + 1)
    y_cdim = _channel_dim(fn, channel_dim, len(y_rates) + 1)
    names = [neuralop_file(dataset_name, "train", train_res)]
    names += [neuralop_file(dataset_name, "test", r) for r in test_res]
    paths = _locate(fn, Path(root).expanduser(), dataset_name, list(dict.fromkeys(names)))
    by_name = {p.name: p for p in paths}

    def split(name: str, res: int, n: int, count_name: str) -> tuple[np.ndarray, np.ndarray]:
        path = by_name[name]
        data = read_npz(path, fn)
        if dataset_name == "darcy":
            x = _field(fn, path, data, "x", 3, "[n, R, R]")
            y = _field(fn, path, data, "y", 3, "[n, R, R]")
            want_x, want_y = (res, res), (res, res)
        else:
            x = _field(fn, path, data, "x", 2, "[n, R]")
            y = _field(fn, path, data, "y", 3, "[n, T, R]")
            want_x, want_y = (res,), (y.shape[1], res)
        if x.shape[1:] != want_x or y.shape[1:] != want_y or x.shape[0] != y.shape[0]:
            raise ValueError(f"{fn}: {name} must hold x of shape [n, "
                             f"{', '.join(map(str, want_x))}] and y of shape [n, "
                             f"{', '.join(map(str, want_y))}] for resolution {res}, got x "
                             f"{x.shape} and y {y.shape}")
        # the reference casts x to float32 and keeps y's stored dtype
        x_type = dtype if dtype is not None else np.dtype(np.float32)
        xs = _take(fn, path, x, n, count_name, x_rates, x_cdim, x_type)
        ys = _take(fn, path, y, n, count_name, y_rates, y_cdim, dtype)
        return xs, ys

    train = _pack(*split(names[0], train_res, n_train, "n_train"), as_arrays)
    tests = {r: _pack(*split(nm, r, n, "n_tests"), as_arrays)
             for r, n, nm in zip(test_res, counts, names[1:], strict=True)}
    return train, tests


def load_darcy_flow(root: str | Path, n_train: int, n_tests: Sequence[int] | int,
                    test_resolutions: Sequence[int] | int = (16, 32),
                    train_resolution: int = 16,
                    subsampling_rate: int | Sequence[int] | None = None,
                    channel_dim: int = 1, dtype: Any = np.float32,
                    as_arrays: bool = False) -> tuple[Any, dict[int, Any]]:
    """neuraloperator's Darcy-flow files (``load_darcy_flow_small`` / ``DarcyDataset``)
    from ``root/darcy_train_{train_resolution}.npz`` and
    ``root/darcy_test_{R}.npz`` for each ``R`` in ``test_resolutions``.

    Returns ``(train, tests)``: ``train`` a ``TensorDataset(x, y)`` of the first
    ``n_train`` training samples, ``tests[R]`` one of the first ``n_tests[i]`` test
    samples at resolution ``R`` (``n_tests`` an int: the same count for all).
    ``x`` (the permeability's 0/1 indicator) and ``y`` (the pressure) are
    ``[n, 1, H, W]`` with ``H = ceil(R / r1)``, ``W = ceil(R / r2)``: the points
    ``[::r1, ::r2]`` for ``subsampling_rate`` ``r`` (an int for both axes, or
    ``[r1, r2]``; ``None`` or 0: every point), the channel axis at ``channel_dim``.
    Both are ``dtype`` (float32 by default); ``dtype=None`` keeps the reference's casts
    (``x`` float32, ``y`` as stored). ``as_arrays=True`` gives ``(x, y)`` NumPy pairs
    instead of datasets.

    Only ``.npz`` files are read (never a pickle); convert the published ``.pt`` files
    once with ``nbgrad.datasets.convert_neuralop``. A missing file, a file without
    arrays ``x`` and ``y`` of the shapes above, or more samples asked for than a file
    holds raises an error naming the file.
    """
    fn = "load_darcy_flow"
    rates = _rates(fn, "subsampling_rate", subsampling_rate, 2)
    return _load(fn, root, "darcy", n_train, n_tests, train_resolution, test_resolutions,
                 rates, rates, channel_dim, dtype, as_arrays)


def load_burgers(root: str | Path, n_train: int, n_tests: Sequence[int] | int,
                 test_resolutions: Sequence[int] | int = (16,), train_resolution: int = 16,
                 temporal_subsample: int | None = None, spatial_subsample: int | None = None,
                 channel_dim: int = 1, dtype: Any = np.float32,
                 as_arrays: bool = False) -> tuple[Any, dict[int, Any]]:
    """neuraloperator's 1-D Burgers files (``Burgers1dTimeDataset``, viscosity 0.01) from
    ``root/burgers_train_{train_resolution}.npz`` and ``root/burgers_test_{R}.npz``.

    Returns ``(train, tests)`` as ``load_darcy_flow`` does, with ``x`` the initial
    condition ``[n, 1, R']`` and ``y`` the solution ``[n, 1, T', R']`` at ``T``
    equispaced times (the first is ``x``): ``x[:, ::s]`` and ``y[:, ::t, ::s]`` for
    ``spatial_subsample`` ``s`` and ``temporal_subsample`` ``t`` (``None`` or 0: 1).
    Both are ``dtype`` (float32 by default); ``dtype=None`` keeps the reference's casts
    (``x`` float32, ``y`` as stored, float64). The viscosity is the file's ``visc``
    array (``read_npz``).
    """
    fn = "load_burgers"
    s = _rates(fn, "spatial_subsample", spatial_subsample, 1)
    t = _rates(fn, "temporal_subsample", temporal_subsample, 1)
    return _load(fn, root, "burgers", n_train, n_tests, train_resolution, test_resolutions,
                 s, t + s, channel_dim, dtype, as_arrays)
