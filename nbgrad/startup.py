"""What ``import nbgrad`` does besides defining names: it readies Numba while Python's
cyclic garbage collector waits (docs/compiling.md#what-a-warm-start-costs)."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic collection inside the block; afterwards every tracked object is moved to
    the oldest generation and the collector's on/off state is restored.

    An import builds some 140,000 long-lived objects (modules, Numba's typing tables) and
    almost no garbage, yet each collection it triggers scans all of them, and once the
    collector is back on, the young generations would scan them twice more on their way
    to the oldest. ``freeze`` then ``unfreeze`` is that move, done without a scan; the
    user's own young objects move along and are collected with the oldest generation."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.unfreeze()
        if was_enabled:
            gc.enable()


def ready_numba() -> None:
    """Numba's one-time set-up, which its first kernel call would otherwise run: loading
    the ``numba_extensions`` entry points (rocket-fft's among them) and filling the typing
    and lowering registries that loading a cached kernel needs."""
    from numba.core import entrypoints
    from numba.core.registry import cpu_target

    entrypoints.init_all()
    cpu_target.typing_context.refresh()
    cpu_target.target_context.refresh()
