"""1x1 convolutions as matrix products (nbgrad/kernels/conv_pointwise.py, the 'pointwise'
family of ops/conv_plan.py): the layers the plan sends there, PyTorch's conv1d/conv2d as
the oracle for the forward and every gradient (first and second order), and the same
bits at 1 and 2 threads and in the serial form."""

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads, conv_all_grads, kernel_form
from hypothesis import given, settings
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.kernels import conv_pointwise
from nbgrad.ops import conv_plan


def _family(y) -> tuple[str, str, str]:
    """The families of a conv node's forward, input gradient and weight gradient (read
    before its backward, which releases the plan)."""
    plan = y.grad_fn.plan
    return plan.forward.family, plan.input_grad.family, plan.weight_grad.family


def _op(x_shape):
    return nb.conv2d if len(x_shape) == 4 else nb.conv1d


def _arrays(x_shape, F, bias, seed, dtype=np.float64):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal((F, x_shape[1]) + (1,) * (len(x_shape) - 2)).astype(dtype)
    b = rng.standard_normal(F).astype(dtype) if bias else None
    return x, w, b


def _torch_all_grads(torch, x, w, b, g):
    """y, dx, dw, db of torch's conv1d/conv2d (db None without a bias)."""
    ts = [None if a is None else torch.tensor(a, requires_grad=True) for a in (x, w, b)]
    fn = torch.nn.functional.conv2d if x.ndim == 4 else torch.nn.functional.conv1d
    y = fn(*ts)
    y.backward(torch.tensor(g))
    return [y.detach().numpy()] + [None if t is None else t.grad.numpy() for t in ts]


def _nb_all_grads(x, w, b, g):
    ts = [None if a is None else nb.tensor(a, requires_grad=True) for a in (x, w, b)]
    y = _op(x.shape)(*ts)
    families = _family(y)  # before the backward releases the node's plan
    y.backward(g)
    return [y.numpy()] + [None if t is None else t.grad.numpy() for t in ts], families


# batched conv2d / conv1d shapes whose maps have at least POINTWISE_MIN_MAP positions
shapes = st.one_of(
    st.tuples(st.integers(0, 3), st.integers(1, 6), st.integers(8, 12), st.integers(8, 11)),
    st.tuples(st.integers(0, 3), st.integers(1, 6), st.integers(64, 130)))


@settings(max_examples=25, deadline=None)
@given(x_shape=shapes, F=st.integers(1, 7), bias=st.booleans(), seed=st.integers(0, 99))
def test_pointwise_matches_torch_float64(x_shape, F, bias, seed):
    """Forward and the gradients of x, w and b against torch in float64 (rtol 1e-10),
    on the 'pointwise' family for every role."""
    torch = pytest.importorskip("torch")
    x, w, b = _arrays(x_shape, F, bias, seed)
    g = np.random.default_rng(seed + 1).standard_normal((x_shape[0], F) + x_shape[2:])
    ours, families = _nb_all_grads(x, w, b, g)
    assert families == ("pointwise",) * 3
    for got, want in zip(ours, _torch_all_grads(torch, x, w, b, g)):
        if want is None:
            assert got is None
        else:
            assert got.shape == want.shape and got.dtype == want.dtype
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("x_shape, F", [((5, 32, 16, 16), 32), ((3, 32, 100), 64),
                                        ((2, 17, 9, 13), 5)])
