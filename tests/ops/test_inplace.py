"""In-place ops and item assignment: PyTorch's values and gradients, recorded in the graph
as PyTorch records them, and PyTorch's refusals (a leaf that requires grad, a view of it)."""

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.testing import strategies as nbst

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


def test_a_leaf_that_requires_grad_changes_in_place_only_under_no_grad():
    w = nb.tensor(np.ones(3), requires_grad=True)
    for change in (lambda: w.add_(1.0), lambda: w.__setitem__(0, 2.0), lambda: w.zero_(),
                   lambda: w.masked_fill_(nb.tensor([True, False, True]), 0.0)):
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being "
                                               "used in an in-place operation"):
            change()
    with pytest.raises(RuntimeError, match="a view of a leaf Variable"):
        w[:2].mul_(2.0)
    np.testing.assert_array_equal(w.numpy(), 1.0)  # unchanged by the refusals
    with nb.no_grad():
        w.sub_(nb.tensor(np.full(3, 0.5)))
        w[0] = 4.0
    np.testing.assert_array_equal(w.numpy(), [4.0, 0.5, 0.5])


def test_in_place_errors_name_the_op_and_shapes_and_leave_the_tensor():
    x = nb.tensor(np.arange(6.0).reshape(2, 3))
    before = x.numpy().copy()
    with pytest.raises(ValueError, match=r"add: shapes \(2, 3\) and \(4,\)"):
        x.add_(np.ones(4))
    with pytest.raises(RuntimeError, match=r"add_: the result of shape \(2, 2, 3\)"):
        x.add_(np.ones((2, 1, 3)))
    with pytest.raises(RuntimeError, match=r"add_: result type (nbgrad\.)?float32 can't be "
                                           r"cast to the desired output type (nbgrad\.)?int64"):
        nb.tensor([1, 2]).add_(0.5)
    with pytest.raises(ValueError, match=r"copy_: a value of shape \(5,\).*\(2, 3\)"):
        x.copy_(np.ones(5))
    with pytest.raises(IndexError, match=r"setitem: .*out of bounds.*shape \(2, 3\)"):
        x[nb.tensor([0, 2])] = 1.0
    with pytest.raises(IndexError, match=r"setitem: .*boolean index did not match"):
        x[nb.tensor([True, False, True])] = 1.0
    with pytest.raises(ValueError, match=r"setitem: a value of shape \(2,\) does not "
                                         r"broadcast to the \(2, 3\) elements"):
        x[...] = np.ones(2)
    with pytest.raises(TypeError, match="setitem: index arrays must hold integers"):
        x[nb.tensor([0.5])] = 1.0
    np.testing.assert_array_equal(x.numpy(), before)
    assert x._version == 0


# -- item assignment against PyTorch, values and gradients -------------------------------------
def _torch_index(torch, index):
    items = index if isinstance(index, tuple) else (index,)
    return tuple(torch.as_tensor(i) if isinstance(i, np.ndarray) else i for i in items)


@st.composite
def _assignments(draw):
    shape = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple))
    kind = draw(st.sampled_from(["basic", "array", "mask"]))
    if kind == "mask":
        index = draw(nbst.arrays(np.bool_, shape, 0, 1))
    else:
        index = draw(nbst.index_expressions(shape, allow_arrays=kind == "array"))
        items = index if isinstance(index, tuple) else (index,)
        # PyTorch takes no negative slice steps
        assume(not any(isinstance(i, slice) and (i.step or 1) < 0 for i in items))
        arrays = [k for k, i in enumerate(items) if isinstance(i, np.ndarray)]
        if arrays:  # repeated positions would make the written value unspecified
            axis = arrays[0]
            index = items[:axis] + (np.unique(items[axis] % shape[axis]),)
    selected = np.zeros(shape)[index].shape
    value_shape = draw(st.sampled_from([selected, selected[1:], ()]))
    return shape, index, value_shape


