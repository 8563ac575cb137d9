"""The blocking of kernels/matmul.py's GEMM for this host, confirmed by timing it.

runtime/host.py derives a block depth from the cache sizes the OS reports, and
kernels/matmul.py reads a row-major b in place up to IN_PLACE_SPAN bytes per block: good
guesses, but caches of the same size behave differently across CPUs (associativity,
prefetchers, a VM's neighbours). So the first product large enough to care
(SEARCH_MIN_WORK multiply-adds) times the guess against its neighbours (blocks twice and
half as deep, spans four times and a quarter as wide, a transposed a read in place or
copied: ``PACK_T``) on the float32 products a training step runs most (``a @ b``, and
``a^T @ b`` of a weight gradient), in alternating rounds, and keeps the fastest. The
search takes a few seconds; its result is written next to the kernel cache, keyed by the
CPU, Numba's target, the thread count and the installed nbgrad, so later processes read
it. ``python -m nbgrad info`` prints it.

No choice changes a result: every element is one FMA chain over k in ascending order
whatever the depth (a block after the first reloads the stored partial sums) and
wherever b is read from (packing copies values), so the choice is free to differ between
hosts and runs (tests/kernels/test_tiles.py checks the bits).

``NBGRAD_GEMM_SEARCH=0`` skips the search: the cache-derived guess is used.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..runtime import host
from ..runtime.cache import install_stamp, kernel_cache_dir

#: A product of at least this many multiply-adds (a 256^3 product) runs the search first.
SEARCH_MIN_WORK = 256 ** 3
#: The search keeps the guess unless another choice is faster by more than this fraction
#: (a shared host's speed moves by a few percent between rounds).
MARGIN = 0.03
ROUNDS = 3
# The timed float32 products (batches, n, a read transposed or not) of n x n times n x n:
# large products, where a power-of-two row length makes reading a transposed a in place
# suffer most (see matmul.PACK_T), and a batch of small ones, whose blocks fit L2.
PRODUCTS = ((1, 512, False), (1, 512, True), (1, 1024, False), (1, 1024, True),
            (64, 128, False), (64, 128, True))
FILE_NAME = "nbgrad-gemm-blocking.json"


@dataclasses.dataclass(frozen=True)
class Blocking:
    """How kernels/matmul.py blocks a product: b in blocks ``depth_bytes`` of k values
    deep, a row-major block read in place up to ``span`` bytes, slivers of a transposed
    a copied if ``pack_t``."""

    depth_bytes: int
    span: int
    pack_t: bool


@dataclasses.dataclass(frozen=True)
class SearchResult:
    chosen: Blocking
    guess: Blocking
    speed: dict  # Blocking -> mean over the timed products of (fastest time / its time)
    source: str  # "search", "file <path>" or "guess (<reason>)"


def candidates(start: Blocking) -> list[Blocking]:
    """``start`` first, then every combination of half, the same and twice its depth
    (within runtime/host.py's GEMM_DEPTH_MIN..MAX), a quarter, the same and four times
    its span, and both ways of reading a transposed a."""
    depths = [d for d in (start.depth_bytes // 2, start.depth_bytes, start.depth_bytes * 2)
              if host.GEMM_DEPTH_MIN <= d <= host.GEMM_DEPTH_MAX]
    spans = (start.span // 4, start.span, start.span * 4)
    every = [Blocking(d, s, p) for d in depths for s in spans for p in (False, True)]
    return [start, *(c for c in every if c != start)]


def _timed_products(threads: int, product: Callable) -> list[Callable[[Blocking], None]]:
    """One call of kernels/matmul.py's ``product`` per timed product, each taking the
    blocking to run with."""
    rng = np.random.default_rng(0)

    def run(batches, size, x_t):
        a, b = (rng.standard_normal((batches, size, size)).astype(np.float32)
                for _ in range(2))
        maps = np.arange(batches)
        return lambda c: product(a, b, maps, maps, x_t, False, threads, None, c.depth_bytes,
                                 c.span, c.pack_t)

    return [run(*shape) for shape in PRODUCTS]


def _clock(fn: Callable[[], object]) -> float:
    return host.best_time(fn, repeats=2)


def search(threads: int, product: Callable, start: Blocking,
           clock: Callable[[Callable[[], object]], float] = _clock) -> SearchResult:
    """Time every candidate around ``start`` (the guess) on every product in ROUNDS
    alternating rounds. A candidate's speed on a product is the fastest candidate's
    median time over its own, its score the mean speed over the products (each counts
    alike, however long it takes); the best score wins if it beats ``start``'s by more
    than MARGIN."""
    runs = _timed_products(threads, product)
    pool = candidates(start)
    for c in pool:  # compile and warm up outside the timing
        for run in runs:
            run(c)
    times: dict[tuple[Blocking, int], list[float]] = {}
    for _ in range(ROUNDS):
        for c in pool:
            for i, run in enumerate(runs):
                times.setdefault((c, i), []).append(clock(lambda run=run, c=c: run(c)))
    median = {key: statistics.median(ts) for key, ts in times.items()}
    fastest = [min(median[c, i] for c in pool) for i in range(len(runs))]
    speed = {c: statistics.fmean(fastest[i] / median[c, i] for i in range(len(runs)))
             for c in pool}
    best = max(pool, key=speed.__getitem__)
    chosen = best if speed[best] * (1 - MARGIN) > speed[start] else start
    return SearchResult(chosen, start, speed, "search")


# -- the record on disk ------------------------------------------------------------------


def _record_key(threads: int) -> str:
    from numba.core.registry import cpu_target

    _, cpu_name, features = cpu_target.target_context.codegen().magic_tuple()
    return json.dumps([host.facts().cpu_model, cpu_name, features, threads, install_stamp()])


def record_path() -> Path | None:
    """The file in the kernel cache of kernels/ (one directory for the folder's modules),
    or None if there is none."""
    directory = kernel_cache_dir(candidates)
    return None if directory is None else directory / FILE_NAME


def _read_records(path: Path) -> dict:
    try:
        records = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return records if isinstance(records, dict) else {}


def load(threads: int, path: Path | None, start: Blocking) -> SearchResult | None:
    """The stored result for this host and thread count, if any (a damaged file is none)."""
    if path is None:
        return None
    entry = _read_records(path).get(_record_key(threads))
    try:
        chosen = Blocking(int(entry["depth_bytes"]), int(entry["span"]),
                          bool(entry["pack_t"]))
        speed = {Blocking(int(d), int(s), bool(p)): float(v)
                 for d, s, p, v in entry["speed"]}
    except (TypeError, KeyError, ValueError):
        return None
    return SearchResult(chosen, start, speed, f"file {path}")


def save(result: SearchResult, threads: int, path: Path | None) -> None:
    """Add ``result`` to the records at ``path`` (written whole and renamed into place, so
    a reader never sees half a file)."""
    if path is None:
        return
    records = _read_records(path)
    records[_record_key(threads)] = {
        "depth_bytes": result.chosen.depth_bytes, "span": result.chosen.span,
        "pack_t": result.chosen.pack_t,
        "speed": [[c.depth_bytes, c.span, c.pack_t, v] for c, v in result.speed.items()]}
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(records, indent=1))
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)


# -- what kernels/matmul.py asks ---------------------------------------------------------

_chosen: dict[int, SearchResult] = {}  # threads -> this process's result
_read: set[int] = set()  # thread counts whose record on disk was looked up


def enabled() -> bool:
    return os.environ.get("NBGRAD_GEMM_SEARCH", "1") != "0"


def result(threads: int, product: Callable, start: Blocking, run_search: bool = True,
           again: bool = False) -> SearchResult:
    """This host's blocking for ``product`` at ``threads`` threads: from this process,
    else the record on disk (read once per process), else a search around the guess
    ``start`` (when ``run_search`` and enabled; the result is stored), else ``start``.
    ``again``: search even if there is a result."""
    if again:
        _chosen.pop(threads, None)
        _read.add(threads)
    if threads in _chosen:
        return _chosen[threads]
    if threads not in _read:
        _read.add(threads)
        found = load(threads, record_path(), start)
        if found is not None:
            _chosen[threads] = found
            return found
    if not enabled():
        _chosen[threads] = SearchResult(start, start, {},
                                        "guess (search off: NBGRAD_GEMM_SEARCH=0)")
        return _chosen[threads]
    if not run_search:
        return SearchResult(start, start, {}, "guess (no product large enough yet)")
    print("nbgrad: timing GEMM block sizes for this CPU (once, a few seconds; "
          "`python -m nbgrad info` shows the result)", file=sys.stderr)
    found = search(threads, product, start)
    save(found, threads, record_path())
    _chosen[threads] = found
    return found


def blocking(work: int, threads: int, product: Callable, start: Blocking) -> Blocking:
    """The blocking for a product of ``work`` multiply-adds: the searched one once there is
    one; a product below SEARCH_MIN_WORK does not start the search."""
    return result(threads, product, start, run_search=work >= SEARCH_MIN_WORK).chosen
