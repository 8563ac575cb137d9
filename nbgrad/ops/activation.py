"""Activations and the softmax family: tanh sigmoid relu leaky_relu elu gelu gelu_quick silu
softplus clamp softmax log_softmax logsumexp.

PyTorch names and semantics; derivatives at kinks follow PyTorch
(docs/derivations.md#activations-and-their-kinks): relu' = 0 at 0, leaky_relu' =
negative_slope at 0, elu' = alpha at 0, clamp' = 1 on the closed
interval [min, max]. Inputs must be float32 or float64; the result has the input's dtype.
Kernels are in ``nbgrad/kernels/activation.py`` and ``nbgrad/kernels/softmax.py``; backward
passes use the saved output where the formula allows (tanh, sigmoid, relu, softmax,
log_softmax) and the input otherwise.

The point-wise ops with one kernel pair are one ``pointwise`` table entry each
(``ops/table.py``); gelu (dtype-dependent kernels, a saved-derivative fast path), clamp and
the softmax family are hand-written Functions. Every op has a ``vjp`` (second derivatives):
f'(x) written with nbgrad ops; relu, leaky_relu and clamp are piecewise linear, so theirs
is g times a constant mask (zero second derivative). gelu's f'(x) is the op
``gelu_derivative`` (the backward kernels with g = 1), whose own derivative, gelu''(x), is
written with exp and tanh.
"""

from __future__ import annotations

import math

import numpy as np

from ..function import Function, Sample, register
from ..kernels import activation as activation_kernels
from ..kernels import buffers
from ..kernels import softmax as softmax_kernels
from ..kernels.broadcast_sum import sum_to_shape
from ..kernels.strided_apply import broadcast_shapes
from ..runtime.jit import for_work
from ..tensor import Tensor, lift
from . import _args
from .elementwise import exp, to
from .table import flat as _flat
from .table import into as _into
from .table import pointwise


def _upstream(g: np.ndarray) -> np.ndarray:
    """The upstream gradient for a kernel taking a flat g of full size or of size 1: a
    broadcast scalar (every stride 0, as a sum's backward hands over) stays one element
    instead of being materialised."""
    if g.size > 1 and not any(g.strides):
        return np.full(1, g.flat[0], g.dtype)
    return _flat(g)


def _mask(condition: np.ndarray, dtype) -> Tensor:
    """A constant 0/1 Tensor of ``dtype``: the derivative of a piecewise-linear op."""
    return lift(condition.astype(dtype))


def _signed(rng, shape, low=0.2, high=2.0):
    """Samples with |x| in [low, high] of random sign: away from the kink at 0."""
    return rng.uniform(low, high, shape) * rng.choice([-1.0, 1.0], shape)


# -- tanh, sigmoid, relu -------------------------------------------------------------------------


def _smooth_samples(rng):
    yield Sample(rng.standard_normal((3, 4)), label="2-D")
    yield Sample(rng.standard_normal(5) * 3, label="1-D wide range")
    yield Sample(rng.standard_normal((2, 1, 3)), label="3-D")
    yield Sample(np.array(0.7), label="0-d")


def _kinked_samples(rng):
    yield Sample(_signed(rng, (3, 4)), label="2-D")
    yield Sample(_signed(rng, (2, 3, 2)), label="3-D")
    yield Sample(np.array(-0.5), label="0-d")


tanh = pointwise(
    "tanh", cls_name="Tanh", forward=activation_kernels.tanh_forward,
    backward=activation_kernels.tanh_backward, saves="output",
    derivative=lambda x, y: 1 - y * y, samples=_smooth_samples,
    doc="""tanh(x) = (e^x - e^-x) / (e^x + e^-x); backward g (1 - y^2) from the output.""")

sigmoid = pointwise(
    "sigmoid", cls_name="Sigmoid", forward=activation_kernels.sigmoid_forward,
    backward=activation_kernels.sigmoid_backward, saves="output",
    derivative=lambda x, y: y * (1 - y), samples=_smooth_samples,
    doc="""sigmoid(x) = 1 / (1 + e^-x); backward g y (1 - y) from the output.""")

relu = pointwise(
    "relu", cls_name="ReLU", forward=activation_kernels.relu_forward,
    backward=activation_kernels.relu_backward, saves="output",
    derivative=lambda x, y: _mask(~(y._data <= 0), y.dtype), samples=_kinked_samples,
    doc="""relu(x) = max(x, 0); derivative 1 for x > 0 and 0 for x <= 0 (0 at the kink); at
    NaN the gradient passes through, as in PyTorch.""")

