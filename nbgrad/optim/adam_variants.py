"""NAdam, RAdam and Adamax (PyTorch's ``torch.optim.NAdam``, ``RAdam`` and ``Adamax``):
Adam's moment estimates with Nesterov momentum, a rectified adaptive step, or the infinity
norm. Each step runs one kernel per parameter group (``nbgrad.kernels.optim_adam_variants``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import float64, get_default_dtype
from ..kernels.optim_adam_variants import adamax_step, nadam_step, radam_step
from ..runtime.jit import for_work
from ..tensor import Tensor
from .adam import _pair, check_adam_numbers
from .optimizer import FlatGroup, Optimizer, ParamsT, Work, check_number


class _AdamFamily(Optimizer):
    """What the three share: PyTorch's checks of lr, eps, betas and weight_decay, the
    per-parameter step count, and scalars computed once per distinct step count with
    PyTorch's Python-float arithmetic."""

    _counts_steps = True

    def _check_hyperparameters(self, group: dict[str, Any]) -> None:
        check_adam_numbers(type(self).__name__, group)

    @staticmethod
    def _per_param(flat: FlatGroup, work: Work, fn: Any, count: int) -> list[np.ndarray]:
        """``count`` float64 arrays over the group's parameters holding ``fn(step)`` (a
        tuple of ``count`` Python floats) for each parameter being stepped, 0 elsewhere;
        ``fn`` runs once per distinct step count."""
        out = [np.zeros(flat.steps.size) for _ in range(count)]
        steps = flat.steps[work.active]
        for step in np.unique(steps).tolist():
            where = np.flatnonzero(work.active)[steps == step]
            for array, value in zip(out, fn(step)):
                array[where] = value
        return out


class NAdam(_AdamFamily):
    """NAdam (PyTorch's formulas), for a parameter at its step t:

        d = g + weight_decay * p        (g negated first when maximize; with
                                         decoupled_weight_decay instead p = p (1 - lr wd))
        mu_t = beta1 (1 - 0.5 * 0.96^(t momentum_decay)),  mu_product = prod mu_1..t
        m = lerp(m, d, 1 - beta1),  v = beta2 v + (1 - beta2) d^2
        r = sqrt(v / (1 - beta2^t)) + eps
        p = p - lr (1 - mu_t) / (1 - mu_product) d / r
              - lr mu_{t+1} / (1 - mu_product mu_{t+1}) m / r

    State per parameter: ``step``, ``mu_product`` (a float, kept in the default dtype as
    PyTorch keeps it), ``exp_avg``, ``exp_avg_sq``.
    """

    def __init__(self, params: ParamsT, lr: float = 2e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, momentum_decay: float = 4e-3,
                 decoupled_weight_decay: bool = False, *, foreach: bool | None = None,
                 maximize: bool = False):
        defaults = {"lr": lr, "betas": _pair(type(self).__name__, betas), "eps": eps,
                    "weight_decay": weight_decay, "momentum_decay": momentum_decay,
                    "decoupled_weight_decay": decoupled_weight_decay, "maximize": maximize}
        super().__init__(params, defaults)

    def _check_hyperparameters(self, group: dict[str, Any]) -> None:
        super()._check_hyperparameters(group)
        check_number(type(self).__name__, "momentum_decay value", group["momentum_decay"])

    def _state_names(self, group: dict[str, Any]) -> tuple[str, ...]:
        return ("exp_avg", "exp_avg_sq")

    # mu_product is one number per parameter: kept in an array beside the flat buffers
    def _build(self, group: dict[str, Any], states: dict[int, dict]) -> list[FlatGroup]:
        flats = super()._build(group, states)
        for flat in flats:
            flat.mu_product = np.ones(len(flat.params))
            for i, p in enumerate(flat.params):
                entry = states.get(id(p))
                if entry is not None and "mu_product" in entry:
                    flat.mu_product[i] = entry["mu_product"]
        return flats

    def _states(self, copy: bool) -> list[tuple[dict[str, Any], Tensor]]:
        states = []
        for flats in self._flat:
            for flat in flats:
                for i, p in enumerate(flat.params):
                    if flat.has_state[i]:
                        entry = flat.param_state(i, True, copy)
                        entry = {"step": entry.pop("step"),
                                 "mu_product": float(flat.mu_product[i]), **entry}
                        states.append((entry, p))
        return states

    def _checked_state(self, owner: str, index: int, entry: Any, p: Tensor,
                       group: dict[str, Any]) -> dict[str, Any] | None:
        if not isinstance(entry, dict) or not entry:
            return super()._checked_state(owner, index, entry, p, group)
        if "mu_product" not in entry or len(entry) == 1:
            raise ValueError(f"{owner}: state[{index}] has {sorted(map(str, entry))}; NAdam "
                             "keeps ['step', 'mu_product', 'exp_avg', 'exp_avg_sq']")
        value = entry["mu_product"]
        value = np.asarray(value._data if isinstance(value, Tensor) else value)
        if value.shape != () or value.dtype.kind not in "fiu":
            raise ValueError(f"{owner}: state[{index}]['mu_product'] must be a number, got "
                             f"{entry['mu_product']!r}")
        rest = {k: v for k, v in entry.items() if k != "mu_product"}
        checked = super()._checked_state(owner, index, rest, p, group)
        return {"mu_product": float(value), **(checked or {})}

    def _update(self, group: dict[str, Any], flat: FlatGroup, work: Work) -> None:
        beta1, beta2 = float(group["betas"][0]), float(group["betas"][1])
        lr, decay = float(group["lr"]), float(group["momentum_decay"])

        def mus(step: float) -> tuple[float, float, float]:
            return (beta1 * (1.0 - 0.5 * (0.96 ** (step * decay))),
                    beta1 * (1.0 - 0.5 * (0.96 ** ((step + 1) * decay))),
                    1 - beta2 ** step)

        mu, mu_next, bias_correction2 = self._per_param(flat, work, mus, 3)
        active = work.active
        # mu_product *= mu in the default dtype, as PyTorch's scalar tensor
        scalar = np.float64 if get_default_dtype() == float64 else np.float32
        product = flat.mu_product[active].astype(scalar) * mu[active].astype(scalar)
        flat.mu_product[active] = product
        product_next = flat.mu_product * mu_next
        with np.errstate(divide="ignore", invalid="ignore"):
            grad_coef = -lr * (1.0 - mu) / (1.0 - flat.mu_product)
            avg_coef = (-lr * mu_next) / (1.0 - product_next)
        kernel = for_work(nadam_step, work.size)
        kernel(flat.views, work.grads, work.grad_start, work.chunk_param, work.chunk_begin,
               work.chunk_end, flat.state_start, flat.buffer("exp_avg"),
               flat.buffer("exp_avg_sq"), grad_coef, avg_coef, bias_correction2, lr, beta1,
               beta2, float(group["eps"]), float(group["weight_decay"]),
               bool(group["maximize"]), bool(group["decoupled_weight_decay"]))


