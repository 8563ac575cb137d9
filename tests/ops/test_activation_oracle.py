"""Activations and the softmax family against PyTorch, and their edge cases: empty arrays,
NaN, infinite rows, the float32 fast paths bit for bit."""

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads
from ops.activation_cases import ELEMENTWISE, EW_IDS, forward_backward, torch_cases
from scipy.special import logsumexp as scipy_logsumexp

import nbgrad as nb

# -- PyTorch oracle ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pytorch_oracle(dtype):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((6, 50)) * 3).astype(dtype)
    x[0, :5] = [0.0, -0.5, 1.0, -0.0, 0.5]   # kinks and clamp bounds
    # float32: the same bounds as against the float64 reference (1 + erf and 1 - tanh^2
    # cancel in both libraries, each with its own rounding)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-12,
                                                                   "atol": 1e-14}
    for name, ours, theirs in torch_cases(torch):
        g = rng.standard_normal(ours(x).shape).astype(dtype)
        y, gx = forward_backward(ours, x, g)
        xt = torch.tensor(x, requires_grad=True)
        yt = theirs(xt)
        yt.backward(torch.tensor(g))
        np.testing.assert_allclose(y, yt.detach().numpy(), **tol, err_msg=name)
        np.testing.assert_allclose(gx, xt.grad.numpy(), **tol, err_msg=name)


def test_pytorch_oracle_gelu_quick_formula():
    torch = pytest.importorskip("torch")
    x = np.linspace(-8, 8, 101)
    xt = torch.tensor(x, requires_grad=True)
    (xt * torch.sigmoid(1.702 * xt)).sum().backward()
    t = nb.tensor(x, requires_grad=True)
    nb.gelu_quick(t).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), xt.grad.numpy(), rtol=1e-12, atol=1e-15)


def test_pytorch_oracle_clamp_tensor_bounds():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(10)
    x = rng.standard_normal((4, 5))
    lo = rng.uniform(-1, 0.5, (1, 5))
    hi = rng.uniform(-0.5, 1, (4, 1))           # some min > max pairs
    g = rng.standard_normal((4, 5))
    ts = [torch.tensor(a, requires_grad=True) for a in (x, lo, hi)]
    torch.clamp(*ts).backward(torch.tensor(g))
    ns = [nb.tensor(a, requires_grad=True) for a in (x, lo, hi)]
    y = nb.clamp(*ns)
    y.backward(g)
    np.testing.assert_array_equal(y.numpy(), torch.clamp(*ts).detach().numpy())
    for a, b in zip(ns, ts):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-14)


@pytest.mark.parametrize("shape", [(3, 0), (0, 4), (0,), (2, 0, 3)])
def test_empty_arrays_keep_their_shape(shape):
    for fn in [c[1] for c in ELEMENTWISE] + [nb.softmax, nb.log_softmax,
                                             lambda t: nb.softmax(t, 0)]:
        y, gx = forward_backward(fn, np.zeros(shape, np.float32),
                                  np.zeros(shape, np.float32))
        assert y.shape == shape and gx.shape == shape


@pytest.mark.parametrize("name, fn, f, df", ELEMENTWISE, ids=EW_IDS)
def test_nan_propagates_like_pytorch(name, fn, f, df):
    x = np.array([np.nan, 1.0, -1.0], np.float32)
    y, gx = forward_backward(fn, x, np.ones_like(x))
    assert np.isnan(y[0]) and np.isfinite(y[1:]).all()
    assert np.isfinite(gx[1:]).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_row_max_all_negative_infinite_and_nan_rows(dtype):
    # float32 rows take the integer-key max, float64 rows the plain one: same answers
    x = np.array([[-5.0, -1.0, -2.0], [-np.inf, -1.0, -3.0], [-0.0, -1e-45, -3.0],
                  [np.nan, 0.0, 1.0], [-np.nan, 0.0, 1.0]], dtype)
    y = nb.softmax(x).numpy()
    finite = x[:3].astype(np.float64)
    np.testing.assert_allclose(y[:3], np.exp(finite - scipy_logsumexp(finite, 1,
                                                                      keepdims=True)),
                               rtol=1e-6)
    assert np.isnan(y[3:]).all()
    np.testing.assert_allclose(nb.logsumexp(x[:3], 1).numpy(),
                               scipy_logsumexp(finite, 1), rtol=1e-6)