_BACKWARDS_FROM_OUTPUT = {"relu": activation_kernels.relu_backward,
                          "tanh": activation_kernels.tanh_backward,
                          "sigmoid": activation_kernels.sigmoid_backward}


def gradient_before_activation(activation: str, g: np.ndarray, y: np.ndarray) -> np.ndarray:
    """dL/dz for y = activation(z), ``activation`` relu, tanh or sigmoid, from g = dL/dy
    and y, by the op's own backward kernel: the backward of a layer that applies its
    activation as it stores its output (ops/matmul.py: LinearActivation, ops/conv.py:
    Conv2dActivation)."""
    return _into(_BACKWARDS_FROM_OUTPUT[activation], y.shape, y.dtype, _flat(g), _flat(y))


# -- leaky_relu, elu ---------------------------------------------------------------------------


def _leaky_samples(rng):
    yield Sample(_signed(rng, (3, 4)), label="default slope")
    yield Sample(_signed(rng, (2, 5)), negative_slope=0.2, label="slope 0.2")
    yield Sample(_signed(rng, (4,)), negative_slope=-0.5, label="negative slope")


leaky_relu = pointwise(
    "leaky_relu", cls_name="LeakyReLU", forward=activation_kernels.leaky_relu_forward,
    backward=activation_kernels.leaky_relu_backward, saves="input",
    params={"negative_slope": 0.01},
    derivative=lambda x, y, negative_slope: lift(
        np.where(x._data > 0, 1.0, negative_slope).astype(x.dtype)),
    samples=_leaky_samples,
    doc="""x for x > 0, negative_slope * x otherwise; derivative negative_slope at x = 0.""")


def _elu_samples(rng):
    yield Sample(_signed(rng, (3, 4)), label="alpha 1")
    yield Sample(_signed(rng, (2, 3)), alpha=0.5, label="alpha 0.5")
    yield Sample(_signed(rng, (5,), 0.2, 4.0), alpha=2.0, label="alpha 2, wide")


def _elu_derivative(x: Tensor, y, alpha: float) -> Tensor:
    # alpha e^min(x, 0) on x <= 0 (clamp' = 1 there, inclusive: elu'' = alpha at 0), 1 above
    neg = _mask(~(x._data > 0), x.dtype)
    return (1 - neg) + neg * (alpha * exp(clamp(x, max=0.0)))


elu = pointwise(
    "elu", cls_name="ELU", forward=activation_kernels.elu_forward,
    backward=activation_kernels.elu_backward, saves="input", params={"alpha": 1.0},
    derivative=_elu_derivative, samples=_elu_samples,
    doc="""x for x > 0, alpha (e^x - 1) otherwise (through expm1); derivative alpha e^x for
    x <= 0 (alpha at 0, as PyTorch).""")


# -- gelu, gelu_quick, silu ---------------------------------------------------------------------


def _gelu_samples(rng):
    yield Sample(rng.standard_normal((3, 4)) * 2, label="exact")
    yield Sample(rng.standard_normal((2, 3)) * 2, approximate="tanh", label="tanh")
    yield Sample(rng.standard_normal(6) * 3, approximate="none", label="exact, 1-D")


def _gelu_backward_kernel(approximate: str, dtype):
    return activation_kernels.gelu_tanh_backward if approximate == "tanh" else (
        activation_kernels.gelu_backward_f32 if dtype == np.float32
        else activation_kernels.gelu_backward)


