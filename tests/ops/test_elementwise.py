"""Element-wise ops: broadcasting forward and backward against NumPy, scalars, dtype
promotion, kinks, PyTorch oracle, bad input, integer and bool operands (memory layouts and
threads: test_elementwise_layouts.py)."""

import numpy as np
import pytest
from conftest import assert_same_bits
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from ops.elementwise_cases import BINARY, operands, unbroadcast

import nbgrad as nb
from nbgrad.kernels import broadcast_sum, strided_apply
from nbgrad.testing import gradcheck
from nbgrad.testing import strategies as nbst


# -- a fixed broadcasting example -----------------------------------------------------------
def test_fixed_example_mul_broadcast():
    a = nb.tensor([[1.0, 2.0, 3.0]], requires_grad=True)
    b = nb.tensor(np.array([[4, 5, 6], [7, 8, 9], [1, 2, 3], [4, 5, 6]], np.float32),
                  requires_grad=True)
    (a * b).sum().backward()
    assert a.grad.dtype == np.float32 and b.grad.dtype == np.float32
    np.testing.assert_array_equal(a.grad.numpy(), [[16, 20, 24]])
    np.testing.assert_array_equal(b.grad.numpy(), np.tile([1, 2, 3], (4, 1)))


# -- property tests: every binary op with both sides broadcast ------------------------------
@pytest.mark.parametrize("name", sorted(BINARY))
@given(shapes=nbst.broadcastable_shapes(2, max_dims=6, max_side=3), seed=st.integers(0, 99))
def test_binary_broadcast_matches_numpy(name, shapes, seed):
    fn, ref, da, db = BINARY[name]
    rng = np.random.default_rng(seed)
    sa, sb = shapes
    a, b = operands(name, rng, sa, sb)
    ta, tb = nb.tensor(a, requires_grad=True), nb.tensor(b, requires_grad=True)
    y = fn(ta, tb)
    np.testing.assert_allclose(y.numpy(), ref(a, b), rtol=1e-12, atol=1e-12)
    assert y.shape == np.broadcast_shapes(sa, sb) and y.dtype == np.float64
    g = np.asarray(rng.standard_normal(y.shape))
    ga, gb = nb.grad(y, [ta, tb], grad_outputs=g)
    np.testing.assert_allclose(ga.numpy(), unbroadcast(g * da(a, b), sa), rtol=1e-10,
                               atol=1e-12)
    np.testing.assert_allclose(gb.numpy(), unbroadcast(g * db(a, b), sb), rtol=1e-10,
                               atol=1e-12)
    assert ga.shape == sa and gb.shape == sb


@pytest.mark.parametrize("name", sorted(BINARY))
@given(shapes=nbst.broadcastable_shapes(2, max_dims=3, max_side=3), seed=st.integers(0, 99))
def test_binary_gradcheck(name, shapes, seed):
    a, b = operands(name, np.random.default_rng(seed), *shapes)
    assert gradcheck(BINARY[name][0], [a, b])


@given(shapes=nbst.broadcastable_shapes(3, max_dims=4, max_side=3), seed=st.integers(0, 99))
def test_composition_gradcheck(shapes, seed):
    rng = np.random.default_rng(seed)
    x, w, c = (np.asarray(rng.standard_normal(s)) for s in shapes)

    def f(x, w, c):
        h = (x * w + c).exp() / (1.0 + (w - x) ** 2)
        return (h.sqrt() + abs(c + 3.5).log() - x).mean() * 2.0 - h.max()

    assert gradcheck(f, [x, w, c])


def test_mlp_like_loss_gradcheck():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 1, 3))
    w1, b1 = rng.standard_normal((4, 3)), rng.standard_normal((4,))
    w2 = rng.standard_normal((1, 4))

    def loss(w1, b1, w2):
        h = ((x * w1).sum(axis=-1) + b1).abs() ** 1.5        # [5, 4]
        out = (h * w2).sum(axis=1)                            # [5]
        return ((out - 1.0) ** 2).mean()

    assert gradcheck(loss, [w1, b1, w2])


