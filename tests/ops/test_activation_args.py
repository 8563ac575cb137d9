"""Activations and the softmax family: the dim/axis spellings, the point-wise table's
parameters and kernels, NaN inputs and bounds, clamp at infinite and NaN bounds."""

import numpy as np
import pytest
from conftest import assert_same_bits
from ops.activation_cases import forward_backward
from scipy.special import expit

import nbgrad as nb

# -- dim / axis spellings ----------------------------------------------------------------------


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_family_takes_dim_or_axis(op):
    fn = getattr(nb, op)
    x = nb.tensor(np.random.default_rng(16).standard_normal((3, 4, 5)))
    want = fn(x, 1).numpy()
    for got in (fn(x, dim=1), fn(x, axis=1), fn(x, dim=-2), getattr(x, op)(dim=1),
                getattr(x, op)(axis=1)):
        np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_array_equal(fn(x).numpy(), fn(x, dim=-1).numpy())
    with pytest.raises(TypeError, match=rf"{op}: got both dim=1 and axis=2; pass one of them"):
        fn(x, dim=1, axis=2)
    with pytest.raises(TypeError, match=rf"{op}: got both dim=1 and axis=1"):
        fn(x, 1, axis=1)
    with pytest.raises(ValueError,
                       match=rf"{op}: axis=3 is out of range for x of shape \(3, 4, 5\)"):
        fn(x, dim=3)


def test_logsumexp_takes_dim_keepdim_or_axis_keepdims():
    x = nb.tensor(np.random.default_rng(17).standard_normal((2, 3, 4)))
    want = nb.logsumexp(x, (0, 2), True).numpy()
    assert want.shape == (1, 3, 1)
    for got in (nb.logsumexp(x, dim=(0, 2), keepdim=True),
                nb.logsumexp(x, axis=(0, 2), keepdims=True),
                nb.logsumexp(x, dim=(0, 2), keepdims=True),
                nb.logsumexp(x, axis=(2, 0), keepdim=True),
                x.logsumexp(dim=(0, 2), keepdim=True)):
        np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_array_equal(nb.logsumexp(x, axis=1).numpy(),
                                  nb.logsumexp(x, 1).numpy())
    assert nb.logsumexp(x).shape == ()
    with pytest.raises(TypeError, match=r"logsumexp: got both dim=1 and axis=0"):
        nb.logsumexp(x, dim=1, axis=0)
    with pytest.raises(TypeError, match=r"logsumexp: got both keepdim=True and keepdims=False"):
        nb.logsumexp(x, 1, True, keepdims=False)


# -- the point-wise table ------------------------------------------------------------------------

TABLE = [("tanh", (), "output"), ("sigmoid", (), "output"), ("relu", (), "output"),
         ("leaky_relu", (0.2,), "input"), ("elu", (0.7,), "input"),
         ("gelu_quick", (), "input"), ("silu", (), "input"), ("softplus", (1.5, 2.0), "input")]


@pytest.mark.parametrize("name, args, saves", TABLE, ids=[c[0] for c in TABLE])
def test_table_ops_run_their_kernels_bit_for_bit(name, args, saves):
    from nbgrad.kernels import activation as K
    rng = np.random.default_rng(18)
    x = (rng.standard_normal((31, 17)) * 3).astype(np.float32)
    g = rng.standard_normal(x.shape).astype(np.float32)
    y, gx = forward_backward(lambda t: getattr(nb, name)(t, *args), x, g)
    y_ref, gx_ref = np.empty_like(x), np.empty_like(x)
    getattr(K, f"{name}_forward")(x.reshape(-1), *args, y_ref.reshape(-1))
    saved = y_ref if saves == "output" else x
    getattr(K, f"{name}_backward")(g.reshape(-1), saved.reshape(-1), *args, gx_ref.reshape(-1))
    assert_same_bits(y, y_ref)
    assert_same_bits(gx, gx_ref)


