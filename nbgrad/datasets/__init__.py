"""Data sets that ship with nbgrad or are generated on the user's machine (no download).

The PDE data sets are generated from the equation on first use, deterministically for
a seed, and cached to a file (``NBGRAD_DATA_DIR``, else the user cache directory); see
docs/datasets.md."""

from ._cache import cache_dir
from .burgers import burgers1d
from .chain import chain_graph
from .darcy import darcy2d
from .digits import load_digits, split_digits
from .heat import heat1d, heat_trajectories

__all__ = ["burgers1d", "cache_dir", "chain_graph", "darcy2d", "heat1d",
           "heat_trajectories", "load_digits", "split_digits"]