# -- scalars, 0-d and dtypes ----------------------------------------------------------------
def test_python_scalars_on_both_sides_keep_float32():
    x = nb.tensor([0.5, 1.0, 2.0], requires_grad=True)
    cases = [
        (lambda t: 2.0 - t, lambda v: 2.0 - v, -np.ones(3)),
        (lambda t: t - 2.0, lambda v: v - 2.0, np.ones(3)),
        (lambda t: 3 * t, lambda v: 3 * v, 3 * np.ones(3)),
        (lambda t: t / 4, lambda v: v / 4, np.full(3, 0.25)),
        (lambda t: 1.0 / t, lambda v: 1.0 / v, -1.0 / np.array([0.5, 1.0, 2.0]) ** 2),
        (lambda t: t**2, lambda v: v**2, 2 * np.array([0.5, 1.0, 2.0])),
        (lambda t: 2.0**t, lambda v: 2.0**v, np.log(2) * 2.0 ** np.array([0.5, 1.0, 2.0])),
        (lambda t: t + True, lambda v: v + 1, np.ones(3)),
    ]
    for f, ref, dref in cases:
        x.grad = None
        y = f(x)
        assert y.dtype == np.float32
        np.testing.assert_allclose(y.numpy(), ref(np.array([0.5, 1.0, 2.0])), rtol=1e-6)
        y.sum().backward()
        assert x.grad.dtype == np.float32
        np.testing.assert_allclose(x.grad.numpy(), dref, rtol=1e-6)


def test_zero_dim_tensors_and_ndarray_operands():
    s = nb.tensor(np.array(3.0), requires_grad=True)
    m = nb.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    y = s * m - m / s
    y.sum().backward()
    mv = np.arange(6.0).reshape(2, 3)
    np.testing.assert_allclose(s.grad.numpy(), np.sum(mv + mv / 9.0))
    np.testing.assert_allclose(m.grad.numpy(), np.full((2, 3), 3.0 - 1 / 3.0))
    assert s.grad.shape == ()
    arr = np.array([1.0, 2.0, 3.0], np.float32)
    t = nb.tensor([1.0, 1.0, 1.0], requires_grad=True)
    r = arr * t + arr - t * arr / 2
    np.testing.assert_allclose(r.numpy(), arr * 1.5)
    r.sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), arr / 2)


def test_dtype_promotion_and_grad_dtypes():
    a = nb.tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    b = nb.tensor(np.array([[3.0], [4.0]], np.float64), requires_grad=True)
    y = a * b
    assert y.dtype == np.float64
    y.sum().backward()
    assert a.grad.dtype == np.float32 and b.grad.dtype == np.float64
    np.testing.assert_allclose(a.grad.numpy(), [7.0, 7.0])
    np.testing.assert_allclose(b.grad.numpy(), [[3.0], [3.0]])

    i = nb.tensor([1, 2, 3])
    f = nb.tensor([0.5, 0.5, 0.5], requires_grad=True)
    assert i.dtype == np.int64
    assert (i + f).dtype == np.float32 and (f * i).dtype == np.float32
    assert (i + i).dtype == np.int64 and (i * 3).dtype == np.int64
    np.testing.assert_array_equal((i * i - 1).numpy(), [0, 3, 8])
    np.testing.assert_array_equal((i**2).numpy(), [1, 4, 9])
    assert (i / i).dtype == np.float32 and (i / 2).dtype == np.float32
    np.testing.assert_allclose((i / 2).numpy(), [0.5, 1.0, 1.5])
    assert (i + 0.5).dtype == np.float32
    assert nb.exp(i).dtype == np.float32 and (-i).dtype == np.int64
    assert abs(nb.tensor([-2, 3])).numpy().tolist() == [2, 3]
    (i * f).sum().backward()
    np.testing.assert_array_equal(f.grad.numpy(), [1, 2, 3])
    d = nb.tensor(np.ones(2), requires_grad=True)   # float64 with a float32 tensor
    assert (d + a).dtype == np.float64 and (a - d).dtype == np.float64


