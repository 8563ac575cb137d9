"""gather, scatter_add, index_select, embedding and nn.Embedding: against NumPy
(``np.take_along_axis``, ``np.take``, ``np.add.at``), PyTorch oracle (first and second
order), determinism, bad input."""

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nbgrad as nb
from nbgrad.kernels import indexing as K
from nbgrad.nn.sparse import Embedding
from nbgrad.runtime.jit import PARALLEL_MIN
from nbgrad.testing import gradcheck, gradgradcheck

shapes = hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=4)


def _grads(fn, arrays, g):
    ts = [nb.tensor(a, requires_grad=True) for a in arrays]
    y = fn(*ts)
    return y, [t.data for t in nb.grad(y, ts, grad_outputs=g)]


def _open_grid(index, dim):
    """The NumPy advanced index that reads index's positions along ``dim``: aranges on
    the other dims (what gather and scatter_add address)."""
    grid = list(np.indices(index.shape, sparse=True))
    grid[dim] = index
    return tuple(grid)


@st.composite
def gather_cases(draw, min_side=0):
    """x's shape, a dim, and an index no larger than x except along dim (any length
    there), with repeats."""
    shape = draw(shapes)
    dim = draw(st.integers(-len(shape), len(shape) - 1))
    d = dim % len(shape)
    ishape = tuple(draw(st.integers(min_side, 5)) if e == d else draw(st.integers(min_side, n))
                   for e, n in enumerate(shape))
    index = draw(hnp.arrays(np.int64, ishape, elements=st.integers(0, shape[d] - 1)))
    return shape, dim, index


# -- gather -----------------------------------------------------------------------------------
@given(case=gather_cases(), dtype=st.sampled_from([np.float32, np.float64]))
def test_gather_matches_numpy(case, dtype):
    shape, dim, index = case
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(dtype)
    g = rng.standard_normal(index.shape).astype(dtype)
    y, (gx,) = _grads(lambda t: nb.gather(t, dim, index), [x], g)
    grid = _open_grid(index, dim % x.ndim)
    assert y.dtype == dtype and gx.dtype == dtype
    np.testing.assert_array_equal(y.numpy(), x[grid])
    expected = np.zeros_like(x)
    np.add.at(expected, grid, g)
    assert_same_bits(gx, expected)  # repeats sum in index order, as np.add.at


def test_gather_fixed_example_int32_index_and_method():
    x = nb.tensor(np.arange(12.0).reshape(3, 4), requires_grad=True)
    index = np.array([[0, 0], [3, 1], [2, 2]], np.int32)
    y = x.gather(1, index)
    np.testing.assert_array_equal(y.numpy(), [[0.0, 0.0], [7.0, 5.0], [10.0, 10.0]])
    y.backward(np.ones((3, 2)))
    np.testing.assert_array_equal(x.grad.numpy(), [[2, 0, 0, 0], [0, 1, 0, 1], [0, 0, 2, 0]])
    assert nb.gather(nb.tensor(5.0), 0, np.array([0, 0])).tolist() == [5.0, 5.0]
    assert nb.gather(nb.tensor([5.0, 6.0]), 0, np.array(1)).shape == ()
    assert nb.gather(x, -1, nb.tensor(np.zeros((3, 0), np.int64))).shape == (3, 0)


# -- scatter_add ------------------------------------------------------------------------------
@given(case=gather_cases(), extra=st.integers(0, 2), dtype=st.sampled_from([np.float32,
                                                                             np.float64]))
def test_scatter_add_matches_numpy(case, extra, dtype):
    shape, dim, index = case
    d = dim % len(shape)
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape).astype(dtype)
    src = rng.standard_normal(tuple(n + extra for n in index.shape)).astype(dtype)
    g = rng.standard_normal(shape).astype(dtype)
    out, (gx, gsrc) = _grads(lambda t, s: nb.scatter_add(t, dim, index, s), [x, src], g)
    grid = _open_grid(index, d)
    used = tuple(slice(0, n) for n in index.shape)
    expected = x.copy()
    np.add.at(expected, grid, src[used])
    assert_same_bits(out.numpy(), expected)
    assert_same_bits(gx, g)
    expected_src = np.zeros_like(src)
    expected_src[used] = g[grid]          # src entries beyond index's shape: no gradient
    assert_same_bits(gsrc, expected_src)


