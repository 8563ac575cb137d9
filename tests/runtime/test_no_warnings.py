"""Compiling kernels prints nothing: Numba's warnings never reach the user."""

import os
import subprocess
import sys


def test_cold_compile_of_float32_pow_prints_no_numba_warning(tmp_path):
    """A float32 ``x ** 3`` on an empty cache used to print seven NumbaIRAssumptionWarnings
    (Numba's IR inliner and the fast log; see kernels/fastmath.py)."""
    code = ("import numpy as np, nbgrad as nb\n"
            "x = nb.tensor(np.linspace(0.5, 2, 9, dtype=np.float32), requires_grad=True)\n"
            "(x ** 3 + x ** 2.5).sum().backward()\n")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), PYTHONWARNINGS="always")
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert "Warning" not in run.stderr, run.stderr
