"""Reductions sum mean max min and the broadcast reduction sum_to_shape: against NumPy
over axes/keepdims, tie splitting, threads, PyTorch oracle, bad input."""

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nbgrad as nb
from nbgrad.kernels.broadcast_sum import sum_to_shape
from nbgrad.kernels.reduce import VECTOR_MIN
from nbgrad.testing import gradcheck
from nbgrad.testing import strategies as nbst

OPS = {"sum": np.sum, "mean": np.mean, "amax": np.max, "amin": np.min}


def norm_axes(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    axes = axis if isinstance(axis, tuple) else (axis,)
    return tuple(sorted(a % ndim for a in axes))


def reference_grad(name, x, axis, keepdims, g):
    """Loop-free NumPy reference of d(reduce)/dx times g, ties split evenly for max/min."""
    axes = norm_axes(axis, x.ndim)
    gk = g if keepdims else np.expand_dims(g, axes) if axes else g
    if name == "sum":
        return np.broadcast_to(gk, x.shape).copy()
    if name == "mean":
        n = int(np.prod([x.shape[a] for a in axes]))
        return np.broadcast_to(gk / n, x.shape).copy()
    m = OPS[name](x, axis=axes, keepdims=True)
    mask = x == m
    return mask * gk / mask.sum(axis=axes, keepdims=True)


@st.composite
def reduction_cases(draw):
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=1, max_side=4))
    axis = draw(nbst.reduction_axes(len(shape)))
    return shape, axis, draw(st.booleans())


@pytest.mark.parametrize("name", sorted(OPS))
@given(case=reduction_cases(), seed=st.integers(0, 99), ties=st.booleans())
def test_reductions_match_numpy(name, case, seed, ties):
    shape, axis, keepdims = case
    rng = np.random.default_rng(seed)
    x = np.asarray(rng.standard_normal(shape))
    if ties:
        x = np.round(x)  # many equal values: the tie-splitting gradient
    t = nb.tensor(x, requires_grad=True)
    y = getattr(nb, name)(t, axis, keepdims)
    axes = norm_axes(axis, x.ndim)
    want = OPS[name](x, axis=axes, keepdims=keepdims)
    assert y.shape == np.shape(want) and y.dtype == np.float64
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-12, atol=1e-12)
    g = np.asarray(rng.standard_normal(y.shape))
    (gx,) = nb.grad(y, [t], grad_outputs=g)
    np.testing.assert_allclose(gx.numpy(), reference_grad(name, x, axis, keepdims, g),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["sum", "mean"])
@given(case=reduction_cases(), seed=st.integers(0, 99))
def test_sum_mean_gradcheck(name, case, seed):
    shape, axis, keepdims = case
    x = np.asarray(np.random.default_rng(seed).standard_normal(shape))
    assert gradcheck(lambda t: getattr(nb, name)(t, axis, keepdims) * 1.5, [x])


def test_methods_and_keywords():
    x = nb.tensor(np.arange(24.0).reshape(2, 3, 4), requires_grad=True)
    assert x.sum().item() == 276.0
    np.testing.assert_array_equal(x.sum(axis=(0, -1)).numpy(), [60.0, 92.0, 124.0])
    assert x.mean(axis=1, keepdims=True).shape == (2, 1, 4)
    np.testing.assert_array_equal(x.amax(axis=-1).numpy(), [[3, 7, 11], [15, 19, 23]])
    np.testing.assert_array_equal(x.amin(0, True).numpy(), np.arange(12.0).reshape(1, 3, 4))
    np.testing.assert_array_equal(nb.sum(x, axis=()).numpy(), x.numpy())  # NumPy: no axis


def test_max_min_split_gradient_among_ties():
    x = nb.tensor([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]], requires_grad=True)
    x.amax(axis=1).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 0.5, 0.5], [0.5, 0.5, 0]])
    x.grad = None
    x.max().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 0.5, 0.5], [0, 0, 0]])
    x.grad = None
    (x.amin(axis=0) * nb.tensor([1.0, 2.0, 4.0])).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[1, 0, 0], [0, 2, 4]])
    ones = nb.tensor(np.ones((2, 4)), requires_grad=True)
    ones.min().backward()
    np.testing.assert_array_equal(ones.grad.numpy(), np.full((2, 4), 1 / 8))


