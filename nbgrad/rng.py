"""nbgrad's default random generator: what layers' initialisation, ``nn.init`` and
``dropout`` draw from when not given a ``generator=``. It starts from seed 0, so a fresh
process is reproducible; ``nb.manual_seed(s)`` reseeds it."""

from __future__ import annotations

import numpy as np

_default = np.random.default_rng(0)


def manual_seed(seed: int) -> np.random.Generator:
    """Reseed the default generator."""
    global _default
    if not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"manual_seed: seed must be a non-negative int, got {seed!r}")
    _default = np.random.default_rng(int(seed))
    return _default


def resolve(generator: np.random.Generator | int | None, op: str) -> np.random.Generator:
    """The generator to draw from: ``generator`` itself, a new one seeded by an int, or
    the default one for None."""
    if generator is None:
        return _default
    if isinstance(generator, np.random.Generator):
        return generator
    if isinstance(generator, int | np.integer):
        return np.random.default_rng(int(generator))
    raise TypeError(f"{op}: generator must be a numpy Generator, an int seed or None, got "
                    f"{type(generator).__name__}")