@register("gelu", samples=_gelu_samples)
class GELU(Function):
    @staticmethod
    def forward(ctx, x, approximate="none"):
        ctx.approximate = approximate
        if approximate == "none" and x.dtype == np.float32 and any(ctx.needs_input_grad):
            # the float32 forward is compute-bound: it also writes the derivative, and the
            # backward reads g and that one array (no second exp and erfcx)
            y = buffers.empty(x.shape, x.dtype)
            d = buffers.empty(x.shape, x.dtype)
            for_work(activation_kernels.gelu_forward_grad_f32, x.size)(
                _flat(x), y.reshape(-1), d.reshape(-1))
            ctx.saved_derivative = True
            ctx.save_for_backward(d)
            return y
        ctx.saved_derivative = False
        ctx.save_for_backward(x)
        kernel = activation_kernels.gelu_tanh_forward if approximate == "tanh" else (
            activation_kernels.gelu_forward_f32 if x.dtype == np.float32
            else activation_kernels.gelu_forward)
        return _into(kernel, x.shape, x.dtype, _flat(x))

    @staticmethod
    def backward(ctx, g):
        if ctx.saved_derivative:
            (d,) = ctx.saved_tensors
            return _into(activation_kernels.mul_saved, d.shape, d.dtype, _upstream(g),
                         d.reshape(-1))
        (x,) = ctx.saved_tensors
        return _into(_gelu_backward_kernel(ctx.approximate, x.dtype), x.shape, x.dtype,
                     _flat(g), _flat(x))

    @staticmethod
    def vjp(ctx, g):
        return g * GELUDerivative.apply(ctx.inputs[0], approximate=ctx.approximate)


def gelu(x, approximate: str = "none") -> Tensor:
    """gelu(x) = x Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2; derivative Phi(x) + x phi(x).
    ``approximate='tanh'``: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).

    float32 evaluates Phi as erfc(-x / sqrt 2) / 2 (relatively accurate for negative x,
    where PyTorch's 1 + erf cancels); float64 uses libm's erf."""
    x = _args.float_input("gelu", x)
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return GELU.apply(x, approximate=approximate)


_K_TANH = 0.7978845608028654          # sqrt(2 / pi)
_C_TANH = 0.044715
_INV_SQRT_2PI = 0.3989422804014327


def _gelu_second_derivative(x, approximate: str, exp, tanh):
    """gelu''(x) for |x| <= 40 (beyond, 0 in every float format), on ndarrays (exp, tanh
    from NumPy) or Tensors (nbgrad's). Exact: phi(x) (2 - x^2). tanh form, with
    u = k (x + c x^3), u' = k (1 + 3 c x^2), t = tanh u:
    (1 - t^2) (u' - x t u'^2 + 3 k c x^2)."""
    if approximate == "tanh":
        du = _K_TANH * (1 + 3 * _C_TANH * x * x)
        t = tanh(_K_TANH * (x + _C_TANH * x * x * x))
        return (1 - t * t) * (du - x * t * du * du + 3 * _K_TANH * _C_TANH * x * x)
    return exp(-0.5 * x * x) * _INV_SQRT_2PI * (2 - x * x)


@register("gelu_derivative", samples=_gelu_samples)
class GELUDerivative(Function):
    """gelu'(x) (what gelu's vjp multiplies g by): gelu's backward kernel with g = 1, so the
    same values as the first-order backward; its derivative gelu''(x) is written with
    exp/tanh (so gelu is differentiable any number of times)."""

    @staticmethod
    def forward(ctx, x, approximate="none"):
        ctx.approximate = approximate
        ctx.save_for_backward(x)
        return _into(_gelu_backward_kernel(approximate, x.dtype), x.shape, x.dtype,
                     np.ones(x.size, x.dtype), _flat(x))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        xc = np.clip(x, -40, 40)
        return g * _gelu_second_derivative(xc, ctx.approximate, np.exp, np.tanh).astype(
            x.dtype)

    @staticmethod
    def vjp(ctx, g):
        xc = clamp(ctx.inputs[0], -40.0, 40.0)
        return g * _gelu_second_derivative(xc, ctx.approximate, exp, tanh)


def _gelu_quick_derivative(x: Tensor, y) -> Tensor:
    s = sigmoid(1.702 * x)
    return s * (1 + 1.702 * x * (1 - s))


gelu_quick = pointwise(
    "gelu_quick", cls_name="GELUQuick", forward=activation_kernels.gelu_quick_forward,
    backward=activation_kernels.gelu_quick_backward, saves="input",
    derivative=_gelu_quick_derivative, samples=_smooth_samples,
    doc="""x sigmoid(1.702 x); derivative s (1 + 1.702 x (1 - s)), s = sigmoid(1.702 x).""")


def _silu_derivative(x: Tensor, y) -> Tensor:
    s = sigmoid(x)
    return s * (1 + x * (1 - s))


silu = pointwise(
    "silu", cls_name="SiLU", forward=activation_kernels.silu_forward,
    backward=activation_kernels.silu_backward, saves="input",
    derivative=_silu_derivative, samples=_smooth_samples,
    doc="""silu(x) = x sigmoid(x); derivative s (1 + x (1 - s)), s = sigmoid(x).""")


