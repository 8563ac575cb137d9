"""reshape, transpose, permute, broadcast_to, concat, stack: forward against NumPy,
backward against the NumPy adjoint, gradcheck, PyTorch oracle, bad input."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nbgrad as nb
from nbgrad.testing import gradcheck, gradgradcheck
from nbgrad.testing import strategies as nbst

shapes = hnp.array_shapes(min_dims=0, max_dims=4, min_side=1, max_side=4)


def _grads(fn, arrays, g):
    """Gradients of ``fn(*tensors)`` w.r.t. every input, for upstream gradient ``g``."""
    ts = [nb.tensor(a, requires_grad=True) for a in arrays]
    y = fn(*ts)
    return y, [t.data for t in nb.grad(y, ts, grad_outputs=g)]


def _upstream(rng, shape, dtype=np.float64):
    return rng.standard_normal(shape).astype(dtype)


# -- reshape ---------------------------------------------------------------------------------
@given(shape=shapes, data=st.data())
def test_reshape_matches_numpy(shape, data):
    x = np.arange(np.prod(shape), dtype=np.float64).reshape(shape) - 3.5
    target = data.draw(st.permutations(shape + (1,)).map(tuple))
    if target and data.draw(st.booleans()):
        pos = data.draw(st.integers(0, len(target) - 1))
        target = target[:pos] + (-1,) + target[pos + 1:]
    expected = np.reshape(x, target)
    g = _upstream(np.random.default_rng(0), expected.shape)
    y, (gx,) = _grads(lambda t: nb.reshape(t, target), [x], g)
    np.testing.assert_array_equal(y.numpy(), expected)
    np.testing.assert_array_equal(gx, g.reshape(shape))


def test_reshape_forms_and_method():
    x = nb.tensor(np.arange(24.0).reshape(2, 3, 4))
    for y in (nb.reshape(x, 4, 6), nb.reshape(x, (4, 6)), nb.reshape(x, [4, -1]),
              x.reshape(-1, 6), x.reshape((4, 6))):
        np.testing.assert_array_equal(y.numpy(), np.arange(24.0).reshape(4, 6))
    assert x.flatten().shape == (24,)
    assert nb.reshape(nb.tensor([5.0]), ()).shape == ()


def test_reshape_non_contiguous_input():
    base = np.random.default_rng(1).standard_normal((2, 3, 4))
    x = nb.tensor(base, requires_grad=True)
    y = nb.reshape(nb.permute(x, 2, 0, 1), 4, 6)
    np.testing.assert_array_equal(y.numpy(), base.transpose(2, 0, 1).reshape(4, 6))
    g = _upstream(np.random.default_rng(2), (4, 6))
    y.backward(g)
    np.testing.assert_array_equal(x.grad.numpy(), g.reshape(4, 2, 3).transpose(1, 2, 0))


def test_reshape_keeps_float32():
    x = nb.tensor(np.ones((2, 3), np.float32), requires_grad=True)
    y = x.reshape(3, 2)
    y.backward(np.ones((3, 2), np.float32))
    assert y.dtype == np.float32 and x.grad.dtype == np.float32


@pytest.mark.parametrize("shape, match", [
    ((5, 5), r"reshape: cannot reshape x of shape \(2, 3, 4\) \(size 24\) into \(5, 5\)"),
    ((-1, 5), r"reshape: cannot reshape x of shape \(2, 3, 4\) \(size 24\) into \(-1, 5\)"),
    ((-1, -1), r"reshape: invalid shape \(-1, -1\) for x of shape \(2, 3, 4\)"),
    ((-2, -12), r"reshape: invalid shape"),
])
def test_reshape_errors(shape, match):
    with pytest.raises(ValueError, match=match):
        nb.reshape(nb.zeros(2, 3, 4), shape)


def test_reshape_type_error():
    with pytest.raises(TypeError, match="reshape: shape must be ints"):
        nb.reshape(nb.zeros(2, 3), 2.0, 3)


# -- permute / transpose -------------------------------------------------------------------
@given(shape=shapes, data=st.data())
def test_permute_matches_numpy(shape, data):
    x = np.random.default_rng(0).standard_normal(shape)
    dims = data.draw(st.permutations(range(len(shape))).map(tuple))
    dims = tuple(d - len(shape) if data.draw(st.booleans()) else d for d in dims)
    expected = np.transpose(x, dims)
    g = _upstream(np.random.default_rng(1), expected.shape)
    y, (gx,) = _grads(lambda t: nb.permute(t, dims), [x], g)
    np.testing.assert_array_equal(y.numpy(), expected)
    # the adjoint of a permutation is its inverse: <permute(x), g> == <x, gx>
    np.testing.assert_array_equal(np.transpose(gx, dims), g)


@given(shape=hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=4), data=st.data())
def test_transpose_matches_numpy(shape, data):
    n = len(shape)
    d0, d1 = data.draw(st.integers(-n, n - 1)), data.draw(st.integers(-n, n - 1))
    x = np.random.default_rng(0).standard_normal(shape)
    expected = np.swapaxes(x, d0, d1)
    g = _upstream(np.random.default_rng(1), expected.shape)
    y, (gx,) = _grads(lambda t: nb.transpose(t, d0, d1), [x], g)
    np.testing.assert_array_equal(y.numpy(), expected)
    np.testing.assert_array_equal(gx, np.swapaxes(g, d0, d1))


def test_transpose_defaults_T_and_method():
    x = nb.tensor(np.arange(24.0).reshape(2, 3, 4))
    assert x.transpose().shape == (2, 4, 3)
    assert x.T.shape == (4, 3, 2)
    assert x.permute((1, 0, 2)).shape == (3, 2, 4)
    s = nb.tensor(3.0)
    assert nb.transpose(s, 0, -1).item() == 3.0 and s.T.shape == ()


def test_permute_transpose_errors():
    x = nb.zeros(2, 3, 4)
    with pytest.raises(ValueError, match=r"permute: x of shape \(2, 3, 4\) has 3 dims but"):
        nb.permute(x, 1, 0)
    with pytest.raises(ValueError, match=r"permute: dims=\(1, 1, 0\) repeats a dim"):
        nb.permute(x, 1, -2, 0)
    with pytest.raises(IndexError, match=r"permute: dim=3 is out of range for x of shape"):
        nb.permute(x, 0, 1, 3)
    with pytest.raises(ValueError, match=r"transpose: dim1=-4 is out of range .*\[-3, 2\]"):
        nb.transpose(x, 0, -4)
    with pytest.raises(TypeError, match="transpose: dim0 must be an int"):
        nb.transpose(x, 0.5, 1)


# -- broadcast_to ---------------------------------------------------------------------------
@given(shapes=nbst.broadcastable_shapes(2))
def test_broadcast_to_matches_numpy(shapes):
    shape, other = shapes
    target = np.broadcast_shapes(shape, other)
    x = np.random.default_rng(0).standard_normal(shape)
    g = _upstream(np.random.default_rng(1), target)
    y, (gx,) = _grads(lambda t: nb.broadcast_to(t, target), [x], g)
    np.testing.assert_array_equal(y.numpy(), np.broadcast_to(x, target))
    lead = len(target) - len(shape)
    expected = g.sum(axis=tuple(range(lead)))
    expected = expected.sum(axis=tuple(i for i, n in enumerate(shape) if n == 1),
                            keepdims=True)
    np.testing.assert_allclose(gx, expected, rtol=1e-12, atol=1e-12)


def test_broadcast_to_fixed_example_and_minus_one():
    x = nb.tensor([[1.0, 2.0, 3.0]], requires_grad=True)
    y = nb.broadcast_to(x, (2, 4, -1))
    assert y.shape == (2, 4, 3)
    y.backward(np.ones((2, 4, 3), np.float32))
    np.testing.assert_array_equal(x.grad.numpy(), [[8.0, 8.0, 8.0]])
    assert x.grad.dtype == np.float32
    assert nb.tensor(2.0).broadcast_to(3).shape == (3,)


@pytest.mark.parametrize("xshape, target", [((2, 3), (4, 3, 2)), ((2, 3), (3,)),
                                            ((3,), (-1, 3))])
def test_broadcast_to_errors(xshape, target):
    with pytest.raises(ValueError, match=r"broadcast_to: cannot broadcast x of shape"):
        nb.broadcast_to(nb.zeros(*xshape), target)


# -- concat / stack --------------------------------------------------------------------------
@st.composite
def _concat_case(draw):
    base = list(draw(hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=3)))
    axis = draw(st.integers(-len(base), len(base) - 1))
    sizes = draw(st.lists(st.integers(0, 3), min_size=1, max_size=4))
    shapes = []
    for s in sizes:
        base[axis] = s
        shapes.append(tuple(base))
    return shapes, axis


@given(case=_concat_case())
def test_concat_matches_numpy(case):
    shapes, axis = case
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(s) for s in shapes]
    expected = np.concatenate(xs, axis=axis)
    g = _upstream(rng, expected.shape)
    y, gxs = _grads(lambda *ts: nb.concat(ts, axis=axis), xs, g)
    np.testing.assert_array_equal(y.numpy(), expected)
    splits = np.cumsum([s[axis] for s in shapes])[:-1]
    for gx, ref in zip(gxs, np.split(g, splits, axis=axis)):
        np.testing.assert_array_equal(gx, ref)


@given(shape=shapes, n=st.integers(1, 4), data=st.data())
def test_stack_matches_numpy(shape, n, data):
    axis = data.draw(st.integers(-len(shape) - 1, len(shape)))
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(shape) for _ in range(n)]
    expected = np.stack(xs, axis=axis)
    g = _upstream(rng, expected.shape)
    y, gxs = _grads(lambda *ts: nb.stack(ts, axis=axis), xs, g)
    np.testing.assert_array_equal(y.numpy(), expected)
    for i, gx in enumerate(gxs):
        np.testing.assert_array_equal(gx, np.take(g, i, axis=axis))


def test_concat_stack_dtypes_and_constants():
    a = nb.tensor(np.ones((2, 2), np.float32), requires_grad=True)
    b = nb.tensor(np.full((1, 2), 2.0, np.float64), requires_grad=True)
    c = nb.tensor(np.array([[3, 4]]))                      # int64 constant
    y = nb.concat([a, b, c])
    assert y.dtype == np.float64 and y.shape == (4, 2)
    np.testing.assert_array_equal(y.numpy()[3], [3.0, 4.0])
    g = np.arange(8.0).reshape(4, 2)
    y.backward(g)
    assert a.grad.dtype == np.float32 and b.grad.dtype == np.float64
    np.testing.assert_array_equal(a.grad.numpy(), g[:2])
    np.testing.assert_array_equal(b.grad.numpy(), g[2:3])
    z = nb.concat([a, np.zeros((1, 2), np.int64)])
    assert z.dtype == np.float32                           # int with float32 -> float32
    s = nb.stack([nb.tensor([1, 2]), nb.tensor([3, 4])], axis=1)
    assert s.dtype == np.int64 and s.tolist() == [[1, 3], [2, 4]]


def test_concat_stack_only_differentiate_what_requires_grad():
    a = nb.tensor(np.ones((2, 3)), requires_grad=True)
    b = nb.tensor(np.ones((2, 3)))
    for y in (nb.concat([a, b], axis=1), nb.stack([b, a])):
        a.grad = None
        y.backward(np.ones(y.shape))
        np.testing.assert_array_equal(a.grad.numpy(), np.ones((2, 3)))
        assert b.grad is None


def test_cat_and_stack_take_pytorchs_dim_or_numpys_axis():
    """``torch.cat(ts, dim=1)`` and ``torch.stack(ts, dim=1)`` port unchanged; NumPy's
    ``axis`` works too, and giving both is an error."""
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 3)), rng.standard_normal((2, 4))
    expected = np.concatenate([a, b], axis=1)
    for joined in (nb.cat([a, b], dim=1), nb.cat([a, b], 1), nb.concat([a, b], axis=1),
                   nb.cat([a, b], dim=-1)):
        np.testing.assert_array_equal(joined.numpy(), expected)
    np.testing.assert_array_equal(nb.stack([a, a], dim=1).numpy(), np.stack([a, a], axis=1))
    np.testing.assert_array_equal(nb.stack([a, a], axis=2).numpy(), np.stack([a, a], axis=2))
    with pytest.raises(TypeError, match="concat: got both dim=1 and axis=1"):
        nb.cat([a, b], dim=1, axis=1)
    with pytest.raises(TypeError, match="stack: got both dim=0 and axis=0"):
        nb.stack([a, a], 0, axis=0)
    with pytest.raises(IndexError, match=r"concat: dim=2 is out of range"):
        nb.cat([a, a], dim=2)


def test_concat_stack_errors():
    a, b = nb.zeros(2, 3), nb.zeros(2, 4)
    with pytest.raises(ValueError, match=r"concat: tensor 1 has shape \(2, 4\) but tensor 0 "
                                         r"has shape \(2, 3\); all dims but axis 0 must"):
        nb.concat([a, b])
    with pytest.raises(ValueError, match=r"concat: tensor 1 has shape \(3,\)"):
        nb.concat([a, nb.zeros(3)], axis=1)
    with pytest.raises(IndexError, match=r"concat: axis=2 is out of range for x of shape"):
        nb.concat([a, a], axis=2)
    with pytest.raises(ValueError, match="concat: zero-dimensional"):
        nb.concat([nb.tensor(1.0), nb.tensor(2.0)])
    with pytest.raises(ValueError, match="concat: expected a non-empty list"):
        nb.concat([])
    with pytest.raises(TypeError, match="stack: expected a list or tuple of tensors"):
        nb.stack(a)
    with pytest.raises(ValueError, match=r"stack: tensor 1 has shape \(2, 4\) but tensor 0 "
                                         r"has shape \(2, 3\)"):
        nb.stack([a, b])
    with pytest.raises(ValueError, match=r"stack: axis=3 is out of range"):
        nb.stack([a, a], axis=3)


# -- compositions, gradcheck, oracle -------------------------------------------------------
def test_gradcheck_composition_of_shape_ops():
    rng = np.random.default_rng(3)

    def f(x, y):
        z = nb.concat([nb.permute(x, 2, 0, 1), nb.broadcast_to(y, (1, 2, 3))], axis=0)
        return nb.stack([nb.reshape(z, 3, -1), nb.transpose(nb.reshape(z, 6, 3))], axis=1)

    assert gradcheck(f, [rng.standard_normal((2, 3, 2)), rng.standard_normal((2, 1))])


def test_torch_oracle_shape_ops():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    x_np, y_np = rng.standard_normal((2, 3, 4)), rng.standard_normal((1, 4))
    g_np = rng.standard_normal((2, 8, 3))

    def run(lib, x, y):
        if lib is nb:
            z = nb.concat([nb.transpose(x, 0, 1).reshape(6, 4),
                           nb.broadcast_to(y, (2, 4))], axis=0)
            return nb.stack([z.permute(1, 0), z.permute(1, 0)], axis=0)[:, 1::2, :3]
        z = torch.cat([torch.transpose(x, 0, 1).reshape(6, 4), y.broadcast_to((2, 4))], 0)
        return torch.stack([z.permute(1, 0), z.permute(1, 0)], 0)[:, 1::2, :3]

    xn, yn = nb.tensor(x_np, requires_grad=True), nb.tensor(y_np, requires_grad=True)
    xt = torch.tensor(x_np, requires_grad=True)
    yt = torch.tensor(y_np, requires_grad=True)
    out_n, out_t = run(nb, xn, yn), run(torch, xt, yt)
    np.testing.assert_array_equal(out_n.numpy(), out_t.detach().numpy())
    g = g_np[:, :2, :3]
    out_n.backward(g)
    out_t.backward(torch.tensor(g))
    np.testing.assert_allclose(xn.grad.numpy(), xt.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(yn.grad.numpy(), yt.grad.numpy(), rtol=1e-12)


# -- split / chunk / squeeze / unsqueeze ----------------------------------------------------
def _torch_split_sizes(n, size):
    """torch.split's piece sizes for an int split size (the last piece smaller)."""
    return [min(size, n - s) for s in range(0, n, size)] or [0]


