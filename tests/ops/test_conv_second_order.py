"""Second derivatives of conv2d, conv1d and conv_transpose2d: the registered gradgrad
checks, and PyTorch's double backward on every kernel path."""

import numpy as np
import pytest
from conftest import PATHS, assert_same_bits, kernel_path

import nbgrad as nb
from nbgrad.testing import check_registered


# -- second derivatives ---------------------------------------------------------------------
@pytest.mark.parametrize("name", ["conv2d", "conv1d", "conv_transpose2d", "conv2d_weight_grad"])
def test_gradgradcheck_registered(name):
    for second_order in (False, True):
        report = check_registered(name, second_order=second_order)
        assert report.passed, "\n".join(report.failures)


def _sum_of_squares(ds):
    total = (ds[0] * ds[0]).sum()
    for d in ds[1:]:
        total = total + (d * d).sum()
    return total


def _check_second_derivatives_against_torch(ours, theirs, arrays):
    """grad of s = sum over the inputs of |dL/dinput|^2, L = sum(y^2), w.r.t. every input:
    ours (nb.grad with create_graph) against torch.autograd.grad (create_graph)."""
    torch = pytest.importorskip("torch")
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    y = theirs(*ts)
    first = torch.autograd.grad((y * y).sum(), ts, create_graph=True)
    expected = torch.autograd.grad(_sum_of_squares(first), ts)
    ns = [nb.tensor(a, requires_grad=True) for a in arrays]
    y = ours(*ns)
    first = nb.grad((y * y).sum(), ns, create_graph=True)
    for d, e in zip(first, torch.autograd.grad((theirs(*ts) ** 2).sum(), ts)):
        np.testing.assert_allclose(d.numpy(), e.numpy(), rtol=1e-10, atol=1e-10)
    got = nb.grad(_sum_of_squares(first), ns)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-10, atol=1e-10)


CONV2D_SECOND_ORDER = [
    ((2, 3, 5, 6), (4, 3, 3, 2), True, dict(stride=1, padding=1)),
    ((1, 4, 7, 6), (4, 2, 2, 3), True, dict(stride=(2, 1), padding=(1, 2), dilation=(2, 1),
                                            groups=2)),
    ((1, 8, 7, 7), (8, 4, 3, 2), False, dict(stride=2, groups=2)),
    ((3, 5, 5), (2, 3, 2, 2), True, dict(padding="same", dilation=2)),
]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("xs, ws, bias, kw", CONV2D_SECOND_ORDER)
def test_conv2d_second_derivative_torch_oracle(path, xs, ws, bias, kw):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(21)
    arrays = [rng.standard_normal(xs), rng.standard_normal(ws)]
    arrays += [rng.standard_normal(ws[0])] if bias else []
    with kernel_path(path):
        _check_second_derivatives_against_torch(
            lambda x, w, *b: nb.conv2d(x, w, *b, **kw),
            lambda x, w, *b: torch.nn.functional.conv2d(x, w, *b, **kw), arrays)


@pytest.mark.parametrize("xs, ws, kw", [
    ((2, 4, 3, 4), (4, 3, 3, 2), dict(stride=2, padding=1, output_padding=(1, 0))),
    ((1, 2, 3, 4), (2, 3, 2, 2), dict(stride=1, padding=1, output_padding=(1, 0), dilation=2)),
    ((4, 3, 3), (4, 2, 2, 3), dict(stride=(1, 3), groups=2)),
])
def test_conv_transpose2d_second_derivative_torch_oracle(xs, ws, kw):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(22)
    arrays = [rng.standard_normal(xs), rng.standard_normal(ws),
              rng.standard_normal(ws[1] * kw.get("groups", 1))]
    _check_second_derivatives_against_torch(
        lambda x, w, b: nb.conv_transpose2d(x, w, b, **kw),
        lambda x, w, b: torch.nn.functional.conv_transpose2d(x, w, b, **kw), arrays)


def test_conv1d_second_derivative_torch_oracle_and_one_element_tuples():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(23)
    arrays = [rng.standard_normal((2, 3, 9)), rng.standard_normal((4, 3, 3)),
              rng.standard_normal(4)]
    kw = dict(stride=(2,), padding=(1,), dilation=(1,))
    _check_second_derivatives_against_torch(
        lambda x, w, b: nb.conv1d(x, w, b, **kw),
        lambda x, w, b: torch.nn.functional.conv1d(x, w, b, **kw), arrays)
    assert_same_bits(nb.conv1d(*arrays, **kw).numpy(),
                     nb.conv1d(*arrays, stride=2, padding=1, dilation=1).numpy())
    with pytest.raises(TypeError, match=r"conv1d: stride must be an int or a one-element"):
        nb.conv1d(*arrays, stride=(2, 2))


def test_conv2d_hessian_vector_product_is_bilinear():
    """d/dx <dL/dw, v> for L = <conv2d(x, w), g> is conv_transpose2d(g, v): exact."""
    rng = np.random.default_rng(24)
    x = nb.tensor(rng.standard_normal((2, 3, 6, 5)), requires_grad=True)
    w = nb.tensor(rng.standard_normal((4, 3, 3, 3)), requires_grad=True)
    g, v = rng.standard_normal((2, 4, 3, 3)), rng.standard_normal((4, 3, 3, 3))
    (dw,) = nb.grad(nb.conv2d(x, w, stride=2, padding=1), [w], grad_outputs=[g],
                    create_graph=True)
    (hx,) = nb.grad((dw * nb.tensor(v)).sum(), [x])
    expected = nb.conv_transpose2d(g, v, stride=2, padding=1, output_padding=(1, 0))
    np.testing.assert_allclose(hx.numpy(), expected.numpy(), rtol=1e-12, atol=1e-12)
