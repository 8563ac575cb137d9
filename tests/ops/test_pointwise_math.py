"""log1p expm1 reciprocal rsqrt floor ceil trunc round frac sign, fmod remainder floor_divide,
clamp_min clamp_max: PyTorch oracles (values with NaN, infinities, signed zeros, huge and
tiny inputs; integer and bool dtypes; gradients), hypothesis over shapes and broadcasting,
gradcheck through the registered samples, bad input and thread-count determinism."""

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nbgrad as nb
from nbgrad.kernels import elementwise as kernels
from nbgrad.runtime.jit import PARALLEL_MIN
from nbgrad.testing import check_registered
from nbgrad.testing import strategies as nbst

torch = pytest.importorskip("torch")

SMOOTH = ["log1p", "expm1", "reciprocal", "rsqrt"]
STEPS = ["floor", "ceil", "trunc", "round", "sign"]
UNARY = SMOOTH + STEPS + ["frac"]
EXACT = ["reciprocal", "floor", "ceil", "trunc", "round", "sign", "frac"]
BINARY = ["fmod", "remainder"]
FLOATS = [np.float32, np.float64]
INTS = [np.int64, np.int32, np.int16, np.uint8, np.bool_]


def _t(a):
    return torch.from_numpy(np.array(a))


def _n(a):
    """An nbgrad tensor of ``a``'s dtype (``nb.tensor`` makes integers int64)."""
    return nb.from_numpy(np.array(a))


def _special_input(dtype):
    """Special values (NaN, +-inf, +-0, subnormals, tiny, huge), halves and values around
    integers, and a spread of ordinary values of both signs."""
    rng = np.random.default_rng(0)
    values = nbst.special_values(dtype) + [0.5, -0.5, 1.5, -1.5, 2.5, -2.5, -1.0, 1.0,
                                           -0.999, 1e-8, -1e-8, 1e-20, 88.0, 710.0, -50.0]
    spread = rng.standard_normal(200) * np.exp(rng.uniform(-20, 5, 200))
    return np.concatenate([np.array(values), spread]).astype(dtype)


def _same_values(got, want):
    """Equal dtypes and shapes, NaN where the other has NaN, and the same bits elsewhere
    (signed zeros included)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    assert_same_bits(got[~nan], want[~nan])


def _ulps(got, want, dtype):
    """|got - want| in ulps of ``want`` rounded to ``dtype`` (where both are finite)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    fin = np.isfinite(want)
    np.testing.assert_array_equal(got[~fin], want[~fin])
    spacing = np.spacing(np.abs(want[fin]).astype(dtype)).astype(np.float64)
    return np.abs(got[fin] - want[fin]) / spacing


# -- unary values ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", UNARY)
def test_unary_matches_torch_on_special_values(name, dtype):
    x = _special_input(dtype)
    before = x.copy()
    with np.errstate(all="ignore"):
        got = getattr(nb, name)(nb.tensor(x)).numpy()
    want = getattr(torch, name)(_t(x)).numpy()
    np.testing.assert_array_equal(x, before)
    if name in EXACT:
        _same_values(got, want)
    else:  # libm (ours) against Sleef/libm (PyTorch's): both within an ulp of the truth
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        assert _ulps(got, want, dtype).max() <= 1


