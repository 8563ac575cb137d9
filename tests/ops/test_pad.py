"""pad: the four modes against NumPy's ``np.pad`` (forward and the scatter-add adjoint),
PyTorch oracle including negative pads, gradcheck and gradgradcheck, threads, and
PyTorch's constraints and errors."""

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads
from hypothesis import given
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.runtime.jit import PARALLEL_MIN
from nbgrad.testing import gradcheck, gradgradcheck

MODES = ["constant", "reflect", "replicate", "circular"]
_NUMPY_MODE = {"constant": "constant", "reflect": "reflect", "replicate": "edge",
               "circular": "wrap"}


def reference_pad(x, pads, mode, value=0):
    """``np.pad`` with PyTorch's negative pads: constant, reflect and replicate read
    positions relative to the whole dim (pad the positive parts, then crop); circular
    wraps around what the crops keep (crop, then pad)."""
    widths, crops = [(0, 0)] * x.ndim, [slice(None)] * x.ndim
    for k in range(len(pads) // 2):
        d, lo, hi = x.ndim - 1 - k, pads[2 * k], pads[2 * k + 1]
        widths[d] = (max(lo, 0), max(hi, 0))
        start = max(-lo, 0)
        stop = (x.shape[d] if mode == "circular" else x.shape[d] + sum(widths[d])) - max(-hi, 0)
        crops[d] = slice(start, stop)
    extra = {"constant_values": value} if mode == "constant" else {}
    if mode == "circular":
        return np.pad(x[tuple(crops)], widths, _NUMPY_MODE[mode])
    return np.pad(x, widths, _NUMPY_MODE[mode], **extra)[tuple(crops)]


def reference_grad(shape, pads, mode, g):
    """The adjoint: g added into the position each output entry read, found by padding
    the positions themselves (-1 for the constant)."""
    positions = reference_pad(np.arange(int(np.prod(shape))).reshape(shape), pads, mode, -1)
    grad = np.zeros(int(np.prod(shape)))
    read = positions >= 0
    np.add.at(grad, positions[read], g[read])
    return grad.reshape(shape)


@st.composite
def pad_cases(draw, mode):
    """A shape and pads that ``mode`` accepts (PyTorch's constraints)."""
    if mode == "constant":
        ndim = draw(st.integers(1, 4))
        k = draw(st.integers(0, ndim))
    else:
        k = draw(st.integers(1, 3))
        ndim = k + draw(st.integers(1, 2))
    shape = tuple(draw(st.integers(1, 4)) for _ in range(ndim))
    pads = []
    for d in range(ndim - 1, ndim - 1 - k, -1):
        n = shape[d]
        pads += draw(st.sampled_from([(lo, hi) for lo in range(-n, n + 1)
                                      for hi in range(-n, n + 1) if valid_pad(mode, n, lo, hi)]))
    return shape, tuple(pads)


def valid_pad(mode, n, lo, hi):
    """Whether PyTorch pads (or crops, when negative) a dim of size n by (lo, hi) in mode:
    (0, 0) always is, so every dim has a choice."""
    kept = n - max(-lo, 0) - max(-hi, 0)
    size = n + lo + hi
    return (size >= (1 if mode in ("reflect", "replicate") else 0)
            and (mode != "reflect" or max(lo, hi) < n)
            and (mode != "circular" or max(lo, hi) <= kept))


@pytest.mark.parametrize("mode", MODES)
@given(data=st.data(), dtype=st.sampled_from([np.float32, np.float64]))
def test_pad_matches_numpy(mode, data, dtype):
    shape, pads = data.draw(pad_cases(mode))
    value = data.draw(st.sampled_from([0.0, -1.5, np.inf])) if mode == "constant" else None
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(dtype)
    expected = reference_pad(x, pads, mode, 0.0 if value is None else value)
    g = rng.standard_normal(expected.shape).astype(dtype)
    t = nb.tensor(x, requires_grad=True)
    y = nb.pad(t, pads, mode, value)
    assert y.dtype == dtype
    np.testing.assert_array_equal(y.numpy(), expected)
    (gx,) = nb.grad(y, [t], grad_outputs=g)
    assert gx.dtype == dtype
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(gx.numpy(), reference_grad(shape, pads, mode, g), rtol=tol,
                               atol=tol)


@pytest.mark.parametrize("mode", MODES)
def test_gradcheck_and_gradgradcheck(mode):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 4))
    pads = (3, -1, 1, 2) if mode != "circular" else (3, -1, -1, 2)
    assert gradcheck(lambda t: nb.pad(t, pads, mode), [x])
    assert gradgradcheck(lambda t: nb.pad(t, pads, mode) ** 2, [x])


