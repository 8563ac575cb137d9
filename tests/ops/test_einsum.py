"""einsum: torch.einsum as the oracle for values, dtypes, shapes and gradients over
PyTorch's equation forms with hypothesis sizes (float32, float64, integers), the
routing of products to matmul, gradcheck and gradgradcheck, bad input."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.ops import einsum as einsum_module
from nbgrad.testing import gradcheck, gradgradcheck

torch = pytest.importorskip("torch")

# equations without an ellipsis: every letter gets one drawn size
FORMS = [
    "ij,jk->ik",        # matrix product
    "ij,jk",            # implicit output
    "bij,bjk->bik",     # batched product
    "bij,bkj->bik",     # batched, b transposed
    "i,j->ij",          # outer product
    "i,j",              # implicit outer
    "i,i->",            # dot product
    "i,i",              # implicit dot
    "i,i->i",           # Hadamard
    "ij,ij->ij",
    "ii",               # trace
    "ii->i",            # diagonal
    "iij->ji",          # diagonal of a batch
    "ij->ji",           # transpose
    "ji",               # implicit transpose (sorted output)
    "ij->",             # sum over all
    "ij->j",            # column sums
    "bn,anm,bm->ba",    # bilinear
    "ij,jk,kl->il",     # chain of three
    "abc,cd,da->b",
    "ij,kl->ijkl",      # outer of matrices
    "ijk,ikj->i",
    "i,jk->kji",
    "Ab,bA",            # upper case sorts first
    "iji->j",
    "ijk,kj->ik",
    ",i->i",            # a 0-d operand
    "->",
]

# ellipsis forms: (equation, number of dims the ellipsis covers per operand)
ELLIPSIS_FORMS = [
    "...ij,...jk->...ik",
    "...ij->...ji",
    "...ii->...i",
    "...ij,...jk",       # implicit: ellipsis dims first
    "i...->...",
    "...ij->ij",         # ellipsis dims left out of the output are summed
    "...i,...i->...",
    "b...,b...->b...",
    "...,...->...",
    "i...j,j...k->...ik",
]


def normal(shape, seed=0, dtype=np.float64):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def terms(equation):
    lhs = equation.replace(" ", "").split("->")[0]
    return lhs.split(",")


def oracle(equation, arrays, as_list=False, seed=0):
    """nb.einsum against torch.einsum: values, dtype, shape, then the gradients of a
    weighted sum of the result for float inputs; inputs unchanged."""
    diff = [a.dtype.kind == "f" for a in arrays]
    ns = [nb.tensor(a, requires_grad=d) for a, d in zip(arrays, diff)]
    ts = [torch.tensor(a, requires_grad=d) for a, d in zip(arrays, diff)]
    out = nb.einsum(equation, ns) if as_list else nb.einsum(equation, *ns)
    want = torch.einsum(equation, *ts)
    assert out.shape == tuple(want.shape), (equation, [a.shape for a in arrays])
    assert out.numpy().dtype == want.detach().numpy().dtype
    tol = 2e-5 if any(a.dtype == np.float32 for a in arrays) else 1e-11
    np.testing.assert_allclose(out.numpy(), want.detach().numpy(), rtol=tol, atol=tol)
    if any(diff):
        w = np.random.default_rng(seed).standard_normal(out.shape).astype(out.numpy().dtype)
        (out * nb.tensor(w)).sum().backward()
        (want * torch.tensor(w)).sum().backward()
        for n, t in zip(ns, ts):
            got = np.zeros(n.shape) if n.grad is None else n.grad.numpy()
            want_g = np.zeros(n.shape) if t.grad is None else t.grad.numpy()
            np.testing.assert_allclose(got, want_g, rtol=tol, atol=tol)
    for a, n in zip(arrays, ns):
        np.testing.assert_array_equal(n.numpy(), a)
    return out


@st.composite
def letter_sizes(draw, equation, min_side=0):
    letters = sorted({c for c in equation if c.isalpha()})
    return {c: draw(st.integers(min_side, 4)) for c in letters}


@given(data=st.data(), dtype=st.sampled_from([np.float32, np.float64]))
@pytest.mark.parametrize("equation", FORMS)
def test_forms_match_torch(equation, data, dtype):
    sizes = data.draw(letter_sizes(equation))
    arrays = [normal(tuple(sizes[c] for c in term), k, dtype)
              for k, term in enumerate(terms(equation))]
    oracle(equation, arrays)


@given(data=st.data(), dtype=st.sampled_from([np.float32, np.float64]))
@pytest.mark.parametrize("equation", ELLIPSIS_FORMS)
def test_ellipsis_forms_broadcast_like_torch(equation, data, dtype):
    sizes = data.draw(letter_sizes(equation))
    batch = data.draw(st.lists(st.integers(0, 3), max_size=3))
    arrays = []
    for k, term in enumerate(terms(equation)):
        # each operand: a trailing part of the batch shape, some dims set to 1
        width = data.draw(st.integers(0, len(batch)))
        own = [1 if data.draw(st.booleans()) else n for n in batch[len(batch) - width:]]
        before, _, after = term.partition("...")
        shape = [sizes[c] for c in before] + own + [sizes[c] for c in after]
        arrays.append(normal(tuple(shape), k, dtype))
    oracle(equation, arrays)


@given(n=st.integers(1, 4), m=st.integers(1, 4))
def test_letters_of_size_one_broadcast(n, m):
    oracle("i,i->i", [normal(1), normal(n, 1)])
    oracle("i,i", [normal(n), normal(1, 1)])
    oracle("ij,jk->ik", [normal((m, 1)), normal((n, 3), 1)])
    oracle("bij,bjk->bik", [normal((1, m, 2)), normal((n, 2, 3), 1)])


def test_spaces_and_operand_list():
    a, b = normal((2, 3)), normal((3, 4), 1)
    oracle(" i j , j k -> i k ", [a, b])
    oracle("ij,jk->ik", [a, b], as_list=True)
    out = nb.einsum("ij,jk->ik", (nb.tensor(a), nb.tensor(b)))
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-12)


def test_integer_operands_match_torch():
    rng = np.random.default_rng(0)
    a, b = rng.integers(-5, 5, (2, 3)), rng.integers(-5, 5, (3, 4))
    oracle("ij,jk->ik", [a, b])
    oracle("ii", [rng.integers(-5, 5, (3, 3))])
    oracle("i,j->ij", [a[0], b[0]])
    # int32 stays int32 though its sums run in int64 (as torch.einsum)
    a32, b32 = nb.tensor(a, dtype=nb.int32), nb.tensor(b, dtype=nb.int32)
    out = nb.einsum("ij,jk->ik", a32, b32)
    want = torch.einsum("ij,jk->ik", torch.tensor(a, dtype=torch.int32),
                        torch.tensor(b, dtype=torch.int32))
    assert out.dtype == nb.int32
    np.testing.assert_array_equal(out.numpy(), want.numpy())


def test_products_are_routed_to_matmul(monkeypatch):
    calls = []

    def counting(a, b):
        calls.append((a.shape, b.shape))
        return nb.matmul(a, b)

    monkeypatch.setattr(einsum_module, "matmul", counting)
    x, y = nb.tensor(normal((5, 2, 3))), nb.tensor(normal((5, 3, 4), 1))
    nb.einsum("bij,bjk->bik", x, y)
    assert calls == [((5, 2, 3), (5, 3, 4))]
    calls.clear()
    nb.einsum("bi,bj->bij", x[:, 0], y[:, 0])  # no contracted letter: a broadcast product
    nb.einsum("ij,ij->ij", x[0], x[1])
    assert calls == []
    nb.einsum("bn,anm,bm->ba", nb.tensor(normal((2, 3))), nb.tensor(normal((4, 3, 5))),
              nb.tensor(normal((2, 5))))
    assert len(calls) == 2


@pytest.mark.parametrize("equation, shapes", [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("bij,bjk->bik", [(2, 2, 3), (2, 3, 2)]),
    ("ii->i", [(3, 3)]),
    ("ii", [(3, 3)]),
    ("bn,anm,bm->ba", [(2, 3), (2, 3, 2), (2, 2)]),
    ("...ij,...jk->...ik", [(2, 1, 2, 3), (3, 3, 2)]),
    ("i,j->ij", [(3,), (2,)]),
    ("ij,ij->i", [(2, 3), (2, 3)]),
])
def test_gradcheck_and_gradgradcheck(equation, shapes):
    inputs = [nb.tensor(normal(s, k), requires_grad=True) for k, s in enumerate(shapes)]

    def fn(*xs):
        return nb.einsum(equation, *xs)

    assert gradcheck(fn, inputs)
    assert gradgradcheck(fn, inputs)


def test_second_derivatives_match_torch():
    a, b = normal((3, 4)), normal((4, 2), 1)
    na, nb_b = nb.tensor(a, requires_grad=True), nb.tensor(b, requires_grad=True)
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    (ga,) = nb.grad((nb.einsum("ij,jk->ik", na, nb_b) ** 2).sum(), [na], create_graph=True)
    (gt,) = torch.autograd.grad((torch.einsum("ij,jk->ik", ta, tb) ** 2).sum(), [ta],
                                create_graph=True)
    np.testing.assert_allclose(ga.numpy(), gt.detach().numpy(), rtol=1e-12)
    ga.sum().backward()
    gt.sum().backward()
    np.testing.assert_allclose(nb_b.grad.numpy(), tb.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("equation, shapes, match", [
    ("ij,jk->ik", [(2, 3)], "input term"),
    ("i", [(3,), (3,)], "input term"),
    ("ij,jk->ik", [(2, 3), (4, 5)], "subscript j has size"),
    ("...i,...i->...", [(2, 2, 3), (4, 3)], "ellipsis dim"),
    ("ij", [(3,)], "has 1 dims"),
    ("i", [(3, 3)], "has 2 dims"),
    ("ij...", [(3,)], "has 1 dims"),
    ("ii", [(3, 4)], "sizes don't match, 3 != 4"),
    ("i->ii", [(3,)], "appears more than once"),
    ("i->j", [(3,)], "does not appear"),
    ("i1", [(3, 3)], "invalid subscript"),
    ("i.j", [(3, 3)], "ellipsis"),
    ("......", [(3, 3)], "ellipsis"),
    ("i->i->i", [(3,)], "'->'"),
    ("i-i", [(3,)], "'->'"),
])
def test_bad_input(equation, shapes, match):
    ts = [nb.tensor(normal(s)) for s in shapes]
    with pytest.raises(ValueError, match=match) as info:
        nb.einsum(equation, *ts)
    assert "einsum" in str(info.value) and repr(equation) in str(info.value)
    with pytest.raises(RuntimeError):  # torch refuses them too
        torch.einsum(equation, *[torch.tensor(normal(s)) for s in shapes])


def test_bad_arguments():
    with pytest.raises(ValueError, match="at least one operand"):
        nb.einsum("i")
    with pytest.raises(TypeError, match="equation"):
        nb.einsum(3, nb.tensor(normal(3)))
