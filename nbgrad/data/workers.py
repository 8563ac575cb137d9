"""DataLoader worker processes (``num_workers > 0``), with ``torch.utils.data``'s rules.

The main process draws every epoch's order (sampler, generator) exactly as with
``num_workers=0`` and sends batch ``i``'s indices to worker ``i % num_workers``
(round robin, as PyTorch); ``prefetch_factor`` batches per worker are requested ahead.
Each worker indexes the dataset and runs ``collate_fn``; the batch comes back through one
result queue as pickled NumPy arrays (a Tensor travels as its array and is rebuilt in the
main process), and the main process hands the batches out in order.

Start method: ``'fork'`` where the platform has it (Linux, as PyTorch), else the
platform's default. Numba's GNU OpenMP threading layer terminates a forked process that
enters a parallel region ("fork() called from a process already using GNU OpenMP"), and
nbgrad's pool starts at import. So under ``'fork'`` a worker may index, collate and run
nbgrad ops that take their serial kernels (below ``2**17`` elements), but a parallel
kernel kills it; the loader then raises a RuntimeError that names the cause and the
remedy, ``multiprocessing_context='spawn'`` (or ``'forkserver'``), whose workers import
nbgrad afresh (about a second each) and run any op. Workers use one kernel thread
(``nb.set_num_threads(1)``), as PyTorch's use one intra-op thread.

Seeding (``seed_worker``): worker ``w`` of an iterator with base seed ``b`` (drawn by
``DataLoader.__iter__``) has seed ``b + w`` (PyTorch's ``WorkerInfo.seed``), seeds
nbgrad's default generator and Python's ``random`` with it, and seeds NumPy's legacy
global generator (``np.random.seed``) from ``SeedSequence([w, b])``: PyTorch seeds
NumPy in workers too, from its own hash, so the NumPy numbers differ from PyTorch's.
NumPy ``Generator`` objects the dataset holds are copies in each worker and are not
reseeded: use ``get_worker_info().seed`` to seed them per worker.

Shutdown: workers are daemonic and exit when they read the stop message, which the
iterator sends at the end of an epoch (unless ``persistent_workers``), when it raises a
worker's error, when it is garbage-collected (``del loader``, a ``break`` out of the
epoch), and, through ``multiprocessing``'s exit handler, at interpreter exit; a worker
also exits when its parent process has gone. A worker that does not stop within a
second is terminated.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import queue
import random
import signal
import traceback
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np

from .. import rng
from ..tensor import Tensor
from .collate import gather_function

_POLL_SECONDS = 0.2  # how often a waiting worker or main process checks the other is alive
_JOIN_SECONDS = 1.0  # how long shutdown waits for a worker before terminating it


class WorkerInfo(NamedTuple):
    """What ``get_worker_info()`` returns in a worker (``torch.utils.data``'s
    ``WorkerInfo``): the worker's ``id`` (0 .. num_workers - 1), ``num_workers``, its
    ``seed`` (base seed + id) and its copy of the ``dataset``."""

    id: int
    num_workers: int
    seed: int
    dataset: Any


_worker_info: WorkerInfo | None = None


def get_worker_info() -> WorkerInfo | None:
    """In a DataLoader worker process, its ``WorkerInfo(id, num_workers, seed,
    dataset)``; None in the main process (``torch.utils.data.get_worker_info``)."""
    return _worker_info


# -- argument checks (PyTorch's messages) ---------------------------------------------------
def check_num_workers(num_workers: Any) -> int:
    if isinstance(num_workers, bool) or not isinstance(num_workers, int | np.integer):
        raise TypeError(f"DataLoader: num_workers must be an int, got "
                        f"{type(num_workers).__name__}")
    if num_workers < 0:
        raise ValueError("DataLoader: num_workers option should be non-negative; use "
                         "num_workers=0 to disable multiprocessing.")
    return int(num_workers)


def check_timeout(timeout: Any) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, int | float | np.integer
                                                   | np.floating):
        raise TypeError(f"DataLoader: timeout must be a number, got {type(timeout).__name__}")
    if timeout < 0:
        raise ValueError("DataLoader: timeout option should be non-negative")
    return float(timeout)


def check_prefetch_factor(prefetch_factor: Any, num_workers: int) -> int | None:
    if num_workers == 0:
        if prefetch_factor is not None:
            raise ValueError("DataLoader: prefetch_factor option could only be specified in "
                             "multiprocessing.let num_workers > 0 to enable multiprocessing, "
                             "otherwise set prefetch_factor to None.")
        return None
    if prefetch_factor is None:
        return 2
    if isinstance(prefetch_factor, bool) or not isinstance(prefetch_factor, int | np.integer):
        raise TypeError(f"DataLoader: prefetch_factor must be an int, got "
                        f"{type(prefetch_factor).__name__}")
    if prefetch_factor < 1:
        raise ValueError(f"DataLoader: prefetch_factor option should be positive, got "
                         f"{prefetch_factor}")
    return int(prefetch_factor)


def check_persistent(persistent_workers: Any, num_workers: int) -> bool:
    if persistent_workers and num_workers == 0:
        raise ValueError("DataLoader: persistent_workers option needs num_workers > 0")
    return bool(persistent_workers)


def check_context(context: Any, num_workers: int) -> Any:
    """The multiprocessing context the workers start from (None with no workers)."""
    if context is None:
        if num_workers == 0:
            return None
        methods = multiprocessing.get_all_start_methods()
        return multiprocessing.get_context("fork" if "fork" in methods else None)
    if num_workers == 0:
        raise ValueError(f"DataLoader: multiprocessing_context can only be used with "
                         f"multi-process loading (num_workers > 0), but got "
                         f"num_workers={num_workers}")
    if isinstance(context, str):
        methods = multiprocessing.get_all_start_methods()
        if context not in methods:
            raise ValueError(f"DataLoader: multiprocessing_context option should specify a "
                             f"valid start method in {methods!r}, but got "
                             f"multiprocessing_context={context!r}")
        return multiprocessing.get_context(context)
    if not isinstance(context, multiprocessing.context.BaseContext):
        raise TypeError(f"DataLoader: multiprocessing_context option should be a valid "
                        f"context object or a string specifying the start method, but got "
                        f"multiprocessing_context={context!r}")
    return context


# -- batches across the process boundary ----------------------------------------------------
class _Array(NamedTuple):
    """A Tensor in transit: its array and whether it requires grad (a leaf)."""

    data: np.ndarray
    requires_grad: bool


def _to_wire(obj: Any) -> Any:
    """``obj`` with every Tensor in its tuples, lists and dicts replaced by an _Array."""
    if isinstance(obj, Tensor):
        if obj.requires_grad and not obj.is_leaf:
            raise RuntimeError("DataLoader worker: cannot send a non-leaf tensor that "
                               "requires grad to the main process (autograd does not cross "
                               "process boundaries); detach() it in the dataset or "
                               "collate_fn")
        return _Array(obj._data, obj.requires_grad)
    return _map_containers(obj, _to_wire)


def _from_wire(obj: Any) -> Any:
    if isinstance(obj, _Array):
        t = Tensor._wrap(obj.data, None, 0)
        if obj.requires_grad:
            t.requires_grad = True
        return t
    return _map_containers(obj, _from_wire)


def _map_containers(obj: Any, fn: Callable[[Any], Any]) -> Any:
    if isinstance(obj, tuple) and not isinstance(obj, _Array):
        items = [fn(item) for item in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
    if isinstance(obj, list):
        return [fn(item) for item in obj]
    if isinstance(obj, Mapping):
        pairs = [(key, fn(value)) for key, value in obj.items()]
        try:
            return type(obj)(pairs)
        except TypeError:
            return dict(pairs)
    return obj


class _Failure:
    """An exception raised in a worker, with its traceback as text; ``reraise`` raises it
    in the main process as PyTorch's ExceptionWrapper does."""

    def __init__(self, exc: BaseException, where: str):
        self.exc_type = type(exc)
        self.where = where
        self.text = "".join(traceback.format_exception(exc))
        try:
            pickle.dumps(self.exc_type)
        except Exception:
            self.exc_type = RuntimeError  # a class the main process could not import

    def reraise(self) -> None:
        message = (f"Caught {self.exc_type.__name__} {self.where}.\n"
                   f"Original {self.text}")
        if self.exc_type is KeyError:
            message = _KeyErrorMessage(message)
        try:
            exc = self.exc_type(message)
        except Exception:
            raise RuntimeError(message) from None
        raise exc