def test_scatter_add_torch_example_and_method():
    src = np.arange(1.0, 11.0).reshape(2, 5)
    index = np.array([[0, 1, 2, 0, 0], [2, 0, 0, 1, 2]])
    out = nb.zeros(3, 5, dtype=np.float64).scatter_add(0, index, src)
    np.testing.assert_array_equal(out.numpy(), [[1, 7, 8, 4, 5], [0, 2, 0, 9, 0],
                                                [6, 0, 3, 0, 10]])
    assert nb.scatter_add(nb.tensor(1.0), 0, np.array(0), nb.tensor(2.0)).item() == 3.0


# -- index_select -----------------------------------------------------------------------------
@given(shape=shapes, data=st.data())
def test_index_select_matches_numpy(shape, data):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    n = shape[dim]
    index = data.draw(hnp.arrays(np.int64, st.integers(0, 6), elements=st.integers(0, n - 1)))
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape)
    expected = np.take(x, index, axis=dim)
    g = rng.standard_normal(expected.shape)
    y, (gx,) = _grads(lambda t: nb.index_select(t, dim, index), [x], g)
    np.testing.assert_array_equal(y.numpy(), expected)
    ref = np.zeros_like(x)
    np.add.at(ref, (slice(None),) * (dim % len(shape)) + (index,), g)
    assert_same_bits(gx, ref)


def test_index_select_forms():
    x = nb.tensor(np.arange(12.0).reshape(3, 4))
    assert x.index_select(1, np.array(2)).shape == (3, 1)       # 0-d index: one entry
    assert nb.index_select(x, 0, [2, 2, 0]).tolist()[1] == [8.0, 9.0, 10.0, 11.0]
    assert nb.index_select(x, 1, np.zeros(0, np.int64)).shape == (3, 0)
    assert nb.index_select(nb.tensor(3.0), 0, np.array([0])).shape == ()


# -- embedding --------------------------------------------------------------------------------
@given(index=hnp.arrays(np.int64, hnp.array_shapes(min_dims=0, max_dims=3, max_side=4),
                        elements=st.integers(0, 5)),
       padding_idx=st.none() | st.integers(-6, 5))
def test_embedding_matches_numpy(index, padding_idx):
    rng = np.random.default_rng(3)
    weight = rng.standard_normal((6, 3))
    g = rng.standard_normal(index.shape + (3,))
    y, (gw,) = _grads(lambda w: nb.embedding(index, w, padding_idx), [weight], g)
    np.testing.assert_array_equal(y.numpy(), weight[index])
    ref = np.zeros_like(weight)
    np.add.at(ref, index.reshape(-1), g.reshape(-1, 3))
    if padding_idx is not None:
        ref[padding_idx] = 0.0
    assert_same_bits(gw, ref)


def test_gradcheck_and_gradgradcheck_compositions():
    rng = np.random.default_rng(4)
    index = np.array([[2, 0], [1, 1], [0, 2]])
    rows = np.array([3, 0, 3, 1])

    def f(x, w):
        picked = nb.gather(x, 1, index) * nb.index_select(w, 0, rows[:3])[:, :2]
        return nb.scatter_add(x, 0, index, picked) + nb.embedding(rows[:3], w)[:, 1:]

    assert gradcheck(f, [rng.standard_normal((3, 3)), rng.standard_normal((4, 4))])
    assert gradgradcheck(f, [rng.standard_normal((3, 3)), rng.standard_normal((4, 4))])


def test_index_changed_after_forward():
    """The backward scatters to the positions the forward read: the op keeps its own
    copy of the index."""
    index = np.array([[0, 2, 2]])
    x = nb.tensor(np.ones((1, 3)), requires_grad=True)
    y = nb.gather(x, 1, index)
    index[:] = 10**9
    y.backward(np.ones((1, 3)))
    np.testing.assert_array_equal(x.grad.numpy(), [[1.0, 0.0, 2.0]])