@settings(max_examples=60, deadline=None)
@given(case=_assignments(), seed=st.integers(0, 2**31), value_grad=st.booleans())
def test_setitem_values_and_gradients_match_torch(case, seed, value_grad):
    torch = pytest.importorskip("torch")
    shape, index, value_shape = case
    rng = np.random.default_rng(seed)
    x0, v0 = rng.standard_normal(shape), rng.standard_normal(value_shape)
    weights = rng.standard_normal(shape)

    x = nb.tensor(x0, requires_grad=True)
    v = nb.tensor(v0, requires_grad=value_grad)
    y = x * 2.0
    y[index] = v
    (y * nb.tensor(weights)).sum().backward()

    tx = torch.tensor(x0, requires_grad=True)
    tv = torch.tensor(v0, requires_grad=value_grad)
    ty = tx * 2.0
    ty[_torch_index(torch, index)] = tv
    (ty * torch.tensor(weights)).sum().backward()

    np.testing.assert_array_equal(y.numpy(), ty.detach().numpy())
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12, atol=1e-12)
    if value_grad:
        np.testing.assert_allclose(v.grad.numpy(), tv.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_assigning_a_value_that_requires_grad_into_a_plain_buffer():
    torch = pytest.importorskip("torch")
    w0 = np.array([0.5, -1.5])
    w = nb.tensor(w0, requires_grad=True)
    buf = nb.zeros(2, 3, dtype=np.float64)
    buf[:, 1] = w * 3.0
    assert buf.requires_grad and not buf.is_leaf
    (buf ** 2).sum().backward()
    tw = torch.tensor(w0, requires_grad=True)
    tbuf = torch.zeros(2, 3, dtype=torch.float64)
    tbuf[:, 1] = tw * 3.0
    (tbuf ** 2).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy())


def test_assignment_casts_as_torch_does():
    torch = pytest.importorskip("torch")
    x, tx = nb.tensor([1, 2, 3]), torch.tensor([1, 2, 3])
    x[0], tx[0] = 2.7, 2.7
    x[1:], tx[1:] = -1.9, -1.9
    np.testing.assert_array_equal(x.numpy(), tx.numpy())
    assert x.dtype == np.int64
    b, tb = nb.zeros(3, dtype=np.bool_), torch.zeros(3, dtype=torch.bool)
    b[1], tb[1] = 5, 5
    np.testing.assert_array_equal(b.numpy(), tb.numpy())


def test_assignment_under_no_grad_and_through_detach_writes_the_storage():
    x = nb.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 1.0
    d = y.detach()
    d[0] = 10.0  # detach shares memory (and the version counter) with y
    assert y.numpy()[0] == 10.0 and y._version == 1
    with nb.no_grad():
        y[1] = 20.0
    np.testing.assert_array_equal(y.numpy(), [10.0, 20.0, 3.0])
    assert y._version == 2


# -- the other in-place and indexed writes ------------------------------------------------------
def _both(torch, fn, x0, *, grad=True):
    """fn(module, x) on nbgrad and torch, with (weights * result).sum() backpropagated:
    the results and x's gradients."""
    rng = np.random.default_rng(0)
    out = []
    for lib, make in ((nb, nb.tensor), (torch, torch.tensor)):
        x = make(x0, requires_grad=grad)
        y = fn(lib, x * 1.0 if grad else x)
        if grad:
            (y * make(rng.standard_normal(y.shape))).sum().backward()
            rng = np.random.default_rng(0)
        out.append((np.asarray(y.detach()), None if not grad else np.asarray(x.grad)))
    return out


