"""What importing nbgrad does: any submodule imports first in a fresh interpreter, the
import sets up malloc and the vector width (runtime/startup.py), leaves Numba's set-up
to the first kernel and what it need not load unloaded; the structure of the imports is
tests/test_architecture.py's."""

import os
import subprocess
import sys

import pytest
from llvmlite import binding as llvm
from numba.core.codegen import get_host_cpu_features


def printed(code: str) -> list[str]:
    """The words ``code`` prints, run in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", code], check=True, timeout=300,
                          capture_output=True, text=True)
    return done.stdout.split()


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
    assert printed(code) == ["[]"]


@pytest.mark.parametrize("collector", ["enabled", "disabled"])
def test_numba_is_set_up_at_the_first_kernel_and_the_collector_left_as_found(collector):
    """``import nbgrad`` leaves Numba's one-time set-up (its extension entry points,
    rocket-fft's among them, which bring in ``scipy.fft``) to the first kernel, which runs
    it with the cyclic collector paused and then restores the user's setting, whichever
    it was (nbgrad/runtime/startup.py: ready_numba_at_first_kernel)."""
    code = ("import gc, sys\n"
            f"gc.{collector[:-1]}()\n"
            "import nbgrad\n"
            "from numba.core import entrypoints\n"
            "def state():\n"
            "    return [entrypoints._already_initialized, 'rocket_fft' in sys.modules,\n"
            "            'scipy.fft' in sys.modules, gc.isenabled()]\n"
            "print(*state())\n"
            "nbgrad.tensor([1.0]) + 1\n"
            "print(*state())")
    enabled = str(collector == "enabled")
    assert printed(code) == ["False", "False", "False", enabled,
                             "True", "True", "True", enabled]


def test_the_spectral_kernels_load_at_their_first_use():
    """The spectral op's kernels (and rocket-fft with them) are imported by the first
    spectral call, which then computes what a NumPy FFT does."""
    code = ("import sys, numpy as np, nbgrad as nb\n"
            "print('rocket_fft' in sys.modules)\n"
            "x = np.random.default_rng(0).standard_normal((1, 1, 8))\n"
            "w = np.ones((1, 1, 3))\n"
            "y = nb.spectral_conv1d(nb.tensor(x), nb.tensor(w), nb.tensor(0 * w)).numpy()\n"
            "spectrum = np.fft.rfft(x)\n"
            "spectrum[..., 3:] = 0\n"
            "print(np.allclose(y, np.fft.irfft(spectrum, 8)), 'rocket_fft' in sys.modules)")
    assert printed(code) == ["False", "True", "True"]


def test_the_lazy_data_set_names_resolve():
    import nbgrad.datasets as datasets

    assert set(dir(datasets)) == set(datasets.__all__)
    for name in datasets.__all__:
        assert callable(getattr(datasets, name))
    with pytest.raises(AttributeError, match="no_such_set"):
        datasets.no_such_set  # noqa: B018


GLIBC = (getattr(os, "confstr", None) is not None
         and (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc"))
# Arrays of just under 4 MiB, written to every page: from 4 MiB on, NumPy asks for
# transparent huge pages, and a fresh array then faults once per 2 MiB page, or 512
# times, depending on how fragmented the host's memory is.
FRESH_PAGES = ("import resource, numpy as np, nbgrad\n"
               "from nbgrad.runtime import startup\n"
               "def faults():\n"
               "    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
               "n = (1 << 20) - 1024\n"
               "np.ones(n, np.float32)\n"
               "start = faults()\n"
               "for _ in range(20):\n"
               "    np.ones(n, np.float32)\n"
               "print(startup.keep_freed_memory(), (faults() - start) // 20)")


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc only")
@pytest.mark.parametrize("environment", ["default", "user's MALLOC_TOP_PAD_"])
def test_import_has_malloc_reuse_freed_arrays_unless_the_environment_says(environment):
    """After ``import nbgrad`` a freed 4 MiB array's pages serve the next one (glibc
    would unmap it, and the next array's 1,020 pages fault in afresh: about 500 faults
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