@pytest.mark.parametrize("name", ["log1p", "expm1"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_log1p_expm1_are_accurate_near_zero(name, dtype):
    """libm's log1p/expm1 in float64, float32 rounded once from it: < 0.51 ulp of the
    float64 result for float32, exactly NumPy's (libm's) for float64; log(1 + x) would
    lose every digit here."""
    x = np.concatenate([np.logspace(-30, 1, 3000), -np.logspace(-30, -0.01, 3000)]).astype(dtype)
    got = getattr(nb, name)(nb.tensor(x)).numpy()
    assert got.dtype == dtype
    want = getattr(np, name)(x.astype(np.float64))
    if dtype == np.float64:
        assert _ulps(got, want, dtype).max() <= 1
    else:
        assert _ulps(got, want, dtype).max() < 0.51
    assert np.all(got[:5] != 0)  # log1p(1e-30) = 1e-30, not log(1) = 0


def test_edges_of_the_smooth_ops():
    x = np.array([-1.0, -2.0, 0.0, -0.0, np.inf, -np.inf, 1000.0])
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(nb.log1p(nb.tensor(x)).numpy(),
                                      [-np.inf, np.nan, 0, -0.0, np.inf, np.nan, np.log1p(1e3)])
        np.testing.assert_array_equal(nb.expm1(nb.tensor(x)).numpy(),
                                      [np.expm1(-1), np.expm1(-2), 0, 0, np.inf, -1, np.inf])
        np.testing.assert_array_equal(nb.reciprocal(nb.tensor(x)).numpy(),
                                      [-1, -0.5, np.inf, -np.inf, 0, -0.0, 1e-3])
        np.testing.assert_array_equal(nb.rsqrt(nb.tensor(x)).numpy(),
                                      [np.nan, np.nan, np.inf, -np.inf, 0, np.nan, 1 / 1000**.5])
    assert np.signbit(nb.expm1(nb.tensor(-0.0)).numpy())
    assert np.signbit(nb.reciprocal(nb.tensor(-np.inf)).numpy())


@pytest.mark.parametrize("dtype", FLOATS)
@given(x=st.lists(st.floats(-1e6, 1e6, width=32), min_size=1, max_size=30),
       decimals=st.integers(-4, 6))
def test_round_with_decimals_matches_torch(dtype, x, decimals):
    x = np.array(x, dtype)
    _same_values(nb.round(nb.tensor(x), decimals=decimals).numpy(),
                 torch.round(_t(x), decimals=decimals).numpy())
    _same_values(nb.tensor(x).round(decimals=decimals).numpy(),
                 torch.round(_t(x), decimals=decimals).numpy())


def test_round_is_half_to_even():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, 4503599627370497.0])
    np.testing.assert_array_equal(nb.round(nb.tensor(x)).numpy(),
                                  [0, 2, 2, -0.0, -2, -2, 0, 4503599627370497.0])
    np.testing.assert_array_equal(nb.round(nb.tensor(np.array([0.125, 0.375])), decimals=2).numpy(),
                                  [0.12, 0.38])


# -- integer and bool inputs ---------------------------------------------------------------------
def _outcome(fn, *args, **kwargs):
    """The result as an array, or the kind of error ('error' for any exception)."""
    try:
        return np.asarray(fn(*args, **kwargs).numpy())
    except (TypeError, RuntimeError, NotImplementedError):
        return "error"


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("name", UNARY)
def test_integer_and_bool_inputs_follow_torch(name, dtype):
    """float ops promote to the default float dtype; floor/ceil/trunc/round keep integers
    and refuse bools; sign keeps integers and bools; frac refuses both."""
    x = np.array([0, 1, 3, 7, 100, 255] if dtype in (np.uint8, np.bool_)
                 else [-300, -7, -1, 0, 1, 3, 16777217 if dtype != np.int16 else 32767], dtype)
    if dtype == np.bool_:
        x = np.array([True, False, True])
    before = x.copy()
    with np.errstate(all="ignore"):
        got = _outcome(getattr(nb, name), _n(x))
    want = _outcome(getattr(torch, name), _t(x))
    np.testing.assert_array_equal(x, before)
    if isinstance(want, str):
        assert got == want
    elif name in EXACT or name == "rsqrt":
        _same_values(got, want)
    else:
        assert got.dtype == want.dtype
        assert _ulps(got, want, want.dtype).max() <= 1


def test_integer_results_are_copies():
    x = _n(np.array([-2, 5], np.int32))
    for name in ["floor", "ceil", "trunc", "round", "sign"]:
        y = getattr(nb, name)(x)
        assert not np.shares_memory(y.numpy(), x.numpy())
    b = nb.tensor(np.array([True, False]))
    assert not np.shares_memory(nb.sign(b).numpy(), b.numpy())


