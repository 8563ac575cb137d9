"""Grad mode: whether ops record graph nodes. Per thread, as in PyTorch: a ``no_grad``
block in one thread leaves the graphs other threads are building intact."""

from __future__ import annotations

import functools
import threading


class _ThreadState(threading.local):
    enabled = True  # a class default: every thread starts with grad mode on


state = _ThreadState()


def is_grad_enabled() -> bool:
    """True unless the calling thread is inside ``no_grad`` (or ``set_grad_enabled(False)``)."""
    return state.enabled


class set_grad_enabled:
    """Context manager (and decorator) that turns graph recording on or off in this
    thread, restoring the previous mode on exit."""

    def __init__(self, mode: bool) -> None:
        self.mode = bool(mode)

    def __enter__(self) -> None:
        self._previous = is_grad_enabled()
        state.enabled = self.mode

    def __exit__(self, *exc) -> None:
        state.enabled = self._previous

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with set_grad_enabled(self.mode):
                return fn(*args, **kwargs)
        return wrapper


class no_grad(set_grad_enabled):
    """Ops inside record no graph (their results do not require grad)."""

    def __init__(self) -> None:
        super().__init__(False)


class enable_grad(set_grad_enabled):
    """Ops inside record a graph even within an enclosing ``no_grad``."""

    def __init__(self) -> None:
        super().__init__(True)