class _KeyErrorMessage(str):
    """KeyError shows its argument's repr; this shows the text with its line breaks."""

    def __repr__(self) -> str:
        return str(self)


# -- the worker process ---------------------------------------------------------------------
def seed_worker(worker_id: int, base_seed: int) -> int:
    """Seed this worker's generators (module docstring) and return its seed."""
    seed = base_seed + worker_id
    random.seed(seed)
    rng.manual_seed(seed % rng.SEED_LIMIT)
    np.random.seed(np.random.SeedSequence([worker_id, base_seed]).generate_state(4))
    return seed


def _worker_loop(dataset: Any, collate_fn: Callable | None, index_queue: Any,
                 result_queue: Any, worker_id: int, num_workers: int, base_seed: int,
                 worker_init_fn: Callable | None, parent_pid: int) -> None:
    global _worker_info
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the main process
    from ..runtime.threads import set_num_threads
    try:
        set_num_threads(1)
    except Exception:  # pragma: no cover - the pool is always there
        pass
    where = f"in DataLoader worker process {worker_id}"
    seed = seed_worker(worker_id, base_seed)
    _worker_info = WorkerInfo(worker_id, num_workers, seed, dataset)
    pending_error = None
    try:
        if worker_init_fn is not None:
            worker_init_fn(worker_id)
        gather = gather_function(dataset, collate_fn)
    except Exception as exc:
        pending_error = _Failure(exc, where)
    while True:
        try:
            task = index_queue.get(timeout=_POLL_SECONDS)
        except queue.Empty:
            if os.getppid() != parent_pid:
                break  # the main process is gone
            continue
        if task is None:
            break
        epoch, index, indices = task
        if pending_error is not None:
            payload = _dumps(pending_error, where)
        else:
            try:
                payload = _dumps(_to_wire(gather(indices)), where)
            except Exception as exc:
                payload = _dumps(_Failure(exc, where), where)
        result_queue.put((epoch, index, payload))
    # results not yet flushed are not wanted any more: do not wait for the pipe at exit
    result_queue.cancel_join_thread()
    result_queue.close()


