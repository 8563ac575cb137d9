"""What ``import nbgrad`` does besides defining names: it has Numba's one-time set-up run
at the first kernel with Python's cyclic garbage collector paused
(docs/compiling.md#what-a-warm-start-costs), it has glibc's malloc keep freed arrays for
reuse (docs/memory.md), and on AVX-512 CPUs it has LLVM vectorise with the full 512-bit
registers (docs/compiling.md#vector-width)."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib.util
import os
import sys
import types
from collections.abc import Iterator

# glibc's mallopt parameters, and the values nbgrad sets: blocks below 32 MiB come from
# the heap (glibc's own ceiling for its adaptive threshold on 64-bit), and up to 64 MiB
# of free memory at the heap's top stay mapped (twice that, as the adaptive rule sets).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 64 << 20
# The environment's own malloc settings, which nbgrad then leaves alone.
MALLOC_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
                   "MALLOC_MMAP_MAX_")


# LLVM's tuning flag that halves the vector width on most Intel AVX-512 CPUs.
PREFER_256_BIT = "prefer-256-bit"


def host_vector_bytes() -> int:
    """Width of the widest float vector registers of this CPU (64, 32 or 16 bytes), which
    may not be what Numba compiles for (``target_vector_bytes``)."""
    from llvmlite import binding as llvm

    features = llvm.get_host_cpu_features()
    if features.get("avx512f", False):
        return 64
    if features.get("avx", False):
        return 32
    return 16


# A loop LLVM's vectoriser widens to the vector registers it prefers for the CPU and
# features it compiles for: x[i] += 2 y[i] over float32.
VECTOR_PROBE = r"""
define void @probe(float* noalias nocapture %x, float* noalias nocapture readonly %y, i64 %n) {
entry:
  %any = icmp sgt i64 %n, 0
  br i1 %any, label %loop, label %exit
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  %px = getelementptr inbounds float, float* %x, i64 %i
  %py = getelementptr inbounds float, float* %y, i64 %i
  %xi = load float, float* %px
  %yi = load float, float* %py
  %twice = fmul float %yi, 2.0
  %sum = fadd float %xi, %twice
  store float %sum, float* %px
  %next = add nuw nsw i64 %i, 1
  %more = icmp slt i64 %next, %n
  br i1 %more, label %loop, label %exit
exit:
  ret void
}
"""


def numba_target() -> tuple[str, str]:
    """The CPU name and feature string Numba compiles for: those of its code generator
    once it exists, else what it will be created with (``NUMBA_CPU_NAME`` and
    ``NUMBA_CPU_FEATURES`` as Numba's configuration read them, ``prefer_full_vectors``'
    setting, the host's name and features for what is unset). A name without features
    keeps the host's features: ``NUMBA_CPU_NAME=haswell`` alone on an AVX-512 host still
    compiles AVX-512 code, only tuned for Haswell."""
    from llvmlite import binding as llvm
    from numba.core import config
    from numba.core.codegen import get_host_cpu_features
    from numba.core.registry import cpu_target

    if "_toplevel_target_context" in vars(cpu_target):  # the code generator exists
        _, name, features = cpu_target.target_context.codegen().magic_tuple()
        return name, features
    name = config.CPU_NAME if config.CPU_NAME is not None else llvm.get_host_cpu_name()
    features = (config.CPU_FEATURES if config.CPU_FEATURES is not None
                else get_host_cpu_features())
    return name, features


def target_vector_bytes() -> int:
    """Width of the vectors Numba's loops compile to, in bytes: the vector width LLVM's
    loop vectoriser chooses for the CPU name and features Numba compiles for
    (``numba_target``), which are the host's only when the environment names no CPU.
    On x86 that is 64 (zmm) only with ``avx512f`` and without the ``prefer-256-bit``
    tuning (on by default for Intel's AVX-512 cores, off after ``prefer_full_vectors``),
    32 with AVX, 16 with SSE2 alone; on aarch64, NEON's 16."""
    return vectorised_bytes(*numba_target())


def vectorised_bytes(name: str, features: str) -> int:
    """The widest float vector, in bytes, in ``VECTOR_PROBE`` optimised at -O3 (as Numba
    optimises a kernel) for CPU ``name`` with ``features``; 16 if it has none. About
    5-10 ms. LLVM's new pass manager where llvmlite has it (0.44 on), else the legacy
    one (Numba 0.60's llvmlite)."""
    import re

    from llvmlite import binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    triple = llvm.get_process_triple()
    machine = llvm.Target.from_triple(triple).create_target_machine(
        cpu=name, features=features, opt=3)
    module = llvm.parse_assembly(VECTOR_PROBE)
    module.triple = triple
    if hasattr(llvm, "create_pass_builder"):
        tuning = llvm.create_pipeline_tuning_options(speed_level=3)
        tuning.loop_vectorization = True
        passes = llvm.create_pass_builder(machine, tuning)
        passes.getModulePassManager().run(module, passes)
    else:
        builder = llvm.PassManagerBuilder()
        builder.opt_level, builder.loop_vectorize = 3, True
        passes = llvm.ModulePassManager()
        machine.add_analysis_passes(passes)
        builder.populate(passes)
        passes.run(module)
    lanes = max(map(int, re.findall(r"<(\d+) x float>", str(module))), default=1)
    return max(16, 4 * lanes)


def prefer_full_vectors() -> bool:
    """On an x86 CPU with AVX-512, turn off LLVM's ``prefer-256-bit`` tuning for the
    code Numba compiles; whether it did. With it on (LLVM's default for Intel's AVX-512
    cores), loops vectorise to 8 float32 lanes, not 16, and the matmul kernels' 64-column
    tiles spill their registers. Left alone when the environment chooses the CPU
    (``NUMBA_CPU_NAME``, ``NUMBA_CPU_FEATURES``) or when Numba's code generator already
    exists (something was compiled before ``import nbgrad``): it reads the features once."""
    from llvmlite import binding as llvm
    from numba.core import config
    from numba.core.codegen import get_host_cpu_features
    from numba.core.registry import cpu_target

    if config.CPU_NAME is not None or config.CPU_FEATURES is not None:
        return False
    if not llvm.get_process_triple().startswith("x86_64") or host_vector_bytes() != 64:
        return False
    if "_toplevel_target_context" in vars(cpu_target):  # the code generator exists
        return False
    config.CPU_FEATURES = f"{get_host_cpu_features()},-{PREFER_256_BIT}"
    return True


def numba_target_env() -> dict[str, str]:
    """The environment that has a helper process compile for the CPU this process
    compiles for (Numba's cache keeps kernels apart by CPU name and features, so a helper
    that chose differently would compile kernels this process never loads). Read from
    Numba's code generator, which keeps what it was created with: ``config.CPU_FEATURES``
    goes back to the environment's value whenever Numba reloads its configuration."""
    from numba.core.registry import cpu_target

    _, name, features = cpu_target.target_context.codegen().magic_tuple()
    return {"NUMBA_CPU_NAME": name, "NUMBA_CPU_FEATURES": features}


@contextlib.contextmanager
def numba_target_environ() -> Iterator[None]:
    """``numba_target_env()`` in ``os.environ`` inside the block, for the processes
    started there to inherit; the variables as they were after it."""
    env = numba_target_env()
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic collection inside the block; afterwards every tracked object is moved to
    the oldest generation and the collector's on/off state is restored.

    An import builds some 140,000 long-lived objects (modules, Numba's typing tables) and
    almost no garbage, yet each collection it triggers scans all of them, and once the
    collector is back on, the young generations would scan them twice more on their way
    to the oldest. ``freeze`` then ``unfreeze`` is that move, done without a scan; the
    user's own young objects move along and are collected with the oldest generation."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.unfreeze()
        if was_enabled:
            gc.enable()


def ready_numba_at_first_kernel() -> None:
    """Have Numba's one-time set-up run with the cyclic collector paused
    (``collector_paused``) when the first kernel compiles or loads, not at import: loading
    the ``numba_extensions`` entry points (rocket-fft's brings in ``scipy.fft``) and
    filling the typing and lowering registries, about 0.3 s that a script which runs no
    kernel never pays. Numba starts its set-up from ``entrypoints.init_all``, which every
    dispatcher calls before it compiles or loads; the wrapper runs once, then puts
    Numba's function back."""
    from numba.core import entrypoints
    from numba.core.registry import cpu_target

    load_extensions = entrypoints.init_all

    def set_up() -> None:
        entrypoints.init_all = load_extensions
        with collector_paused():
            load_extensions()
            cpu_target.typing_context.refresh()
            cpu_target.target_context.refresh()

    entrypoints.init_all = set_up


def lazy_module(name: str) -> types.ModuleType:
    """Module ``name``, executed at the first access to one of its attributes (the
    standard library's ``LazyLoader``): for kernels whose imports are costly and that a
    script may never call (the spectral kernels import rocket-fft, which imports
    ``scipy.fft``: about 0.2 s)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def is_glibc() -> bool:
    """Whether the process runs on glibc (whose malloc the settings here are for)."""
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (ValueError, OSError):  # no such name on this platform
        return False


def keep_freed_memory() -> bool:
    """Have glibc's malloc reuse freed blocks of up to MMAP_THRESHOLD bytes instead of
    unmapping them, so that a training step's arrays do not come back as fresh pages
    (docs/memory.md); whether the thresholds were set. Not under another C library, and
    not where the environment sets glibc's malloc options (MALLOC_SETTINGS, or
    ``glibc.malloc`` tunables in GLIBC_TUNABLES)."""
    if not is_glibc():
        return False
    if (any(name in os.environ for name in MALLOC_SETTINGS)
            or "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", "")):
        return False
    mallopt = ctypes.CDLL(None).mallopt
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
                and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