@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=5), data=st.data())
def test_split_matches_numpy(shape, data):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    n = shape[dim]
    if data.draw(st.booleans()):
        arg = data.draw(st.integers(1 if n else 0, 6))
        sizes = _torch_split_sizes(n, arg) if arg else [0]
    else:
        cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=3)))
        sizes = list(np.diff([0, *cuts, n]))
        arg = [int(s) for s in sizes]
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape)
    ts = nb.tensor(x, requires_grad=True)
    pieces = nb.split(ts, arg, dim)
    assert isinstance(pieces, tuple) and [p.shape[dim] for p in pieces] == sizes
    for p, ref in zip(pieces, np.split(x, np.cumsum(sizes)[:-1], axis=dim)):
        np.testing.assert_array_equal(p.numpy(), ref)
    # backward: the pieces' gradients joined; a piece left out contributes zeros
    used = [i for i in range(len(pieces)) if i % 2 == 0]
    gs = [rng.standard_normal(pieces[i].shape) for i in used]
    (gx,) = nb.grad([pieces[i] for i in used], [ts], grad_outputs=gs)
    expected = np.concatenate([gs[used.index(i)] if i in used else np.zeros(p.shape)
                               for i, p in enumerate(pieces)], axis=dim)
    np.testing.assert_array_equal(gx.numpy(), expected)