# -- determinism ------------------------------------------------------------------------------
def _scatter_heavy(x, index, src):
    tx, ts = nb.tensor(x, requires_grad=True), nb.tensor(src, requires_grad=True)
    out = nb.scatter_add(tx, 1, index, ts)
    y = nb.gather(out, 1, index)
    gx, gs = nb.grad(y, [tx, ts], grad_outputs=src / 3)
    return out.numpy().copy(), y.numpy().copy(), gx.numpy(), gs.numpy()


def test_one_and_two_threads_give_the_same_bits():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((40, 7, 70)).astype(np.float32)
    index = rng.integers(0, 7, (40, PARALLEL_MIN // 2000 + 1, 70))  # many repeats
    src = rng.standard_normal(index.shape).astype(np.float32)
    for r1, r2 in zip(at_threads(1, _scatter_heavy, x, index, src),
                      at_threads(2, _scatter_heavy, x, index, src)):
        assert_same_bits(r1, r2)


def test_serial_and_parallel_kernels_give_the_same_bits():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 9, 40))
    index = rng.integers(-1, 9, (3, 50, 40))
    src = rng.standard_normal((3, 50, 40))
    assert_same_bits(K.gather_along(x, index, 7.0), K.gather_along.serial(x, index, 7.0))
    out = [x.copy(), x.copy()]
    K.scatter_add_along(out[0], index, src)
    K.scatter_add_along.serial(out[1], index, src)
    assert_same_bits(*out)
    # -1 fills on gather and adds nothing on scatter
    np.testing.assert_array_equal(K.gather_along(x, index, 7.0)[index == -1], 7.0)
    ref = x.copy()
    keep = index >= 0
    grid = np.indices(index.shape)
    np.add.at(ref, (grid[0][keep], index[keep], grid[2][keep]), src[keep])
    assert_same_bits(out[0], ref)


# -- PyTorch oracle ---------------------------------------------------------------------------
def test_torch_oracle_first_and_second_order():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    x_np, w_np = rng.standard_normal((4, 5)), rng.standard_normal((6, 5))
    s_np = rng.standard_normal((3, 5))
    index = rng.integers(0, 4, (3, 5))
    rows = np.array([[5, 0, 5], [2, 5, 1]])
    picked = np.array([2, 2, 0, 5])

    def run(lib, x, w, s):
        if lib is nb:
            a = nb.scatter_add(x, 0, index, s * nb.gather(x, 0, index))
            e = nb.embedding(rows, w, padding_idx=5).sum(axis=0)
            return a * nb.index_select(w, 0, picked) + e.sum()
        ti, tr = torch.tensor(index), torch.tensor(rows)
        a = torch.scatter_add(x, 0, ti, s * torch.gather(x, 0, ti))
        e = torch.nn.functional.embedding(tr, w, padding_idx=5).sum(0)
        return a * torch.index_select(w, 0, torch.tensor(picked)) + e.sum()

    tn = [nb.tensor(v, requires_grad=True) for v in (x_np, w_np, s_np)]
    tt = [torch.tensor(v, requires_grad=True) for v in (x_np, w_np, s_np)]
    out_n, out_t = run(nb, *tn), run(torch, *tt)
    np.testing.assert_allclose(out_n.numpy(), out_t.detach().numpy(), rtol=1e-12)
    g = rng.standard_normal(out_n.shape)
    first_n = nb.grad(out_n, tn, grad_outputs=nb.tensor(g), create_graph=True)
    first_t = torch.autograd.grad(out_t, tt, grad_outputs=torch.tensor(g), create_graph=True)
    for a, b in zip(first_n, first_t):
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-10, atol=1e-12)
    vs = [rng.standard_normal(v.shape) for v in (x_np, w_np, s_np)]
    second_n = nb.grad(sum((a * v).sum() for a, v in zip(first_n, vs)), tn)
    second_t = torch.autograd.grad(sum((a * torch.tensor(v)).sum()
                                       for a, v in zip(first_t, vs)), tt)
    for a, b in zip(second_n, second_t):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-12)


