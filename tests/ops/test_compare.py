"""Comparisons, logic and value tests (nbgrad/ops/compare.py), the named-tuple results of
max/min over a dim, and what element-wise == means for code that keeps tensors in lists,
dicts and sets (modules, optimisers, hooks): tensors hash and are found by identity."""

import operator

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nbgrad as nb
from nbgrad import nn
from nbgrad.testing import strategies as nbst

DTYPES = [np.float32, np.float64, np.int32, np.int64, np.bool_]
COMPARISONS = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
               "gt": np.greater, "ge": np.greater_equal}
OPERATORS = {name: getattr(operator, name) for name in COMPARISONS}  # ==, !=, <, ...
BITWISE = {"&": operator.and_, "|": operator.or_, "^": operator.xor}


def _array(data, dtype, shape):
    """Values that tie often: small integers, and NaN, infinities and signed zeros among
    the floats."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return data.draw(hnp.arrays(dtype, shape))
    if dtype.kind == "i":
        return data.draw(nbst.arrays(dtype, shape, min_value=-2, max_value=2))
    values = st.one_of(st.sampled_from([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0]),
                       st.integers(-2, 2).map(float),
                       st.floats(-3, 3, width=32 if dtype == np.float32 else 64))
    return data.draw(hnp.arrays(dtype, shape, elements=values))


def _pytorch_dtype(da, db):
    """PyTorch's promotion of two tensors' dtypes: the wider float if either is a float
    (int64 with float32 is float32), else NumPy's."""
    floats = [d for d in (np.dtype(da), np.dtype(db)) if d.kind == "f"]
    if floats:
        return np.dtype(np.float64) if np.dtype(np.float64) in floats else np.dtype(np.float32)
    return np.result_type(da, db)


def _torch_of(torch, a):
    return torch.from_numpy(np.array(a))  # a copy keeps a 0-d array 0-d


def _torch_pair(torch, a, b):
    """a and b as torch tensors; both in the promoted dtype when one of them is 0-d and the
    other is not: PyTorch lets a dimensioned tensor's dtype win over a 0-d one's of the
    same kind (float32 [n] with float64 [] compares in float32, where a tiny float64
    underflows to 0), nbgrad promotes both alike."""
    ta, tb = _torch_of(torch, a), _torch_of(torch, b)
    if (a.ndim == 0) != (b.ndim == 0):
        dtype = getattr(torch, str(_pytorch_dtype(a.dtype, b.dtype)))
        ta, tb = ta.to(dtype), tb.to(dtype)
    return ta, tb


# -- comparisons ---------------------------------------------------------------------------
@given(nbst.broadcastable_shapes(2), st.sampled_from(DTYPES), st.sampled_from(DTYPES),
       nbst.data())
def test_comparisons_are_element_wise_in_the_promoted_dtype(shapes, da, db, data):
    a, b = _array(data, da, shapes[0]), _array(data, db, shapes[1])
    dtype = _pytorch_dtype(da, db)
    ta, tb = nb.tensor(a), nb.tensor(b)
    for name, ufunc in COMPARISONS.items():
        want = ufunc(a.astype(dtype), b.astype(dtype))
        for got in (getattr(nb, name)(ta, tb), getattr(ta, name)(tb),
                    OPERATORS[name](ta, tb), OPERATORS[name](ta, b), OPERATORS[name](a, tb)):
            assert isinstance(got, nb.Tensor) and got.dtype == np.bool_, name
            np.testing.assert_array_equal(got.numpy(), want, err_msg=name)


@given(nbst.broadcastable_shapes(2), st.sampled_from(DTYPES), st.sampled_from(DTYPES),
       nbst.data())
def test_comparisons_match_pytorch(shapes, da, db, data):
    torch = pytest.importorskip("torch")
    a, b = _array(data, da, shapes[0]), _array(data, db, shapes[1])
    ta, tb = _torch_pair(torch, a, b)
    for name in COMPARISONS:
        want = getattr(torch, name)(ta, tb).numpy()
        np.testing.assert_array_equal(getattr(nb, name)(a, b).numpy(), want, err_msg=name)


