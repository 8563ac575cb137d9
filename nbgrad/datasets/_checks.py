"""The argument checks of the generated data sets: one spelling each, every error naming
the function and the argument."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def integer(fn: str, name: str, value: Any, minimum: int) -> int:
    """``value`` as an int >= ``minimum``; ValueError naming ``fn`` and ``name``."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        raise ValueError(f"{fn}: {name} must be an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise ValueError(f"{fn}: {name} must be an integer >= {minimum}, got {value}")
    return int(value)


def real(fn: str, name: str, value: Any, positive: bool = False,
         nonnegative: bool = False) -> float:
    """``value`` as a finite float (and > 0 or >= 0 when asked); ValueError naming
    ``fn`` and ``name``."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.number):
        raise ValueError(f"{fn}: {name} must be a real number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{fn}: {name} must be finite, got {value}")
    if positive and value <= 0.0:
        raise ValueError(f"{fn}: {name} must be > 0, got {value}")
    if nonnegative and value < 0.0:
        raise ValueError(f"{fn}: {name} must be >= 0, got {value}")
    return value


def seed(fn: str, value: Any) -> int:
    """A seed for ``numpy.random.default_rng``: a non-negative integer."""
    return integer(fn, "seed", value, 0)


def flag(fn: str, name: str, value: Any) -> bool:
    """A plain bool (``cache=``)."""
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"{fn}: {name} must be True or False, got {value!r}")
    return bool(value)
