"""Adam and AdamW (PyTorch's ``torch.optim.Adam`` and ``torch.optim.AdamW``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..kernels.optim import adam_step
from ..runtime.jit import for_work
from .optimizer import FlatGroup, Optimizer, ParamsT, Work, check_number, check_numbers


def check_adam_numbers(owner: str, group: dict[str, Any]) -> None:
    """PyTorch's checks of an Adam-family group: lr, eps, both betas in [0, 1),
    weight_decay (ValueError in PyTorch's words, naming ``owner``)."""
    check_numbers(owner, group, lr="learning rate", eps="epsilon value")
    beta1, beta2 = _pair(owner, group["betas"])
    check_number(owner, "beta parameter at index 0", beta1, below=1.0)
    check_number(owner, "beta parameter at index 1", beta2, below=1.0)
    check_number(owner, "weight_decay value", group["weight_decay"])


class Adam(Optimizer):
    """Adam (PyTorch's formulas), for a parameter at its step t:

        d = g + weight_decay * p          (g negated first when maximize; with
                                           decoupled_weight_decay instead p = p (1 - lr wd))
        m = beta1 m + (1 - beta1) d        (as lerp(m, d, 1 - beta1))
        v = beta2 v + (1 - beta2) d^2,     v_max = max(v_max, v) (amsgrad)
        p = p - lr / (1 - beta1^t) * m / (sqrt(v or v_max) / sqrt(1 - beta2^t) + eps)

    State per parameter: ``step``, ``exp_avg``, ``exp_avg_sq``, ``max_exp_avg_sq``
    (amsgrad).
    """

    _counts_steps = True

    def __init__(self, params: ParamsT, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, amsgrad: bool = False, *, maximize: bool = False,
                 decoupled_weight_decay: bool = False):
        defaults = {"lr": lr, "betas": _pair(type(self).__name__, betas), "eps": eps,
                    "weight_decay": weight_decay, "amsgrad": amsgrad, "maximize": maximize,
                    "decoupled_weight_decay": decoupled_weight_decay}
        super().__init__(params, defaults)

    def _check_hyperparameters(self, group: dict[str, Any]) -> None:
        check_adam_numbers(type(self).__name__, group)

    def _state_names(self, group: dict[str, Any]) -> tuple[str, ...]:
        return ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if group["amsgrad"] else ())

    def _update(self, group: dict[str, Any], flat: FlatGroup, work: Work) -> None:
        beta1, beta2 = group["betas"]
        lr = float(group["lr"])
        step_size, bias_correction2_sqrt = bias_corrections(group, flat, work.active)
        kernel = for_work(adam_step, work.size)
        kernel(flat.views, work.grads, work.grad_start, work.chunk_param, work.chunk_begin,
               work.chunk_end, flat.state_start, flat.buffer("exp_avg"),
               flat.buffer("exp_avg_sq"), flat.buffer("max_exp_avg_sq"), step_size,
               bias_correction2_sqrt, lr, float(beta1), float(beta2), float(group["eps"]),
               float(group["weight_decay"]), bool(group["amsgrad"]),
               bool(group["maximize"]), bool(group["decoupled_weight_decay"]))


class AdamW(Adam):
    """AdamW: Adam with decoupled weight decay, p = p (1 - lr weight_decay) before the
    Adam step (PyTorch's ``torch.optim.AdamW``; default weight_decay 1e-2)."""

    def __init__(self, params: ParamsT, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, *,
                 maximize: bool = False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize,
                         decoupled_weight_decay=True)


def bias_corrections(group: dict[str, Any], flat: FlatGroup,
                     active: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per parameter of ``flat`` stepping (``active``), at its own step count t:
    lr / (1 - beta1^t) and sqrt(1 - beta2^t), with PyTorch's Python-float arithmetic."""
    beta1, beta2 = group["betas"]
    t = flat.steps[active]
    step_size = np.zeros(flat.steps.size)
    bias_correction2_sqrt = np.ones(flat.steps.size)
    step_size[active] = float(group["lr"]) / (1 - np.power(float(beta1), t))
    bias_correction2_sqrt[active] = np.power(1 - np.power(float(beta2), t), 0.5)
    return step_size, bias_correction2_sqrt


def _pair(owner: str, betas: Any) -> tuple[Any, Any]:
    """betas as a tuple of two."""
    if not isinstance(betas, tuple | list) or len(betas) != 2:
        raise TypeError(f"{owner}: betas must be a pair (beta1, beta2), got {betas!r}")
    return tuple(betas)
