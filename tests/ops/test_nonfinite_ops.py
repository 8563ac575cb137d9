"""Non-finite and empty inputs against PyTorch: NaN, +-inf, -0.0, subnormal and huge values
through the element-wise ops, reductions, activations, softmax family and losses; and
tensors with a zero-size dimension.

Forward values and gradients must agree with PyTorch in where they are NaN, where they
are infinite (and with which sign), and be close elsewhere. Sums, means and the softmax
family may cancel catastrophically among huge values, so their finite values are compared
with a tolerance scaled by the sum of |x| over the reduced slice (the error bound of any
summation order). The deliberate differences are listed in ``GRAD_SKIP``.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.testing import strategies as nbst

torch = pytest.importorskip("torch")
F = torch.nn.functional

DTYPES = [np.float32, np.float64]
RTOL = {np.dtype(np.float32): 2e-5, np.dtype(np.float64): 1e-12}
EXAMPLES = settings(max_examples=40, deadline=None)


# -- comparison ----------------------------------------------------------------------------
def assert_like_torch(actual, expected, what, scale=None, skip=None, atol=0.0):
    """Same shape and dtype; NaN where ``expected`` is NaN, the same infinities; finite
    values within rtol * max(|expected|, scale) + atol (plus the dtype's smallest normal,
    for subnormal results). ``skip`` masks entries out of the comparison, and so does a
    NaN ``scale`` (a sum whose overflow depends on the order of its additions)."""
    actual = np.asarray(actual)
    expected = expected.detach().numpy() if isinstance(expected, torch.Tensor) else expected
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    keep = np.ones(actual.shape, bool) if skip is None else ~np.broadcast_to(skip, actual.shape)
    if scale is not None:
        keep = keep & ~np.isnan(np.broadcast_to(scale, actual.shape))
    a, e = actual[keep], expected[keep]
    bound = np.abs(e) if scale is None else np.maximum(
        np.abs(e), np.broadcast_to(scale, actual.shape)[keep])
    tol = RTOL[actual.dtype] * bound + atol + np.finfo(actual.dtype).tiny
    with np.errstate(invalid="ignore", over="ignore"):
        close = np.isfinite(a) & (np.abs(a - e) <= tol)
    same = np.where(np.isnan(e), np.isnan(a), np.where(np.isinf(e), a == e, close))
    if not same.all():
        bad = np.flatnonzero(~same)[:5]
        raise AssertionError(f"{what}: nbgrad {a[bad]} but PyTorch {e[bad]} "
                             f"(entries {bad.tolist()} of the compared ones)")


def upstream(shape, dtype):
    """A fixed finite upstream gradient of both signs and several magnitudes."""
    return np.resize(np.array([1.0, -0.5, 2.0, 0.25, -3.0], dtype), shape)


def nb_and_torch(x):
    """The leaf tensors of ``x`` for nbgrad and for PyTorch."""
    return nb.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)


def check_op(nb_fn, torch_fn, inputs, what, scale=None, grad_skip=None, grad_scales=None,
             atol=0.0, forward_skip=None):
    """Run both, compare the outputs, backpropagate one upstream gradient through both and
    compare every input's gradient (``grad_skip(*inputs)`` / ``forward_skip(*inputs)``:
    entries not compared; ``grad_scales``: one ``scale`` per input)."""
    leaves = [nb_and_torch(x) for x in inputs]
    y = nb_fn(*[n for n, _ in leaves])
    ty = torch_fn(*[t for _, t in leaves])
    skip = None if forward_skip is None else np.broadcast_to(forward_skip(*inputs), ty.shape)
    assert_like_torch(y.numpy(), ty, f"{what} forward", scale, skip, atol)
    g = upstream(ty.shape, inputs[0].dtype)
    y.backward(nb.tensor(g))
    ty.backward(torch.from_numpy(g))
    skip = None if grad_skip is None else grad_skip(*inputs)
    for i, (n, t) in enumerate(leaves):
        assert_like_torch(n.grad.numpy(), t.grad, f"{what} grad of input {i}",
                          None if grad_scales is None else grad_scales[i],
                          None if skip is None else np.broadcast_to(skip, t.shape), atol)


def special_arrays(dtype, huge=True, max_dims=3, max_side=4, shape=None):
    return nbst.arrays(dtype, shape=shape, max_dims=max_dims, max_side=max_side,
                       specials=True, huge=huge)


# -- element-wise and point-wise ops -------------------------------------------------------
def beyond_square_root_of_max(x):
    """|x| whose square overflows (or NaN/inf): PyTorch's tanh-gelu backward gives NaN there
    (0 * inf), nbgrad the limit 1 or 0."""
    return ~(np.abs(x) < np.sqrt(np.finfo(x.dtype).max))


GRAD_SKIP = {
    "gelu_tanh": beyond_square_root_of_max,
    # the oracle is the composite x * sigmoid(1.702 x), whose gradient is 0 * inf = NaN
    # where 1.702 x overflows; nbgrad's kernel gives the limit (1 at +inf, 0 at -inf)
    "gelu_quick": lambda x: ~(np.abs(x) < np.finfo(x.dtype).max / 2),
    # PyTorch's elu backward at NaN is g in its scalar loop and NaN in its vector loop
    # (tensors of 16+ float32 elements); nbgrad gives NaN throughout
    "elu": lambda x: np.isnan(x),
}
FORWARD_SKIP = {
    # PyTorch's float32 erf-gelu vector loop on AVX-512 hosts (tensors of 2+ elements)
    # overflows for x > max / 2: inf at x = max, NaN at +inf. Its scalar loop, its float64
    # loops and nbgrad give x Phi(x): max at max, inf at +inf.
    "gelu": lambda x: (x > np.finfo(x.dtype).max / 2) & (x.dtype == np.float32),
}
# float32 gelu evaluates 1 + erf(x / sqrt 2) (PyTorch) or 1 + tanh(..) (both), which cancel
# for negative x: absolute errors of about |x| ulp(1). gelu_quick's derivative
# s (1 + 1.702 x (1 - s)) cancels the same way near its zero at x = -0.75 (nbgrad 6.1819e-4
# against PyTorch's 6.1817e-4 at x = -0.74949).
ATOL = {("gelu", np.float32): 1e-6, ("gelu_tanh", np.float32): 1e-6,
        ("gelu_quick", np.float32): 1e-6}

POINTWISE = {
    "exp": (nb.exp, torch.exp),
    "log": (nb.log, torch.log),
    "sqrt": (nb.sqrt, torch.sqrt),
    "abs": (nb.abs, torch.abs),
    "neg": (nb.neg, torch.neg),
    "tanh": (nb.tanh, torch.tanh),
    "sigmoid": (nb.sigmoid, torch.sigmoid),
    "relu": (nb.relu, torch.relu),
    "leaky_relu": (lambda x: nb.leaky_relu(x, 0.2), lambda x: F.leaky_relu(x, 0.2)),
    "elu": (lambda x: nb.elu(x, 0.5), lambda x: F.elu(x, 0.5)),
    "gelu": (nb.gelu, F.gelu),
    "gelu_tanh": (lambda x: nb.gelu(x, approximate="tanh"),
                  lambda x: F.gelu(x, approximate="tanh")),
    "gelu_quick": (nb.gelu_quick, lambda x: x * torch.sigmoid(1.702 * x)),
    "silu": (nb.silu, F.silu),
    "softplus": (nb.softplus, F.softplus),
    "softplus_beta": (lambda x: nb.softplus(x, beta=2.0, threshold=5.0),
                      lambda x: F.softplus(x, beta=2.0, threshold=5.0)),
    "clamp": (lambda x: nb.clamp(x, -1.0, 2.0), lambda x: torch.clamp(x, -1.0, 2.0)),
    "clamp_min": (lambda x: nb.clamp(x, min=0.5), lambda x: torch.clamp(x, min=0.5)),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(POINTWISE))
@EXAMPLES
@given(data=st.data())
def test_pointwise_ops_match_pytorch_on_special_values(name, dtype, data):
    x = data.draw(special_arrays(dtype))
    nb_fn, torch_fn = POINTWISE[name]
    check_op(nb_fn, torch_fn, [x], name, grad_skip=GRAD_SKIP.get(name),
             atol=ATOL.get((name, dtype), 0.0), forward_skip=FORWARD_SKIP.get(name))


BOUNDS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0]


@pytest.mark.parametrize("dtype", DTYPES)
@EXAMPLES
@given(data=st.data(), lo=st.sampled_from(BOUNDS + [None]),
       hi=st.sampled_from(BOUNDS + [None]))
def test_clamp_with_special_bounds_matches_pytorch(dtype, data, lo, hi):
    if lo is None and hi is None:
        return
    x = data.draw(special_arrays(dtype))
    check_op(lambda t: nb.clamp(t, lo, hi), lambda t: torch.clamp(t, lo, hi), [x],
             f"clamp({lo}, {hi})")


@pytest.mark.parametrize("dtype", DTYPES)
@EXAMPLES
@given(data=st.data(), shapes=nbst.broadcastable_shapes(3, max_dims=3, max_side=3))
def test_clamp_with_special_tensor_bounds_matches_pytorch(dtype, data, shapes):
    # x of the broadcast shape: PyTorch's clamp backward fails when the bounds broadcast x
    x = data.draw(special_arrays(dtype, shape=np.broadcast_shapes(*shapes)))
    lo, hi = (data.draw(special_arrays(dtype, shape=s)) for s in shapes[1:])
    check_op(nb.clamp, torch.clamp, [x, lo, hi], "clamp(x, tensor, tensor)")


BINARY = ["add", "sub", "mul", "div", "pow"]


def summed_to(a, shape):
    """``a`` summed over the axes along which ``shape`` was broadcast to ``a.shape``."""
    lead = a.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + d for d, n in enumerate(shape)
                                      if n == 1 and a.shape[lead + d] != 1)
    return np.sum(a, axis=axes, keepdims=True).reshape(shape)


def broadcast_grad_scales(torch_fn, inputs):
    """Per input, the sum of |its element-wise gradients| over the axes it is broadcast
    along (PyTorch on operands expanded to the full shape): the rounding error any order
    of that reduction may make. NaN where finite terms have |terms| adding up past the
    dtype's largest value (x / tiny y): whether their sum overflows then depends on the
    order of the additions, which differs between the libraries."""
    shape = np.broadcast_shapes(*(x.shape for x in inputs))
    full = [torch.tensor(np.broadcast_to(x, shape).copy(), requires_grad=True)
            for x in inputs]
    torch_fn(*full).backward(torch.from_numpy(upstream(shape, inputs[0].dtype)))
    scales = []
    with np.errstate(over="ignore", invalid="ignore"):
        for f, x in zip(full, inputs):
            terms = f.grad.numpy()
            wide = summed_to(np.abs(terms).astype(np.longdouble), x.shape)
            order_dependent = ((wide > np.finfo(terms.dtype).max)
                               & (summed_to(~np.isfinite(terms), x.shape) == 0))
            scales.append(np.where(order_dependent, np.nan, summed_to(np.abs(terms), x.shape)))
    return scales


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", BINARY)
@EXAMPLES
@given(data=st.data(), shapes=nbst.broadcastable_shapes(2, max_dims=3, max_side=3))
def test_binary_ops_match_pytorch_on_special_values(name, dtype, data, shapes):
    # no values near the overflow threshold: a broadcast operand's gradient is a sum,
    # whose overflow would depend on the summation order
    a, b = (data.draw(special_arrays(dtype, huge=False, shape=s)) for s in shapes)
    torch_fn = getattr(torch, name)
    check_op(getattr(nb, name), torch_fn, [a, b], name,
             grad_scales=broadcast_grad_scales(torch_fn, [a, b]))


# -- reductions ------------------------------------------------------------------------------
def torch_dims(axis, ndim):
    """nbgrad's axis as PyTorch's dim (None: every dim, spelled out)."""
    return tuple(range(ndim)) if axis is None else axis


def slice_scale(x, axis, keepdim, per_element=False):
    """sum |x| over the reduced slices (mean: / n), shaped as the result: the size of the
    rounding error any summation order may make."""
    with np.errstate(over="ignore", invalid="ignore"):
        total = np.sum(np.abs(x.astype(np.float64)), axis=axis, keepdims=keepdim)
        if per_element:
            total = total / max(x.size // max(total.size, 1), 1)
    return total.astype(x.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["sum", "mean"])
@EXAMPLES
@given(data=st.data(), keepdim=st.booleans())
def test_sum_and_mean_match_pytorch_on_special_values(name, dtype, data, keepdim):
    x = data.draw(special_arrays(dtype, huge=False))
    axis = data.draw(nbst.reduction_axes(x.ndim))
    if axis == ():  # PyTorch reduces every dim for dim=(), NumPy and nbgrad none
        axis = None
    scale = slice_scale(x, axis, keepdim, per_element=name == "mean")
    check_op(lambda t: getattr(nb, name)(t, axis, keepdim),
             lambda t: getattr(torch, name)(t, torch_dims(axis, x.ndim), keepdim),
             [x], f"{name}(axis={axis}, keepdim={keepdim})", scale=scale)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["amax", "amin"])
@EXAMPLES
@given(data=st.data(), keepdim=st.booleans())
def test_amax_and_amin_match_pytorch_on_special_values(name, dtype, data, keepdim):
    x = data.draw(special_arrays(dtype))
    axis = data.draw(nbst.reduction_axes(x.ndim))
    if axis == ():
        axis = None
    check_op(lambda t: getattr(nb, name)(t, axis, keepdim),
             lambda t: getattr(torch, name)(t, torch_dims(axis, x.ndim), keepdim),
             [x], f"{name}(axis={axis}, keepdim={keepdim})")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["max", "min"])
@EXAMPLES
@given(data=st.data())
def test_max_and_min_of_everything_match_pytorch_on_special_values(name, dtype, data):
    x = data.draw(special_arrays(dtype))
    check_op(lambda t: getattr(t, name)(), lambda t: getattr(t, name)(), [x], f"{name}()")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["max", "min"])
@EXAMPLES
@given(data=st.data(), keepdim=st.booleans())
def test_max_and_min_over_a_dim_match_pytorch_on_special_values(name, dtype, data, keepdim):
    # values without repeats (and so without ties): which of several equal entries PyTorch
    # picks is not specified
    x = data.draw(nbst.arrays(dtype, max_dims=3, max_side=4, specials=True).filter(
        lambda a: len(np.unique(a[~np.isnan(a)])) == np.count_nonzero(~np.isnan(a))
        and not np.any(a == 0)))
    dim = data.draw(st.integers(-max(x.ndim, 1), max(x.ndim, 1) - 1))
    t, tt = nb_and_torch(x)
    (v, i), (tv, ti) = getattr(t, name)(dim, keepdim), getattr(tt, name)(dim, keepdim)
    assert_like_torch(v.numpy(), tv, f"{name}(dim={dim}) values")
    np.testing.assert_array_equal(i.numpy(), ti.numpy())
    g = upstream(tv.shape, x.dtype)
    v.backward(nb.tensor(g))
    tv.backward(torch.from_numpy(g))
    assert_like_torch(t.grad.numpy(), tt.grad, f"{name}(dim={dim}) grad")


@pytest.mark.parametrize("dtype", DTYPES)
@EXAMPLES
@given(data=st.data(), keepdim=st.booleans())
def test_logsumexp_matches_pytorch_on_special_values(dtype, data, keepdim):
    x = data.draw(special_arrays(dtype, huge=False))
    axis = data.draw(nbst.reduction_axes(x.ndim))
    if axis in ((), None) or x.ndim == 0:
        axis = tuple(range(x.ndim))
    check_op(lambda t: nb.logsumexp(t, axis, keepdim),
             lambda t: torch.logsumexp(t, axis, keepdim), [x],
             f"logsumexp(axis={axis}, keepdim={keepdim})")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@EXAMPLES
@given(data=st.data())
def test_softmax_family_matches_pytorch_on_special_values(name, dtype, data):
    x = data.draw(special_arrays(dtype, huge=False))
    dim = data.draw(st.integers(-max(x.ndim, 1), max(x.ndim, 1) - 1))
    # dx_i = y_i (g_i - sum_j g_j y_j) cancels to rounding error when g is constant over a
    # slice, a few ulps of max|g| (<= 1) whose exact value depends on the summation order.
    check_op(lambda t: getattr(nb, name)(t, dim), lambda t: getattr(torch, name)(t, dim),
             [x], f"{name}(dim={dim})", atol=4 * np.finfo(dtype).eps)


# -- losses ------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@EXAMPLES
@given(data=st.data(), shape=nbst.broadcastable_shapes(1, max_dims=3, max_side=4))
def test_mse_loss_matches_pytorch_on_special_values(reduction, dtype, data, shape):
    pred, target = (data.draw(special_arrays(dtype, shape=shape[0])) for _ in range(2))
    check_op(lambda p, t: nb.mse_loss(p, t, reduction),
             lambda p, t: F.mse_loss(p, t, reduction=reduction), [pred, target],
             f"mse_loss({reduction})")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@EXAMPLES
@given(data=st.data(), n=st.integers(1, 4), c=st.integers(1, 4))
def test_cross_entropy_matches_pytorch_on_special_values(reduction, dtype, data, n, c):
    logits = data.draw(special_arrays(dtype, huge=False, shape=(n, c)))
    target = np.array(data.draw(st.lists(st.integers(0, c - 1), min_size=n, max_size=n)))
    check_op(lambda x: nb.cross_entropy(x, target, reduction=reduction),
             lambda x: F.cross_entropy(x, torch.from_numpy(target), reduction=reduction),
             [logits], f"cross_entropy({reduction})")


# -- empty tensors -------------------------------------------------------------------------------
def with_a_zero(shape=(2, 3, 4)):
    """``shape`` with one dimension set to 0, for each dimension in turn."""
    return [shape[:k] + (0,) + shape[k + 1:] for k in range(len(shape))]


def check_empty(op, nb_fn, torch_fn, inputs, what):
    """PyTorch raises: nbgrad raises an error naming ``op``. Otherwise ``check_op``."""
    try:
        torch_fn(*[torch.tensor(x) for x in inputs])
    except (RuntimeError, IndexError, ValueError):
        with pytest.raises((RuntimeError, IndexError, ValueError, TypeError), match=op):
            nb_fn(*[nb.tensor(x, requires_grad=True) for x in inputs])
        return
    check_op(nb_fn, torch_fn, inputs, what)


def over(module, name, dim):
    """``module.name(x, dim)`` as a function of x."""
    fn = getattr(module, name)
    return lambda x: fn(x, dim)


def method(name, *args):
    """``x.name(*args)`` as a function of x (nbgrad and PyTorch tensors alike)."""
    return lambda x: getattr(x, name)(*args)


def first(fn):
    """The first of the pair ``fn`` returns (max(dim)'s values)."""
    return lambda x: fn(x)[0]


def mse(module, reduction):
    """``module.mse_loss`` with ``reduction``."""
    return lambda p, t: module.mse_loss(p, t, reduction=reduction)


ONE, BROADCAST, TWO = (lambda s: [s]), (lambda s: [s, s[1:]]), (lambda s: [s, s])
# (op named in errors, label, nbgrad function, PyTorch function, input shapes)
EMPTY_CASES = (
    [(name, name, *POINTWISE[name], ONE) for name in sorted(POINTWISE)]
    + [(name, f"{name} broadcast", getattr(nb, name), getattr(torch, name), BROADCAST)
       for name in BINARY]
    + [(name, f"{name}(dim={dim})", over(nb, name, dim),
        over(torch, name, (0, 1, 2) if dim is None else dim), ONE)
       for dim in [None, 0, 1, 2, (0, 2)]
       for name in ["sum", "mean", "amax", "amin", "logsumexp"]]
    + [(name, f"{name}(dim={dim})", over(nb, name, dim), over(torch, name, dim), ONE)
       for dim in [0, 1, 2, -1] for name in ["softmax", "log_softmax"]]
    + [(name, f"{name}(dim={dim}) values", first(method(name, dim)),
        first(method(name, dim)), ONE) for dim in [0, 1, 2, -1] for name in ["max", "min"]]
    + [(name, f"{name}()", method(name), method(name), ONE) for name in ["max", "min"]]
    + [("mse_loss", f"mse_loss({r})", mse(nb, r), mse(F, r), TWO)
       for r in ["mean", "sum", "none"]])


@pytest.mark.parametrize("shape", with_a_zero(), ids=str)
@pytest.mark.parametrize("case", EMPTY_CASES, ids=lambda c: c[1])
def test_empty_tensors_match_pytorch(case, shape):
    op, label, nb_fn, torch_fn, shapes = case
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in shapes(shape)]
    check_empty(op, nb_fn, torch_fn, inputs, f"{label} of shape {shape}")


@pytest.mark.parametrize("shape", [(0, 3), (2, 0), (0, 0)], ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_of_empty_logits_matches_pytorch(shape, reduction):
    target = np.zeros(shape[0], np.int64)
    logits = np.zeros(shape, np.float32)
    check_empty("cross_entropy", lambda x: nb.cross_entropy(x, target, reduction=reduction),
                lambda x: F.cross_entropy(x, torch.from_numpy(target), reduction=reduction),
                [logits], f"cross_entropy({reduction}) of shape {shape}")
