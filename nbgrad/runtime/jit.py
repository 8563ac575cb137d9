"""Compile options of the kernels, the vectorised reductions they share, and the size
from which the element-wise families run in parallel.

Every kernel is a module-level ``@njit(**PRESET)`` function (``inline="always"`` may be
added), or ``@compiled_once(signature_of, **PRESET)`` for a large body that several
kernels or a parallel loop call. A preset fixes three things that change the generated
code, so each kernel keeps the one its bit-for-bit tests were written against:

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

import functools
import types
from collections.abc import Callable

from llvmlite import binding as llvm_binding
from llvmlite import ir
from numba import cfunc, njit
from numba import types as nb_types
from numba.core import cgutils, errors
from numba.extending import intrinsic

from . import cache
from .compile_ahead import compile_hook
from .startup import target_vector_bytes

# Before the first ``njit(cache=True)`` of nbgrad, since every kernel module imports its
# preset from here (tests/testcache.py checks every cached dispatcher of nbgrad).
cache.install()

#: The width of the vectors the kernels compile to, for the CPU Numba compiles for (its host's,
#: or the one NUMBA_CPU_NAME / NUMBA_CPU_FEATURES name): 64 (AVX-512 zmm), 32 (AVX ymm) or 16.
#: kernels/tiles.py sizes the register tiles by it (runtime/startup.py: target_vector_bytes).
VECTOR_BYTES = target_vector_bytes()

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
SERIAL_IEEE_DIV_FMA = {"cache": True, "error_model": "numpy", "fastmath": FMA}
PARALLEL_IEEE_DIV_FMA = {"cache": True, "parallel": True, "error_model": "numpy",
                         "fastmath": FMA}

# The serial/parallel policy, in one place (docs/threads.md): a kernel with a serial and a
# parallel form runs the parallel one when its work, in the unit its family counts,
# reaches its family's minimum below (``work >= PARALLEL_MIN``, or ``for_work``). Below
# it waking the threads costs more than the loop, and when another process holds a core
# a parallel region waits for it, which can cost a hundred times the loop
# (docs/benchmarks.md#threads).
#
# Elements of the element-wise, broadcast, reduction, activation and loss kernels.
PARALLEL_MIN = 1 << 17
# Multiply-adds of the convolution, matmul and Gram-Schmidt kernels. With a busy core,
# parallel regions pay only past several million; on an idle machine a region's fixed
# cost is about a tenth of a 1M-MAC call, so 2^20 is where splitting starts to pay.
PARALLEL_WORK_MIN = 1 << 20
# Multiply-adds of the 'cols' convolution kernels, which share blocks of images out over
# the threads: below about 2^18 waking the second thread costs more than it saves.
COLS_PARALLEL_MIN = 1 << 18
# Elements of x read (forward) or dx written (backward) by a pooling kernel: about where
# two threads start to beat one on the max-pool kernels (docs/benchmarks.md#pooling).
POOL_PARALLEL_MIN = 1 << 14
# Grid points of a slice (FFT) or complex multiply-adds (mode mixing) of the spectral
# kernels.
SPECTRAL_PARALLEL_MIN = 1 << 15
# Basis elements of the Laplace-operator kernels (row-parallel).
LAPLACE_PARALLEL_MIN = 1 << 18
# Elements per task of their parallel forms (fixed, so every partial sum is the same at
# any thread count).
CHUNK = 1 << 16



@intrinsic
def plain(typingctx, value):
    """``value`` without its literal type. A constant that jitted code passes to a helper
    (``f(x, 0)``, ``f(x, True)``) is typed as a literal, and Numba compiles the helper,
    with all it calls, once per literal value and once more for a variable; ``plain(0)``
    is an int64 like any other (docs/compiling.md)."""
    to = nb_types.unliteral(value)

    def codegen(context, builder, signature, args):
        return context.cast(builder, args[0], signature.args[0], to)

    return to(value), codegen




def njit_with_serial(**preset) -> Callable:
    """Decorator: ``njit(**preset)`` of a loop nest with ``prange`` (a parallel preset),
    with ``.serial``, the same loop nest compiled without ``parallel`` (``prange`` runs
    as ``range``; same flags otherwise, so the same bits wherever each output element is
    computed by one iteration). The serial form is compiled from a copy of the function
    named ``<name>_serial``: Numba's disk cache keys kernels by name, not by flags."""
    serial_preset = {k: v for k, v in preset.items() if k != "parallel"}

    def decorate(fn: Callable) -> Callable:
        kernel = njit(**preset)(fn)
        twin = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + "_serial",
                                  fn.__defaults__, fn.__closure__)
        twin.__qualname__ = fn.__qualname__ + "_serial"
        twin.__module__ = fn.__module__
        twin.__doc__ = fn.__doc__
        kernel.serial = njit(**serial_preset)(twin)
        return kernel

    return decorate


