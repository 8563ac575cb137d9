"""where, maximum, minimum: forward and gradients against NumPy over broadcast shapes,
ties and NaN, dtypes, PyTorch oracle (first and second order), threads, bad input."""

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nbgrad as nb
from nbgrad.kernels import indexing as K
from nbgrad.runtime.jit import PARALLEL_MIN
from nbgrad.testing import gradcheck, gradgradcheck
from nbgrad.testing import strategies as nbst


def _sum_to(g, shape):
    """NumPy reference of the broadcast reduction: g summed to ``shape``."""
    g = g.sum(axis=tuple(range(g.ndim - len(shape))))
    return g.sum(axis=tuple(i for i, n in enumerate(shape) if n == 1), keepdims=True)


def _grads(fn, arrays, g):
    ts = [nb.tensor(a, requires_grad=True) for a in arrays]
    y = fn(*ts)
    return y, [t.data for t in nb.grad(y, ts, grad_outputs=g)]


def _assert_same_values(got, want):
    """Equal values, NaN where NaN (its sign bit carries no meaning) and the same sign
    of every zero."""
    np.testing.assert_array_equal(got, want)
    zeros = want == 0
    np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]))


def _reference_shares(name, a, b):
    """The share of g each operand of maximum/minimum gets (PyTorch's convention)."""
    a_wins = a > b if name == "maximum" else a < b
    b_wins = a < b if name == "maximum" else a > b
    tie = a == b
    nan = ~(a_wins | b_wins | tie)
    share_a = np.where(a_wins | nan, 1.0, np.where(tie, 0.5, 0.0))
    share_b = np.where(b_wins | nan, 1.0, np.where(tie, 0.5, 0.0))
    return share_a, share_b


# -- where ------------------------------------------------------------------------------------
@given(shapes=nbst.broadcastable_shapes(3), seed=st.integers(0, 99),
       dtype=st.sampled_from([np.float32, np.float64]))