# -- softplus ------------------------------------------------------------------------------------


def _softplus_samples(rng):
    yield Sample(rng.standard_normal((3, 4)) * 2, label="default")
    yield Sample(rng.standard_normal((2, 3)), beta=2.0, label="beta 2")
    # 4.5 and 6.0 lie above threshold 2 (beta x = 9, 12): the linear branch
    yield Sample(np.array([-3.0, -0.4, 0.3, 0.8, 4.5, 6.0]), beta=2.0, threshold=2.0,
                 label="both branches")


def _softplus_derivative(x: Tensor, y, beta: float, threshold: float) -> Tensor:
    # the kernel's branch test, in x's dtype: 1 where beta x > threshold
    t = x.dtype.type
    linear = _mask(t(beta) * x._data > t(threshold), x.dtype)
    return linear + (1 - linear) * sigmoid(beta * x)


def _softplus_check(beta: float, threshold: float) -> None:
    if beta == 0:
        raise ValueError("softplus: beta must be non-zero")


softplus = pointwise(
    "softplus", cls_name="Softplus", forward=activation_kernels.softplus_forward,
    backward=activation_kernels.softplus_backward, saves="input",
    params={"beta": 1.0, "threshold": 20.0}, check=_softplus_check,
    derivative=_softplus_derivative, samples=_softplus_samples,
    doc="""log(1 + e^(beta x)) / beta, computed as (max(z, 0) + log1p(e^-|z|)) / beta with
    z = beta x; x itself where beta x > threshold (PyTorch's linear branch).
    Derivative sigmoid(beta x) (1 on the linear branch).""")


# -- clamp -------------------------------------------------------------------------------------


def _clamp_samples(rng):
    x = rng.uniform(-2, 2, (4, 5))
    x[np.abs(x - 0.5) < 0.1] = 0.2           # away from both bounds
    x[np.abs(x + 0.5) < 0.1] = -0.2
    yield Sample(x, lo=-0.5, hi=0.5, label="both bounds")
    yield Sample(x[:2], lo=-0.5, hi=np.inf, label="min only")
    yield Sample(x[2:], lo=-np.inf, hi=0.5, label="max only")


@register("clamp", samples=_clamp_samples)
class Clamp(Function):
    @staticmethod
    def forward(ctx, x, lo=-np.inf, hi=np.inf):
        ctx.min, ctx.max = lo, hi
        ctx.save_for_backward(x)
        return _into(activation_kernels.clamp_forward, x.shape, x.dtype, _flat(x), lo, hi)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return _into(activation_kernels.clamp_backward, x.shape, x.dtype, _flat(g), _flat(x),
                     ctx.min, ctx.max)

    @staticmethod
    def vjp(ctx, g):
        # piecewise linear: g times the constant mask [min <= x <= max] (as the kernel, in
        # x's dtype), zero second derivative
        (x,) = ctx.saved_tensors
        t = x.dtype.type
        return g * _mask((x >= t(ctx.min)) & (x <= t(ctx.max)), x.dtype)


def _clamp_tensor_samples(rng):
    lo = rng.uniform(-1.0, -0.3, (1, 4))
    hi = rng.uniform(0.3, 1.0, (3, 1))
    x = _signed(rng, (3, 4), 0.05, 2.0)
    x[np.abs(x - lo) < 0.05] += 0.1           # away from the bounds
    x[np.abs(x - hi) < 0.05] -= 0.1
    yield Sample(x, lo, hi, label="broadcast bounds")
    yield Sample(x, None, hi, label="max only")
    yield Sample(x[0], lo[0], None, label="min only")
    yield Sample(x, hi.T[:, :1] + 0.2, lo[:, :1].T - 0.2, label="min > max (all max)")


