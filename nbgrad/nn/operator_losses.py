"""The data losses neural operators train on, with neuraloperator's (``neuralop.losses``)
constructor arguments and defaults: ``LpLoss`` and ``H1Loss``.

Both compare functions sampled on a regular grid: the inputs are laid out as
``[batch, channels, *spatial]`` (any leading dims) with the last ``d`` dims spatial.
Quadrature is per spatial dimension, ``q_j = measure_j / n_j`` (``n_j`` the grid size of
dim ``-d + j``), so a norm is a Riemann sum of the integral over a domain of
``measure_1 x ... x measure_d``. Every step is an nbgrad op (sub, abs, pow, roll,
slicing, cat, sum), so first and second derivatives come from the graph."""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..ops.shape import cat
from ..tensor import Tensor
from .module import Module

_REDUCTIONS = ("sum", "mean")


def _check_d(cls: str, d: Any, allowed: Sequence[int] | None = None) -> int:
    if isinstance(d, bool) or not isinstance(d, numbers.Integral) or d < 1:
        raise ValueError(f"{cls}: d must be a positive int (the number of spatial dims), "
                         f"got {d!r}")
    if allowed is not None and d not in allowed:
        raise ValueError(f"{cls}: d must be one of {tuple(allowed)}, got {d}")
    return int(d)


def _check_reduction(cls: str, reduction: Any) -> str:
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{cls}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    return reduction


def _check_eps(cls: str, eps: Any) -> float:
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not eps >= 0:
        raise ValueError(f"{cls}: eps must be a real number >= 0, got {eps!r}")
    return float(eps)


def _per_dim(cls: str, name: str, value: Any, d: int) -> list[float]:
    """A positive scalar repeated d times, or a sequence of d positive numbers."""
    values = [value] * d if isinstance(value, numbers.Real) else value
    try:
        values = list(values)
    except TypeError:
        raise ValueError(f"{cls}: {name} must be a positive number or a sequence of {d} "
                         f"positive numbers, got {value!r}") from None
    if len(values) != d or not all(
            isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)
            and v > 0 for v in values):
        raise ValueError(f"{cls}: {name} must be a positive number or a sequence of {d} "
                         f"positive numbers (one per spatial dim, d={d}), got {value!r}")
    return [float(v) for v in values]


def _operands(cls: str, d: int, x: Any, y: Any) -> tuple[Tensor, Tensor]:
    """x and y as Tensors of one shape with at least one dim before the d spatial ones
    (a NumPy array or a number becomes a constant Tensor of the other's dtype)."""
    if not isinstance(x, Tensor) and not isinstance(y, Tensor):
        x = np.asarray(x)
        x = Tensor(x if np.issubdtype(x.dtype, np.floating) else x.astype(np.float64))
    if not isinstance(x, Tensor):
        x = Tensor(np.asarray(x, dtype=y.numpy().dtype))
    if not isinstance(y, Tensor):
        y = Tensor(np.asarray(y, dtype=x.numpy().dtype))
    if tuple(x.shape) != tuple(y.shape):
        raise ValueError(f"{cls}: y_pred and y must have the same shape, got "
                         f"{tuple(x.shape)} and {tuple(y.shape)}")
    if x.ndim < d + 1:
        raise ValueError(f"{cls}: d={d} spatial dims need inputs of at least {d + 1} dims "
                         f"([batch, ..., *spatial]), got shape {tuple(x.shape)}")
    return x, y


def _reduce(value: Tensor, reduction: str) -> Tensor:
    # neuralop reduces over every batch and channel entry at once, to a 0-d result.
    return value.sum() if reduction == "sum" else value.mean()


class _GridLoss(Module):
    """What LpLoss and H1Loss share: d, measure, reduction, eps and the quadrature."""

    d: int
    measure: list[float]

    def uniform_quadrature(self, x: Any) -> list[float]:
        """The weights of a regular grid: ``q_j = measure_j / x.shape[-d + j]``."""
        shape = tuple(x.shape)
        if len(shape) < self.d:
            raise ValueError(f"{type(self).__name__}: d={self.d} spatial dims but input of "
                             f"shape {shape}")
        return [m / n for m, n in zip(self.measure, shape[len(shape) - self.d:])]

    def _quadrature(self, x: Tensor, quadrature: Any) -> list[float]:
        if quadrature is None:
            return self.uniform_quadrature(x)
        return _per_dim(type(self).__name__, "quadrature", quadrature, self.d)

    def _check_call_kwargs(self, kwargs: dict) -> None:
        if kwargs:  # neuralop's losses ignore extra keywords (a trainer passes x=...), warning
            warnings.warn(f"{type(self).__name__}.forward() received unexpected keyword "
                          f"arguments: {sorted(kwargs)}. These arguments will be ignored.",
                          UserWarning, stacklevel=3)