WRITES = {
    "masked_fill_": lambda m, x: x.masked_fill_(x > 0.3, -2.0),
    "masked_fill broadcast mask": lambda m, x: x.masked_fill(m.tensor([True, False, True,
                                                                       False]), 7.0),
    "index_put_": lambda m, x: x.index_put_((m.tensor([0, 2]), m.tensor([1, 3])),
                                            m.tensor([5.0, 6.0], dtype=m.float64)),
    "index_put_ accumulate": lambda m, x: x.index_put_(
        (m.tensor([0, 0, 2]),), m.tensor([[1.0] * 4, [2.0] * 4, [3.0] * 4],
                                         dtype=m.float64), accumulate=True),
    "index_fill_": lambda m, x: x.index_fill_(1, m.tensor([0, 3]), 9.0),
    "scatter_ src": lambda m, x: x.scatter_(0, m.tensor([[2, 0, 1, 2]]),
                                            m.ones(1, 4, dtype=m.float64)),
    "scatter_ value": lambda m, x: x.scatter_(1, m.tensor([[3], [0], [1]]), value=-1.0),
    "scatter_add_": lambda m, x: x.scatter_add_(1, m.tensor([[0, 0], [3, 1], [2, 2]]),
                                                m.full((3, 2), 0.5, dtype=m.float64)),
    "scatter out of place": lambda m, x: m.scatter(x, 0, m.tensor([[1, 1, 0, 2]]),
                                                   m.zeros(1, 4, dtype=m.float64)),
    "masked_fill mask larger than x": lambda m, x: m.masked_fill(
        x, m.tensor(np.arange(24).reshape(2, 3, 4) % 3 == 0), 7.0),
    "index_fill on 0-d": lambda m, x: m.index_fill(x[1, 2], 0, m.tensor([0]), 4.0),
    "scatter on 0-d": lambda m, x: m.scatter(x[0, 1], 0, m.tensor(0), x[2, 3] * 2.0),
    "add_ mul_ pow_": lambda m, x: x.add_(1.0, alpha=2.0).mul_(2.5).pow_(2),
    "clamp_ exp_": lambda m, x: x.clamp_(-0.5, 0.5).exp_(),
    "copy_ broadcast": lambda m, x: x.copy_(m.tensor([1.0, 2.0, 3.0, 4.0],
                                                     dtype=m.float64)),
    "iadd isub imul": lambda m, x: _augmented(x),
}


def _augmented(x):
    x += 1.0
    x -= 0.25
    x *= 3.0
    return x


@pytest.mark.parametrize("name", sorted(WRITES))
def test_indexed_and_arithmetic_writes_match_torch(name):
    torch = pytest.importorskip("torch")
    x0 = np.random.default_rng(3).standard_normal((3, 4))
    (y, gx), (ty, tgx) = _both(torch, WRITES[name], x0)
    np.testing.assert_allclose(y, ty, rtol=1e-12)
    np.testing.assert_allclose(gx, tgx, rtol=1e-12, atol=1e-15)


def test_write_values_get_gradients_as_in_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    x0, s0 = rng.standard_normal((3, 4)), rng.standard_normal((2, 4))
    grads = []
    for lib in (nb, torch):
        src = lib.tensor(s0, requires_grad=True)
        fill = lib.tensor(0.5, dtype=lib.float64, requires_grad=True)
        x = lib.tensor(x0)
        y = x.scatter(0, lib.tensor([[2, 0, 1, 2], [1, 1, 0, 0]]), src)
        y = y.masked_fill(y > 0.8, fill)
        (y * y).sum().backward()
        grads.append((np.asarray(src.grad), float(fill.grad)))
    np.testing.assert_allclose(grads[0][0], grads[1][0], rtol=1e-12)
    assert grads[0][1] == pytest.approx(grads[1][1], rel=1e-12)