SPECIALS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-310]


@pytest.mark.parametrize("name", ["amax", "amin"])
@given(dtype=st.sampled_from([np.float32, np.float64]),
       n=st.integers(VECTOR_MIN - 2, 3 * VECTOR_MIN), seed=st.integers(0, 99),
       placed=st.lists(st.tuples(st.integers(0, 3 * VECTOR_MIN), st.sampled_from(SPECIALS)),
                       max_size=4))
def test_extremum_rows_on_both_sides_of_the_vector_length_match_numpy(name, dtype, n, seed,
                                                                      placed):
    """Rows shorter than VECTOR_MIN are scanned element by element, longer ones by the
    vectorised NaN count and maximum: each like NumPy's max/min (a NaN anywhere gives
    NaN), with NaN, infinities, signed zeros and subnormals placed anywhere in a row."""
    x = np.random.default_rng(seed).standard_normal((3, n)).astype(dtype)
    for position, value in placed:
        x[position % 3, position % n] = value
    np.testing.assert_array_equal(getattr(nb, name)(nb.tensor(x), 1).numpy(),
                                  OPS[name](x, axis=1))


@pytest.mark.parametrize("dtype", [np.int8, np.int64, np.uint8, np.uint32, np.bool_])
def test_integer_extremum_rows_on_both_sides_of_the_vector_length_match_numpy(dtype):
    info = np.iinfo(dtype) if dtype != np.bool_ else None
    for n in [VECTOR_MIN - 1, VECTOR_MIN, 5 * VECTOR_MIN + 3]:
        rng = np.random.default_rng(n)
        x = (rng.random((4, n)) < 0.5 if info is None
             else rng.integers(info.min, info.max, (4, n), dtype=dtype, endpoint=True))
        t = nb.tensor(x)
        for name in ["amax", "amin"]:
            np.testing.assert_array_equal(getattr(nb, name)(t, 1).numpy(), OPS[name](x, 1))


def test_a_small_gradient_spread_over_reduced_axes_is_c_contiguous():
    """The gradient of a sum over leading and trailing axes, a broadcast of one value per
    kept element, is materialised when small so that the next ops take their contiguous
    paths: in C order (NumPy's default copy of such a view keeps the view's odd order)."""
    x = nb.tensor(np.ones((16, 8, 8), np.float32), requires_grad=True)
    (g,) = nb.grad(x.sum((0, 2)), [x], grad_outputs=np.arange(8, dtype=np.float32))
    assert g.numpy().flags.c_contiguous
    np.testing.assert_array_equal(g.numpy(), np.broadcast_to(np.arange(8.0)[:, None],
                                                             (16, 8, 8)))


def test_nan_propagates_through_max():
    x = nb.tensor([[1.0, np.nan, 2.0], [4.0, 5.0, 6.0]])
    y = x.amax(axis=1).numpy()
    assert np.isnan(y[0]) and y[1] == 6.0
    assert np.isnan(x.min().item())


def test_integer_and_bool_inputs():
    i = nb.tensor([[1, 2], [3, 4]])
    assert i.sum().dtype == np.int64 and i.sum().item() == 10
    np.testing.assert_array_equal(i.sum(axis=0).numpy(), [4, 6])
    m = i.mean()
    assert m.dtype == np.float32 and m.item() == 2.5
    assert i.max().item() == 4 and i.amin(axis=1).numpy().tolist() == [1, 3]
    assert nb.tensor([True, False, True]).sum().item() == 2


def test_float32_large_sum_is_accurate():
    x = np.random.default_rng(1).random(3_000_001).astype(np.float32)
    exact = x.astype(np.float64).sum()
    assert abs(nb.tensor(x).sum().item() - exact) / exact < 1e-6
    s = nb.tensor(x[:3_000_000].reshape(3, -1))
    np.testing.assert_allclose(s.sum(axis=1).numpy(),
                               x[:3_000_000].reshape(3, -1).astype(np.float64).sum(axis=1),
                               rtol=1e-6)


@given(shapes=nbst.broadcastable_shapes(2, max_dims=6, max_side=3), seed=st.integers(0, 99),
       strided=st.booleans())
