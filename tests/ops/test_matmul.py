"""matmul: every rank combination and batch broadcasting against NumPy, gradients against
the NumPy formulas and finite differences, dtypes, layouts, PyTorch oracle, bad input;
the GEMM kernel (kernels/matmul.py) against float64 NumPy and a loop nest, at every
tile edge, layout and empty dim, bitwise the same at 1 and 2 threads."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit
from numba.core.errors import TypingError

import nbgrad as nb
from nbgrad.kernels import matmul as km
from nbgrad.runtime.jit import PARALLEL_WORK_MIN
from nbgrad.testing import gradcheck
from nbgrad.testing import strategies as nbst


def _reduce_to(x, shape):
    """Sum ``x`` over the leading and size-1 axes of ``shape`` it was broadcast along."""
    x = x.sum(axis=tuple(range(x.ndim - len(shape))))
    return x.sum(axis=tuple(i for i, n in enumerate(shape) if n == 1), keepdims=True)


def _numpy_grads(a, b, g):
    """da = g @ b^T, db = a^T @ g (1-D operands as row / column), reduced to each shape."""
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    g2 = g.reshape(np.matmul(a2, b2).shape)
    ga = np.matmul(g2, np.swapaxes(b2, -1, -2))
    gb = np.matmul(np.swapaxes(a2, -1, -2), g2)
    return _reduce_to(ga, a2.shape).reshape(a.shape), _reduce_to(gb, b2.shape).reshape(b.shape)


@st.composite
def matmul_shapes(draw, max_side=4):
    """Shapes of every rank combination: 1-D or [..., M, K] with K shared, batch dims
    broadcastable (size-1 dims and differing ranks)."""
    batch_a, batch_b = draw(nbst.broadcastable_shapes(2, max_dims=2, max_side=3))
    m, k, n = (draw(st.integers(1, max_side)) for _ in range(3))
    a = (k,) if draw(st.booleans()) else batch_a + (m, k)
    b = (k,) if draw(st.booleans()) else batch_b + (k, n)
    return a, b


def _run(a_np, b_np, g_np=None):
    a = nb.tensor(a_np, requires_grad=True)
    b = nb.tensor(b_np, requires_grad=True)
    y = nb.matmul(a, b)
    y.backward(np.ones(y.shape, y.dtype) if g_np is None else g_np)
    return y, a.grad.numpy(), b.grad.numpy()


@given(shapes=matmul_shapes())
def test_matmul_matches_numpy(shapes):
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(s) for s in shapes)
    expected = np.matmul(a, b)
    g = rng.standard_normal(expected.shape)
    y, ga, gb = _run(a, b, g)
    assert y.shape == expected.shape
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-12, atol=1e-12)
    ra, rb = _numpy_grads(a, b, g)
    np.testing.assert_allclose(ga, ra, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gb, rb, rtol=1e-12, atol=1e-12)


@given(shapes=matmul_shapes(max_side=3))
def test_gradcheck_matmul(shapes):
    rng = np.random.default_rng(1)
    assert gradcheck(nb.matmul, [rng.standard_normal(s) for s in shapes])


@pytest.mark.parametrize("sa, sb, out", [
    ((4,), (4,), ()), ((3, 4), (4,), (3,)), ((4,), (4, 5), (5,)), ((3, 4), (4, 5), (3, 5)),
    ((2, 3, 4), (4,), (2, 3)), ((4,), (2, 4, 5), (2, 5)), ((2, 3, 4), (4, 5), (2, 3, 5)),
    ((3, 4), (2, 4, 5), (2, 3, 5)), ((2, 1, 3, 4), (5, 4, 6), (2, 5, 3, 6)),
])
def test_rank_combinations_float32(sa, sb, out):
    rng = np.random.default_rng(2)
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    y, ga, gb = _run(a, b)
    assert y.shape == out and y.dtype == np.float32
    assert ga.dtype == np.float32 and gb.dtype == np.float32
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-5, atol=1e-5)
    ra, rb = _numpy_grads(a.astype(np.float64), b.astype(np.float64), np.ones(out))
    np.testing.assert_allclose(ga, ra, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(gb, rb, rtol=1e-5, atol=1e-4)


def test_mixed_dtypes_promote_to_float64():
    a = nb.tensor(np.ones((2, 3), np.float32), requires_grad=True)
    b = nb.tensor(np.full((3, 2), 0.1, np.float64), requires_grad=True)
    y = a @ b
    assert y.dtype == np.float64
    np.testing.assert_allclose(y.numpy(), np.full((2, 2), 0.3), rtol=1e-15)
    y.backward(np.ones((2, 2)))
    assert a.grad.dtype == np.float32 and b.grad.dtype == np.float64
    np.testing.assert_allclose(a.grad.numpy(), np.full((2, 3), 0.2), rtol=1e-7)
    np.testing.assert_array_equal(b.grad.numpy(), np.full((3, 2), 2.0))


def test_operator_forms_and_constants():
    rng = np.random.default_rng(3)
    a_np, b_np = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    a = nb.tensor(a_np, requires_grad=True)
    np.testing.assert_allclose((a @ b_np).numpy(), a_np @ b_np, rtol=1e-12)
    np.testing.assert_allclose((b_np.T @ a.T).numpy(), b_np.T @ a_np.T, rtol=1e-12)
    np.testing.assert_allclose(a.matmul(nb.tensor(b_np)).numpy(), a_np @ b_np, rtol=1e-12)
    y = nb.matmul(a, b_np)
    y.backward(np.ones((3, 2)))                      # b is a constant: only a's gradient
    np.testing.assert_allclose(a.grad.numpy(), np.ones((3, 2)) @ b_np.T, rtol=1e-12)


@pytest.mark.parametrize("layout", ["transposed", "strided", "broadcast"])
def test_non_contiguous_operands(layout):
    rng = np.random.default_rng(4)
    base_a, base_b = rng.standard_normal((6, 8)), rng.standard_normal((8, 6))
    a_t = nb.tensor(base_a, requires_grad=True)
    b_t = nb.tensor(base_b, requires_grad=True)
    if layout == "transposed":           # F-contiguous views are read transposed in place
        a, b, a_np, b_np = a_t.T, b_t.T, base_a.T, base_b.T
    elif layout == "strided":            # neither C nor F: copied first
        a, b, a_np, b_np = a_t[::2, 1:5], b_t[1:5, ::3], base_a[::2, 1:5], base_b[1:5, ::3]
    else:                                # read-only zero-stride broadcast views
        a = nb.broadcast_to(a_t[:1, :4], (3, 4))
        b = nb.broadcast_to(b_t[:4, :1], (4, 5))
        a_np = np.broadcast_to(base_a[:1, :4], (3, 4))
        b_np = np.broadcast_to(base_b[:4, :1], (4, 5))
    y = nb.matmul(a, b)
    np.testing.assert_allclose(y.numpy(), a_np @ b_np, rtol=1e-12)
    g = rng.standard_normal(y.shape)
    y.backward(g)
    ga = np.zeros_like(base_a)
    gb = np.zeros_like(base_b)
    ra, rb = _numpy_grads(np.ascontiguousarray(a_np), np.ascontiguousarray(b_np), g)
    if layout == "transposed":
        ga, gb = ra.T, rb.T
    elif layout == "strided":
        ga[::2, 1:5], gb[1:5, ::3] = ra, rb
    else:
        ga[:1, :4], gb[:4, :1] = ra.sum(0, keepdims=True), rb.sum(1, keepdims=True)
    np.testing.assert_allclose(a_t.grad.numpy(), ga, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(b_t.grad.numpy(), gb, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("x_shape", [(37, 24), (3, 5, 24), (24,)])
def test_a_transposed_weight_gets_its_gradient_in_its_own_layout(x_shape):
    # x @ W.T (a linear layer written by hand): W's gradient is C-contiguous like W, and
    # bitwise what x @ V gives V = W.T stored as its own C array (the same sums)
    rng = np.random.default_rng(11)
    x_np = rng.standard_normal(x_shape).astype(np.float32)
    w_np = rng.standard_normal((16, 24)).astype(np.float32)
    g = rng.standard_normal(x_shape[:-1] + (16,)).astype(np.float32)
    x, w = nb.tensor(x_np, requires_grad=True), nb.tensor(w_np, requires_grad=True)
    v = nb.tensor(np.ascontiguousarray(w_np.T), requires_grad=True)
    (x @ w.T).backward(g)
    nb.matmul(x_np, v).backward(g)
    assert w.grad.numpy().flags.c_contiguous
    np.testing.assert_array_equal(w.grad.numpy(), v.grad.numpy().T)
    x2 = x_np.reshape(-1, 24).astype(np.float64)
    np.testing.assert_allclose(w.grad.numpy(), g.reshape(-1, 16).T.astype(np.float64) @ x2,
                               rtol=1e-5, atol=1e-5)


def test_non_contiguous_batched_operands():
    rng = np.random.default_rng(8)
    base_a, base_b = rng.standard_normal((2, 4, 3)), rng.standard_normal((4, 2, 5))
    cases = [lambda a, b, p: (p(a, (0, 2, 1)), p(b, (1, 0, 2))),           # bmm path
             lambda a, b, p: (p(a, (1, 0, 2)), b[:3, 0]),                   # folded path
             lambda a, b, p: (a[0].T, p(b, (1, 0, 2))[:, ::-1])]            # 2-D @ stack
    for views in cases:
        a_t = nb.tensor(base_a, requires_grad=True)
        b_t = nb.tensor(base_b, requires_grad=True)
        y = nb.matmul(*views(a_t, b_t, nb.permute))
        a_np, b_np = views(base_a, base_b, np.transpose)
        np.testing.assert_allclose(y.numpy(), np.matmul(a_np, b_np), rtol=1e-12)
        g = rng.standard_normal(y.shape)
        y.backward(g)
        ra, rb = _numpy_grads(a_np, b_np, g)
        ga, gb = np.zeros_like(base_a), np.zeros_like(base_b)
        va, vb = views(ga, gb, np.transpose)   # the same views into the gradient buffers
        va += ra
        vb += rb
        np.testing.assert_allclose(a_t.grad.numpy(), ga, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(b_t.grad.numpy(), gb, rtol=1e-12, atol=1e-12)


def test_zero_size_dims():
    a = nb.tensor(np.ones((2, 3, 0)), requires_grad=True)
    b = nb.tensor(np.ones((4, 1, 0, 5)), requires_grad=True)
    y = nb.matmul(a, b)                               # empty inner dim: a sum of nothing
    assert y.shape == (4, 2, 3, 5)
    np.testing.assert_array_equal(y.numpy(), np.zeros((4, 2, 3, 5)))
    y.backward(np.ones(y.shape))
    assert a.grad.shape == (2, 3, 0) and b.grad.shape == (4, 1, 0, 5)
    assert nb.matmul(nb.zeros(0, 3), nb.zeros(3, 2)).shape == (0, 2)


def test_same_bits_at_1_and_2_threads():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((3, 1, 40, 30)).astype(np.float32)
    b = rng.standard_normal((4, 30, 20)).astype(np.float32)
    g = rng.standard_normal((3, 4, 40, 20)).astype(np.float32)
    one = at_threads(1, _run, a, b, g)
    two = at_threads(2, _run, a, b, g)
    for x, y in zip(one, two):
        assert_same_bits(np.asarray(x), np.asarray(y))


def test_mlp_loss_gradcheck():
    """A 2-layer MLP's mean squared error, differentiated w.r.t. every parameter."""
    rng = np.random.default_rng(6)

    def loss(x, w1, b1, w2, b2, target):
        h = nb.tanh(x @ w1 + b1)
        return ((h @ w2 + b2 - target) ** 2).mean()

    inputs = [rng.standard_normal(s) for s in [(5, 3), (3, 4), (4,), (4, 2), (2,), (5, 2)]]
    assert gradcheck(loss, inputs)