def _dumps(obj: Any, where: str) -> bytes:
    """``obj`` pickled here, so that a failure to pickle is reported like a dataset error
    (the queue's feeder thread would only print it)."""
    try:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        return pickle.dumps(_Failure(exc, where), protocol=pickle.HIGHEST_PROTOCOL)


# -- the main process -----------------------------------------------------------------------
class WorkerIterator:
    """One DataLoader's worker processes and an epoch's batches from them (PyTorch's
    ``_MultiProcessingDataLoaderIter``); ``reset`` starts the next epoch on the same
    workers (``persistent_workers``)."""

    def __init__(self, loader: Any, batches: Iterator[np.ndarray], base_seed: int):
        self._persistent = loader.persistent_workers
        self._timeout = loader.timeout
        self._num_workers = loader.num_workers
        self._prefetch = loader.prefetch_factor * loader.num_workers
        context = loader.multiprocessing_context
        self._method = context.get_start_method()
        self._result_queue = context.Queue()
        self._index_queues: list[Any] = []
        self._workers: list[Any] = []
        self._closed = False
        self._epoch = 0
        try:
            for worker_id in range(self._num_workers):
                index_queue = context.Queue()
                worker = context.Process(
                    target=_worker_loop, daemon=True,
                    args=(loader.dataset, loader.collate_fn, index_queue, self._result_queue,
                          worker_id, self._num_workers, base_seed, loader.worker_init_fn,
                          os.getpid()))
                self._index_queues.append(index_queue)
                worker.start()
                self._workers.append(worker)
        except BaseException:
            self._shutdown()
            raise
        self.reset(batches)

    def reset(self, batches: Iterator[np.ndarray]) -> None:
        """Start an epoch: its batches go to workers 0, 1, ... in turn. Results of an
        earlier epoch still in flight are recognised by their epoch and dropped."""
        self._epoch += 1
        self._batches = batches
        self._exhausted = False
        self._sent = 0
        self._received = 0
        self._ready: dict[int, bytes] = {}
        for _ in range(self._prefetch):
            self._send_next()

    def alive(self) -> bool:
        return not self._closed and all(w.exitcode is None for w in self._workers)

    def __iter__(self) -> WorkerIterator:
        return self

    def __next__(self) -> Any:
        if self._closed:
            raise StopIteration
        if self._received == self._sent and self._exhausted:
            if not self._persistent:
                self._shutdown()
            raise StopIteration
        try:
            payload = self._wait_for(self._received)
        except BaseException:
            self._shutdown()
            raise
        self._received += 1
        self._send_next()
        data = pickle.loads(payload)
        if isinstance(data, _Failure):
            if not self._persistent:
                self._shutdown()
            data.reraise()
        return _from_wire(data)

    def _send_next(self) -> None:
        if self._exhausted:
            return
        indices = next(self._batches, None)
        if indices is None:
            self._exhausted = True
            return
        worker = self._sent % self._num_workers
        self._index_queues[worker].put((self._epoch, self._sent, indices))
        self._sent += 1

    def _wait_for(self, index: int) -> bytes:
        """The pickled result of batch ``index`` of this epoch, keeping the others that
        arrive first."""
        waited = 0.0
        while index not in self._ready:
            step = _POLL_SECONDS
            if self._timeout > 0:
                if waited >= self._timeout:
                    raise RuntimeError(f"DataLoader timed out after {self._timeout:g} "
                                       "seconds")
                step = min(step, self._timeout - waited)
            try:
                epoch, position, payload = self._result_queue.get(timeout=step)
            except queue.Empty:
                waited += step
                self._check_workers()
                continue
            if epoch == self._epoch:
                self._ready[position] = payload
        return self._ready.pop(index)

    def _check_workers(self) -> None:
        dead = [w for w in self._workers if w.exitcode is not None]
        if not dead:
            return
        codes = ", ".join(f"{w.pid} (exit code {w.exitcode})" for w in dead)
        hint = ""
        if self._method == "fork" and any(w.exitcode == -signal.SIGTERM for w in dead):
            hint = (". Under the 'fork' start method, Numba's GNU OpenMP layer terminates a "
                    "worker that runs a parallel nbgrad kernel (an op on >= 2**17 "
                    "elements); pass multiprocessing_context='spawn' or 'forkserver' to "
                    "the DataLoader to run such ops in workers")
        raise RuntimeError(f"DataLoader worker (pid(s) {codes}) exited unexpectedly{hint}")

    def _shutdown(self) -> None:
        """Stop the workers (terminating any that do not stop within a second) and
        release the queues. Safe to call twice and from ``__del__``."""
        if self._closed:
            return
        self._closed = True
        for index_queue in self._index_queues:
            try:
                index_queue.put(None)
            except Exception:  # pragma: no cover - a queue already closed
                pass
        for worker in self._workers:
            worker.join(timeout=_JOIN_SECONDS)
            if worker.exitcode is None:
                worker.terminate()
                worker.join()
        for q in [*self._index_queues, self._result_queue]:
            q.cancel_join_thread()
            q.close()

    def __del__(self) -> None:
        try:
            self._shutdown()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass
