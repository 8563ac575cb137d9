"""Reverse-mode autodiff: the backward engine, grad mode, hooks, anomaly detection and
version counters. The functional API (vjp, jvp, hvp, jacobian, hessian) composes ops, so
it lives above them in ``nbgrad/functional.py``; ``nbgrad`` makes it reachable as
``nbgrad.autograd.functional``, PyTorch's path."""

from .anomaly import detect_anomaly, is_anomaly_enabled, set_detect_anomaly
from .engine import backward, grad
from .grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled

__all__ = ["backward", "grad", "enable_grad", "is_grad_enabled", "no_grad",
           "set_grad_enabled", "detect_anomaly", "set_detect_anomaly", "is_anomaly_enabled"]