# -- bad input --------------------------------------------------------------------------------
X = nb.tensor(np.zeros((3, 4)), requires_grad=True)


@pytest.mark.parametrize("call, error, match", [
    (lambda: nb.gather(X, 0, np.array([[-1, 0, 0, 0]])), IndexError,
     r"gather: index -1 is out of range for dim 0 of size 3 \(x has shape \(3, 4\)\); "
     r"indices must be in \[0, 3\), negative ones are not accepted"),
    (lambda: nb.gather(X, 1, np.array([[4]])), IndexError,
     r"gather: index 4 is out of range for dim 1 of size 4"),
    (lambda: nb.gather(X, 1, np.array([[1.0]])), TypeError,
     r"gather: index must hold int64 or int32, got float64 \(shape \(1, 1\)\)"),
    (lambda: nb.gather(X, 1, np.array([[1]], np.uint8)), TypeError,
     "gather: index must hold int64 or int32, got uint8"),
    (lambda: nb.gather(X, 1, np.array([1])), ValueError,
     r"gather: index of shape \(1,\) must have as many dims as x of shape \(3, 4\)"),
    (lambda: nb.gather(X, 1, np.zeros((4, 1), np.int64)), ValueError,
     r"gather: index of shape \(4, 1\) is larger than x of shape \(3, 4\) in dim 0"),
    (lambda: nb.gather(X, 2, np.zeros((1, 1), np.int64)), IndexError,
     r"gather: dim=2 is out of range for x of shape \(3, 4\)"),
    (lambda: nb.scatter_add(X, 0, np.array([[3]]), np.ones((1, 1))), IndexError,
     r"scatter_add: index 3 is out of range for dim 0 of size 3"),
    (lambda: nb.scatter_add(X, 0, np.array([[-1]]), np.ones((1, 1))), IndexError,
     r"scatter_add: index -1 is out of range"),
    (lambda: nb.scatter_add(X, 0, np.zeros((3, 1), np.int64), np.ones((2, 5))), ValueError,
     r"scatter_add: index of shape \(3, 1\) must be no larger than src \(shape \(2, 5\)\) "
     r"in every dim and than x \(shape \(3, 4\)\) in every dim but 0"),
    (lambda: nb.scatter_add(X, 0, np.zeros((1, 5), np.int64), np.ones((2, 5))), ValueError,
     r"scatter_add: index of shape \(1, 5\) must be no larger"),
    (lambda: nb.scatter_add(X, 0, np.zeros((1, 1), np.int64), np.ones((1, 1), np.float32)),
     TypeError, r"scatter_add: src \(nbgrad.float32, shape \(1, 1\)\) must have the dtype of "
                r"x \(nbgrad.float64, shape \(3, 4\)\)"),
    (lambda: nb.index_select(X, 0, np.array([-1])), IndexError,
     r"index_select: index -1 is out of range for dim 0 of size 3"),
    (lambda: nb.index_select(X, 1, np.array([[2]])), ValueError,
     r"index_select: index must be 0-d or 1-d, got shape \(1, 1\)"),
    (lambda: nb.index_select(nb.tensor(3.0), 0, np.array([0, 0])), IndexError,
     "index_select: a 0-d x takes exactly one index, got 2"),
    (lambda: nb.embedding(np.array([5]), np.zeros((5, 3))), IndexError,
     r"embedding: index 5 is out of range for dim 0 of size 5 \(weight has shape \(5, 3\)\)"),
    (lambda: nb.embedding(np.array([-1]), np.zeros((5, 3))), IndexError,
     r"embedding: index -1 is out of range"),
    (lambda: nb.embedding(np.array([1.0]), np.zeros((5, 3))), TypeError,
     "embedding: index must hold int64 or int32, got float64"),
    (lambda: nb.embedding(np.array([1]), np.zeros(5)), ValueError,
     r"embedding: weight must be 2-D \[num_embeddings, embedding_dim\], got shape \(5,\)"),
    (lambda: nb.embedding(np.array([1]), np.zeros((5, 3)), padding_idx=5), ValueError,
     r"embedding: padding_idx=5 must be an int in \[-5, 5\) \(num_embeddings is 5\)"),
    (lambda: nb.embedding(np.array([1]), np.zeros((5, 3)), max_norm="1"),
     TypeError, "embedding: max_norm must be a real number, got str"),
    (lambda: nb.gather(nb.zeros(5), 1, np.zeros((2, 0), np.int64)), IndexError,
     r"gather: dim=1 is out of range for x of shape \(5,\)"),
])
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