def test_sum_to_shape_matches_numpy(shapes, seed, strided):
    full = np.broadcast_shapes(*shapes)
    rng = np.random.default_rng(seed)
    g = np.asarray(rng.standard_normal(full))
    if strided and g.ndim:
        g = np.asarray(rng.standard_normal(full[:-1] + (2 * full[-1],)))[..., ::2]
    target = shapes[0]
    out = sum_to_shape(g, target)
    lead = g.ndim - len(target)
    want = g.sum(axis=tuple(range(lead))) if lead else g
    axes = tuple(d for d, n in enumerate(target) if n == 1)
    want = np.sum(want, axis=axes, keepdims=True) if axes else want
    assert out.shape == target and out.dtype == g.dtype
    np.testing.assert_allclose(out, np.reshape(want, target), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("full, target", [
    ((16, 8, 8, 8), (1, 8, 1, 1)), ((64, 32, 8, 8), (32, 1, 1)),     # a per-channel scale
    ((64, 16, 64), (16, 1)), ((4, 3, 5, 6), (1, 3, 5, 1)), ((5, 1, 7, 3), (1, 1, 7, 1)),
    ((3, 70_000, 2), (70_000, 1))])                                   # parallel
def test_a_sum_around_middle_axes_is_the_same_at_any_thread_count(full, target):
    """A contiguous [a, b, n] summed over a and n (broadcast_sum._middle_sums: each row
    along its lanes, then the rows): the same bits at 1 and 2 threads, for a sum, a
    product and a quotient, and the float64 sum to rounding (the general plan, on
    strided views of the same values, adds the terms in another order)."""
    from nbgrad.kernels import broadcast_sum as B
    from nbgrad.kernels.strided_apply import COPY, DIV, MUL
    padded = (1,) * (len(full) - len(target)) + target
    assert B._middle_block(full, padded) is not None  # the path tested
    rng = np.random.default_rng(6)
    g, w = (rng.standard_normal(full).astype(np.float32) + 3 for _ in range(2))
    axes = tuple(d for d, (p, f) in enumerate(zip(padded, full)) if p == 1 != f)
    for op, exact in [(COPY, g.astype(np.float64)), (MUL, g.astype(np.float64) * w),
                      (DIV, g.astype(np.float64) / w)]:
        one = at_threads(1, B.reduce_term, op, g, w, target, 0.5)
        assert_same_bits(one, at_threads(2, B.reduce_term, op, g, w, target, 0.5))
        # any order of the m additions (after rounding each term) errs by at most
        # (m + 1) eps times the sum of |terms|
        bound = (g.size // one.size + 1) * np.finfo(np.float32).eps * 0.5 * np.abs(
            exact).sum(axis=axes).reshape(target)
        assert np.all(np.abs(one - 0.5 * exact.sum(axis=axes).reshape(target)) <= bound)
        general = B.reduce_term(op, g.copy(order="F"), w.copy(order="F"), target, 0.5)
        assert np.all(np.abs(one - general) <= 2 * bound)


@pytest.mark.parametrize("full, target", [
    ((256, 64), (64,)), ((8, 3, 5, 7), (1, 5, 7)), ((4, 1, 9), (1, 9)), ((300, 2), (2,)),
    ((4096, 64), (64,)), ((300_000, 2), (2,)), ((5, 40_000), (40_000,)),        # parallel
    ((256, 64), (256, 1)), ((20, 3, 7), (20, 1, 1)), ((3, 5000), (3, 1)),        # lanes
    ((4096, 64), (4096, 1)), ((64, 4096), (64, 1))])
def test_a_sum_of_contiguous_rows_has_the_bits_of_the_general_plan(full, target):
    """A contiguous operand summed over leading axes (a bias gradient) or over trailing
    ones (each row along its lanes) is planned by a short cut; the same values read
    through strided views take the general planning, which must arrive at the same sums
    in the same order, hence the same bits for a sum (COPY). A product or quotient summed
    along the lanes may round differently: LLVM vectorises each kernel's inlined block
    sum on its own (both deterministic)."""
    from nbgrad.kernels import broadcast_sum as B
    from nbgrad.kernels.strided_apply import COPY, DIV, MUL
    rng = np.random.default_rng(5)
    g, w = (rng.standard_normal(full).astype(np.float32) + 3 for _ in range(2))

    def strided(a):
        wide = np.zeros(full[:-1] + (2 * full[-1],), np.float32)
        wide[..., ::2] = a
        return wide[..., ::2]

    assert_same_bits(sum_to_shape(g, target), sum_to_shape(strided(g), target))
    assert_same_bits(B.reduce_term(COPY, g, None, target, 0.5),
                     B.reduce_term(COPY, strided(g), None, target, 0.5))
    for op in (MUL, DIV):
        short = B.reduce_term(op, g, w, target, 0.5)
        general = B.reduce_term(op, strided(g), strided(w), target, 0.5)
        if len(target) == len(full) and target[-1] == 1:  # along the lanes
            np.testing.assert_allclose(short, general, rtol=1e-5)
        else:
            assert_same_bits(short, general)
    padded = (1,) * (len(full) - len(target)) + target
    axes = tuple(d for d, (p, f) in enumerate(zip(padded, full)) if p == 1 != f)
    np.testing.assert_allclose(sum_to_shape(g, target).reshape(-1),
                               g.astype(np.float64).sum(axis=axes).reshape(-1), rtol=1e-4)


def test_sum_to_shape_reads_zero_stride_views():
    g = np.broadcast_to(np.float32(2.0), (300, 500))
    out = sum_to_shape(g, (1, 500))
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, np.full((1, 500), 600.0, np.float32))
    assert sum_to_shape(g, ()).item() == 300_000.0
    empty = sum_to_shape(np.ones((0, 3)), (3,))
    np.testing.assert_array_equal(empty, np.zeros(3))


