"""Element-wise ops: broadcasting forward and backward against NumPy, scalars, dtype
promotion, kinks, strided and 0-stride inputs, threads, PyTorch oracle, bad input."""

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nbgrad as nb
from nbgrad.kernels import broadcast_sum, strided_apply
from nbgrad.runtime.jit import PARALLEL_MIN
from nbgrad.testing import gradcheck
from nbgrad.testing import strategies as nbst

# name -> (function, NumPy forward, d/da, d/db) with the partials as NumPy expressions
BINARY = {
    "add": (nb.add, np.add, lambda a, b: np.ones_like(a * b), lambda a, b: np.ones_like(a * b)),
    "sub": (nb.sub, np.subtract, lambda a, b: np.ones_like(a * b),
            lambda a, b: -np.ones_like(a * b)),
    "mul": (nb.mul, np.multiply, lambda a, b: b + 0 * a, lambda a, b: a + 0 * b),
    "div": (nb.div, np.divide, lambda a, b: 1 / b + 0 * a, lambda a, b: -a / b**2),
    "pow": (nb.pow, np.power, lambda a, b: b * a ** (b - 1), lambda a, b: a**b * np.log(a)),
}


def unbroadcast(full: np.ndarray, shape: tuple) -> np.ndarray:
    """Reference: sum ``full`` over the axes broadcast to reach it from ``shape``."""
    lead = full.ndim - len(shape)
    out = full.sum(axis=tuple(range(lead))) if lead else full
    axes = tuple(d for d, n in enumerate(shape) if n == 1 and out.shape[d] != 1)
    return out.sum(axis=axes, keepdims=True).reshape(shape) if axes else out.reshape(shape)


def operands(name, rng, sa, sb):
    a = np.asarray(rng.standard_normal(sa))
    b = np.asarray(rng.standard_normal(sb))
    if name == "div":
        b = np.where(np.abs(b) < 0.3, 0.7, b)
    if name == "pow":
        a = np.asarray(0.5 + rng.random(sa))
    return a, b


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


# -- layouts: strided, negative-stride and 0-stride operands --------------------------------
def test_strided_views_and_zero_stride_upstream():
    rng = np.random.default_rng(5)
    base = rng.standard_normal((6, 10_000))
    a = base.T[::2]                      # (5000, 6), non-contiguous
    b = base[::-1, :1].T                 # (1, 6), negative stride
    ta, tb = nb.tensor(a, requires_grad=True), nb.tensor(b, requires_grad=True)
    for name, (fn, ref, da, db) in BINARY.items():
        if name == "pow":
            continue
        y = fn(ta, tb)
        np.testing.assert_allclose(y.numpy(), ref(a, b), rtol=1e-12)
        # sum()'s backward hands this op a 0-stride g, read in place by the reduction
        ga, gb = nb.grad(y.sum(), [ta, tb])
        np.testing.assert_allclose(ga.numpy(), unbroadcast(da(a, b), a.shape), rtol=1e-10)
        np.testing.assert_allclose(gb.numpy(), unbroadcast(db(a, b), b.shape), rtol=1e-10)
    # kernel level: strided, negative-stride and 0-stride views straight in
    c = np.broadcast_to(rng.standard_normal(6), (5000, 6))  # 0-stride rows
    np.testing.assert_allclose(strided_apply.broadcast_apply(strided_apply.MUL, a, c), a * c)
    np.testing.assert_allclose(strided_apply.broadcast_apply(strided_apply.SUB, c, b), c - b)
    np.testing.assert_allclose(broadcast_sum.reduce_term(strided_apply.MUL, c, a, b.shape),
                               unbroadcast(c * a, b.shape))
    np.testing.assert_allclose(broadcast_sum.sum_to_shape(c[::-1], (6,)), c.sum(axis=0))


