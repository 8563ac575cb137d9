"""Anomaly detection: ``with nb.detect_anomaly():`` checks every op's forward outputs and
every backward gradient for NaN and inf, and raises at the first op that turned finite
values into non-finite ones, naming the op and the line of user code that called it.

Off by default; when off, an op call pays one attribute read. When on, each recorded op
keeps the call stack of its forward (for the backward's message), and each op's inputs
and outputs are scanned once.
"""

from __future__ import annotations

import os
import traceback
from typing import Any

import numpy as np

from .grad_mode import ModeSwitch

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _AnomalyState:
    enabled = False  # global, as PyTorch's: one switch for every thread


state = _AnomalyState()


def is_anomaly_enabled() -> bool:
    return state.enabled


class set_detect_anomaly(ModeSwitch):
    """Turn anomaly detection on or off (context manager or decorator)."""

    state = state


class detect_anomaly(set_detect_anomaly):
    """Raise at the first op whose forward output or backward gradient holds a NaN or inf
    that its finite inputs did not."""

    def __init__(self) -> None:
        super().__init__(True)


def _non_finite(array: Any) -> str | None:
    """'nan' or 'inf' if the float array holds one, else None."""
    if hasattr(array, "_node"):  # a Tensor (gradients under create_graph)
        array = array._data
    if not isinstance(array, np.ndarray) or array.dtype.kind != "f":
        return None
    if np.isnan(array).any():
        return "nan"
    if np.isinf(array).any():
        return "inf"
    return None


def _all_finite(arrays) -> bool:
    return all(a is None or _non_finite(a) is None for a in arrays)


def user_stack() -> list:
    """The calling frames outside the nbgrad package, innermost last."""
    frames = traceback.extract_stack()
    return [f for f in frames if not os.path.abspath(f.filename).startswith(_PACKAGE_DIR)]


def _where(stack: list | None) -> str:
    if not stack:
        return ""
    return "\nThe op was called at (innermost last):\n" + "".join(
        traceback.format_list(stack[-3:])).rstrip()


def check_forward(name: str, inputs: list, outputs: tuple) -> None:
    """Raise if an output of op ``name`` is non-finite while its inputs are finite."""
    for i, out in enumerate(outputs):
        found = _non_finite(out)
        if found is not None and _all_finite(inputs):
            raise RuntimeError(f"detect_anomaly: {name} produced {found} in its output {i} "
                               f"from finite inputs{_where(user_stack())}")


def check_backward(node: Any, grads: list, in_grads: tuple) -> None:
    """Raise if node's backward made a non-finite input gradient from finite output
    gradients and finite forward inputs."""
    for position, g in enumerate(in_grads):
        found = None if g is None else _non_finite(g)
        if found is None:
            continue
        if _all_finite(grads) and _all_finite(node.input_arrays):
            raise RuntimeError(
                f"detect_anomaly: the backward of {node.name} produced {found} in the "
                f"gradient of its input {position} from finite values"
                f"{_where(node.__dict__.get('creation_stack'))}")
