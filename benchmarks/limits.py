"""This host's own limits, measured at the start of a run: GEMM peak and memory bandwidth.

``measure_limits(threads)`` times NumPy's BLAS (sgemm and dgemm, on 1 thread and on the
benchmark's thread count) and three streaming loops (``np.copyto``, NumPy's triad and a
parallel Numba triad). The benchmark table then prints each annotated workload's time as
a fraction of its bound: the time its FLOPs would take at the GEMM peak, or the time its
minimal bytes would take at the best bandwidth (``harness.Row.bound_s``).

The main-memory bandwidths are measured on arrays far larger than a workload's (256 MiB,
3 x 128 MiB); a workload that touches 64 MiB may run partly from a large last-level cache
(this project's hosts report 480 MiB of L3), where the same loops move bytes faster, and
its time would print above 100% of a main-memory bound. ``bandwidth_at(n_bytes)`` measures
the same parallel copy and triad with arrays that together hold ``n_bytes`` (a workload's
working set), and a ``Row`` with a ``working_set`` has its bytes bound at the bandwidth of its
own working set (``Limits.bandwidth_for``).

NumPy's BLAS thread count is set through threadpoolctl where it is installed, else
through the OpenBLAS library NumPy loaded (its ``*_set_num_threads`` symbol, via ctypes),
and restored afterwards; where neither works, the peaks are measured at whatever count
the BLAS runs with, and the printed text says so.
"""

from __future__ import annotations

import ctypes
import platform
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import numba
import numpy as np
from numba import njit, prange

from nbgrad.runtime.host import best_time

GB = 1e9


@dataclass
class Limits:
    """Peaks in GFLOP/s and bandwidths in GB/s (bytes read + written per second)."""

    threads: int
    sgemm_1: float
    sgemm_n: float
    dgemm_1: float
    dgemm_n: float
    copy_gbs: float
    triad_gbs: float
    triad_parallel_gbs: float
    blas_control: str = ""
    cpu: str = ""
    numba_cpu: str = ""
    # GB/s at a working-set size in bytes (``bandwidth_at``), filled on first request
    sized_gbs: dict = field(default_factory=dict)

    @property
    def bandwidth_gbs(self) -> float:
        """The best of the main-memory bandwidths: the bound for streaming workloads."""
        return max(self.copy_gbs, self.triad_gbs, self.triad_parallel_gbs)

    def bandwidth_for(self, working_set: float | None) -> float:
        """The bandwidth bound of a workload that touches ``working_set`` bytes: the best
        of the main-memory bandwidths and the one measured at that size (``bandwidth_at``,
        on ``threads`` threads; the best measured so far in this process, else measured
        now; kept in ``sized_gbs``).
        A working set that fits in a cache streams faster than main memory; one that does
        not measures about the main-memory figure, which then stays the bound."""
        if working_set is None:
            return self.bandwidth_gbs
        key = int(working_set)
        best = max(self.sized_gbs.get(key, 0.0), _AT_SIZE.get((key, self.threads), 0.0))
        self.sized_gbs[key] = best if best > 0 else bandwidth_at(key, self.threads)
        return max(self.bandwidth_gbs, self.sized_gbs[key])

    def peak_gflops(self, dtype: str = "float32") -> float:
        """The GEMM peak for ``dtype`` (sgemm for float32, dgemm for float64): the
        multi-thread one, or the 1-thread one where a busy host measured it higher."""
        if np.dtype(dtype) == np.float64:
            return max(self.dgemm_n, self.dgemm_1)
        return max(self.sgemm_n, self.sgemm_1)


# --- NumPy's BLAS thread count -------------------------------------------------------

_SET_NAMES = ("openblas_set_num_threads", "openblas_set_num_threads64_",
              "scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads")
_GET_NAMES = ("openblas_get_num_threads", "openblas_get_num_threads64_",
              "scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads")


class _BlasThreads:
    """Sets NumPy's BLAS thread count: threadpoolctl, else the loaded OpenBLAS's own
    setter. ``how`` names the route taken, or says the count could not be set."""

    def __init__(self) -> None:
        self._limiter = None
        self._set = self._get = None
        self.how = ""
        try:
            import threadpoolctl
        except ImportError:
            threadpoolctl = None
        if threadpoolctl is not None:
            self._limiter = threadpoolctl
            self.how = "threadpoolctl"
            return
        lib = _loaded_openblas()
        if lib is not None:
            self._set = _symbol(lib, _SET_NAMES)
            self._get = _symbol(lib, _GET_NAMES)
        if self._set is not None and self._get is not None:
            self._set.argtypes, self._get.restype = [ctypes.c_int], ctypes.c_int
            self.how = "OpenBLAS set_num_threads (ctypes)"
        else:
            self.how = "not settable: BLAS runs at its own count"

    @property
    def settable(self) -> bool:
        return self._limiter is not None or self._set is not None

    def run(self, n: int, fn: Callable[[], float]) -> float:
        """``fn()`` with the BLAS on ``n`` threads (where settable), count restored."""
        if self._limiter is not None:
            with self._limiter.threadpool_limits(limits=n, user_api="blas"):
                return fn()
        if self._set is None:
            return fn()
        before = self._get()
        self._set(n)
        try:
            return fn()
        finally:
            self._set(before)