class LpLoss(_GridLoss):
    r"""The L^p distance between functions sampled on a d-dimensional regular grid.

    With ``q = prod_j measure_j / n_j`` and the sums over the last d dims of each
    ``[batch, channel]`` entry:

    - ``abs``: ``(q * sum |x - y|^p)^(1/p)`` (the p-th root is skipped for p = 1 or
      ``take_root=False``), a quadrature of ``||x - y||_{L^p}``;
    - ``rel`` (the forward): ``(sum |x - y|^p)^(1/p) / ((sum |y|^p)^(1/p) + eps)``, where
      the quadrature cancels (without the root: ``sum |x - y|^p / (sum |y|^p + eps)``);

    then summed (``reduction='sum'``) or averaged (``'mean'``) over every batch and channel
    entry. ``p`` may be any real > 0; even integer p skips the ``abs`` (same values, and
    second derivatives defined where ``x == y``).
    """

    def __init__(self, d: int = 1, p: float = 2, measure: float | Sequence[float] = 1.0,
                 reduction: str = "sum", eps: float = 1e-8) -> None:
        super().__init__()
        self.d = _check_d("LpLoss", d)
        if (isinstance(p, bool) or not isinstance(p, numbers.Real) or not math.isfinite(p)
                or p <= 0):
            raise ValueError(f"LpLoss: p must be a finite real number > 0, got {p!r}")
        self.p = p
        self.measure = _per_dim("LpLoss", "measure", measure, self.d)
        self.reduction = _check_reduction("LpLoss", reduction)
        self.eps = _check_eps("LpLoss", eps)

    @property
    def name(self) -> str:
        return f"L{self.p}_{self.d}Dloss"

    def _power_sum(self, u: Tensor) -> Tensor:
        """sum over the flattened spatial dims of |u|^p."""
        flat = u.flatten(-self.d) if self.d > 1 else u
        if self.p == 1:
            terms = flat.abs()
        elif float(self.p).is_integer() and int(self.p) % 2 == 0:
            terms = flat.pow(self.p)
        else:
            terms = flat.abs().pow(self.p)
        return terms.sum(-1)

    def abs(self, x: Any, y: Any, quadrature: float | Sequence[float] | None = None,
            take_root: bool = True) -> Tensor:
        """Absolute: ``reduce((q * sum |x - y|^p)^(1/p))``; ``quadrature`` overrides the
        uniform weights (one number for every dim, or one per dim)."""
        x, y = _operands("LpLoss", self.d, x, y)
        weights = self._quadrature(x, quadrature)
        diff = self._power_sum(x - y) * math.prod(weights)
        if take_root and self.p != 1:
            diff = diff.pow(1.0 / self.p)
        return _reduce(diff, self.reduction)

    def rel(self, x: Any, y: Any, take_root: bool = True) -> Tensor:
        """Relative: ``reduce(||x - y||_p / (||y||_p + eps))``."""
        x, y = _operands("LpLoss", self.d, x, y)
        diff = self._power_sum(x - y)
        ynorm = self._power_sum(y)
        if take_root and self.p != 1:
            ratio = diff.pow(1.0 / self.p) / (ynorm.pow(1.0 / self.p) + self.eps)
        else:
            ratio = diff / (ynorm + self.eps)
        return _reduce(ratio, self.reduction)

    def forward(self, y_pred: Any, y: Any, **kwargs: Any) -> Tensor:
        """The relative loss, as neuralop's ``__call__``."""
        self._check_call_kwargs(kwargs)
        return self.rel(y_pred, y)

    def extra_repr(self) -> str:
        return (f"d={self.d}, p={self.p}, measure={self.measure}, "
                f"reduction={self.reduction!r}, eps={self.eps}")


def _slab(u: Tensor, axis: int, start: int | None, stop: int | None) -> Tensor:
    """u[..., start:stop, :, ...] with the slice on ``axis`` (negative)."""
    index = (Ellipsis, slice(start, stop)) + (slice(None),) * (-axis - 1)
    return u[index]


def _first_derivative(u: Tensor, axis: int, h: float, periodic: bool) -> Tensor:
    """du/dx along ``axis`` on a grid of step h.

    Periodic: the second-order central difference ``(u[i+1] - u[i-1]) / 2h`` with the
    indices wrapped (two rolls). Otherwise the same central difference inside and at each
    end the third-order one-sided stencil neuralop uses:
    ``u'_0 ~ (-11 u_0 + 18 u_1 - 9 u_2 + 2 u_3) / 6h`` and its mirror
    ``u'_{n-1} ~ (-2 u_{n-4} + 9 u_{n-3} - 18 u_{n-2} + 11 u_{n-1}) / 6h``."""
    if periodic:
        return (u.roll(-1, axis) - u.roll(1, axis)) / (2.0 * h)
    interior = (_slab(u, axis, 2, None) - _slab(u, axis, None, -2)) / (2.0 * h)
    s = [_slab(u, axis, i, i + 1) for i in range(4)]
    e = [_slab(u, axis, -4 + i, (-3 + i) or None) for i in range(4)]
    left = (-11.0 * s[0] + 18.0 * s[1] - 9.0 * s[2] + 2.0 * s[3]) / (6.0 * h)
    right = (-2.0 * e[0] + 9.0 * e[1] - 18.0 * e[2] + 11.0 * e[3]) / (6.0 * h)
    return cat([left, interior, right], dim=axis)


