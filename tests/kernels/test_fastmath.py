"""kernels/fastmath.py: accuracy on float32 sweeps, edge values, float64 path, vectorisation."""

import math
import re

import numpy as np
import pytest
from numba import njit
from scipy.special import erf as scipy_erf

from nbgrad.kernels import fastmath as fm


@njit
def _map_exp(x, out):
    for i in range(x.size):
        out[i] = fm.exp(x[i])


@njit
def _map_expm1(x, out):
    for i in range(x.size):
        out[i] = fm.expm1(x[i])


@njit
def _map_log(x, out):
    for i in range(x.size):
        out[i] = fm.log(x[i])


@njit
def _map_log1p(x, out):
    for i in range(x.size):
        out[i] = fm.log1p(x[i])


@njit
def _map_erf(x, out):
    for i in range(x.size):
        out[i] = fm.erf(x[i])


@njit
def _map_tanh(x, out):
    for i in range(x.size):
        out[i] = fm.tanh(x[i])


@njit(fastmath={"contract"})
def _map_erf_fma(x, out):
    for i in range(x.size):
        out[i] = fm.erf(x[i])


@njit(fastmath={"contract"})
def _map_tanh_fma(x, out):
    for i in range(x.size):
        out[i] = fm.tanh(x[i])


@njit(fastmath={"contract"})
def _map_exp_fma(x, out):
    for i in range(x.size):
        out[i] = fm.exp(x[i])


@njit(fastmath={"contract"})
def _map_expm1_fma(x, out):
    for i in range(x.size):
        out[i] = fm.expm1(x[i])


@njit(fastmath={"contract"})
def _map_log_fma(x, out):
    for i in range(x.size):
        out[i] = fm.log(x[i])


@njit(fastmath={"contract"})
def _map_log1p_fma(x, out):
    for i in range(x.size):
        out[i] = fm.log1p(x[i])


# name, loop kernel, float64 reference, sweep range, max ulp allowed (docstring: measured
# 0.97 / 1.68 / 0.79 / 2.38 / 2.41 / 1.50 on a 61-step sweep, exp 1.01 with FMA)
CASES = [
    ("exp", _map_exp, np.exp, -104.0, 88.7, 1.05),
    ("expm1", _map_expm1, np.expm1, -104.0, 88.7, 2.0),
    ("log", _map_log, np.log, 1e-45, 3.4e38, 1.0),
    ("log1p", _map_log1p, np.log1p, -0.99999994, 3.4e38, 2.5),
    ("erf", _map_erf, scipy_erf, -10.0, 10.0, 2.5),
    ("tanh", _map_tanh, np.tanh, -20.0, 20.0, 2.0),
]
IDS = [c[0] for c in CASES]
# the activation kernels compile with FMA contraction: the same bounds must hold there
FMA_CASES = [(name + "-fma", fma, ref, lo, hi, max_ulp) for (name, _, ref, lo, hi, max_ulp), fma
             in zip(CASES, [_map_exp_fma, _map_expm1_fma, _map_log_fma, _map_log1p_fma,
                            _map_erf_fma, _map_tanh_fma])]


def _float32_sweep(lo, hi, step):
    """Every ``step``-th float32 from lo to hi, in the order of the real line."""
    def ordinal(v):
        b = int(np.array(v, np.float32).view(np.int32))
        return b if b >= 0 else -(b & 0x7FFFFFFF)
    k = np.arange(ordinal(lo), ordinal(hi) + 1, step, dtype=np.int64)
    bits = np.where(k >= 0, k, (-k) | 0x80000000).astype(np.uint32)
    return bits.view(np.float32)


def _run(kernel, x):
    out = np.empty_like(x)
    kernel(x, out)
    return out


def _ulp_error(got, exact):
    ref = exact.astype(np.float32)
    ulp = np.spacing(np.abs(ref)).astype(np.float64)
    ulp = np.where(ref == 0, float(np.finfo(np.float32).smallest_subnormal), ulp)
    return np.abs(got.astype(np.float64) - exact) / ulp


@pytest.mark.parametrize("name, kernel, ref, lo, hi, max_ulp", CASES + FMA_CASES,
                         ids=IDS + [c[0] for c in FMA_CASES])
def test_float32_accuracy_on_dense_sweep(name, kernel, ref, lo, hi, max_ulp):
    x = _float32_sweep(lo, hi, 997)
    got = _run(kernel, x)
    assert got.dtype == np.float32
    err = _ulp_error(got, ref(x.astype(np.float64)))
    worst = int(np.argmax(err))
    assert err[worst] <= max_ulp, f"{name}({x[worst]!r}) = {got[worst]!r}: {err[worst]} ulp"


@pytest.mark.parametrize("name, kernel, ref, lo, hi, max_ulp", CASES + FMA_CASES,
                         ids=IDS + [c[0] for c in FMA_CASES])
