"""Shared test settings: hypothesis profiles and a helper to run code at a thread count."""

import os

import numba
import numpy as np
import pytest
from hypothesis import HealthCheck, settings

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
