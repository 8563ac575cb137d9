"""Element-wise choice between two operands: where, maximum, minimum (PyTorch semantics).

The three broadcast their operands the NumPy way. Dtypes promote as in ``concat``:
float64 over float32 over integers, and a Python number takes the other operand's dtype.
Each output element is one of the operand elements, chosen per element, so the backward
routes g to the chosen operand (``kernels/indexing.py``):

* ``where(condition, a, b)``: a where the (bool) condition holds, else b. dL/da is g
  where the condition holds and an exact 0 elsewhere (no 0 * inf = NaN); dL/db is the
  reverse.
* ``maximum(a, b)`` and ``minimum(a, b)``: the element-wise extremum. NaN propagates, and
  an element where either operand is NaN passes g to both operands. A tie splits g
  evenly, g/2 to each. Both conventions are PyTorch's.

The engine sums each full-size gradient over its operand's broadcast axes. The
gradients are linear in g with weights fixed by the data (piecewise linear ops), so
each vjp is a ``where`` of g, and the second derivatives with respect to a and b are
zero. Derivations: docs/derivations.md#selection-and-indexing-along-a-dim.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..function import Function, Sample, register
from ..kernels import indexing as kernels
from ..kernels.strided_apply import broadcast_shapes
from ..tensor import Tensor, lift
from ._args import promoted


def _operands(a: Any, b: Any) -> tuple[Tensor, Tensor]:
    """a and b as Tensors; a Python number takes the other operand's dtype (``lift``).
    Each keeps its own dtype here: forward computes in the promoted dtype
    (``promoted``) and the engine casts each gradient back to its operand's dtype."""
    a = lift(a, like=b if isinstance(b, Tensor) else None)
    return a, lift(b, like=a)


# -- where ------------------------------------------------------------------------------------
def _where_samples(rng):
    for sc, sa, sb in [((3, 4), (3, 4), (3, 4)), ((3, 1), (1, 4), (3, 4)),
                       ((2, 3), (), (2, 1, 3)), ((), (2, 2), (2,))]:
        yield Sample(np.asarray(rng.random(sc) > 0.5), np.asarray(rng.standard_normal(sa)),
                     np.asarray(rng.standard_normal(sb)), label=f"{sc} ? {sa} : {sb}")


@register("where", samples=_where_samples)
class Where(Function):
    @staticmethod
    def forward(ctx, condition, a, b):
        a, b = promoted(a, b)
        shape = broadcast_shapes("where", broadcast_shapes("where", condition.shape, a.shape),
                                 b.shape)
        return kernels.select(kernels.WHERE, condition, a, b, shape)

    @staticmethod
    def backward(ctx, g):
        _, need_a, need_b = ctx.needs_input_grad
        ga, gb = kernels.select_backward(kernels.WHERE, ctx.input_arrays[0], None, None, g,
                                         need_a, need_b)
        return None, ga, gb

    @staticmethod
    def vjp(ctx, g):
        condition = ctx.input_arrays[0]
        zero = np.zeros((), g.dtype)
        return None, Where.apply(condition, g, zero), Where.apply(condition, zero, g)


def where(condition: Any, a: Any, b: Any) -> Tensor:
    """``a`` where ``condition`` holds, else ``b`` (``torch.where``), all three broadcast
    together; ``condition`` is a bool tensor or array. Backward: g to a where the
    condition holds, to b elsewhere (an exact 0 for the other operand)."""
    mask = condition._data if isinstance(condition, Tensor) else np.asarray(condition)
    if mask.dtype != np.bool_:
        raise TypeError(f"where: condition must be a bool tensor, got {mask.dtype} "
                        f"(shape {mask.shape}); compare to make a mask, e.g. x > 0")
    a, b = _operands(a, b)
    return Where.apply(mask, a, b)


# -- maximum / minimum ------------------------------------------------------------------------
def _extremum_samples(rng):
    for sa, sb in [((3, 4), (3, 4)), ((1, 3), (4, 3)), ((3, 1), (1, 4)), ((), (2, 3))]:
        a = np.asarray(rng.standard_normal(sa))
        b = np.asarray(rng.standard_normal(sb))
        yield Sample(a, b, label=f"{sa} with {sb}")
        yield Sample(b, a, label=f"{sb} with {sa}")


class _Extremum(Function):
    """maximum and minimum: ``op`` is the kernels' op code (set by each subclass)."""

    op: int

    @classmethod
    def forward(cls, ctx, a, b):
        a, b = promoted(a, b)
        ctx.save_for_backward(a, b)
        shape = broadcast_shapes(cls.op_name, a.shape, b.shape)
        return kernels.select(cls.op, None, a, b, shape)

    @classmethod
    def backward(cls, ctx, g):
        a, b = ctx.saved_tensors
        need_a, need_b = ctx.needs_input_grad
        return kernels.select_backward(cls.op, None, a, b, g, need_a, need_b)

    @classmethod
    def vjp(cls, ctx, g):
        # g times the shares (1, 1/2 or 0: constants of the data), exactly 0 where a share
        # is 0; the shares are the backward kernel applied to g = 1
        a, b = ctx.saved_tensors
        ones = np.ones(g.shape, g.dtype)
        shares = kernels.select_backward(cls.op, None, a, b, ones, *ctx.needs_input_grad)
        zero = np.zeros((), g.dtype)
        return tuple(None if w is None else Where.apply(w != 0, g * lift(w), zero)
                     for w in shares)


@register("maximum", samples=_extremum_samples)
class Maximum(_Extremum):
    op = kernels.MAXIMUM


@register("minimum", samples=_extremum_samples)
class Minimum(_Extremum):
    op = kernels.MINIMUM


def maximum(a: Any, b: Any) -> Tensor:
    """The element-wise maximum of a and b, broadcast (``torch.maximum``). NaN if either
    is NaN. Backward: g to the larger operand; at a tie g/2 to each; where either is NaN,
    g to both (PyTorch)."""
    a, b = _operands(a, b)
    return Maximum.apply(a, b)


def minimum(a: Any, b: Any) -> Tensor:
    """The element-wise minimum of a and b, broadcast (``torch.minimum``); NaN, ties and
    the gradient as in ``maximum``."""
    a, b = _operands(a, b)
    return Minimum.apply(a, b)


class TensorMethods:
    """Tensor methods whose argument order differs from their function's (installed by
    ``nbgrad/ops/__init__.py``)."""

    @staticmethod
    def where(self: Tensor, condition: Any, other: Any) -> Tensor:
        """``x.where(condition, y)`` is ``where(condition, x, y)`` (``torch.Tensor.where``)."""
        return where(condition, self, other)


__all__ = ["maximum", "minimum", "where"]