# -- nn.Embedding -----------------------------------------------------------------------------
def test_embedding_module_init_repr_and_training_step():
    torch = pytest.importorskip("torch")
    nb.manual_seed(0)
    layer = Embedding(1000, 8, padding_idx=-3)
    assert repr(layer) == repr(torch.nn.Embedding(1000, 8, padding_idx=-3))
    assert repr(Embedding(10, 3)) == "Embedding(10, 3)"
    assert layer.padding_idx == 997 and layer.weight.dtype == np.float32
    w = layer.weight.numpy()
    np.testing.assert_array_equal(w[997], 0.0)
    assert abs(w.mean()) < 0.02 and abs(w.std() - 1.0) < 0.02   # N(0, 1)
    assert [name for name, _ in layer.named_parameters()] == ["weight"]
    y = layer(np.array([[997, 3], [3, 0]]))
    assert y.shape == (2, 2, 8)
    y.sum().backward()
    grad = layer.weight.grad.numpy()
    np.testing.assert_array_equal(grad[[997, 3, 0]], [[0.0] * 8, [2.0] * 8, [1.0] * 8])
    assert grad.sum() == 3 * 8


def test_embedding_module_from_pretrained_and_errors():
    table = np.arange(6.0).reshape(3, 2)
    frozen = Embedding.from_pretrained(table)
    assert not frozen.weight.requires_grad and frozen.weight.dtype == np.float64
    np.testing.assert_array_equal(frozen(np.array([2])).numpy(), [[4.0, 5.0]])
    trainable = Embedding.from_pretrained(nb.tensor(table), freeze=False, padding_idx=0)
    assert trainable.weight.requires_grad and trainable.padding_idx == 0
    np.testing.assert_array_equal(trainable.weight.numpy()[0], [0.0, 1.0])  # kept as given
    with pytest.raises(ValueError, match="Embedding: num_embeddings must be a positive int"):
        Embedding(0, 3)
    with pytest.raises(ValueError, match=r"Embedding: padding_idx=3 must be an int in "):
        Embedding(3, 2, padding_idx=3)
    with pytest.raises(TypeError, match="Embedding: dtype must be float32 or float64"):
        Embedding(3, 2, dtype=np.int64)
    with pytest.raises(ValueError, match=r"Embedding.from_pretrained: embeddings must be "
                                         r"2-D, got shape \(3,\)"):
        Embedding.from_pretrained(np.zeros(3))


# -- embedding's max_norm, norm_type, scale_grad_by_freq, sparse; gather of an empty index ---
EMBEDDING_OPTIONS = [dict(max_norm=1.0), dict(max_norm=1.5, norm_type=1.0),
                     dict(max_norm=0.5, norm_type=float("inf")), dict(scale_grad_by_freq=True),
                     dict(sparse=True), dict(scale_grad_by_freq=True, padding_idx=0),
                     dict(sparse=True, padding_idx=0, max_norm=1.0)]