@pytest.mark.parametrize("side", [16, 300])  # views of up to 1,024 / 360,000 elements
@pytest.mark.parametrize("view", ["transpose", "columns", "reversed", "every_other"])
def test_ops_on_strided_views_give_numpys_bits_on_both_sides_of_the_copy_size(side, view):
    """A strided view of at most COPY_VIEW_MAX elements is copied into C order before
    the op, a larger one read in place by the strided kernel: either way every element
    is NumPy's, the result C-contiguous, and the viewed array unchanged, against a
    scalar, an operand of the view's shape, and a row repeated down it."""
    from nbgrad.ops.elementwise import COPY_VIEW_MAX

    rng = np.random.default_rng(9)
    base = rng.standard_normal((side, 4 * side)).astype(np.float32) + 3
    kept = base.copy()
    x = {"transpose": base.T, "columns": base[:, 1: 2 * side + 1],
         "reversed": base[::-1], "every_other": base[::2, ::3]}[view]
    assert not x.flags.c_contiguous and (x.size <= COPY_VIEW_MAX) == (side == 16)
    t = nb.tensor(x)
    for w in [np.float32(1.5), rng.standard_normal(x.shape).astype(np.float32) + 3,
              rng.standard_normal(x.shape[1]).astype(np.float32) + 3]:
        for name, ref in [("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                          ("div", np.divide)]:
            for out, expected in [(getattr(nb, name)(t, nb.tensor(w)), ref(x, w)),
                                  (getattr(nb, name)(nb.tensor(w), t), ref(w, x))]:
                assert out.numpy().flags.c_contiguous
                assert_same_bits(out.numpy(), expected)
    assert_same_bits(base, kept)


@pytest.mark.parametrize("full,other", [((16, 8, 8, 8), (1, 8, 1, 1)),
                                        ((16, 8, 8, 8), (8, 1, 1)),
                                        ((64, 130), (64, 130)),
                                        ((300, 7), (1,)),
                                        ((5, 4), (5, 1))])
@pytest.mark.parametrize("repeated_first", [True, False])
def test_an_operand_of_one_repeated_value_gives_numpys_bits(full, other, repeated_first):
    """The gradient a full sum hands its input is one value repeated (a 0-stride view of
    the input's shape). Against it, each op computes over the other operand's own shape
    and repeats the result: bit for bit NumPy's values over the broadcast, and a new
    C-contiguous array, for every element-wise op, a repeated operand on either side, and
    an other operand that is itself repeated, broadcast or full, contiguous or strided."""
    from nbgrad.ops.elementwise import _binary

    rng = np.random.default_rng(7)
    repeated = np.broadcast_to(np.float32(rng.standard_normal()) + np.float32(2), full)
    for w in [rng.standard_normal(other).astype(np.float32) + 3,
              (rng.standard_normal(other[::-1]).astype(np.float32) + 3).T,  # strided
              np.broadcast_to(np.float32(1.5), full)]:
        u, v = (repeated, w) if repeated_first else (w, repeated)
        for op, ref in [(strided_apply.ADD, np.add), (strided_apply.SUB, np.subtract),
                        (strided_apply.MUL, np.multiply), (strided_apply.DIV, np.divide)]:
            out = _binary(op, u, v, full)
            assert out.flags.c_contiguous and out.shape == full
            assert_same_bits(out, ref(u, v))


def test_gradient_of_a_summed_per_channel_product_matches_numpy():
    """(x * scale).sum() over [16, 8, 8, 8]: x's gradient is the scale repeated, the
    scale's the sums of x over all but the channel axis."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((16, 8, 8, 8)).astype(np.float32)
    scale = rng.standard_normal((1, 8, 1, 1)).astype(np.float32)
    for need_scale in [False, True]:
        tx, ts = nb.tensor(x, requires_grad=True), nb.tensor(scale, requires_grad=need_scale)
        (tx * ts).sum().backward()
        assert_same_bits(tx.grad.numpy(), np.array(np.broadcast_to(scale, x.shape)))
        if need_scale:
            np.testing.assert_allclose(ts.grad.numpy(),
                                       x.astype(np.float64).sum((0, 2, 3), keepdims=True),
                                       rtol=1e-5, atol=1e-4)


@given(rows=st.integers(2, 300), n=st.integers(2, 70), bias_first=st.booleans(),
       dtype=st.sampled_from([np.float32, np.float64]), seed=st.integers(0, 99))
def test_bias_rows_equal_numpy_bitwise(rows, n, bias_first, dtype, seed):
    """A bias added to every row of a small matrix, and its gradient (the rows summed),
    take the serial bias-row kernels: +, -, *, / equal NumPy's bit for bit, and the sum
    equals NumPy's row-by-row accumulation (rows in order) bit for bit."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, n)).astype(dtype)
    b = rng.standard_normal(n).astype(dtype)
    u, v = (b, x) if bias_first else (x, b)
    for op, ref in [(strided_apply.ADD, np.add), (strided_apply.SUB, np.subtract),
                    (strided_apply.MUL, np.multiply), (strided_apply.DIV, np.divide)]:
        assert_same_bits(strided_apply.broadcast_apply(op, u, v), ref(u, v))
    in_row_order = np.zeros(n, dtype)
    for row in x:
        in_row_order += row
    assert_same_bits(broadcast_sum.sum_to_shape(x, (n,)), in_row_order)
    assert_same_bits(broadcast_sum.reduce_term(strided_apply.COPY, x, None, (n,), -2.0),
                     in_row_order * dtype(-2.0))


def test_fused_reduction_equals_materialised_reference():
    """Rule 5: reduce_term(op, g, w) (fused) == sum_to_shape(broadcast_apply(op, g, w))."""
    rng = np.random.default_rng(6)
    for full, target in [((7, 5, 9), (1, 5, 1)), ((300, 40), (40,)), ((3, 4000), (3, 1)),
                         ((2, 3, 4, 5, 6, 7), (2, 1, 4, 1, 6, 1)), ((50000,), ())]:
        g = rng.standard_normal(full)
        w = rng.standard_normal(full[-1:])
        for op in (strided_apply.MUL, strided_apply.DIV, strided_apply.COPY):
            fused = broadcast_sum.reduce_term(op, g, w, target)
            ref = broadcast_sum.sum_to_shape(strided_apply.broadcast_apply(op, g, w), target)
            np.testing.assert_allclose(fused, ref, rtol=1e-10, atol=1e-9)
            assert fused.shape == target


def test_both_gradients_of_a_same_shape_product_are_its_rounded_products():
    """x * y with both operands of the output's shape: NumPy's products below PARALLEL_MIN
    elements, one parallel pass above, strided or not. A float32 product rounded from
    float64 (where it is exact) is the reference, bit for bit, at 1 and 2 threads."""
    rng = np.random.default_rng(10)
    for shape in [(64,), (16, 48), (PARALLEL_MIN + 3,), (512, 300)]:
        a, b, g = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
        for view in (lambda t: t, lambda t: t[..., ::-1]):
            x, y, up = view(a), view(b), view(g)
            for threads in (1, 2):
                def grads(x=x, y=y, up=up):
                    tx, ty = nb.tensor(x, requires_grad=True), nb.tensor(y, requires_grad=True)
                    (tx * ty).backward(nb.tensor(up))
                    return tx.grad.numpy(), ty.grad.numpy()

                gx, gy = at_threads(threads, grads)
                exact = up.astype(np.float64)
                assert_same_bits(gx, (exact * y).astype(np.float32))
                assert_same_bits(gy, (exact * x).astype(np.float32))


def test_mul_grads_fused_equals_two_pass_bitwise():
    """Rule 5: mul's one-pass backward (both gradients) == the two-pass path
    (reduce_term for the broadcast operand, broadcast_apply for the full one), bit for
    bit, for a full-size and a 0-stride upstream g, at 1 and 2 threads."""
    rng = np.random.default_rng(9)
    for su, sw in [((1, 1024), (4096, 1024)), ((1024,), (4096, 1024)), ((5,), (3, 5)),
                   ((1, 3, 4), (70000, 3, 4)), ((1, 1, 5000), (2, 60, 5000)),
                   ((20000,), (9, 20000)), ((1, 2), (200_000, 2))]:
        for dt in (np.float32, np.float64):
            u = rng.standard_normal(su).astype(dt)
            w = rng.standard_normal(sw).astype(dt)
            for g in (rng.standard_normal(sw).astype(dt),
                      np.broadcast_to(np.asarray(dt(1.5)).reshape((1,) * len(sw)), sw)):
                ref_u = broadcast_sum.reduce_term(strided_apply.MUL, g, w, su, 1.0, sw)
                ref_w = strided_apply.broadcast_apply(strided_apply.MUL, g, u, sw)
                np.testing.assert_allclose(ref_u, unbroadcast(g * w, su), rtol=1e-3, atol=1e-2)
                for threads in (1, 2):
                    gu, gw = at_threads(threads, broadcast_sum.mul_grads, g, u, w)
                    assert_same_bits(gu, ref_u)
                    assert_same_bits(gw, ref_w)
    # shapes that do not fit (u broadcast inside, g strided, u full, u a scalar) fall
    # back to the two-pass path: None
    g = rng.standard_normal((4, 3))
    assert broadcast_sum.mul_grads(g, rng.standard_normal((1, 1)), g) is None
    assert broadcast_sum.mul_grads(g, rng.standard_normal((4, 1)),
                                   rng.standard_normal((4, 3))) is None
    assert broadcast_sum.mul_grads(g.T.T[:, ::-1], rng.standard_normal(3), g) is None
    assert broadcast_sum.mul_grads(g, g, g) is None


@pytest.mark.parametrize("shape", [(64,), (3, 5, 7), (300_000,)])
def test_same_shape_mul_backward_is_the_products(shape):
    """Both gradients of a same-shape a * b from the one-pass kernel (serial below
    PARALLEL_MIN, chunked above) are the products g * b and g * a, bit for bit, at 1 and 2
    threads; a strided operand takes the two-pass path and agrees."""
    rng = np.random.default_rng(11)
    a, b, g = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))

    def grads(a, b):
        ta, tb = nb.tensor(a, requires_grad=True), nb.tensor(b, requires_grad=True)
        return [t.numpy() for t in nb.grad(ta * tb, [ta, tb], grad_outputs=g)]

    for threads in (1, 2):
        ga, gb = at_threads(threads, grads, a, b)
        assert_same_bits(ga, g * b)
        assert_same_bits(gb, g * a)
    if len(shape) > 1:
        strided = np.swapaxes(np.swapaxes(a, 0, -1).copy(), 0, -1)  # same values, F-order
        ga, gb = grads(strided, b)
        assert_same_bits(ga, g * b)
        assert_same_bits(gb, g * a)