@register("clamp_tensor", samples=_clamp_tensor_samples)
class ClampTensor(Function):
    @staticmethod
    def forward(ctx, x, lo, hi):
        shape = x.shape
        for b in (lo, hi):
            if b is not None:
                shape = np.broadcast_shapes(shape, b.shape)
        full = [np.ascontiguousarray(np.broadcast_to(a, shape)).reshape(-1)
                for a in (x, np.full((), -np.inf, x.dtype) if lo is None else lo,
                          np.full((), np.inf, x.dtype) if hi is None else hi)]
        ctx.input_shapes = tuple(None if a is None else a.shape for a in (x, lo, hi))
        ctx.output_shape = shape
        ctx.save_for_backward(*full)
        return _into(activation_kernels.clamp_tensor_forward, shape, x.dtype, *full)

    @staticmethod
    def backward(ctx, g):
        grads = [np.empty(ctx.output_shape, g.dtype) for _ in range(3)]
        x, lo, hi = ctx.saved_tensors
        has_max = ctx.input_shapes[2] is not None
        for_work(activation_kernels.clamp_tensor_backward, g.size)(
            _flat(g), x, lo, hi, has_max, *(a.reshape(-1) for a in grads))
        return tuple(None if (s is None or not need) else sum_to_shape(gr, s)
                     for gr, s, need in zip(grads, ctx.input_shapes, ctx.needs_input_grad))

    @staticmethod
    def vjp(ctx, g):
        # the backward kernel's split of g, as constant masks of the broadcast shape (the
        # engine sums them to each input's shape): piecewise linear, zero second derivative
        x, lo, hi = (a.reshape(ctx.output_shape) for a in ctx.saved_tensors)
        has_max = ctx.input_shapes[2] is not None
        below = (x < lo) & (lo < hi) if has_max else x < lo  # clamp_min: no lo < hi
        masks = ((x >= lo) & (x <= hi), below, (x > hi) | (hi < lo))
        return tuple(None if (s is None or not need) else g * _mask(m, x.dtype)
                     for m, s, need in zip(masks, ctx.input_shapes, ctx.needs_input_grad))


def _clamp_bound(name: str, bound, x: Tensor) -> Tensor | None:
    if bound is None:
        return None
    b = lift(bound, x)
    if b.dtype != x.dtype:
        if b.requires_grad:
            raise TypeError(f"clamp: {name} is {b.dtype} but x is {x.dtype}; a bound that "
                            "requires grad must have x's dtype")
        b = Tensor._wrap(b._data.astype(x.dtype), None, 0)
    return b


def clamp(x, min=None, max=None) -> Tensor:
    """min(max(x, min), max) (so max wins where min > max, as PyTorch); a NaN in x or in a
    bound gives NaN (with zero gradient), as in PyTorch.

    Bounds are numbers or tensors broadcasting with x. The gradient goes to x where
    min <= x <= max (inclusive), to a tensor min where x < min < max, to a tensor max
    where x > max or max < min, summed over broadcast axes (PyTorch's rule). With one
    bound, PyTorch's clamp_min / clamp_max rules: x where x >= min (x <= max), min where
    x < min (max where x > max), so a min of +inf still gets the gradient."""
    x = _args.float_input("clamp", x)
    if min is None and max is None:
        raise ValueError("clamp: at least one of min and max must be given")
    if not isinstance(min, Tensor | np.ndarray) and not isinstance(max, Tensor | np.ndarray):
        lo = -np.inf if min is None else _args.real("clamp", "min", min)
        hi = np.inf if max is None else _args.real("clamp", "max", max)
        return Clamp.apply(x, lo=lo, hi=hi)
    lo, hi = _clamp_bound("min", min, x), _clamp_bound("max", max, x)
    shape = x.shape
    for name, b in (("min", lo), ("max", hi)):
        if b is not None:
            shape = broadcast_shapes(f"clamp ({name} with x)", shape, b.shape)
    return ClampTensor.apply(x, lo, hi)


# -- softmax, log_softmax, logsumexp ---------------------------------------------------------


def _rows_last(a: np.ndarray, axis: int) -> np.ndarray:
    """``a`` with ``axis`` moved last, as a C-contiguous [rows, a.shape[axis]] array."""
    if a.ndim == 0:
        a = a.reshape(1)
    moved = a if axis == a.ndim - 1 else np.moveaxis(a, axis, -1)  # moveaxis is costly
    return np.ascontiguousarray(moved).reshape(_n_rows(moved.shape), moved.shape[-1])


def _n_rows(shape: tuple) -> int:
    """Rows of an array of ``shape`` seen as [rows, shape[-1]] (explicit, so that a
    zero-length last axis still reshapes; math.prod, since np.prod of a tuple first
    builds an array)."""
    return math.prod(shape[:-1])


