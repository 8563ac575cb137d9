"""Activations and the softmax family: tanh sigmoid relu leaky_relu elu gelu gelu_quick silu
softplus clamp softmax log_softmax logsumexp.

PyTorch names and semantics; derivatives at kinks follow PyTorch (REFERENCE.md): relu' = 0
at 0, leaky_relu' = negative_slope at 0, elu' = alpha at 0, clamp' = 1 on the closed
interval [min, max]. Inputs must be float32 or float64; the result has the input's dtype.
Kernels are in ``nbgrad/kernels/activation.py``; backward passes use the saved output where
the formula allows (tanh, sigmoid, relu, softmax, log_softmax) and the input otherwise.
"""

from __future__ import annotations

import numpy as np

from ..function import Function, Sample, register
from ..kernels import activation as K
from ..kernels.broadcast import broadcast_shapes, sum_to_shape
from ..tensor import FLOAT_DTYPES, Tensor, lift


def _float_input(op: str, x) -> Tensor:
    x = lift(x)
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{op}: x must be float32 or float64, got {x.dtype} (shape {x.shape})")
    return x


def _real(op: str, name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise TypeError(f"{op}: {name} must be a real number, got {type(value).__name__}")
    return float(value)


def _flat(a: np.ndarray) -> np.ndarray:
    """A flat C-contiguous view (or copy, for strided and broadcast arrays) of ``a``."""
    return np.ascontiguousarray(a).reshape(-1)


def _upstream(g: np.ndarray) -> np.ndarray:
    """The upstream gradient for a kernel taking a flat g of full size or of size 1: a
    broadcast scalar (every stride 0, as a sum's backward hands over) stays one element
    instead of being materialised."""
    if g.size > 1 and not any(g.strides):
        return np.full(1, g.flat[0], g.dtype)
    return _flat(g)


def _into(kernel, shape: tuple, dtype, *args) -> np.ndarray:
    """A new NumPy array of ``shape``, filled by the flat element-wise ``kernel(*args, out)``
    (NumPy-owned, so the engine keeps a gradient returned this way without copying it)."""
    out = np.empty(shape, dtype)
    kernel(*args, out.reshape(-1))
    return out


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


@register("tanh", samples=_smooth_samples)
class Tanh(Function):
    @staticmethod
    def forward(ctx, x):
        y = _into(K.tanh_forward, x.shape, x.dtype, _flat(x))
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return _into(K.tanh_backward, y.shape, y.dtype, _flat(g), y.reshape(-1))


def tanh(x) -> Tensor:
    """tanh(x) = (e^x - e^-x) / (e^x + e^-x); backward g (1 - y^2) from the output."""
    return Tanh.apply(_float_input("tanh", x))


@register("sigmoid", samples=_smooth_samples)
class Sigmoid(Function):
    @staticmethod
    def forward(ctx, x):
        y = _into(K.sigmoid_forward, x.shape, x.dtype, _flat(x))
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return _into(K.sigmoid_backward, y.shape, y.dtype, _flat(g), y.reshape(-1))


def sigmoid(x) -> Tensor:
    """sigmoid(x) = 1 / (1 + e^-x); backward g y (1 - y) from the output."""
    return Sigmoid.apply(_float_input("sigmoid", x))


@register("relu", samples=_kinked_samples)
class ReLU(Function):
    @staticmethod
    def forward(ctx, x):
        y = _into(K.relu_forward, x.shape, x.dtype, _flat(x))
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return _into(K.relu_backward, y.shape, y.dtype, _flat(g), y.reshape(-1))


def relu(x) -> Tensor:
    """relu(x) = max(x, 0); derivative 1 for x > 0 and 0 for x <= 0 (0 at the kink)."""
    return ReLU.apply(_float_input("relu", x))


# -- leaky_relu, elu ---------------------------------------------------------------------------


def _leaky_samples(rng):
    yield Sample(_signed(rng, (3, 4)), label="default slope")
    yield Sample(_signed(rng, (2, 5)), negative_slope=0.2, label="slope 0.2")
    yield Sample(_signed(rng, (4,)), negative_slope=-0.5, label="negative slope")


@register("leaky_relu", samples=_leaky_samples)
class LeakyReLU(Function):
    @staticmethod
    def forward(ctx, x, negative_slope=0.01):
        ctx.negative_slope = negative_slope
        ctx.save_for_backward(x)
        return _into(K.leaky_relu_forward, x.shape, x.dtype, _flat(x), negative_slope)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return _into(K.leaky_relu_backward, x.shape, x.dtype, _flat(g), _flat(x),
                     ctx.negative_slope)


def leaky_relu(x, negative_slope: float = 0.01) -> Tensor:
    """x for x > 0, negative_slope * x otherwise; derivative negative_slope at x = 0."""
    x = _float_input("leaky_relu", x)
    return LeakyReLU.apply(x, negative_slope=_real("leaky_relu", "negative_slope",
                                                   negative_slope))


def _elu_samples(rng):
    yield Sample(_signed(rng, (3, 4)), label="alpha 1")
    yield Sample(_signed(rng, (2, 3)), alpha=0.5, label="alpha 0.5")
    yield Sample(_signed(rng, (5,), 0.2, 4.0), alpha=2.0, label="alpha 2, wide")


@register("elu", samples=_elu_samples)
class ELU(Function):
    @staticmethod
    def forward(ctx, x, alpha=1.0):
        ctx.alpha = alpha
        ctx.save_for_backward(x)
        return _into(K.elu_forward, x.shape, x.dtype, _flat(x), alpha)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return _into(K.elu_backward, x.shape, x.dtype, _flat(g), _flat(x), ctx.alpha)


def elu(x, alpha: float = 1.0) -> Tensor:
    """x for x > 0, alpha (e^x - 1) otherwise (through expm1); derivative alpha e^x for
    x <= 0 (alpha at 0, as PyTorch)."""
    return ELU.apply(_float_input("elu", x), alpha=_real("elu", "alpha", alpha))


# -- gelu, gelu_quick, silu ---------------------------------------------------------------------


def _gelu_samples(rng):
    yield Sample(rng.standard_normal((3, 4)) * 2, label="exact")
    yield Sample(rng.standard_normal((2, 3)) * 2, approximate="tanh", label="tanh")
    yield Sample(rng.standard_normal(6) * 3, approximate="none", label="exact, 1-D")


@register("gelu", samples=_gelu_samples)
class GELU(Function):
    @staticmethod
    def forward(ctx, x, approximate="none"):
        ctx.approximate = approximate
        if approximate == "none" and x.dtype == np.float32 and any(ctx.needs_input_grad):
            # the float32 forward is compute-bound: it also writes the derivative, and the
            # backward reads g and that one array (no second exp and erfcx)
            y = np.empty(x.shape, x.dtype)
            d = np.empty(x.shape, x.dtype)
            K.gelu_forward_grad_f32(_flat(x), y.reshape(-1), d.reshape(-1))
            ctx.saved_derivative = True
            ctx.save_for_backward(d)
            return y
        ctx.saved_derivative = False
        ctx.save_for_backward(x)
        kernel = K.gelu_tanh_forward if approximate == "tanh" else (
            K.gelu_forward_f32 if x.dtype == np.float32 else K.gelu_forward)
        return _into(kernel, x.shape, x.dtype, _flat(x))

    @staticmethod
    def backward(ctx, g):
        if ctx.saved_derivative:
            (d,) = ctx.saved_tensors
            return _into(K.mul_saved, d.shape, d.dtype, _upstream(g), d.reshape(-1))
        (x,) = ctx.saved_tensors
        kernel = K.gelu_tanh_backward if ctx.approximate == "tanh" else (
            K.gelu_backward_f32 if x.dtype == np.float32 else K.gelu_backward)
        return _into(kernel, x.shape, x.dtype, _flat(g), _flat(x))


def gelu(x, approximate: str = "none") -> Tensor:
    """gelu(x) = x Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2; derivative Phi(x) + x phi(x).
    ``approximate='tanh'``: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).

    float32 evaluates Phi as erfc(-x / sqrt 2) / 2 (relatively accurate for negative x,
    where PyTorch's 1 + erf cancels); float64 uses libm's erf."""
    x = _float_input("gelu", x)
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return GELU.apply(x, approximate=approximate)


@register("gelu_quick", samples=_smooth_samples)
class GELUQuick(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return _into(K.gelu_quick_forward, x.shape, x.dtype, _flat(x))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return _into(K.gelu_quick_backward, x.shape, x.dtype, _flat(g), _flat(x))


def gelu_quick(x) -> Tensor:
    """x sigmoid(1.702 x); derivative s (1 + 1.702 x (1 - s)), s = sigmoid(1.702 x)."""
    return GELUQuick.apply(_float_input("gelu_quick", x))


@register("silu", samples=_smooth_samples)
class SiLU(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return _into(K.silu_forward, x.shape, x.dtype, _flat(x))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return _into(K.silu_backward, x.shape, x.dtype, _flat(g), _flat(x))


def silu(x) -> Tensor:
    """silu(x) = x sigmoid(x); derivative s (1 + x (1 - s)), s = sigmoid(x)."""
    return SiLU.apply(_float_input("silu", x))


# -- softplus ------------------------------------------------------------------------------------


def _softplus_samples(rng):
    yield Sample(rng.standard_normal((3, 4)) * 2, label="default")
    yield Sample(rng.standard_normal((2, 3)), beta=2.0, label="beta 2")
    # 4.5 and 6.0 lie above threshold 2 (beta x = 9, 12): the linear branch
    yield Sample(np.array([-3.0, -0.4, 0.3, 0.8, 4.5, 6.0]), beta=2.0, threshold=2.0,
                 label="both branches")


@register("softplus", samples=_softplus_samples)
class Softplus(Function):
    @staticmethod
    def forward(ctx, x, beta=1.0, threshold=20.0):
        ctx.beta, ctx.threshold = beta, threshold
        ctx.save_for_backward(x)
        return _into(K.softplus_forward, x.shape, x.dtype, _flat(x), beta, threshold)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return _into(K.softplus_backward, x.shape, x.dtype, _flat(g), _flat(x), ctx.beta,
                     ctx.threshold)


def softplus(x, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + e^(beta x)) / beta, computed as (max(z, 0) + log1p(e^-|z|)) / beta with
    z = beta x; x itself where beta x > threshold (PyTorch's linear branch).
    Derivative sigmoid(beta x) (1 on the linear branch)."""
    x = _float_input("softplus", x)
    beta = _real("softplus", "beta", beta)
    if beta == 0:
        raise ValueError("softplus: beta must be non-zero")
    return Softplus.apply(x, beta=beta, threshold=_real("softplus", "threshold", threshold))


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
        ctx.lo, ctx.hi = lo, hi
        ctx.save_for_backward(x)
        return _into(K.clamp_forward, x.shape, x.dtype, _flat(x), lo, hi)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return _into(K.clamp_backward, x.shape, x.dtype, _flat(g), _flat(x), ctx.lo, ctx.hi)


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
        ctx.shapes = (x.shape, None if lo is None else lo.shape,
                      None if hi is None else hi.shape, shape)
        ctx.save_for_backward(*full)
        return _into(K.clamp_tensor_forward, shape, x.dtype, *full)

    @staticmethod
    def backward(ctx, g):
        xs, los, his, shape = ctx.shapes
        grads = [np.empty(shape, g.dtype) for _ in range(3)]
        K.clamp_tensor_backward(_flat(g), *ctx.saved_tensors, *(a.reshape(-1) for a in grads))
        return tuple(None if (s is None or not need) else sum_to_shape(gr, s)
                     for gr, s, need in zip(grads, (xs, los, his), ctx.needs_input_grad))


def _clamp_bound(name: str, bound, x: Tensor) -> Tensor | None:
    if bound is None:
        return None
    b = lift(bound, x)
    if b.dtype != x.dtype:
        if b.requires_grad:
            raise TypeError(f"clamp: {name} is {b.dtype} but x is {x.dtype}; a bound that "
                            "requires grad must have x's dtype")
        b = Tensor._wrap(b.data.astype(x.dtype), None, 0)
    return b


def clamp(x, min=None, max=None) -> Tensor:
    """min(max(x, min), max) (so max wins where min > max, as PyTorch); NaN stays NaN.

    Bounds are numbers or tensors broadcasting with x. The gradient goes to x where
    min <= x <= max (inclusive), to a tensor min where x < min < max, to a tensor max
    where x > max or max < min, summed over broadcast axes (PyTorch's rule)."""
    x = _float_input("clamp", x)
    if min is None and max is None:
        raise ValueError("clamp: at least one of min and max must be given")
    if not isinstance(min, Tensor | np.ndarray) and not isinstance(max, Tensor | np.ndarray):
        lo = -np.inf if min is None else _real("clamp", "min", min)
        hi = np.inf if max is None else _real("clamp", "max", max)
        return Clamp.apply(x, lo=lo, hi=hi)
    lo, hi = _clamp_bound("min", min, x), _clamp_bound("max", max, x)
    shape = x.shape
    for name, b in (("min", lo), ("max", hi)):
        if b is not None:
            shape = broadcast_shapes(f"clamp ({name} with x)", shape, b.shape)
    return ClampTensor.apply(x, lo, hi)


# -- softmax, log_softmax, logsumexp ---------------------------------------------------------


def _axis(op: str, axis, ndim: int, shape) -> int:
    if isinstance(axis, bool) or not isinstance(axis, int | np.integer):
        raise TypeError(f"{op}: axis must be an int, got {type(axis).__name__}")
    n = max(ndim, 1)
    if not -n <= axis < n:
        raise ValueError(f"{op}: axis {axis} is out of range for shape {shape}")
    return int(axis) % n


def _rows_last(a: np.ndarray, axis: int) -> np.ndarray:
    """``a`` with ``axis`` moved last, as a C-contiguous [rows, a.shape[axis]] array."""
    moved = np.moveaxis(np.atleast_1d(a), axis, -1)
    return np.ascontiguousarray(moved).reshape(_n_rows(moved.shape), moved.shape[-1])


def _n_rows(shape: tuple) -> int:
    """Rows of an array of ``shape`` seen as [rows, shape[-1]] (explicit, so that a
    zero-length last axis still reshapes)."""
    return int(np.prod(shape[:-1], dtype=np.int64))


def _rows_into(kernel, shape: tuple, axis: int, dtype, *args) -> tuple[np.ndarray, np.ndarray]:
    """Run the row ``kernel(*args, out)`` (rows along ``axis``) into a new array of
    ``shape``; returns that array and the [rows, C] view the kernel wrote. With ``axis``
    last (the usual case) no copy is made and the result is NumPy-owned."""
    nd_shape = shape or (1,)
    moved = nd_shape[:axis] + nd_shape[axis + 1:] + (nd_shape[axis],)
    out = np.empty(moved, dtype)
    rows = out.reshape(_n_rows(moved), moved[-1])
    kernel(*args, rows)
    if not shape:
        return out.reshape(()), rows
    if axis == len(shape) - 1:
        return out, rows
    return np.ascontiguousarray(np.moveaxis(out, -1, axis)), rows


def _softmax_samples(rng):
    yield Sample(rng.standard_normal((3, 5)), label="rows")
    yield Sample(rng.standard_normal((2, 4, 3)), axis=1, label="middle axis")
    yield Sample(rng.standard_normal((4, 2)) * 3, axis=0, label="axis 0")
    yield Sample(rng.standard_normal(7), label="1-D")


@register("softmax", samples=_softmax_samples)
class Softmax(Function):
    @staticmethod
    def forward(ctx, x, axis=-1):
        ctx.axis = axis = axis % max(x.ndim, 1)
        kernel = K.softmax_forward_f32 if x.dtype == np.float32 else K.softmax_forward
        y, rows = _rows_into(kernel, x.shape, axis, x.dtype, _rows_last(x, axis))
        ctx.save_for_backward(rows)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return _rows_into(K.softmax_backward, g.shape, ctx.axis, g.dtype,
                          _rows_last(g, ctx.axis), y)[0]


def softmax(x, axis: int = -1) -> Tensor:
    """e^(x - max) / sum(e^(x - max)) along ``axis``; backward y (g - sum(g y))."""
    x = _float_input("softmax", x)
    return Softmax.apply(x, axis=_axis("softmax", axis, x.ndim, x.shape))


@register("log_softmax", samples=_softmax_samples)
class LogSoftmax(Function):
    @staticmethod
    def forward(ctx, x, axis=-1):
        ctx.axis = axis = axis % max(x.ndim, 1)
        y, rows = _rows_into(K.log_softmax_forward, x.shape, axis, x.dtype,
                             _rows_last(x, axis))
        ctx.save_for_backward(rows)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return _rows_into(K.log_softmax_backward, g.shape, ctx.axis, g.dtype,
                          _rows_last(g, ctx.axis), y)[0]


def log_softmax(x, axis: int = -1) -> Tensor:
    """x - max - log(sum(e^(x - max))) along ``axis``; backward g - e^y sum(g)."""
    x = _float_input("log_softmax", x)
    return LogSoftmax.apply(x, axis=_axis("log_softmax", axis, x.ndim, x.shape))


def _logsumexp_samples(rng):
    yield Sample(rng.standard_normal((3, 4)), axis=(1,), keepdims=False, label="rows")
    yield Sample(rng.standard_normal((2, 3, 4)), axis=(0, 2), keepdims=True,
                 label="two axes, keepdims")
    yield Sample(rng.standard_normal((3, 2)) * 4, axis=(0, 1), keepdims=False, label="all")


@register("logsumexp", samples=_logsumexp_samples)
class LogSumExp(Function):
    @staticmethod
    def forward(ctx, x, axis=(), keepdims=False):
        kept = tuple(i for i in range(x.ndim) if i not in axis)
        perm = kept + tuple(axis)
        rows = int(np.prod([x.shape[i] for i in kept], dtype=np.int64))
        cols = int(np.prod([x.shape[i] for i in axis], dtype=np.int64))
        xt = np.ascontiguousarray(np.transpose(x, perm)).reshape(rows, cols)
        y = K.logsumexp_forward(xt)
        ctx.perm, ctx.xt_shape = perm, tuple(x.shape[i] for i in perm)
        ctx.save_for_backward(xt, y)
        out_shape = tuple(1 if i in axis else s for i, s in enumerate(x.shape)) if keepdims \
            else tuple(x.shape[i] for i in kept)
        return y.reshape(out_shape)

    @staticmethod
    def backward(ctx, g):
        xt, y = ctx.saved_tensors
        gx = np.empty(ctx.xt_shape, xt.dtype)
        K.logsumexp_backward(_flat(g), xt, y, gx.reshape(xt.shape))
        inverse = np.argsort(ctx.perm)
        if np.array_equal(inverse, np.arange(len(inverse))):
            return gx
        return np.ascontiguousarray(np.transpose(gx, inverse))


def logsumexp(x, axis=None, keepdims: bool = False) -> Tensor:
    """log(sum(e^x)) over ``axis`` (None: all axes; an int or a tuple), shifted by the max
    (a +inf element gives +inf, an all -inf slice -inf, an empty one -inf, as PyTorch);
    backward g e^(x - y)."""
    x = _float_input("logsumexp", x)
    if axis is None:
        axes = tuple(range(x.ndim))
    else:
        seq = tuple(axis) if isinstance(axis, tuple | list) else (axis,)
        axes = tuple(_axis("logsumexp", a, x.ndim, x.shape) for a in seq)
        if len(set(axes)) != len(axes):
            raise ValueError(f"logsumexp: axis {axis} repeats an axis (shape {x.shape})")
        if x.ndim == 0:
            axes = ()
    return LogSumExp.apply(x, axis=tuple(sorted(axes)), keepdims=bool(keepdims))


__all__ = ["clamp", "elu", "gelu", "gelu_quick", "leaky_relu", "log_softmax", "logsumexp",
           "relu", "sigmoid", "silu", "softmax", "softplus", "tanh"]