def test_pointwise_matches_torch_float32(x_shape, F):
    torch = pytest.importorskip("torch")
    x, w, b = _arrays(x_shape, F, True, 3, np.float32)
    g = np.random.default_rng(4).standard_normal((x_shape[0], F) + x_shape[2:])
    g = g.astype(np.float32)
    ours, families = _nb_all_grads(x, w, b, g)
    assert families == ("pointwise",) * 3
    for got, want in zip(ours, _torch_all_grads(torch, x, w, b, g)):
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("x_shape, F", [((6, 32, 16, 16), 32), ((4, 24, 8, 8), 48),
                                        ((3, 16, 300), 40), ((2, 8, 70), 3),
                                        # few channels in (y's row loops), few out (dx's)
                                        ((8, 3, 32, 32), 64), ((8, 64, 32, 32), 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_same_bits_at_1_and_2_threads_and_serial(x_shape, F, dtype):
    """y and every gradient: the parallel form at 1 and 2 threads and the serial form give
    the same bits (each product owns its outputs; dW's partials summed in image order)."""
    x, w, b = _arrays(x_shape, F, True, 5, dtype)
    g = np.random.default_rng(6).standard_normal((x_shape[0], F) + x_shape[2:]).astype(dtype)

    def fn(x, w, b):
        y = _op(x.shape)(x, w, b)
        assert _family(y) == ("pointwise",) * 3
        return y
    with kernel_form("parallel"):
        one = at_threads(1, conv_all_grads, fn, x, w, b, g)
        two = at_threads(2, conv_all_grads, fn, x, w, b, g)
    with kernel_form("serial"):
        serial = conv_all_grads(fn, x, w, b, g)
    for a, c, s in zip(one, two, serial):
        assert_same_bits(a, c)
        assert_same_bits(a, s)


def test_weight_grad_in_chunks_gives_the_same_bits(monkeypatch):
    """dW's partials summed a chunk of images at a time (PARTIALS_MAX_BYTES) give the bits
    of one chunk: every element is summed in image order either way."""
    x, w, _ = _arrays((7, 5, 8, 8), 3, False, 8)
    g = np.random.default_rng(9).standard_normal((7, 3, 8, 8))

    def dw():
        wt = nb.tensor(w, requires_grad=True)
        nb.conv2d(nb.tensor(x), wt).backward(g)
        return wt.grad.numpy()
    whole = dw()
    monkeypatch.setattr(conv_pointwise, "PARTIALS_MAX_BYTES", 2 * 3 * 5 * 8)  # 2 images
    assert_same_bits(dw(), whole)
    np.testing.assert_allclose(whole[:, :, 0, 0],
                               np.einsum("nfs,ncs->fc", g.reshape(7, 3, 64),
                                         x.reshape(7, 5, 64)), rtol=1e-12)


@pytest.mark.parametrize("op, x_shape, w_shape, kw, pointwise", [
    ("conv2d", (2, 4, 8, 8), (6, 4, 1, 1), {}, True),
    ("conv2d", (2, 4, 8, 8), (6, 4, 1, 1), dict(dilation=3), True),  # 1x1: moves nothing
    ("conv1d", (2, 4, 64), (6, 4, 1), {}, True),
    ("conv2d", (2, 4, 16, 4), (6, 4, 1, 1), {}, True),
    ("conv2d", (2, 4, 7, 9), (6, 4, 1, 1), {}, False),  # 63 positions: too few
    ("conv1d", (2, 4, 63), (6, 4, 1), {}, False),
    ("conv2d", (2, 4, 8, 8), (6, 4, 1, 1), dict(padding=1), False),
    ("conv2d", (2, 4, 16, 16), (6, 4, 1, 1), dict(stride=2), False),
    ("conv2d", (2, 4, 8, 8), (6, 2, 1, 1), dict(groups=2), False),
    ("conv2d", (2, 4, 8, 8), (6, 4, 3, 3), dict(padding=1), False),
    ("conv2d", (2, 4, 8, 8), (6, 4, 1, 3), dict(padding=(0, 1)), False),
    ("conv_transpose2d", (2, 4, 8, 8), (4, 6, 1, 1), {}, True),
    # output_padding 1 (allowed by dilation 2) makes y a row and column larger than x
    ("conv_transpose2d", (2, 4, 8, 8), (4, 6, 1, 1), dict(dilation=2, output_padding=1),
     False),
])
def test_the_plan_chooses_pointwise_for_matrix_products_only(op, x_shape, w_shape, kw,
                                                             pointwise):
    rng = np.random.default_rng(10)
    x = nb.tensor(rng.standard_normal(x_shape), requires_grad=True)
    w = nb.tensor(rng.standard_normal(w_shape), requires_grad=True)
    y = getattr(nb, op)(x, w, **kw)
    assert (_family(y) == ("pointwise",) * 3) == pointwise
    y.backward(np.ones(y.shape))
    assert x.grad.shape == x.shape and w.grad.shape == w.shape


def test_the_switch_restores_the_previous_family(monkeypatch):
    """POINTWISE = False (for measuring): the layer takes the family it took before."""
    x = nb.tensor(np.ones((2, 32, 16, 16), np.float32))
    w = nb.tensor(np.ones((32, 32, 1, 1), np.float32), requires_grad=True)
    assert _family(nb.conv2d(x, w))[0] == "pointwise"
    monkeypatch.setattr(conv_plan, "POINTWISE", False)
    assert _family(nb.conv2d(x, w))[0] == "s1"


def test_a_training_step_chooses_its_kernels_once(monkeypatch):
    calls = []
    choose = conv_plan.choose_paths

    def counted(*args):
        calls.append(args)
        return choose(*args)
    monkeypatch.setattr(conv_plan, "choose_paths", counted)
    x = nb.tensor(np.ones((2, 8, 64), np.float32), requires_grad=True)
    w = nb.tensor(np.ones((16, 8, 1), np.float32), requires_grad=True)
    y = nb.conv1d(x, w)
    assert len(calls) == 1 and _family(y)[0] == "pointwise"
    y.backward(np.ones(y.shape, np.float32))
    assert len(calls) == 1


def test_a_non_finite_weight_takes_the_loop_nests():
    """An inf in w sends the forward and input gradient to the direct loop nests
    (ops/conv_plan.py: exact_step), whose products are those of the definition."""
    x = np.ones((1, 2, 8, 8))
    w = np.array([np.inf, 1.0]).reshape(1, 2, 1, 1)
    y = nb.conv2d(nb.tensor(x, requires_grad=True), nb.tensor(w))
    assert y.grad_fn.plan.forward.family == "direct"
    assert np.all(y.numpy() == np.inf)


def _sum_of_squares(ds):
    total = (ds[0] * ds[0]).sum()
    for d in ds[1:]:
        total = total + (d * d).sum()
    return total


@pytest.mark.parametrize("x_shape, bias", [((2, 3, 8, 9), True), ((3, 4, 70), False),
                                           ((4, 10, 10), True)])
def test_second_derivatives_against_torch(x_shape, bias):
    """grad of s = sum |dL/dinput|^2 (L = sum y^2) w.r.t. every input, through the
    pointwise family's adjoints (conv_transpose2d, conv2d_weight_grad) taken as ops."""
    torch = pytest.importorskip("torch")
    x, w, b = _arrays(x_shape, 5, bias, 11)
    if len(x_shape) == 3 and x_shape[0] == 4:  # unbatched conv2d [C, H, W]
        w = np.random.default_rng(12).standard_normal((5, 4, 1, 1))
    arrays = [a for a in (x, w, b) if a is not None]
    two_d = w.ndim == 4
    ours_fn = nb.conv2d if two_d else nb.conv1d
    theirs_fn = torch.nn.functional.conv2d if two_d else torch.nn.functional.conv1d
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    y = theirs_fn(*ts)
    first = torch.autograd.grad((y * y).sum(), ts, create_graph=True)
    expected = torch.autograd.grad(_sum_of_squares(first), ts)
    ns = [nb.tensor(a, requires_grad=True) for a in arrays]
    y = ours_fn(*ns)
    assert _family(y)[0] == "pointwise"
    first_nb = nb.grad((y * y).sum(), ns, create_graph=True)
    for d, e in zip(first_nb, first):
        np.testing.assert_allclose(d.numpy(), e.detach().numpy(), rtol=1e-10, atol=1e-10)
    for g, e in zip(nb.grad(_sum_of_squares(first_nb), ns), expected):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-10, atol=1e-10)
