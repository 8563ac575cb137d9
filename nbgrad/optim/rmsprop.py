"""RMSprop (PyTorch's ``torch.optim.RMSprop``)."""

from __future__ import annotations

from typing import Any

from ..kernels.optim import rmsprop_step
from ..runtime.jit import for_work
from .optimizer import FlatGroup, Optimizer, ParamsT, Work, check_numbers


class RMSprop(Optimizer):
    """RMSprop (PyTorch's formulas):

        d = g + weight_decay * p               (g negated first when maximize)
        s = alpha s + (1 - alpha) d^2
        r = sqrt(s - a^2) + eps with a = lerp(a, d, 1 - alpha) (centered), else sqrt(s) + eps
        buf = momentum buf + d / r, p = p - lr buf   (momentum > 0)
        p = p - lr d / r                              (otherwise)

    State per parameter: ``step``, ``square_avg``, ``momentum_buffer`` (momentum > 0),
    ``grad_avg`` (centered).
    """

    _counts_steps = True

    def __init__(self, params: ParamsT, lr: float = 1e-2, alpha: float = 0.99,
                 eps: float = 1e-8, weight_decay: float = 0, momentum: float = 0,
                 centered: bool = False, *, maximize: bool = False):
        defaults = {"lr": lr, "momentum": momentum, "alpha": alpha, "eps": eps,
                    "centered": centered, "weight_decay": weight_decay, "maximize": maximize}
        super().__init__(params, defaults)

    def _check_hyperparameters(self, group: dict[str, Any]) -> None:
        check_numbers("RMSprop", group, lr="learning rate", eps="epsilon value",
                      momentum="momentum value", weight_decay="weight_decay value",
                      alpha="alpha value")

    def _state_names(self, group: dict[str, Any]) -> tuple[str, ...]:
        return (("square_avg",) + (("momentum_buffer",) if group["momentum"] > 0 else ())
                + (("grad_avg",) if group["centered"] else ()))

    def _update(self, group: dict[str, Any], flat: FlatGroup, work: Work) -> None:
        kernel = for_work(rmsprop_step, work.size)
        kernel(flat.views, work.grads, work.grad_start, work.chunk_param, work.chunk_begin,
               work.chunk_end, flat.state_start, flat.buffer("square_avg"),
               flat.buffer("momentum_buffer"), flat.buffer("grad_avg"),
               float(group["lr"]), float(group["alpha"]), float(group["eps"]),
               float(group["weight_decay"]), float(group["momentum"]),
               bool(group["centered"]), bool(group["maximize"]))
