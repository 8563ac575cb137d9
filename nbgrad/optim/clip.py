"""Gradient clipping: ``clip_grad_norm_`` and ``clip_grad_value_`` (PyTorch's
``torch.nn.utils`` functions of the same names).

The total norm is, as in PyTorch, the norm of the vector of the gradients' norms. Each
gradient's norm is reduced from fixed chunks of CHUNK elements (partials in float64,
combined in chunk order), so it has the same bits at any thread count.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from ..kernels.optim import (
    NORM_COUNT,
    NORM_MAX,
    NORM_MIN,
    NORM_POWER,
    chunk_norm_partials,
    chunk_work,
)
from ..runtime.jit import for_work
from ..tensor import Tensor, tensor

TensorOrTensors = Tensor | Iterable[Tensor]


def clip_grad_norm_(parameters: TensorOrTensors, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False) -> Tensor:
    """Scale the gradients of ``parameters`` in place so that their total norm (of order
    ``norm_type``: any float, ``inf`` or ``-inf``) is at most ``max_norm``:
    g = g * min(max_norm / (total + 1e-6), 1). Returns the total norm before clipping, a
    0-d Tensor of the gradients' (promoted) dtype; float32 0 when no parameter has a
    gradient. ``error_if_nonfinite``: RuntimeError when the total norm is NaN or inf
    (otherwise the gradients are scaled by it anyway)."""
    grads = _grads(parameters)
    norm_type = float(norm_type)
    max_norm = float(max_norm)
    if not grads:
        return tensor(np.float32(0.0))
    dtype = np.result_type(*grads)
    total = dtype.type(_total_norm(grads, norm_type))
    if error_if_nonfinite and not np.isfinite(total):
        raise RuntimeError(f"clip_grad_norm_: the total norm of order {norm_type} of the "
                           "gradients is non-finite, so it cannot be clipped; to scale the "
                           "gradients by the non-finite norm anyway, set "
                           "error_if_nonfinite=False")
    # PyTorch: max_norm / (total + 1e-6) evaluated as reciprocal(total + 1e-6) * max_norm,
    # clamped to at most 1, all in the total's dtype.
    coef = np.reciprocal(total + dtype.type(1e-6)) * dtype.type(max_norm)
    coef = coef if coef != coef else min(coef, dtype.type(1))
    if coef != 1:  # g * 1 == g
        with np.errstate(invalid="ignore", over="ignore"):  # inf * 0 is NaN, as in PyTorch
            for g in grads:
                np.multiply(g, g.dtype.type(coef), out=g)
    return tensor(np.asarray(total))


def clip_grad_value_(parameters: TensorOrTensors, clip_value: float) -> None:
    """Clamp every gradient of ``parameters`` in place to [-clip_value, clip_value]
    (PyTorch: clamp_min then clamp_max, so a negative clip_value makes every element
    clip_value; NaN stays NaN)."""
    clip_value = float(clip_value)
    for g in _grads(parameters):
        np.clip(g, -clip_value, clip_value, out=g)


def _grads(parameters: TensorOrTensors) -> list[np.ndarray]:
    """The gradient arrays of the parameters that have one."""
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    for i, p in enumerate(params):
        if not isinstance(p, Tensor):
            raise TypeError(f"clip_grad: parameters must be Tensors, but parameters[{i}] is "
                            f"a {type(p).__name__}")
    return [p.grad._data for p in params if p.grad is not None]


def _norm_kind(norm_type: float) -> int:
    if norm_type == math.inf:
        return NORM_MAX
    if norm_type == -math.inf:
        return NORM_MIN
    return NORM_COUNT if norm_type == 0 else NORM_POWER


def _total_norm(grads: list[np.ndarray], norm_type: float) -> float:
    """The norm of the vector of the gradients' norms (each rounded to its gradient's
    dtype, as PyTorch computes it), in float64."""
    kind = _norm_kind(norm_type)
    norms = np.empty(len(grads))
    for dtype in {g.dtype for g in grads}:
        where = [i for i, g in enumerate(grads) if g.dtype == dtype]
        norms[where] = _tensor_norms([grads[i] for i in where], kind, norm_type)
    if kind == NORM_MAX:
        return float(norms.max())
    if kind == NORM_MIN:
        return float(norms.min())
    if kind == NORM_COUNT:
        return float(np.count_nonzero(norms))
    with np.errstate(divide="ignore"):  # 0^p = inf for p < 0, as in PyTorch
        return _root(float(np.sum(np.abs(norms) ** norm_type)), norm_type)


def _tensor_norms(grads: list[np.ndarray], kind: int, norm_type: float) -> np.ndarray:
    """Each gradient's norm (all of one dtype), from one kernel over fixed chunks whose
    partial results are combined in chunk order."""
    sizes = np.array([g.size for g in grads], np.int64)
    flat = np.concatenate([g.reshape(-1) for g in grads])
    chunk_param, chunk_begin, chunk_end = chunk_work(sizes)
    offset = (np.cumsum(sizes) - sizes)[chunk_param]
    kernel = for_work(chunk_norm_partials, flat.size)
    partials = kernel(flat, chunk_begin + offset, chunk_end + offset, kind, norm_type)
    bounds = np.searchsorted(chunk_param, np.arange(len(grads) + 1))
    norms = [_from_partials(partials[bounds[i]:bounds[i + 1]], kind, norm_type)
             for i in range(len(grads))]
    return np.array(norms, grads[0].dtype).astype(np.float64)


def _from_partials(partials: np.ndarray, kind: int, norm_type: float) -> float:
    """One gradient's norm from its chunks' sums |g|^p (-> sum^(1/p)), counts (-> sum),
    maxima or minima (NaN if any is NaN; an empty gradient's max is 0, its min inf)."""
    if kind == NORM_MAX:
        return float(partials.max()) if partials.size else 0.0
    if kind == NORM_MIN:
        return float(partials.min()) if partials.size else math.inf
    total = float(partials.sum())
    return total if kind == NORM_COUNT else _root(total, norm_type)


def _root(total: float, norm_type: float) -> float:
    """sum |x|^p -> sum^(1/p) (sqrt for p = 2)."""
    if norm_type == 1.0:
        return total
    if norm_type == 2.0:
        return math.sqrt(total)
    return total ** (1.0 / norm_type)
