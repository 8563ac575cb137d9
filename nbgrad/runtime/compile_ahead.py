"""The compile helper's side in this process: a count of nbgrad's compiles and
``BackwardAhead``, which hands an op's first-use calls, and a new optimiser's first step,
to a helper process that compiles their backward and step kernels, and at the first
compile of a float dtype the C functions that nearly every model calls, such as the GEMM
(docs/compiling.md#the-backward-compiled-ahead; the helper's own loop is
``nbgrad.compiling._compile_backwards``). The core (``Function.apply``, the autograd engine,
``Optimizer``) reaches it through one object, ``compile_hook``; like the rest of
``runtime`` it imports nothing of nbgrad above it."""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import queue
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

from numba.core import event, types

from . import startup


def default_jobs() -> int:
    """Worker processes by default: one per core this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


class CompileCount(event.Listener):
    """``started``: how many outermost compiles of nbgrad kernels have begun;
    ``first_of_dtype(name)`` is called when the first of them on arrays of a float dtype
    begins (``BackwardAhead.submit_early``)."""

    def __init__(self) -> None:
        self.depth = 0
        self.started = 0
        self.dtypes_seen: set[str] = set()
        self.first_of_dtype: Callable[[str], None] = lambda name: None

    def on_start(self, ev: event.Event) -> None:
        self.depth += 1
        # a function made by exec() without a __name__ in its globals has no module
        module = ev.data["dispatcher"].py_func.__module__ or ""
        if self.depth == 1 and module.startswith("nbgrad."):
            self.started += 1
            for name in _float_dtypes(ev.data["args"]) - self.dtypes_seen:
                self.dtypes_seen.add(name)
                self.first_of_dtype(name)

    def on_end(self, ev: event.Event) -> None:
        self.depth -= 1


def _float_dtypes(arg_types: tuple) -> set[str]:
    """The names of the float dtypes of the arrays among a compile's argument types (an
    array, or a list or tuple of arrays)."""
    found = set()
    for t in arg_types:
        t = getattr(t, "dtype", t) if isinstance(t, (types.List, types.UniTuple)) else t
        if isinstance(t, types.Array) and t.dtype in (types.float32, types.float64):
            found.add(str(t.dtype))
    return found


compiles = CompileCount()
event.register("numba:compile", compiles)


#: A call whose pickled arguments exceed this many bytes is not sent to the helper.
AHEAD_MAX_BYTES = 64 << 20


class BackwardAhead:
    """A helper process that compiles the kernels of an op's backward while this process
    goes on with the forward pass (docs/compiling.md#the-backward-compiled-ahead).

    ``Function.apply`` hands it every call whose forward compiled a kernel and that is
    recorded for a gradient, and every later call of an op while the helper is still on
    an earlier one (a layer whose forward reuses the kernel another layer compiled may
    need backward kernels that one did not): the op's name, its inputs and parameters.
    The helper runs the same call forward (its kernels by then in the disk cache) and
    backward with an all-ones output gradient, so it compiles exactly the backward kernels
    these shapes select, into the shared cache, on the other core. When this process gets to that
    backward, Numba finds the kernels in the cache (or waits for the helper, if it is
    compiling that very call; ``join``). An optimiser whose construction compiled a
    kernel hands it a step on copies of its parameters in the same way (``submit_step``).
    The first compile of an nbgrad kernel on arrays of a float dtype also hands it the
    C functions registered with ``compile_early`` (the GEMM's block, which nearly every
    model's first layer compiles): the helper compiles them into the cache while this
    process compiles the kernel that will call them, and ``wait_early`` makes this
    process load them from there instead of compiling them a second time.
    The helper is a fresh interpreter (``python -c``, so the user's script is not run
    again), started on the first call and killed when this process exits. Off when
    ``NBGRAD_COMPILE_AHEAD=0``, on a single core, in warm-up and check workers, and under
    ``nbgrad.distributed`` (its ranks fill the cores)."""

    def __init__(self, compiles: CompileCount) -> None:
        self.compiles = compiles  # Function.apply and Optimizer read compiles.started
        self.enabled = (os.environ.get("NBGRAD_COMPILE_AHEAD", "1") != "0"
                        and default_jobs() > 1)
        self.process: subprocess.Popen | None = None
        self.outbox: queue.SimpleQueue = queue.SimpleQueue()
        self.finished = threading.Condition()
        self.sent = 0
        self.done = 0
        self.ended = False
        self.last_call: dict[str, int] = {}  # op name -> the ticket of its latest call sent
        self.early: list[tuple[str, str]] = []  # (module, name) of compile_early functions
        self.early_sent: dict[str, int] = {}  # dtype name -> ticket of its early call
        compiles.first_of_dtype = self.submit_early

    def submit(self, name: str, arrays: list, needs: tuple[bool, ...], params: dict) -> int:
        """Send one recorded call of the op registered as ``name`` in nbgrad's modules to
        the helper and return its ticket (1, 2, ... in the order sent); 0 for a call not
        sent: helper off, arguments unpicklable or larger than ``AHEAD_MAX_BYTES``."""
        ticket = self._send(("op", name, arrays, needs, params))
        if ticket:
            self.last_call[name] = ticket
        return ticket

    def submit_checks(self, names: list[str]) -> dict[str, int]:
        """Send a gradcheck of each registered op of ``names`` through its samples
        (``nbgrad.testing.check_registered``), one call per op, the last op first: the
        helper compiles their kernels into the cache while this process, which checks
        them first to last, goes on, so the two meet in the middle. Returns each op's
        ticket, for ``join`` before this process checks that op."""
        return {name: self._send(("check", name)) for name in reversed(names)}

    def compile_early(self, module: str, name: str) -> None:
        """Register the C function ``name`` of ``module`` (``runtime.jit.compiled_once``)
        for the helper to compile at the first compile of each float dtype."""
        self.early.append((module, name))

    def submit_early(self, dtype: str) -> None:
        """Send the early C functions for ``dtype`` ('float32' or 'float64')."""
        if self.early:
            self.early_sent[dtype] = self._send(("early", self.early, dtype))

    def wait_early(self, dtype: str) -> None:
        """Before this process compiles an early C function for ``dtype``: wait for the
        helper's call for that dtype, if one was sent and has not finished, so the
        function then loads from the cache."""
        self._wait_for(self.early_sent.pop(dtype, 0), queued_too=True)

    def busy_with(self, name: str) -> bool:
        """Whether the helper has not finished the latest call of op ``name`` sent to it."""
        return self.done < self.last_call.get(name, 0)

    def submit_step(self, optimizer: str, groups: list[tuple[list, dict]]) -> int:
        """Send a step of the optimiser ``optimizer`` (a class of ``nbgrad.optim``) with
        ``groups``, one (parameter arrays, options) per param group; its ticket as for
        ``submit``."""
        return self._send(("step", optimizer, groups))

    def _send(self, call: tuple) -> int:
        if not self.enabled:
            return 0
        try:
            payload = pickle.dumps(call, pickle.HIGHEST_PROTOCOL)
        except Exception:  # an argument that does not pickle: that call compiles here
            return 0
        if len(payload) > AHEAD_MAX_BYTES:
            return 0
        if self.process is None:
            self._start()
        self.sent += 1
        self.outbox.put(payload)
        return self.sent

    def join(self, ticket: int) -> None:
        """Before the backward (or step) of call ``ticket``: if the helper is working on
        that very call, wait for it, since it compiles what this process would (a call
        still queued behind others compiles here instead). Ticket 0, a call not sent,
        returns at once."""
        self._wait_for(ticket, queued_too=False)

    def _wait_for(self, ticket: int, queued_too: bool) -> None:
        """Wait until the helper has finished call ``ticket`` (or ended): if it is on that
        call, or, with ``queued_too``, if the call is still queued. Ticket 0 returns."""
        if not ticket:
            return
        with self.finished:
            if queued_too or self.done == ticket - 1:
                self.finished.wait_for(lambda: self.done >= ticket or self.ended)

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the helper to finish every call sent so far;
        whether it did."""
        with self.finished:
            return self.finished.wait_for(lambda: self.done >= self.sent, timeout)

    def _start(self) -> None:
        package_root = os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__))))
        path = [package_root, *filter(None, [os.environ.get("PYTHONPATH")])]
        env = dict(os.environ, NBGRAD_COMPILE_AHEAD="0", NBGRAD_COMPILE_NOTICE_SECONDS="-1",
                   NBGRAD_GEMM_SEARCH="0",
                   PYTHONPATH=os.pathsep.join(path), **startup.numba_target_env())
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from nbgrad.compiling import _compile_backwards; "
                                   "_compile_backwards()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        atexit.register(self.process.kill)
        # the pipe is written and read by threads: a helper busy compiling never blocks
        # this process
        threading.Thread(target=self._write, args=(self.process.stdin,), daemon=True).start()
        threading.Thread(target=self._read, args=(self.process.stdout,), daemon=True).start()

    def _write(self, pipe: Any) -> None:
        with contextlib.suppress(OSError):  # the helper ended: the calls compile here
            while True:
                payload = self.outbox.get()
                pipe.write(len(payload).to_bytes(8, "little") + payload)
                pipe.flush()

    def _read(self, pipe: Any) -> None:
        for _ in pipe:
            with self.finished:
                self.done += 1
                self.finished.notify_all()
        with self.finished:  # the helper ended (this process is exiting, or it failed)
            self.enabled, self.ended = False, True
            self.finished.notify_all()


#: The helper of this process, and the compile count it holds: the core's one hook into
#: the compiler.
compile_hook = BackwardAhead(compiles)
