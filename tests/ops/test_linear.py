"""linear (x @ W^T + b as one op): values and gradients against the NumPy formulas over
shapes, dtypes, no bias, non-contiguous and empty inputs, the PyTorch oracle, the same
bits at 1 and 2 threads, nn.Linear on it, and bad input."""

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads
from hypothesis import given, settings
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.testing import gradcheck, gradgradcheck


def _numpy_linear(x, w, b, g):
    """(y, dx, dw, db) by the definitions: y = x W^T + b; dx = g W, dW = sum over the
    leading dims of g^T x, db = g summed over them."""
    y = x @ w.T + (0 if b is None else b)
    g_rows, x_rows = g.reshape(-1, w.shape[0]), x.reshape(-1, w.shape[1])
    return y, g @ w, g_rows.T @ x_rows, None if b is None else g_rows.sum(0)


def _run(x_np, w_np, b_np, g_np):
    x, w = nb.tensor(x_np, requires_grad=True), nb.tensor(w_np, requires_grad=True)
    b = None if b_np is None else nb.tensor(b_np, requires_grad=True)
    y = nb.linear(x, w, b)
    y.backward(g_np)
    return y.numpy(), x.grad.numpy(), w.grad.numpy(), None if b is None else b.grad.numpy()


@settings(max_examples=40, deadline=None)
@given(lead=st.lists(st.integers(0, 4), max_size=2), k=st.integers(1, 9),
       n=st.integers(1, 9), bias=st.booleans(), seed=st.integers(0, 2**16))
