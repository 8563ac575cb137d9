"""What importing nbgrad does: any submodule imports first in a fresh interpreter, the
import readies Numba (runtime/startup.py: the collector, malloc, the vector width) and
leaves what it need not load; the structure of the imports is tests/test_architecture.py's."""

import os
import subprocess
import sys

import pytest
from llvmlite import binding as llvm
from numba.core.codegen import get_host_cpu_features


@pytest.mark.parametrize("module", ["nbgrad.function", "nbgrad.tensor", "nbgrad.autograd",
                                    "nbgrad.ops.activation", "nbgrad.testing"])
def test_a_submodule_imports_first_in_a_fresh_interpreter(module):
    code = f"import {module}; import nbgrad; nbgrad.tensor([1.0]) + 1"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_import_and_the_digits_load_leave_the_pde_solvers_alone():
    """``import nbgrad`` and loading the bundled digits import neither the PDE data sets
    nor SciPy's sparse solver: the warm start of a small model pays only for what it
    runs. (scipy.linalg and scipy.fft are Numba's: its set-up imports them.)"""
    code = ("import sys, nbgrad; from nbgrad.datasets import split_digits; split_digits(0)\n"
            "print(sorted(m for m in ('scipy.sparse', 'nbgrad.datasets.darcy', "
            "'nbgrad.datasets.heat') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], check=True, timeout=120,
                          capture_output=True, text=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("collector", ["enabled", "disabled"])
def test_import_readies_numba_and_leaves_the_garbage_collector_as_it_found_it(collector):
    """The import pauses the cyclic collector while it readies Numba (nbgrad/runtime/startup.py),
    then restores the user's setting, whichever it was."""
    code = ("import gc\n"
            f"gc.{collector[:-1]}()\n"
            "import nbgrad\n"
            "from numba.core import entrypoints\n"
            "print(gc.isenabled(), entrypoints._already_initialized)")
    done = subprocess.run([sys.executable, "-c", code], check=True, timeout=120,
                          capture_output=True, text=True)
    assert done.stdout.split() == [str(collector == "enabled"), "True"]


def test_the_lazy_data_set_names_resolve():
    import nbgrad.datasets as datasets

    assert set(dir(datasets)) == set(datasets.__all__)
    for name in datasets.__all__:
        assert callable(getattr(datasets, name))
    with pytest.raises(AttributeError, match="no_such_set"):
        datasets.no_such_set  # noqa: B018


GLIBC = (getattr(os, "confstr", None) is not None
         and (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc"))
FRESH_PAGES = ("import resource, numpy as np, nbgrad\n"
               "from nbgrad.runtime import startup\n"
               "def faults():\n"
               "    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
               "np.ones(1 << 20, np.float32)\n"  # 4 MiB, written to every page
               "start = faults()\n"
               "for _ in range(20):\n"
               "    np.ones(1 << 20, np.float32)\n"
               "print(startup.keep_freed_memory(), (faults() - start) // 20)")


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc only")
@pytest.mark.parametrize("environment", ["default", "user's MALLOC_TOP_PAD_"])
def test_import_has_malloc_reuse_freed_arrays_unless_the_environment_says(environment):
    """After ``import nbgrad`` a freed 4 MiB array's pages serve the next one (glibc
    would unmap it, and the next array's 1,024 pages fault in afresh: about 500 faults
    per array on the development machine); a user's own malloc
    setting (here the default top pad, which turns glibc's adaptive thresholds off)
    is left to govern (nbgrad/runtime/startup.py: keep_freed_memory)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    if environment != "default":
        env["MALLOC_TOP_PAD_"] = str(128 << 10)
    done = subprocess.run([sys.executable, "-c", FRESH_PAGES], check=True, timeout=120,
                          capture_output=True, text=True, env=env)
    set_again, faults_per_array = done.stdout.split()
    if environment == "default":
        assert set_again == "True" and int(faults_per_array) < 64
    else:
        assert set_again == "False" and int(faults_per_array) >= 256


AVX512 = llvm.get_host_cpu_features().get("avx512f", False)
VECTOR_WIDTH = ("import os, numpy as np\n"
                "if os.environ.get('COMPILE_FIRST'):\n"
                "    import numba\n"
                "    numba.njit(lambda x: x + 1)(1)\n"
                "import nbgrad\n"
                "from numba import config, njit\n"
                "@njit\n"
                "def double(x):\n"
                "    for i in range(x.size):\n"
                "        x[i] = x[i] + x[i]\n"
                "double(np.ones(64, np.float32))\n"
                "asm = next(iter(double.inspect_asm().values()))\n"
                "print(str(config.CPU_FEATURES).endswith('-prefer-256-bit'), 'zmm' in asm)")


@pytest.mark.skipif(not AVX512, reason="x86 with AVX-512 only")
@pytest.mark.parametrize("environment", ["default", "user's NUMBA_CPU_FEATURES",
                                         "Numba compiled first"])
def test_import_has_llvm_vectorise_with_512_bit_registers_unless_told_otherwise(environment):
    """On an AVX-512 CPU, code compiled after ``import nbgrad`` uses the zmm registers
    (LLVM's tuning for Intel cores would use 256-bit ymm); a CPU the environment names,
    or a code generator that exists already, is left as it is
    (nbgrad/runtime/startup.py: prefer_full_vectors)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_CPU_")}
    if environment == "user's NUMBA_CPU_FEATURES":
        env["NUMBA_CPU_FEATURES"] = get_host_cpu_features()
    elif environment == "Numba compiled first":
        env["COMPILE_FIRST"] = "1"
    done = subprocess.run([sys.executable, "-c", VECTOR_WIDTH], check=True, timeout=120,
                          capture_output=True, text=True, env=env)
    set_by_nbgrad, uses_zmm = done.stdout.split()
    assert set_by_nbgrad == str(environment == "default")
    if environment == "default":
        assert uses_zmm == "True"


WORKER_TARGET = ("import os\n"
                 "if os.environ.get('COMPILE_FIRST'):\n"
                 "    import numba\n"
                 "    numba.njit(lambda x: x + 1)(1)\n"
                 "import nbgrad\n"
                 "from numba.core import config\n"
                 "from numba.core.codegen import get_host_cpu_features\n"
                 "from nbgrad.runtime import startup\n"
                 "from nbgrad.compiling import map_in_workers\n"
                 "mine = config.CPU_FEATURES or get_host_cpu_features()\n"
                 "os.environ['NUMBA_OPT'] = '3'  # as a compile reloads Numba's configuration:\n"
                 "config.reload_config()         # config.CPU_FEATURES is None again\n"
                 "assert config.CPU_FEATURES is None\n"
                 "theirs = list(map_in_workers(os.getenv, ['NUMBA_CPU_FEATURES'] * 2, 2, None))\n"
                 "helper = startup.numba_target_env()['NUMBA_CPU_FEATURES']\n"
                 "print(theirs == [mine, mine], helper == mine,\n"
                 "      'NUMBA_CPU_FEATURES' in os.environ)")


@pytest.mark.parametrize("environment", ["default", "Numba compiled first"])
def test_worker_processes_compile_for_the_cpu_this_process_compiles_for(environment):
    """Numba's cache keys kernels by CPU features, so the warmup's workers and the
    compile-ahead helper are started with this process's features, whatever
    ``prefer_full_vectors`` chose here, and after a reload of Numba's configuration has
    reset ``config.CPU_FEATURES`` (nbgrad/runtime/startup.py: numba_target_env); the environment
    is as it was afterwards."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_CPU_")}
    if environment != "default":
        env["COMPILE_FIRST"] = "1"
    done = subprocess.run([sys.executable, "-c", WORKER_TARGET], check=True, timeout=300,
                          capture_output=True, text=True, env=env)
    assert done.stdout.split() == ["True", "True", "False"]
