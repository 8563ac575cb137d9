"""SGD with momentum, dampening, Nesterov momentum, weight decay and maximisation
(PyTorch's ``torch.optim.SGD``)."""

from __future__ import annotations

from typing import Any

from ..kernels.optim import sgd_step
from ..runtime.jit import for_work
from .optimizer import FlatGroup, Optimizer, ParamsT, Work, check_number, check_numbers


class SGD(Optimizer):
    """Stochastic gradient descent (PyTorch's formulas):

        d = g + weight_decay * p          (g negated first when maximize)
        buf = d on a parameter's first step, then buf = momentum * buf + (1 - dampening) * d
        d = d + momentum * buf (nesterov) or buf          (when momentum != 0)
        p = p - lr * d

    State per parameter: ``momentum_buffer`` (when momentum != 0).
    """

    def __init__(self, params: ParamsT, lr: float = 1e-3, momentum: float = 0,
                 dampening: float = 0, weight_decay: float = 0, nesterov: bool = False, *,
                 maximize: bool = False):
        defaults = {"lr": lr, "momentum": momentum, "dampening": dampening,
                    "weight_decay": weight_decay, "nesterov": nesterov, "maximize": maximize}
        super().__init__(params, defaults)

    def _check_hyperparameters(self, group: dict[str, Any]) -> None:
        check_numbers("SGD", group, lr="learning rate", momentum="momentum",
                      weight_decay="weight_decay")
        check_number("SGD", "dampening", group["dampening"], minimum=-float("inf"))
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError("SGD: Nesterov momentum requires a momentum > 0 and zero "
                             f"dampening (got momentum={group['momentum']}, "
                             f"dampening={group['dampening']})")

    def _state_names(self, group: dict[str, Any]) -> tuple[str, ...]:
        return ("momentum_buffer",) if group["momentum"] != 0 else ()

    def _update(self, group: dict[str, Any], flat: FlatGroup, work: Work) -> None:
        kernel = for_work(sgd_step, work.size)
        kernel(flat.views, work.grads, work.grad_start, work.chunk_param, work.chunk_begin,
               work.chunk_end, flat.state_start, flat.buffer("momentum_buffer"),
               ~flat.has_state, float(group["lr"]), float(group["momentum"]),
               float(group["dampening"]), float(group["weight_decay"]),
               bool(group["nesterov"]), bool(group["maximize"]))