class H1Loss(_GridLoss):
    r"""The H^1 Sobolev distance between functions sampled on a 1-, 2- or 3-D regular
    grid, with finite-difference first derivatives.

    With grid steps ``h_j = measure_j / n_j`` (also the quadrature weights),
    ``q = prod_j h_j``, the sums over the last d dims and ``D_j`` the finite difference
    along spatial dim j (x, y, z are dims -d, ..., -1):

    - ``abs``: ``(q * (sum (x - y)^2 + sum_j sum (D_j x - D_j y)^2))^(1/2)``;
    - ``rel`` (the forward): ``|x - y|_{H1} / (|y|_{H1} + eps)`` with the unweighted sums
      (the square root skipped with ``take_root=False``, then ``eps`` adds to the
      squared norm);

    then reduced over the batch and channel entries. ``periodic_in_x/y/z``: central
    differences wrapping around that dim; otherwise one-sided third-order stencils at its
    ends (that dim needs at least 4 points).
    """

    def __init__(self, d: int = 1, measure: float | Sequence[float] = 1.0,
                 reduction: str = "sum", eps: float = 1e-8, periodic_in_x: bool = True,
                 periodic_in_y: bool = True, periodic_in_z: bool = True) -> None:
        super().__init__()
        self.d = _check_d("H1Loss", d, allowed=(1, 2, 3))
        self.measure = _per_dim("H1Loss", "measure", measure, self.d)
        self.reduction = _check_reduction("H1Loss", reduction)
        self.eps = _check_eps("H1Loss", eps)
        self.periodic_in_x = bool(periodic_in_x)
        self.periodic_in_y = bool(periodic_in_y)
        self.periodic_in_z = bool(periodic_in_z)

    @property
    def name(self) -> str:
        return f"H1_{self.d}DLoss"

    def _periodic(self) -> list[bool]:
        return [self.periodic_in_x, self.periodic_in_y, self.periodic_in_z][:self.d]

    def compute_terms(self, x: Tensor, y: Tensor, quadrature: Sequence[float]
                      ) -> tuple[list[Tensor], list[Tensor]]:
        """[u, D_1 u, ..., D_d u] for u = x and u = y, each flattened over the spatial
        dims."""
        periodic = self._periodic()
        for j, flag in enumerate(periodic):
            n = x.shape[x.ndim - self.d + j]
            if not flag and n < 4:
                raise ValueError(
                    f"H1Loss: periodic_in_{'xyz'[j]}=False needs at least 4 points along "
                    f"spatial dim {'xyz'[j]} (its one-sided stencil), got shape "
                    f"{tuple(x.shape)}")

        def terms(u: Tensor) -> list[Tensor]:
            out = [u]
            for j in range(self.d):
                out.append(_first_derivative(u, j - self.d, quadrature[j], periodic[j]))
            return [t.flatten(-self.d) if self.d > 1 else t for t in out]

        return terms(x), terms(y)

    def _squared_sums(self, x: Any, y: Any, quadrature: Any
                      ) -> tuple[Tensor, Tensor, list[float]]:
        x, y = _operands("H1Loss", self.d, x, y)
        weights = self._quadrature(x, quadrature)
        tx, ty = self.compute_terms(x, y, weights)
        diff = sum(((a - b) ** 2).sum(-1) for a, b in zip(tx, ty))
        ynorm = sum((b ** 2).sum(-1) for b in ty)
        return diff, ynorm, weights

    def abs(self, x: Any, y: Any, quadrature: float | Sequence[float] | None = None,
            take_root: bool = True) -> Tensor:
        """Absolute: ``reduce((q * sum over terms of (x - y)^2)^(1/2))``."""
        diff, _, weights = self._squared_sums(x, y, quadrature)
        diff = diff * math.prod(weights)
        if take_root:
            diff = diff ** 0.5
        return _reduce(diff, self.reduction)

    def rel(self, x: Any, y: Any, quadrature: float | Sequence[float] | None = None,
            take_root: bool = True) -> Tensor:
        """Relative: ``reduce(|x - y|_{H1} / (|y|_{H1} + eps))``."""
        diff, ynorm, _ = self._squared_sums(x, y, quadrature)
        if take_root:
            ratio = diff ** 0.5 / (ynorm ** 0.5 + self.eps)
        else:
            ratio = diff / (ynorm + self.eps)
        return _reduce(ratio, self.reduction)

    def forward(self, y_pred: Any, y: Any, quadrature: float | Sequence[float] | None = None,
                take_root: bool = True, **kwargs: Any) -> Tensor:
        """The relative loss, as neuralop's ``__call__``."""
        self._check_call_kwargs(kwargs)
        return self.rel(y_pred, y, quadrature=quadrature, take_root=take_root)

    def extra_repr(self) -> str:
        flags = ", ".join(f"periodic_in_{c}={f}" for c, f in zip("xyz", self._periodic()))
        return (f"d={self.d}, measure={self.measure}, reduction={self.reduction!r}, "
                f"eps={self.eps}, {flags}")