def test_chunk_sizes_match_torch():
    torch = pytest.importorskip("torch")
    for n in range(0, 13):
        for chunks in range(1, 8):
            ours = [p.shape[0] for p in nb.chunk(nb.zeros(n, 2), chunks)]
            theirs = [p.shape[0] for p in torch.chunk(torch.zeros(n, 2), chunks)]
            assert ours == theirs, (n, chunks)


def test_split_chunk_methods_views_and_gradcheck():
    x_np = np.arange(12.0).reshape(3, 4)
    x = nb.tensor(x_np, requires_grad=True)
    a, b = x.chunk(2, dim=1)
    assert np.shares_memory(a.numpy(), x.numpy())                # views, as in torch
    np.testing.assert_array_equal(b.numpy(), x_np[:, 2:])
    assert [p.shape for p in x.split([1, 2], -2)] == [(1, 4), (2, 4)]
    rng = np.random.default_rng(1)
    assert gradcheck(lambda t: nb.split(t, 2, 1)[1] * nb.chunk(t, 3, 0)[2][:, :2],
                     [rng.standard_normal((3, 4))])
    assert gradgradcheck(lambda t: nb.split(t, [1, 3], 1)[1] ** 2, [rng.standard_normal((2, 4))])


@given(shape=hnp.array_shapes(min_dims=0, max_dims=4, min_side=1, max_side=2), data=st.data())
def test_squeeze_unsqueeze_match_numpy(shape, data):
    x = np.random.default_rng(2).standard_normal(shape)
    t = nb.tensor(x, requires_grad=True)
    span = max(len(shape), 1)
    dims = data.draw(st.none() | st.integers(-span, span - 1)
                     | st.lists(st.integers(0, span - 1), unique=True, max_size=span).map(tuple))
    squeezed = nb.squeeze(t, dims)
    if dims is None:
        expected = np.squeeze(x)
    else:
        listed = (dims,) if isinstance(dims, int) else dims
        ones = tuple(d % span for d in listed if len(shape) and shape[d % span] == 1)
        expected = np.squeeze(x, ones)
    np.testing.assert_array_equal(squeezed.numpy(), expected)
    d = data.draw(st.integers(-len(shape) - 1, len(shape)))
    grown = t.unsqueeze(d)
    np.testing.assert_array_equal(grown.numpy(), np.expand_dims(x, d))
    g = np.random.default_rng(3).standard_normal(squeezed.shape)
    (gx,) = nb.grad(squeezed, [t], grad_outputs=g)
    np.testing.assert_array_equal(gx.numpy(), g.reshape(shape))


