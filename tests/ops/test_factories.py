"""Factories (arange linspace logspace eye empty empty_like full_like from_numpy as_tensor
meshgrid) and the Tensor methods new_* type_as view_as dim contiguous: PyTorch as the
oracle over drawn arguments, memory sharing, gradients, bad input."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.testing import gradcheck, gradgradcheck

torch = pytest.importorskip("torch")

NB_DTYPES = {None: None, "float32": nb.float32, "float64": nb.float64, "int64": nb.int64,
             "int32": nb.int32, "int16": nb.int16}
TORCH_DTYPES = {None: None, "float32": torch.float32, "float64": torch.float64,
                "int64": torch.int64, "int32": torch.int32, "int16": torch.int16}


def assert_like_torch(ours, theirs, rtol=None, exact=False):
    """Same shape and dtype as the torch tensor; integers equal, floats close (PyTorch's
    vectorised CPU loops and its pow may round the last bit differently) or, with
    ``exact``, the same bits."""
    want = theirs.numpy()
    assert ours.shape == tuple(theirs.shape)
    assert ours.dtype == want.dtype, (ours.dtype, want.dtype)
    if want.dtype.kind == "f" and not exact:
        tol = rtol if rtol is not None else (1e-6 if want.dtype == np.float32 else 1e-13)
        np.testing.assert_allclose(ours.numpy(), want, rtol=tol, atol=tol)
    else:
        np.testing.assert_array_equal(ours.numpy(), want)


def both(nb_call, torch_call, exact=False):
    """Run both; they must agree on raising (torch's RuntimeError is nbgrad's ValueError)
    or on the result."""
    try:
        theirs = torch_call()
    except (RuntimeError, ValueError) as e:
        with pytest.raises(ValueError):
            nb_call()
        return str(e)
    ours = nb_call()
    assert_like_torch(ours, theirs, exact=exact)
    return None


numbers = st.one_of(st.integers(-30, 30),
                    st.floats(-30, 30, allow_nan=False).map(lambda v: round(v, 2)))
steps = st.one_of(st.integers(-7, 7),
                  st.sampled_from([0.5, -0.5, 0.3, -0.7, 1.5, -2.25, 0.1, 0.0]))


# -- arange -----------------------------------------------------------------------------------
@given(start=numbers, end=numbers, step=steps, dtype=st.sampled_from(sorted(NB_DTYPES, key=str)))
def test_arange_matches_torch(start, end, step, dtype):
    both(lambda: nb.arange(start, end, step, dtype=NB_DTYPES[dtype]),
         lambda: torch.arange(start, end, step, dtype=TORCH_DTYPES[dtype]))


@given(end=numbers, dtype=st.sampled_from(sorted(NB_DTYPES, key=str)))
def test_arange_one_argument_matches_torch(end, dtype):
    both(lambda: nb.arange(end, dtype=NB_DTYPES[dtype]),
         lambda: torch.arange(end, dtype=TORCH_DTYPES[dtype]))


def test_arange_dtype_inference_and_corners():
    assert nb.arange(5).dtype == nb.int64 and nb.arange(5.0).dtype == nb.float32
    assert nb.arange(0, 5, 0.5).dtype == nb.float32
    assert nb.arange(np.int32(3)).dtype == nb.int64
    assert nb.arange(nb.tensor(3.0)).dtype == nb.float32
    assert nb.arange(3, 3).shape == (0,) and nb.arange(3.0, 3.0, -1).shape == (0,)
    # an integer dtype truncates the bounds first; int64 and the others size differently
    for dt, tdt in ((nb.int64, torch.int64), (nb.int32, torch.int32), (nb.int8, torch.int8),
                    (nb.uint8, torch.uint8)):
        assert_like_torch(nb.arange(0.5, 3.7, dtype=dt), torch.arange(0.5, 3.7, dtype=tdt))
        assert_like_torch(nb.arange(0, 300, 7, dtype=dt), torch.arange(0, 300, 7, dtype=tdt))
    nb.set_default_dtype(nb.float64)
    try:
        assert nb.arange(0, 1, 0.25).dtype == nb.float64
    finally:
        nb.set_default_dtype(nb.float32)
    x = nb.arange(4.0, dtype=nb.float64, requires_grad=True)
    assert x.requires_grad and x.is_leaf


# -- linspace / logspace ------------------------------------------------------------------------
@given(start=numbers, end=numbers, n=st.integers(0, 40),
       dtype=st.sampled_from(sorted(NB_DTYPES, key=str)))
def test_linspace_matches_torch(start, end, n, dtype):
    both(lambda: nb.linspace(start, end, n, dtype=NB_DTYPES[dtype]),
         lambda: torch.linspace(start, end, n, dtype=TORCH_DTYPES[dtype]), exact=True)


@given(start=st.integers(-3, 3) | st.floats(-3, 3).map(lambda v: round(v, 2)),
       end=st.integers(-3, 3) | st.floats(-3, 3).map(lambda v: round(v, 2)),
       n=st.integers(0, 20), base=st.sampled_from([10.0, 2.0, 0.5, 3]),
       dtype=st.sampled_from(["float32", "float64", None]))
def test_logspace_matches_torch(start, end, n, base, dtype):
    ours = nb.logspace(start, end, n, base, dtype=NB_DTYPES[dtype])
    theirs = torch.logspace(start, end, n, base, dtype=TORCH_DTYPES[dtype])
    assert_like_torch(ours, theirs, rtol=1e-5 if ours.dtype == nb.float32 else 1e-12)


def test_logspace_integer_dtype():
    for args in ((0, 3, 4, 2), (0, 6, 7, 2), (1, 3, 3, 10), (0.5, 2.5, 3, 2), (2, 0.5, 1, 10)):
        assert_like_torch(nb.logspace(*args, dtype=nb.int64),
                          torch.logspace(*args, dtype=torch.int64))


# -- eye, empty, full_like ----------------------------------------------------------------------
@given(n=st.integers(0, 6), m=st.none() | st.integers(0, 6),
       dtype=st.sampled_from([None, "float64", "int64", "bool"]))
def test_eye_matches_torch(n, m, dtype):
    nbd = {"bool": nb.bool}.get(dtype, NB_DTYPES.get(dtype))
    tod = {"bool": torch.bool}.get(dtype, TORCH_DTYPES.get(dtype))
    theirs = torch.eye(n, dtype=tod) if m is None else torch.eye(n, m, dtype=tod)
    assert_like_torch(nb.eye(n, m, dtype=nbd), theirs)


@given(shape=st.lists(st.integers(0, 4), max_size=3).map(tuple),
       dtype=st.sampled_from(sorted(NB_DTYPES, key=str)))
def test_empty_full_like_and_new_methods_match_torch(shape, dtype):
    nbd, tod = NB_DTYPES[dtype], TORCH_DTYPES[dtype]
    e = nb.empty(*shape, dtype=nbd)
    assert e.shape == shape and e.dtype == torch.empty(shape, dtype=tod).numpy().dtype
    assert not e.numpy().any()  # zero-filled, never uninitialised memory
    assert nb.empty(shape, dtype=nbd).shape == shape
    src64 = np.arange(float(np.prod(shape))).reshape(shape)
    for base in (src64, src64.astype(np.int32)):
        x, tx = nb.from_numpy(base), torch.from_numpy(base)
        assert_like_torch(nb.empty_like(x, dtype=nbd), torch.zeros_like(tx, dtype=tod))
        assert_like_torch(nb.full_like(x, 2.75, dtype=nbd), torch.full_like(tx, 2.75, dtype=tod))
        assert_like_torch(nb.full_like(x, -3, dtype=nbd), torch.full_like(tx, -3, dtype=tod))
        assert_like_torch(x.new_zeros(shape, dtype=nbd), tx.new_zeros(shape, dtype=tod))
        ones = x.new_ones(*shape, dtype=nbd) if shape else x.new_ones(shape, dtype=nbd)
        assert_like_torch(ones, tx.new_ones(shape, dtype=tod))
        assert_like_torch(x.new_full(shape, 1.5, dtype=nbd), tx.new_full(shape, 1.5, dtype=tod))
        assert_like_torch(x.new_empty(shape, dtype=nbd), tx.new_zeros(shape, dtype=tod))
        data = [[1.5, -2.0], [3.25, 4.0]]
        assert_like_torch(x.new_tensor(data, dtype=nbd), tx.new_tensor(data, dtype=tod))


def test_new_methods_default_to_self_dtype_and_are_leaves():
    x = nb.tensor(np.ones((2, 3)), requires_grad=True)
    for made in (x.new_zeros(2), x.new_ones(2), x.new_full((2,), 7), x.new_empty(2),
                 x.new_tensor([1, 2])):
        assert made.dtype == nb.float64 and made.is_leaf and not made.requires_grad
    assert x.new_zeros(2, requires_grad=True).requires_grad
    copied = x.new_tensor(x)
    assert not copied.requires_grad and not np.shares_memory(copied.numpy(), x.numpy())
    i = nb.tensor([1, 2])
    np.testing.assert_array_equal(i.new_tensor([1.7, -2.7]).numpy(), [1, -2])
    assert x.dim() == 2 and nb.tensor(1.0).dim() == 0


# -- from_numpy / as_tensor ---------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [d.name for d in nb.dtypes.ALL])
def test_from_numpy_shares_memory(dtype):
    a = np.zeros((2, 3), dtype=dtype)
    t = nb.from_numpy(a)
    assert t.dtype == a.dtype and t.shape == (2, 3)
    a[0, 1] = 1
    assert t.numpy()[0, 1] == 1
    t[1, 2] = 1
    assert a[1, 2] == 1
    b = nb.as_tensor(a)
    assert np.shares_memory(b.numpy(), a)
    assert nb.as_tensor(a, dtype=a.dtype).numpy() is a


def test_from_numpy_views_and_as_tensor_copies():
    a = np.arange(12.0).reshape(3, 4)
    view = nb.from_numpy(a.T)
    a[0, 0] = -1
    assert view.numpy()[0, 0] == -1 and view.shape == (4, 3)
    c = nb.as_tensor(a, dtype=nb.float32)
    assert c.dtype == nb.float32 and not np.shares_memory(c.numpy(), a)
    lst = nb.as_tensor([[1, 2], [3, 4]])
    assert lst.dtype == nb.int64
    assert nb.as_tensor([1.5]).dtype == nb.float32
    assert nb.as_tensor(np.float64(2.5)).dtype == nb.float64
    t = nb.tensor([1.0, 2.0], requires_grad=True)
    assert nb.as_tensor(t) is t and nb.as_tensor(t, dtype=nb.float32) is t
    d = nb.as_tensor(t, dtype=nb.float64)  # converted in the graph, as t.to(float64)
    d.sum().backward()
    assert t.grad.dtype == nb.float32 and np.all(t.grad.numpy() == 1)


# -- meshgrid -----------------------------------------------------------------------------------
@given(sizes=st.lists(st.integers(0, 4) | st.none(), min_size=1, max_size=4),
       indexing=st.sampled_from(["ij", "xy"]))
def test_meshgrid_matches_torch(sizes, indexing):
    arrays = [np.array(1.5) if s is None else np.arange(float(s)) + 10 * i
              for i, s in enumerate(sizes)]
    ours = nb.meshgrid(*[nb.tensor(a) for a in arrays], indexing=indexing)
    theirs = torch.meshgrid(*[torch.from_numpy(a) for a in arrays], indexing=indexing)
    assert len(ours) == len(theirs)
    for o, t in zip(ours, theirs):
        assert_like_torch(o, t)
    listed = nb.meshgrid([nb.tensor(a) for a in arrays], indexing=indexing)
    assert all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(listed, ours))


def test_meshgrid_default_is_ij_and_integers():
    a, b = nb.meshgrid(nb.arange(3), nb.arange(2))
    assert a.shape == (3, 2) and a.dtype == nb.int64
    ta, tb = torch.meshgrid(torch.arange(3), torch.arange(2), indexing="ij")
    assert_like_torch(a, ta)
    assert_like_torch(b, tb)


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid_gradients(indexing):
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(3), rng.standard_normal(2), rng.standard_normal(())]
    weights = [rng.standard_normal((2, 3, 1) if indexing == "xy" else (3, 2, 1))
               for _ in xs]

    def fn(*ts):
        grids = nb.meshgrid(*ts, indexing=indexing)
        return sum((g * g * w).sum() for g, w in zip(grids, weights))

    assert gradcheck(fn, xs)
    assert gradgradcheck(fn, xs)
    ours = [nb.tensor(x, requires_grad=True) for x in xs]
    theirs = [torch.tensor(x, requires_grad=True) for x in xs]
    fn(*ours).backward()
    tgrids = torch.meshgrid(*theirs, indexing=indexing)
    sum((g * g * torch.from_numpy(w)).sum() for g, w in zip(tgrids, weights)).backward()
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(o.grad.numpy(), t.grad.numpy(), rtol=1e-12)


# -- type_as / view_as / contiguous -------------------------------------------------------------
def test_type_as_view_as_contiguous_gradcheck():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 4))
    f64, shape = nb.zeros(1, dtype=nb.float64), nb.zeros(2, 6)
    assert gradcheck(lambda t: t.type_as(f64).sin(), [x])
    assert gradcheck(lambda t: t.view_as(shape).sin(), [x])
    assert gradcheck(lambda t: t.T.contiguous().sin(), [x])
    assert gradgradcheck(lambda t: (t.T.contiguous().view_as(shape) ** 3), [x])


def test_type_as_converts_in_the_graph():
    x = nb.tensor(np.arange(3.0), dtype=nb.float32, requires_grad=True)
    y = x.type_as(nb.zeros(1, dtype=nb.float64))
    assert y.dtype == nb.float64 and not y.is_leaf
    (y * y).sum().backward()
    assert x.grad.dtype == nb.float32
    np.testing.assert_allclose(x.grad.numpy(), [0, 2, 4])
    assert x.type_as(x) is x
    assert nb.tensor([1.7, -2.2]).type_as(nb.tensor([1])).dtype == nb.int64


def test_contiguous_returns_self_or_a_row_major_copy():
    x = nb.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    assert x.contiguous() is x
    t = x.T
    c = t.contiguous()
    assert c is not t and c.numpy().flags.c_contiguous
    np.testing.assert_array_equal(c.numpy(), x.numpy().T)
    assert not np.shares_memory(c.numpy(), x.numpy())
    b = nb.broadcast_to(nb.tensor([1, 2]), (3, 2)).contiguous()
    assert b.numpy().flags.c_contiguous and b.dtype == nb.int64


# -- bad input ----------------------------------------------------------------------------------
BAD = [
    (lambda: nb.arange(0, 5, 0), ValueError, "arange: step must be nonzero"),
    (lambda: nb.arange(0, 5, 0.5, dtype=nb.int64), ValueError, "step=0.5 truncates"),
    (lambda: nb.arange(5, 0), ValueError, "arange: upper bound and lower bound"),
    (lambda: nb.arange(0, 5, -1), ValueError, "step=-1"),
    (lambda: nb.arange(0, float("inf")), ValueError, "arange: unsupported range"),
    (lambda: nb.arange(0, 1, float("nan")), ValueError, "arange: step must be finite"),
    (lambda: nb.arange(float("nan"), dtype=nb.int64), ValueError, "arange: unsupported"),
    (lambda: nb.linspace(0, float("inf"), 3, dtype=nb.int64), ValueError,
     "linspace: end=inf cannot be converted to int64"),
    (lambda: nb.arange("a"), TypeError, "arange: end must be a number, got str"),
    (lambda: nb.arange(5, dtype=nb.bool), TypeError, "arange: dtype bool"),
    (lambda: nb.arange(5, dtype="complex128"), TypeError, "arange: dtype"),
    (lambda: nb.arange(5, requires_grad=True), TypeError, "arange: only float32/float64"),
    (lambda: nb.arange(nb.zeros(2)), ValueError, "arange: end must be a number or a one"),
    (lambda: nb.linspace(0, 1, -1), ValueError, "linspace: steps must be greater or equal"),
    (lambda: nb.linspace(0, 1, 2.5), TypeError, "linspace: steps must be an int, got float"),
    (lambda: nb.logspace(0, 1, 3, base="2"), TypeError, "logspace: base must be a number"),
    (lambda: nb.eye(-1), ValueError, "eye: n must be greater or equal to 0, got n=-1"),
    (lambda: nb.eye(2, -3), ValueError, "eye: m must be greater or equal to 0, got m=-3"),
    (lambda: nb.eye(2.0), TypeError, "eye: n must be an int, got float"),
    (lambda: nb.empty(2, -1), ValueError, r"empty: negative dimension -1 in size \(2, -1\)"),
    (lambda: nb.empty(2.0), TypeError, "empty: size must be a tuple of ints"),
    (lambda: nb.empty_like([1, 2]), TypeError, "empty_like: input must be a Tensor, got list"),
    (lambda: nb.full_like(nb.tensor([1]), float("nan")), ValueError, "full_like: fill_value"),
    (lambda: nb.full_like(nb.tensor([1]), "x"), TypeError, "full_like: fill_value must be"),
    (lambda: nb.from_numpy([1, 2]), TypeError, r"from_numpy: expected np.ndarray \(got list"),
    (lambda: nb.from_numpy(np.zeros(2, np.uint16)), TypeError, "from_numpy: .* uint16"),
    (lambda: nb.from_numpy(np.zeros(2, ">f8")), ValueError, "from_numpy: .*byte order"),
    (lambda: nb.from_numpy(np.arange(3)[::-1]), ValueError, "from_numpy: .*negative"),
    (lambda: nb.as_tensor(np.arange(3)[::-1]), ValueError, "as_tensor: .*negative"),
    (lambda: nb.as_tensor([1], dtype="x"), TypeError, "as_tensor: dtype"),
    (lambda: nb.meshgrid(), ValueError, "meshgrid: expects a non-empty"),
    (lambda: nb.meshgrid(nb.zeros(2, 2)), ValueError, r"tensors\[0\] of shape \(2, 2\)"),
    (lambda: nb.meshgrid(nb.zeros(2), [1]), TypeError, r"meshgrid: tensors\[1\] must be"),
    (lambda: nb.meshgrid(nb.zeros(2), nb.arange(2)), TypeError, "meshgrid: .*same dtype"),
    (lambda: nb.meshgrid(nb.zeros(2), indexing="yx"), ValueError, "meshgrid: indexing"),
    (lambda: nb.zeros(2).new_zeros(2, -3), ValueError, "new_zeros: negative dimension -3"),
    (lambda: nb.zeros(2).new_ones((2.5,)), TypeError, "new_ones: size must be"),
    (lambda: nb.zeros(2).new_full((-1,), 1), ValueError, "new_full: negative dimension"),
    (lambda: nb.zeros(2).new_empty(-1), ValueError, "new_empty: negative dimension"),
    (lambda: nb.zeros(2).new_tensor([1], dtype="x"), TypeError, "new_tensor: dtype"),
    (lambda: nb.zeros(2).type_as(np.float64), TypeError, "type_as: other must be a Tensor"),
    (lambda: nb.zeros(2).view_as(nb.zeros(3)), ValueError, r"view_as: x of shape \(2,\)"),
]


@pytest.mark.parametrize(("call", "kind", "message"), BAD, ids=[b[2][:40] for b in BAD])
def test_bad_input(call, kind, message):
    with pytest.raises(kind, match=message):
        call()


def test_inputs_never_modified():
    a = np.arange(6.0).reshape(2, 3)
    before = a.copy()
    x = nb.tensor(a)
    for made in (nb.full_like(x, 3.0), nb.empty_like(x), x.new_tensor(a), x.contiguous(),
                 x.T.contiguous(), nb.as_tensor(a, dtype=nb.float32)):
        made.numpy(force=False)
    nb.meshgrid(nb.from_numpy(a[0]), nb.from_numpy(a[1]))
    np.testing.assert_array_equal(a, before)
