"""sort, argsort, topk and unique: against PyTorch over shapes, dims, orders, ties, NaN
and inf, float32/float64/int64 (values, indices, dtypes, gradients), the named-tuple
results, bad input."""

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nbgrad as nb
from nbgrad.ops.sort import SELECT_K_MAX
from nbgrad.testing import gradcheck, gradgradcheck

torch = pytest.importorskip("torch")

DTYPES = [np.float32, np.float64, np.int64]


@st.composite
def sort_cases(draw):
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=6))
    span = max(len(shape), 1)
    return shape, draw(st.integers(-span, span - 1))


def sample(rng, shape, dtype, kind):
    """``kind``: 'distinct' values, 'ties' (a few values repeated), or 'nonfinite' (ties
    with NaN, inf and -inf, and -0.0 next to 0.0, for floats)."""
    if kind == "distinct":
        x = rng.permutation(int(np.prod(shape))).reshape(shape) - 7
        return np.asarray(x if dtype == np.int64 else x * 0.5 + 0.25, dtype)
    x = np.asarray(rng.integers(-2, 3, shape), dtype)
    if kind == "nonfinite" and dtype != np.int64:
        pick = rng.random(shape)
        x[pick < 0.15] = np.nan
        x[(pick >= 0.15) & (pick < 0.25)] = np.inf
        x[(pick >= 0.25) & (pick < 0.3)] = -np.inf
        x[(pick >= 0.3) & (pick < 0.4)] = -0.0
    return x


KINDS = st.sampled_from(["distinct", "ties", "nonfinite"])


@pytest.mark.parametrize("dtype", DTYPES)
@given(case=sort_cases(), descending=st.booleans(), kind=KINDS, seed=st.integers(0, 99))
def test_sort_and_argsort_match_torch_stable(dtype, case, descending, kind, seed):
    shape, dim = case
    x = sample(np.random.default_rng(seed), shape, dtype, kind)
    before = x.copy()
    r = nb.sort(x, dim, descending, stable=True)
    want = torch.sort(torch.from_numpy(x), dim=dim, descending=descending, stable=True)
    assert isinstance(r, nb.return_types.sort)
    values, indices = r  # unpacks as a pair
    assert values.dtype == x.dtype and indices.dtype == np.int64
    assert values.shape == indices.shape == x.shape
    np.testing.assert_array_equal(values.numpy(), want.values.numpy())  # NaN where NaN
    np.testing.assert_array_equal(indices.numpy(), want.indices.numpy())
    # stable=False gives the same (stable) order; argsort is its indices
    np.testing.assert_array_equal(nb.sort(x, dim, descending).indices.numpy(),
                                  want.indices.numpy())
    got = nb.argsort(x, dim, descending, stable=True)
    np.testing.assert_array_equal(got.numpy(), torch.argsort(
        torch.from_numpy(x), dim=dim, descending=descending, stable=True).numpy())
    np.testing.assert_array_equal(x, before)


@pytest.mark.parametrize("dtype", DTYPES)
@given(case=sort_cases(), largest=st.booleans(), kind=KINDS, seed=st.integers(0, 99),
       data=st.data())
def test_topk_matches_torch(dtype, case, largest, kind, seed, data):
    shape, dim = case
    x = sample(np.random.default_rng(seed), shape, dtype, kind)
    size = shape[dim] if shape else 1
    k = data.draw(st.integers(0, size))
    r = nb.topk(x, k, dim, largest)
    want = torch.topk(torch.from_numpy(x), k, dim, largest)
    assert isinstance(r, nb.return_types.topk)
    assert r.values.dtype == x.dtype and r.indices.dtype == np.int64
    np.testing.assert_array_equal(r.values.numpy(), want.values.numpy())
    # the indices point at the values, each chosen once; with distinct values they are
    # torch's, with ties they are the lowest indices (the stable order's first k)
    idx = r.indices.numpy()
    if x.ndim:
        np.testing.assert_array_equal(np.take_along_axis(x, idx, dim), r.values.numpy())
        srt = np.sort(idx, axis=dim)
        assert (np.diff(srt, axis=dim) > 0).all()
    if kind == "distinct":
        np.testing.assert_array_equal(idx, want.indices.numpy())
    if x.ndim:
        stable = torch.sort(torch.from_numpy(x), dim=dim, descending=largest, stable=True)
        first_k = (slice(None),) * (dim % x.ndim) + (slice(0, k),)
        np.testing.assert_array_equal(idx, stable.indices.numpy()[first_k])