@given(st.sampled_from(DTYPES), st.one_of(st.booleans(), st.integers(-3, 3),
                                          st.sampled_from([0.1, 0.5, -0.0, np.nan, np.inf]),
                                          st.floats(-3, 3)), nbst.data())
def test_a_python_number_takes_the_tensors_dtype_as_in_pytorch(dtype, scalar, data):
    torch = pytest.importorskip("torch")
    a = _array(data, dtype, (3,))
    t, ta = nb.tensor(a), _torch_of(torch, a)
    for name, op in OPERATORS.items():
        for got, want in ((op(t, scalar), op(ta, scalar)), (op(scalar, t), op(scalar, ta))):
            np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=f"{name} {scalar}")


def test_int64_with_float32_compares_in_float32_as_pytorch():
    big, near = nb.tensor([2**24 + 1]), nb.tensor([2.0**24])  # 2**24 + 1 is not a float32
    assert (big == near).tolist() == [True] and (big > near).tolist() == [False]
    assert nb.eq(np.array([2**24 + 1]), np.array([2.0**24], np.float32)).tolist() == [True]
    assert (big == near.to(np.float64)).tolist() == [False]


def test_reflected_comparisons_with_arrays_and_numpy_scalars():
    t = nb.tensor([1.0, 2.0, 3.0])
    assert (2 < t).tolist() == [False, False, True]
    assert (np.float64(2.0) >= t).tolist() == [True, True, False]
    assert (np.array([3.0, 2.0, 1.0]) == t).tolist() == [False, True, False]
    assert (np.array([3.0, 2.0, 1.0]) != t).tolist() == [True, False, True]


def test_the_accuracy_idiom_counts_matches():
    pred = nb.tensor([1, 2, 3, 4]).argmax(dim=0) * 0 + nb.tensor([0, 2, 1, 3])
    y = nb.tensor([0, 2, 2, 3])
    assert (pred == y).tolist() == [True, True, False, True]
    assert (pred == y).sum().item() == 3
    assert float(np.mean(np.asarray(pred == y))) == 0.75  # 0.0 when == was identity
    assert nb.mean(pred == y).item() == 0.75


def test_a_comparison_is_outside_the_graph():
    x = nb.tensor([-1.0, 2.0], requires_grad=True)
    for mask in (x > 0, x == 2, nb.isnan(x), nb.logical_not(x), (x > 0) & (x < 3)):
        assert not mask.requires_grad and mask.grad_fn is None and mask.dtype == np.bool_
    y = nb.where(x > 0, x, 0.0).sum()
    y.backward()
    assert x.grad.tolist() == [0.0, 1.0]


def test_comparing_with_none_or_a_string_falls_back_as_in_pytorch():
    t = nb.tensor([1.0, 2.0])
    assert (t == None) is False  # noqa: E711 (the operator is what is tested)
    assert (t != None) is True  # noqa: E711
    assert (t == "a") is False
    assert (t == [1.0, 2.0]) is False  # a list is not compared element-wise (PyTorch)
    for op in (operator.lt, operator.le, operator.gt, operator.ge):
        with pytest.raises(TypeError):
            op(t, None)


def test_a_python_int_beyond_an_integer_tensors_range_compares_exactly():
    t = nb.tensor([0, -5], dtype=np.int32)
    # PyTorch wraps 2**40 to the int32 0, so its == is True there; nbgrad compares values
    assert (t == 2**40).tolist() == [False, False]
    assert (t < 2**40).tolist() == [True, True]
    assert (t > -(2**40)).tolist() == [True, True]
    assert (nb.tensor([True]) != 2**70).tolist() == [True]


@pytest.mark.parametrize("name", ["eq", "ne", "lt", "le", "gt", "ge", "isclose",
                                  "logical_and", "logical_or", "logical_xor", "bitwise_and",
                                  "bitwise_or", "bitwise_xor"])
def test_shapes_that_do_not_broadcast_name_the_op(name):
    a, b = nb.tensor([1, 2, 3]), nb.tensor([1, 2, 3, 4])
    with pytest.raises(ValueError, match=rf"^{name}: shapes \(3,\) and \(4,\) are not "
                                         "broadcastable"):
        getattr(nb, name)(a, b)


