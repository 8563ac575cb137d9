"""Data sets that ship with nbgrad or are generated on the user's machine (no download).

The PDE data sets are generated from the equation on first use, deterministically for
a seed, and cached to a file (``NBGRAD_DATA_DIR``, else the user cache directory); see
docs/datasets.md.

Each name's module is imported when the name is first looked up, so that loading the
digits does not import the SciPy solvers behind the PDE data sets (0.1 s)."""

from importlib import import_module
from typing import Any

#: public name -> the submodule that defines it
_HOMES = {"burgers1d": "burgers", "cache_dir": "_cache", "chain_graph": "chain",
          "convert_neuralop": "convert", "load_burgers": "neuralop_files",
          "load_darcy_flow": "neuralop_files", "read_npz": "neuralop_files",
          "poisson_point_cloud": "point_cloud",
          "darcy2d": "darcy", "heat1d": "heat", "heat_trajectories": "heat",
          "load_digits": "digits", "split_digits": "digits"}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{_HOMES[name]}", __name__), name)


def __dir__() -> list[str]:
    return __all__