ALL_DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
              np.uint8, np.bool_]


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("descending", [False, True])
def test_long_rows_of_every_dtype_sort_and_select_as_torch_stable(dtype, descending):
    # rows long enough for every radix digit to vary, ties everywhere; topk on both sides
    # of SELECT_K_MAX (insertion into a buffer, then the full sort)
    rng = np.random.default_rng(3)
    if np.dtype(dtype).kind == "f":
        x = (rng.integers(-40, 40, (5, 300)) * 0.37).astype(dtype)
        x[:, ::7] = np.nan
        x[:, 3::11] = np.copysign(np.nan, -1.0)  # a NaN with its sign bit set
        x[:, 5::13] = -0.0
        x[:, 1::17] = -np.inf
    else:
        info = np.iinfo(dtype) if dtype != np.bool_ else None
        x = (rng.random((5, 300)) < 0.5 if info is None
             else rng.integers(info.min, info.max, (5, 300), endpoint=True, dtype=dtype))
    want = torch.sort(torch.from_numpy(x), dim=1, descending=descending, stable=True)
    got = nb.sort(x, 1, descending)
    np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())
    np.testing.assert_array_equal(got.values.numpy(), want.values.numpy())
    for k in [1, SELECT_K_MAX, SELECT_K_MAX + 1, 299, 300]:
        top = nb.topk(x, k, 1, largest=descending)
        np.testing.assert_array_equal(top.indices.numpy(), want.indices.numpy()[:, :k])


def test_same_bits_at_one_and_two_threads():
    x = np.random.default_rng(4).integers(-50, 50, (600, 512)).astype(np.float32)
    for run in [lambda: nb.sort(x, 0, True), lambda: nb.topk(x, 9, 1),
                lambda: nb.topk(x, 100, 0, largest=False)]:
        one, two = at_threads(1, run), at_threads(2, run)
        assert_same_bits(one.indices.numpy(), two.indices.numpy())
        assert_same_bits(one.values.numpy(), two.values.numpy())


@pytest.mark.parametrize("op", ["sort", "topk"])
@given(case=sort_cases(), flag=st.booleans(), ties=st.booleans(), seed=st.integers(0, 99),
       data=st.data())
def test_gradients_match_torch(op, case, flag, ties, seed, data):
    shape, dim = case
    rng = np.random.default_rng(seed)
    x = sample(rng, shape, np.float64, "ties" if ties else "distinct")
    t, tt = nb.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    if op == "sort":
        y, ty = nb.sort(t, dim, flag), torch.sort(tt, dim=dim, descending=flag, stable=True)
    else:
        k = data.draw(st.integers(0, shape[dim] if shape else 1))
        y, ty = nb.topk(t, k, dim, flag), torch.topk(tt, k, dim, flag)
    assert y.values.requires_grad and not y.indices.requires_grad
    g = rng.standard_normal(y.values.shape)
    (gx,) = nb.grad(y.values, [t], grad_outputs=g)
    want = np.zeros(x.shape)
    if x.ndim:  # each output position sends its g to its own index: nothing accumulates
        np.put_along_axis(want, y.indices.numpy(), g, dim)
    else:
        want = g
    np.testing.assert_array_equal(gx.numpy(), want)
    if not ties or op == "sort":  # torch's indices agree: so do the gradients
        ty.values.backward(torch.tensor(g))
        np.testing.assert_array_equal(gx.numpy(), tt.grad.numpy())


def test_second_order_and_float32():
    rng = np.random.default_rng(0)
    x = rng.permutation(12).reshape(3, 4) * 0.3 + 0.05 * rng.random((3, 4))
    assert gradcheck(lambda t: nb.sort(t, 0, True).values ** 2, [x])
    assert gradgradcheck(lambda t: nb.sort(t, 1).values ** 3, [x])
    assert gradgradcheck(lambda t: nb.topk(t, 2, 0, False).values ** 3, [x])
    t = nb.tensor(x.astype(np.float32), requires_grad=True)
    nb.topk(t, 3).values.sum().backward()
    assert t.grad.dtype == np.float32 and t.grad.numpy().sum() == 9