def test_operators_that_do_not_broadcast_name_the_op():
    a, b = nb.tensor([1, 2, 3]), nb.tensor([1, 2, 3, 4])
    for op, name in ((operator.eq, "eq"), (operator.lt, "lt"), (operator.and_, "bitwise_and"),
                     (operator.or_, "bitwise_or"), (operator.xor, "bitwise_xor")):
        with pytest.raises(ValueError, match=rf"^{name}: shapes \(3,\) and \(4,\)"):
            op(a, b)


def test_pytorchs_longer_names_are_the_same_functions():
    assert (nb.greater, nb.greater_equal, nb.less, nb.less_equal, nb.not_equal) == \
        (nb.gt, nb.ge, nb.lt, nb.le, nb.ne)
    t = nb.tensor([1.0, 2.0])
    assert t.greater(1.0).tolist() == [False, True]
    assert t.not_equal(1.0).tolist() == [False, True]


# -- equal, isclose, allclose ----------------------------------------------------------------
@given(nbst.broadcastable_shapes(2, max_dims=3), st.sampled_from(DTYPES),
       st.sampled_from([(1e-05, 1e-08), (0.1, 0.0), (0.0, 0.5), (0.0, 0.0), (1.0, 2.0)]),
       st.booleans(), nbst.data())
def test_isclose_and_allclose_match_pytorch(shapes, dtype, tolerances, equal_nan, data):
    torch = pytest.importorskip("torch")
    a, b = _array(data, dtype, shapes[0]), _array(data, dtype, shapes[1])
    if np.dtype(dtype).kind == "f" and data.draw(st.booleans()):
        b = (np.broadcast_to(a, np.broadcast_shapes(a.shape, b.shape)) * (1 + 1e-6)
             ).astype(dtype)  # near misses of the relative tolerance
    rtol, atol = tolerances
    ta, tb = _torch_of(torch, a), _torch_of(torch, b)
    want = torch.isclose(ta, tb, rtol=rtol, atol=atol, equal_nan=equal_nan).numpy()
    got = nb.isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got.numpy(), want)
    assert nb.tensor(a).isclose(b, rtol, atol, equal_nan).tolist() == want.tolist()
    assert nb.allclose(a, b, rtol, atol, equal_nan) is bool(
        torch.allclose(ta, tb, rtol=rtol, atol=atol, equal_nan=equal_nan))


def test_isclose_defaults_are_pytorchs():
    a = nb.tensor([1.0, 1e-9, 100.0, np.inf, np.inf, np.nan], dtype=np.float64)
    b = nb.tensor([1.0 + 9e-6, 0.0, 100.002, np.inf, -np.inf, np.nan], dtype=np.float64)
    assert nb.isclose(a, b).tolist() == [True, True, False, True, False, False]
    assert nb.isclose(a, b, equal_nan=True).tolist()[-1] is True
    assert nb.allclose(a[:4], b[:4]) is False and nb.allclose(a[:2], b[:2]) is True


def test_isclose_of_integers_compares_the_error_in_float32_as_pytorch():
    # the error 2**24 + 1 rounds to the float32 2**24, which the tolerance 2**24 allows
    got = nb.isclose(nb.tensor([2**24 + 1, 2**24 + 3]), nb.tensor([0, 0]), rtol=0.0,
                     atol=2.0**24)
    assert got.tolist() == [True, False]


def test_isclose_promotes_where_pytorch_refuses_different_dtypes():
    a = nb.tensor([0.1], dtype=np.float32)
    b = nb.tensor([0.1], dtype=np.float64)
    assert nb.isclose(a, b).tolist() == [True]
    assert nb.isclose(nb.tensor([3]), nb.tensor([3.5]), atol=0.5).tolist() == [True]