def test_torch_oracle():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    for sa, sb in [((5,), (5,)), ((3, 5), (5,)), ((5,), (5, 2)), ((4, 3, 5), (5, 2)),
                   ((2, 1, 3, 5), (4, 5, 2)), ((3, 5), (2, 5, 4))]:
        for dtype in (np.float32, np.float64):
            a_np = rng.standard_normal(sa).astype(dtype)
            b_np = rng.standard_normal(sb).astype(dtype)
            at = torch.tensor(a_np, requires_grad=True)
            bt = torch.tensor(b_np, requires_grad=True)
            yt = torch.matmul(at, bt)
            g = rng.standard_normal(tuple(yt.shape)).astype(dtype)
            yt.backward(torch.tensor(g))
            y, ga, gb = _run(a_np, b_np, g)
            tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12)
            np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), **tol)
            np.testing.assert_allclose(ga, at.grad.numpy(), **tol)
            np.testing.assert_allclose(gb, bt.grad.numpy(), **tol)


@pytest.mark.parametrize("sa, sb, error, match", [
    ((3, 5), (4, 2), ValueError,
     r"matmul: a has shape \(3, 5\) and b \(4, 2\): inner dimensions 5 and 4 differ"),
    ((5,), (4,), ValueError, r"matmul: a has shape \(5,\) and b \(4,\): inner dimensions"),
    ((2, 3, 4), (3, 4, 2), ValueError,
     r"matmul: a has shape \(2, 3, 4\) and b \(3, 4, 2\): batch dimensions \(2,\) and "
     r"\(3,\) do not broadcast"),
    ((), (3,), ValueError, r"matmul: a has shape \(\) and b \(3,\): both arguments need"),
])
def test_bad_shapes(sa, sb, error, match):
    with pytest.raises(error, match=match):
        nb.matmul(nb.zeros(*sa), nb.zeros(*sb))