def test_methods_named_tuples_and_zero_dim():
    x = nb.tensor([[3.0, 1.0, 2.0], [0.0, 5.0, 4.0]])
    v, i = x.sort()
    np.testing.assert_array_equal(v.numpy(), [[1, 2, 3], [0, 4, 5]])
    np.testing.assert_array_equal(i.numpy(), [[1, 2, 0], [0, 2, 1]])
    r = x.sort(dim=0, descending=True)
    assert r.values is r[0] and r.indices is r[1]
    assert "return_types.sort" in repr(r)
    np.testing.assert_array_equal(x.argsort(descending=True).numpy(), [[0, 2, 1], [1, 2, 0]])
    np.testing.assert_array_equal(x.topk(1).indices.numpy(), [[0], [1]])
    assert "return_types.topk" in repr(x.topk(2, largest=False))
    np.testing.assert_array_equal(x.unique().numpy(), [0, 1, 2, 3, 4, 5])
    s = nb.tensor(2.5, requires_grad=True)
    r = nb.sort(s)
    assert r.values.shape == () and r.indices.shape == () and r.indices.item() == 0
    r.values.backward()
    assert s.grad.item() == 1.0
    assert nb.topk(s, 1).values.shape == () and nb.argsort(s).item() == 0


def test_indices_stay_right_when_the_returned_ones_are_changed():
    t = nb.tensor([3.0, 1.0, 2.0], requires_grad=True)
    r = nb.sort(t)
    r.indices[...] = 0  # the node keeps its own indices
    (r.values * nb.tensor([1.0, 2.0, 3.0])).sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), [3.0, 1.0, 2.0])


# -- unique ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@given(shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5),
       inverse=st.booleans(), counts=st.booleans(), kind=KINDS, seed=st.integers(0, 99))
def test_unique_matches_torch(dtype, shape, inverse, counts, kind, seed):
    x = sample(np.random.default_rng(seed), shape, dtype, kind)
    got = nb.unique(x, return_inverse=inverse, return_counts=counts)
    want = torch.unique(torch.from_numpy(x), return_inverse=inverse, return_counts=counts)
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want) == 1 + inverse + counts
    for a, b in zip(got, want):
        assert a.dtype == b.numpy().dtype and a.shape == tuple(b.shape)
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_unique_along_a_dim_and_unsorted():
    x = np.array([[1, 2], [0, 5], [1, 2], [0, 3]])
    got = nb.unique(x, return_inverse=True, return_counts=True, dim=0)
    want = torch.unique(torch.from_numpy(x), return_inverse=True, return_counts=True, dim=0)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    y = np.array([3, 1, 1, 7, 5])
    assert set(nb.unique(y, sorted=False).numpy()) == {1, 3, 5, 7}
    assert not nb.unique(nb.tensor(y * 1.0, requires_grad=True)).requires_grad


# -- bad input ------------------------------------------------------------------------------
def test_bad_input():
    x = np.arange(6.0).reshape(2, 3)
    for fn in (nb.sort, nb.argsort):
        with pytest.raises(IndexError, match=rf"{fn.__name__}: dim=2 is out of range"):
            fn(x, 2)
        with pytest.raises(TypeError, match=rf"{fn.__name__}: dim must be an int"):
            fn(x, 0.5)
        with pytest.raises(TypeError, match=rf"{fn.__name__}: descending must be a bool"):
            fn(x, 0, "yes")
    with pytest.raises(ValueError, match=r"topk: k=4 is out of range for dim 1 of size 3"):
        nb.topk(x, 4)
    with pytest.raises(ValueError, match=r"topk: k=-1 is out of range"):
        nb.topk(x, -1)
    for k in (1.0, True, None):
        with pytest.raises(TypeError, match="topk: k must be an int"):
            nb.topk(x, k)
    with pytest.raises(IndexError, match=r"topk: dim=-3 is out of range"):
        nb.topk(x, 1, -3)
    with pytest.raises(ValueError, match=r"topk: k=2 is out of range for dim 0 of size 1"):
        nb.topk(nb.tensor(1.0), 2)
    with pytest.raises(IndexError, match=r"unique: dim=2 is out of range"):
        nb.unique(x, dim=2)