# -- unary ops and kinks --------------------------------------------------------------------
UNARY = {
    "exp": (nb.exp, np.exp, np.exp),
    "log": (nb.log, np.log, lambda x: 1 / x),
    "sqrt": (nb.sqrt, np.sqrt, lambda x: 0.5 / np.sqrt(x)),
    "abs": (nb.abs, np.abs, np.sign),
    "neg": (nb.neg, np.negative, lambda x: -np.ones_like(x)),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@given(x=nbst.arrays(np.float64, min_value=0.05, max_value=4.0, max_dims=3))
def test_unary_matches_numpy(name, dtype, x):
    fn, ref, dref = UNARY[name]
    x = x.astype(dtype)
    if name in ("abs", "neg", "exp"):
        x = x - dtype(2)
    t = nb.tensor(x, requires_grad=True)
    y = fn(t)
    assert y.dtype == dtype and y.shape == x.shape
    tol = 4e-7 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(y.numpy(), ref(x), rtol=tol, atol=tol)
    g = np.asarray(np.random.default_rng(0).standard_normal(x.shape)).astype(dtype)
    (gx,) = nb.grad(y, [t], grad_outputs=g)
    assert gx.dtype == dtype
    np.testing.assert_allclose(gx.numpy(), g * dref(x), rtol=10 * tol, atol=tol)


def test_kinks_follow_pytorch():
    x = nb.tensor([-1.0, 0.0, 2.0], requires_grad=True)
    abs(x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [-1.0, 0.0, 1.0])
    z = nb.tensor([0.0, 4.0], requires_grad=True)
    nb.sqrt(z).sum().backward()
    assert np.isposinf(z.grad.numpy()[0]) and z.grad.numpy()[1] == 0.25
    base = nb.tensor([0.0, 0.0, 0.0, 2.0], requires_grad=True)
    expo = nb.tensor([2.0, 0.0, -1.0, 0.0], requires_grad=True)
    y = base**expo
    np.testing.assert_array_equal(y.numpy(), [0.0, 1.0, np.inf, 1.0])
    gb, ge = nb.grad(base**expo, [base, expo], grad_outputs=np.ones(4, np.float32))
    # d/dexponent at base 0 is 0 for exponent >= 0; d/dbase is 0 where exponent == 0
    np.testing.assert_array_equal(ge.numpy()[:2], [0.0, 0.0])
    assert np.isneginf(ge.numpy()[2])
    np.testing.assert_array_equal(gb.numpy()[[0, 1, 3]], [0.0, 0.0, 0.0])
    nz = nb.tensor([-8.0, -2.0], requires_grad=True)
    y = nz**3.0
    np.testing.assert_array_equal(y.numpy(), [-512.0, -8.0])
    y.sum().backward()
    np.testing.assert_array_equal(nz.grad.numpy(), [192.0, 12.0])
    assert np.isnan((nz**0.5).numpy()).all()
    assert np.isneginf(nb.log(nb.tensor([0.0])).numpy()[0])



# -- PyTorch oracle -------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(BINARY))
@given(shapes=nbst.broadcastable_shapes(2, max_dims=5, max_side=4), seed=st.integers(0, 99))
def test_binary_against_pytorch(name, shapes, seed):
    torch = pytest.importorskip("torch")
    a, b = operands(name, np.random.default_rng(seed), *shapes)
    ta, tb = nb.tensor(a, requires_grad=True), nb.tensor(b, requires_grad=True)
    pa = torch.tensor(a, requires_grad=True)
    pb = torch.tensor(b, requires_grad=True)
    fn = BINARY[name][0]
    y = fn(ta, tb)
    py = getattr(torch, name)(pa, pb)
    np.testing.assert_allclose(y.numpy(), py.detach().numpy(), rtol=1e-12, atol=1e-12)
    g = np.asarray(np.random.default_rng(seed + 1).standard_normal(y.shape))
    ga, gb = nb.grad(y, [ta, tb], grad_outputs=g)
    pga, pgb = torch.autograd.grad(py, [pa, pb], grad_outputs=torch.tensor(g))
    np.testing.assert_allclose(ga.numpy(), pga.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gb.numpy(), pgb.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@given(shape=hnp.array_shapes(min_dims=0, max_dims=3, max_side=9), seed=st.integers(0, 99),
       transposed=st.booleans())
def test_square_matches_pytorch_bit_for_bit(dtype, shape, seed, transposed):
    """x ** 2 is x * x with gradient g * (x + x), PyTorch's formulas for a number
    exponent: the same bits, non-finite values and signed zeros included (NaN payloads
    aside). A 0-d or one-element exponent tensor of 2 gives the same (PyTorch's tensor
    exponents go through pow and can differ in the last bit)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 1e20).astype(dtype)
    x.reshape(-1)[:3] = [np.nan, -np.inf, -0.0][: x.size]
    if transposed:
        x = x.T
    g = rng.standard_normal(x.shape).astype(dtype)
    p = torch.tensor(x, requires_grad=True)
    py = p ** 2
    (pga,) = torch.autograd.grad(py, [p], grad_outputs=torch.tensor(g))
    with np.errstate(over="ignore"):  # x is drawn up to 1e20: x * x overflows, on purpose
        _same_values(py.detach().numpy(), x * x)
    for exponent in (2, nb.tensor(np.asarray(2.0, dtype)),
                     nb.tensor(np.full((1,) * x.ndim, 2.0, dtype))):
        t = nb.tensor(x, requires_grad=True)
        y = t ** exponent
        (ga,) = nb.grad(y, [t], grad_outputs=g)
        _same_values(y.numpy(), py.detach().numpy())
        _same_values(ga.numpy(), pga.numpy())


def _same_values(a: np.ndarray, b: np.ndarray) -> None:
    """Bitwise equal, with any NaN equal to any NaN."""
    nan = np.isnan(a)
    np.testing.assert_array_equal(nan, np.isnan(b))
    assert_same_bits(np.where(nan, 0, a), np.where(nan, 0, b))


def test_square_with_an_exponent_that_needs_a_gradient():
    a = 0.5 + np.random.default_rng(0).random((3, 4))
    t, e = nb.tensor(a, requires_grad=True), nb.tensor(np.asarray(2.0), requires_grad=True)
    ga, ge = nb.grad((t ** e).sum(), [t, e])
    np.testing.assert_allclose(ga.numpy(), 2 * a, rtol=1e-15)
    np.testing.assert_allclose(ge.numpy(), (a ** 2 * np.log(a)).sum(), rtol=1e-13)


def test_unary_and_kinks_against_pytorch():
    torch = pytest.importorskip("torch")
    x = np.array([-2.0, -0.5, 0.0, 0.5, 3.0], np.float32)
    for name in ["exp", "abs", "neg"]:
        t = nb.tensor(x, requires_grad=True)
        p = torch.tensor(x, requires_grad=True)
        getattr(nb, name)(t).sum().backward()
        getattr(torch, name)(p).sum().backward()
        np.testing.assert_allclose(t.grad.numpy(), p.grad.numpy(), rtol=1e-6)
    xp = np.array([0.0, 0.5, 3.0], np.float32)
    for name in ["log", "sqrt"]:
        t = nb.tensor(xp, requires_grad=True)
        p = torch.tensor(xp, requires_grad=True)
        y, py = getattr(nb, name)(t), getattr(torch, name)(p)
        np.testing.assert_allclose(y.numpy(), py.detach().numpy(), rtol=1e-6)
        y.sum().backward()
        py.sum().backward()
        np.testing.assert_allclose(t.grad.numpy(), p.grad.numpy(), rtol=1e-6)
    base = np.array([0.0, 0.0, 2.0, 1.5], np.float32)
    expo = np.array([2.0, 0.0, 0.0, -1.0], np.float32)
    tb, te = nb.tensor(base, requires_grad=True), nb.tensor(expo, requires_grad=True)
    pb, pe = torch.tensor(base, requires_grad=True), torch.tensor(expo, requires_grad=True)
    (tb**te).sum().backward()
    (pb**pe).sum().backward()
    np.testing.assert_allclose(tb.grad.numpy(), pb.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(te.grad.numpy(), pe.grad.numpy(), rtol=1e-6)


# -- bad input ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(BINARY))
def test_mismatched_shapes_name_op_and_shapes(name):
    a = nb.ones(2, 3)
    b = nb.ones(4, 3)
    with pytest.raises(ValueError, match=rf"{name}: shapes \(2, 3\) and \(4, 3\)"):
        BINARY[name][0](a, b)
    with pytest.raises(ValueError, match=rf"{name}: shapes \(3,\) and \(2, 2\)"):
        BINARY[name][0](nb.ones(3), np.ones((2, 2), np.float32))


def test_sum_to_shape_rejects_non_broadcast_shape():
    with pytest.raises(ValueError, match=r"sum_to_shape: shape \(3,\) does not broadcast"):
        broadcast_sum.sum_to_shape(np.ones((2, 4)), (3,))
    with pytest.raises(ValueError, match="more dims"):
        broadcast_sum.sum_to_shape(np.ones((4,)), (1, 4))


def test_empty_and_high_rank_operands():
    a = nb.zeros(0, 3, requires_grad=True)
    b = nb.ones(3, requires_grad=True)
    y = a * b + 2.0
    assert y.shape == (0, 3) and y.sum().item() == 0.0
    y.sum().backward()
    assert a.grad.shape == (0, 3)
    np.testing.assert_array_equal(b.grad.numpy(), np.zeros(3))
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 3, 1, 2, 3, 1, 2))
    w = rng.standard_normal((3, 4, 1, 1, 5, 1))
    tx, tw = nb.tensor(x, requires_grad=True), nb.tensor(w, requires_grad=True)
    gx, gw = nb.grad((tx * tw).sum(), [tx, tw])
    np.testing.assert_allclose(gx.numpy(), unbroadcast(np.broadcast_to(w, (2, 3, 4, 2, 3, 5, 2)),
                                                       x.shape))
    np.testing.assert_allclose(gw.numpy(), unbroadcast(np.broadcast_to(x, (2, 3, 4, 2, 3, 5, 2)),
                                                       w.shape))


# -- integer and bool operands ---------------------------------------------------------------
def test_python_scalars_promote_as_in_pytorch():
    b = nb.tensor([True, False, True])
    i = nb.tensor([1, 2, 3])
    f = nb.tensor([0.5, 1.5])
    cases = [(b + 5, np.int64, [6, 5, 6]), (5 + b, np.int64, [6, 5, 6]),
             (b * 3, np.int64, [3, 0, 3]), (b / 2, np.float32, [0.5, 0.0, 0.5]),
             (b + 2.5, np.float32, [3.5, 2.5, 3.5]), (b + True, np.bool_, [True] * 3),
             (b * False, np.bool_, [False] * 3), (i + 2.5, np.float32, [3.5, 4.5, 5.5]),
             (i / 2, np.float32, [0.5, 1.0, 1.5]), (i * 2, np.int64, [2, 4, 6]),
             (f + 1 / 3, np.float32, np.float32([0.5, 1.5]) + np.float32(1 / 3)),
             (nb.tensor([1, 2], dtype=np.int32) + 5, np.int32, [6, 7]),
             (nb.tensor([1, 2], dtype=np.int32) * i[:2], np.int64, [1, 4])]
    for y, dtype, want in cases:
        assert y.dtype == dtype
        np.testing.assert_array_equal(y.numpy(), want)
    with pytest.raises(OverflowError, match="2199023255552 does not fit the tensor's dtype"):
        nb.tensor([1], dtype=np.int32) + 2**41


def test_integer_arithmetic_is_exact_beyond_2_to_the_53():
    big = 2**53 + 1
    x = nb.tensor(np.array([big, -big]))
    assert (x + 1).tolist() == [big + 1, -big + 1]
    assert (x - 1).tolist() == [big - 1, -big - 1]
    assert (x * 1).tolist() == [big, -big] and (1 * x).tolist() == [big, -big]
    assert (-x).tolist() == [-big, big] and nb.abs(x).tolist() == [big, big]
    assert (nb.tensor([3]) ** 33).tolist() == [3**33]
    assert x.sum().item() == 0 and nb.tensor(np.array([big, 2])).sum().item() == big + 2
    assert nb.tensor(np.array([[big], [1]])).sum(0).tolist() == [big + 1]


def test_integers_to_negative_integer_powers_are_an_error():
    with pytest.raises(ValueError, match="pow: integers to negative integer powers are not "
                                         "allowed"):
        nb.tensor(np.array([2, 3])) ** -1
    with pytest.raises(ValueError, match="pow: integers to negative integer powers"):
        nb.tensor([2, 3]) ** nb.tensor([1, -2])
    with pytest.raises(ValueError, match="pow: integers to negative integer powers"):
        2 ** nb.tensor([-1])
    np.testing.assert_array_equal((nb.tensor([2, 4]) ** -1.0).numpy(), [0.5, 0.25])
    assert (nb.tensor([True, False]) ** 2).tolist() == [1, 0]


def test_bool_subtraction_and_negation_are_errors_as_in_pytorch():
    b = nb.tensor([True, False])
    for f in (lambda: b - b, lambda: b - 1, lambda: 1 - b, lambda: nb.tensor([1.0, 2.0]) - b):
        with pytest.raises(TypeError, match="sub: subtraction with a bool operand"):
            f()
    with pytest.raises(TypeError, match="neg: not supported for a bool tensor"):
        nb.neg(b)
    with pytest.raises(TypeError, match="abs: not supported for a bool tensor"):
        nb.abs(b)
    with pytest.raises(TypeError, match="pow: not supported for two bool operands"):
        b ** b
    assert (-nb.tensor([1, 2], dtype=np.int32)).dtype == np.int32


@given(shapes=nbst.broadcastable_shapes(2, max_dims=4, max_side=4))
def test_the_leading_rows_plan_is_the_general_plan(shapes):
    """Where leading_rows_nest plans a pair of contiguous operands from their shapes, it
    gives what flat_operand + coalesce give (so the kernels run the same loop nest)."""
    full = np.broadcast_shapes(*shapes)
    nest = strided_apply.leading_rows_nest(full, tuple(shapes))
    if nest is None:
        return
    strides = [strided_apply.flat_operand(np.zeros(s), len(full))[1] for s in shapes]
    assert nest == strided_apply.coalesce(full, strides)


def test_a_bias_and_equal_shapes_get_the_leading_rows_plan():
    plan = strided_apply.leading_rows_nest
    assert plan((256, 64), ((256, 64), (64,))) == ([256, 64], [[64, 1], [0, 1]])
    assert plan((8, 3, 5), ((1, 3, 5), (8, 3, 5))) == ([8, 15], [[0, 1], [15, 1]])
    assert plan((4, 5), ((4, 5), (4, 5))) == ([20], [[1], [1]])
    assert plan((4, 5), ((4, 1), (4, 5))) is None  # a column broadcast: the general plan
    assert plan((1, 5), ((5,), (1, 5))) is None  # one row: the general plan drops it