def test_isclose_rejects_negative_tolerances():
    with pytest.raises(ValueError, match="isclose: rtol and atol must be >= 0"):
        nb.isclose(nb.tensor([1.0]), nb.tensor([1.0]), rtol=-1.0)
    with pytest.raises(TypeError, match="isclose: atol must be a real number"):
        nb.isclose(nb.tensor([1.0]), nb.tensor([1.0]), atol="0.1")


@given(st.sampled_from(DTYPES), st.sampled_from(DTYPES), st.sampled_from([(2,), (3,), (1, 2)]),
       st.booleans(), nbst.data())
def test_equal_is_same_shape_and_every_element_equal(da, db, shape_b, same, data):
    torch = pytest.importorskip("torch")
    a = _array(data, da, (2,))
    with np.errstate(invalid="ignore"):  # NaN and inf cast to an integer dtype
        b = a.astype(db) if same and shape_b == (2,) else _array(data, db, shape_b)
    got = nb.equal(nb.tensor(a), nb.tensor(b))
    assert got is bool(torch.equal(_torch_of(torch, a), _torch_of(torch, b)))
    assert nb.tensor(a).equal(b) is got


def test_equal_is_false_for_nan_and_broadcastable_shapes():
    t = nb.tensor([1.0, np.nan])
    assert nb.equal(t, t) is False
    assert nb.equal(nb.tensor([1.0, 1.0]), nb.tensor([1.0])) is False
    assert nb.equal(nb.tensor([[1, 2]]), nb.tensor([[1.0, 2.0]])) is True


# -- value tests ---------------------------------------------------------------------------
@given(st.sampled_from(DTYPES), nbst.data())
def test_isnan_isinf_isfinite_match_numpy_and_pytorch(dtype, data):
    a = _array(data, dtype, data.draw(hnp.array_shapes(min_dims=0, max_dims=3)))
    for name in ("isnan", "isinf", "isfinite"):
        got = getattr(nb, name)(nb.tensor(a))
        assert got.dtype == np.bool_ and got.shape == a.shape
        np.testing.assert_array_equal(got.numpy(), getattr(np, name)(a), err_msg=name)
        assert getattr(nb.tensor(a), name)().tolist() == got.tolist()
    torch = pytest.importorskip("torch")
    for name in ("isnan", "isinf", "isfinite"):
        np.testing.assert_array_equal(getattr(nb, name)(a).numpy(),
                                      getattr(torch, name)(_torch_of(torch, a)), err_msg=name)


# -- logic ---------------------------------------------------------------------------------
@given(nbst.broadcastable_shapes(2), st.sampled_from(DTYPES), st.sampled_from(DTYPES),
       nbst.data())
def test_logical_ops_take_truth_values(shapes, da, db, data):
    a, b = _array(data, da, shapes[0]), _array(data, db, shapes[1])
    for name in ("logical_and", "logical_or", "logical_xor"):
        got = getattr(nb, name)(nb.tensor(a), nb.tensor(b))
        assert got.dtype == np.bool_
        np.testing.assert_array_equal(got.numpy(), getattr(np, name)(a != 0, b != 0))
    np.testing.assert_array_equal(nb.logical_not(nb.tensor(a)).numpy(), a == 0)
    torch = pytest.importorskip("torch")
    ta, tb = _torch_pair(torch, a, b)
    for name in ("logical_and", "logical_or", "logical_xor"):
        np.testing.assert_array_equal(getattr(nb, name)(a, b).numpy(),
                                      getattr(torch, name)(ta, tb).numpy())


INTEGER_DTYPES = [np.int32, np.int64, np.bool_]


@given(nbst.broadcastable_shapes(2), st.sampled_from(INTEGER_DTYPES),
       st.sampled_from(INTEGER_DTYPES), nbst.data())
def test_bitwise_operators_match_pytorch(shapes, da, db, data):
    torch = pytest.importorskip("torch")
    a = data.draw(hnp.arrays(da, shapes[0]))
    b = data.draw(hnp.arrays(db, shapes[1]))
    ta, tb = _torch_pair(torch, a, b)
    na, nb_ = nb.tensor(a, dtype=a.dtype), nb.tensor(b, dtype=b.dtype)  # int32 stays int32
    for name, op in BITWISE.items():
        want = op(ta, tb).numpy()
        assert op(na, nb_).dtype == want.dtype, name
        for got in (op(na, nb_), op(na, b), op(a, nb_)):  # arrays of ints become int64
            np.testing.assert_array_equal(got.numpy(), want, err_msg=name)
    np.testing.assert_array_equal((~na).numpy(), (~_torch_of(torch, a)).numpy())
    assert (~na).dtype == a.dtype