def _rows_into(kernel, shape: tuple, axis: int, dtype, *args) -> tuple[np.ndarray, np.ndarray]:
    """Run the row ``kernel(*args, out)`` (rows along ``axis``) into a new array of
    ``shape``; returns that array and the [rows, C] view the kernel wrote. With ``axis``
    last (the usual case) no copy is made and the result is NumPy-owned."""
    nd_shape = shape or (1,)
    moved = nd_shape[:axis] + nd_shape[axis + 1:] + (nd_shape[axis],)
    out = np.empty(moved, dtype)
    rows = out.reshape(_n_rows(moved), moved[-1])
    for_work(kernel, rows.size)(*args, rows)
    if not shape:
        return out.reshape(()), rows
    if axis == len(shape) - 1:
        return out, rows
    return np.ascontiguousarray(np.moveaxis(out, -1, axis)), rows


def _from_rows(rows: np.ndarray, shape: tuple, axis: int) -> np.ndarray:
    """The array of ``shape`` whose [rows, C] view (``axis`` last) is ``rows``: a row
    kernel's output as the op returned it (a view, for ``ctx.output``)."""
    if not shape:
        return rows.reshape(())
    moved = shape[:axis] + shape[axis + 1:] + (shape[axis],)
    return np.moveaxis(rows.reshape(moved), -1, axis)


def _softmax_samples(rng):
    yield Sample(rng.standard_normal((3, 5)), label="rows")
    yield Sample(rng.standard_normal((2, 4, 3)), axis=1, label="middle axis")
    yield Sample(rng.standard_normal((4, 2)) * 3, axis=0, label="axis 0")
    yield Sample(rng.standard_normal(7), label="1-D")


class _RowSoftmax(Function):
    """softmax or log_softmax along one axis (``dim``): a row kernel over x with that axis
    moved last (``forward_kernel(dtype)``), and a backward row kernel
    (``backward_kernel``) of g and the saved output rows."""

    @classmethod
    def forward(cls, ctx, x, axis=-1):
        ctx.dim = axis = axis % max(x.ndim, 1)
        y, rows = _rows_into(cls.forward_kernel(x.dtype), x.shape, axis, x.dtype,
                             _rows_last(x, axis))
        ctx.save_for_backward(rows)
        return y

    @classmethod
    def backward(cls, ctx, g):
        (y,) = ctx.saved_tensors
        return _rows_into(cls.backward_kernel, g.shape, ctx.dim, g.dtype,
                          _rows_last(g, ctx.dim), y)[0]

    @staticmethod
    def _output(ctx) -> Tensor:
        """The op's output as a node of the graph (for the vjps)."""
        return ctx.output(_from_rows(ctx.saved_tensors[0], ctx.input_arrays[0].shape,
                                     ctx.dim))


@register("softmax", samples=_softmax_samples)
class Softmax(_RowSoftmax):
    backward_kernel = softmax_kernels.softmax_backward

    @staticmethod
    def forward_kernel(dtype):
        return (softmax_kernels.softmax_forward_f32 if dtype == np.float32
                else softmax_kernels.softmax_forward)

    @classmethod
    def vjp(cls, ctx, g):
        y = cls._output(ctx)
        return y * (g - (g * y).sum(ctx.dim, keepdim=True))


def _cast_first(op: str, x, dtype) -> Tensor:
    """``x`` converted to ``dtype`` before the op (PyTorch's ``dtype=`` of softmax and
    log_softmax; the gradient flows back converted to x's dtype), or x itself, which must
    then be float."""
    if dtype is None:
        return _args.float_input(op, x)
    return to(lift(x), _args.float_dtype(op, dtype))


def softmax(x, dim: int | None = None, dtype=None, *, axis: int | None = None) -> Tensor:
    """e^(x - max) / sum(e^(x - max)) along ``dim`` (PyTorch) or ``axis`` (NumPy; one of
    the two, default -1); backward y (g - sum(g y)). ``dtype`` (float32 or float64)
    converts x first, as PyTorch: the result has that dtype and the gradient reaches x
    converted back to x's dtype."""
    x = _cast_first("softmax", x, dtype)
    d = _args.dim_arg("softmax", dim, axis, -1)
    return Softmax.apply(x, axis=_args.one_dim("softmax", d, x.shape, "axis"))


@register("log_softmax", samples=_softmax_samples)
class LogSoftmax(_RowSoftmax):
    backward_kernel = softmax_kernels.log_softmax_backward

    @staticmethod
    def forward_kernel(dtype):
        return softmax_kernels.log_softmax_forward

    @classmethod
    def vjp(cls, ctx, g):
        return g - exp(cls._output(ctx)) * g.sum(ctx.dim, keepdim=True)


