"""Matrix product with PyTorch's ``matmul`` semantics, forward and backward on the
register-tiled GEMM of kernels/matmul.py (Numba's thread pool, no BLAS).

For ``y = a @ b`` with a[..., M, K], b[..., K, N] and upstream gradient g[..., M, N]::

    da = g @ b^T      db = a^T @ g

each summed over the batch dims along which that operand was broadcast. A 1-D ``a`` is
a row (a 1 is prepended to its shape and removed from the result), a 1-D ``b`` a column
(a 1 is appended and removed), as in NumPy and PyTorch. Derivations:
docs/derivations.md#matrix-product.

``linear(x, W, b) = x @ W^T + b`` (PyTorch's ``nn.functional.linear``) is one op of its
own: one node instead of a transpose, a product and a sum, with ``dx = g @ W``,
``dW = g_rows^T @ x_rows`` and ``db`` the rows of g summed. Its bias is added by the
GEMM as it stores each sliver of rows of the product (kernels/matmul.py), not in a pass
of its own; ``LinearActivation``, which nb.compile uses, applies a relu, tanh or sigmoid
there too.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from ..function import Function, Sample, register
from ..kernels import matmul as matmul_kernels
from ..kernels.activation import ACTIVATIONS
from ..kernels.broadcast_sum import sum_to_shape
from ..runtime.threads import get_num_threads
from ..tensor import Tensor, lift
from ._args import promoted, promoted_dtype
from .activation import gradient_before_activation


def _rows(x: np.ndarray) -> np.ndarray:
    """``x[..., M, K]`` as one [prod(...) * M, K] matrix (a view when the layout allows)."""
    return x.reshape(math.prod(x.shape[:-1]), x.shape[-1])


def _c_stack(x: np.ndarray, transposed: bool) -> tuple[np.ndarray, bool]:
    """``x[..., R, C]`` as a C-contiguous stack [prod(...), ., .] and whether the kernel
    reads its matrices transposed: a view of x when x is C-contiguous, or of its
    transpose (flipping ``transposed``) when that is, else a C copy."""
    if not x.flags.c_contiguous:
        swapped = x.swapaxes(-1, -2)
        if swapped.flags.c_contiguous:
            x, transposed = swapped, not transposed
        else:
            x = np.ascontiguousarray(x)
    if x.ndim == 2:
        return x[np.newaxis], transposed
    return x.reshape((math.prod(x.shape[:-2]),) + x.shape[-2:]), transposed


@functools.lru_cache(maxsize=256)
def _batch_map(own: tuple, batch: tuple) -> np.ndarray:
    """For each of the ``prod(batch)`` output batches (row-major), the index of the
    operand batch (of shape ``own``, broadcast to ``batch``) that it reads; read-only,
    since a map depends on the shapes alone and is built once for them."""
    if own == batch:
        index = np.arange(math.prod(own))
    else:
        index = np.broadcast_to(np.arange(math.prod(own)).reshape(own), batch).ravel()
    index.flags.writeable = False
    return index


_ONE = _batch_map((), ())  # the batch map of one product


def _product(x: np.ndarray, y: np.ndarray, tx: bool, ty: bool, bias: np.ndarray | None = None,
             activation: int = 0) -> np.ndarray:
    """``op(x) @ op(y)`` over the broadcast batch dims of x and y (each at least 2-D),
    where op transposes the last two axes when ``tx`` / ``ty`` is set. For 2-D x and y,
    ``bias`` ([n], the product's dtype) is added to each row and then the ``activation``
    applied (kernels/matmul.py: ``product``'s epilogue)."""
    m = x.shape[-1] if tx else x.shape[-2]
    n = y.shape[-2] if ty else y.shape[-1]
    if x.ndim == y.ndim == 2:
        xs, tx = _c_stack(x, tx)
        ys, ty = _c_stack(y, ty)
        return matmul_kernels.product(xs, ys, _ONE, _ONE, tx, ty, get_num_threads(),
                                      bias=bias, activation=activation).reshape(m, n)
    bx, by = x.shape[:-2], y.shape[:-2]
    if not by and bx and not tx:
        # y is one matrix: x's batch folds into the rows of a single product.
        return _product(_rows(x), y, False, ty).reshape(bx + (m, n))
    batch = bx if bx == by else np.broadcast_shapes(bx, by)
    xs, tx = _c_stack(x, tx)
    ys, ty = _c_stack(y, ty)
    out = matmul_kernels.product(xs, ys, _batch_map(bx, batch), _batch_map(by, batch), tx, ty,
                                  get_num_threads())
    return out.reshape(batch + (m, n))


def _is_transposed_c(m: np.ndarray) -> bool:
    """Whether the matrix ``m`` is a transposed view of a C-contiguous one (and not C
    itself)."""
    return not m.flags.c_contiguous and m.T.flags.c_contiguous


def _matrices(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """a as a row matrix when 1-D, b as a column matrix when 1-D (views)."""
    return (a.reshape(1, -1) if a.ndim == 1 else a), (b.reshape(-1, 1) if b.ndim == 1 else b)


def _samples(rng):
    n = rng.standard_normal
    yield Sample(n(4), n(4), label="1-D . 1-D")
    yield Sample(n((3, 4)), n((4, 2)), label="2-D @ 2-D")
    yield Sample(n(4), n((4, 3)), label="1-D @ 2-D")
    yield Sample(n((3, 4)), n(4), label="2-D @ 1-D")
    yield Sample(n((2, 3, 4)), n((4, 2)), label="batched @ 2-D (folded)")
    yield Sample(n((3, 4)), n((2, 4, 2)), label="2-D @ batched")
    yield Sample(n((2, 1, 3, 4)), n((3, 4, 2)), label="broadcast batch dims")
    yield Sample(n(4), n((2, 4, 3)), label="1-D @ batched")
    yield Sample(n((2, 3, 4)), n(4), label="batched @ 1-D")


@register("matmul", samples=_samples)
class MatMul(Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.input_dtypes = (a.dtype, b.dtype)
        if a.dtype != b.dtype:
            a, b = promoted(a, b)
        ctx.save_for_backward(a, b)
        out = _product(*_matrices(a, b), False, False)
        if a.ndim == b.ndim == 2:
            return out
        keep = out.shape[:-2] + out.shape[-2:-1] * (a.ndim > 1) + out.shape[-1:] * (b.ndim > 1)
        return out.reshape(keep)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        a2, b2 = _matrices(a, b)
        m, n = a2.shape[-2], b2.shape[-1]
        # One C copy of g (e.g. a 0-stride broadcast from sum) serves both products.
        g = np.ascontiguousarray(g)
        g2 = g.reshape(g.shape[:max(a2.ndim, b2.ndim) - 2] + (m, n))
        ga = gb = None
        if ctx.needs_input_grad[0]:
            ga = sum_to_shape(_product(g2, b2, False, True), a2.shape)
            ga = ga.reshape(a.shape).astype(ctx.input_dtypes[0], copy=False)
        if ctx.needs_input_grad[1]:
            if b2.ndim == 2:
                # b is one matrix (shared by every batch: one GEMM over the folded batch
                # sums them). When b is the transpose of a C array (a layer's W.T), its
                # gradient a^T g is computed as (g^T a)^T, the same sums, so that the
                # transpose back to W is C-contiguous as W is.
                a_rows, g_rows = _rows(a2), _rows(g2)
                gb = (_product(g_rows, a_rows, True, False).T if _is_transposed_c(b2)
                      else _product(a_rows, g_rows, True, False))
            else:
                gb = sum_to_shape(_product(a2, g2, True, False), b2.shape)
            gb = gb.reshape(b.shape).astype(ctx.input_dtypes[1], copy=False)
        return ga, gb

    @staticmethod
    def vjp(ctx, g):
        a, b = ctx.inputs
        a2 = a if a.ndim > 1 else a.reshape(1, -1)
        b2 = b if b.ndim > 1 else b.reshape(-1, 1)
        batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
        g2 = g.reshape(batch + (a2.shape[-2], b2.shape[-1]))
        ga = gb = None
        if ctx.needs_input_grad[0]:
            ga = (g2 @ b2.transpose()).sum_to_size(a2.shape).reshape(a.shape)
        if ctx.needs_input_grad[1]:
            gb = (a2.transpose() @ g2).sum_to_size(b2.shape).reshape(b.shape)
        return ga, gb


def _shapes(a: Tensor, b: Tensor) -> str:
    """The operands' shapes for an error message (formatted only when one is raised)."""
    return f"a has shape {a.shape} and b {b.shape}"


def matmul(a: Any, b: Any) -> Tensor:
    """Matrix product ``a @ b`` with ``torch.matmul`` semantics.

    1-D . 1-D is the dot product (0-d result); 2-D @ 2-D the matrix product; a 1-D ``a``
    is a row and a 1-D ``b`` a column, the added dim removed from the result; N-D
    operands are stacks of matrices in the last two dims, with the batch dims broadcast
    (NumPy rules). float32 stays float32; float32 with float64 gives float64 (PyTorch's
    type promotion; ``torch.matmul`` itself refuses mixed dtypes). Backward:
    ``da = g @ b^T``, ``db = a^T @ g``, summed over the batch dims the operand was
    broadcast along.
    """
    a, b = lift(a), lift(b)
    x, y = a._data, b._data  # the checks read the arrays: a Tensor property is a call
    for name, t in (("a", x), ("b", y)):
        if t.dtype.kind != "f":
            raise TypeError(f"matmul: {name} has dtype {t.dtype} ({_shapes(a, b)}); matmul "
                            "needs float32 or float64 tensors")
        if t.ndim == 0:
            raise ValueError(f"matmul: {_shapes(a, b)}: both arguments need at least one dim")
    k_a, k_b = x.shape[-1], y.shape[-2] if y.ndim > 1 else y.shape[0]
    if k_a != k_b:
        raise ValueError(f"matmul: {_shapes(a, b)}: inner dimensions {k_a} and {k_b} differ")
    if x.ndim > 2 or y.ndim > 2:
        try:
            np.broadcast_shapes(x.shape[:-2], y.shape[:-2])
        except ValueError:
            raise ValueError(f"matmul: {_shapes(a, b)}: batch dimensions {x.shape[:-2]} and "
                             f"{y.shape[:-2]} do not broadcast") from None
    return MatMul.apply(a, b)


def _linear_samples(rng):
    n = rng.standard_normal
    yield Sample(n((3, 4)), n((2, 4)), n(2), label="rows with a bias")
    yield Sample(n((3, 4)), n((2, 4)), None, label="no bias")
    yield Sample(n((2, 3, 4)), n((5, 4)), n(5), label="batched rows")
    yield Sample(n(4), n((3, 4)), n(3), label="one vector")


@register("linear", samples=_linear_samples)
class Linear(Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        x, weight, bias = _linear_operands(x, weight, bias)
        ctx.save_for_backward(x, weight)
        y = _product(_rows(x), weight, False, True, bias)  # the bias added as it is stored
        return y.reshape(x.shape[:-1] + weight.shape[:1])

    @staticmethod
    def backward(ctx, g):
        x, weight = ctx.saved_tensors
        return _linear_grads(g, x, weight, ctx.needs_input_grad)

    @staticmethod
    def vjp(ctx, g):
        x, weight, _ = ctx.inputs
        g_rows = g.reshape(-1, weight.shape[0])
        need_x, need_w, need_b = ctx.needs_input_grad
        gx = (g_rows @ weight).reshape(x.shape) if need_x else None
        gw = g_rows.transpose() @ x.reshape(-1, x.shape[-1]) if need_w else None
        gb = g_rows.sum(0) if need_b else None
        return gx, gw, gb


def _linear_operands(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None) -> tuple:
    """x, weight and bias (C-contiguous, or None) in their promoted dtype."""
    arrays = (x, weight) if bias is None else (x, weight, bias)
    dtype = promoted_dtype(*(a.dtype for a in arrays))
    x, weight = x.astype(dtype, copy=False), weight.astype(dtype, copy=False)
    return x, weight, None if bias is None else np.ascontiguousarray(bias, dtype)


def _linear_grads(g: np.ndarray, x: np.ndarray, weight: np.ndarray, needs: tuple) -> tuple:
    """linear's input gradients (x, weight, bias; None where ``needs`` is False) from the
    upstream g [..., out]."""
    g_rows = np.ascontiguousarray(g).reshape(-1, weight.shape[0])
    need_x, need_w, need_b = needs[:3]
    gx = _product(g_rows, weight, False, False).reshape(x.shape) if need_x else None
    gw = _product(g_rows, _rows(x), True, False) if need_w else None
    gb = sum_to_shape(g_rows, weight.shape[:1]) if need_b else None
    return gx, gw, gb


class LinearActivation(Function):
    """``activation(linear(x, weight, bias))`` for relu, tanh or sigmoid as one op, which
    nb.compile puts in place of the two (compiler/patterns.py): the GEMM adds the bias
    and applies the activation to each sliver of rows as it stores it (kernels/matmul.py:
    ``product``'s epilogue). Its backward is the activation's kernel on the saved output
    and then linear's: the two ops' kernels in their order, so the same bits. Not in
    the op table (no vjp: nb.compile does not fold in a program that differentiates a
    backward)."""

    op_name = "linear_activation"

    @staticmethod
    def forward(ctx, x, weight, bias, activation):
        x, weight, bias = _linear_operands(x, weight, bias)
        y = _product(_rows(x), weight, False, True, bias, ACTIVATIONS[activation])
        ctx.save_for_backward(x, weight, y)
        return y.reshape(x.shape[:-1] + weight.shape[:1])

    @staticmethod
    def backward(ctx, g):
        x, weight, y = ctx.saved_tensors
        g_before = gradient_before_activation(ctx.params["activation"], g, y)
        return _linear_grads(g_before, x, weight, ctx.needs_input_grad)


def _linear_shapes(operands: dict) -> str:
    """The operands' shapes for an error message (formatted only when one is raised)."""
    return ", ".join(f"{name} has shape {t.shape}" for name, t in operands.items())


def linear(x: Any, weight: Any, bias: Any = None) -> Tensor:
    """``x @ weight^T + bias`` with ``torch.nn.functional.linear`` semantics: x[..., in],
    weight[out, in], bias[out] or None, the result [..., out]. Mixed float32 and float64
    give float64 (as ``matmul``). One op, whose backward is ``dx = g @ weight``,
    ``dweight = g^T @ x`` over all leading dims and ``dbias = g`` summed over them."""
    x, weight = lift(x), lift(weight)
    operands = {"x": x, "weight": weight}
    if bias is not None:
        operands["bias"] = bias = lift(bias)
    for name, t in operands.items():
        if t.dtype.kind != "f":
            raise TypeError(f"linear: {name} has dtype {t.dtype} ({_linear_shapes(operands)});"
                            " linear needs float32 or float64 tensors")
    if x.ndim == 0 or weight.ndim != 2 or x.shape[-1] != weight.shape[1]:
        raise ValueError(f"linear: {_linear_shapes(operands)}: x must be [..., in_features] "
                         "and weight [out_features, in_features]")
    if bias is not None and bias.shape != weight.shape[:1]:
        raise ValueError(f"linear: {_linear_shapes(operands)}: bias must be [out_features]")
    return Linear.apply(x, weight, bias)


__all__ = ["linear", "matmul"]