def test_integer_operand_is_a_type_error():
    with pytest.raises(TypeError, match=r"matmul: b has dtype int64 \(a has shape \(2, 3\) "
                                        r"and b \(3,\)\); matmul needs float32 or float64"):
        nb.matmul(nb.zeros(2, 3), nb.tensor([1, 2, 3]))


# -- the GEMM kernel ---------------------------------------------------------------------


def _op(x, transposed):
    return np.swapaxes(x, -1, -2) if transposed else x


def _kernel_operands(rng, dtype, batch_x, batch_y, m, k, n, x_t, y_t):
    """C-contiguous stacks whose matrices are op(x) [m, k] and op(y) [k, n], and the
    maps of a broadcast batch."""
    x = rng.standard_normal((batch_x,) + ((k, m) if x_t else (m, k))).astype(dtype)
    y = rng.standard_normal((batch_y,) + ((n, k) if y_t else (k, n))).astype(dtype)
    batches = max(batch_x, batch_y)
    x_map = np.arange(batches) % batch_x
    y_map = np.arange(batches) % batch_y
    return x, y, x_map, y_map


@settings(max_examples=20)
@given(dims=st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 40),
                      st.integers(1, 600), st.integers(1, 80)),
       x_t=st.booleans(), y_t=st.booleans(), dtype=st.sampled_from([np.float32, np.float64]))
