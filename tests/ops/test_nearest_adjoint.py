"""The nearest modes' gradient for an integer factor along W (kernels/resample.py:
nearest_adjoint) against the general transpose it replaces there (separable_adjoint, the
reference loop nest): the same bits over drawn shapes, factors and row maps, with signed
zeros, infinities and NaNs in the gradient (a NaN's sign and payload aside: which
operand's NaN an add keeps is the instruction's choice); and which column maps take it."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.kernels import resample as K
from nbgrad.ops import resample as R


def _upstream(shape, seed, dtype):
    rng = np.random.default_rng(seed)
    g = rng.standard_normal(shape).astype(dtype)
    flat = g.reshape(-1)
    for value in (-0.0, np.inf, -np.inf, np.nan):
        flat[rng.integers(0, flat.size, max(1, flat.size // 50))] = value
    return g


def _assert_same_bits_but_nan_payloads(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype
    nan = np.isnan(a)
    np.testing.assert_array_equal(nan, np.isnan(b))
    ints = f"i{a.itemsize}"
    np.testing.assert_array_equal(a[~nan].view(ints), b[~nan].view(ints))


@st.composite
def nearest_cases(draw):
    mode = draw(st.sampled_from(["nearest", "nearest-exact"]))
    planes = draw(st.integers(1, 6))
    H, W = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    r = draw(st.integers(1, 4))
    out_h = draw(st.integers(1, 20))   # any row map: up, down, uneven
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    return mode, (planes, H, W), (out_h, r * W), dtype


@settings(max_examples=120, deadline=None)
@given(nearest_cases(), st.integers(0, 2**31))
def test_integer_column_factor_gives_the_general_transposes_bits(case, seed):
    mode, (P, H, W), out_size, dtype = case
    ih, wh, iw, ww = R._tables(mode, (H, W), out_size, (None, None), False,
                               np.dtype(dtype), True)
    r = R._column_factor(iw, W)
    assert r == out_size[1] // W
    g = _upstream((P, *out_size), seed, dtype)
    fast = K.nearest_adjoint(g, *R._row_runs(ih, H), r, W)
    general = K.separable_adjoint(g, ih, wh, iw, ww, H, W)
    _assert_same_bits_but_nan_payloads(fast, general)


@pytest.mark.parametrize("W,OW,factor", [(4, 8, 2), (5, 15, 3), (6, 6, 1), (4, 10, None),
                                        (8, 4, None), (7, 3, None)])
def test_which_column_maps_have_a_factor(W, OW, factor):
    _, _, iw, _ = R._tables("nearest", (1, W), (1, OW), (None, None), False,
                            np.dtype(np.float32), True)
    assert R._column_factor(iw, W) == factor


def test_interpolate_gradient_takes_the_factor_path_and_keeps_its_input():
    x = np.random.default_rng(0).standard_normal((2, 3, 5, 4)).astype(np.float32)
    kept = x.copy()
    xt = nb.tensor(x, requires_grad=True)
    y = nb.nn.functional.interpolate(xt, scale_factor=2, mode="nearest")
    g = _upstream(y.shape, 1, np.float32)
    R._nearest_runs.cache_clear()
    y.backward(g)
    assert R._nearest_runs.cache_info().misses == 1
    assert R._nearest_runs("nearest", (5, 4), (10, 8), (2.0, 2.0), "<f4", True)[2] == 2
    ih, wh, iw, ww = R._tables("nearest", (5, 4), (10, 8), (2.0, 2.0), False,
                               np.dtype(np.float32), True)
    general = K.separable_adjoint(g.reshape(6, 10, 8), ih, wh, iw, ww, 5, 4)
    _assert_same_bits_but_nan_payloads(xt.grad.numpy().reshape(6, 5, 4), general)
    np.testing.assert_array_equal(x, kept)