def test_squeeze_unsqueeze_match_torch():
    torch = pytest.importorskip("torch")
    y, yt = nb.zeros(1, 3, 1, 2), torch.zeros(1, 3, 1, 2)
    for dims in [0, 1, -2, (0, 2), (0, 1), (), [0, 2]]:
        assert y.squeeze(dims).shape == tuple(yt.squeeze(dims).shape)
    assert y.squeeze().shape == tuple(yt.squeeze().shape)
    for d in [4, -1, -5, 0, 2]:
        assert y.unsqueeze(d).shape == tuple(yt.unsqueeze(d).shape)
    assert nb.squeeze(nb.tensor(1.0), 0).shape == ()
    assert nb.unsqueeze(nb.tensor(1.0), -1).shape == (1,)


def test_split_chunk_squeeze_unsqueeze_errors():
    x = nb.zeros(5, 2)
    with pytest.raises(ValueError, match=r"split: split_size must be positive \(0 only for a dim "
                                         r"of size 0\), got 0 for dim 0 of size 5"):
        nb.split(x, 0)
    with pytest.raises(ValueError, match="split: split_size must be positive"):
        nb.split(x, -1)
    with pytest.raises(ValueError, match=r"split: split sizes \(1, 1\) must be non-negative and "
                                         r"sum to the size 5 of dim 0"):
        nb.split(x, [1, 1])
    with pytest.raises(ValueError, match=r"split: split sizes \(6, -1\)"):
        nb.split(x, [6, -1])
    with pytest.raises(TypeError, match="split: split sizes must be ints"):
        nb.split(x, 2.0)
    with pytest.raises(ValueError, match="split: x must have at least one dim"):
        nb.split(nb.tensor(1.0), 1)
    with pytest.raises(IndexError, match=r"split: dim=2 is out of range for x of shape \(5, 2\)"):
        nb.split(x, 1, dim=2)
    with pytest.raises(ValueError, match="chunk: chunks must be a positive int, got 0"):
        nb.chunk(x, 0)
    with pytest.raises(ValueError, match="chunk: x must have at least one dim"):
        nb.chunk(nb.tensor(1.0), 1)
    with pytest.raises(ValueError, match=r"squeeze: dim \(0, -2\) names a dim more than once"):
        nb.squeeze(x, (0, -2))
    with pytest.raises(IndexError, match=r"squeeze: dim=2 is out of range .*\[-2, 1\]"):
        nb.squeeze(x, 2)
    with pytest.raises(IndexError, match=r"unsqueeze: dim=3 is out of range .*\[-3, 2\]"):
        nb.unsqueeze(x, 3)
    with pytest.raises(TypeError, match=r"unsqueeze: dim must be an int, got \(0, 1\)"):
        nb.unsqueeze(x, (0, 1))


@pytest.mark.parametrize("shapes, dim", [([(0,), (5, 5)], 1), ([(2, 3), (0,), (4, 3)], 0),
                                         ([(0,), (0,)], 1), ([(0,), (2, 3), (0,)], -1)])
def test_cat_skips_1d_empty_tensors_like_torch(shapes, dim):
    """PyTorch's legacy rule: a (0,) tensor is skipped whatever the dim and other shapes;
    it still takes part in the dtype promotion."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(np.float64 if i == 0 else np.float32)
              for i, s in enumerate(shapes)]
    ts = [nb.tensor(a, requires_grad=a.size > 0) for a in arrays]
    y = nb.cat(ts, dim)
    ty = torch.cat([torch.tensor(a) for a in arrays], dim)
    assert y.shape == tuple(ty.shape) and str(y.dtype)[7:] == str(ty.dtype)[6:]
    np.testing.assert_array_equal(y.numpy(), ty.numpy())
    if y.numel():
        y.sum().backward()
        for t in ts:
            if t.requires_grad:
                np.testing.assert_array_equal(t.grad.numpy(), np.ones(t.shape))
