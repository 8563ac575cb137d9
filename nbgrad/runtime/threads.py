"""The kernel thread pool: its size, and how long its idle threads spin (the policy:
docs/threads.md).

Numba's OpenMP pool spins its idle threads for a while after each parallel kernel
(libgomp's default). On a small machine they then hold the cores that another thread
pool in the process needs next (nbgrad's own kernels call no BLAS, but PyTorch's pool or
a BLAS called by user code may run in between). A short spin (GOMP_SPINCOUNT=30000, a
few tens of microseconds) keeps back-to-back kernels fast and frees the cores. It is set
only while Numba's pool starts, and only if the user set no OpenMP wait policy, so other
OpenMP libraries in the process (PyTorch's) keep their own defaults.

Several kernels allocate scratch arrays inside their parallel loops, and glibc's malloc
serves each thread from the arena (a heap with its own lock) the thread first allocated
from. It makes at most 8 arenas per core; once another runtime's threads (JAX starts 15)
hold them all, a pool thread that allocates for the first time shares an arena, often the
main thread's, and the two then take turns on its lock. So the pool's threads each
allocate once as soon as the pool starts (``_give_threads_arenas``).

The kernels use every core unless the environment says otherwise: ``NUMBA_NUM_THREADS``
sizes the pool, and without it ``OMP_NUM_THREADS`` (the first level of a nested list, as
OpenMP reads it) caps the threads the kernels use.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable

import numba
import numpy as np
from numba.np.ufunc import parallel as _numba_parallel

from .startup import is_glibc

_KERNEL_SPINCOUNT = "30000"


def _start_pool() -> None:
    user_policy = "GOMP_SPINCOUNT" in os.environ or "OMP_WAIT_POLICY" in os.environ
    if not user_policy:
        os.environ["GOMP_SPINCOUNT"] = _KERNEL_SPINCOUNT
    try:
        _numba_parallel._launch_threads()
    finally:
        if not user_policy:
            del os.environ["GOMP_SPINCOUNT"]
    if numba.threading_layer() == "omp" and is_glibc():
        _give_threads_arenas(numba.config.NUMBA_NUM_THREADS)


# A parallel region's body for libgomp: void fn(void *data).
_REGION_BODY = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def _on_pool_threads(fn: Callable[[], None], threads: int) -> None:
    """Call ``fn()`` once in each of ``threads`` threads of one OpenMP region: the pool's
    threads, since libgomp keeps one set of threads per calling thread and Numba's
    regions from this thread reuse them. Nothing where no libgomp is loaded."""
    try:
        gomp = ctypes.CDLL("libgomp.so.1")  # the library Numba's OpenMP layer has loaded
    except OSError:
        return
    gomp.GOMP_parallel.argtypes = [_REGION_BODY, ctypes.c_void_p, ctypes.c_uint,
                                   ctypes.c_uint]
    gomp.GOMP_parallel(_REGION_BODY(lambda _data: fn()), None, threads, 0)


def _give_threads_arenas(threads: int) -> None:
    """Have each pool thread allocate a block now, so that glibc gives each an arena of
    its own while arenas are still free. A pool thread that shares an arena with another
    runtime's threads contends for its lock on every allocation; with JAX started after
    nbgrad that doubled a depthwise conv's time in most processes
    (docs/threads.md#malloc-arenas, docs/benchmarks.md#threads). It costs one parallel
    region at import."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    _on_pool_threads(lambda: libc.free(libc.malloc(64)), threads)


def _omp_thread_limit() -> int | None:
    """The thread count ``OMP_NUM_THREADS`` asks for when ``NUMBA_NUM_THREADS`` is unset
    (None where neither applies or the value is not a positive integer)."""
    value = os.environ.get("OMP_NUM_THREADS", "")
    if "NUMBA_NUM_THREADS" in os.environ or not value:
        return None
    first = value.split(",")[0].strip()
    return int(first) if first.isdigit() and int(first) > 0 else None


def set_num_threads(n: int) -> None:
    """Threads used by the parallel kernels (at most the pool size fixed at import, which
    NUMBA_NUM_THREADS sets)."""
    pool = numba.config.NUMBA_NUM_THREADS
    if not isinstance(n, int | np.integer) or not 1 <= n <= pool:
        raise ValueError(f"set_num_threads: n must be an int from 1 to {pool} (the pool size, "
                         f"NUMBA_NUM_THREADS, fixed at import), got {n!r}")
    numba.set_num_threads(int(n))


def get_num_threads() -> int:
    """Threads the parallel kernels use now (the calling thread's setting). The ops ask
    before every kernel call, so this reads it directly: ``numba.get_num_threads()``
    first checks, under a process-wide lock, that the pool has started, which it has since
    import (a lock per call, several calls per op)."""
    return _numba_parallel._get_num_threads()


_start_pool()
if (_limit := _omp_thread_limit()) is not None:
    numba.set_num_threads(min(_limit, numba.config.NUMBA_NUM_THREADS))