@pytest.mark.parametrize("options", EMBEDDING_OPTIONS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_embedding_options_match_torch(options, dtype):
    """The output, the weight renormalised in place (max_norm) and the gradient (dense
    here; torch's sparse one densified)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    w0 = (rng.standard_normal((6, 4)) * 2).astype(dtype)
    index = np.array([[0, 2, 2], [4, 2, 0], [5, 0, 2]])
    g = rng.standard_normal((3, 3, 4)).astype(dtype)
    w, tw = nb.tensor(w0.copy(), requires_grad=True), torch.tensor(w0.copy(), requires_grad=True)
    y = nb.nn.functional.embedding(nb.tensor(index), w, **options)
    ty = torch.nn.functional.embedding(torch.tensor(index), tw, **options)
    y.backward(nb.tensor(g))
    ty.backward(torch.tensor(g))
    tol = dict(rtol=1e-6, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), **tol)
    np.testing.assert_allclose(w.detach().numpy(), tw.detach().numpy(), **tol)  # renormalised
    grad = tw.grad.to_dense() if tw.grad.is_sparse else tw.grad
    np.testing.assert_allclose(w.grad.numpy(), grad.numpy(), **tol)
    if "max_norm" in options:
        assert not np.array_equal(w.detach().numpy(), w0)
        assert w.detach().numpy()[[1, 3]].tolist() == w0[[1, 3]].tolist()  # not read: kept


def test_embedding_module_passes_the_options_like_torch():
    torch = pytest.importorskip("torch")
    options = dict(padding_idx=1, max_norm=1.0, norm_type=1.0, scale_grad_by_freq=True)
    layer, tlayer = Embedding(5, 3, **options), torch.nn.Embedding(5, 3, **options)
    assert repr(layer) == repr(tlayer)
    with nb.no_grad():
        layer.weight.copy_(nb.tensor(tlayer.weight.detach().numpy()))
    index = np.array([[0, 1, 4], [4, 4, 2]])
    y, ty = layer(nb.tensor(index)), tlayer(torch.tensor(index))
    y.sum().backward()
    ty.sum().backward()
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(layer.weight.grad.numpy(), tlayer.weight.grad.numpy(),
                               rtol=1e-6)
    assert repr(Embedding(5, 3, sparse=True)) == repr(torch.nn.Embedding(5, 3, sparse=True))
    pre = Embedding.from_pretrained(np.ones((3, 2)) * 3, max_norm=1.0)
    np.testing.assert_allclose(pre(np.array([0])).numpy(), [[2 ** -0.5] * 2], rtol=1e-6)


def test_embedding_scale_grad_by_freq_first_and_second_order_like_torch():
    """Not a derivative (the gradient is rescaled on purpose), so no gradcheck: both
    orders are torch's (its double backward gathers without the scale)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    w0, c0, v0 = (rng.standard_normal(s) for s in ((4, 3), (5, 3), (4, 3)))
    index = np.array([1, 1, 3, 0, 1])
    grads = []
    for lib in (nb, torch):
        w = lib.tensor(w0, requires_grad=True)
        y = lib.nn.functional.embedding(lib.tensor(index), w, scale_grad_by_freq=True)
        (first,) = lib.autograd.grad(((y ** 2) * lib.tensor(c0)).sum(), [w], create_graph=True)
        (second,) = lib.autograd.grad((first * lib.tensor(v0)).sum(), [w])
        grads.append((np.asarray(first.detach()), np.asarray(second)))
    for mine, theirs in zip(*grads):
        np.testing.assert_allclose(mine, theirs, rtol=1e-12)


@pytest.mark.parametrize("x_shape, index_shape, dim", [((5,), (2, 0), 0), ((5,), (2, 0, 3), -1),
                                                       ((3, 4), (0,), 1), ((), (0, 2), 0)])
def test_gather_of_an_empty_index_of_another_rank_like_torch(x_shape, index_shape, dim):
    torch = pytest.importorskip("torch")
    x0 = np.random.default_rng(0).standard_normal(x_shape).astype(np.float32)
    index = np.zeros(index_shape, np.int64)
    x = nb.tensor(x0, requires_grad=True)
    y = nb.gather(x, dim, index)
    ty = torch.gather(torch.tensor(x0), dim, torch.tensor(index))
    assert y.shape == tuple(ty.shape) and y.dtype == np.float32
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros(x_shape, np.float32))