# -- determinism ----------------------------------------------------------------------------
@pytest.mark.parametrize("shape,axis", [((4096, 1024), None), ((4096, 1024), 0),
                                        ((4096, 1024), 1), ((8, 3, 100_000), (0, 2)),
                                        ((5, 300_000), -1), ((64, 32, 130), (0, 2))])
def test_one_vs_two_threads_bitwise(shape, axis):
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)

    def run():
        out = []
        for name in ["sum", "mean", "amax", "amin"]:
            t = nb.tensor(x, requires_grad=True)
            y = getattr(nb, name)(t, axis)
            g = np.random.default_rng(3).standard_normal(y.shape).astype(np.float32)
            out += [y.numpy(), nb.grad(y, [t], grad_outputs=g)[0].numpy()]
        return out

    for r1, r2 in zip(at_threads(1, run), at_threads(2, run)):
        assert_same_bits(r1, r2)


@pytest.mark.parametrize("shape,target", [((4096, 1024), (4096, 1)), ((4096, 1024), (1024,)),
                                          ((4096, 1024), (4096, 1024)), ((70, 9, 3000), (9, 1))])
def test_parallel_task_runs_equal_serial_bitwise(shape, target, monkeypatch):
    """The parallel reductions hand tasks to threads in runs of several; each task owns
    its outputs, so the result equals the serial kernel's bit for bit."""
    from nbgrad.kernels import broadcast_sum as B
    from nbgrad.kernels.strided_apply import COPY, MUL
    rng = np.random.default_rng(4)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal(shape[-1:]).astype(np.float32)
    par = [B.reduce_term(MUL, x, w, target, 0.5), B.reduce_term(COPY, x, None, target, -1.0)]
    monkeypatch.setattr(B, "PARALLEL_MIN", 1 << 62)  # serial
    ser = [B.reduce_term(MUL, x, w, target, 0.5), B.reduce_term(COPY, x, None, target, -1.0)]
    for p, s in zip(par, ser):
        assert_same_bits(p, s)
    np.testing.assert_allclose(ser[0], sum_to_shape(0.5 * x.astype(np.float64) * w, target),
                               rtol=1e-4, atol=1e-3)


