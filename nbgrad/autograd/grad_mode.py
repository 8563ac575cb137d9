"""Grad mode: whether ops record graph nodes. Per thread, as in PyTorch: a ``no_grad``
block in one thread leaves the graphs other threads are building intact."""

from __future__ import annotations

import functools
import threading
from typing import Any


class _ThreadState(threading.local):
    enabled = True  # a class default: every thread starts with grad mode on


state = _ThreadState()


def is_grad_enabled() -> bool:
    """True unless the calling thread is inside ``no_grad`` (or ``set_grad_enabled(False)``)."""
    return state.enabled


class ModeSwitch:
    """Context manager (and decorator) that sets ``state.enabled`` to ``mode`` for its
    block, restoring the previous value on exit. Subclasses name the ``state``."""

    state: Any

    def __init__(self, mode: bool) -> None:
        self.mode = bool(mode)

    def __enter__(self) -> None:
        self._previous = self.state.enabled
        self.state.enabled = self.mode

    def __exit__(self, *exc) -> None:
        self.state.enabled = self._previous

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            previous = self.state.enabled
            self.state.enabled = self.mode
            try:
                return fn(*args, **kwargs)
            finally:
                self.state.enabled = previous
        return wrapper


class set_grad_enabled(ModeSwitch):
    """Turn graph recording on or off in this thread (context manager or decorator)."""

    state = state


class no_grad(set_grad_enabled):
    """Ops inside record no graph (their results do not require grad)."""

    def __init__(self) -> None:
        super().__init__(False)


class enable_grad(set_grad_enabled):
    """Ops inside record a graph even within an enclosing ``no_grad``."""

    def __init__(self) -> None:
        super().__init__(True)