def test_integer_inputs_promote_to_the_default_dtype_set_by_the_user():
    previous = nb.get_default_dtype()
    nb.set_default_dtype(nb.float64)
    try:
        y = nb.reciprocal(nb.tensor(np.array([3], np.int64)))
        assert y.dtype == np.float64 and y.numpy()[0] == 1 / 3
    finally:
        nb.set_default_dtype(previous)


def test_round_of_integers_refuses_decimals_as_torch():
    x = nb.tensor(np.array([15, 25]))
    with pytest.raises(TypeError, match="round: decimals=1 is not supported"):
        nb.round(x, decimals=1)
    with pytest.raises(NotImplementedError):
        torch.round(_t(np.array([15, 25])), decimals=1)
    np.testing.assert_array_equal(nb.round(x, decimals=0).numpy(), [15, 25])


# -- unary gradients -----------------------------------------------------------------------------
def _grads(lib, name, x, g, **kw):
    if lib is nb:
        t = nb.tensor(x, requires_grad=True)
        (gx,) = nb.grad(getattr(nb, name)(t, **kw), [t], grad_outputs=g)
        return gx.numpy()
    t = torch.tensor(x, requires_grad=True)
    getattr(torch, name)(t, **kw).backward(torch.tensor(g))
    return t.grad.numpy()


@pytest.mark.parametrize("name", UNARY)
@given(x=nbst.arrays(np.float64, min_value=-0.9, max_value=5.0, max_side=4),
       seed=st.integers(0, 99))
def test_unary_gradients_match_torch(name, x, seed):
    if name in ("reciprocal", "rsqrt"):
        x = np.where(np.abs(x) < 0.1, 0.5, np.abs(x))
    g = np.random.default_rng(seed).standard_normal(x.shape)
    want = _grads(torch, name, x, g)
    np.testing.assert_allclose(_grads(nb, name, x, g), want, rtol=1e-14, atol=0)


@pytest.mark.parametrize("dtype", FLOATS)
def test_unary_gradients_at_special_values_match_torch(dtype):
    x = _special_input(dtype)
    g = np.linspace(-2, 2, x.size).astype(dtype)
    for name in UNARY:
        with np.errstate(all="ignore"):
            got, want = _grads(nb, name, x, g), _grads(torch, name, x, g)
        assert got.dtype == dtype
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=name)
        ok = ~np.isnan(want)
        np.testing.assert_allclose(got[ok], want[ok], rtol=4e-7 if dtype == np.float32 else 4e-15,
                                   err_msg=name)


@pytest.mark.parametrize("name", UNARY + BINARY)
def test_registered_samples_gradcheck_and_gradgradcheck(name):
    assert check_registered(name).passed
    assert check_registered(name, second_order=True).passed


def test_step_ops_have_zero_gradients_even_for_infinite_upstream():
    x = nb.tensor(np.array([0.3, -1.7]), requires_grad=True)
    for name in ["floor", "ceil", "trunc", "round", "sign"]:
        y = getattr(nb, name)(x)
        (gx,) = nb.grad(y, [x], grad_outputs=np.array([np.inf, np.nan]), create_graph=True)
        np.testing.assert_array_equal(gx.numpy(), [0.0, 0.0])


def test_second_derivatives_match_torch():
    x = np.array([0.3, 0.8, 1.7, 2.5])
    for name in ["log1p", "expm1", "reciprocal", "rsqrt"]:
        t = nb.tensor(x, requires_grad=True)
        (g1,) = nb.grad(getattr(nb, name)(t).sum(), [t], create_graph=True)
        (g2,) = nb.grad(g1.sum(), [t])
        u = torch.tensor(x, requires_grad=True)
        (h1,) = torch.autograd.grad(getattr(torch, name)(u).sum(), [u], create_graph=True)
        (h2,) = torch.autograd.grad(h1.sum(), [u])
        np.testing.assert_allclose(g2.numpy(), h2.numpy(), rtol=1e-13, err_msg=name)