def test_table_ops_take_parameters_by_position_or_keyword():
    import inspect
    x = nb.tensor(np.linspace(-3, 3, 7))
    np.testing.assert_array_equal(nb.leaky_relu(x, negative_slope=0.2).numpy(),
                                  nb.leaky_relu(x, 0.2).numpy())
    np.testing.assert_array_equal(nb.softplus(x, threshold=1.0).numpy(),
                                  nb.softplus(x, 1.0, 1.0).numpy())
    np.testing.assert_array_equal(nb.softplus(x=x, beta=2).numpy(),
                                  nb.softplus(x, 2.0).numpy())
    assert list(inspect.signature(nb.softplus).parameters) == ["x", "beta", "threshold"]
    assert inspect.signature(nb.elu).parameters["alpha"].default == 1.0
    assert nb.tanh.__name__ == "tanh" and "1 - y^2" in nb.tanh.__doc__
    with pytest.raises(TypeError, match="unexpected keyword argument 'slope'"):
        nb.leaky_relu(x, slope=0.2)
    with pytest.raises(TypeError, match="multiple values for argument 'beta'"):
        nb.softplus(x, 1.0, beta=2.0)
    with pytest.raises(TypeError, match=r"tanh\(\) takes 1 positional argument"):
        nb.tanh(x, 1.0)
    with pytest.raises(TypeError, match="softplus: threshold must be a real number, got str"):
        nb.softplus(x, 1.0, "a")
    with pytest.raises(TypeError, match="elu: alpha must be a real number, got bool"):
        nb.elu(x, True)


# -- NaN inputs and NaN bounds (PyTorch 2.13's results) ---------------------------------------
def test_nan_inputs_get_pytorchs_gradients():
    x = np.array([np.nan, -1.0, 2.0], np.float32)
    g = np.array([3.0, 3.0, 3.0], np.float32)
    want = {"relu": [3.0, 0.0, 3.0], "leaky_relu": [0.03, 0.03, 3.0],
            "elu": [np.nan, 3 * np.exp(-1.0), 3.0]}
    for name, expected in want.items():
        for create_graph in (False, True):
            t = nb.tensor(x, requires_grad=True)
            (gx,) = nb.grad(getattr(nb, name)(t), [t], grad_outputs=g,
                            create_graph=create_graph)
            np.testing.assert_allclose(gx.numpy(), expected, rtol=1e-6,
                                       err_msg=f"{name} create_graph={create_graph}")


@pytest.mark.parametrize("bounds", [dict(min=np.nan), dict(max=np.nan),
                                    dict(min=0.0, max=np.nan), dict(min=np.nan, max=0.0)])
def test_a_nan_clamp_bound_gives_nan_with_zero_gradient(bounds):
    x = nb.tensor([1.0, np.nan, -2.0, 5.0], requires_grad=True)
    y = nb.clamp(x, **bounds)
    assert np.isnan(y.numpy()).all()
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros(4))
    lo = None if "min" not in bounds else nb.full((4,), bounds["min"])
    hi = None if "max" not in bounds else nb.full((4,), bounds["max"])
    assert np.isnan(nb.clamp(x, lo, hi).numpy()).all()


def test_gelu_quick_float64_gradient_is_exact_in_the_far_negative_tail():
    x = np.array([-150.0, -300.0, -1e30])
    t = nb.tensor(x, requires_grad=True)
    nb.gelu_quick(t).sum().backward()
    s = expit(1.702 * x)
    np.testing.assert_allclose(t.grad.numpy(), s * (1 + 1.702 * x * (1 - s)), rtol=1e-12)
    assert t.grad.numpy()[2] == 0.0


def test_log_softmax_keeps_the_log_sum_next_to_huge_values():
    for dtype in (np.float32, np.float64):
        y = nb.log_softmax(nb.tensor(np.array([1e30, 1e30, -1e30], dtype)))
        np.testing.assert_allclose(y.numpy(), [-np.log(2), -np.log(2), -2e30], rtol=1e-6)