# -- PyTorch oracle -------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(OPS))
@given(case=reduction_cases(), seed=st.integers(0, 99))
def test_against_pytorch(name, case, seed):
    torch = pytest.importorskip("torch")
    shape, axis, keepdims = case
    if axis == () or (axis is None and name in ("sum", "mean")):
        axis = None
    x = np.round(np.asarray(np.random.default_rng(seed).standard_normal(shape)) * 2)
    t = nb.tensor(x, requires_grad=True)
    p = torch.tensor(x, requires_grad=True)
    y = getattr(nb, name)(t, axis, keepdims)
    dims = norm_axes(axis, x.ndim)
    if name in ("amax", "amin"):
        py = getattr(torch, name)(p, dim=dims, keepdim=keepdims)
    elif axis is None:
        py = getattr(torch, name)(p)
        py = py.reshape((1,) * x.ndim) if keepdims else py
    else:
        py = getattr(torch, name)(p, dim=dims, keepdim=keepdims)
    np.testing.assert_allclose(y.numpy(), py.detach().numpy(), rtol=1e-12, atol=1e-12)
    g = np.asarray(np.random.default_rng(seed + 1).standard_normal(y.shape))
    (gx,) = nb.grad(y, [t], grad_outputs=g)
    (pg,) = torch.autograd.grad(py, [p], grad_outputs=torch.tensor(g))
    np.testing.assert_allclose(gx.numpy(), pg.numpy(), rtol=1e-12, atol=1e-12)


# -- bad input ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(OPS))
def test_bad_axis(name):
    x = nb.ones(2, 3)
    fn = getattr(nb, name)
    with pytest.raises(ValueError, match=rf"{name}: axis=2 is out of range .*\(2, 3\)"):
        fn(x, 2)
    with pytest.raises(ValueError, match=rf"{name}: axis=-3 is out of range"):
        fn(x, (0, -3))
    with pytest.raises(ValueError, match=rf"{name}: axis \(1, -1\) repeats .*\(2, 3\)"):
        fn(x, (1, -1))
    with pytest.raises(TypeError, match=rf"{name}: axis must be an int"):
        fn(x, 1.0)


@pytest.mark.parametrize("name", ["amax", "amin"])
def test_empty_extremum_raises(name):
    with pytest.raises(ValueError, match=rf"{name}: cannot .* shape \(0, 3\)"):
        getattr(nb, name)(nb.zeros(0, 3), 0)


def test_empty_sum_and_mean_follow_pytorch():
    x = nb.zeros(0, 3, requires_grad=True)
    np.testing.assert_array_equal(x.sum(axis=0).numpy(), np.zeros(3))
    m = x.mean(axis=0)
    assert m.shape == (3,) and np.isnan(m.numpy()).all()
    m.sum().backward()
    assert x.grad.shape == (0, 3)


# -- PyTorch and NumPy spellings ------------------------------------------------------------
def test_dim_keepdim_and_axis_keepdims_are_both_accepted_but_not_together():
    x = nb.tensor(np.arange(24.0).reshape(2, 3, 4))
    np.testing.assert_array_equal(x.sum(dim=1, keepdim=True).numpy(),
                                  x.sum(axis=1, keepdims=True).numpy())
    np.testing.assert_array_equal(nb.mean(x, dim=(0, 2)).numpy(), np.arange(24.0).reshape(
        2, 3, 4).mean(axis=(0, 2)))
    with pytest.raises(TypeError, match=r"sum: got both dim=1 and axis=0"):
        x.sum(dim=1, axis=0)
    with pytest.raises(TypeError, match=r"amax: got both keepdim=True and keepdims=False"):
        nb.amax(x, 0, keepdim=True, keepdims=False)


@pytest.mark.parametrize("name", ["max", "min"])
def test_max_min_with_dim_return_values_and_indices_like_pytorch(name):
    torch = pytest.importorskip("torch")
    x = np.array([[1.0, 5.0, 5.0, -2.0], [3.0, np.nan, 0.0, 7.0], [4.0, 4.0, 4.0, 4.0]])
    for dim, keepdim in [(1, False), (0, True), (-1, True)]:
        t = nb.tensor(x, requires_grad=True)
        p = torch.tensor(x, requires_grad=True)
        values, indices = getattr(t, name)(dim=dim, keepdim=keepdim)
        pv, pi = getattr(p, name)(dim=dim, keepdim=keepdim)
        np.testing.assert_array_equal(values.numpy(), pv.detach().numpy())
        np.testing.assert_array_equal(indices.numpy(), pi.numpy())
        assert indices.dtype == np.int64
        g = np.arange(1.0, 1.0 + values._data.size).reshape(values.shape)
        values.backward(g)
        pv.backward(torch.tensor(g))
        np.testing.assert_array_equal(t.grad.numpy(), p.grad.numpy())  # all to the index


