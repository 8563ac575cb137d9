"""PyTorch references of the neural-operator losses (``nbgrad.nn.operator_losses``):
neuraloperator's LpLoss and H1Loss, the oracle of the tests and the peer of the
benchmarks. ``torch`` is the caller's module (nbgrad never imports it)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["lp_loss", "h1_loss", "finite_difference"]


def _flat(u: Any, d: int) -> Any:
    """The last ``d`` axes as one."""
    return u.flatten(-d) if d > 1 else u


def lp_loss(torch: Any, x: Any, y: Any, d: int = 1, p: float = 2,
            measure: Sequence[float] | None = None, reduction: str = "sum",
            eps: float = 1e-8, mode: str = "rel", take_root: bool = True) -> Any:
    """Relative ``||x - y||_p / (||y||_p + eps)`` (``mode='rel'``) or absolute
    ``(prod_j h_j sum |x - y|^p)^(1/p)`` with ``h_j = measure_j / n_j`` (``'abs'``) over the
    last ``d`` axes, then summed or averaged."""
    measure = [1.0] * d if measure is None else measure

    def psum(u):
        return (_flat(u, d).abs() ** p).sum(-1)

    if mode == "abs":
        quadrature = math.prod(m / n for m, n in zip(measure, x.shape[-d:]))
        v = quadrature * psum(x - y)
        if take_root and p != 1:
            v = v ** (1 / p)
    else:
        num, den = psum(x - y), psum(y)
        if take_root and p != 1:
            v = num ** (1 / p) / (den ** (1 / p) + eps)
        else:
            v = num / (den + eps)
    return v.sum() if reduction == "sum" else v.mean()


def finite_difference(torch: Any, u: Any, axis: int, h: float, periodic: bool) -> Any:
    """du/dx along ``axis``: central differences, wrapped around when ``periodic``, else
    one-sided third-order stencils at both ends."""
    if periodic:
        return (torch.roll(u, -1, axis) - torch.roll(u, 1, axis)) / (2 * h)
    n = u.shape[axis]

    def take(i):
        return u.narrow(axis, i % n, 1)

    inner = (u.narrow(axis, 2, n - 2) - u.narrow(axis, 0, n - 2)) / (2 * h)
    first = (-11 * take(0) + 18 * take(1) - 9 * take(2) + 2 * take(3)) / (6 * h)
    last = (-2 * take(-4) + 9 * take(-3) - 18 * take(-2) + 11 * take(-1)) / (6 * h)
    return torch.cat([first, inner, last], dim=axis)


def h1_loss(torch: Any, x: Any, y: Any, d: int = 1, measure: Sequence[float] | None = None,
            periodic: Sequence[bool] | None = None, reduction: str = "sum",
            eps: float = 1e-8, mode: str = "rel", take_root: bool = True) -> Any:
    """The H1 distance of ``x`` and ``y`` over the last ``d`` axes: the squared values plus
    the squared finite-difference derivatives along each axis (step ``measure_j / n_j``),
    relative to ``y``'s (``'rel'``) or times the cell volume (``'abs'``)."""
    measure = [1.0] * d if measure is None else measure
    periodic = [True] * d if periodic is None else periodic
    hs = [m / n for m, n in zip(measure, x.shape[-d:])]
    tx = [x] + [finite_difference(torch, x, j - d, hs[j], periodic[j]) for j in range(d)]
    ty = [y] + [finite_difference(torch, y, j - d, hs[j], periodic[j]) for j in range(d)]
    diff = sum((_flat(a - b, d) ** 2).sum(-1) for a, b in zip(tx, ty))
    ynorm = sum((_flat(b, d) ** 2).sum(-1) for b in ty)
    if mode == "abs":
        v = math.prod(hs) * diff
        v = v ** 0.5 if take_root else v
    else:
        v = diff ** 0.5 / (ynorm ** 0.5 + eps) if take_root else diff / (ynorm + eps)
    return v.sum() if reduction == "sum" else v.mean()
