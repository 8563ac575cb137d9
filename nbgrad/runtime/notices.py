"""What a user sees of the compiler: a notice on stderr when a first use waits on a
compile, and ``recording_compiles``, which records every compile and its time
(docs/compiling.md). Every compile of a Numba dispatcher raises Numba's
``numba:compile`` event, which this module listens to."""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from numba.core import event

#: A compile that is still running after this many seconds is announced on stderr, with
#: its progress until it ends. ``NBGRAD_COMPILE_NOTICE_SECONDS`` sets it; a negative value
#: turns the notice off.
NOTICE_SECONDS = float(os.environ.get("NBGRAD_COMPILE_NOTICE_SECONDS", "2"))

#: How often the progress is redrawn in place on a terminal, and written as a new line
#: in a log (stderr not a terminal), where a line every few seconds is enough to show
#: that the program is alive without flooding the file.
TERMINAL_REFRESH_SECONDS = 0.5
LOG_REFRESH_SECONDS = 5.0

#: An op's compile is over once none of its kernels has compiled for this long: an op
#: compiles its kernels one after the other with its own Python code in between, and
#: the user wants one notice per op, not one per kernel.
QUIET_SECONDS = 0.5

_TICK_SECONDS = 0.1
_HINT = "(first use, cached afterwards; `python -m nbgrad warmup` compiles ahead of time)"


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


def _short(kernel: str) -> str:
    return kernel.removeprefix("nbgrad.kernels.").removeprefix("nbgrad.")


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


@dataclass
class _OpCompile:
    """The compile of one op (or kernel module): its outermost kernel compiles in a row."""

    what: str
    started: float
    kernel: str  # the outermost kernel compiling now, or the last one
    kernels_done: int = 0
    running: bool = True  # an outermost kernel is compiling now
    last_end: float = 0.0
    shown: bool = False
    last_shown: float = -math.inf

    def elapsed(self, now: float) -> float:
        return (now if self.running else self.last_end) - self.started

    def status(self, now: float) -> str:
        line = (f"nbgrad: {self.what}: {_plural(self.kernels_done, 'kernel')} compiled, "
                f"{self.elapsed(now):.1f} s")
        return f"{line}, compiling {_short(self.kernel)}" if self.running else line

    def summary(self, now: float) -> str:
        return (f"nbgrad: compiled {self.what} in {self.elapsed(now):.1f} s, "
                f"{_plural(self.kernels_done, 'kernel')}")