def test_kernel_matches_float64_numpy(dims, x_t, y_t, dtype):
    """Edges of every tile dimension: rows past MR, columns past NR, k past a packed
    block, odd k."""
    rng = np.random.default_rng(10)
    bx, by, m, k, n = dims
    bx, by = (bx, 1) if bx > by else (1, by) if by > bx else (bx, by)
    x, y, x_map, y_map = _kernel_operands(rng, dtype, bx, by, m, k, n, x_t, y_t)
    out = km.product(x, y, x_map, y_map, x_t, y_t)
    ref = np.matmul(_op(x.astype(np.float64), x_t)[x_map], _op(y.astype(np.float64), y_t)[y_map])
    assert out.dtype == dtype and out.shape == ref.shape and out.flags.c_contiguous
    # float32: each term and partial sum rounds once (FMA), |error| <= k eps sum |x y|.
    eps = np.finfo(dtype).eps
    bound = k * eps * np.matmul(np.abs(_op(x, x_t)[x_map]).astype(np.float64),
                                np.abs(_op(y, y_t)[y_map]).astype(np.float64))
    assert np.all(np.abs(out - ref) <= bound + np.finfo(dtype).tiny)


@njit(fastmath={"contract"})
def _loop_nest(x, y):
    """out[i, j] = sum_k x[i, k] y[k, j], one fused multiply-add per term, k ascending."""
    m, k = x.shape
    n = y.shape[1]
    out = np.empty((m, n), x.dtype)
    for i in range(m):
        for j in range(n):
            acc = x.dtype.type(0)
            for p in range(k):
                acc += x[i, p] * y[p, j]
            out[i, j] = acc
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("x_t, y_t", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("n", [75, 136, 300])
@pytest.mark.parametrize("m", [37, 133])
def test_kernel_sums_k_in_order_like_a_loop_nest(dtype, x_t, y_t, n, m):
    """Bit for bit the scalar loop nest: every element is one FMA chain over k in
    ascending order, across the blocks of k (k = 601), the blocks of NC columns (n = 300),
    full panels of a row-major b read in place (m = 37 rows, fewer than
    km.PACK_MIN_ROWS) and, for m = 133, copied where a block spans more than
    km.IN_PLACE_SPAN bytes of b (the first block of k) and read in place where not (the
    last, of 89 values of k, but for float64 with n = 300), the edge tiles, and last
    panels taken by a tile of one or two vectors (km.tile_cols; with AVX-512, n = 75 and
    136 end in one of a float32 tile's vector and n = 75, 136 and 300 in two of a float64
    tile's)."""
    rng = np.random.default_rng(11)
    x, y, x_map, y_map = _kernel_operands(rng, dtype, 1, 1, m, 601, n, x_t, y_t)
    out = km.product(x, y, x_map, y_map, x_t, y_t)
    ref = _loop_nest(np.ascontiguousarray(_op(x[0], x_t)), np.ascontiguousarray(_op(y[0], y_t)))
    assert_same_bits(out[0], ref)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("x_t, y_t", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("m, k, n", [(1, 64, 256), (256, 1, 64), (1, 301, 70), (70, 1, 5),
                                     (1, 1, 1), (1, 5, 11)])
def test_thin_products_sum_k_in_order_like_a_loop_nest(dtype, x_t, y_t, m, k, n):
    """Outputs of one row and sums of one term skip the packing (km._thin_product): bit
    for bit the FMA loop nest, for every batch of a broadcast, with and without a tail
    of fewer than THIN_CHAINS columns."""
    rng = np.random.default_rng(m + k + n)
    x, y, x_map, y_map = _kernel_operands(rng, dtype, 3, 1, m, k, n, x_t, y_t)
    out = km.product(x, y, x_map, y_map, x_t, y_t)
    for b in range(3):
        ref = _loop_nest(np.ascontiguousarray(_op(x[b], x_t)), np.ascontiguousarray(_op(y[0], y_t)))
        assert_same_bits(out[b], ref)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kernel_same_bits_serial_parallel_and_at_1_and_2_threads(dtype):
    rng = np.random.default_rng(12)
    x, y, x_map, y_map = _kernel_operands(rng, dtype, 3, 1, 131, 257, 77, True, False)
    serial = km.product(x, y, x_map, y_map, True, False, parallel=False)
    for threads in (1, 2):
        par = at_threads(threads, km.product, x, y, x_map, y_map, True, False, parallel=True)
        assert_same_bits(serial, par)


@pytest.mark.parametrize("m, k, n", [(256, 64, 1), (64, 300, 2), (70, 40, 5), (40, 30, 3)])
@pytest.mark.parametrize("x_t, y_t", [(False, False), (False, True), (True, False),
                                      (True, True)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_few_columns_are_computed_as_the_transposed_product_with_the_same_bits(
        m, k, n, x_t, y_t, dtype):
    """With n much smaller than a tile's columns, product computes out^T = op(y)^T
    op(x)^T (the short side on the tile's rows): the same terms in the same order, so
    the same bits as the kernel run on the shapes as given."""
    rng = np.random.default_rng(m + k + n)
    x, y, x_map, y_map = _kernel_operands(rng, dtype, 2, 1, m, k, n, x_t, y_t)
    as_given = np.empty(2 * m * n, dtype)
    km._product(x.reshape(-1), km._read_only(x_map), x_t, y.reshape(-1),
                km._read_only(y_map), y_t, as_given, m, n, k, 1, 1, False,
                km.config.NUMBA_NUM_THREADS, x.reshape(-1)[:0], False, 0)
    out = km.product(x, y, x_map, y_map, x_t, y_t)
    assert km.computed_transposed(m, n, k, km.panel_cols(out))
    assert_same_bits(out, as_given.reshape(2, m, n))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_wide_output_is_computed_as_given_when_transposing_costs_more(dtype):
    """[256, 32] @ [32, 1000]: out^T pads fewer elements (out's 1000 columns round up to
    whole tiles, 1024 in float32, but as out^T's rows to at most 1002), which saves far less than
    copying the 256 x 1000 result back costs (two thirds of the product's time when a
    [256, 1024] one was computed transposed)."""
    nr = km.panel_cols(np.empty(0, dtype))
    assert km.tiled_size(1000, 256, nr) < km.tiled_size(256, 1000, nr)
    assert not km.computed_transposed(256, 1000, 32, nr)


@pytest.mark.parametrize("tasks", [1, 2, 4])
def test_kernel_task_grid_covers_every_shape(tasks):
    """Tasks cut whole tiles, at least ``tasks`` of them when the tiles allow."""
    for batches, m, n in [(1, 512, 512), (1, 4096, 16), (1, 16, 4096), (1, 2, 2), (32, 64, 64)]:
        rows, cols = km.task_grid(batches, m, n, 32, tasks)
        assert batches * rows * cols >= tasks or (m < 2 * rows * km.MR and n < 2 * cols * 32)
        assert rows * km.MR <= max(m, km.MR) and cols * 32 <= max(n, 32)


@pytest.mark.parametrize("shape", [(192, 150, 192), (150, 120, 203)])
def test_one_product_cut_into_rows_or_columns_has_the_same_bits_at_1_and_2_threads(shape):
    """A single product on the thread pool is cut into row blocks (as tall as wide or
    taller) or column blocks; each element is the same FMA chain either way."""
    m, k, n = shape
    rng = np.random.default_rng(14)
    a = rng.standard_normal((1, m, k)).astype(np.float32)
    b = rng.standard_normal((1, k, n)).astype(np.float32)
    index = np.zeros(1, np.int64)
    assert m * k * n >= PARALLEL_WORK_MIN
    assert km.task_grid(1, m, n, km.panel_cols(a), 2) == ((2, 1) if m >= n else (1, 2))
    one = at_threads(1, km.product, a, b, index, index, False, False)
    two = at_threads(2, km.product, a, b, index, index, False, False)
    assert_same_bits(one, two)
    np.testing.assert_allclose(two[0], a[0].astype(np.float64) @ b[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_same_bits_at_1_and_2_threads_above_the_parallel_threshold(dtype):
    """Forward and both gradients, batched with broadcasting, large enough to run on
    the thread pool, with edge tiles in every dimension."""
    rng = np.random.default_rng(13)
    a = rng.standard_normal((3, 1, 67, 131)).astype(dtype)
    b = rng.standard_normal((2, 131, 45)).astype(dtype)
    g = rng.standard_normal((3, 2, 67, 45)).astype(dtype)
    assert 6 * 67 * 131 * 45 >= PARALLEL_WORK_MIN  # multiply-adds
    one = at_threads(1, _run, a, b, g)
    two = at_threads(2, _run, a, b, g)
    for x, y in zip(one, two):
        assert_same_bits(np.asarray(x), np.asarray(y))


_LAYOUTS = {
    "C": lambda x: x,
    "F": np.asfortranarray,
    "transposed view": lambda x: np.ascontiguousarray(x.T).T,
    "strided": lambda x: np.repeat(np.repeat(x, 2, 0), 3, 1)[::2, ::3],
    "reversed": lambda x: np.ascontiguousarray(x[::-1, ::-1])[::-1, ::-1],
    "zero-stride": lambda x: np.broadcast_to(x[:1], x.shape),
}


@pytest.mark.parametrize("layout_a", list(_LAYOUTS))
@pytest.mark.parametrize("layout_b", ["C", "F", "strided"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_operand_layouts(layout_a, layout_b, dtype):
    rng = np.random.default_rng(14)
    a = _LAYOUTS[layout_a](rng.standard_normal((23, 41)).astype(dtype))
    b = _LAYOUTS[layout_b](rng.standard_normal((41, 35)).astype(dtype))
    g = rng.standard_normal((23, 35)).astype(dtype)
    y, ga, gb = _run(a, b, g)
    a64, b64, g64 = (np.asarray(v, np.float64) for v in (a, b, g))
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(y.numpy(), a64 @ b64, **tol)
    np.testing.assert_allclose(ga, g64 @ b64.T, **tol)
    np.testing.assert_allclose(gb, a64.T @ g64, **tol)


def test_batched_transposed_views_are_read_in_place():
    rng = np.random.default_rng(15)
    a = np.swapaxes(rng.standard_normal((4, 9, 7)), 1, 2)     # [4, 7, 9], last two swapped
    b = rng.standard_normal((4, 9, 5))[:, :, ::-1]             # neither C nor swapped-C
    y, ga, gb = _run(a, b, np.ones((4, 7, 5)))
    np.testing.assert_allclose(y.numpy(), np.matmul(a, b), rtol=1e-12)
    ra, rb = _numpy_grads(a, b, np.ones((4, 7, 5)))
    np.testing.assert_allclose(ga, ra, rtol=1e-12)
    np.testing.assert_allclose(gb, rb, rtol=1e-12)


@pytest.mark.parametrize("sa, sb", [
    ((0, 5), (5, 3)), ((4, 5), (5, 0)), ((4, 0), (0, 3)), ((0, 0), (0, 0)),
    ((2, 0, 5), (5, 3)), ((0, 4, 5), (5, 3)), ((3, 4, 0), (3, 0, 2)), ((0,), (0,)),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_empty_dims(sa, sb, dtype):
    """M, N or a batch of 0 give empty results; K = 0 gives zeros (a sum of nothing)."""
    a = np.ones(sa, dtype)
    b = np.ones(sb, dtype)
    expected = np.matmul(a, b)
    y, ga, gb = _run(a, b)
    assert y.shape == expected.shape and y.dtype == dtype
    np.testing.assert_array_equal(y.numpy(), expected)
    ra, rb = _numpy_grads(a, b, np.ones(expected.shape, dtype))
    assert ga.shape == sa and gb.shape == sb
    np.testing.assert_array_equal(ga, ra)
    np.testing.assert_array_equal(gb, rb)


# A new process whose first kernels are loaded from the cache and call C functions by
# their symbol names (runtime/jit.py: compiled_once): the GEMM block from the product,
# and the 'cols' convolution's slot body, itself a C function calling the block. Each
# symbol must be known to the JIT linker before machine code naming it loads, or LLVM
# aborts the process.
_CACHED_PRODUCT = """
import json
import numpy as np
import nbgrad as nb
from nbgrad.kernels import conv_cols
from nbgrad.kernels import matmul as km
rng = np.random.default_rng(0)
a, b = rng.standard_normal((2, 37, 29)), rng.standard_normal((29, 21))
out = {}
for dtype in ("float32", "float64"):
    x, y = a.astype(dtype), b.astype(dtype)
    got = (nb.tensor(x) @ nb.tensor(y)).numpy()
    want = np.einsum("bik,kj->bij", x.astype(np.float64), y.astype(np.float64))
    out[dtype] = float(np.abs(got - want).max())
# a 1x1 convolution on the 'cols' path is a product over channels
x, w = rng.standard_normal((4, 3, 4, 4)), rng.standard_normal((16, 3, 1, 1))
got = nb.conv2d(nb.tensor(x), nb.tensor(w)).numpy()
out["conv"] = float(np.abs(got - np.einsum("fc,nchw->nfhw", w[:, :, 0, 0], x)).max())
kernels = (km._product, conv_cols.conv2d_forward_cols)
hits = sum(sum(k.stats.cache_hits.values()) for k in kernels)
misses = sum(sum(k.stats.cache_misses.values()) for k in kernels)
print(json.dumps({"errors": out, "hits": hits, "misses": misses}))
"""


def test_a_kernel_calling_the_gemm_by_name_loads_from_the_cache_in_a_new_process(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    reports = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", _CACHED_PRODUCT], env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        reports.append(json.loads(done.stdout.strip().splitlines()[-1]))
    compiled, loaded = reports
    assert (compiled["hits"], compiled["misses"]) == (0, 3)
    assert (loaded["hits"], loaded["misses"]) == (3, 0)
    for report in reports:
        assert report["errors"]["float32"] < 1e-4
        assert report["errors"]["float64"] < 1e-12
        assert report["errors"]["conv"] < 1e-12


@njit
def _block_on_strided_x(x):
    out = np.empty(4)
    u = np.uint64
    km._call_block(x[::2], u(0), False, x[:4], u(0), False, out, u(0), u(2), u(2), u(2),
                   u(0), u(2), u(0), u(2), u(2), np.empty(64))


def test_a_c_function_refuses_arrays_it_cannot_take_as_declared():
    # the C function takes C-contiguous arrays; a strided view must not be reinterpreted
    with pytest.raises(TypingError, match="_call_block: takes"):
        _block_on_strided_x(np.arange(8.0))


@njit
def _block_on_int_arrays(x):
    u = np.uint64
    km._call_block(x, u(0), False, x, u(0), False, x, u(0), u(1), u(1), u(1), u(0), u(1),
                   u(0), u(1), u(1), x)


def test_a_c_function_exists_only_for_float32_and_float64():
    # the cache provides the symbols of those two dtypes only (runtime/jit.py)
    with pytest.raises(TypingError, match="_call_block: takes"):
        _block_on_int_arrays(np.arange(8))


# -- the epilogue: bias and activation as each tile is stored ---------------------------------

_ACTIVATION_OPS = {0: lambda y: y, 1: nb.relu, 2: nb.tanh, 3: nb.sigmoid}


@settings(max_examples=30, deadline=None)
@given(dims=st.tuples(st.integers(1, 70), st.integers(0, 1200), st.integers(1, 90)),
       x_t=st.booleans(), y_t=st.booleans(), with_bias=st.booleans(),
       activation=st.sampled_from([0, 1, 2, 3]), parallel=st.sampled_from([None, True]),
       dtype=st.sampled_from([np.float32, np.float64]))
def test_epilogue_gives_the_bits_of_the_separate_ops(dims, x_t, y_t, with_bias, activation,
                                                     parallel, dtype):
    """bias + activation applied by the GEMM equal the product, then eager's broadcast add
    and activation op, bit for bit: at tile edges, with k past a packed block, on outputs
    computed transposed (n much smaller than a tile), thin products and k = 0."""
    rng = np.random.default_rng(sum(dims))
    m, k, n = dims
    x, y, x_map, y_map = _kernel_operands(rng, dtype, 1, 1, m, k, n, x_t, y_t)
    bias = rng.standard_normal(n).astype(dtype) * 3 if with_bias else None
    plain = km.product(x, y, x_map, y_map, x_t, y_t, 2, parallel)[0]
    expected = _ACTIVATION_OPS[activation](nb.tensor(plain) + (0 if bias is None else bias))
    got = km.product(x, y, x_map, y_map, x_t, y_t, 2, parallel, bias=bias,
                     activation=activation)[0]
    assert_same_bits(got, np.asarray(expected.numpy(), dtype))


def test_epilogue_needs_one_product():
    x = np.ones((2, 3, 4), np.float32)
    maps = np.arange(2)
    with pytest.raises(ValueError, match="epilogue needs one product, got 2"):
        km.product(x, x, maps, maps, False, True, bias=np.ones(3, np.float32))
