"""Compile options of the kernels, the vectorised reductions they share, and the size
from which the element-wise families run in parallel.

Every kernel is a module-level ``@njit(**PRESET)`` function (``inline="always"`` may be
added). A preset fixes three things that change the generated code, so each kernel keeps
the one its bit-for-bit tests were written against:

* ``parallel``: ``prange`` loops run on Numba's thread pool. Each parallel kernel splits
  its work by the shapes alone (each task owns its outputs, or writes a partial that is
  summed in a fixed order), so its bits do not depend on the thread count.
* ``error_model="numpy"`` (the ``IEEE_DIV`` presets): x / 0 is +-inf or NaN, as in NumPy
  and PyTorch, instead of raising ZeroDivisionError; without the zero test the loops
  vectorise.
* ``fastmath`` flags, which LLVM applies per floating-point instruction:
  ``contract`` (``FMA``): a * b + c may be one fused multiply-add, rounded once;
  ``reassoc``: a sum may be split into vector partial sums, in an order fixed at compile
  time by the vector width, never by the thread count;
  ``nsz``: the sign of a zero result is not significant.
  ``FUSED`` is reassoc + contract. No preset drops inf/NaN semantics (nnan, ninf).
"""

from numba import njit

FMA = {"contract"}
REASSOC = {"reassoc"}
FUSED = {"reassoc", "contract"}
REASSOC_NSZ = {"reassoc", "nsz"}

SERIAL = {"cache": True}
PARALLEL = {"cache": True, "parallel": True}
SERIAL_FMA = {"cache": True, "fastmath": FMA}
SERIAL_REASSOC = {"cache": True, "fastmath": REASSOC}
PARALLEL_REASSOC = {"cache": True, "parallel": True, "fastmath": REASSOC}
SERIAL_FUSED = {"cache": True, "fastmath": FUSED}
PARALLEL_FUSED = {"cache": True, "parallel": True, "fastmath": FUSED}
SERIAL_IEEE_DIV = {"cache": True, "error_model": "numpy"}
PARALLEL_IEEE_DIV = {"cache": True, "parallel": True, "error_model": "numpy"}
SERIAL_IEEE_DIV_REASSOC_NSZ = {"cache": True, "error_model": "numpy", "fastmath": REASSOC_NSZ}
PARALLEL_IEEE_DIV_FMA = {"cache": True, "parallel": True, "error_model": "numpy",
                         "fastmath": FMA}

# Below this many elements the element-wise, broadcast and reduction kernels run serially:
# waking the threads would cost more than the loop.
PARALLEL_MIN = 1 << 17
# Elements per task of their parallel forms (fixed, so every partial sum is the same at
# any thread count).
CHUNK = 1 << 16


@njit(**SERIAL_FUSED)
def dot(a, b, n):
    """sum_{j < n} a[j] * b[j], reassociated so that LLVM vectorises it (the summation
    order depends on the machine's vector width, never on the thread count), with FMA."""
    acc = a.dtype.type(0)
    for j in range(n):
        acc += a[j] * b[j]
    return acc


@njit(**SERIAL_FUSED)
def vector_sum(a):
    """sum of a 1-D array in a's dtype, reassociated like ``dot``."""
    s = a.dtype.type(0)
    for j in range(a.size):
        s += a[j]
    return s
