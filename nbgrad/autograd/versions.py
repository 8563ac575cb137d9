"""Version counters: how backward refuses gradients computed from a saved tensor that was
changed in place after the forward (PyTorch's "modified by an inplace operation" error).

One clock numbers both the graph nodes, as they are made (``Context.seq``), and the
in-place writes. Every storage that was written in place, viewed or saved as an op's
output has a ``Version``: its number of writes and the clock reading of the last one.
Tensors that view one storage share it.

A node's saved tensors are then checked without any work in the forward: a saved input
was changed after the node was made exactly when its counter's last write is newer than
the node. And backward looks at a node's inputs only when some write anywhere is newer
than the node (``writes.last``), which in a training loop means only for a graph kept
across an optimiser step: a graph made after the last write has nothing to check. A
saved output is not reachable from its node, so an op that saves its output gives that
output its counter in the forward and the node keeps it (``Context.saved_versions``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from itertools import count
from typing import Any

import numpy as np

from . import tracing

clock = count()  # node numbers and write stamps, one sequence


class _Writes:
    """The clock reading of the newest in-place write in the process (-1: none yet)."""

    last = -1


writes = _Writes()


class Version:
    """The version counter of one storage: the number of in-place writes, and when the
    most recent ones happened (enough of them to tell the version a node saw)."""

    __slots__ = ("value", "last", "recent")

    def __init__(self) -> None:
        self.value = 0
        self.last = -1
        self.recent: deque | None = None  # made at the first write

    def bump(self) -> None:
        """Count one in-place write, now."""
        Version.bump_all((self,))

    @staticmethod
    def bump_all(counters: Sequence[Version]) -> None:
        """Count one in-place write of each storage, all at one clock reading (an
        optimiser's step)."""
        if tracing.recorder is not None:
            tracing.recorder.event("an in-place write", None)
        stamp = next(clock)
        for c in counters:
            c.value += 1
            c.last = stamp
            if c.recent is None:
                c.recent = deque(maxlen=32)
            c.recent.append(stamp)
        writes.last = stamp

    def at(self, seq: int) -> int:
        """The version when the node numbered ``seq`` was made (exact while fewer than 32
        writes came after it)."""
        return self.value - sum(1 for stamp in self.recent or () if stamp > seq)


def _root(array: np.ndarray) -> np.ndarray:
    """The array that owns ``array``'s memory (itself if it is not a view of another)."""
    while type(array.base) is np.ndarray:
        array = array.base
    return array


def same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` and ``b`` are one array or views of the memory of one."""
    return a is b or _root(a) is _root(b)


def owner(array: np.ndarray, tensors: tuple) -> int | None:
    """The position in ``tensors`` of the tensor whose array is ``array`` or shares its
    memory (None if there is none; non-tensors are passed over)."""
    for i, t in enumerate(tensors):
        data = getattr(t, "_data", None)
        if data is not None and same_memory(array, data):
            return i
    return None


def saved_inputs(node: Any) -> list[int]:
    """The positions of the node's inputs whose arrays (or views of them) it saved."""
    found = []
    for s in node.saved_tensors:
        if type(s) is np.ndarray:
            i = owner(s, node.inputs)
            if i is not None and i not in found:
                found.append(i)
    return found


def check(node: Any) -> None:
    """Raise PyTorch's error if a tensor the node saved was changed in place after it
    was made."""
    seq = node.seq
    for i in saved_inputs(node):
        counter = node.inputs[i]._counter
        if counter is not None and counter.last > seq:
            t = node.inputs[i]
            raise _error(node, f"input {i}", t.shape, t.dtype, counter, seq)
    for counter, k, shape, dtype in node.saved_versions:
        if counter.last > seq:
            raise _error(node, f"output {k}", shape, dtype, counter, seq)


def _error(node: Any, which: str, shape: tuple, dtype: Any, counter: Version,
           seq: int) -> RuntimeError:
    return RuntimeError(
        f"one of the variables needed for gradient computation has been modified by an "
        f"inplace operation: [{dtype} {list(shape)}], which is {which} of "
        f"{node.name}Backward, is at version {counter.value}; expected version "
        f"{counter.at(seq)} instead. Clone it before changing it in place (or change it "
        f"after backward).")
