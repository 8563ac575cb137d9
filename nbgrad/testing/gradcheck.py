"""Finite-difference gradient checks (float64 central differences)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..autograd import grad as autograd_grad
from ..autograd import no_grad
from ..tensor import FLOAT_DTYPES, Tensor


class GradcheckError(AssertionError):
    """Analytic and numeric gradients disagree (the message names the worst element)."""


@dataclass
class InputReport:
    position: int
    shape: tuple[int, ...]
    max_abs_error: float
    max_rel_error: float
    worst_index: tuple[int, ...] | None
    analytic: float
    numeric: float
    passed: bool


def _outputs(result: Any) -> list[Tensor]:
    result = result if isinstance(result, tuple | list) else (result,)
    return [r for r in result if isinstance(r, Tensor) and r.dtype in FLOAT_DTYPES]


def _projection(fn: Callable, tensors: list, weights: list[np.ndarray] | None):
    """L(inputs) = sum_k <fn(inputs)_k, w_k>: a scalar that sees every output element with
    its own random weight (a plain sum would hide e.g. softmax's gradient)."""
    outs = _outputs(fn(*tensors))
    if weights is None:
        rng = np.random.default_rng(1234)
        weights = [rng.standard_normal(o.shape) for o in outs]
    total = None
    for o, w in zip(outs, weights):
        term = (o * Tensor._wrap(w.astype(o.dtype), None, 0)).sum()
        total = term if total is None else total + term
    return total, weights


def gradcheck_report(fn: Callable[..., Any], inputs: Sequence[Any], eps: float = 1e-6,
                     atol: float = 1e-5, rtol: float = 1e-3) -> list[InputReport]:
    """Compare the backward of ``fn`` with central differences for every floating-point
    input. Inputs are copied to float64; others (integer targets, None, graphs) pass
    through. Returns one report per differentiated input."""
    tensors: list = []
    checked: list[int] = []
    for i, x in enumerate(inputs):
        arr = x.data if isinstance(x, Tensor) else x
        if isinstance(arr, np.ndarray) and arr.dtype.kind == "f":
            tensors.append(Tensor(arr.astype(np.float64), requires_grad=True))
            checked.append(i)
        else:
            tensors.append(x)
    if not checked:
        raise ValueError("gradcheck: no floating-point input to differentiate")

    loss, weights = _projection(fn, tensors, None)
    if loss is None:
        raise ValueError("gradcheck: fn returned no floating-point tensor")
    wanted = [tensors[i] for i in checked]
    analytic = autograd_grad([loss], wanted) if loss.requires_grad else [None] * len(wanted)

    reports = []
    with no_grad():
        for pos, t, g in zip(checked, wanted, analytic):
            g = np.zeros(t.shape) if g is None else g.data
            numeric = np.empty(t.shape)
            flat = t.data.reshape(-1)
            for k in range(flat.size):
                original = flat[k]
                flat[k] = original + eps
                plus = _projection(fn, tensors, weights)[0].item()
                flat[k] = original - eps
                minus = _projection(fn, tensors, weights)[0].item()
                flat[k] = original
                numeric.reshape(-1)[k] = (plus - minus) / (2 * eps)
            reports.append(_compare(pos, g, numeric, atol, rtol))
    return reports


def _compare(position: int, analytic: np.ndarray, numeric: np.ndarray, atol: float,
             rtol: float) -> InputReport:
    abs_err = np.abs(analytic - numeric)
    rel_err = abs_err / np.maximum(np.abs(numeric), 1e-300)
    excess = abs_err - (atol + rtol * np.abs(numeric))
    bad = ~np.isfinite(analytic) | ~np.isfinite(numeric)
    excess = np.where(bad, np.inf, excess)
    if analytic.size == 0:
        return InputReport(position, analytic.shape, 0.0, 0.0, None, 0.0, 0.0, True)
    worst = np.unravel_index(int(np.argmax(excess)), analytic.shape)
    return InputReport(position, analytic.shape, float(np.max(abs_err)),
                       float(np.max(np.where(abs_err > atol, rel_err, 0.0))),
                       tuple(int(i) for i in worst), float(analytic[worst]),
                       float(numeric[worst]), bool(np.all(excess <= 0)))


def gradcheck(fn: Callable[..., Any], inputs: Sequence[Any], eps: float = 1e-6,
              atol: float = 1e-5, rtol: float = 1e-3) -> bool:
    """Raise ``GradcheckError`` unless every analytic gradient of ``fn`` matches central
    differences within ``atol + rtol * |numeric|``; return True otherwise."""
    for r in gradcheck_report(fn, inputs, eps, atol, rtol):
        if not r.passed:
            raise GradcheckError(
                f"gradcheck: input {r.position} (shape {r.shape}): worst element "
                f"{r.worst_index}: analytic {r.analytic:.10g} vs numeric {r.numeric:.10g} "
                f"(max abs error {r.max_abs_error:.3g}, atol={atol}, rtol={rtol})")
    return True
