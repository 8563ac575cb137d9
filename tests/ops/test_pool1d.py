"""max_pool1d and avg_pool1d (and their layers) against PyTorch over lengths, windows,
strides, padding, dilation, ceil_mode: values, indices, gradients; bad input."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.testing import gradcheck, gradgradcheck

torch = pytest.importorskip("torch")


@st.composite
def pool_cases(draw):
    kernel = draw(st.integers(1, 4))
    padding = draw(st.integers(0, kernel // 2))
    dilation = draw(st.integers(1, 2))
    length = draw(st.integers(dilation * (kernel - 1) + 1 - 2 * padding, 12).filter(
        lambda n: n >= 1))
    batch = draw(st.sampled_from([(), (2,)]))
    return dict(shape=batch + (3, length), kernel_size=kernel,
                stride=draw(st.sampled_from([None, 1, 2, 3])), padding=padding,
                dilation=dilation, ceil_mode=draw(st.booleans()))


@given(case=pool_cases(), seed=st.integers(0, 99))
def test_max_pool1d_matches_torch_with_indices_and_gradient(case, seed):
    shape = case.pop("shape")
    x = np.random.default_rng(seed).standard_normal(shape)
    ours = nb.tensor(x, requires_grad=True)
    theirs = torch.tensor(x, requires_grad=True)
    y, idx = nb.max_pool1d(ours, **case, return_indices=True)
    want, want_idx = torch.nn.functional.max_pool1d(theirs, **case, return_indices=True)
    np.testing.assert_array_equal(y.numpy(), want.detach().numpy())
    # a window that dilation and padding make miss the input entirely: -inf and index -1
    # here (no gradient); PyTorch gives an index past the window (1 for a length-1 input)
    # and its backward writes that window's gradient into the next channel
    empty = idx.numpy() == -1
    assert np.isneginf(y.numpy()[empty]).all()
    np.testing.assert_array_equal(idx.numpy()[~empty], want_idx.numpy()[~empty])
    g = np.random.default_rng(seed + 1).standard_normal(y.shape)
    y.backward(g)
    want.backward(torch.tensor(np.where(empty, 0.0, g)))
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), atol=1e-12)


def test_max_pool1d_window_outside_the_input_has_no_index_or_gradient():
    x = nb.tensor(np.array([[1.5], [-2.0], [0.5]]), requires_grad=True)
    y, idx = nb.max_pool1d(x, 2, padding=1, dilation=2, return_indices=True)
    assert np.isneginf(y.numpy()).all() and (idx.numpy() == -1).all()
    y.backward(np.ones(y.shape))
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros((3, 1)))


@given(case=pool_cases(), count_include_pad=st.booleans(), seed=st.integers(0, 99))
def test_avg_pool1d_matches_torch_with_gradient(case, count_include_pad, seed):
    shape = case.pop("shape")
    case.pop("dilation")
    x = np.random.default_rng(seed).standard_normal(shape)
    ours = nb.tensor(x, requires_grad=True)
    theirs = torch.tensor(x, requires_grad=True)
    y = nb.avg_pool1d(ours, **case, count_include_pad=count_include_pad)
    want = torch.nn.functional.avg_pool1d(theirs, **case, count_include_pad=count_include_pad)
    np.testing.assert_allclose(y.numpy(), want.detach().numpy(), atol=1e-12)
    g = np.random.default_rng(seed + 1).standard_normal(y.shape)
    y.backward(g)
    want.backward(torch.tensor(g))
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), atol=1e-12)


def test_second_derivatives_and_layers():
    x = np.random.default_rng(0).permutation(20).reshape(2, 10) * 0.1
    assert gradcheck(lambda t: nb.max_pool1d(t, 3, 2, 1), [x])
    assert gradgradcheck(lambda t: nb.avg_pool1d(t, 3, 2, 1) ** 2, [x])
    for ours, theirs in [(nb.nn.MaxPool1d(3, 2, 1), torch.nn.MaxPool1d(3, 2, 1)),
                         (nb.nn.AvgPool1d(2), torch.nn.AvgPool1d(2))]:
        assert repr(ours) == repr(theirs)
        xt = x.astype(np.float32)
        np.testing.assert_allclose(ours(nb.tensor(xt)).numpy(),
                                   theirs(torch.tensor(xt)).numpy(), atol=1e-6)


@pytest.mark.parametrize("call, error, words", [
    (lambda: nb.max_pool1d(nb.zeros(2, 3, 4, 5), 2), ValueError,
     r"max_pool1d: x must be \[N, C, L\] or unbatched \[C, L\], got shape \(2, 3, 4, 5\)"),
    (lambda: nb.max_pool1d(nb.zeros(2, 3, 4), 5), ValueError, "max_pool1d: the dilated kernel"),
    (lambda: nb.avg_pool1d(nb.zeros(2, 3, 4), 2, padding=2), ValueError,
     "avg_pool1d: padding"),
    (lambda: nb.avg_pool1d(nb.zeros(2, 3, 4), 0), ValueError, "avg_pool1d: kernel_size"),
    (lambda: nb.max_pool1d(nb.zeros(2, 0), 1), ValueError, "max_pool1d: x must have"),
    (lambda: nb.avg_pool1d(nb.zeros(2, 4, dtype=np.int64), 2), TypeError, "avg_pool1d"),
])
def test_bad_input(call, error, words):
    with pytest.raises(error, match=words):
        call()
