"""In-place updates (add_ sub_ mul_ div_ copy_ fill_ zero_) and numel: PyTorch's values
and PyTorch's rule that a tensor requiring grad is updated in place only under no_grad."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbgrad as nb

UPDATES = [("add_", {"alpha": 1}), ("add_", {"alpha": -0.5}), ("sub_", {"alpha": 2}),
           ("mul_", {}), ("div_", {}), ("copy_", {})]


@settings(max_examples=30, deadline=None)
@given(rows=st.integers(1, 4), cols=st.integers(1, 5), broadcast=st.booleans(),
       which=st.sampled_from(UPDATES), seed=st.integers(0, 2**31))
def test_in_place_updates_match_torch(rows, cols, broadcast, which, seed):
    torch = pytest.importorskip("torch")
    name, kwargs = which
    rng = np.random.default_rng(seed)
    x0 = rng.standard_normal((rows, cols))
    other = rng.standard_normal((1, cols) if broadcast else (rows, cols)) + 3.0
    x = nb.tensor(x0)
    tx = torch.tensor(x0)
    assert getattr(x, name)(nb.tensor(other), **kwargs) is x
    getattr(tx, name)(torch.tensor(other), **kwargs)
    np.testing.assert_array_equal(x.numpy(), tx.numpy())


def test_fill_zero_numel_and_scalars():
    x = nb.tensor(np.arange(6.0).reshape(2, 3))
    assert x.numel() == 6
    x.mul_(2).add_(1)
    np.testing.assert_array_equal(x.numpy(), np.arange(6.0).reshape(2, 3) * 2 + 1)
    assert np.all(x.fill_(7).numpy() == 7) and np.all(x.zero_().numpy() == 0)


def test_parameters_update_in_place_only_under_no_grad():
    w = nb.tensor(np.ones(3), requires_grad=True)
    with pytest.raises(RuntimeError, match="add_: a leaf tensor that requires grad"):
        w.add_(1.0)
    y = w * 2
    with pytest.raises(RuntimeError, match="mul_: a tensor in a graph"):
        y.mul_(2.0)
    with nb.no_grad():
        w.sub_(nb.tensor(np.full(3, 0.5)))
    np.testing.assert_array_equal(w.numpy(), 0.5)


def test_in_place_errors_name_the_op_and_shapes():
    x = nb.zeros(2, 3)
    with pytest.raises(ValueError, match=r"add_: .*shape \(4,\).*shape \(2, 3\)"):
        x.add_(np.ones(4))
    with pytest.raises(TypeError, match="add_: .*dtype float64.*dtype int64"):
        nb.tensor([1, 2]).add_(0.5)
    with pytest.raises(ValueError, match=r"copy_: .*shape \(5,\)"):
        x.copy_(np.ones(5))
