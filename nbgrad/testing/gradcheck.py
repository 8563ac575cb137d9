"""Finite-difference gradient checks (float64 central differences)."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..autograd import enable_grad, no_grad
from ..autograd import grad as autograd_grad
from ..autograd.versions import same_memory, saved_inputs
from ..function import Function
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


class _Projection(Function):
    """L = sum_k <y_k, w_k>, in plain NumPy so that gradcheck trusts no op it may be
    checking; dL/dy_k = w_k."""

    @staticmethod
    def forward(ctx, *outputs, weights):
        ctx.weights = weights
        return np.asarray(sum(float(np.vdot(y, w)) for y, w in zip(outputs, weights)))

    @staticmethod
    def backward(ctx, g):
        return tuple((g * w).astype(w.dtype) for w in ctx.weights)


def _projection(fn: Callable, tensors: list, weights: list[np.ndarray] | None):
    """L(inputs) = sum_k <fn(inputs)_k, w_k>: a scalar that sees every output element with
    its own random weight (a plain sum would hide e.g. softmax's gradient)."""
    outs = _outputs(fn(*tensors))
    if not outs:
        return None, weights
    if weights is None:
        rng = np.random.default_rng(1234)
        weights = [rng.standard_normal(o.shape).astype(o.dtype) for o in outs]
    return _Projection.apply(*outs, weights=weights), weights


def gradcheck_report(fn: Callable[..., Any], inputs: Sequence[Any], eps: float = 1e-6,
                     atol: float = 1e-5, rtol: float = 1e-3) -> list[InputReport]:
    """Compare the backward of ``fn`` with central differences for every floating-point
    input. Inputs are copied to float64; others (integer targets, None, graphs) pass
    through. Returns one report per differentiated input."""
    tensors: list = []
    checked: list[int] = []
    for i, x in enumerate(inputs):
        arr = x._data if isinstance(x, Tensor) else x
        if isinstance(arr, np.ndarray) and arr.dtype.kind == "f":
            # C order, so that the flat view below perturbs the tensor itself
            tensors.append(Tensor(np.array(arr, dtype=np.float64, order="C"),
                                  requires_grad=True))
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
            g = np.zeros(t.shape) if g is None else g._data
            numeric = np.empty(t.shape)
            flat = t._data.reshape(-1)
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


def gradgradcheck_report(fn: Callable[..., Any], inputs: Sequence[Any], eps: float = 1e-6,
                         atol: float = 1e-5, rtol: float = 1e-3) -> list[InputReport]:
    """Check second derivatives: gradcheck of the map (inputs, v) -> vjp of ``fn`` at the
    inputs with cotangents v (random, one per floating-point output), where the vjp is
    ``nb.grad(..., create_graph=True)``. Reports cover the inputs, then the v's."""
    arrays = [x._data if isinstance(x, Tensor) else x for x in inputs]
    floats = [i for i, a in enumerate(arrays) if isinstance(a, np.ndarray) and a.dtype.kind == "f"]
    with enable_grad():
        probe = [Tensor(arrays[i], np.float64) if i in floats else x
                 for i, x in enumerate(inputs)]
        outs = _outputs(fn(*probe))
    rng = np.random.default_rng(4321)
    cotangents = [np.asarray(rng.standard_normal(o.shape)) for o in outs]
    n = len(inputs)

    def first_derivative(*xs):
        with enable_grad():
            ys = _outputs(fn(*xs[:n]))
            wanted = [xs[i] for i in floats if xs[i].requires_grad]
            pairs = [(y, v) for y, v in zip(ys, xs[n:]) if y.requires_grad]
            if not pairs or not wanted:
                return ()
            grads = autograd_grad([y for y, _ in pairs], wanted,
                                  grad_outputs=[v for _, v in pairs], create_graph=True)
        return tuple(g for g in grads if g is not None)

    return gradcheck_report(first_derivative, list(inputs) + cotangents, eps, atol, rtol)


def gradgradcheck(fn: Callable[..., Any], inputs: Sequence[Any], eps: float = 1e-6,
                  atol: float = 1e-5, rtol: float = 1e-3) -> bool:
    """Raise ``GradcheckError`` unless the second derivatives of ``fn`` (through
    ``create_graph=True``) match central differences of its first derivatives."""
    return _passed("gradgradcheck", gradgradcheck_report(fn, inputs, eps, atol, rtol), atol,
                   rtol)


def _compare(position: int, analytic: np.ndarray, numeric: np.ndarray, atol: float,
             rtol: float) -> InputReport:
    abs_err = np.abs(analytic - numeric)
    rel_err = abs_err / np.maximum(np.abs(numeric), atol)  # relative where |numeric| > atol
    excess = abs_err - (atol + rtol * np.abs(numeric))
    bad = ~np.isfinite(analytic) | ~np.isfinite(numeric)
    excess = np.where(bad, np.inf, excess)
    if analytic.size == 0:
        return InputReport(position, analytic.shape, 0.0, 0.0, None, 0.0, 0.0, True)
    worst = np.unravel_index(int(np.argmax(excess)), analytic.shape)
    return InputReport(position, analytic.shape, float(np.max(abs_err)),
                       float(np.max(rel_err)),
                       tuple(int(i) for i in worst), float(analytic[worst]),
                       float(numeric[worst]), bool(np.all(excess <= 0)))


def gradcheck(fn: Callable[..., Any], inputs: Sequence[Any], eps: float = 1e-6,
              atol: float = 1e-5, rtol: float = 1e-3) -> bool:
    """Raise ``GradcheckError`` unless every analytic gradient of ``fn`` matches central
    differences within ``atol + rtol * |numeric|``; return True otherwise."""
    return _passed("gradcheck", gradcheck_report(fn, inputs, eps, atol, rtol), atol, rtol)


def _passed(check: str, reports: list[InputReport], atol: float, rtol: float) -> bool:
    """True if every report passed; else GradcheckError naming the first failing input's
    worst element."""
    for r in reports:
        if not r.passed:
            raise GradcheckError(
                f"{check}: input {r.position} (shape {r.shape}): worst element "
                f"{r.worst_index}: analytic {r.analytic:.10g} vs numeric {r.numeric:.10g} "
                f"(max abs error {r.max_abs_error:.3g}, atol={atol}, rtol={rtol})")
    return True


@dataclass
class OpReport:
    op: str
    samples: int
    max_abs_error: float
    max_rel_error: float
    failures: list[str]

    @property
    def passed(self) -> bool:
        return not self.failures


def sample_rng(op_name: str) -> np.random.Generator:
    """The generator an op's samples are drawn from: fixed per op name, so a failure
    reproduces."""
    return np.random.default_rng(zlib.crc32(op_name.encode()))


def check_registered(op_name: str, eps: float = 1e-6, atol: float = 1e-5,
                     rtol: float = 1e-3, second_order: bool = False) -> OpReport:
    """Gradcheck (or, with ``second_order``, gradgradcheck) the registered op ``op_name``
    through every one of its samples."""
    from ..function import REGISTRY

    op = REGISTRY[op_name]
    report_fn = gradgradcheck_report if second_order else gradcheck_report
    samples = list(op.samples(sample_rng(op_name)))
    report = OpReport(op_name, len(samples), 0.0, 0.0, [])
    if not samples:
        report.failures.append("no samples registered")
    for sample in samples:
        def call(*xs, _params=sample.params):
            return op.apply(*xs, **_params)
        try:
            results = report_fn(call, sample.inputs, eps, sample.atol or atol,
                                sample.rtol or rtol)
        except Exception as exc:  # a crash is a failure of this sample, reported by name
            report.failures.append(f"{sample!r}: {type(exc).__name__}: {exc}")
            continue
        for r in results:
            report.max_abs_error = max(report.max_abs_error, r.max_abs_error)
            report.max_rel_error = max(report.max_rel_error, r.max_rel_error)
            if not r.passed:
                report.failures.append(
                    f"{sample!r} input {r.position}: worst {r.worst_index} analytic "
                    f"{r.analytic:.8g} vs numeric {r.numeric:.8g}")
    return report


def sample_call(op_name: str) -> tuple[Callable[..., Any], list[Tensor]]:
    """The registered op ``op_name`` as a function of its first sample's inputs, and those
    inputs as tensors (float arrays as float64 tensors that require grad, anything else
    as given)."""
    from ..function import REGISTRY

    op = REGISTRY[op_name]
    sample = next(iter(op.samples(sample_rng(op_name))))
    inputs = [Tensor(np.asarray(x, np.float64), requires_grad=True)
              if isinstance(x, np.ndarray) and x.dtype.kind == "f" else x
              for x in sample.inputs]

    def call(*xs):
        return op.apply(*xs, **sample.params)

    return call, inputs


def saved_by(op_name: str) -> tuple[str, ...]:
    """Which of the op's inputs and outputs its forward saves for the backward, as the
    version check sees them (``"input 0"``, ``"output 0"``), on its first sample."""
    call, inputs = sample_call(op_name)
    with enable_grad():
        out = call(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    node = outs[0].grad_fn
    if node is None:
        return ()
    saved = [s for s in node.saved_tensors if isinstance(s, np.ndarray)]
    return (tuple(f"input {i}" for i in sorted(saved_inputs(node)))
            + tuple(f"output {k}" for k, t in enumerate(outs)
                    if any(same_memory(s, t._data) for s in saved)))
