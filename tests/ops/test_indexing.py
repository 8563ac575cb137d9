"""Indexing (``x[...]`` / ``nb.getitem``): forward against NumPy, backward against
``np.add.at`` (the scatter-add, repeats summed), gradcheck, determinism, bad input."""

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nbgrad as nb
from nbgrad.kernels import shape as K
from nbgrad.testing import gradcheck
from nbgrad.testing import strategies as nbst

shapes = hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=5)


def _check_against_numpy(x_np, index, dtype=np.float64):
    """Forward == NumPy's x[index]; gradient == np.add.at(zeros, index, g)."""
    x_np = x_np.astype(dtype)
    x = nb.tensor(x_np, requires_grad=True)
    y = x[index]
    expected = x_np[index]
    np.testing.assert_array_equal(y.numpy(), expected)
    assert y.dtype == dtype
    g = np.random.default_rng(7).standard_normal(np.shape(expected)).astype(dtype)
    y.backward(g)
    ref = np.zeros_like(x_np)
    np.add.at(ref, index, g)
    assert x.grad.dtype == dtype
    assert_same_bits(x.grad.numpy(), ref)


@st.composite
def advanced_indices(draw, shape):
    """Integer arrays (broadcast together, repeats and negatives) on some axes, mixed with
    ints, slices with steps, None and a trailing Ellipsis."""
    bshape = draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=3))
    parts = []
    for n in shape:
        kind = draw(st.sampled_from(["array", "array", "slice", "int", "full"]))
        if kind == "array":
            own = tuple(s if draw(st.booleans()) else 1 for s in bshape)
            parts.append(draw(hnp.arrays(np.int64, own, elements=st.integers(-n, n - 1))))
        elif kind == "slice":
            parts.append(draw(st.slices(n)))
        elif kind == "int":
            parts.append(draw(st.integers(-n, n - 1)))
        else:
            parts.append(slice(None))
    if not any(isinstance(p, np.ndarray) for p in parts):
        parts[0] = draw(hnp.arrays(np.int64, bshape, elements=st.integers(-shape[0],
                                                                            shape[0] - 1)))
    if draw(st.booleans()):
        parts.insert(draw(st.integers(0, len(parts))), None)
    while parts and isinstance(parts[-1], slice) and parts[-1] == slice(None):
        if not draw(st.booleans()):
            break
        parts.pop()
    if draw(st.booleans()):
        parts.append(Ellipsis)  # after every part: it stands for the axes popped above
    return tuple(parts)


@given(shape=shapes, data=st.data())
def test_strategy_indices_match_numpy(shape, data):
    index = data.draw(nbst.index_expressions(shape))
    x = np.random.default_rng(0).standard_normal(shape)
    _check_against_numpy(x, index)


@given(shape=shapes, data=st.data())
def test_advanced_indices_match_numpy(shape, data):
    index = data.draw(advanced_indices(shape))
    x = np.random.default_rng(1).standard_normal(shape)
    _check_against_numpy(x, index, data.draw(st.sampled_from([np.float32, np.float64])))


@given(shape=shapes, data=st.data())
def test_boolean_masks_match_numpy(shape, data):
    k = data.draw(st.integers(1, len(shape)))
    mask = data.draw(hnp.arrays(np.bool_, shape[:k]))
    rest = data.draw(st.lists(st.slices(5), max_size=len(shape) - k))
    x = np.random.default_rng(2).standard_normal(shape)
    _check_against_numpy(x, (mask, *rest))


@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=3), data=st.data())
def test_gradcheck_indexing(shape, data):
    index = data.draw(advanced_indices(shape) | hnp.basic_indices(shape, allow_newaxis=True))
    x = np.random.default_rng(3).standard_normal(shape)
    assert gradcheck(lambda t: t[index], [x])


def test_repeated_rows_sum_fixed_example():
    x = nb.tensor(np.arange(12.0).reshape(4, 3), requires_grad=True)
    y = x[[0, 2, 0, 0, -1]]
    np.testing.assert_array_equal(y.numpy()[:, 0], [0.0, 6.0, 0.0, 0.0, 9.0])
    y.backward(np.ones((5, 3)))
    np.testing.assert_array_equal(x.grad.numpy()[:, 0], [3.0, 0.0, 1.0, 1.0])


def test_index_kinds_agree():
    """A list, an int64 array, an int32 array and an integer Tensor index the same way."""
    x_np = np.random.default_rng(4).standard_normal((5, 4)).astype(np.float32)
    x = nb.tensor(x_np)
    expected = x_np[:, [3, 1, 3]]
    for idx in ([3, 1, 3], np.array([3, 1, 3]), np.array([3, 1, 3], np.int32),
                nb.tensor([3, 1, 3])):
        np.testing.assert_array_equal(x[:, idx].numpy(), expected)
    np.testing.assert_array_equal(x[x > 0].numpy(), x_np[x_np > 0])
    assert x[[]].shape == (0, 4)
    assert nb.getitem(x, (1, 2)).item() == x_np[1, 2]


