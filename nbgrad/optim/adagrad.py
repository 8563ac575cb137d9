"""Adagrad (PyTorch's ``torch.optim.Adagrad``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..kernels.optim import adagrad_step
from ..runtime.jit import for_work
from .optimizer import FlatGroup, Optimizer, ParamsT, Work, check_numbers


class Adagrad(Optimizer):
    """Adagrad (PyTorch's formulas), for a parameter at its step t:

        d = g + weight_decay * p          (g negated first when maximize)
        sum = sum + d^2                   (sum starts at initial_accumulator_value)
        p = p - lr / (1 + (t - 1) lr_decay) * d / (sqrt(sum) + eps)

    State per parameter, made with the optimizer as in PyTorch: ``step``, ``sum``.
    """

    _counts_steps = True
    _eager_state = True

    def __init__(self, params: ParamsT, lr: float = 1e-2, lr_decay: float = 0,
                 weight_decay: float = 0, initial_accumulator_value: float = 0,
                 eps: float = 1e-10, *, maximize: bool = False):
        defaults = {"lr": lr, "lr_decay": lr_decay, "eps": eps, "weight_decay": weight_decay,
                    "initial_accumulator_value": initial_accumulator_value,
                    "maximize": maximize}
        super().__init__(params, defaults)

    def _check_hyperparameters(self, group: dict[str, Any]) -> None:
        check_numbers("Adagrad", group, lr="learning rate", lr_decay="lr_decay value",
                      weight_decay="weight_decay value",
                      initial_accumulator_value="initial_accumulator_value value",
                      eps="epsilon value")

    def _state_names(self, group: dict[str, Any]) -> tuple[str, ...]:
        return ("sum",)

    def _state_fill(self, group: dict[str, Any]) -> dict[str, float]:
        return {"sum": float(group["initial_accumulator_value"])}

    def _update(self, group: dict[str, Any], flat: FlatGroup, work: Work) -> None:
        # Per parameter (its own step count t): lr / (1 + (t - 1) lr_decay).
        clr = np.zeros(flat.steps.size)
        clr[work.active] = group["lr"] / (1 + (flat.steps[work.active] - 1) * group["lr_decay"])
        kernel = for_work(adagrad_step, work.size)
        kernel(flat.views, work.grads, work.grad_start, work.chunk_param, work.chunk_begin,
               work.chunk_end, flat.state_start, flat.buffer("sum"), clr, float(group["eps"]),
               float(group["weight_decay"]), bool(group["maximize"]))