def test_gelu_float32_fast_path_matches_the_reference_loop_nest():
    from nbgrad.kernels import activation as K
    x = np.concatenate([np.linspace(-10, 10, 20_001), [0.0, -0.0, 3.4e38, -3.4e38]])
    x = x.astype(np.float32)
    g = np.random.default_rng(11).standard_normal(x.size).astype(np.float32)
    fast, ref = np.empty_like(x), np.empty_like(x)
    K.gelu_forward_f32(x, fast)
    K.gelu_forward(x, ref)
    np.testing.assert_allclose(fast, ref, rtol=1e-6, atol=1e-6)   # ref cancels below 0
    K.gelu_backward_f32(g, x, fast)
    K.gelu_backward(g, x, ref)
    np.testing.assert_allclose(fast, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(1, 1), (33, 7), (70, 1024), (5, 0), (0, 4)])
def test_softmax_float32_pipelined_kernel_matches_the_plain_one_bit_for_bit(shape):
    from nbgrad.kernels import softmax as K
    rng = np.random.default_rng(13)
    x = (rng.standard_normal(shape) * 30).astype(np.float32)
    if x.size and shape[0] > 4:
        x[1, 0] = np.inf                           # +inf row, -inf row, NaN row, huge row
        x[2, :] = -np.inf
        x[3, -1] = np.nan
        x[4, :] = 3.4e38
    ref, fast = np.empty_like(x), np.empty_like(x)
    K.softmax_forward(x, ref)
    at_threads(1, K.softmax_forward_f32, x, fast)
    assert_same_bits(fast, ref)
    at_threads(2, K.softmax_forward_f32, x, fast)
    assert_same_bits(fast, ref)


def test_gelu_float32_saved_derivative_matches_the_backward_kernel_bit_for_bit():
    # with grad on, the float32 forward also writes Phi(x) + x phi(x) and the backward is
    # g * that (mul_saved): the same bits as gelu_backward_f32, edges included
    from nbgrad.kernels import activation as K
    x = np.concatenate([np.linspace(-12, 12, 4001), [0.0, -0.0, 3.4e38, -3.4e38, np.inf,
                                                      -np.inf, np.nan, 1e-40, -1e-40]])
    x = x.astype(np.float32)
    g = np.random.default_rng(12).standard_normal(x.size).astype(np.float32)
    g[:3] = [np.inf, np.nan, 0.0]
    y_ref, gx_ref = np.empty_like(x), np.empty_like(x)
    K.gelu_forward_f32(x, y_ref)
    K.gelu_backward_f32(g, x, gx_ref)
    y, d, gx = np.empty_like(x), np.empty_like(x), np.empty_like(x)
    K.gelu_forward_grad_f32(x, y, d)
    assert_same_bits(y, y_ref)
    assert_same_bits(K.mul_saved(g, d, gx), gx_ref)
    y_op, gx_op = forward_backward(nb.gelu, x, g)          # through the op
    assert_same_bits(y_op, y_ref)
    assert_same_bits(gx_op, gx_ref)
    with nb.no_grad():                                      # no grad: plain forward
        assert_same_bits(nb.gelu(nb.tensor(x)).numpy(), y_ref)


def test_mul_saved_takes_a_broadcast_scalar_upstream_without_materialising_it():
    from nbgrad.kernels import activation as K
    d = np.linspace(-3, 3, 101).astype(np.float32)
    out = np.empty_like(d)
    K.mul_saved(np.array([np.float32(1.5)]), d, out)
    assert_same_bits(out, np.float32(1.5) * d)
    x = np.linspace(-4, 4, 60, dtype=np.float32).reshape(6, 10)
    g0 = np.broadcast_to(np.float32(0.25), x.shape)          # 0-stride upstream
    assert not any(g0.strides)
    full = forward_backward(nb.gelu, x, np.full(x.shape, 0.25, np.float32))[1]
    assert_same_bits(forward_backward(nb.gelu, x, g0)[1], full)


def test_gelu_float32_is_relatively_accurate_in_the_negative_tail():
    from scipy.special import ndtr
    x = np.linspace(-12, -0.5, 20_001).astype(np.float32)
    y, gx = forward_backward(nb.gelu, x, np.ones_like(x))
    x64 = x.astype(np.float64)
    # erfc form, not 1 + erf(x / sqrt 2) (which cancels to 0 below x = -5.5); the
    # tolerance covers the rounding of x^2 / 2 inside exp (x^2/2 = 72 at x = -12)
    np.testing.assert_allclose(y, x64 * ndtr(x64), rtol=1e-5)
    pdf = np.exp(-x64 * x64 / 2) / np.sqrt(2 * np.pi)
    np.testing.assert_allclose(gx, ndtr(x64) + x64 * pdf, rtol=1e-5, atol=1e-7)
