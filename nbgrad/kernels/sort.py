"""Stable sorting and top-k selection along the rows of a C-contiguous ``keys[R, N]``.

The keys are unsigned 64-bit integers whose order is the wanted order of the values
(``ordered_keys`` maps the bits of floats and integers onto them), so the sorting
kernels compare integers only and never meet a NaN. Each row is one task, and a row's
result depends on that row alone: the same bits at any thread count.

* ``argsort_rows``: a least-significant-digit radix sort, 8 bits per pass: count the
  digits, turn the counts into starting positions, move every (key, index) pair to its
  digit's next position in order of appearance. Each pass is stable, so after the last
  one equal keys keep their order in the row. A pass whose digit is the same for the
  whole row moves nothing and is skipped (the high bytes of 32-bit keys).
* ``smallest_rows``: the k smallest keys of each row in order, by insertion into a
  sorted buffer of k entries: one comparison for most elements, a shift of the buffer
  for the few that enter it. Strict comparisons keep the lower index first among ties.
"""

import numpy as np
from numba import njit, prange

from ..runtime.jit import PARALLEL, SERIAL, njit_with_serial

DIGITS = 256

#: What the bits of ``ordered_keys`` hold.
FLOAT, SIGNED, UNSIGNED = 0, 1, 2


@njit(**SERIAL)
def _key(bits, width, kind, infinity, descending):
    """The bits of a value (``width`` bytes of a FLOAT, SIGNED or UNSIGNED number) as a
    key that orders like the value, or reversed for ``descending`` (the complement within
    the width).

    Floats: positives get the sign bit set, negatives have every bit flipped, so the
    keys of -inf < ... < -0.0 < 0.0 < ... < inf ascend; -0.0 counts as 0.0 (they tie,
    as in PyTorch) and every NaN (magnitude bits above ``infinity``'s) gets the
    largest key. Signed integers: the sign bit flipped."""
    top = np.uint64(1) << np.uint64(8 * width - 1)
    ones = np.uint64(0xFFFFFFFFFFFFFFFF) >> np.uint64(64 - 8 * width)
    b = np.uint64(bits)
    if kind == FLOAT:
        if b & ~top > np.uint64(infinity):
            b = ones  # NaN
        elif b == top:  # -0.0
            b = top
        else:
            b = ~b & ones if b & top else b | top
    elif kind == SIGNED:
        b = b ^ top
    return b ^ ones if descending else b


@njit_with_serial(**PARALLEL)
def ordered_keys(bits, width, kind, infinity, descending, keys):
    """keys[r, j] = ``_key`` of bits[r, j]."""
    R, N = bits.shape
    for r in prange(R):
        for j in range(N):
            keys[r, j] = _key(bits[r, j], width, kind, infinity, descending)


@njit_with_serial(**PARALLEL)
def argsort_rows(keys, passes, idx):
    """idx[r] = the stable permutation that sorts keys[r] ascending, over the lowest
    ``passes`` bytes of the keys."""
    R, N = keys.shape
    mask = np.uint64(DIGITS - 1)
    for r in prange(R):
        src_key = keys[r].copy()
        dst_key = np.empty_like(src_key)
        src_idx = np.arange(N)
        dst_idx = np.empty_like(src_idx)
        start = np.empty(DIGITS, np.int64)
        for p in range(passes):
            shift = np.uint64(8 * p)
            start[:] = 0
            for j in range(N):
                start[(src_key[j] >> shift) & mask] += 1
            if start[(src_key[0] >> shift) & mask] == N:
                continue
            total = 0
            for d in range(DIGITS):
                count = start[d]
                start[d] = total
                total += count
            for j in range(N):
                d = (src_key[j] >> shift) & mask
                position = start[d]
                start[d] = position + 1
                dst_key[position] = src_key[j]
                dst_idx[position] = src_idx[j]
            src_key, dst_key = dst_key, src_key
            src_idx, dst_idx = dst_idx, src_idx
        idx[r, :] = src_idx


@njit(**SERIAL)
def _insert(kept_key, kept_idx, slot, key, j):
    """Put (key, j) into the sorted buffer, whose entries from ``slot`` on are free or
    leaving: larger keys move one place up; an equal key stays before it."""
    while slot > 0 and kept_key[slot - 1] > key:
        kept_key[slot] = kept_key[slot - 1]
        kept_idx[slot] = kept_idx[slot - 1]
        slot -= 1
    kept_key[slot] = key
    kept_idx[slot] = j


@njit_with_serial(**PARALLEL)
def smallest_rows(bits, width, kind, infinity, descending, idx):
    """idx[r] = the positions of the k = idx.shape[1] smallest ``_key``s of row r of
    ``bits`` in ascending order of key, the lower position first among equal keys
    (1 <= k <= N). The row's keys are made first (a loop LLVM vectorises); the first k
    fill the buffer, and after them an element enters only if its key is below the
    largest kept one, which then leaves."""
    R, N = bits.shape
    k = idx.shape[1]
    for r in prange(R):
        keys = np.empty(N, np.uint64)
        for j in range(N):
            keys[j] = _key(bits[r, j], width, kind, infinity, descending)
        kept_key = np.empty(k, np.uint64)
        kept_idx = np.empty(k, np.int64)
        for j in range(k):
            _insert(kept_key, kept_idx, j, keys[j], j)
        largest = kept_key[k - 1]
        for j in range(k, N):
            if keys[j] < largest:
                _insert(kept_key, kept_idx, k - 1, keys[j], j)
                largest = kept_key[k - 1]
        idx[r, :] = kept_idx