def test_bitwise_ops_with_python_numbers_and_reflected():
    t = nb.tensor([1, 2, 3])
    assert (t & 1).tolist() == [1, 0, 1] and (1 & t).tolist() == [1, 0, 1]
    assert (t | 4).tolist() == [5, 6, 7] and (4 | t).tolist() == [5, 6, 7]
    assert (t ^ 1).tolist() == [0, 3, 2] and (1 ^ t).tolist() == [0, 3, 2]
    m = nb.tensor([True, False])
    assert (m & True).tolist() == [True, False] and (False | m).tolist() == [True, False]
    assert (m ^ True).dtype == np.bool_
    assert (m & 3).tolist() == [1, 0] and (m & 3).dtype == np.int64  # as PyTorch
    assert nb.tensor([5]).bitwise_not().tolist() == [-6] and (~m).tolist() == [False, True]


F, I = [1.0, 2.0], [1, 2]


@pytest.mark.parametrize("op,a,b,name", [
    (operator.and_, F, I, "bitwise_and"), (operator.or_, I, F, "bitwise_or"),
    (operator.xor, F, F, "bitwise_xor"), (operator.and_, I, 0.5, "bitwise_and")])
def test_bitwise_ops_on_floats_are_a_type_error(op, a, b, name):
    b = nb.tensor(b) if isinstance(b, list) else b
    with pytest.raises(TypeError, match=rf"^{name}: only bool and integer tensors"):
        op(nb.tensor(a), b)
    with pytest.raises(TypeError, match=r"^bitwise_not: only bool and integer tensors"):
        ~nb.tensor(F)


# -- any, all ------------------------------------------------------------------------------
@given(st.sampled_from(DTYPES), nbst.data())
def test_any_all_match_numpy_over_dims(dtype, data):
    a = _array(data, dtype, data.draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0,
                                                       max_side=3)))
    dim = data.draw(nbst.reduction_axes(a.ndim))
    keepdim = data.draw(st.booleans())
    reduced = tuple(range(a.ndim)) if dim is None else dim
    for name in ("any", "all"):
        want = getattr(np, name)(a, axis=reduced, keepdims=keepdim)
        for got in (getattr(nb, name)(nb.tensor(a), dim=dim, keepdim=keepdim),
                    getattr(nb.tensor(a), name)(axis=dim, keepdims=keepdim)):
            assert got.dtype == np.bool_ and got.shape == np.shape(want), name
            np.testing.assert_array_equal(got.numpy(), want, err_msg=name)


@pytest.mark.parametrize("shape,dim,keepdim", [((2, 3), None, False), ((2, 3), 1, True),
                                               ((2, 3), (0, 1), False), ((2, 3, 2), -1, False),
                                               ((0, 3), 0, False), ((), 0, True), ((4,), 0,
                                                                                  False)])
def test_any_all_match_pytorch(shape, dim, keepdim):
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(0).integers(0, 2, shape).astype(np.float32)
    if a.ndim:
        a[..., :1] = np.nan  # NaN is true
    ta = torch.from_numpy(a)
    for name in ("any", "all"):
        want = getattr(torch, name)(ta) if dim is None else \
            getattr(torch, name)(ta, dim=dim, keepdim=keepdim)
        got = getattr(nb, name)(a, dim=dim, keepdim=keepdim)
        assert got.shape == tuple(want.shape)
        np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=name)


def test_any_all_argument_errors():
    t = nb.tensor([[1.0, 0.0]])
    with pytest.raises(ValueError, match="any: axis=2 is out of range"):
        t.any(dim=2)
    with pytest.raises(TypeError, match="all: got both dim=0 and axis=0"):
        nb.all(t, dim=0, axis=0)