def _loaded_openblas():
    """The OpenBLAS shared library NumPy has loaded (from /proc/self/maps), or None."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "openblas" in line.lower()}
    except OSError:
        return None
    for path in sorted(paths):
        if path.endswith(".so") or ".so." in path:
            try:
                return ctypes.CDLL(path)
            except OSError:
                continue
    return None


def _symbol(lib, names):
    for name in names:
        try:
            return getattr(lib, name)
        except AttributeError:
            continue
    return None


# --- measurements ---------------------------------------------------------------------


def _best_time(fn: Callable[[], object], repeats: int) -> float:
    """Best wall time of ``fn()`` over ``repeats`` runs after one warm-up call."""
    fn()
    return best_time(fn, repeats)


def _gemm_gflops(a: np.ndarray, b: np.ndarray, c: np.ndarray, repeats: int) -> float:
    t = _best_time(lambda: np.matmul(a, b, out=c), repeats)
    return 2.0 * a.shape[0] * a.shape[1] * b.shape[1] / t / 1e9


@njit(cache=True, parallel=True)
def _parallel_triad(a, b, c, s):
    for i in prange(a.size):
        a[i] = b[i] + s * c[i]


@njit(cache=True, parallel=True)
def _parallel_copy(src, dst):
    for i in prange(src.size):
        dst[i] = src[i]


# bandwidth_at's best result so far, by (bytes, threads): a benchmark measures it before
# each row of that size (on a shared host one measurement can fall in another process's
# burst), and the rows' notes and bounds (Limits.bandwidth_for) use the best
_AT_SIZE: dict = {}


def bandwidth_at(n_bytes: int, threads: int, repeats: int = 20) -> float:
    """GB/s (bytes read + written per second) of the better of a parallel Numba copy
    (source and destination of n_bytes / 2 each) and a parallel Numba triad a = b + s*c
    (three arrays of n_bytes / 3) on ``threads`` threads: the arrays together hold
    ``n_bytes``, a workload's working set, so that a set that fits in the last-level cache
    is measured there, as the workload runs. Best of ``repeats`` after a warm-up (the
    arrays are written first: no page faults timed). Each call measures; the result is
    the best for (n_bytes, threads) over the calls so far."""
    key = (int(n_bytes), threads)
    _AT_SIZE[key] = max(_AT_SIZE.get(key, 0.0), *_measure_at(int(n_bytes), threads, repeats))
    return _AT_SIZE[key]


def _measure_at(n_bytes: int, threads: int, repeats: int) -> tuple[float, float]:
    """(copy, triad) GB/s over ``n_bytes`` of float64 arrays (at least one element each)."""
    half = max(n_bytes // 16, 1)
    third = max(n_bytes // 24, 1)
    src = np.full(half, 1.0)
    dst = np.zeros(half)
    a = np.zeros(third)
    b = np.full(third, 1.0)
    c = np.full(third, 2.0)
    before = numba.get_num_threads()
    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    try:
        t_copy = _best_time(lambda: _parallel_copy(src, dst), repeats)
        t_triad = _best_time(lambda: _parallel_triad(a, b, c, 3.0), repeats)
    finally:
        numba.set_num_threads(before)
    return 2 * src.nbytes / t_copy / GB, 3 * a.nbytes / t_triad / GB


def _copy_gbs(n_bytes: int, repeats: int) -> float:
    src = np.ones(n_bytes // 8, np.float64)
    dst = np.empty_like(src)
    t = _best_time(lambda: np.copyto(dst, src), repeats)
    return 2 * src.nbytes / t / GB  # src read + dst written


def _triad_gbs(n_bytes: int, repeats: int, threads: int) -> tuple[float, float]:
    """(NumPy, parallel Numba) bandwidth of a = b + s*c over three ``n_bytes`` arrays,
    counted as STREAM counts it: b and c read, a written (3 arrays). NumPy's form takes
    two passes (a = s*c, then a += b) on one thread, so it understates the machine."""
    n = n_bytes // 8
    a = np.empty(n)
    b = np.full(n, 1.0)
    c = np.full(n, 2.0)
    s = 3.0

    def numpy_triad():
        np.multiply(c, s, out=a)
        np.add(a, b, out=a)

    moved = 3 * a.nbytes
    t_np = _best_time(numpy_triad, repeats)
    before = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        t_par = _best_time(lambda: _parallel_triad(a, b, c, s), repeats)
    finally:
        numba.set_num_threads(before)
    return moved / t_np / GB, moved / t_par / GB


def measure_limits(threads: int, gemm_n: int = 1536, copy_bytes: int = 256 * 2**20,
                   triad_bytes: int = 128 * 2**20, repeats: int = 3,
                   gemm_rounds: int = 2) -> Limits:
    """GEMM peaks (1 and ``threads`` BLAS threads) and streaming bandwidths. Defaults:
    1536^3 products, a 256 MiB copy, three 128 MiB triad arrays, best of ``repeats``
    (about 5 s in all). The four GEMM settings are measured in ``gemm_rounds``
    alternating rounds, each keeping its best: on a shared host another process's burst
    can halve one block. Smaller sizes are for tests."""
    blas = _BlasThreads()
    rng = np.random.default_rng(0)
    peaks: dict = {}
    for dtype in (np.float32, np.float64):
        a = rng.standard_normal((gemm_n, gemm_n)).astype(dtype)
        b = rng.standard_normal((gemm_n, gemm_n)).astype(dtype)
        c = np.empty((gemm_n, gemm_n), dtype)
        for _ in range(gemm_rounds):
            for n_threads in (1, threads):
                got = blas.run(n_threads, partial(_gemm_gflops, a, b, c, repeats))
                peaks[dtype, n_threads] = max(got, peaks.get((dtype, n_threads), 0.0))
    copy = _copy_gbs(copy_bytes, repeats)
    triad, triad_par = _triad_gbs(triad_bytes, repeats, threads)
    return Limits(threads=threads,
                  sgemm_1=peaks[np.float32, 1], sgemm_n=peaks[np.float32, threads],
                  dgemm_1=peaks[np.float64, 1], dgemm_n=peaks[np.float64, threads],
                  copy_gbs=copy, triad_gbs=triad, triad_parallel_gbs=triad_par,
                  blas_control=blas.how, cpu=cpu_model_name(), numba_cpu=numba_cpu_name())


def cpu_model_name() -> str:
    """The CPU's model name from /proc/cpuinfo, else what ``platform`` reports."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def numba_cpu_name() -> str:
    """The CPU Numba compiles for: NUMBA_CPU_NAME where set, else LLVM's host CPU."""
    name = getattr(numba.config, "CPU_NAME", None)
    if name:
        return f"{name} (NUMBA_CPU_NAME)"
    import llvmlite.binding as llvm

    return llvm.get_host_cpu_name()


