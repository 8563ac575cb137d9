"""The base class of the learning-rate schedulers (PyTorch's ``LRScheduler``) and the
helpers the schedulers share; the schedulers live in ``lr_scheduler`` (the ones that
decay), ``lr_scheduler_factors`` (LambdaLR, MultiplicativeLR, LinearLR) and
``lr_scheduler_cyclic`` (CosineAnnealingWarmRestarts, CyclicLR)."""

from __future__ import annotations

import types
import warnings
from typing import Any

from .optimizer import Optimizer

EPOCH_DEPRECATION_WARNING = (
    "The epoch parameter in `scheduler.step()` was not necessary and is being deprecated "
    "where possible. Please use `scheduler.step()` to step the scheduler. During the "
    "deprecation, if epoch is different from None, the closed form is used instead of the "
    "new chainable form, where available.")


class LRScheduler:
    """Base class: ``last_epoch`` counts the calls of ``step``; ``get_lr()`` gives the
    rates for the epoch ``last_epoch``; ``base_lrs`` are the groups' ``initial_lr``.
    Pass ``last_epoch`` only to resume (the groups must then hold ``initial_lr``).
    ``step(epoch)`` (deprecated in PyTorch) jumps to ``epoch`` by the scheduler's closed
    form ``_get_closed_form_lr`` where it has one."""

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1):
        owner = type(self).__name__
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{owner}: {type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(f"{owner}: param_groups[{i}] has no 'initial_lr'; resuming "
                                   "with last_epoch >= 0 needs the optimizer state it was "
                                   "saved with (load the optimizer's state dict first)")
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._is_initial = False
        self._initial_step()

    def _initial_step(self) -> None:
        """Reset the step count and take the first step (epoch 0) in initial mode."""
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def get_lr(self) -> list[float]:
        """The learning rate of each param group for the epoch ``last_epoch``."""
        raise NotImplementedError

    def get_last_lr(self) -> list[float]:
        """The learning rates the last ``step`` set."""
        return list(self._last_lr)

    def step(self, epoch: int | None = None) -> None:
        """Advance one epoch (or batch) and set each group's lr."""
        self._step_count += 1
        if epoch is not None:
            warnings.warn(EPOCH_DEPRECATION_WARNING, UserWarning, stacklevel=2)
        self._update_lr(epoch)

    def _update_lr(self, epoch: int | None = None) -> None:
        """Set the groups' lrs for the next epoch, or for ``epoch`` (the closed form)."""
        if epoch is None:
            self.last_epoch += 1
            values = self.get_lr()
        else:
            self.last_epoch = epoch
            closed_form = getattr(self, "_get_closed_form_lr", None)
            values = closed_form() if closed_form is not None else self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, values, strict=True):
            group["lr"] = lr
        self._last_lr = _lrs(self.optimizer)

    def state_dict(self) -> dict[str, Any]:
        """Every attribute but the optimizer (PyTorch's layout)."""
        return {key: value for key, value in vars(self).items() if key != "optimizer"}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.__dict__.update(state_dict)


# -- helpers --------------------------------------------------------------------------------
def _lrs(optimizer: Optimizer) -> list[float]:
    return [group["lr"] for group in optimizer.param_groups]


def _check_positive_int(owner: str, name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{owner}: {name} must be a positive int, got {value!r}")


def _per_group(name: str, optimizer: Optimizer, value: Any,
               owner: str = "OneCycleLR") -> list[Any]:
    """One value per param group: a list of that length, or a scalar repeated."""
    count = len(optimizer.param_groups)
    if isinstance(value, list | tuple):
        if len(value) != count:
            raise ValueError(f"{owner}: {name} must have one value per param group "
                             f"({count}), got {len(value)}")
        return list(value)
    return [value] * count


def _callable_state(functions: list[Any]) -> list[dict[str, Any] | None]:
    """PyTorch's saved form of user functions: a callable object's ``__dict__`` (copied),
    None for a plain function or lambda (not saved)."""
    return [None if isinstance(fn, types.FunctionType) else fn.__dict__.copy()
            for fn in functions]


def _load_callable_state(functions: list[Any], saved: list[dict[str, Any] | None]) -> None:
    for fn, state in zip(functions, saved):
        if state is not None:
            fn.__dict__.update(state)
