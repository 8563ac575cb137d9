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


def seed_and_cache(fn: str, seed_value: Any, cache: Any) -> tuple[int, bool]:
    """The ``seed`` and ``cache`` arguments every generated data set takes."""
    return seed(fn, seed_value), flag(fn, "cache", cache)


def viscosity_and_time(fn: str, nu: Any, t: Any) -> tuple[float, float]:
    """``nu`` (> 0), the viscosity or diffusivity, and ``t`` (>= 0), the final time, of
    an evolution equation."""
    return real(fn, "nu", nu, positive=True), real(fn, "t", t, nonnegative=True)


def flag(fn: str, name: str, value: Any) -> bool:
    """A plain bool (``cache=``)."""
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"{fn}: {name} must be True or False, got {value!r}")
    return bool(value)


def float_dtype(fn: str, value: Any) -> np.dtype:
    """``value`` as a floating-point NumPy dtype. The data sets hold real values (images
    scaled to [0, 1], PDE solutions) that an integer, bool or complex dtype would
    truncate or misrepresent, so anything else is a TypeError naming ``fn`` and the
    dtype (``None`` too: NumPy would read it as float64, not the data set's default)."""
    try:
        dtype = None if value is None else np.dtype(value)
    except TypeError:
        dtype = None
    if dtype is None or dtype.kind != "f":
        shown = dtype if dtype is not None else repr(value)
        raise TypeError(f"{fn}: dtype must be a floating-point dtype (float32 or float64): "
                        f"the data are real numbers, which dtype {shown} cannot hold")
    return dtype