def test_basic_index_is_a_view_and_input_unchanged():
    x_np = np.arange(10.0)
    x = nb.tensor(x_np, requires_grad=True)
    y = x[8:1:-3]
    np.testing.assert_array_equal(y.numpy(), [8.0, 5.0, 2.0])
    assert np.shares_memory(y.numpy(), x.numpy())
    y.backward(np.array([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(x.numpy(), x_np)
    np.testing.assert_array_equal(x.grad.numpy(), [0, 0, 3, 0, 0, 2, 0, 0, 1, 0])


def test_index_array_changed_after_forward():
    """The backward scatters to the positions the forward read, not to whatever the
    caller's index array holds by then (which could be out of range)."""
    idx = np.array([0, 2, 2])
    x = nb.tensor(np.ones(3), requires_grad=True)
    y = x[idx]
    idx[:] = 10**9
    y.backward(np.ones(3))
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 0.0, 2.0])


def test_upstream_broadcast_gradient():
    """``g`` may arrive as a zero-stride broadcast view (a large sum's backward gives
    one); the scatter reads it in place."""
    for shape, index in [((3, 3000), ([1, 1, 2],)), ((3000, 3), (slice(None), [1, 1]))]:
        x = nb.tensor(np.ones(shape), requires_grad=True)
        (x[index].sum()).backward()
        expected = np.zeros(shape)
        np.add.at(expected, index, 1.0)
        np.testing.assert_array_equal(x.grad.numpy(), expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("width", [1, 5, 40])
def test_scatter_add_kernel_matches_add_at_bitwise(dtype, width):
    rng = np.random.default_rng(5)
    rows = rng.integers(0, 50, size=2000)
    values = rng.standard_normal((2000, width)).astype(dtype)
    ref = np.zeros((50, width), dtype)
    np.add.at(ref, rows, values)
    out = K.scatter_add_rows(values, rows, 50)
    assert out.dtype == dtype
    assert_same_bits(out, ref)


def test_scatter_backward_same_bits_at_1_and_2_threads():
    rng = np.random.default_rng(6)
    x_np = rng.standard_normal((300, 7, 40)).astype(np.float32)
    idx = rng.integers(-300, 300, size=(4000,))

    def run(index):
        x = nb.tensor(x_np, requires_grad=True)
        y = x[index]
        y.backward(np.ones(y.shape, np.float32) / 3)
        return y.numpy().copy(), x.grad.numpy()

    for index in [(idx,), (idx, slice(None, None, -1)), (idx, 2, idx % 40)]:
        y1, g1 = at_threads(1, run, index)
        y2, g2 = at_threads(2, run, index)
        assert_same_bits(y1, y2)
        assert_same_bits(g1, g2)


@pytest.mark.parametrize("index, error, match", [
    (5, IndexError, r"getitem: index 5 is out of bounds for axis 0 with size 3 "
                    r"\(x has shape \(3, 4\)\)"),
    ((slice(None), [0, -5]), IndexError, r"getitem: index -5 is out of bounds for axis 1 "
                                         r"with size 4"),
    ((0, 0, 0), IndexError, r"getitem: too many indices .*\(x has shape \(3, 4\)\)"),
    (([0, 1], [0, 1, 2]), IndexError, r"getitem: shape mismatch: indexing arrays could not "
                                      r"be broadcast"),
    (np.array([True, False]), IndexError, r"getitem: boolean index did not match .* axis 0"),
    (np.array([0.5, 1.0]), TypeError, r"getitem: index arrays must hold integers or "
                                      r"booleans, got float64 \(x has shape \(3, 4\)\)"),
    ("a", TypeError, r"getitem: cannot index with str 'a'"),
    (1.0, TypeError, r"getitem: cannot index with float"),
])
def test_bad_indices(index, error, match):
    x = nb.tensor(np.zeros((3, 4)), requires_grad=True)
    with pytest.raises(error, match=match):
        x[index]


def test_torch_oracle_indexing():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(8)
    x_np = rng.standard_normal((4, 5, 6))
    rows = np.array([[0, 3], [3, 3]])
    cols = np.array([5, 0])
    for index, t_index in [
        ((rows, slice(None, None, 2), cols), (torch.tensor(rows), slice(None, None, 2),
                                              torch.tensor(cols))),
        ((slice(1, None), None, Ellipsis, cols), (slice(1, None), None, Ellipsis,
                                                   torch.tensor(cols))),
        ((x_np[:, :, 0] > 0,), (torch.tensor(x_np[:, :, 0] > 0),)),
    ]:
        x = nb.tensor(x_np, requires_grad=True)
        xt = torch.tensor(x_np, requires_grad=True)
        y, yt = x[index], xt[t_index]
        np.testing.assert_array_equal(y.numpy(), yt.detach().numpy())
        g = rng.standard_normal(y.shape)
        y.backward(g)
        yt.backward(torch.tensor(g))
        np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-12, atol=1e-15)