# -- fmod, remainder -----------------------------------------------------------------------------
# |b| > 1e-3 or 0: PyTorch's vectorised fmod gives NaN where a / b overflows (see below)
_SIGNED = (st.floats(-50, 50, width=32).filter(lambda v: v == 0 or abs(v) > 1e-3)
           | st.sampled_from([0.0, -0.0, 3.0, -3.0, 0.5]))


@pytest.mark.parametrize("name", BINARY)
@given(shapes=nbst.broadcastable_shapes(), data=st.data(),
       dtype=st.sampled_from(FLOATS))
def test_fmod_remainder_broadcast_match_torch(name, shapes, data, dtype):
    sa, sb = shapes
    a = data.draw(hnp.arrays(dtype, sa, elements=_SIGNED))
    b = data.draw(hnp.arrays(dtype, sb, elements=_SIGNED))  # zeros included: NaN
    before = (a.copy(), b.copy())
    got = getattr(nb, name)(_n(a), _n(b)).numpy()
    _same_values(got, getattr(torch, name)(_t(a), _t(b)).numpy())
    np.testing.assert_array_equal(a, before[0])
    np.testing.assert_array_equal(b, before[1])


@pytest.mark.parametrize("name", BINARY)
@given(shapes=nbst.broadcastable_shapes(), data=st.data(),
       dtype=st.sampled_from([np.int64, np.int32, np.int16, np.uint8]))
def test_integer_fmod_remainder_match_torch(name, shapes, data, dtype):
    lo = 0 if dtype == np.uint8 else -40
    a = data.draw(hnp.arrays(dtype, shapes[0], elements=st.integers(lo, 40)))
    b = data.draw(hnp.arrays(dtype, shapes[1], elements=st.integers(lo, 40)))
    if b.size and not b.all():  # a zero divisor: an error in both
        with pytest.raises(ZeroDivisionError, match=f"{name}: integer division by zero"):
            getattr(nb, name)(_n(a), _n(b))
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            getattr(torch, name)(_t(a), _t(b))
        return
    _same_values(getattr(nb, name)(_n(a), _n(b)).numpy(),
                 getattr(torch, name)(_t(a), _t(b)).numpy())


@pytest.mark.parametrize("name", BINARY)
def test_fmod_remainder_signs_and_special_values(name):
    a = np.array([5, -5, 5, -5, 4, -4, 0, -0.0, np.inf, 3, 3, np.nan, 3, 3, 7.5, -1e-300])
    b = np.array([3, 3, -3, -3, 2, 2, 0, 2, 2, np.inf, -np.inf, 1, 0, -0.0, -2, 3])
    for dtype in FLOATS:
        with np.errstate(all="ignore"):
            got = getattr(nb, name)(nb.tensor(a.astype(dtype)), nb.tensor(b.astype(dtype)))
        _same_values(got.numpy(), getattr(torch, name)(_t(a.astype(dtype)),
                                                       _t(b.astype(dtype))).numpy())
    want = [2, -2, 2, -2] if name == "fmod" else [2, 1, -1, -2]  # sign of a / sign of b
    np.testing.assert_array_equal(getattr(nb, name)(nb.tensor(a[:4]), nb.tensor(b[:4])).numpy(),
                                  want)


def test_fmod_is_exact_where_the_quotient_overflows():
    """C's fmod, exact for any quotient (PyTorch's own vectorised path gives NaN there,
    its scalar path the exact value)."""
    a, b = np.array([1e300, -1e300, 3e38]), np.array([1e-300, 1e-300, 1e-38])
    np.testing.assert_array_equal(nb.fmod(nb.tensor(a), nb.tensor(b)).numpy(), np.fmod(a, b))
    np.testing.assert_array_equal(nb.remainder(nb.tensor(a), nb.tensor(b)).numpy(),
                                  [np.fmod(a[0], b[0]), np.fmod(a[1], b[1]) + b[1],
                                   np.fmod(a[2], b[2])])
    assert torch.fmod(_t(a[:1]), _t(b[:1])).item() == np.fmod(a[0], b[0])