# -- clamp at infinite and NaN bounds: PyTorch's clamp / clamp_min / clamp_max rules ------------
_CLAMP_X = [-np.inf, -2.0, -0.0, 0.0, 1.0, np.inf, np.nan]
_CLAMP_BOUNDS = [-np.inf, -1.0, 0.0, 1.0, np.inf, np.nan]


def _clamp_grid(which):
    """x against every bound value (and, for both bounds, every pair), flattened."""
    if which == "both":
        x, lo, hi = np.meshgrid(_CLAMP_X, _CLAMP_BOUNDS, _CLAMP_BOUNDS, indexing="ij")
        return x.ravel(), lo.ravel(), hi.ravel()
    x, b = (a.ravel() for a in np.meshgrid(_CLAMP_X, _CLAMP_BOUNDS, indexing="ij"))
    return (x, b, None) if which == "min" else (x, None, b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("which", ["min", "max", "both"])
def test_pytorch_oracle_clamp_tensor_bounds_at_inf_and_nan(which, dtype):
    """Values and the gradients of x, min and max; with one bound PyTorch uses
    clamp_min's (clamp_max's) rule, so a min of +inf gets the gradient where x < min."""
    torch = pytest.importorskip("torch")
    arrays = [None if a is None else a.astype(dtype) for a in _clamp_grid(which)]
    g = np.linspace(0.5, 2.0, arrays[0].size).astype(dtype)
    ts = [None if a is None else torch.tensor(a, requires_grad=True) for a in arrays]
    ty = torch.clamp(ts[0], min=ts[1], max=ts[2])
    ty.backward(torch.tensor(g))
    ns = [None if a is None else nb.tensor(a, requires_grad=True) for a in arrays]
    y = nb.clamp(ns[0], min=ns[1], max=ns[2])
    y.backward(nb.tensor(g))
    np.testing.assert_array_equal(y.numpy(), ty.detach().numpy())
    for name, a, b in zip(["x", "min", "max"], ns, ts):
        if a is not None:
            np.testing.assert_array_equal(a.grad.numpy(), b.grad.numpy(), err_msg=name)
    # the second-order path (create_graph) splits g the same way
    grads = nb.grad(nb.clamp(ns[0], min=ns[1], max=ns[2]), [a for a in ns if a is not None],
                    grad_outputs=nb.tensor(g), create_graph=True)
    for got, b in zip(grads, [b for b in ts if b is not None]):
        np.testing.assert_array_equal(got.numpy(), b.grad.numpy())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bounds", [dict(min=b) for b in _CLAMP_BOUNDS]
                         + [dict(max=b) for b in _CLAMP_BOUNDS]
                         + [dict(min=-np.inf, max=np.inf), dict(min=np.inf, max=-np.inf),
                            dict(min=np.nan, max=np.inf), dict(min=1.0, max=-1.0)])
def test_pytorch_oracle_clamp_number_bounds_at_inf_and_nan(bounds, dtype):
    torch = pytest.importorskip("torch")
    x = np.array(_CLAMP_X, dtype)
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.clamp(tx, **bounds)
    ty.sum().backward()
    nx = nb.tensor(x, requires_grad=True)
    y = nb.clamp(nx, **bounds)
    y.sum().backward()
    np.testing.assert_array_equal(y.numpy(), ty.detach().numpy())
    np.testing.assert_array_equal(nx.grad.numpy(), tx.grad.numpy())


def test_clamp_min_of_plus_inf_passes_the_gradient_to_min():
    """The issue's case, without torch: clamp_min(x, m) = m where x < m, so dm = 1."""
    x = nb.tensor([0.0], requires_grad=True)
    m = nb.tensor([np.inf], requires_grad=True)
    gx, gm = nb.grad(nb.clamp(x, min=m), [x, m])
    assert gx.numpy().tolist() == [0.0] and gm.numpy().tolist() == [1.0]
    h = nb.tensor([-np.inf], requires_grad=True)  # clamp_max(x, -inf) = -inf: dh = 1
    gx, gh = nb.grad(nb.clamp(x, max=h), [x, h])
    assert gx.numpy().tolist() == [0.0] and gh.numpy().tolist() == [1.0]
