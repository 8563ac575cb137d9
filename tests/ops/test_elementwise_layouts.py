"""Element-wise ops over memory layouts: strided, negative-stride and 0-stride operands
(on both sides of the copy size), one repeated value, bias rows, the fused gradient
reductions and both gradients of a product in one pass, and one vs two threads."""

import math

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads
from hypothesis import given
from hypothesis import strategies as st
from ops.elementwise_cases import BINARY, unbroadcast

import nbgrad as nb
from nbgrad.kernels import broadcast_sum, strided_apply
from nbgrad.kernels.strided_apply import COPY_VIEW_MAX, COPY_VIEW_MAX_ND
from nbgrad.ops.binary import apply as binary_apply
from nbgrad.runtime.jit import PARALLEL_MIN


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


@pytest.mark.parametrize("dims", [(20, 30, 40), (40, 50, 60), (50, 60, 50)])
@pytest.mark.parametrize("perm", [(2, 1, 0), (0, 2, 1), (1, 0, 2)])
def test_permuted_views_of_three_dims_give_numpys_bits_copied_or_not(dims, perm):
    """Permuted 3-D views below COPY_VIEW_MAX, between it and COPY_VIEW_MAX_ND (copied
    to C order first) and above (the strided kernel): NumPy's bits, a C-contiguous
    result, the viewed array unchanged."""
    rng = np.random.default_rng(14)
    base = rng.standard_normal(dims).astype(np.float32) + 3
    kept = base.copy()
    x = base.transpose(perm)
    size = math.prod(dims)
    assert (size <= COPY_VIEW_MAX, size <= COPY_VIEW_MAX_ND) == {
        (20, 30, 40): (True, True), (40, 50, 60): (False, True),
        (50, 60, 50): (False, False)}[dims]
    w = rng.standard_normal(x.shape).astype(np.float32) + 3
    for name, ref in [("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                      ("div", np.divide)]:
        for out, expected in [(getattr(nb, name)(nb.tensor(x), np.float32(1.5)), ref(x, 1.5)),
                              (getattr(nb, name)(nb.tensor(w), nb.tensor(x)), ref(w, x))]:
            assert out.numpy().flags.c_contiguous
            assert_same_bits(out.numpy(), expected.astype(np.float32))
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
    rng = np.random.default_rng(7)
    repeated = np.broadcast_to(np.float32(rng.standard_normal()) + np.float32(2), full)
    for w in [rng.standard_normal(other).astype(np.float32) + 3,
              (rng.standard_normal(other[::-1]).astype(np.float32) + 3).T,  # strided
              np.broadcast_to(np.float32(1.5), full)]:
        u, v = (repeated, w) if repeated_first else (w, repeated)
        for op, ref in [(strided_apply.ADD, np.add), (strided_apply.SUB, np.subtract),
                        (strided_apply.MUL, np.multiply), (strided_apply.DIV, np.divide)]:
            out = binary_apply(op, u, v, full)
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


@pytest.mark.parametrize("perm", [(2, 1, 0), (0, 2, 1), (1, 0, 2)])
def test_a_permuted_gradient_with_nothing_to_sum_is_each_terms_own_value(perm):
    """neg's and sub's backward, and reduce_term where no axis is summed, over a permuted
    (strided) upstream gradient: every element is -g (or scale * f(g, w)) as for a
    C-order g, -0.0 and +0.0 kept apart (a sum started from +0 would make -0.0 + 0), and
    the result C-contiguous."""
    rng = np.random.default_rng(11)
    base = rng.standard_normal((20, 30, 40)).astype(np.float32)
    base.reshape(-1)[::7] = -0.0
    base.reshape(-1)[3::7] = 0.0
    g = base.transpose(perm)
    w = rng.standard_normal(g.shape).astype(np.float32)
    x = nb.tensor(rng.standard_normal(g.shape).astype(np.float32), requires_grad=True)
    y = nb.tensor(rng.standard_normal(g.shape).astype(np.float32), requires_grad=True)
    (-x).backward(nb.tensor(g))
    (x - y).backward(nb.tensor(g))
    assert_same_bits(y.grad.numpy(), np.negative(g))
    assert_same_bits(x.grad.numpy(), np.negative(g) + g)
    for op, scale, ref in [(strided_apply.COPY, -1.0, np.negative(g)),
                           (strided_apply.COPY, 2.0, g * np.float32(2)),
                           (strided_apply.MUL, -0.5, g * w * np.float32(-0.5)),
                           (strided_apply.DIV, 3.0, g / w * np.float32(3))]:
        out = broadcast_sum.reduce_term(op, g, w, g.shape, scale)
        assert out.flags.c_contiguous
        assert_same_bits(out, ref)
