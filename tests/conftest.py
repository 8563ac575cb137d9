"""Shared test settings and helpers: hypothesis profiles, running code at a thread count,
bitwise comparison, and forcing the convolution ops onto one kernel family or form."""

import os
from contextlib import contextmanager

import numba
import numpy as np
import pytest
from hypothesis import HealthCheck, settings

from nbgrad.ops import conv as conv_ops

# The tests count the compiles of this process, so the helper that compiles backward
# passes alongside (nbgrad.runtime.compile_ahead.BackwardAhead) stays off; test_compiling.py runs it
# in subprocesses of its own.
os.environ["NBGRAD_COMPILE_AHEAD"] = "0"

# First calls compile Numba kernels, so no per-example deadline; CI draws fewer examples.
settings.register_profile("dev", deadline=None, max_examples=40,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", deadline=None, max_examples=25, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "dev")


def at_threads(n, fn, *args, **kwargs):
    """Run ``fn`` with the Numba pool limited to ``n`` threads, restoring it afterwards."""
    previous = numba.get_num_threads()
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    try:
        return fn(*args, **kwargs)
    finally:
        numba.set_num_threads(previous)


def assert_same_bits(a, b):
    """Bitwise equality of arrays (NaNs included), for the determinism tests."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype
    assert a.tobytes() == b.tobytes()


@pytest.fixture
def rng():
    return np.random.default_rng(0)


# -- the convolution ops' kernel families and forms ------------------------------
PATHS = ["direct", "s1", "gemm", "cols"]


@contextmanager
def kernel_path(path):
    """Force the ops onto one kernel family: the direct loop nests, the stride-1 span
    kernels (where the stride is 1, else direct), the implicit GEMM or the GEMM over
    blocks of images, for the input gradient too (never the shifted planes of
    kernels/conv_shift.py, which tests/kernels/test_conv_shift.py covers)."""
    saved = conv_ops._kernel_path, conv_ops.SHIFT_DTYPES

    def forced(w_shape, geom, out_hw):
        return "direct" if path == "s1" and geom[:2] != (1, 1) else path
    conv_ops._kernel_path, conv_ops.SHIFT_DTYPES = forced, ()
    try:
        yield
    finally:
        conv_ops._kernel_path, conv_ops.SHIFT_DTYPES = saved


@contextmanager
def kernel_form(form):
    """Force the ops onto the parallel kernels ('parallel': thresholds 0) or their serial
    forms ('serial': thresholds above any test's work; the 'cols' kernels in one slot)."""
    saved = conv_ops.PARALLEL_WORK_MIN, conv_ops.COLS_PARALLEL_MIN
    threshold = 0 if form == "parallel" else 1 << 62
    conv_ops.PARALLEL_WORK_MIN = conv_ops.COLS_PARALLEL_MIN = threshold
    try:
        yield
    finally:
        conv_ops.PARALLEL_WORK_MIN, conv_ops.COLS_PARALLEL_MIN = saved
