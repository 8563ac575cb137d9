"""Binary element-wise ops on arrays: the evaluation behind the broadcasting entries of
``ops/elementwise.py`` (add, sub, mul, div, pow) and its op-coded unary ops.

``apply(op, u, v, shape)`` picks the cheapest kernel for f(u, v) over the broadcast
``shape``: the flat kernels of ``kernels/elementwise.py`` for operands of one shape or a
scalar operand, else ``strided_apply.broadcast_apply``, which reads strided and 0-stride
views in place. ``grad`` sums a gradient term over the axes an operand was broadcast
along (``kernels/broadcast_sum.py``): fused, so mul's ``grad_a = sum(g * b)`` never
materialises ``g * b``, and a 0-stride upstream ``g`` (from ``sum().backward()``) is read
in place. ``mul_grads`` gives both gradients of a product in one pass. Op codes are
those of ``strided_apply.binary_block``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..dtypes import default_numpy
from ..kernels import broadcast_sum, strided_apply
from ..kernels import elementwise as K
from ..runtime.jit import PARALLEL_MIN

_F64 = np.dtype(np.float64)


def float_dtype(da: np.dtype, db: np.dtype) -> np.dtype:
    """The dtype a binary op with at least one float operand computes in: the wider float
    (PyTorch)."""
    if da.kind == "f":
        return da if db.kind != "f" or da.itemsize >= db.itemsize else db
    return db


def same_shape(op: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """f(u, v) for operands of one shape and float dtype: the flat kernels when both
    are contiguous, else the broadcasting kernel, which reads strided and 0-stride views
    in place."""
    if not (u.flags.c_contiguous and v.flags.c_contiguous):
        u, v = strided_apply.c_order_view(u), strided_apply.c_order_view(v)
        if not (u.flags.c_contiguous and v.flags.c_contiguous):
            return strided_apply.broadcast_apply(op, u, v, u.shape)
    out = np.empty(u.shape, u.dtype)
    flat = out
    if u.ndim != 1:
        u, v, flat = u.reshape(-1), v.reshape(-1), out.reshape(-1)
    (K.binary_parallel if u.size >= PARALLEL_MIN else K.binary)(op, u, v, flat)
    return out


def _with_scalar(op: int, x: np.ndarray, s: np.ndarray, scalar_first: bool) -> np.ndarray:
    """f(x, s) (or f(s, x)) for contiguous ``x`` and a one-element ``s``."""
    out = np.empty(x.shape, x.dtype)
    (K.binary_scalar_parallel if x.size >= PARALLEL_MIN else K.binary_scalar)(
        op, x.reshape(-1), s.reshape(-1)[0], out.reshape(-1), scalar_first)
    return out


def apply(op: int, u: np.ndarray, v: np.ndarray, shape: tuple) -> np.ndarray:
    """f(u, v) over the broadcast ``shape`` (u, v of one float dtype): the flat kernels
    for equal shapes or a scalar operand, else the broadcasting kernel."""
    if not (u.flags.c_contiguous and v.flags.c_contiguous):
        if _one_value(u) or _one_value(v):
            return _with_one_value(op, u, v, shape)
        u, v = strided_apply.c_order_view(u), strided_apply.c_order_view(v)
    if u.shape == shape:
        if v.shape == shape:
            return same_shape(op, u, v)
        if v.size == 1 and u.size and u.flags.c_contiguous:
            return _with_scalar(op, u, v, False)
    elif v.shape == shape and u.size == 1 and v.size and v.flags.c_contiguous:
        return _with_scalar(op, v, u, True)
    return strided_apply.broadcast_apply(op, u, v, shape)


def _one_value(a: np.ndarray) -> bool:
    """Whether ``a`` is one value repeated (every stride 0, more than one element): the
    gradient a full sum or mean hands its input (a 0-stride view)."""
    return a.size > 1 and not any(a.strides)


def _with_one_value(op: int, u: np.ndarray, v: np.ndarray, shape: tuple) -> np.ndarray:
    """f(u, v) where u or v is one value repeated (its own shape broadcasting to
    ``shape``): f of that value and the other operand at the other operand's own shape,
    then repeated over ``shape``. Each element is the same IEEE operation as over the
    broadcast, without planning a strided loop over a 0-stride operand (the gradient a
    full ``sum`` hands its input is such a value; docs/benchmarks.md#element-wise)."""
    ones = (1,) * len(shape)
    if _one_value(u):
        u = u[(0,) * u.ndim].reshape(ones)
    else:
        v = v[(0,) * v.ndim].reshape(ones)
    part = apply(op, u, v, np.broadcast_shapes(u.shape, v.shape))
    return part if part.shape == shape else np.array(np.broadcast_to(part, shape), order="C")


def unary(op: int, x: np.ndarray) -> np.ndarray:
    if not x.flags.c_contiguous:
        x = np.array(x, order="C")
    out = np.empty(x.shape, x.dtype)
    if x.size >= PARALLEL_MIN:
        K.unary_parallel(op, x.reshape(-1), out.reshape(-1))
    else:
        K.unary(op, x.reshape(-1), out.reshape(-1))
    return out


def grad(op: int, g: np.ndarray, w: np.ndarray | None, x: np.ndarray,
          scale: float = 1.0) -> np.ndarray:
    """Gradient of input ``x``: scale * f(g, w) summed over the axes ``x`` was broadcast
    along (f = COPY ignores ``w``), in ``x``'s dtype."""
    if w is not None and w.dtype != g.dtype:
        w = w.astype(g.dtype)
    if x.shape == g.shape and scale == 1.0:
        r = g if w is None else apply(op, g, w, g.shape)
    else:
        r = broadcast_sum.reduce_term(op, g, w, x.shape, scale, g.shape)
    return r if r.dtype == x.dtype else r.astype(x.dtype)


def _mul_grads_same(g: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple | None:
    """(g * b, g * a) when g, a, b share one shape and one dtype; None otherwise.

    Below ``PARALLEL_MIN`` elements these are NumPy's two products (the engine runs
    backward with NumPy's warnings off): from 16K elements its two vectorised passes
    take as long as one fused serial pass, and below that a call costs less than the
    fused kernel's checks and allocations (docs/benchmarks.md#element-wise). Larger
    contiguous operands take one parallel pass."""
    if not g.dtype == a.dtype == b.dtype:
        return None
    if g.size < PARALLEL_MIN:
        return g * b, g * a
    if not (g.flags.c_contiguous and a.flags.c_contiguous and b.flags.c_contiguous):
        return None
    grad_a = np.empty(g.shape, g.dtype)
    grad_b = np.empty(g.shape, g.dtype)
    K.mul_grads_parallel(g.reshape(-1), a.reshape(-1), b.reshape(-1), grad_a.reshape(-1),
                         grad_b.reshape(-1))
    return grad_a, grad_b


def mul_grads(g: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple | None:
    """Both gradients of a * b, (sum(g * b), sum(g * a)), in one pass: over same-shape
    operands, or over the full-size operand when the other is broadcast over its leading
    axes (a bias, a scale); None when neither fits."""
    if a.shape == b.shape == g.shape:
        return _mul_grads_same(g, a, b)
    fused = broadcast_sum.mul_grads(g, a, b)
    if fused is None:
        swapped = broadcast_sum.mul_grads(g, b, a)
        fused = None if swapped is None else swapped[::-1]
    return fused


def negated(g: np.ndarray, shape: tuple) -> np.ndarray:
    """-g summed to ``shape`` in one pass (the engine casts the dtype)."""
    if g.shape == shape:  # nothing to sum (a strided g is copied to C order by unary)
        return unary(K.NEG, g)
    return broadcast_sum.reduce_term(strided_apply.COPY, g, None, shape, -1.0, g.shape)


def forward_of(name: str, op: int) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """The forward ``f(a, b)`` of the op ``name`` (code ``op``) over the broadcast shape,
    for operands of any dtypes (promoted as the module docstring of ``ops/elementwise.py``
    says); a closure, so that the hot path is one call."""
    def forward(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if a.dtype == b.dtype and a.dtype.kind == "f":
            if a.shape == b.shape:
                return same_shape(op, a, b)
            return apply(op, a, b, strided_apply.broadcast_shapes(name, a.shape, b.shape))
        return _promoted(name, op, a, b)
    return forward


def _promoted(name: str, op: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """f(a, b) for operands of two dtypes or of no float dtype."""
    shape = strided_apply.broadcast_shapes(name, a.shape, b.shape)
    if op == strided_apply.SUB and "b" in (a.dtype.kind, b.dtype.kind):
        raise TypeError(f"sub: subtraction with a bool operand ({a.dtype} - {b.dtype}) is "
                        "not supported (as in PyTorch); use logical operations on masks")
    if a.dtype.kind == "f" or b.dtype.kind == "f":
        dt = float_dtype(a.dtype, b.dtype)
        return apply(op, a.astype(dt, copy=False), b.astype(dt, copy=False), shape)
    if op == strided_apply.DIV:  # true division: float64 quotient in the default dtype
        return apply(op, a.astype(_F64), b.astype(_F64), shape).astype(default_numpy())
    return _integer_pair(name, op, a, b)


_INTEGER_UFUNCS = {strided_apply.ADD: np.add, strided_apply.SUB: np.subtract,
                   strided_apply.MUL: np.multiply, strided_apply.POW: np.power}


def _integer_pair(name: str, op: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """f(a, b) for integer or bool operands, in integers (wrapping on overflow, as
    PyTorch), in NumPy's result dtype."""
    if op == strided_apply.POW:
        if a.dtype.kind == b.dtype.kind == "b":
            raise TypeError(f"{name}: not supported for two bool operands (as in PyTorch)")
        if b.size and b.min() < 0:
            raise ValueError(f"{name}: integers to negative integer powers are not allowed "
                             f"(the exponent holds {b.min()}); use a float base or exponent")
    return np.asarray(_INTEGER_UFUNCS[op](a, b))

