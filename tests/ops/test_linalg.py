"""nb.linalg's vector_norm, matrix_norm and norm, and cosine_similarity and
pairwise_distance, against PyTorch (values, gradients, ties, dispatch), gradcheck and
gradgradcheck of the compositions, and bad input."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nbgrad as nb
from nbgrad import linalg
from nbgrad.ops.linalg import cosine_similarity, pairwise_distance
from nbgrad.testing import gradcheck, gradgradcheck
from nbgrad.testing import strategies as nbst

torch = pytest.importorskip("torch")
TL = torch.linalg
F = torch.nn.functional
INF = math.inf


def compare(ours, theirs, arrays, rng, rtol=1e-10, atol=1e-12):
    """Values and gradients (for a random upstream g) of ours and theirs on arrays."""
    ts = [nb.tensor(a, requires_grad=True) for a in arrays]
    tt = [torch.tensor(a, requires_grad=True) for a in arrays]
    y, ty = ours(*ts), theirs(*tt)
    assert y.shape == tuple(ty.shape) and y.dtype == np.dtype(str(ty.dtype)[6:])
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=rtol, atol=atol)
    g = rng.standard_normal(y.shape).astype(y.dtype)
    grads = nb.grad(y, ts, grad_outputs=g)
    want = torch.autograd.grad(ty, tt, torch.tensor(g), allow_unused=True)
    for a, b, x in zip(grads, want, arrays, strict=True):
        b = np.zeros_like(x) if b is None else b.numpy()  # ord 0: PyTorch's graph is cut
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a.numpy(), b, rtol=rtol, atol=atol)


def draw_x(rng, shape, ties):
    x = rng.standard_normal(shape)
    return np.round(x * 2) if ties else x  # ties (and zeros): the shared-gradient cases


# -- vector_norm ----------------------------------------------------------------------------


@given(shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=4),
       data=st.data(), seed=st.integers(0, 99),
       ord=st.sampled_from([2, 1, INF, -INF, 0, 3, 0.5, -1.5]), keepdim=st.booleans())
def test_vector_norm_matches_pytorch(shape, data, seed, ord, keepdim):
    dim = data.draw(nbst.reduction_axes(len(shape)))
    rng = np.random.default_rng(seed)
    # ties and zeros for the orders whose gradient PyTorch defines there; the others away
    ties = ord in (2, 1, INF, -INF, 0) and data.draw(st.booleans())
    compare(lambda t: linalg.vector_norm(t, ord, dim, keepdim),
            lambda t: TL.vector_norm(t, ord, dim, keepdim), [draw_x(rng, shape, ties)], rng)


def test_vector_norm_conventions_at_zero_and_ties():
    z = nb.tensor(np.zeros(3), requires_grad=True)
    linalg.vector_norm(z).backward()
    np.testing.assert_array_equal(z.grad.numpy(), 0)  # the 2-norm's gradient at 0
    x = nb.tensor([1.0, -3.0, 3.0, 2.0], requires_grad=True)
    linalg.vector_norm(x, INF).backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0, -0.5, 0.5, 0])  # shared by the ties


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_vector_norm_dtype_casts_up(dtype):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 4)).astype(dtype)
    compare(lambda t: linalg.vector_norm(t, 3, 1, dtype=nb.float64),
            lambda t: TL.vector_norm(t, 3, 1, dtype=torch.float64), [x], rng, rtol=1e-6)
    assert linalg.vector_norm(x.astype(np.float32)).dtype == np.float32


def test_vector_norm_empty_slices():
    assert linalg.vector_norm(np.zeros((0, 3)), 2, 0).numpy().tolist() == [0, 0, 0]
    assert linalg.vector_norm(np.zeros((0, 3)), INF, 1).shape == (0,)
    for ord in (INF, -INF, -1):
        with pytest.raises(ValueError, match=r"linalg.vector_norm: .* norm over dim 0 .*"
                                             r"\(0, 3\).*empty"):
            linalg.vector_norm(np.zeros((0, 3)), ord, 0)


# -- matrix_norm ----------------------------------------------------------------------------


@st.composite
def matrix_cases(draw):
    shape = draw(hnp.array_shapes(min_dims=2, max_dims=4, min_side=1, max_side=4))
    d0, d1 = draw(st.lists(st.integers(-len(shape), len(shape) - 1), min_size=2,
                           max_size=2, unique_by=lambda d: d % len(shape)))
    return shape, (d0, d1)


@given(case=matrix_cases(), seed=st.integers(0, 99), keepdim=st.booleans(),
       ord=st.sampled_from(["fro", 1, -1, INF, -INF]), ties=st.booleans())
def test_matrix_norm_matches_pytorch(case, seed, keepdim, ord, ties):
    shape, dim = case
    rng = np.random.default_rng(seed)
    compare(lambda t: linalg.matrix_norm(t, ord, dim, keepdim),
            lambda t: TL.matrix_norm(t, ord, dim, keepdim), [draw_x(rng, shape, ties)], rng)


def test_matrix_norm_float32_and_defaults():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    compare(lambda t: linalg.matrix_norm(t), lambda t: TL.matrix_norm(t), [x], rng,
            rtol=1e-5, atol=1e-6)
    compare(lambda t: linalg.matrix_norm(t, 1, dtype=nb.float64),
            lambda t: TL.matrix_norm(t, 1, dtype=torch.float64), [x], rng)


@pytest.mark.parametrize("shape, ord", [((2, 3, 0), 1), ((2, 0, 3), -1), ((2, 0, 3), INF),
                                        ((3, 0), "fro"), ((2, 0, 3), 2), ((3, 0), "nuc")])
def test_matrix_norm_of_empty_matrices(shape, ord):
    want = TL.matrix_norm(torch.zeros(shape), ord).numpy()
    got = linalg.matrix_norm(np.zeros(shape, np.float32), ord).numpy()
    np.testing.assert_array_equal(got, want)
    assert got.shape == want.shape


@pytest.mark.parametrize("ord", ["fro", 1, -1, INF, -INF])
def test_matrix_norm_gradcheck_and_gradgradcheck(ord):
    rng = np.random.default_rng(3)
    x = rng.permutation(24).reshape(2, 3, 4) * 0.1 + 0.05  # no ties, no zeros
    x *= rng.choice([-1.0, 1.0], x.shape)
    assert gradcheck(lambda t: linalg.matrix_norm(t, ord, (0, 2)), [x])
    assert gradgradcheck(lambda t: linalg.matrix_norm(t, ord, (0, 2)) ** 2, [x])


# -- norm (dispatch) ------------------------------------------------------------------------


@pytest.mark.parametrize("shape, ord, dim", [
    ((2, 3, 4), None, None), ((3, 4), None, None), ((3, 4), 1, None), ((3, 4), "fro", None),
    ((3, 4), INF, None), ((4,), 3, None), ((4,), INF, None), ((2, 3, 4), 1, 1),
    ((2, 3, 4), 1, (1, 2)), ((2, 3, 4), None, (1, 2)), ((2, 3, 4), -INF, (2, 0)),
    ((2, 3, 4), 0.5, (-1,)), ((2, 3, 4), "fro", (0, 1)), ((3, 4), None, 0)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_norm_dispatches_as_pytorch(shape, ord, dim, keepdim):
    rng = np.random.default_rng(4)
    compare(lambda t: linalg.norm(t, ord, dim, keepdim),
            lambda t: TL.norm(t, ord, dim, keepdim), [rng.standard_normal(shape)], rng)


def test_linalg_exports():
    assert sorted(linalg.__all__) == ["matrix_norm", "norm", "svd", "svdvals", "vector_norm"]
    assert nb.linalg.vector_norm is linalg.vector_norm


# -- cosine_similarity, pairwise_distance ---------------------------------------------------


@st.composite
def broadcast_pairs(draw, min_dims=0):
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=min_dims,
                                                    max_dims=3, min_side=1, max_side=4))
    return shapes.input_shapes, len(shapes.result_shape)


@given(case=broadcast_pairs(), data=st.data(), seed=st.integers(0, 99),
       eps=st.sampled_from([1e-8, 0.5]), tiny=st.booleans())
def test_cosine_similarity_matches_pytorch(case, data, seed, eps, tiny):
    (s1, s2), ndim = case
    dim = data.draw(st.integers(-max(ndim, 1), max(ndim, 1) - 1))
    rng = np.random.default_rng(seed)
    x1, x2 = rng.standard_normal(s1), rng.standard_normal(s2)
    if tiny:  # norms under eps: the clamp, with the gradient through the unclamped norm
        x1 = x1 * 1e-3
    compare(lambda a, b: cosine_similarity(a, b, dim, eps),
            lambda a, b: F.cosine_similarity(a, b, dim, eps), [x1, x2], rng, rtol=1e-9,
            atol=1e-9)


@given(case=broadcast_pairs(), seed=st.integers(0, 99), keepdim=st.booleans(),
       p=st.sampled_from([2.0, 1.0, 3.0, INF, -INF, 0.0, -1.0]))
def test_pairwise_distance_matches_pytorch(case, seed, keepdim, p):
    (s1, s2), _ = case
    rng = np.random.default_rng(seed)
    compare(lambda a, b: pairwise_distance(a, b, p, keepdim=keepdim),
            lambda a, b: F.pairwise_distance(a, b, p, keepdim=keepdim),
            [rng.standard_normal(s1), rng.standard_normal(s2)], rng)


def test_distances_promote_dtypes_as_pytorch():
    i = np.arange(6).reshape(2, 3)
    f32 = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    got = pairwise_distance(i, i)
    want = F.pairwise_distance(torch.tensor(i), torch.tensor(i))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    got = cosine_similarity(i, f32.astype(np.float64))
    want = F.cosine_similarity(torch.tensor(i), torch.tensor(f32, dtype=torch.float64))
    assert got.dtype == np.float64
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)
    assert cosine_similarity(f32, f32).dtype == np.float32


def test_distances_gradcheck_and_gradgradcheck():
    rng = np.random.default_rng(5)
    x1, x2 = rng.standard_normal((3, 4)), rng.standard_normal((1, 4))
    for fn in (lambda a, b: cosine_similarity(a, b), lambda a, b: cosine_similarity(a, b, 0),
               lambda a, b: pairwise_distance(a, b), lambda a, b: pairwise_distance(a, b, 3.0)):
        assert gradcheck(fn, [x1, x2])
        assert gradgradcheck(fn, [x1, x2])


def test_inputs_are_not_modified():
    rng = np.random.default_rng(6)
    x1, x2 = rng.standard_normal((3, 4)) * 1e-9, rng.standard_normal((3, 4))
    c1, c2 = x1.copy(), x2.copy()
    cosine_similarity(x1, x2)
    pairwise_distance(x1, x2)
    linalg.matrix_norm(x1, 1)
    np.testing.assert_array_equal(x1, c1)
    np.testing.assert_array_equal(x2, c2)


# -- bad input ------------------------------------------------------------------------------

X = np.ones((2, 3))


@pytest.mark.parametrize("call, error, match", [
    (lambda: linalg.vector_norm(X, "fro"), TypeError,
     "linalg.vector_norm: ord must be a real number"),
    (lambda: linalg.vector_norm(np.arange(3)), TypeError,
     r"linalg.vector_norm: expected a float32 or float64 tensor as x, got nbgrad.int64 \(shape"),
    (lambda: linalg.vector_norm(X, dim=2), IndexError,
     r"linalg.vector_norm: dim=2 is out of range .*\(2, 3\)"),
    (lambda: linalg.vector_norm(X, dim=(0, 0)), ValueError,
     "linalg.vector_norm: dim .* repeats an axis"),
    (lambda: linalg.vector_norm(X, dtype=nb.float32), TypeError,
     "linalg.vector_norm: x of dtype nbgrad.float64 cannot be converted to dtype=float32"),
    (lambda: linalg.matrix_norm(X, 3), ValueError, "linalg.matrix_norm: ord=3 is not supported"),
    (lambda: linalg.matrix_norm(X, "abc"), ValueError,
     "linalg.matrix_norm: ord='abc' is not supported"),
    (lambda: linalg.matrix_norm(X, 2.5), ValueError,
     "linalg.matrix_norm: ord=2.5 is not supported"),
    (lambda: linalg.matrix_norm(np.ones((2, 0, 3)), -2), IndexError,
     r"linalg.matrix_norm: the -2 norm takes a min over the singular values, of which A of "
     r"shape \(2, 0, 3\) has none"),
    (lambda: linalg.matrix_norm(np.ones(3)), ValueError,
     r"linalg.matrix_norm: A must have at least 2 dimensions, got shape \(3,\)"),
    (lambda: linalg.matrix_norm(X, dim=(0,)), ValueError,
     r"linalg.matrix_norm: dim must be a 2-tuple, got \(0,\)"),
    (lambda: linalg.matrix_norm(X, dim=1), TypeError, "linalg.matrix_norm: dim must be a tuple"),
    (lambda: linalg.matrix_norm(X, dim=(1, -1)), ValueError,
     r"linalg.matrix_norm: dims must be different, got \(1, -1\) \(shape \(2, 3\)\)"),
    (lambda: linalg.matrix_norm(X, dim=(0, 2)), IndexError,
     r"linalg.matrix_norm: dim=2 is out of range"),
    (lambda: linalg.matrix_norm(np.ones((2, 3, 0)), -1), IndexError,
     r"linalg.matrix_norm: the -1 norm takes a min over dim 2, which is empty"),
    (lambda: linalg.norm(np.ones((2, 3, 4)), 2), ValueError,
     r"linalg.norm: if dim is not given but ord is, A must be 1-D or 2-D, got shape"),
    (lambda: linalg.norm(X, None, (0, 1, 1)), ValueError,
     "linalg.norm: if dim is given it must have 1 or 2 dims"),
    (lambda: linalg.norm(X, 3, (0, 1)), ValueError, "linalg.matrix_norm: ord=3 is not"),
    (lambda: cosine_similarity(np.ones((3, 4)), np.ones((2, 4))), ValueError,
     r"cosine_similarity: x1 of shape \(3, 4\) and x2 of shape \(2, 4\) are not broadcastable"),
    (lambda: cosine_similarity(X, X, dim=2), IndexError,
     r"cosine_similarity: dim=2 is out of range"),
    (lambda: cosine_similarity(np.arange(3), np.arange(3), dim=0), TypeError,
     "cosine_similarity: expected the common dtype of x1 and x2 to be floating point"),
    (lambda: pairwise_distance(np.ones((3, 2)), np.ones((2, 3))), ValueError,
     r"pairwise_distance: x1 of shape \(3, 2\) and x2 of shape \(2, 3\)"),
    (lambda: pairwise_distance(X, X, p="fro"), TypeError,
     "pairwise_distance: p must be a real number"),
    (lambda: pairwise_distance(np.ones((2, 0)), np.ones((2, 0)), p=-1), ValueError,
     r"pairwise_distance: cannot compute the -1 norm over the empty last dim"),
])
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()
