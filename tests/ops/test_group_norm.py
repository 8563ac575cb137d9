"""group_norm and instance_norm against PyTorch (values, gradients, second derivatives,
running statistics), a NumPy reference, the registered samples, threads and bad input."""

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads
from hypothesis import given
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.ops.group_norm import group_norm, instance_norm
from nbgrad.testing import check_registered

torch = pytest.importorskip("torch")
F = torch.nn.functional


def tol(dtype):
    return dict(rtol=3e-5, atol=3e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)


def run_both(ours, theirs, arrays, g):
    """Values and gradients of ours(*tensors) and theirs(*torch tensors) (None passes)."""
    ts = [None if a is None else nb.tensor(a, requires_grad=True) for a in arrays]
    tt = [None if a is None else torch.tensor(a, requires_grad=True) for a in arrays]
    y, ty = ours(*ts), theirs(*tt)
    y.backward(nb.tensor(g))
    ty.backward(torch.tensor(g))
    got = [y.numpy()] + [t.grad.numpy() for t in ts if t is not None]
    want = [ty.detach().numpy()] + [t.grad.numpy() for t in tt if t is not None]
    return got, want


def assert_all_close(got, want, dtype):
    for a, b in zip(got, want, strict=True):
        assert a.dtype == dtype and a.shape == b.shape
        np.testing.assert_allclose(a, b, **tol(dtype))


def torch_weight(w, b, c):
    """w, or ones where only the bias is given: PyTorch's group_norm backward fails for a
    bias without a weight ("tensor does not have a device")."""
    return torch.ones(c, dtype=b.dtype) if w is None and b is not None else w


@st.composite
def group_cases(draw):
    n = draw(st.integers(1, 3))
    groups = draw(st.integers(1, 3))
    c = groups * draw(st.integers(1, 3))
    spatial = tuple(draw(st.lists(st.integers(1, 4), max_size=2)))
    if n * (c // groups) * int(np.prod(spatial)) == 1:  # PyTorch: one value per group
        spatial = (2,)
    return (n, c) + spatial, groups, draw(st.sampled_from(["both", "weight", "bias", "none"]))


@given(case=group_cases(), seed=st.integers(0, 99),
       dtype=st.sampled_from([np.float32, np.float64]))
def test_group_norm_matches_pytorch(case, seed, dtype):
    shape, groups, affine = case
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 2 + 1).astype(dtype)
    c = shape[1]
    w = rng.uniform(0.5, 1.5, c).astype(dtype) if affine in ("both", "weight") else None
    b = rng.standard_normal(c).astype(dtype) if affine in ("both", "bias") else None
    g = rng.standard_normal(shape).astype(dtype)
    got, want = run_both(lambda *t: group_norm(t[0], groups, t[1], t[2], eps=1e-3),
                         lambda *t: F.group_norm(t[0], groups, torch_weight(t[1], t[2], c),
                                                 t[2], eps=1e-3),
                         [x, w, b], g)
    assert_all_close(got, want, dtype)


def test_group_norm_matches_a_numpy_reference():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 6, 2, 5))
    w, b = rng.standard_normal(6), rng.standard_normal(6)
    x4 = x.reshape(3, 2, -1)
    xhat = (x4 - x4.mean(2, keepdims=True)) / np.sqrt(x4.var(2, keepdims=True) + 1e-5)
    want = xhat.reshape(x.shape) * w[:, None, None] + b[:, None, None]
    np.testing.assert_allclose(group_norm(x, 2, w, b).numpy(), want, rtol=1e-12, atol=1e-12)


def test_group_norm_does_not_modify_inputs_and_keeps_empty_shapes():
    rng = np.random.default_rng(2)
    x, w, b = rng.standard_normal((2, 4, 3)), rng.standard_normal(4), rng.standard_normal(4)
    copies = [a.copy() for a in (x, w, b)]
    group_norm(x, 2, w, b)
    for a, c in zip((x, w, b), copies):
        np.testing.assert_array_equal(a, c)
    assert group_norm(np.zeros((0, 4, 3)), 2).shape == (0, 4, 3)
    assert group_norm(np.zeros((2, 4, 0)), 2).shape == (2, 4, 0)


@pytest.mark.parametrize("name", ["group_norm"])
@pytest.mark.parametrize("second_order", [False, True])
def test_registered_samples_gradcheck(name, second_order):
    report = check_registered(name, second_order=second_order)
    assert report.passed, report.failures


@pytest.mark.parametrize("with_weight", [True, False])
def test_second_derivatives_match_pytorch(with_weight):
    """d/d(x, w) of <dL/dx, v> + sum dL/dw: PyTorch's double backward."""
    rng = np.random.default_rng(3)
    shape = (2, 4, 3)
    x, g, v = (rng.standard_normal(shape) for _ in range(3))
    w, b = rng.uniform(0.5, 1.5, 4), rng.standard_normal(4)
    xt, wt, bt = (nb.tensor(a, requires_grad=True) for a in (x, w, b))
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    y = group_norm(xt, 2, wt if with_weight else None, bt)
    ty = F.group_norm(tx, 2, tw if with_weight else torch_weight(None, tb, 4), tb)
    if with_weight:
        gx, gw = nb.grad([y], [xt, wt], grad_outputs=[nb.tensor(g)], create_graph=True)
        hx, hw = nb.grad([(gx * nb.tensor(v)).sum() + (gw * gw).sum()], [xt, wt])
        tgx, tgw = torch.autograd.grad(ty, [tx, tw], torch.tensor(g), create_graph=True)
        thx, thw = torch.autograd.grad((tgx * torch.tensor(v)).sum() + (tgw * tgw).sum(),
                                       [tx, tw])
        np.testing.assert_allclose(hw.numpy(), thw.numpy(), rtol=1e-9, atol=1e-10)
    else:
        (gx,) = nb.grad([y], [xt], grad_outputs=[nb.tensor(g)], create_graph=True)
        (hx,) = nb.grad([(gx * nb.tensor(v)).sum()], [xt])
        (tgx,) = torch.autograd.grad(ty, [tx], torch.tensor(g), create_graph=True)
        (thx,) = torch.autograd.grad((tgx * torch.tensor(v)).sum(), [tx])
    np.testing.assert_allclose(hx.numpy(), thx.numpy(), rtol=1e-9, atol=1e-10)


