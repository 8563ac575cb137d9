"""GroupNorm, InstanceNorm1d and InstanceNorm2d against torch.nn: parameters, buffers,
state dicts, reprs, train/eval behaviour with and without running statistics, unbatched
input, and bad input."""

import warnings

import numpy as np
import pytest

import nbgrad as nb
from nbgrad.nn.normalization import GroupNorm, InstanceNorm1d, InstanceNorm2d

torch = pytest.importorskip("torch")

CONFIGS = [
    (GroupNorm, "GroupNorm", (2, 6), {}),
    (GroupNorm, "GroupNorm", (3, 3), {"eps": 1e-3, "affine": False}),
    (GroupNorm, "GroupNorm", (1, 4), {"bias": False}),
    (InstanceNorm1d, "InstanceNorm1d", (3,), {}),
    (InstanceNorm1d, "InstanceNorm1d", (3,), {"affine": True, "track_running_stats": True}),
    (InstanceNorm2d, "InstanceNorm2d", (4,), {"momentum": 0.3, "track_running_stats": True}),
    (InstanceNorm2d, "InstanceNorm2d", (4,), {"affine": True, "momentum": None}),
]


def pair(cls, name, args, kwargs):
    """Our layer and PyTorch's, both in float64."""
    return (cls(*args, **kwargs, dtype=nb.float64),
            getattr(torch.nn, name)(*args, **kwargs, dtype=torch.float64))


@pytest.mark.parametrize("cls, name, args, kwargs", CONFIGS)
def test_names_reprs_and_state_dicts_are_pytorchs(cls, name, args, kwargs):
    ours, theirs = pair(cls, name, args, kwargs)
    assert repr(ours) == repr(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert [n for n, _ in ours.named_buffers()] == [n for n, _ in theirs.named_buffers()]
    for key, value in theirs.state_dict().items():
        np.testing.assert_array_equal(ours.state_dict()[key].numpy(), value.numpy(), key)


@pytest.mark.parametrize("cls, name, args, kwargs", CONFIGS)
def test_training_then_evaluation_matches_pytorch(cls, name, args, kwargs):
    ours, theirs = pair(cls, name, args, kwargs)
    rng = np.random.default_rng(0)  # parameters and running statistics away from defaults
    state = {k: rng.uniform(0.5, 1.5, tuple(v.shape)) if v.is_floating_point()
             else np.asarray(0) for k, v in theirs.state_dict().items()}
    result = ours.load_state_dict(state)
    assert result.missing_keys == [] and result.unexpected_keys == []
    theirs.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    c = args[-1]
    shape = (2, c, 5) if cls is InstanceNorm1d else (2, c, 3, 4)
    for training in (True, True, False):
        ours.train(training)
        theirs.train(training)
        x = rng.standard_normal(shape) * 2 + 1
        g = rng.standard_normal(shape)
        xt, tx = nb.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        y, ty = ours(xt), theirs(tx)
        y.backward(nb.tensor(g))
        ty.backward(torch.tensor(g))
        np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(xt.grad.numpy(), tx.grad.numpy(), rtol=1e-9, atol=1e-10)
        for (n, p), (_, tp) in zip(ours.named_parameters(), theirs.named_parameters()):
            np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-9,
                                       atol=1e-10, err_msg=n)
            p.grad = None
            tp.grad = None
        for key, value in theirs.state_dict().items():
            np.testing.assert_allclose(ours.state_dict()[key].numpy(), value.numpy(),
                                       rtol=1e-12, err_msg=key)


@pytest.mark.parametrize("cls, name, shape", [(InstanceNorm1d, "InstanceNorm1d", (3, 5)),
                                              (InstanceNorm2d, "InstanceNorm2d", (3, 2, 4))])
def test_unbatched_input(cls, name, shape):
    ours, theirs = pair(cls, name, (3,), {"track_running_stats": True})
    x = np.random.default_rng(1).standard_normal(shape)
    y, ty = ours(nb.tensor(x)), theirs(torch.tensor(x))
    assert y.shape == shape
    np.testing.assert_allclose(y.numpy(), ty.numpy(), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(ours.running_mean.numpy(), theirs.running_mean.numpy(),
                               rtol=1e-6)
    assert int(ours.num_batches_tracked.item()) == int(theirs.num_batches_tracked) == 0


def test_group_norm_in_float32_by_default():
    m = GroupNorm(2, 4)
    assert m.weight.dtype == np.float32 and m.bias.dtype == np.float32
    x = np.random.default_rng(2).standard_normal((2, 4, 3)).astype(np.float32)
    assert m(nb.tensor(x)).dtype == np.float32


def test_bad_input():
    with pytest.raises(ValueError, match=r"GroupNorm: num_channels \(5\) must be divisible "
                                         r"by num_groups \(2\)"):
        GroupNorm(2, 5)
    with pytest.raises(ValueError, match="GroupNorm: num_groups must be a positive int"):
        GroupNorm(0, 4)
    with pytest.raises(ValueError, match=r"group_norm: weight has shape \(4,\) but x of "
                                         r"shape \(2, 6, 3\)"):
        GroupNorm(2, 4)(nb.tensor(np.ones((2, 6, 3), np.float32)))
    with pytest.raises(ValueError, match=r"InstanceNorm1d: expected 2D or 3D input \(got 4D"):
        InstanceNorm1d(3)(nb.tensor(np.ones((2, 3, 4, 5), np.float32)))
    with pytest.raises(ValueError, match=r"InstanceNorm2d: expected 3D or 4D input \(got 2D"):
        InstanceNorm2d(3)(nb.tensor(np.ones((3, 4), np.float32)))
    with pytest.raises(ValueError, match=r"InstanceNorm1d: expected input's size at dim=1 "
                                         r"to match num_features \(3\), but got: 4"):
        InstanceNorm1d(3, affine=True)(nb.tensor(np.ones((2, 4, 5), np.float32)))
    with pytest.raises(ValueError, match="instance_norm: expected more than 1 spatial"):
        InstanceNorm1d(3)(nb.tensor(np.ones((2, 3, 1), np.float32)))
    x = np.random.default_rng(3).standard_normal((2, 4, 5)).astype(np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = InstanceNorm1d(3)(nb.tensor(x))  # not affine: a warning, and it runs
    assert any("does not match num_features" in str(w.message) for w in caught)
    assert y.shape == (2, 4, 5)