def test_max_without_dim_reduces_everything():
    x = nb.tensor([[1.0, 9.0], [3.0, 4.0]])
    assert x.max().item() == 9.0 and nb.min(x).item() == 1.0


NAN = np.nan


@pytest.mark.parametrize("create_graph", [False, True])
def test_nan_extremum_gradients_follow_pytorch(create_graph):
    """PyTorch 2.13: amax/amin give a slice whose extremum is NaN a NaN gradient (their
    g / n_ties * [x == m] has no entry equal to NaN); max()/min() without dim share g among
    the NaN entries; max(dim)/min(dim) send it to the first NaN."""
    x = np.array([[1.0, NAN, 3.0, NAN], [2.0, 5.0, 5.0, 1.0]])

    def grad(fn):
        t = nb.tensor(x, requires_grad=True)
        (g,) = nb.grad(fn(t), [t], create_graph=create_graph)
        return g.numpy()

    np.testing.assert_array_equal(grad(lambda t: nb.amax(t, 1).sum()),
                                  [[NAN] * 4, [0, 0.5, 0.5, 0]])
    np.testing.assert_array_equal(grad(lambda t: nb.amin(t, 1).sum()),
                                  [[NAN] * 4, [0, 0, 0, 1]])
    np.testing.assert_array_equal(grad(lambda t: nb.amax(t)), np.full((2, 4), NAN))
    for fn, row_1 in ((nb.max, [0, 1, 0, 0]), (nb.min, [0, 0, 0, 1])):
        np.testing.assert_array_equal(grad(fn), [[0, 0.5, 0, 0.5], [0, 0, 0, 0]])
        np.testing.assert_array_equal(grad(lambda t, f=fn: f(t, 1)[0].sum()),
                                      [[0, 1, 0, 0], row_1])
    assert np.isnan(nb.amax(nb.tensor(x)).item()) and np.isnan(nb.tensor(x).min().item())


def test_max_over_a_dim_of_a_0d_tensor_is_0d_with_keepdim():
    values, indices = nb.tensor(np.array(2.0)).max(0, keepdim=True)
    assert values.shape == () and indices.shape == () and indices.item() == 0


@pytest.mark.parametrize("name", ["max", "min"])
@given(shapes=st.sampled_from([((), ()), ((5,), ()), ((5, 1), (5,)), ((2, 1, 3), (1, 4, 3)),
                               ((0, 1, 3), (0, 4, 3)), ((3, 4), (3, 4))]),
       seed=st.integers(0, 2**16), form=st.sampled_from(["function", "method", "keyword"]))
def test_max_min_of_two_tensors_are_maximum_minimum_like_pytorch(name, shapes, seed, form):
    """torch.max(x, other) / x.max(other): the element-wise maximum, broadcast, with
    torch's gradients (ties share g)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(seed)
    a0, b0 = (rng.integers(-2, 3, s).astype(np.float64) for s in shapes)  # ties
    outs = []
    for lib in (nb, torch):
        a, b = lib.tensor(a0, requires_grad=True), lib.tensor(b0, requires_grad=True)
        if form == "method":
            y = getattr(a, name)(b)
        else:
            y = getattr(lib, name)(a, b) if form == "function" else getattr(lib, name)(a, other=b)
        weights = np.arange(1.0, 1.0 + y.numel()).reshape(tuple(y.shape))
        (y * lib.tensor(weights)).sum().backward()
        outs.append([np.asarray(v.detach()) for v in (y, a.grad, b.grad)])
    for mine, theirs in zip(*outs):
        assert mine.shape == theirs.shape
        np.testing.assert_array_equal(mine, theirs)


def test_max_min_of_two_tensors_refuse_reduction_arguments():
    x, y = nb.ones(2, 3), nb.zeros(3)
    with pytest.raises(TypeError, match=r"max: keepdim/axis/keepdims cannot be given with "
                                        r"other \(x of shape \(2, 3\), other of shape \(3,\)\)"):
        nb.max(x, y, True)
    with pytest.raises(TypeError, match="min: other is given twice"):
        nb.min(x, y, other=y)
    with pytest.raises(TypeError, match="max: other must be a Tensor, got float"):
        nb.max(x, other=2.0)
