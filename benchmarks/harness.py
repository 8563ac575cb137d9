"""Timing helpers shared by the benchmark modules.

Every workload is timed forward + backward, float32, at the same thread count for
nbgrad and PyTorch, as the median of several runs after warm-up calls (the first of
which compiles the Numba kernels).
"""

from __future__ import annotations

import ctypes
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numba

if TYPE_CHECKING:
    from .limits import Limits

THREADS = min(2, numba.config.NUMBA_NUM_THREADS)

# A call run before each block of nbgrad's paired timings (``use_neighbour``): another
# runtime's work, so that its thread pool has just been busy when nbgrad's block starts.
_neighbour: Callable[[], object] | None = None


@dataclass
class Row:
    """One workload's times. ``flops`` (GEMM-bound workloads) or ``bytes`` (streaming
    ones, the minimal bytes read + written by forward + backward) give it a bound on
    this host (``bound_s``); ``dtype`` picks the sgemm or dgemm peak for ``flops``, and
    ``working_set`` the size at which a streaming row's bandwidth is measured (a tanh
    forward + backward touches x, y, g and dx: 4 arrays, and moves 5 array sizes; 64 MB
    may run from a large last-level cache, faster than main memory)."""

    workload: str
    nbgrad_s: float
    torch_s: float | None
    target: str = ""
    note: str = ""
    flops: float | None = None
    bytes: float | None = None
    dtype: str = "float32"
    working_set: float | None = None  # bytes of the distinct arrays a streaming row touches

    @property
    def ratio(self) -> float | None:
        return None if self.torch_s is None else self.nbgrad_s / self.torch_s

    def bound_s(self, limits: Limits | None) -> float | None:
        """The time the row's FLOPs take at the GEMM peak, or its bytes at the best
        bandwidth; None without a bound or without limits."""
        if limits is None:
            return None
        if self.flops is not None:
            return self.flops / (limits.peak_gflops(self.dtype) * 1e9)
        if self.bytes is not None:  # at the bandwidth measured at the row's own size
            return self.bytes / (limits.bandwidth_for(self.working_set) * 1e9)
        return None

    def of_bound(self, limits: Limits | None) -> float | None:
        """Bound time / nbgrad time (1.0 = at the bound), or None."""
        bound = self.bound_s(limits)
        return None if bound is None else bound / self.nbgrad_s


def median_time(fn: Callable[[], object], repeats: int = 7, warmup: int = 2) -> float:
    """Median wall time of ``fn()`` in seconds over ``repeats`` runs after ``warmup``."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def paired_times(nb_fn: Callable[[], object], torch_fn: Callable[[], object] | None,
                 repeats: int = 7, warmup: int = 2, rounds: int = 3
                 ) -> tuple[float, float | None]:
    """Median times of ``nb_fn`` and ``torch_fn`` measured in alternating blocks, each
    side's best block kept: one process hosts two thread pools (Numba's and PyTorch's)
    and a block can be slowed by the other pool's idle spinning or by fresh page faults,
    which a single block per side turned into 3x swings between runs. With a neighbour
    set (``use_neighbour``), it runs before each of nbgrad's blocks."""
    nb_best = torch_best = None
    for _ in range(rounds):
        if _neighbour is not None:
            _neighbour()
        t = median_time(nb_fn, repeats, warmup)
        nb_best = t if nb_best is None else min(nb_best, t)
        if torch_fn is not None:
            t = median_time(torch_fn, repeats, warmup)
            torch_best = t if torch_best is None else min(torch_best, t)
    return nb_best, torch_best


def use_neighbour(fn: Callable[[], object]) -> None:
    """Run ``fn`` before each block of nbgrad's paired timings from now on."""
    global _neighbour
    _neighbour = fn


def jax_step(jax) -> Callable[[], None]:
    """A compiled JAX step to run next to nbgrad: the gradients of tanh(a @ b).sum() for
    [256, 256] float32 a and b, waited for (about 0.8 ms on 2 cores, on JAX's own pool)."""
    jnp = jax.numpy
    grads = jax.jit(jax.grad(lambda a, b: jnp.tanh(a @ b).sum(), argnums=(0, 1)))
    a = jnp.full((256, 256), 0.01, jnp.float32)

    def step() -> None:
        for g in grads(a, a):
            g.block_until_ready()

    step()  # compiles
    return step


def torch_or_none():
    """PyTorch set to the benchmark thread count, or None where it is not installed.

    With Numba's OpenMP pool started first, a torch.set_num_threads call leaves PyTorch's
    small ops far slower for the rest of the process (docs/threads.md#import-order), which
    would flatter nbgrad's ratios. So when PyTorch is not imported yet, the count is set
    in the OpenMP library that PyTorch will share, which PyTorch then takes as its own
    (nbgrad's kernels set theirs per region), and torch.set_num_threads is called only if
    the count still differs."""
    if "torch" not in sys.modules:
        _set_openmp_threads(THREADS)
    try:
        import torch
    except ImportError:
        return None
    if torch.get_num_threads() != THREADS:
        torch.set_num_threads(THREADS)
    return torch


def _set_openmp_threads(n: int) -> None:
    """omp_set_num_threads(n) in the process's libgomp, where there is one."""
    try:
        ctypes.CDLL("libgomp.so.1").omp_set_num_threads(n)
    except (OSError, AttributeError):
        pass


def format_seconds(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.1f} us"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def format_fraction(fraction: float | None) -> str:
    """A fraction of the bound as a percentage; "-" for None."""
    if fraction is None:
        return "-"
    pct = 100 * fraction
    return f"{pct:.1f}%" if pct < 10 else f"{pct:.0f}%"


def print_table(rows: list[Row], limits: Limits | None = None) -> None:
    """The table; "of bound" is each row's bound time / nbgrad time (``Row.of_bound``)."""
    header = (f"{'workload':<44} {'nbgrad':>10} {'torch':>10} {'ratio':>7} {'of bound':>8}"
              f"  {'target':<8} note")
    print(header)
    print("-" * len(header))
    for r in rows:
        ratio = "-" if r.ratio is None else f"{r.ratio:.2f}x"
        print(f"{r.workload:<44} {format_seconds(r.nbgrad_s):>10} "
              f"{format_seconds(r.torch_s):>10} {ratio:>7} "
              f"{format_fraction(r.of_bound(limits)):>8}  {r.target:<8} {r.note}")
