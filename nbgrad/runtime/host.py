"""Facts about the CPU nbgrad runs on, and the GEMM blocking chosen from them
(``python -m nbgrad info`` prints both).

* The CPU model (``/proc/cpuinfo``'s "model name"), the width of its vector registers
  (runtime/startup.py: ``host_vector_bytes``) and its data caches per core, read from
  ``/sys/devices/system/cpu/cpu0/cache/index*/{level,type,size}`` (Linux). Where that
  directory is missing or unreadable (another OS, a container hiding /sys), the caches are
  FALLBACK_CACHES, documented below, and ``HostFacts.caches_from`` says so.
* The depth of kernels/matmul.py's packed blocks of b (``gemm_depth_bytes``): a block
  is ``depth`` values of k by NC columns and should stay in L2 while the slivers of a
  (MR rows by ``depth``) sweep it from L1. The sums do not depend on the depth: a block
  after the first reloads the partial sums it stored (exact), so every element of a
  product is one FMA chain over k in ascending order, and every depth gives the same
  bits (tests/kernels/test_tiles.py checks it).
"""

from __future__ import annotations

import dataclasses
import functools
import re
import time
from collections.abc import Callable
from pathlib import Path

CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")
CPUINFO = Path("/proc/cpuinfo")

# Caches assumed where /sys cannot be read: 32 KiB of L1d and 1 MiB of L2 per core, the
# smallest of current x86 server cores (Skylake-SP to Sapphire Rapids have 32-48 KiB and
# 1-2 MiB, Zen 2-4 32 KiB and 512 KiB-1 MiB): a block sized for them fits the larger ones.
FALLBACK_CACHES = {"L1d": 32 << 10, "L2": 1 << 20}

# kernels/matmul.py's block of b is NC columns wide (kept here to size it without
# importing the kernels; tests/kernels/test_tiles.py checks the two agree).
GEMM_BLOCK_COLS = 256
# The depth of a block, in bytes of k values per column (float32: bytes / 4 values of k),
# is a power of two between these: below 1 KiB the tile reloads its sums from ``out``
# too often, above 8 KiB a sliver of a (MR x depth) no longer fits a 32 KiB L1d.
GEMM_DEPTH_MIN, GEMM_DEPTH_MAX = 1 << 10, 8 << 10


@dataclasses.dataclass(frozen=True)
class HostFacts:
    cpu_model: str
    vector_bytes: int
    caches: dict  # "L1d", "L2", "L3" (those found) -> bytes per instance
    caches_from: str  # where ``caches`` came from: the directory read, or "fallback"


def parse_size(text: str) -> int:
    """Bytes of a /sys cache size such as "48K", "2048K", "32M" or "1024"."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", text, re.IGNORECASE)
    if match is None:
        raise ValueError(f"not a cache size: {text!r}")
    shift = {"": 0, "K": 10, "M": 20, "G": 30}[match.group(2).upper()]
    return int(match.group(1)) << shift


def read_caches(root: Path = CACHE_DIR) -> dict[str, int]:
    """{"L1d": bytes, "L2": bytes, ...} of the data and unified caches listed under
    ``root`` (a /sys/devices/system/cpu/cpuN/cache directory); empty if none can be read."""
    caches: dict[str, int] = {}
    try:
        entries = sorted(root.glob("index*"))
    except OSError:
        return caches
    for entry in entries:
        try:
            level = int((entry / "level").read_text())
            kind = (entry / "type").read_text().strip()
            size = parse_size((entry / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind == "Instruction":
            continue
        caches[f"L{level}d" if level == 1 else f"L{level}"] = size
    return caches


def read_cpu_model(cpuinfo: Path = CPUINFO) -> str:
    """The "model name" of /proc/cpuinfo, else the processor name Python reports."""
    try:
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "unknown"


def host_facts(cache_dir: Path = CACHE_DIR, cpuinfo: Path = CPUINFO,
               vector_bytes: int | None = None) -> HostFacts:
    """The facts above; the caches missing from ``cache_dir`` (L1d, L2) are
    FALLBACK_CACHES's."""
    if vector_bytes is None:
        from .startup import host_vector_bytes

        vector_bytes = host_vector_bytes()
    caches = read_caches(cache_dir)
    found = all(name in caches for name in FALLBACK_CACHES)
    for name, size in FALLBACK_CACHES.items():
        caches.setdefault(name, size)
    return HostFacts(read_cpu_model(cpuinfo), vector_bytes, caches,
                     str(cache_dir) if found else "fallback")


def gemm_depth_bytes(caches: dict[str, int]) -> int:
    """Depth of kernels/matmul.py's blocks of b, in bytes of k values: the largest power
    of two (within GEMM_DEPTH_MIN..MAX) whose block of GEMM_BLOCK_COLS columns fills at
    most half of L2 (the other half holds out's rows and the slivers of a on their way)
    and whose sliver of a (MR <= 4 rows) at most a quarter of L1d (the rest holds the
    lines of b's panel being read)."""
    depth = GEMM_DEPTH_MAX
    while depth > GEMM_DEPTH_MIN and (depth * GEMM_BLOCK_COLS > caches["L2"] // 2
                                      or 4 * depth > caches["L1d"] // 4):
        depth //= 2
    return depth


@functools.cache
def facts() -> HostFacts:
    """This host's facts (read once per process)."""
    return host_facts()


@functools.cache
def gemm_depth() -> int:
    """``gemm_depth_bytes`` of this host."""
    return gemm_depth_bytes(facts().caches)



def best_time(fn: Callable[[], object], repeats: int) -> float:
    """The shortest wall time of ``repeats`` calls of fn() (the least disturbed by other
    work on the host)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best