@pytest.mark.parametrize("name", BINARY)
@given(shapes=nbst.broadcastable_shapes(min_side=1, max_side=3), seed=st.integers(0, 99))
def test_fmod_remainder_gradients_match_torch(name, shapes, seed):
    rng = np.random.default_rng(seed)
    sa, sb = shapes
    a = rng.uniform(-6, 6, sa)
    b = rng.uniform(0.5, 2, sb) * rng.choice([-1.0, 1.0], sb)
    ta, tb = nb.tensor(a, requires_grad=True), nb.tensor(b, requires_grad=True)
    y = getattr(nb, name)(ta, tb)
    g = rng.standard_normal(y.shape)
    ga, gb = nb.grad(y, [ta, tb], grad_outputs=g)
    ua, ub = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    getattr(torch, name)(ua, ub).backward(torch.tensor(g))
    assert ga.shape == sa and gb.shape == sb
    np.testing.assert_allclose(ga.numpy(), ua.grad.numpy(), rtol=1e-14)
    np.testing.assert_allclose(gb.numpy(), ub.grad.numpy(), rtol=1e-14, atol=1e-14)


def test_fmod_remainder_dtypes_and_python_numbers_follow_torch():
    i32 = np.array([5, -6, 7], np.int32)
    f32 = np.array([5.5, -6.25, 7.0], np.float32)
    cases = [(i32, 2), (i32, 2.5), (i32, -3), (f32, 2), (f32, np.array([2.0, -3, 1.5])),
             (i32, np.array([2, -4, 3], np.int64)), (np.array([3, 4], np.uint8),
                                                     np.array([True, True]))]
    for a, b in cases:
        for name in BINARY:
            tb = _t(b) if isinstance(b, np.ndarray) else b
            nbb = _n(b) if isinstance(b, np.ndarray) else b
            _same_values(getattr(nb, name)(_n(a), nbb).numpy(),
                         getattr(torch, name)(_t(a), tb).numpy())
    # a number first: the reflected operator's form (5 % t)
    t = np.array([3.0, -3.0, 2.0])
    _same_values(nb.remainder(5, nb.tensor(t)).numpy(), (5 % _t(t)).numpy())
    _same_values(nb.remainder(nb.tensor(t), 2).numpy(), (_t(t) % 2).numpy())


@given(shapes=nbst.broadcastable_shapes(), data=st.data(),
       dtype=st.sampled_from([np.float64, np.float32, np.int64, np.int32]))