class _Notice(event.Listener):
    """Follows the outermost compiles of nbgrad's kernels and, once an op's compile has
    run for ``NOTICE_SECONDS``, shows on stderr which op compiles, how many kernels are
    done and for how long, until a last line says what it took. A ticker thread does the
    showing; Numba's events (on any thread) only record, under ``lock``. Nothing here may
    raise into the compile it listens to."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, stream: Any = None,
                 seconds: float | None = None, background: bool = True) -> None:
        self.clock = clock
        self.stream = stream  # None: sys.stderr when printing, wherever it points then
        self.fixed_seconds = seconds
        self.background = background  # False: the caller calls tick() (tests)
        self._reset()

    def _reset(self) -> None:
        self.lock = threading.RLock()
        self.local = threading.local()
        self.current: _OpCompile | None = None
        self.announced: set[str] = set()
        self.ticker: threading.Thread | None = None
        self.line_width = 0

    @property
    def seconds(self) -> float:
        return NOTICE_SECONDS if self.fixed_seconds is None else self.fixed_seconds

    def on_start(self, ev: event.Event) -> None:
        self.local.depth = getattr(self.local, "depth", 0) + 1
        if self.local.depth == 1:
            self.local.followed = False
            if self.seconds >= 0:
                _quietly(self._kernel_started, ev)

    def on_end(self, ev: event.Event) -> None:
        self.local.depth = max(getattr(self.local, "depth", 0) - 1, 0)
        if self.local.depth == 0 and getattr(self.local, "followed", False):
            self.local.followed = False
            _quietly(self._kernel_finished)

    def _kernel_started(self, ev: event.Event) -> None:
        kernel = _kernel_name(ev._data["dispatcher"])
        if not kernel.startswith("nbgrad."):
            return
        what = _op_being_run() or kernel.rsplit(".", 1)[0].removeprefix("nbgrad.kernels.")
        now = self.clock()
        with self.lock:
            if self.current is not None and self.current.what != what:
                self._finish(now)
            if self.current is None:
                self.current = _OpCompile(what, now, kernel)
                self._start_ticker()
            self.current.kernel, self.current.running = kernel, True
        self.local.followed = True

    def _kernel_finished(self) -> None:
        with self.lock:
            if self.current is not None:
                self.current.kernels_done += 1
                self.current.running = False
                self.current.last_end = self.clock()

    def _start_ticker(self) -> None:
        if self.background and self.ticker is None:
            self.ticker = threading.Thread(target=self._tick_until_done, daemon=True,
                                           name="nbgrad-compile-notice")
            self.ticker.start()

    def _tick_until_done(self) -> None:
        while _quietly(self.tick, default=False):
            time.sleep(_TICK_SECONDS)

    def tick(self) -> bool:
        """Show the op compiling now if it is due, or end it once it is quiet; False (and
        the ticker thread stops) when no op is compiling."""
        now = self.clock()
        with self.lock:
            op = self.current
            if op is not None and not op.running and now - op.last_end >= QUIET_SECONDS:
                self._finish(now)
                op = None
            if op is None:
                self.ticker = None
                return False
            refresh = TERMINAL_REFRESH_SECONDS if self._on_terminal() else LOG_REFRESH_SECONDS
            if now - op.started >= self.seconds and now - op.last_shown >= refresh:
                self._show(op, now)
            return True

    def _show(self, op: _OpCompile, now: float) -> None:
        first = op.what not in self.announced
        if first:
            self.announced.add(op.what)
            self._write_line(f"nbgrad: compiling {op.what} kernels {_HINT}")
        if self._on_terminal():
            self._write_in_place(op.status(now))
        elif not first:  # in a log the first line says enough for the first seconds
            self._write_line(op.status(now))
        op.shown, op.last_shown = True, now

    def _finish(self, now: float) -> None:
        op, self.current = self.current, None
        if op is not None and op.shown:
            self._write_line(op.summary(now))

    def close(self) -> None:
        """End the op compiling now (at exit: the ticker thread, a daemon, dies with the
        interpreter and would leave a shown compile without its last line)."""
        with self.lock:
            self._finish(self.clock())

    def _on_terminal(self) -> bool:
        stream = self.stream or sys.stderr
        return bool(_quietly(stream.isatty, default=False))

    def _write_in_place(self, line: str) -> None:
        """``line`` over the one written before (``\\r``), blanking what it leaves over."""
        self._write("\r" + line.ljust(self.line_width))
        self.line_width = len(line)

    def _write_line(self, line: str) -> None:
        if self.line_width:  # finish the line drawn in place first
            self._write_in_place(line)
            self.line_width = 0
            self._write("\n")
        else:
            self._write(line + "\n")

    def _write(self, text: str) -> None:
        stream = self.stream or sys.stderr
        stream.write(text)
        stream.flush()


def _quietly(call: Callable[..., Any], *args: Any, default: Any = None) -> Any:
    """``call(*args)``, or ``default`` if it raises: a notice that fails (a closed stderr,
    a dispatcher without ``py_func``) must not take the user's compile down with it."""
    try:
        return call(*args)
    except Exception:
        return default


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


#: The notice of this process, registered with Numba; a child process made by fork starts
#: with none of its parent's compile in progress (and no ticker thread to end it).
NOTICE = _Notice()
os.register_at_fork(after_in_child=NOTICE._reset)
atexit.register(_quietly, NOTICE.close)
event.register("numba:compile", NOTICE)
