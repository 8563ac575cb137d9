"""Shared test settings and helpers: hypothesis profiles, running code at a thread count,
bitwise comparison, and forcing the convolution ops onto one kernel family or form."""

import os
from contextlib import contextmanager

import numba
import numpy as np
import pytest
from hypothesis import HealthCheck, settings

import nbgrad as nb
from nbgrad.ops import conv_plan

# The tests count the compiles of this process, so the helper that compiles backward
# passes alongside (nbgrad.runtime.compile_ahead.BackwardAhead) stays off; test_compiling.py runs it
# in subprocesses of its own.
os.environ["NBGRAD_COMPILE_AHEAD"] = "0"
# Products use the blocking guessed from the caches rather than timing candidates at the
# first large one (a few seconds at an unpredictable test, and any choice gives the same
# bits); tests/kernels/test_gemm_search.py runs the search itself.
os.environ["NBGRAD_GEMM_SEARCH"] = "0"

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


def assert_optimizer_steps_same_bits_at_threads(optimizer, kwargs, sizes):
    """Three steps of ``optimizer(params, **kwargs)`` over float32 parameters of the given
    sizes give the same parameters and state, bit for bit, at 1 and 2 threads."""
    import nbgrad as nb

    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in sizes]
    grads = [[rng.standard_normal(a.shape).astype(np.float32) for a in arrays]
             for _ in range(3)]

    def run():
        params = [nb.tensor(a, requires_grad=True) for a in arrays]
        opt = optimizer(params, **kwargs)
        for gs in grads:
            for p, g in zip(params, gs):
                p.grad = nb.tensor(g)
            opt.step()
        return [p._data for p in params], opt.state_dict()["state"]

    (p1, s1), (p2, s2) = at_threads(1, run), at_threads(2, run)
    for a, b in zip(p1 + [v for e in s1.values() for v in e.values()],
                    p2 + [v for e in s2.values() for v in e.values()]):
        assert_same_bits(a, b)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


# -- the convolution ops' kernel families and forms ------------------------------
PATHS = ["direct", "s1", "gemm", "cols"]


@contextmanager
def _planning_with(name, chooser):
    """The conv plans made inside the block choose with ``chooser`` instead of
    ``conv_plan.<name>`` (ops/conv_plan.py)."""
    saved = getattr(conv_plan, name)
    setattr(conv_plan, name, chooser)
    try:
        yield
    finally:
        setattr(conv_plan, name, saved)


def kernel_path(path):
    """Force the ops onto one kernel family: the direct loop nests, the stride-1 span
    kernels (where the stride is 1, else direct), the implicit GEMM or the GEMM over
    blocks of images, for the input gradient too (never the shifted planes of
    kernels/conv_shift.py, which tests/kernels/test_conv_shift.py covers)."""
    def forced(w_shape, geometry, in_hw, dtype):
        family = "direct" if path == "s1" and (geometry.sh, geometry.sw) != (1, 1) else path
        return conv_plan.Paths(family, family)
    return _planning_with("choose_paths", forced)


def kernel_form(form):
    """Force the ops onto the parallel kernels ('parallel') or their serial forms
    ('serial'; the 'cols' and shifted-planes kernels in one slot)."""
    return _planning_with("parallel_from", lambda family, work: form == "parallel")


def draw_conv_operands(cfg, seed=0, dtype=np.float64):
    """x, w and (if cfg["bias"]) b for a config of nbgrad.testing.strategies_conv;
    transposed configs have output_padding and F = w.shape[1] * groups output channels."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(cfg["x_shape"]).astype(dtype)
    w = rng.standard_normal(cfg["w_shape"]).astype(dtype)
    F = w.shape[1] * cfg["groups"] if "output_padding" in cfg else w.shape[0]
    b = rng.standard_normal(F).astype(dtype) if cfg["bias"] else None
    return x, w, b


def pair(v):
    """An int or a pair as a pair."""
    return (v, v) if isinstance(v, int) else tuple(v)


def conv_all_grads(fn, x, w, b, g):
    """y and the gradients of x, w and b of ``fn(x, w, b)`` for the upstream gradient g."""
    xt, wt, bt = (nb.tensor(a, requires_grad=True) for a in (x, w, b))
    y = fn(xt, wt, bt)
    y.backward(g)
    return y.numpy(), xt.grad.numpy(), wt.grad.numpy(), bt.grad.numpy()