# -- bool() ------------------------------------------------------------------------------------
def test_bool_of_one_element_is_its_truth_and_otherwise_pytorchs_error():
    assert bool(nb.tensor([2.0])) is True and bool(nb.tensor(0)) is False
    assert bool(nb.tensor([[np.nan]])) is True
    if nb.tensor([1.0, 2.0]).any():
        pass
    with pytest.raises(RuntimeError, match="^Boolean value of Tensor with more than one "
                                           "value is ambiguous$"):
        bool(nb.tensor([1.0, 2.0]))
    with pytest.raises(RuntimeError, match="^Boolean value of Tensor with no values is "
                                           "ambiguous$"):
        bool(nb.tensor([]))
    with pytest.raises(RuntimeError, match="more than one value"):
        if nb.tensor([1.0, 2.0]) == nb.tensor([1.0, 2.0]):
            pass


def test_bool_errors_have_pytorchs_text():
    torch = pytest.importorskip("torch")
    for data in ([1.0, 2.0], []):
        with pytest.raises(RuntimeError) as theirs:
            bool(torch.tensor(data))
        with pytest.raises(RuntimeError) as ours:
            bool(nb.tensor(data))
        assert str(ours.value) == str(theirs.value)


# -- named tuples --------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["max", "min"])
@pytest.mark.parametrize("keepdim", [False, True])
def test_max_min_over_a_dim_are_named_tuples(name, keepdim):
    x = np.array([[3.0, 1.0, 4.0], [1.0, 5.0, 9.0]], np.float32)
    t = nb.tensor(x, requires_grad=True)
    result = getattr(t, name)(dim=1, keepdim=keepdim)
    assert isinstance(result, tuple) and isinstance(result, getattr(nb.return_types, name))
    assert type(result).__name__ == name and result._fields == ("values", "indices")
    values, indices = result
    assert values is result.values is result[0] and indices is result.indices is result[1]
    pick = np.argmax if name == "max" else np.argmin
    want_idx = pick(x, axis=1)
    want_idx = want_idx[:, None] if keepdim else want_idx
    np.testing.assert_array_equal(indices.numpy(), want_idx)
    np.testing.assert_array_equal(values.numpy(), np.take_along_axis(
        x, want_idx if keepdim else want_idx[:, None], axis=1).reshape(want_idx.shape))
    result.values.sum().backward()  # the values still carry the gradient
    grad = np.zeros_like(x)
    grad[np.arange(2), pick(x, axis=1)] = 1.0
    np.testing.assert_array_equal(t.grad.numpy(), grad)
    assert getattr(nb, name)(t, 1, keepdim)._fields == ("values", "indices")
    assert repr(result).startswith(f"nbgrad.return_types.{name}(\nvalues=tensor(")


@pytest.mark.parametrize("name", ["max", "min"])
def test_named_tuples_match_pytorchs(name):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(1).standard_normal((3, 4, 2))
    x[0, 1, 0] = np.nan
    for dim in (0, 1, -1):
        theirs = getattr(torch.from_numpy(x), name)(dim=dim)
        ours = getattr(nb.tensor(x), name)(dim=dim)
        assert type(theirs).__name__ == type(ours).__name__ == name
        np.testing.assert_array_equal(ours.values.numpy(), theirs.values.numpy())
        np.testing.assert_array_equal(ours.indices.numpy(), theirs.indices.numpy())


def test_max_min_without_a_dim_stay_tensors():
    t = nb.tensor([[1.0, 2.0]])
    assert isinstance(t.max(), nb.Tensor) and not isinstance(t.min(), tuple)


# -- identity: hashing, lists, modules, optimisers, hooks -------------------------------------
def test_tensors_hash_by_identity():
    a, b = nb.tensor([1.0, 2.0]), nb.tensor([1.0, 2.0])
    assert nb.Tensor.__hash__ is object.__hash__
    assert hash(a) == object.__hash__(a) and hash(a) != hash(b)
    assert len({a, b}) == 2 and len({a: 1, b: 2}) == 2 and {a: 1}[a] == 1
    assert a in {a} and b not in {a}
    assert (a == b).tolist() == [True, True]


