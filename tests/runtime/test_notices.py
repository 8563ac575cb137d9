"""The compile notice (nbgrad/runtime/notices.py): progress on a terminal (in place) and
in a log (a line every few seconds), driven by fake compile events and a fake clock, and
by a real compile."""

from __future__ import annotations

import io
import time
from types import SimpleNamespace

import numpy as np
from numba import njit
from numba.core import event

from nbgrad.runtime import notices
from nbgrad.runtime.notices import _Notice

HINT = ("(first use, cached afterwards; `python -m nbgrad warmup` compiles ahead of "
        "time)")


class Stream(io.StringIO):
    def __init__(self, terminal: bool) -> None:
        super().__init__()
        self.terminal = terminal

    def isatty(self) -> bool:
        return self.terminal


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def compile_event(kernel: str) -> SimpleNamespace:
    module, name = kernel.rsplit(".", 1)
    fn = SimpleNamespace(__module__=module, __qualname__=name)
    return SimpleNamespace(_data={"dispatcher": SimpleNamespace(py_func=fn)})


def make_notice(terminal: bool, seconds: float = 2.0) -> tuple[_Notice, Stream, Clock]:
    stream, clock = Stream(terminal), Clock()
    return _Notice(clock, stream, seconds, background=False), stream, clock


def compile_at(notice: _Notice, clock: Clock, kernel: str, start: float, end: float,
               ticks: list[float] = ()) -> None:
    """A fake outermost compile of ``kernel`` from ``start`` to ``end``, with a nested
    one, and the ticker's ticks at ``ticks`` while it runs."""
    clock.now = start
    notice.on_start(compile_event(kernel))
    notice.on_start(compile_event("nbgrad.kernels.helpers.inner"))
    for tick in ticks:
        clock.now = tick
        notice.tick()
    notice.on_end(compile_event("nbgrad.kernels.helpers.inner"))
    clock.now = end
    notice.on_end(compile_event(kernel))


def test_a_log_hears_from_a_long_compile_every_five_seconds_and_at_its_end():
    notice, stream, clock = make_notice(terminal=False)
    compile_at(notice, clock, "nbgrad.kernels.fake.first", 0.0, 3.0, ticks=[1.0, 2.0])
    assert stream.getvalue() == f"nbgrad: compiling fake kernels {HINT}\n"
    compile_at(notice, clock, "nbgrad.kernels.fake.second", 3.1, 12.0,
               ticks=[5.0, 6.9, 7.0, 11.0])
    clock.now = 12.4
    assert notice.tick()  # a pause shorter than QUIET_SECONDS: the op goes on, 5 s on
    clock.now = 12.5
    assert not notice.tick()
    assert stream.getvalue().splitlines() == [
        f"nbgrad: compiling fake kernels {HINT}",
        "nbgrad: fake: 1 kernel compiled, 7.0 s, compiling fake.second",
        "nbgrad: fake: 2 kernels compiled, 12.0 s",
        "nbgrad: compiled fake in 12.0 s, 2 kernels"]


def test_a_terminal_sees_the_progress_redrawn_in_place():
    notice, stream, clock = make_notice(terminal=True)
    compile_at(notice, clock, "nbgrad.kernels.fake.first", 0.0, 2.2, ticks=[2.0, 2.2])
    compile_at(notice, clock, "nbgrad.kernels.fake.second", 2.3, 3.0, ticks=[2.4, 2.5])
    clock.now = 3.5
    notice.tick()
    first = "nbgrad: fake: 0 kernels compiled, 2.0 s, compiling fake.first"
    second = "nbgrad: fake: 1 kernel compiled, 2.5 s, compiling fake.second"
    last = "nbgrad: compiled fake in 3.0 s, 2 kernels"
    assert stream.getvalue() == (f"nbgrad: compiling fake kernels {HINT}\n\r{first}"
                                 f"\r{second.ljust(len(first))}"
                                 f"\r{last.ljust(len(second))}\n")


def test_a_short_compile_or_a_notice_turned_off_prints_nothing():
    for seconds, end in ((2.0, 1.9), (-1.0, 30.0)):
        notice, stream, clock = make_notice(terminal=False, seconds=seconds)
        compile_at(notice, clock, "nbgrad.kernels.fake.quick", 0.0, end,
                   ticks=[1.0, 1.5, end])
        clock.now = end + 1
        notice.tick()
        assert stream.getvalue() == ""


def test_another_op_ends_the_compile_of_the_one_before():
    notice, stream, clock = make_notice(terminal=False, seconds=0.0)
    compile_at(notice, clock, "nbgrad.kernels.one.k", 0.0, 1.0, ticks=[0.5])
    compile_at(notice, clock, "nbgrad.kernels.two.k", 1.1, 1.5, ticks=[1.2])
    notice.close()
    assert stream.getvalue().splitlines() == [
        f"nbgrad: compiling one kernels {HINT}", "nbgrad: compiled one in 1.0 s, 1 kernel",
        f"nbgrad: compiling two kernels {HINT}", "nbgrad: compiled two in 0.4 s, 1 kernel"]


def test_user_kernels_are_not_announced():
    notice, stream, clock = make_notice(terminal=False, seconds=0.0)
    compile_at(notice, clock, "mine.kernel", 0.0, 10.0, ticks=[5.0])
    notice.close()
    assert stream.getvalue() == "" and notice.current is None


class Broken(io.StringIO):
    def isatty(self) -> bool:
        raise OSError("closed")

    def write(self, text: str) -> int:
        raise OSError("closed")


def test_a_broken_stream_or_dispatcher_never_reaches_the_compile():
    notice = _Notice(Clock(), Broken(), 0.0, background=False)
    notice.on_start(SimpleNamespace(_data={"dispatcher": object()}))
    notice.on_end(SimpleNamespace(_data={}))
    notice.on_start(compile_event("nbgrad.kernels.fake.k"))
    notice.on_end(compile_event("nbgrad.kernels.fake.k"))
    notice._tick_until_done()  # the ticker thread's loop: ends, does not raise
    assert notice.ticker is None


def test_the_ticker_thread_shows_a_real_compile_and_stops(monkeypatch):
    """A kernel compiled for the first time (a new function in nbgrad's kernel namespace)
    under a notice with no delay and a fast ticker: the ticker thread announces it and
    ends it after the quiet time."""
    monkeypatch.setattr(notices, "QUIET_SECONDS", 0.05)
    namespace = {"__name__": "nbgrad.kernels.notice_probe"}
    exec("def probe(a):\n    return a.sum() * 3\n", namespace)
    kernel = njit(namespace["probe"])
    stream = Stream(terminal=False)
    notice = _Notice(time.monotonic, stream, 0.0)
    with event.install_listener("numba:compile", notice):
        assert kernel(np.ones(4)) == 12.0
    deadline = time.monotonic() + 10
    while notice.current is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    lines = stream.getvalue().splitlines()
    assert lines[0] == f"nbgrad: compiling notice_probe kernels {HINT}"
    assert lines[-1].startswith("nbgrad: compiled notice_probe in ")
    assert lines[-1].endswith(" s, 1 kernel")
