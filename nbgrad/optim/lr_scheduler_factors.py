"""Schedulers that scale the learning rate by a factor, with PyTorch's names, formulas and
state dicts (``torch.optim.lr_scheduler``): LambdaLR, MultiplicativeLR, LinearLR (re-exported
by ``nbgrad.optim.lr_scheduler``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .lr_scheduler_base import LRScheduler, _callable_state, _load_callable_state, _lrs
from .optimizer import Optimizer

LambdaT = Callable[[int], float] | list[Callable[[int], float]]


def _lambdas(owner: str, optimizer: Optimizer, lr_lambda: Any) -> list[Callable[[int], float]]:
    """One function per param group: a list/tuple of that length, or one repeated."""
    count = len(optimizer.param_groups)
    if isinstance(lr_lambda, list | tuple):
        if len(lr_lambda) != count:
            raise ValueError(f"{owner}: expected {count} lr_lambdas (one per param group), "
                             f"got {len(lr_lambda)}")
        functions = list(lr_lambda)
    else:
        functions = [lr_lambda] * count
    for fn in functions:
        if not callable(fn):
            raise TypeError(f"{owner}: lr_lambda should be a function, got "
                            f"{type(fn).__name__}")
    return functions


class _LambdaScheduler(LRScheduler):
    """The state dict of the lambda schedulers: a callable object's ``__dict__`` per
    function, None for a plain function or lambda (PyTorch saves no code)."""

    lr_lambdas: list[Callable[[int], float]]

    def state_dict(self) -> dict[str, Any]:
        state = {key: value for key, value in vars(self).items()
                 if key not in ("optimizer", "lr_lambdas")}
        state["lr_lambdas"] = _callable_state(self.lr_lambdas)
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict)
        saved = state.pop("lr_lambdas")
        self.__dict__.update(state)
        _load_callable_state(self.lr_lambdas, saved)


class LambdaLR(_LambdaScheduler):
    """lr = base_lr * lr_lambda(epoch), one function or one per param group."""

    def __init__(self, optimizer: Optimizer, lr_lambda: LambdaT, last_epoch: int = -1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"LambdaLR: {type(optimizer).__name__} is not an Optimizer")
        self.lr_lambdas = _lambdas("LambdaLR", optimizer, lr_lambda)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        return [base_lr * fn(self.last_epoch)
                for fn, base_lr in zip(self.lr_lambdas, self.base_lrs, strict=True)]


class MultiplicativeLR(_LambdaScheduler):
    """lr = lr * lr_lambda(epoch) at every step after the first (chainable)."""

    def __init__(self, optimizer: Optimizer, lr_lambda: LambdaT, last_epoch: int = -1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"MultiplicativeLR: {type(optimizer).__name__} is not an "
                            "Optimizer")
        self.lr_lambdas = _lambdas("MultiplicativeLR", optimizer, lr_lambda)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        if self._is_initial:
            return _lrs(self.optimizer)
        return [group["lr"] * fn(self.last_epoch)
                for fn, group in zip(self.lr_lambdas, self.optimizer.param_groups,
                                     strict=True)]


class LinearLR(LRScheduler):
    """lr = base_lr * factor, the factor going linearly from ``start_factor`` to
    ``end_factor`` over ``total_iters`` epochs, then constant (PyTorch's chainable
    recursion; ``_get_closed_form_lr`` is base_lr * (start + (end - start) *
    min(total_iters, epoch) / total_iters))."""

    def __init__(self, optimizer: Optimizer, start_factor: float = 1.0 / 3,
                 end_factor: float = 1.0, total_iters: int = 5, last_epoch: int = -1):
        if start_factor > 1.0 or start_factor <= 0:
            raise ValueError(f"LinearLR: start_factor must be in (0, 1], got {start_factor}")
        if end_factor > 1.0 or end_factor < 0:
            raise ValueError(f"LinearLR: end_factor must be in [0, 1], got {end_factor}")
        self.start_factor = start_factor
        self.end_factor = end_factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        groups = self.optimizer.param_groups
        if self.last_epoch == 0:
            return [group["lr"] * self.start_factor for group in groups]
        if self._is_initial or self.last_epoch > self.total_iters:
            return _lrs(self.optimizer)
        rise = self.end_factor - self.start_factor
        factor = 1.0 + rise / (self.total_iters * self.start_factor
                               + (self.last_epoch - 1) * rise)
        return [group["lr"] * factor for group in groups]

    def _get_closed_form_lr(self) -> list[float]:
        done = min(self.total_iters, self.last_epoch) / self.total_iters
        return [base_lr * (self.start_factor + (self.end_factor - self.start_factor) * done)
                for base_lr in self.base_lrs]