def test_float32_accuracy_near_zero(name, kernel, ref, lo, hi, max_ulp):
    # the polynomial branches and their switch points, densely
    x = np.linspace(max(lo, -2.0), 2.0, 200_001).astype(np.float32)
    if name.startswith("log") and not name.startswith("log1p"):
        x = np.abs(x) + np.float32(1e-30)
    got = _run(kernel, x)
    err = _ulp_error(got, ref(x.astype(np.float64)))
    assert err.max() <= max_ulp


EDGE_INPUTS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 3.4e38, -3.4e38,
                        100.0, -100.0, -1.0, 89.0, -105.0], np.float32)


@pytest.mark.parametrize("name, kernel, ref, lo, hi, max_ulp", CASES + FMA_CASES,
                         ids=IDS + [c[0] for c in FMA_CASES])
def test_edges_match_the_float64_limits(name, kernel, ref, lo, hi, max_ulp):
    got = _run(kernel, EDGE_INPUTS)
    with np.errstate(all="ignore"):
        want = ref(EDGE_INPUTS.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=3e-7, atol=0)
    # signed zeros: odd functions and expm1 keep the sign of 0
    np.testing.assert_array_equal(np.signbit(got[~np.isnan(got)]),
                                  np.signbit(want[~np.isnan(want)]))


def test_exp_overflow_underflow_and_subnormal_results():
    x = np.array([88.72, 88.73, 200.0, -87.0, -100.0, -103.9, -104.5, -1e4], np.float32)
    got = _run(_map_exp, x)
    with np.errstate(over="ignore"):
        want = np.exp(x.astype(np.float64)).astype(np.float32)  # inf / subnormal / 0
    np.testing.assert_array_equal(got, want)


def test_log_of_subnormals_and_negative():
    x = np.array([1e-45, 3e-39, 1.1e-38, -1e-45, -5.0], np.float32)
    got = _run(_map_log, x)
    np.testing.assert_allclose(got[:3], np.log(x[:3].astype(np.float64)), rtol=2e-7)
    assert np.isnan(got[3:]).all()


@pytest.mark.parametrize("name, kernel, ref, lo, hi, max_ulp", CASES, ids=IDS)
def test_float64_takes_the_libm_path(name, kernel, ref, lo, hi, max_ulp):
    x = np.concatenate([np.linspace(-30, 30, 1000), [0.5e-300, -1e-300]])
    if name in ("log", "log1p"):
        x = np.abs(x)
    got = _run(kernel, x)
    assert got.dtype == np.float64
    libm = getattr(math, name)
    np.testing.assert_array_equal(got, [libm(v) for v in x])


@pytest.mark.parametrize("name, kernel, ref, lo, hi, max_ulp", CASES, ids=IDS)
def test_python_call_evaluates_the_same_function(name, kernel, ref, lo, hi, max_ulp):
    x = np.linspace(0.1, 3.0, 7)
    np.testing.assert_allclose(getattr(fm, name)(x), ref(x), rtol=1e-15)


@pytest.mark.parametrize("name, kernel, ref, lo, hi, max_ulp", CASES, ids=IDS)
def test_loops_vectorise(name, kernel, ref, lo, hi, max_ulp):
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    _run(kernel, x)
    asm = "\n".join(kernel.inspect_asm(kernel.signatures[0]).splitlines())
    packed = re.findall(r"\bv(?:fmadd|fmsub|fnmadd|mul|add|sub)\w*ps\s+[^\n]*%[yz]mm", asm)
    assert len(packed) >= 8, f"{name}: no packed float32 arithmetic in the loop"


@njit
def _map_exp_nonpositive(x, out):
    for i in range(x.size):
        out[i] = fm.exp_nonpositive(x[i])


@njit(fastmath={"contract"})
def _map_exp_nonpositive_fma(x, out):
    for i in range(x.size):
        out[i] = fm.exp_nonpositive(x[i])


@njit(fastmath={"contract"})
def _map_exp_fma(x, out):
    for i in range(x.size):
        out[i] = fm.exp(x[i])


@pytest.mark.parametrize("lean, full", [(_map_exp_nonpositive, _map_exp),
                                        (_map_exp_nonpositive_fma, _map_exp_fma)],
                         ids=["plain", "contract"])
def test_exp_nonpositive_has_the_bits_of_exp_for_x_at_most_0(lean, full):
    # every 613th float32 from -0 down to -inf (subnormal results and the flush to 0 too),
    # plus NaN: the lean exp drops only the overflow edge, which x <= 0 never reaches
    bits = np.arange(0x80000000, 0xFF800001, 613, dtype=np.uint64).astype(np.uint32)
    x = np.concatenate([bits.view(np.float32),
                        np.array([-0.0, 0.0, -np.inf, np.nan, -103.9, -104.5, -87.4],
                                 np.float32)])
    a, b = np.empty_like(x), np.empty_like(x)
    lean(x, a)
    full(x, b)
    assert a.tobytes() == b.tobytes()
    x64 = np.array([-0.0, -1e-300, -30.5, -800.0, -np.inf])
    np.testing.assert_array_equal(_run(lean, x64), [math.exp(v) for v in x64])