def test_in_a_list_finds_the_object_itself_first():
    a, b = nb.tensor([1.0, 2.0]), nb.tensor([1.0, 2.0])
    assert a in [a] and [b, a].index(b) == 0  # identity is tried before ==
    with pytest.raises(RuntimeError, match="ambiguous"):
        _ = b in [a]  # then ==, element-wise, whose truth is ambiguous (as in PyTorch)
    assert any(x is b for x in [a, b]) and not any(x is b for x in [a])


class _Twins(nn.Module):
    """Two parameters with equal values, and one shared by two layers."""

    def __init__(self):
        super().__init__()
        self.first = nn.Parameter(np.zeros((2, 3), np.float32))
        self.second = nn.Parameter(np.zeros((2, 3), np.float32))
        self.a = nn.Linear(3, 3)
        self.b = nn.Linear(3, 3)
        self.b.weight = self.a.weight

    def forward(self, x):
        return self.b(self.a(x)).sum() + (x @ (self.first + self.second).T).sum()


def test_modules_tell_equal_valued_parameters_apart():
    model = _Twins()
    params = list(model.parameters())
    assert len(params) == 5  # first, second, a.weight, a.bias, b.bias: shared once
    assert params[0] is model.first and params[1] is model.second
    names = [n for n, _ in model.named_parameters()]
    assert names == ["first", "second", "a.weight", "a.bias", "b.bias"]
    assert set(model.state_dict()) == {"first", "second", "a.weight", "a.bias", "b.weight",
                                       "b.bias"}


@pytest.mark.parametrize("optimizer", ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad"])
def test_optimisers_tell_equal_valued_parameters_apart(optimizer):
    model = _Twins()
    options = {"lr": 0.1, "momentum": 0.9} if optimizer == "SGD" else {"lr": 0.1}
    opt = getattr(nb.optim, optimizer)(model.parameters(), **options)
    model(nb.ones(4, 3)).backward()
    model.second.grad = None  # only `first` of the equal-valued pair steps
    opt.step()
    assert not np.array_equal(model.first.numpy(), model.second.numpy())
    assert model.second.numpy().tolist() == [[0.0] * 3] * 2
    state = opt.state  # keyed by the parameters (identity)
    assert model.first in state
    assert (model.second in state) is (optimizer == "Adagrad")  # Adagrad: eager state
    assert opt.state_dict()["param_groups"][0]["params"] == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="lists a parameter twice"):
        getattr(nb.optim, optimizer)([model.first, model.second, model.first], lr=0.1)
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [model.second]})
    opt.add_param_group({"params": [nn.Parameter(np.zeros((2, 3), np.float32))]})
    opt.zero_grad()
    assert all(p.grad is None for g in opt.param_groups for p in g["params"])


def test_gradient_hooks_of_equal_valued_leaves_stay_apart():
    a = nb.zeros(3, requires_grad=True)
    b = nb.zeros(3, requires_grad=True)
    seen = []
    a.register_hook(lambda g: g * 2)
    b.register_post_accumulate_grad_hook(lambda t: seen.append(t))
    (a * 1.0 + b * 3.0).sum().backward()
    assert a.grad.tolist() == [2.0] * 3 and b.grad.tolist() == [3.0] * 3
    assert len(seen) == 1 and seen[0] is b


def test_clip_grad_norm_and_functional_grad_with_equal_valued_tensors():
    a = nb.ones(2, requires_grad=True)
    b = nb.ones(2, requires_grad=True)
    (a * 3.0 + b * 4.0).sum().backward()
    total = nb.nn.utils.clip_grad_norm_([a, b], max_norm=1.0)
    assert float(total) == pytest.approx(np.sqrt(2 * 9 + 2 * 16))
    ga, gb, ga2 = nb.grad((a * 3.0 + b * 4.0).sum(), [a, b, a])
    assert ga.tolist() == [3.0, 3.0] and gb.tolist() == [4.0, 4.0] and ga2.tolist() == [3.0] * 2