class RAdam(_AdamFamily):
    """RAdam (PyTorch's formulas), for a parameter at its step t:

        d, m, v as in Adam (decoupled_weight_decay: p = p (1 - lr wd) instead of
        d = g + wd p);  b = m / (1 - beta1^t)
        rho_inf = 2 / (1 - beta2) - 1,  rho_t = rho_inf - 2 t beta2^t / (1 - beta2^t)
        rho_t > 5:  p = p - b lr sqrt(1 - beta2^t) / (sqrt(v) + eps) * rect,
                    rect = sqrt((rho_t - 4)(rho_t - 2) rho_inf
                                / ((rho_inf - 4)(rho_inf - 2) rho_t))
        otherwise:  p = p - b lr

    State per parameter: ``step``, ``exp_avg``, ``exp_avg_sq``.
    """

    def __init__(self, params: ParamsT, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, decoupled_weight_decay: bool = False, *,
                 foreach: bool | None = None, maximize: bool = False):
        defaults = {"lr": lr, "betas": _pair(type(self).__name__, betas), "eps": eps,
                    "weight_decay": weight_decay, "maximize": maximize,
                    "decoupled_weight_decay": decoupled_weight_decay}
        super().__init__(params, defaults)

    def _state_names(self, group: dict[str, Any]) -> tuple[str, ...]:
        return ("exp_avg", "exp_avg_sq")

    def _update(self, group: dict[str, Any], flat: FlatGroup, work: Work) -> None:
        beta1, beta2 = float(group["betas"][0]), float(group["betas"][1])
        lr = float(group["lr"])

        def scalars(step: float) -> tuple[float, float, float]:
            bias_correction1 = 1 - beta1 ** step
            bias_correction2 = 1 - beta2 ** step
            rho_inf = 2 / (1 - beta2) - 1
            rho_t = rho_inf - 2 * step * (beta2 ** step) / bias_correction2
            rect = 0.0
            if rho_t > 5.0:
                rect = ((rho_t - 4) * (rho_t - 2) * rho_inf
                        / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ** 0.5
            return bias_correction1, bias_correction2 ** 0.5, rect

        bias_correction1, bias_correction2_sqrt, rect = self._per_param(flat, work, scalars, 3)
        kernel = for_work(radam_step, work.size)
        kernel(flat.views, work.grads, work.grad_start, work.chunk_param, work.chunk_begin,
               work.chunk_end, flat.state_start, flat.buffer("exp_avg"),
               flat.buffer("exp_avg_sq"), bias_correction1, bias_correction2_sqrt, rect, lr,
               beta1, beta2, float(group["eps"]), float(group["weight_decay"]),
               bool(group["maximize"]), bool(group["decoupled_weight_decay"]))


class Adamax(_AdamFamily):
    """Adamax (PyTorch's formulas), for a parameter at its step t:

        d = g + weight_decay * p        (g negated first when maximize)
        m = lerp(m, d, 1 - beta1),  u = max(beta2 u, |d| + eps)
        p = p - lr / (1 - beta1^t) * m / u

    State per parameter: ``step``, ``exp_avg``, ``exp_inf``.
    """

    def __init__(self, params: ParamsT, lr: float = 2e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, foreach: bool | None = None, *,
                 maximize: bool = False):
        defaults = {"lr": lr, "betas": _pair(type(self).__name__, betas), "eps": eps,
                    "weight_decay": weight_decay, "maximize": maximize}
        super().__init__(params, defaults)

    def _state_names(self, group: dict[str, Any]) -> tuple[str, ...]:
        return ("exp_avg", "exp_inf")

    def _update(self, group: dict[str, Any], flat: FlatGroup, work: Work) -> None:
        beta1, beta2 = float(group["betas"][0]), float(group["betas"][1])
        lr = float(group["lr"])
        (clr,) = self._per_param(flat, work, lambda step: (lr / (1 - beta1 ** step),), 1)
        kernel = for_work(adamax_step, work.size)
        kernel(flat.views, work.grads, work.grad_start, work.chunk_param, work.chunk_begin,
               work.chunk_end, flat.state_start, flat.buffer("exp_avg"),
               flat.buffer("exp_inf"), clr, beta1, beta2, float(group["eps"]),
               float(group["weight_decay"]), bool(group["maximize"]))


__all__ = ["NAdam", "RAdam", "Adamax"]