def test_reflect_fixed_example_and_corner_gradient():
    x = nb.tensor(np.arange(9.0).reshape(1, 3, 3), requires_grad=True)
    y = nb.pad(x, (1, 1, 1, 1), "reflect")
    np.testing.assert_array_equal(y.numpy()[0, 0], [4.0, 3.0, 4.0, 5.0, 4.0])
    y.backward(np.ones(y.shape))
    # along each dim the middle entry is read 3 times ([1, 0, 1, 2, 1]), the ends once:
    # each entry is read the product of its two counts
    np.testing.assert_array_equal(x.grad.numpy()[0], [[1, 3, 1], [3, 9, 3], [1, 3, 1]])


def test_constant_value_dtypes_and_non_finite_values():
    ints = nb.pad(nb.tensor([1, 2]), (1, 1), value=-2.7)
    assert ints.dtype == np.int64 and ints.tolist() == [-2, 1, 2, -2]  # truncated, as torch
    y = nb.pad(nb.tensor([np.nan, 1.0]), (1, 2), value=np.inf)
    np.testing.assert_array_equal(y.numpy(), [np.inf, np.nan, 1.0, np.inf, np.inf])
    x = nb.tensor(np.ones((2, 3)), requires_grad=True)
    assert nb.pad(x, ()).shape == (2, 3) and nb.pad(x, [0, 0, -1, 0]).shape == (1, 3)
    assert nb.pad(x, (-3, 0)).shape == (2, 0)
    assert nb.pad(nb.zeros(0, 2, 3), (1, 1), "reflect").shape == (0, 2, 5)  # empty batch