def test_floor_divide_matches_torch(shapes, data, dtype):
    elements = (st.integers(-30, 30).filter(bool) if np.dtype(dtype).kind == "i"
                else _SIGNED)
    a = data.draw(hnp.arrays(dtype, shapes[0], elements=elements))
    b = data.draw(hnp.arrays(dtype, shapes[1], elements=elements))
    want = (_t(a) // _t(b)).numpy()
    _same_values(nb.floor_divide(_n(a), _n(b)).numpy(), want)
    _same_values(_n(a).floor_divide(_n(b)).numpy(), want)
    _same_values(nb.floor_divide(7, _n(b)).numpy(), (7 // _t(b)).numpy())


def test_binary_bad_input():
    with pytest.raises(ValueError, match=r"fmod: shapes \(2,\) and \(3,\) are not broadcastable"):
        nb.fmod(nb.tensor([1.0, 2.0]), nb.tensor([1.0, 2.0, 3.0]))
    with pytest.raises(TypeError, match="remainder: not supported for two bool operands"):
        nb.remainder(nb.tensor([True]), nb.tensor([True]))
    with pytest.raises(ZeroDivisionError, match="fmod: integer division by zero"):
        nb.fmod(nb.tensor([4, 5]), 0)


# -- clamp_min, clamp_max ------------------------------------------------------------------------
@given(x=nbst.arrays(np.float64, max_side=4), bound=st.floats(-2, 2), seed=st.integers(0, 99))
def test_clamp_min_max_match_torch(x, bound, seed):
    g = np.random.default_rng(seed).standard_normal(x.shape)
    for name in ["clamp_min", "clamp_max"]:
        t = nb.tensor(x, requires_grad=True)
        y = getattr(t, name)(bound)
        (gx,) = nb.grad(y, [t], grad_outputs=g)
        u = torch.tensor(x, requires_grad=True)
        z = getattr(torch, name)(u, bound)
        z.backward(torch.tensor(g))
        _same_values(y.numpy(), z.detach().numpy())
        np.testing.assert_array_equal(gx.numpy(), u.grad.numpy())
        _same_values(getattr(nb, name)(x, bound).numpy(), z.detach().numpy())


def test_clamp_min_max_take_tensor_bounds():
    x = np.array([[-1.0, 0.5, 2.0], [0.0, 3.0, -4.0]])
    lo = np.array([0.0, 1.0, -5.0])
    _same_values(nb.clamp_min(nb.tensor(x), nb.tensor(lo)).numpy(),
                 torch.clamp_min(_t(x), _t(lo)).numpy())
    _same_values(nb.clamp_max(nb.tensor(x), nb.tensor(lo)).numpy(),
                 torch.clamp_max(_t(x), _t(lo)).numpy())


# -- bad input, methods, threads -----------------------------------------------------------------
def test_unary_bad_input():
    with pytest.raises(TypeError, match="round: decimals must be an int"):
        nb.round(nb.tensor([1.5]), decimals=1.5)
    with pytest.raises(TypeError, match="frac: x must be float32 or float64"):
        nb.frac(nb.tensor([1, 2]))
    for name in ["floor", "ceil", "trunc", "round"]:
        with pytest.raises(TypeError, match=f"{name}: not supported for a bool tensor"):
            getattr(nb, name)(nb.tensor([True]))
    with pytest.raises(TypeError):
        nb.round(nb.tensor([1.5]), 1)  # decimals is keyword-only, as in PyTorch


def test_methods_are_installed():
    x = nb.tensor([0.3, 1.6])
    for name in UNARY:
        _same_values(getattr(x, name)().numpy(), getattr(nb, name)(x).numpy())
    for name in BINARY + ["floor_divide"]:
        _same_values(getattr(x, name)(0.7).numpy(), getattr(nb, name)(x, 0.7).numpy())


@pytest.mark.parametrize("dtype", FLOATS)
def test_kernels_give_the_same_bits_at_1_and_2_threads(dtype):
    n = PARALLEL_MIN + 4099
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(n) * 7).astype(dtype)
    g = rng.standard_normal(n).astype(dtype)
    b = (rng.standard_normal(n) * 3).astype(dtype)
    b[::97] = 0

    def run():
        out = []
        with np.errstate(all="ignore"):
            for op in range(kernels.LOG1P, kernels.SIGN + 1):
                out.append(kernels.math_forward(x, op, np.empty_like(x)))
                out.append(kernels.math_backward(g, x, op, np.empty_like(x)))
            for d in (0.0, 2.0, -1.0):
                out.append(kernels.round_forward(x, d, np.empty_like(x)))
            for floored in (False, True):
                out.append(kernels.remainder_forward(x, b, floored, np.empty_like(x)))
        return out

    one, two = at_threads(1, run), at_threads(2, run)
    for u, v in zip(one, two):
        assert_same_bits(u, v)
    with np.errstate(all="ignore"):  # and the ops (which take the parallel form) agree
        _same_values(nb.log1p(nb.tensor(x)).numpy(), one[0])
        _same_values(nb.fmod(nb.tensor(x), nb.tensor(b)).numpy(), one[-2])
        _same_values(nb.remainder(nb.tensor(x), nb.tensor(b)).numpy(),
                     torch.remainder(_t(x), _t(b)).numpy())