def format_limits(limits: Limits) -> str:
    """The block printed at the top of a benchmark run."""
    n = limits.threads
    blas_note = limits.blas_control
    if blas_note.startswith("not settable"):
        blas_note += f" (the 1- and {n}-thread columns ran at the same count)"
    lines = [
        f"host: {limits.cpu}; Numba target CPU: {limits.numba_cpu}",
        f"GEMM peak (NumPy BLAS, threads set by {blas_note}):",
        f"  sgemm {limits.sgemm_1:7.1f} GFLOP/s on 1 thread, {limits.sgemm_n:7.1f} on {n}",
        f"  dgemm {limits.dgemm_1:7.1f} GFLOP/s on 1 thread, {limits.dgemm_n:7.1f} on {n}",
    ]
    if n > 1 and (limits.sgemm_n < limits.sgemm_1 or limits.dgemm_n < limits.dgemm_1):
        lines.append(f"  ({n} threads measured below 1: the host was busy; the bounds take "
                     "the higher peak)")
    return "\n".join(lines + [
        "bandwidth (bytes read + written per second):",
        f"  copy {limits.copy_gbs:.1f} GB/s (np.copyto, 1 thread); triad a = b + s*c "
        f"{limits.triad_gbs:.1f} GB/s (NumPy, 1 thread), {limits.triad_parallel_gbs:.1f} "
        f"GB/s (Numba, {n} threads)",
        f"bounds: float32 FLOPs at {limits.peak_gflops('float32'):.1f} GFLOP/s, float64 at "
        f"{limits.peak_gflops('float64'):.1f}; bytes at {limits.bandwidth_gbs:.1f} GB/s "
        "(main memory), or at the bandwidth measured at a row's own working set where the "
        "row gives one (its note)",
    ] + [format_sized(limits)] * bool(limits.sized_gbs))


def format_sized(limits: Limits) -> str:
    """One line of the bandwidths measured at working-set sizes (``Limits.sized_gbs``)."""
    sizes = ", ".join(f"{gbs:.1f} GB/s at {n / 2**20:.0f} MiB"
                      for n, gbs in sorted(limits.sized_gbs.items()))
    return f"bandwidth at working-set sizes (Numba copy/triad, {limits.threads} threads): {sizes}"
