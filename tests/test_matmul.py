"""matmul: every rank combination and batch broadcasting against NumPy, gradients against
the NumPy formulas and finite differences, dtypes, layouts, PyTorch oracle, bad input."""

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads
from hypothesis import given
from hypothesis import strategies as st

import nbgrad as nb
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
    if layout == "transposed":           # F-contiguous views go to BLAS as they are
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