def test_mul_backward_takes_fused_path_either_operand_order():
    rng = np.random.default_rng(10)
    a = rng.standard_normal((1, 64)).astype(np.float32)
    b = rng.standard_normal((300, 64)).astype(np.float32)
    for x, y in [(a, b), (b, a)]:
        tx, ty = nb.tensor(x, requires_grad=True), nb.tensor(y, requires_grad=True)
        (tx * ty).sum().backward()
        np.testing.assert_allclose(tx.grad.numpy(), unbroadcast(np.ones((300, 64)) * y, x.shape),
                                   rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(ty.grad.numpy(), unbroadcast(np.ones((300, 64)) * x, y.shape),
                                   rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("full, column", [((256, 64), (256, 1)), ((3, 4, 5), (3, 4, 1)),
                                          ((64, 32, 8, 8), (64, 32, 1, 1)),
                                          ((2, 300_000), (2, 1)),            # parallel
                                          # repeated over leading axes: a per-channel scale
                                          ((16, 8, 8, 8), (1, 8, 1, 1)),
                                          ((64, 32, 8, 8), (32, 1, 1)),      # parallel
                                          ((4, 3, 5, 6, 7), (3, 5, 1, 1)),
                                          ((5, 1, 3, 4), (1, 1, 3, 1))])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_value_per_row_against_its_row_is_numpys_bit_for_bit(full, column, dtype):
    # [rows, n] against a value per row in both orders (strided_apply._apply_column): one
    # IEEE operation per element, as NumPy's
    rng = np.random.default_rng(12)
    assert strided_apply.column_nest(full, full, column) is not None  # the path tested
    x = rng.standard_normal(full).astype(dtype)
    c = (rng.standard_normal(column) + 3).astype(dtype)
    for op, ufunc in [(nb.add, np.add), (nb.sub, np.subtract), (nb.mul, np.multiply),
                      (nb.div, np.divide)]:
        np.testing.assert_array_equal(op(nb.tensor(x), nb.tensor(c)).numpy(), ufunc(x, c))
        np.testing.assert_array_equal(op(nb.tensor(c), nb.tensor(x)).numpy(), ufunc(c, x))


# -- determinism ----------------------------------------------------------------------------
@pytest.mark.parametrize("sa,sb", [((1, 1024), (4096, 1024)), ((300_000,), (1,)),
                                   ((256, 1), (256, 1024)), ((2, 1, 1, 9), (7, 2000, 1))])
def test_one_vs_two_threads_bitwise(sa, sb):
    rng = np.random.default_rng(7)
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)

    def run():
        ta, tb = nb.tensor(a, requires_grad=True), nb.tensor(b, requires_grad=True)
        y = (ta * tb) / (1.5 + abs(tb)) - ta
        g = np.asarray(np.random.default_rng(8).standard_normal(y.shape), np.float32)
        ga, gb = nb.grad(y, [ta, tb], grad_outputs=g)
        return y.numpy(), ga.numpy(), gb.numpy()

    one, two = at_threads(1, run), at_threads(2, run)
    for r1, r2 in zip(one, two):
        assert_same_bits(r1, r2)
    # and the forward is NumPy's, bit for bit (each element one IEEE operation per op)
    np.testing.assert_array_equal(one[0], (a * b) / (np.float32(1.5) + np.abs(b)) - a)


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