def test_linear_matches_the_numpy_formulas(lead, k, n, bias, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((*lead, k))
    w = rng.standard_normal((n, k))
    b = rng.standard_normal(n) if bias else None
    g = rng.standard_normal((*lead, n))
    got = _run(x, w, b, g)
    for have, want in zip(got, _numpy_linear(x, w, b, g)):
        if want is None:
            assert have is None
        else:
            np.testing.assert_allclose(have, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("x_shape", [(4,), (3, 4), (2, 3, 4)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_gradcheck_and_gradgradcheck(x_shape, bias):
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal(x_shape), rng.standard_normal((5, 4))]
    if bias:
        inputs.append(rng.standard_normal(5))
    assert gradcheck(nb.linear, inputs)
    assert gradgradcheck(nb.linear, inputs)


def test_linear_float32_stays_float32_and_mixed_dtypes_promote():
    rng = np.random.default_rng(2)
    x = nb.tensor(rng.standard_normal((3, 4)).astype(np.float32), requires_grad=True)
    w = nb.tensor(rng.standard_normal((2, 4)), requires_grad=True)
    b = nb.tensor(rng.standard_normal(2).astype(np.float32), requires_grad=True)
    assert nb.linear(x, w.to(np.float32), b).dtype == np.float32
    y = nb.linear(x, w, b)
    assert y.dtype == np.float64
    y.sum().backward()
    assert (x.grad.dtype, w.grad.dtype, b.grad.dtype) == (np.float32, np.float64, np.float32)
    np.testing.assert_allclose(w.grad.numpy(), np.ones((3, 2)).T @ x.numpy(), rtol=1e-6)


def test_linear_reads_non_contiguous_inputs_and_leaves_them_alone():
    rng = np.random.default_rng(3)
    x_np = rng.standard_normal((4, 6))[:, ::2]  # strided columns
    w_np = np.asfortranarray(rng.standard_normal((5, 3)))
    b_np = rng.standard_normal(10)[::2]
    keep = [a.copy() for a in (x_np, w_np, b_np)]
    g = rng.standard_normal((4, 5))
    for have, want in zip(_run(x_np, w_np, b_np, g), _numpy_linear(x_np, w_np, b_np, g)):
        np.testing.assert_allclose(have, want, rtol=1e-12)
    for a, before in zip((x_np, w_np, b_np), keep):
        assert_same_bits(a, before)


def test_linear_with_no_rows():
    x = nb.zeros(0, 3, requires_grad=True)
    w = nb.ones(2, 3, requires_grad=True)
    b = nb.ones(2, requires_grad=True)
    y = nb.linear(x, w, b)
    assert y.shape == (0, 2)
    y.sum().backward()
    assert x.grad.shape == (0, 3)
    assert not w.grad.numpy().any() and not b.grad.numpy().any()


def test_linear_same_bits_at_1_and_2_threads():
    rng = np.random.default_rng(4)
    args = (rng.standard_normal((256, 300)).astype(np.float32),
            rng.standard_normal((200, 300)).astype(np.float32),
            rng.standard_normal(200).astype(np.float32),
            rng.standard_normal((256, 200)).astype(np.float32))
    for one, two in zip(at_threads(1, _run, *args), at_threads(2, _run, *args)):
        assert_same_bits(one, two)


def test_linear_non_finite_values_propagate_as_in_the_definition():
    x = np.array([[np.inf, 1.0], [1.0, 2.0]])
    w = np.array([[1.0, 2.0], [0.0, 1.0]])
    y = nb.linear(x, w, np.array([0.0, 1.0])).numpy()
    # row 0: inf * 1 + 1 * 2 = inf; inf * 0 + 1 * 1 + 1 = NaN
    np.testing.assert_array_equal(y, np.array([[np.inf, np.nan], [5.0, 3.0]]))


def test_linear_torch_oracle():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    for x_shape in [(6,), (7, 6), (2, 3, 6)]:
        for dtype, tol in ((np.float32, dict(rtol=1e-5, atol=1e-5)),
                           (np.float64, dict(rtol=1e-12, atol=1e-12))):
            arrays = [rng.standard_normal(s).astype(dtype) for s in (x_shape, (4, 6), (4,))]
            ts = [torch.tensor(a, requires_grad=True) for a in arrays]
            yt = torch.nn.functional.linear(*ts)
            g = rng.standard_normal(tuple(yt.shape)).astype(dtype)
            yt.backward(torch.tensor(g))
            got = _run(*arrays, g)
            np.testing.assert_allclose(got[0], yt.detach().numpy(), **tol)
            for have, t in zip(got[1:], ts):
                np.testing.assert_allclose(have, t.grad.numpy(), **tol)


def test_nn_linear_is_one_linear_node():
    layer = nb.nn.Linear(4, 3)
    y = layer(nb.ones(2, 4))
    assert y.grad_fn.name == "linear"
    y.sum().backward()
    np.testing.assert_allclose(layer.bias.grad.numpy(), [2.0, 2.0, 2.0])


@pytest.mark.parametrize("x, w, b, error, match", [
    ((3, 4), (2, 5), None, ValueError,
     r"linear: x has shape \(3, 4\), weight has shape \(2, 5\): x must be "
     r"\[\.\.\., in_features\] and weight \[out_features, in_features\]"),
    ((), (2, 1), None, ValueError, r"linear: x has shape \(\), weight has shape \(2, 1\)"),
    ((3, 4), (4,), None, ValueError, r"linear: x has shape \(3, 4\), weight has shape \(4,\)"),
    ((3, 4), (2, 4), (3,), ValueError,
     r"linear: x has shape \(3, 4\), weight has shape \(2, 4\), bias has shape \(3,\): "
     r"bias must be \[out_features\]"),
])
def test_linear_bad_shapes(x, w, b, error, match):
    with pytest.raises(error, match=match):
        nb.linear(nb.zeros(*x), nb.zeros(*w), None if b is None else nb.zeros(*b))


def test_linear_integer_operand_is_a_type_error():
    with pytest.raises(TypeError, match=r"linear: weight has dtype nbgrad.int64 \(x has shape "
                                        r"\(2, 3\), weight has shape \(1, 3\)\)"):
        nb.linear(nb.zeros(2, 3), nb.tensor([[1, 2, 3]]))
