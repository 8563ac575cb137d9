"""What the losses of ops/loss_regression.py and ops/loss_classification.py share: their
reduction (``reduction='mean'|'sum'|'none'``: float64 sums of fixed blocks, the factor
'mean' puts on every gradient, the upstream gradient as a kernel reads it) and the checks
of their targets and constant weights."""

from __future__ import annotations

import math

import numpy as np

from ..kernels import loss as loss_kernels
from ..runtime.jit import for_work
from ..tensor import Tensor, lift
from .table import flat as _flat

REDUCTIONS = ("mean", "sum", "none")


# float64 magnitudes from here up round to inf in float32: FLT_MAX plus half an ulp
_F32_OVERFLOW = (2 - 2.0**-24) * 2.0**127


def scalar_loss(total: float, dtype: np.dtype) -> np.ndarray:
    """A loss reduced in float64 as a 0-d array of ``dtype``: +-inf beyond its range (as
    PyTorch), without NumPy's overflow warning."""
    if dtype == np.float32 and abs(total) >= _F32_OVERFLOW:
        total = math.copysign(math.inf, total)
    return np.array(total, dtype=dtype)


def check_reduction(op: str, reduction) -> str:
    """``reduction`` if it is 'mean', 'sum' or 'none' (a ValueError naming ``op`` if not)."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"{op}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    return reduction


def divide(a: float, b: float) -> float:
    """a / b with IEEE semantics and no warning: b = 0 gives +-inf, or NaN for a = 0."""
    if b:
        return a / b
    if a != a or a == 0:
        return math.nan
    return math.copysign(math.inf, a) * math.copysign(1.0, b)


def mean_or_sum(total: float, reduction: str, count: float, dtype: np.dtype) -> np.ndarray:
    """A float64 ``total`` as the 0-d loss: itself ('sum') or total / count ('mean'; a
    zero count gives NaN, as PyTorch's division)."""
    if reduction == "mean":
        total = divide(float(total), float(count))
    return scalar_loss(float(total), dtype)


def reduced(loss: np.ndarray, reduction: str, count: float, dtype: np.dtype) -> np.ndarray:
    """Per-element ``loss`` as the op returns it: itself ('none'), or its float64 sum
    (fixed blocks, added in order), divided by ``count`` for 'mean'."""
    if reduction == "none":
        return loss
    return mean_or_sum(float64_sum(loss), reduction, count, dtype)


def float64_sum(a: np.ndarray) -> float:
    """The float64 sum of ``a``'s elements, in fixed blocks added in order."""
    flat = _flat(a)
    return for_work(loss_kernels.block_sum, flat.size)(flat, None)


def grad_scale(reduction: str, count: float) -> float:
    """The factor a reduction puts on every element's gradient: 1 / count for 'mean' (inf
    for a zero count: an empty or all-ignored loss), else 1."""
    return divide(1.0, float(count)) if reduction == "mean" else 1.0


def mean_factor(reduction: str, count: int) -> float:
    """The factor on a fused kernel's gradient: 1 / count for 'mean' (1 for an empty
    'mean', which has no element to scale), else 1."""
    return 1.0 / count if reduction == "mean" and count else 1.0


def upstream(g: np.ndarray, dtype: np.dtype) -> tuple[np.ndarray, int]:
    """The upstream gradient as a flat contiguous array and the step a kernel reads it
    with: 1 when full size ('none'), 0 when one element (a reduced loss)."""
    flat = np.ascontiguousarray(g, dtype=dtype).reshape(-1)
    return flat, (0 if flat.size == 1 else 1)


def target_like(op: str, x: Tensor, target, x_name: str = "input") -> Tensor:
    """A float target of ``x``'s shape, in ``x``'s dtype (a constant target is converted;
    one that requires grad must already have it)."""
    target = lift(target, x)
    if target.shape != x.shape:
        raise ValueError(f"{op}: {x_name} has shape {x.shape} but target has shape "
                         f"{target.shape}; they must match")
    if target.dtype != x.dtype:
        if target.requires_grad:
            raise TypeError(f"{op}: target is {target.dtype} but {x_name} is {x.dtype}; a "
                            f"target that requires grad must have {x_name}'s dtype")
        target = Tensor._wrap(target._data.astype(x.dtype), None, 0)
    return target


def constant_weight(op: str, name: str, value, x: Tensor) -> np.ndarray | None:
    """A weight argument (None, a number, array or Tensor) as an array of ``x``'s dtype;
    a TypeError for one that requires grad (PyTorch does not differentiate weights)."""
    if value is None:
        return None
    t = lift(value, x)
    if t.requires_grad:
        raise TypeError(f"{op}: {name} (shape {t.shape}) requires grad, but the loss is not "
                        f"differentiable with respect to {name} (as in PyTorch); detach it")
    if t.dtype.kind not in "biuf":
        raise TypeError(f"{op}: {name} must be real numbers, got {t.dtype} (shape {t.shape})")
    return np.asarray(t._data, dtype=x.dtype)


def broadcast_weight(op: str, name: str, value, x, error: type = ValueError
                     ) -> np.ndarray | None:
    """A weight that broadcasts to ``x``'s shape without enlarging it (None if not given);
    ``error`` (PyTorch's type for the op) otherwise."""
    w = constant_weight(op, name, value, x)
    if w is not None:
        try:
            fits = np.broadcast_shapes(w.shape, x.shape) == x.shape
        except ValueError:
            fits = False
        if not fits:
            raise error(f"{op}: {name} of shape {w.shape} does not broadcast to the "
                        f"input's shape {x.shape}")
    return w