def for_work(kernel: Callable, work: int, minimum: int = PARALLEL_MIN) -> Callable:
    """The parallel form of an ``njit_with_serial`` kernel for ``work`` (elements, or the
    kernel's unit of work) at or above ``minimum`` (PARALLEL_MIN; the convolution and
    pooling ops pass PARALLEL_WORK_MIN), else its serial form."""
    return kernel if work >= minimum else kernel.serial


def compiled_once(signature_of: Callable, early: bool = False, **preset) -> Callable:
    """Decorator: ``fn`` compiled once per dtype as a C function (``cfunc``) of the
    signature ``signature_of(dtype)``, under a fixed symbol name, and callable from
    jitted code (only) through the returned intrinsic.

    Numba links the LLVM IR of every function a kernel calls into the kernel's module and
    optimises and emits all of it again, once per caller (the parallel region's body
    and the kernel are two). A C function is optimised once; callers only name its
    symbol, which the JIT linker resolves (in a fresh process through the cache's
    check, ``cache.provide_symbol``). Arrays are passed as Numba's array structures,
    so the function body is the plain jitted code. The dtype (float32 or float64, the
    ones whose symbols the cache knows) is that of the first array argument of a call;
    Numba casts the other arguments to the signature's types.

    ``early``: for a function nearly every model's first layer calls (the GEMM's block),
    the compile helper compiles it into the cache at the process's first compile of each
    dtype, while this process compiles the kernel that calls it
    (runtime/compile_ahead.py: ``BackwardAhead.compile_early``)."""

    def decorate(fn: Callable) -> Callable:
        def symbol(dtype) -> str:
            return f"nbgrad_{fn.__module__}.{fn.__qualname__}_{dtype}"

        @functools.cache
        def provide(dtype):
            if early:
                compile_hook.wait_early(str(dtype))
            entry = cfunc(signature_of(dtype), **preset)(fn)
            llvm_binding.add_symbol(symbol(dtype), entry.address)
            return entry

        dtypes = (nb_types.float32, nb_types.float64)
        for dtype in dtypes:
            cache.provide_symbol(symbol(dtype), functools.partial(provide, dtype))

        @intrinsic
        def call(typingctx, *args):
            dtype = next(a.dtype for a in args if isinstance(a, nb_types.Array))
            sig = signature_of(dtype)
            if dtype not in dtypes or len(args) != len(sig.args) or any(
                    typingctx.can_convert(a, t) is None for a, t in zip(args, sig.args)):
                raise errors.TypingError(f"{fn.__name__}: takes {sig.args}, got {args}")
            provide(dtype)

            def codegen(context, builder, signature, values):
                fnty = ir.FunctionType(context.get_value_type(sig.return_type),
                                       [context.get_value_type(t) for t in sig.args])
                callee = cgutils.get_or_insert_function(builder.module, fnty, symbol(dtype))
                builder.call(callee, cgutils.unpack_tuple(builder, values[0]))
                return context.get_dummy_value()

            # *args arrive as one tuple, its items cast to the C function's parameter types
            return sig.return_type(nb_types.StarArgTuple.from_types(sig.args)), codegen

        call.__doc__ = fn.__doc__
        call.provide = provide
        if early:
            compile_hook.compile_early(fn.__module__, fn.__name__)
        return call

    return decorate