def log_softmax(x, dim: int | None = None, dtype=None, *,
                axis: int | None = None) -> Tensor:
    """x - max - log(sum(e^(x - max))) along ``dim`` (PyTorch) or ``axis`` (NumPy; one of
    the two, default -1); backward g - e^y sum(g). ``dtype`` converts x first, as in
    ``softmax``."""
    x = _cast_first("log_softmax", x, dtype)
    d = _args.dim_arg("log_softmax", dim, axis, -1)
    return LogSoftmax.apply(x, axis=_args.one_dim("log_softmax", d, x.shape, "axis"))


def _logsumexp_samples(rng):
    yield Sample(rng.standard_normal((3, 4)), axis=(1,), keepdims=False, label="rows")
    yield Sample(rng.standard_normal((2, 3, 4)), axis=(0, 2), keepdims=True,
                 label="two axes, keepdims")
    yield Sample(rng.standard_normal((3, 2)) * 4, axis=(0, 1), keepdims=False, label="all")


def _kept_first(ndim: int, dim: tuple) -> tuple[int, ...]:
    """The permutation of x's axes that puts the kept ones first, the reduced ``dim``
    last."""
    return tuple(i for i in range(ndim) if i not in dim) + dim


def _keepdim_shape(shape: tuple, dim: tuple) -> tuple[int, ...]:
    return tuple(1 if i in dim else s for i, s in enumerate(shape))


@register("logsumexp", samples=_logsumexp_samples)
class LogSumExp(Function):
    @staticmethod
    def forward(ctx, x, axis=(), keepdims=False):
        perm = _kept_first(x.ndim, axis)
        kept = perm[:x.ndim - len(axis)]
        rows = math.prod(x.shape[i] for i in kept)
        cols = math.prod(x.shape[i] for i in axis)
        xt = np.ascontiguousarray(np.transpose(x, perm)).reshape(rows, cols)
        y = for_work(softmax_kernels.logsumexp_forward, xt.size)(xt)
        ctx.dim, ctx.input_shape = axis, x.shape
        ctx.save_for_backward(xt, y)
        ctx.output_shape = _keepdim_shape(x.shape, axis) if keepdims \
            else tuple(x.shape[i] for i in kept)
        return y.reshape(ctx.output_shape)

    @staticmethod
    def backward(ctx, g):
        xt, y = ctx.saved_tensors
        perm = _kept_first(len(ctx.input_shape), ctx.dim)
        gx = np.empty(tuple(ctx.input_shape[i] for i in perm), xt.dtype)
        for_work(softmax_kernels.logsumexp_backward, xt.size)(_flat(g), xt, y,
                                                               gx.reshape(xt.shape))
        inverse = np.argsort(perm)
        if np.array_equal(inverse, np.arange(len(inverse))):
            return gx
        return np.ascontiguousarray(np.transpose(gx, inverse))

    @staticmethod
    def vjp(ctx, g):
        keep = _keepdim_shape(ctx.input_shape, ctx.dim)
        out = ctx.output(ctx.saved_tensors[1].reshape(ctx.output_shape))
        return g.reshape(keep) * exp(ctx.inputs[0] - out.reshape(keep))


def logsumexp(x, dim=None, keepdim: bool | None = None, *, axis=None,
              keepdims: bool | None = None) -> Tensor:
    """log(sum(e^x)) over ``dim`` (PyTorch) or ``axis`` (NumPy): None for all axes, an int
    or a tuple; ``keepdim`` or ``keepdims`` keeps them as size 1. Shifted by the max (a +inf
    element gives +inf, an all -inf slice -inf, an empty one -inf, as PyTorch); backward
    g e^(x - y)."""
    x = _args.float_input("logsumexp", x)
    axis = _args.dim_arg("logsumexp", dim, axis)
    keepdims = _args.keepdim_arg("logsumexp", keepdim, keepdims)
    return LogSumExp.apply(x, axis=_args.axes("logsumexp", axis, x.shape), keepdims=keepdims)


__all__ = ["clamp", "elu", "gelu", "gelu_quick", "leaky_relu", "log_softmax", "logsumexp",
           "relu", "sigmoid", "silu", "softmax", "softplus", "tanh"]