def test_where_matches_numpy(shapes, seed, dtype):
    sc, sa, sb = shapes
    rng = np.random.default_rng(seed)
    c = np.asarray(rng.random(sc) > 0.5)
    a = np.asarray(rng.standard_normal(sa)).astype(dtype)
    b = np.asarray(rng.standard_normal(sb)).astype(dtype)
    full = np.broadcast_shapes(sc, sa, sb)
    g = rng.standard_normal(full).astype(dtype)
    y, (ga, gb) = _grads(lambda s, t: nb.where(c, s, t), [a, b], g)
    assert y.dtype == dtype and ga.dtype == dtype and gb.dtype == dtype
    np.testing.assert_array_equal(y.numpy(), np.where(c, a, b))
    cf = np.broadcast_to(c, full)
    np.testing.assert_allclose(ga, _sum_to(np.where(cf, g, 0), sa), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(gb, _sum_to(np.where(cf, 0, g), sb), rtol=1e-6, atol=1e-6)


def test_where_scalars_dtypes_and_method():
    c = np.array([True, False, True])
    x = nb.tensor(np.array([1.0, 2.0, 3.0], np.float32), requires_grad=True)
    y = nb.where(c, x, 0.5)
    assert y.dtype == np.float32 and y.tolist() == [1.0, 0.5, 3.0]
    assert nb.where(c, 1.0, 0.0).dtype == np.float32
    assert nb.where(c, nb.tensor([1, 2, 3]), 0).dtype == np.int64
    assert nb.where(c, nb.tensor([1, 2, 3], dtype=np.int32), 2).dtype == np.int32
    z = nb.where(c, x, nb.tensor(np.zeros(3)))  # float32 with float64: float64
    assert z.dtype == np.float64
    z.backward(np.ones(3))
    assert x.grad.dtype == np.float32 and x.grad.tolist() == [1.0, 0.0, 1.0]
    # torch's method order: x.where(condition, other) == where(condition, x, other)
    np.testing.assert_array_equal(x.where(c, -1.0).numpy(), [1.0, -1.0, 3.0])
    np.testing.assert_array_equal(nb.where(nb.tensor(c), x, x).numpy(), x.numpy())


def test_where_gradient_is_an_exact_zero_for_the_other_operand():
    a = nb.tensor([1.0, 2.0], requires_grad=True)
    b = nb.tensor([3.0, 4.0], requires_grad=True)
    nb.where(np.array([True, False]), a, b).backward(np.array([np.nan, np.inf], np.float32))
    np.testing.assert_array_equal(a.grad.numpy(), [np.nan, 0.0])
    np.testing.assert_array_equal(b.grad.numpy(), [0.0, np.inf])


def test_where_errors():
    x = nb.zeros(2, 3)
    with pytest.raises(TypeError, match=r"where: condition must be a bool tensor, got float32 "
                                        r"\(shape \(2, 3\)\)"):
        nb.where(x, x, x)
    with pytest.raises(TypeError, match="where: condition must be a bool tensor, got uint8"):
        nb.where(np.ones(3, np.uint8), 1.0, 0.0)
    with pytest.raises(ValueError, match=r"where: shapes \(2, 3\) and \(4,\) are not "
                                         "broadcastable"):
        nb.where(np.ones((2, 3), bool), x, nb.zeros(4))


# -- maximum / minimum ------------------------------------------------------------------------
# small integers make ties common; NaN and signed zeros exercise the conventions
_values = st.sampled_from([-1.0, 0.0, -0.0, 1.0, 2.0, np.nan, np.inf, -np.inf])


@pytest.mark.parametrize("name", ["maximum", "minimum"])
@given(shapes=nbst.broadcastable_shapes(2), data=st.data(),
       dtype=st.sampled_from([np.float32, np.float64]))
def test_extrema_match_numpy(name, shapes, data, dtype):
    sa, sb = shapes
    a = data.draw(hnp.arrays(dtype, sa, elements=_values))
    b = data.draw(hnp.arrays(dtype, sb, elements=_values))
    full = np.broadcast_shapes(sa, sb)
    g = np.random.default_rng(0).standard_normal(full).astype(dtype)
    y, (ga, gb) = _grads(getattr(nb, name), [a, b], g)
    np.testing.assert_array_equal(y.numpy(), getattr(np, name)(a, b))
    share_a, share_b = _reference_shares(name, *np.broadcast_arrays(a, b))
    np.testing.assert_allclose(ga, _sum_to(g * share_a, sa), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(gb, _sum_to(g * share_b, sb), rtol=1e-6, atol=1e-6)


def test_maximum_fixed_example_ties_nan_and_signed_zeros():
    a = nb.tensor([1.0, 2.0, np.nan, 3.0, np.nan, -0.0, 0.0], requires_grad=True)
    b = nb.tensor([1.0, 3.0, 1.0, np.nan, np.nan, 0.0, -0.0], requires_grad=True)
    y = nb.maximum(a, b)
    np.testing.assert_array_equal(y.numpy(), [1.0, 3.0, np.nan, np.nan, np.nan, 0.0, 0.0])
    assert np.signbit(y.numpy()[5]) and not np.signbit(y.numpy()[6])  # a tie keeps a
    y.backward(np.ones(7, np.float32))
    np.testing.assert_array_equal(a.grad.numpy(), [0.5, 0.0, 1.0, 1.0, 1.0, 0.5, 0.5])
    np.testing.assert_array_equal(b.grad.numpy(), [0.5, 1.0, 1.0, 1.0, 1.0, 0.5, 0.5])


def test_extrema_method_dtypes_and_masked_infinite_gradient():
    a = nb.tensor(np.array([1.0, 5.0], np.float32), requires_grad=True)
    b = nb.tensor(np.array([2.0, 4.0]), requires_grad=True)
    y = a.minimum(b)
    assert y.dtype == np.float64 and y.tolist() == [1.0, 4.0]
    y.backward(np.array([np.inf, np.inf]))
    assert a.grad.dtype == np.float32
    np.testing.assert_array_equal(a.grad.numpy(), [np.inf, 0.0])
    np.testing.assert_array_equal(b.grad.numpy(), [0.0, np.inf])
    assert a.maximum(3.0).tolist() == [3.0, 5.0]
    assert nb.maximum(nb.tensor([1, 7]), nb.tensor([3, 2], dtype=np.int32)).tolist() == [3, 7]
    assert nb.maximum(nb.tensor([True, False]), nb.tensor([False, False])).tolist() == [True,
                                                                                        False]


@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_gradcheck_at_ties_is_the_even_split(name):
    """At a tie the central difference is (1 - 0) / 2 for each operand: the even split."""
    a = np.array([[0.5, -1.0], [2.0, 0.25]])
    b = np.array([[0.5, 1.0], [2.0, -3.0]])
    assert gradcheck(getattr(nb, name), [a, b])


def test_gradcheck_and_gradgradcheck_compositions():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((3, 1)), rng.standard_normal((1, 4))
    mask = rng.random((3, 4)) > 0.5

    def f(u, v):
        return nb.where(mask, nb.maximum(u, v) * v, nb.minimum(u * u, v))

    assert gradcheck(f, [a, b])
    assert gradgradcheck(f, [a, b])


def test_extremum_errors():
    with pytest.raises(ValueError, match=r"maximum: shapes \(2, 3\) and \(2,\) are not "
                                         "broadcastable"):
        nb.maximum(nb.zeros(2, 3), nb.zeros(2))
    with pytest.raises(ValueError, match=r"minimum: shapes"):
        nb.minimum(nb.zeros(3), nb.zeros(4))


# -- threads and kernel forms -----------------------------------------------------------------
def _select_all(a, b, c, g):
    outs = []
    for fn in (nb.maximum, nb.minimum, lambda u, v: nb.where(c, u, v)):
        ta, tb = nb.tensor(a, requires_grad=True), nb.tensor(b, requires_grad=True)
        y = fn(ta, tb)
        outs += [y.numpy().copy(), *(t.data for t in nb.grad(y, [ta, tb], grad_outputs=g))]
    return outs


def test_one_and_two_threads_give_the_same_bits():
    rng = np.random.default_rng(2)
    shape = (PARALLEL_MIN // 64 + 3, 64)
    a = np.round(rng.standard_normal(shape), 1).astype(np.float32)  # ties
    b = np.round(rng.standard_normal((1, 64)), 1).astype(np.float32)
    a[::7, 3] = np.nan
    c = rng.random((shape[0], 1)) > 0.5
    g = rng.standard_normal(shape).astype(np.float32)
    for r1, r2 in zip(at_threads(1, _select_all, a, b, c, g),
                      at_threads(2, _select_all, a, b, c, g)):
        assert_same_bits(r1, r2)


def test_serial_and_parallel_forms_give_the_same_bits():
    rng = np.random.default_rng(3)
    a = np.round(rng.standard_normal((50, 33)), 1)
    b = np.round(rng.standard_normal((50, 33)), 1)
    g = rng.standard_normal((50, 33))
    (_, fa, fb, fg), outer, strides, inner, _ = K._plan([None, a, b, g], a.shape, a.dtype)
    forms = []
    for kernel in (K.select_rows, K.select_rows.serial):
        out = np.empty(a.shape)
        kernel(K.MAXIMUM, np.zeros(1, bool), fa, fb, out, outer, strides, inner)
        forms.append(out)
    assert_same_bits(*forms)
    grads = []
    for kernel in (K.select_grads, K.select_grads.serial):
        ga, gb = np.empty(a.shape), np.empty(a.shape)
        kernel(K.MINIMUM, np.zeros(1, bool), fa, fb, fg, ga, gb, True, True, outer, strides,
               inner)
        grads.append(np.stack([ga, gb]))
    assert_same_bits(*grads)


def test_operands_are_read_in_place_through_strides():
    """Transposed, reversed and 0-stride broadcast operands give what copies give."""
    rng = np.random.default_rng(4)
    base = rng.standard_normal((6, 5))
    a = base.T[::-1]                       # (5, 6), negative and non-unit strides
    b = np.broadcast_to(rng.standard_normal(6), (5, 6))
    c = np.broadcast_to(rng.random((5, 1)) > 0.5, (5, 6))
    np.testing.assert_array_equal(nb.maximum(a, b).numpy(), np.maximum(a.copy(), b.copy()))
    np.testing.assert_array_equal(nb.where(c, a, b).numpy(), np.where(c, a, b))


# -- PyTorch oracle ---------------------------------------------------------------------------
def _torch_run(lib, torch, a, b, c, w):
    where = nb.where if lib is nb else torch.where
    return where(c, lib.maximum(a, b), lib.minimum(a * b, b)) * w


def test_torch_oracle_special_values():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    a_np = np.round(rng.standard_normal((40, 1, 3)), 1)
    b_np = np.round(rng.standard_normal((5, 3)), 1)
    a_np[::9] = np.nan
    b_np[1, 1], b_np[2, 2], b_np[3, 0] = -0.0, np.inf, -np.inf
    c_np = rng.random((5, 1)) > 0.4
    w_np = rng.standard_normal((40, 5, 3))
    g_np = rng.standard_normal((40, 5, 3))
    ta, tb = (torch.tensor(v, requires_grad=True) for v in (a_np, b_np))
    na, nb_ = (nb.tensor(v, requires_grad=True) for v in (a_np, b_np))
    out_t = _torch_run(torch, torch, ta, tb, torch.tensor(c_np), torch.tensor(w_np))
    out_n = _torch_run(nb, torch, na, nb_, c_np, w_np)
    _assert_same_values(out_n.numpy(), out_t.detach().numpy())
    out_t.backward(torch.tensor(g_np))
    out_n.backward(g_np)
    np.testing.assert_allclose(na.grad.numpy(), ta.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(nb_.grad.numpy(), tb.grad.numpy(), rtol=1e-12)


def test_torch_oracle_second_order():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    a_np = np.round(rng.standard_normal((4, 1, 3)), 1)   # rounded: ties
    b_np = np.round(rng.standard_normal((5, 3)), 1)
    c_np = rng.random((5, 1)) > 0.4
    w_np, v_np = rng.standard_normal((4, 5, 3)), rng.standard_normal((4, 1, 3))
    ta, tb, tw = (torch.tensor(v, requires_grad=True) for v in (a_np, b_np, w_np))
    na, nb_, nw = (nb.tensor(v, requires_grad=True) for v in (a_np, b_np, w_np))
    out_t = _torch_run(torch, torch, ta, tb, torch.tensor(c_np), tw).sum()
    out_n = _torch_run(nb, torch, na, nb_, c_np, nw).sum()
    (ga_t,) = torch.autograd.grad(out_t, ta, create_graph=True)
    (ga_n,) = nb.grad(out_n, [na], create_graph=True)
    np.testing.assert_allclose(ga_n.numpy(), ga_t.detach().numpy(), rtol=1e-12)
    # grad_a does not depend on a (the ops are piecewise linear in a): None in both
    second_t = torch.autograd.grad((ga_t * torch.tensor(v_np)).sum(), (ta, tb, tw),
                                   allow_unused=True)
    second_n = nb.grad((ga_n * v_np).sum(), [na, nb_, nw])
    assert second_t[0] is None and second_n[0] is None
    for sn, st_ in zip(second_n[1:], second_t[1:]):
        np.testing.assert_allclose(sn.numpy(), st_.numpy(), rtol=1e-12, atol=1e-15)