def test_indexed_write_errors():
    x = nb.zeros(3, 4)
    with pytest.raises(IndexError, match="scatter_: index 4 is out of bounds for dim 1 of "
                                         "size 4"):
        x.scatter_(1, nb.tensor([[4]]), value=1.0)
    with pytest.raises(ValueError, match=r"scatter_: index must have as many dims"):
        x.scatter_(1, nb.tensor([1]), value=1.0)
    with pytest.raises(TypeError, match="scatter_: give exactly one of src and value"):
        x.scatter_(1, nb.tensor([[1]]))
    with pytest.raises(ValueError, match=r"masked_fill_: a mask of shape \(2,\)"):
        x.masked_fill_(nb.tensor([True, False]), 1.0)
    with pytest.raises(TypeError, match="masked_fill_: mask must be a bool tensor"):
        x.masked_fill_(nb.tensor([1, 0, 1, 0]), 1.0)
    with pytest.raises(ValueError, match="masked_fill_: only a 0-dim tensor"):
        x.masked_fill_(nb.tensor([True, False, True, False]), nb.ones(2))
    with pytest.raises(IndexError, match="index_fill_: dim=2 is out of range"):
        x.index_fill_(2, nb.tensor([0]), 1.0)
    with pytest.raises(RuntimeError, match=r"a value that requires grad cannot be written "
                                           r"into a (nbgrad\.)?int64"):
        nb.zeros(2, dtype=np.int64)[0] = nb.tensor(1.0, requires_grad=True)
    assert not x.numpy().any()


def test_a_view_in_the_graph_is_not_changed_in_place():
    x = nb.tensor(np.ones((2, 3)), requires_grad=True)
    y = x * 2.0
    with pytest.raises(RuntimeError, match="does not record in-place changes of a view"):
        y[0].add_(1.0)
    with pytest.raises(RuntimeError, match="does not record in-place changes of a view"):
        y.reshape(6)[0] = 1.0
    y[0] = 1.0  # the base itself is fine
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 0, 0], [2, 2, 2]])


def test_clone_copies_and_passes_the_gradient():
    x = nb.tensor([1.0, 2.0], requires_grad=True)
    c = x.clone()
    assert not np.shares_memory(c.numpy(), x.numpy())
    c[0] = 5.0
    (c * 3.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 3.0])
    np.testing.assert_array_equal(x.numpy(), [1.0, 2.0])


def test_second_derivative_through_an_assignment():
    torch = pytest.importorskip("torch")
    out = []
    for lib in (nb, torch):
        x = lib.tensor([0.5, -1.0, 2.0], dtype=lib.float64, requires_grad=True)
        y = x ** 3
        y[1] = x[0] ** 2
        (g,) = lib.autograd.grad(y.sum(), x, create_graph=True) if lib is torch else \
            lib.grad(y.sum(), x, create_graph=True)
        (h,) = lib.autograd.grad(g.sum(), x) if lib is torch else lib.grad(g.sum(), x)
        out.append((np.asarray(g.detach()), np.asarray(h)))
    np.testing.assert_allclose(out[0][0], out[1][0])
    np.testing.assert_allclose(out[0][1], out[1][1])


def test_data_is_a_tensor_on_the_same_storage_outside_autograd():
    torch = pytest.importorskip("torch")
    results = []
    for lib in (nb, torch):
        p = lib.nn.Parameter(lib.tensor([1.0, 2.0, 3.0]))
        y = (p * p).sum()  # saves p
        p.data.mul_(0.5)  # not seen by autograd: no version bump, no error
        y.backward()
        p.data[0] = 7.0
        results.append((np.asarray(p.detach()), np.asarray(p.grad), p._version,
                        p.data.requires_grad, isinstance(p.data, lib.Tensor)))
        p.data = lib.tensor([4.0, 5.0])  # any shape, as in PyTorch
        results[-1] += (tuple(p.shape), p.requires_grad)
    ours, theirs = results
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a, b)


