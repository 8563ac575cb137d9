"""Large output arrays taken from a pool of earlier ones that nothing uses any more, instead
of fresh pages.

glibc serves a block of ``POOL_MIN_BYTES`` (32 MiB, nbgrad's mmap threshold:
docs/memory.md) or more with ``mmap`` and unmaps it on ``free``, so each such array a
training step makes arrives as fresh memory that the OS zeroes on its first write and
takes back on free: on a virtual machine this can cost more than the kernel filling the
array (docs/memory.md#large-arrays-from-a-pool).
``empty`` hands out an array of that size from a pool of earlier ones of the same number
of bytes that nothing references any more -- no tensor, saved value or view holds them,
which their reference count tells -- and keeps at most ``idle_budget()`` bytes of them
unused. Like ``np.empty``, the contents are whatever was there; the kernels that take
these arrays write every element.
"""

from __future__ import annotations

import functools
import math
import os
import sys
import threading

import numpy as np

#: Arrays of at least this many bytes come from the pool; malloc reuses smaller ones.
POOL_MIN_BYTES = 32 << 20

_pool: list[np.ndarray] = []   # uint8 bases, the most recently handed out last
_lock = threading.Lock()


@functools.cache
def _eighth_of_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 8
    except (ValueError, OSError, AttributeError):  # no sysconf: 1 GiB
        return 1 << 30


def idle_budget() -> int:
    """The bytes of unused arrays the pool keeps: ``NBGRAD_POOL_BYTES`` (0 turns the
    pool off), else an eighth of the physical memory."""
    given = os.environ.get("NBGRAD_POOL_BYTES")
    return _eighth_of_memory() if given is None else max(0, int(given))


def empty(shape: int | tuple, dtype: np.dtype) -> np.ndarray:
    """``np.empty(shape, dtype)`` (C order), from the pool when it is large enough. Every
    element-wise op and product of any size calls this, so the size is worked out in
    plain Python (``np.prod`` of a tuple would cost each call 3 us)."""
    dtype = np.dtype(dtype)
    count = shape if isinstance(shape, (int, np.integer)) else math.prod(shape)
    nbytes = int(count) * dtype.itemsize
    if nbytes < POOL_MIN_BYTES:
        return np.empty(shape, dtype)
    budget = idle_budget()
    if nbytes > budget:
        return np.empty(shape, dtype)
    with _lock:  # one thread at a time checks and takes a base
        base = _take(nbytes)
        if base is None:
            _trim(budget - nbytes)
            base = np.empty(nbytes, np.uint8)
        _pool.append(base)
        return base.view(dtype).reshape(shape)


def _unused(i: int) -> bool:
    """Whether only the pool references ``_pool[i]`` (its list slot and the argument)."""
    return sys.getrefcount(_pool[i]) == 2


def _take(nbytes: int) -> np.ndarray | None:
    """An unused base of ``nbytes``, removed from the pool, or None."""
    for i in range(len(_pool) - 1, -1, -1):
        if _pool[i].nbytes == nbytes and _unused(i):
            return _pool.pop(i)
    return None


def _trim(keep: int) -> None:
    """Drop unused bases, the least recently handed out first, until those left come to
    at most ``keep`` bytes."""
    unused = [i for i in range(len(_pool)) if _unused(i)]
    idle = sum(_pool[i].nbytes for i in unused)
    dropped = set()
    for i in unused:
        if idle <= keep:
            break
        idle -= _pool[i].nbytes
        dropped.add(i)
    _pool[:] = [b for i, b in enumerate(_pool) if i not in dropped]


def pool_references(base: np.ndarray) -> int:
    """The references the pool holds to the array ``base`` (1 for one of its own, else 0),
    for a caller that counts references to tell whether an array is shared."""
    return int(any(b is base for b in _pool))


def pooled_bytes() -> tuple[int, int]:
    """(bytes of the pool's arrays in use, bytes unused)."""
    with _lock:
        unused = [_unused(i) for i in range(len(_pool))]
        sizes = [b.nbytes for b in _pool]
    used = sum(n for n, u in zip(sizes, unused) if not u)
    return used, sum(sizes) - used
