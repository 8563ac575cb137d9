"""nbgrad.nn.utils.parameters_to_vector / vector_to_parameters against torch.nn.utils."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad import nn
from nbgrad.nn.utils import parameters_to_vector, vector_to_parameters

torch = pytest.importorskip("torch")

shapes_st = st.lists(st.lists(st.integers(1, 4), min_size=0, max_size=3).map(tuple),
                     min_size=1, max_size=4)


@settings(max_examples=30, deadline=None)
@given(shapes_st, st.integers(0, 2**16))
def test_parameters_to_vector_equals_torch_and_round_trips(shapes, seed):
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s) for s in shapes]
    ours = [nb.tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    vec = parameters_to_vector(ours)
    expected = torch.nn.utils.parameters_to_vector(theirs)
    assert vec.shape == tuple(expected.shape) and vec.requires_grad
    np.testing.assert_array_equal(vec.numpy(), expected.detach().numpy())
    # differentiable: the gradient of <w, vec> is w reshaped into each parameter
    weights = rng.standard_normal(vec.shape)
    (vec * nb.tensor(weights)).sum().backward()
    (expected * torch.tensor(weights)).sum().backward()
    for p, t in zip(ours, theirs):
        np.testing.assert_array_equal(p.grad.numpy(), t.grad.numpy())
    # the other way: slices of a new vector, written into the parameters
    new = rng.standard_normal(vec.shape[0] + int(rng.integers(0, 3)))
    vector_to_parameters(nb.tensor(new), ours)
    with torch.no_grad():
        torch.nn.utils.vector_to_parameters(torch.tensor(new), theirs)
    for p, t in zip(ours, theirs):
        np.testing.assert_array_equal(p.numpy(), t.detach().numpy())
        assert p.requires_grad and p.grad is not None
    np.testing.assert_array_equal(parameters_to_vector(ours).numpy(), new[:vec.shape[0]])


def test_vector_to_parameters_writes_in_place_outside_autograd():
    net = nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 1))
    arrays = [p._data for p in net.parameters()]
    versions = [p._version for p in net.parameters()]
    vec = parameters_to_vector(net.parameters())
    assert vec.shape == (3 * 2 + 2 + 2 + 1,) and vec.dtype == nb.float32
    doubled = nb.tensor(vec.detach().numpy().astype(np.float64) * 2)
    vector_to_parameters(doubled, net.parameters())
    for p, a, v in zip(net.parameters(), arrays, versions):
        assert p._data is a and p.dtype == nb.float32  # the same array, its dtype kept
        assert p._version > v
    np.testing.assert_allclose(parameters_to_vector(net.parameters()).detach().numpy(),
                               doubled.numpy(), rtol=1e-6)
    assert doubled.grad_fn is None and not doubled.requires_grad


def test_bad_input_raises_like_torch():
    params = [nb.zeros((2, 3), requires_grad=True), nb.zeros(4, requires_grad=True)]
    with pytest.raises(TypeError, match="expected a Tensor for vec, got list"):
        vector_to_parameters([1.0] * 10, params)
    with pytest.raises(RuntimeError, match=r"shape \[2, 3\].*size 5"):
        vector_to_parameters(nb.tensor(np.arange(5.0)), params)
    with pytest.raises(RuntimeError, match=r"shape \[4\].*size 2"):
        vector_to_parameters(nb.tensor(np.arange(8.0)), params)
    with pytest.raises(ValueError, match="non-empty"):
        parameters_to_vector([])
    with pytest.raises(TypeError, match="not a Tensor"):
        parameters_to_vector([np.zeros(2)])
    tparams = [torch.zeros(2, 3), torch.zeros(4)]
    with pytest.raises(TypeError):
        torch.nn.utils.vector_to_parameters([1.0] * 10, tparams)
    with pytest.raises(RuntimeError):
        torch.nn.utils.vector_to_parameters(torch.arange(5.0), tparams)
    with pytest.raises(ValueError):
        torch.nn.utils.parameters_to_vector([])