# -- forms PyTorch takes: reduce='multiply', 0-d tensors, a mask broadcasting x larger ------------
def _scatter_forms(lib, x, src):
    index = lib.tensor([[2, 0, 1, 2], [2, 2, 0, 2]])
    t0, i0 = lib.tensor(1.5, dtype=lib.float64), lib.tensor(0)
    return [lib.scatter(x, 0, index, src, reduce="multiply"),
            lib.scatter(x, 1, index[:, :3].T.contiguous(), src.T[:3, :2].contiguous(),
                        reduce="multiply"),
            x.scatter(-1, index, 2.5, reduce="multiply"),
            x.clone().scatter_(0, index, src, reduce="multiply"),
            lib.scatter(x, 0, index, src, reduce="add"),
            lib.scatter(x, 0, index, 2.5),
            lib.scatter(t0, 0, i0, lib.tensor(3.0, dtype=lib.float64)),
            lib.scatter(t0, 0, i0, 2.5, reduce="add"),
            lib.scatter(t0, 0, i0, 2.5, reduce="multiply"),
            lib.scatter(t0, 0, lib.tensor([0]), lib.tensor([4.0], dtype=lib.float64),
                        reduce="multiply"),
            t0.clone().scatter_(0, i0, lib.tensor(3.0, dtype=lib.float64), reduce="add"),
            lib.index_fill(t0, -1, lib.tensor(0), 8.0),
            lib.index_fill(t0, 0, lib.tensor([0, 0]), lib.tensor(9.0, dtype=lib.float64))]


@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter")
def test_scatter_multiply_and_0d_forms_match_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(8)
    x0, s0 = rng.standard_normal((3, 4)), rng.standard_normal((2, 4))
    mine = _scatter_forms(nb, nb.tensor(x0), nb.tensor(s0))
    theirs = _scatter_forms(torch, torch.tensor(x0), torch.tensor(s0))
    for y, ty in zip(mine, theirs, strict=True):
        assert y.shape == tuple(ty.shape)
        np.testing.assert_allclose(y.numpy(), ty.numpy(), rtol=1e-15)
    ints = nb.ones(3, dtype=nb.int64).scatter_(0, nb.tensor([0, 0]), nb.tensor([2, 3]),
                                                reduce="multiply")
    np.testing.assert_array_equal(ints.numpy(), [6, 1, 1])


def test_scatter_multiply_has_no_gradient_and_other_refusals():
    x = nb.ones(3, 4, requires_grad=True)
    with pytest.raises(RuntimeError, match="scatter_: reduce='multiply' has no gradient"):
        nb.scatter(x, 0, nb.tensor([[0, 1]]), nb.ones(1, 2), reduce="multiply")
    with nb.no_grad():
        y = nb.scatter(x, 0, nb.tensor([[0, 1]]), nb.full((1, 2), 3.0), reduce="multiply")
    np.testing.assert_array_equal(y.numpy()[0], [3.0, 1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="reduce must be None, 'add' or 'multiply', got 'mean'"):
        nb.scatter(nb.ones(3), 0, nb.tensor([0]), 1.0, reduce="mean")
    with pytest.raises(IndexError, match=r"index_fill_: index 1 is out of bounds for dim 0 "
                                         r"of size 1 \(the tensor has shape \(\)\)"):
        nb.index_fill(nb.tensor(1.0), 0, nb.tensor([1]), 2.0)
    with pytest.raises(IndexError, match="scatter_: index 1 is out of bounds"):
        nb.scatter(nb.tensor(1.0), 0, nb.tensor(1), 2.0)
    with pytest.raises(ValueError, match=r"masked_fill: a mask of shape \(2, 3\) does not "
                                         r"broadcast with the tensor's shape \(4,\)"):
        nb.masked_fill(nb.ones(4), nb.ones(2, 3, dtype=nb.bool), 0.0)
    # the in-place form keeps x's shape, as torch refuses a mask that would grow it
    with pytest.raises(ValueError, match=r"masked_fill_: a mask of shape \(2, 4\)"):
        nb.ones(4).masked_fill_(nb.ones(2, 4, dtype=nb.bool), 0.0)