def test_same_bits_at_one_and_two_threads():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((8, 32, 16, 16)).astype(np.float32)
    w, b = rng.standard_normal(32).astype(np.float32), rng.standard_normal(32).astype(np.float32)
    g = rng.standard_normal(x.shape).astype(np.float32)

    def run():
        ts = [nb.tensor(a, requires_grad=True) for a in (x, w, b)]
        y = group_norm(ts[0], 4, ts[1], ts[2])
        y.backward(nb.tensor(g))
        return [y.numpy()] + [t.grad.numpy() for t in ts]

    for a, c in zip(at_threads(1, run), at_threads(2, run)):
        assert_same_bits(a, c)


# -- instance_norm --------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(2, 3, 5), (3, 2, 4, 3), (1, 4, 2)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_instance_norm_matches_pytorch_with_running_stats(shape, dtype):
    rng = np.random.default_rng(5)
    c = shape[1]
    w, b = rng.uniform(0.5, 1.5, c).astype(dtype), rng.standard_normal(c).astype(dtype)
    rm, rv = rng.standard_normal(c).astype(dtype), rng.uniform(0.5, 2, c).astype(dtype)
    trm, trv = torch.tensor(rm), torch.tensor(rv)
    for use_input_stats in (True, True, False):
        x = (rng.standard_normal(shape) * 2 - 1).astype(dtype)
        g = rng.standard_normal(shape).astype(dtype)
        got, want = run_both(
            lambda *t, u=use_input_stats: instance_norm(t[0], rm, rv, t[1], t[2], u, 0.3),
            lambda *t, u=use_input_stats: F.instance_norm(t[0], trm, trv, t[1], t[2], u, 0.3),
            [x, w, b], g)
        assert_all_close(got, want, dtype)
        np.testing.assert_allclose(rm, trm.numpy(), **tol(dtype))
        np.testing.assert_allclose(rv, trv.numpy(), **tol(dtype))


@given(seed=st.integers(0, 99), n=st.integers(1, 3), c=st.integers(1, 4),
       length=st.integers(2, 6))
def test_instance_norm_without_running_stats_is_group_norm_per_channel(seed, n, c, length):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, length))
    g = rng.standard_normal(x.shape)
    got, want = run_both(lambda t: instance_norm(t), lambda t: F.instance_norm(t), [x], g)
    assert_all_close(got, want, np.float64)
    np.testing.assert_array_equal(instance_norm(x).numpy(), group_norm(x, c).numpy())


# -- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize("call, error, match", [
    (lambda x: group_norm(x, 3), ValueError, r"group_norm: .*\(2, 4, 3\).*num_groups=3"),
    (lambda x: group_norm(x, 0), ValueError, "group_norm: num_groups must be positive"),
    (lambda x: group_norm(x, 2.0), TypeError, "group_norm: num_groups must be an int"),
    (lambda x: group_norm(x[:1, :2, :1], 2), ValueError,
     r"group_norm: expected more than 1 value per channel.*\(1, 2, 1\)"),
    (lambda x: group_norm(x[0, 0], 1), ValueError, r"group_norm: .*2 dimensions.*\(3,\)"),
    (lambda x: group_norm(x, 2, np.ones(3)), ValueError,
     r"group_norm: weight has shape \(3,\) but x of shape \(2, 4, 3\) has 4 channels"),
    (lambda x: group_norm(x, 2, None, np.ones((4, 1))), ValueError,
     r"group_norm: bias has shape \(4, 1\)"),
    (lambda x: group_norm(x, 2, np.ones(4, np.float32)), TypeError,
     "group_norm: inputs must share one dtype"),
    (lambda x: group_norm(np.ones((2, 4), np.int64), 2), TypeError,
     "group_norm: input must be float32 or float64"),
    (lambda x: instance_norm(x[:, :, :1]), ValueError,
     r"instance_norm: expected more than 1 spatial element.*\(2, 4, 1\)"),
    (lambda x: instance_norm(x, np.zeros(3), np.ones(3)), ValueError,
     r"instance_norm: running_mean has shape \(3,\) but x has 4 channels"),
    (lambda x: instance_norm(x, np.zeros(4)), ValueError,
     "instance_norm: running_mean and running_var must either both be None"),
    (lambda x: instance_norm(x, use_input_stats=False), ValueError,
     "instance_norm: expected running_mean and running_var"),
    (lambda x: instance_norm(x, weight=np.ones(2)), ValueError,
     r"instance_norm: weight has shape \(2,\)"),
])
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call(nb.tensor(np.random.default_rng(6).standard_normal((2, 4, 3))))