def test_one_and_two_threads_give_the_same_bits():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((8, PARALLEL_MIN // 256, 16)).astype(np.float32)

    def run():
        t = nb.tensor(x, requires_grad=True)
        y = nb.pad(t, (15, 15, 3, 1), "reflect")
        (gx,) = nb.grad(y, [t], grad_outputs=np.ones(y.shape, np.float32) / 3)
        return y.numpy().copy(), gx.numpy()

    for r1, r2 in zip(at_threads(1, run), at_threads(2, run)):
        assert_same_bits(r1, r2)


# -- PyTorch oracle -----------------------------------------------------------------------------
ORACLE_CASES = [
    ((2, 3, 5), (1, 2), "constant"), ((4,), (2, -3), "constant"),
    ((2, 3, 4, 5), (1, 0, -1, 2, 0, 1, 2, 0), "constant"),
    ((2, 3, 5), (-1, 3), "reflect"), ((1, 2, 4), (-5, 2), "reflect"),
    ((1, 2, 4, 4), (3, 3, -1, 2), "reflect"), ((2, 2, 3, 4, 4), (1, 2, 2, 0, 1, 1), "reflect"),
    ((2, 3, 5), (-1, 3, 2, 2), "replicate"), ((1, 2, 4), (-4, 1), "replicate"),
    ((3, 5), (4, 0), "replicate"), ((1, 1, 2, 3, 3), (3, 1, 0, 2, 1, 1), "replicate"),
    ((2, 3, 5), (2, -1), "circular"), ((2, 4), (4, 4), "circular"),
    ((1, 2, 3, 4, 4), (1, 1, 2, 0, -1, 2), "circular"), ((1, 2, 4, 3), (-1, -1, 2, 3), "circular"),
]


@pytest.mark.parametrize("shape, pads, mode", ORACLE_CASES)
def test_torch_oracle(shape, pads, mode):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape).astype(np.float32)
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.nn.functional.pad(xt, pads, mode=mode)
    xn = nb.tensor(x, requires_grad=True)
    yn = nb.pad(xn, pads, mode)
    assert_same_bits(yn.numpy(), yt.detach().numpy())
    g = rng.standard_normal(yn.shape).astype(np.float32)
    yt.backward(torch.tensor(g))
    yn.backward(g)
    np.testing.assert_allclose(xn.grad.numpy(), xt.grad.numpy(), rtol=1e-6, atol=1e-6)


# -- bad input ----------------------------------------------------------------------------------
@pytest.mark.parametrize("shape, pads, kwargs, error, match", [
    ((1, 2, 4), (1,), {}, ValueError, r"pad: pad must have an even length"),
    ((1, 2, 4), (1, 1) * 4, {}, ValueError,
     r"pad: pad \(1, 1, 1, 1, 1, 1, 1, 1\) pads 4 dims but x of shape \(1, 2, 4\) has 3"),
    ((1, 2, 4), (1.5, 1), {}, TypeError, r"pad: pad must be a tuple of ints, got \(1.5, 1\)"),
    ((1, 2, 4), (True, 1), {}, TypeError, "pad: pad must be a tuple of ints"),
    ((1, 2, 4), (1, 1), {"mode": "zeros"}, ValueError,
     "pad: mode must be one of constant, reflect, replicate, circular, got 'zeros'"),
    ((1, 2, 4), (1, 1), {"mode": "reflect", "value": 2.0}, ValueError,
     "pad: mode 'reflect' takes no value"),
    ((1, 2, 4), (-3, -2), {}, ValueError,
     r"pad: padding \(-3, -2\) of dim 2 of x of shape \(1, 2, 4\) leaves -1 entries"),
    ((1, 2, 4), (4, 0), {"mode": "reflect"}, ValueError,
     r"pad: reflect padding \(4, 0\) of dim 2 .*: each pad must be less than the size 4"),
    ((1, 2, 4), (-2, -2), {"mode": "reflect"}, ValueError, "leaves 0 entries"),
    ((1, 2, 4), (-2, -2), {"mode": "replicate"}, ValueError, "leaves 0 entries"),
    ((1, 2, 4), (5, 0), {"mode": "circular"}, ValueError,
     r"pad: circular padding \(5, 0\) of dim 2 .*: a pad may be at most the 4 entries"),
    ((1, 2, 4), (-2, 3), {"mode": "circular"}, ValueError, "at most the 2 entries"),
    ((4,), (1, 1), {"mode": "reflect"}, NotImplementedError,
     r"pad: mode 'reflect' pads the last 1, 2 or 3 dims of a \(C, ...\) or \(N, C, ...\) "
     r"input: a pad of length 2 needs a 2-D or 3-D input, got shape \(4,\)"),
    ((1, 1, 2, 4), (1, 1), {"mode": "replicate"}, NotImplementedError,
     "a pad of length 2 needs a 2-D or 3-D input"),
    ((2, 4), (1, 1, 1, 1), {"mode": "circular"}, NotImplementedError,
     "a pad of length 4 needs a 3-D or 4-D input"),
    ((2, 0, 3), (1, 1), {"mode": "reflect"}, ValueError,
     r"pad: mode 'reflect' needs non-empty dims \(but the batch dim\), got shape \(2, 0, 3\)"),
])
def test_bad_input(shape, pads, kwargs, error, match):
    with pytest.raises(error, match=match):
        nb.pad(nb.zeros(*shape), pads, **kwargs)
