"""What a user sees of the compiler: a notice on stderr when a first use waits on a
compile, and ``recording_compiles``, which records every compile and its time
(docs/compiling.md). Every compile of a Numba dispatcher raises Numba's
``numba:compile`` event, which this module listens to."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from numba.core import event

#: A compile that is still running after this many seconds is announced on stderr, once
#: per op and process. ``NBGRAD_COMPILE_NOTICE_SECONDS`` sets it; a negative value turns
#: the notice off.
NOTICE_SECONDS = float(os.environ.get("NBGRAD_COMPILE_NOTICE_SECONDS", "2"))


def _kernel_name(dispatcher: Any) -> str:
    fn = dispatcher.py_func
    return f"{fn.__module__}.{fn.__qualname__}"


def _op_being_run() -> str | None:
    """The registered op whose forward or backward is on the call stack (the ``ctx`` of
    ``Function.forward``/``backward``), if any."""
    frame = sys._getframe(1)
    while frame is not None:
        ctx = frame.f_locals.get("ctx")
        if type(ctx).__name__ == "Context" and type(ctx).__module__ == "nbgrad.function":
            return ctx.name
        frame = frame.f_back
    return None


class _Notice(event.Listener):
    """Starts a timer when an outermost nbgrad compile starts; if the compile is still
    running when it fires, says once which op is waiting for it."""

    def __init__(self) -> None:
        self.depth = 0
        self.timer: threading.Timer | None = None
        self.announced: set[str] = set()

    def on_start(self, ev: event.Event) -> None:
        self.depth += 1
        if self.depth > 1 or NOTICE_SECONDS < 0:
            return
        kernel = _kernel_name(ev._data["dispatcher"])
        if not kernel.startswith("nbgrad."):
            return
        what = _op_being_run() or kernel.rsplit(".", 1)[0].removeprefix("nbgrad.kernels.")
        if what in self.announced:
            return
        self.timer = threading.Timer(NOTICE_SECONDS, self._announce, (what,))
        self.timer.daemon = True
        self.timer.start()

    def on_end(self, ev: event.Event) -> None:
        self.depth -= 1
        if self.depth == 0 and self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _announce(self, what: str) -> None:
        self.announced.add(what)
        print(f"nbgrad: compiling {what} kernels (first use, cached afterwards; "
              f"`python -m nbgrad warmup` compiles ahead of time)", file=sys.stderr,
              flush=True)


class CompileRecorder(event.Listener):
    """Every compile of a Numba dispatcher while installed: ``(kernel, seconds, depth)``
    in the order they finish, ``depth`` 0 for compiles called from Python (their time
    includes the kernels they call, compiled at depth 1, 2, ...)."""

    def __init__(self) -> None:
        self.records: list[tuple[str, float, int]] = []
        self._starts: list[float] = []

    def on_start(self, ev: event.Event) -> None:
        self._starts.append(time.perf_counter())

    def on_end(self, ev: event.Event) -> None:
        seconds = time.perf_counter() - self._starts.pop()
        self.records.append((_kernel_name(ev._data["dispatcher"]), seconds,
                             len(self._starts)))

    def total(self) -> float:
        """Seconds spent compiling (outermost compiles)."""
        return sum(seconds for _, seconds, depth in self.records if depth == 0)


@contextlib.contextmanager
def recording_compiles() -> Iterator[CompileRecorder]:
    """``with recording_compiles() as rec: ...``: the compiles inside, in ``rec.records``."""
    recorder = CompileRecorder()
    with event.install_listener("numba:compile", recorder):
        yield recorder


event.register("numba:compile", _Notice())
