"""The Laplace basis of the Laplace neural operator (LNO) and its encode/decode.

``laplace_basis(mu, n)`` samples M decaying exponentials exp(-mu_m t) on the uniform grid
t_j = j / (n - 1) of [0, 1]; ``lno_encode`` projects a field sampled on n points onto
them and ``lno_decode`` evaluates a combination of them on n_out points. Both are
compositions through ``matmul``, so their backward reaches mu through the basis op.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ..function import Function, Sample, register
from ..kernels import laplace as laplace_kernels
from ..runtime.jit import LAPLACE_PARALLEL_MIN
from ..tensor import Tensor, lift
from ._args import float_input
from .matmul import matmul


def _samples(rng):
    yield Sample(rng.uniform(0.1, 3.0, 3), n=5, label="M=3, n=5")
    yield Sample(rng.uniform(-1.0, 2.0, 4), n=2, label="negative rates, n=2")
    yield Sample(rng.uniform(0.1, 3.0, 2), n=1, label="n=1 (t = 0)")
    yield Sample(rng.uniform(0.1, 3.0, 1), n=7, label="M=1")


@register("laplace_basis", samples=_samples)
class LaplaceBasis(Function):
    @staticmethod
    def forward(ctx, mu, n):
        t = laplace_kernels.laplace_grid(n, mu)
        mu = np.ascontiguousarray(mu)
        E = (laplace_kernels.laplace_forward_parallel
             if mu.size * n >= LAPLACE_PARALLEL_MIN
             else laplace_kernels.laplace_forward)(mu, t)
        ctx.save_for_backward(E, t)
        return E

    @staticmethod
    def backward(ctx, g):
        E, t = ctx.saved_tensors
        g = np.ascontiguousarray(g)
        if E.size >= LAPLACE_PARALLEL_MIN:
            return laplace_kernels.laplace_backward_parallel(g, E, t)
        return laplace_kernels.laplace_backward(g, E, t)

    @staticmethod
    def vjp(ctx, g):
        # E taken as this node's output, so that the gradient is differentiable in mu again
        E, t = ctx.saved_tensors
        return -(g * ctx.output(E) * lift(t)).sum(1)


def _check_rates(op: str, mu: Any) -> Tensor:
    """The decay rates ``mu[M]`` as a float Tensor."""
    mu = float_input(op, mu, "mu")
    if mu.ndim != 1:
        raise ValueError(f"{op}: mu must be 1-D [M] (one decay rate per basis function), "
                         f"got shape {mu.shape}")
    return mu


def _check_points(op: str, name: str, n: Any) -> int:
    try:
        n = operator.index(n)
    except TypeError:
        raise TypeError(f"{op}: {name} must be an integer, got {n!r}") from None
    if n < 0:
        raise ValueError(f"{op}: {name} = {n} must be >= 0")
    return n


def laplace_basis(mu: Any, n: int) -> Tensor:
    """``E[m, j] = exp(-mu_m t_j)`` with ``t_j = j / (n - 1)`` (``t = [0]`` when n = 1):
    M exponentials, one per rate ``mu[M]``, sampled on n uniform points of [0, 1].

    Gradient: ``dE[m, j]/dmu_m = -t_j E[m, j]``, so ``dL/dmu_m = -sum_j g[m, j] t_j E[m, j]``;
    twice differentiable (the vjp takes E as the op's output, so it differentiates again).
    """
    mu = _check_rates("laplace_basis", mu)
    n = _check_points("laplace_basis", "n", n)
    return LaplaceBasis.apply(mu, n=n)


def lno_encode(u: Any, mu: Any) -> Tensor:
    """Project ``u[..., n]`` onto the Laplace basis: ``u @ laplace_basis(mu, n).T`` ->
    ``[..., M]``, with n = u.shape[-1]."""
    u, mu = lift(u), _check_rates("lno_encode", mu)
    if u.ndim < 1:
        raise ValueError(f"lno_encode: u must have at least one dim [..., n], got shape "
                         f"{u.shape}")
    return matmul(u, laplace_basis(mu, u.shape[-1]).T)


def lno_decode(x: Any, mu: Any, n_out: int) -> Tensor:
    """Evaluate coefficients ``x[..., M]`` of the Laplace basis on n_out points:
    ``x @ laplace_basis(mu, n_out)`` -> ``[..., n_out]``."""
    x, mu = lift(x), _check_rates("lno_decode", mu)
    n_out = _check_points("lno_decode", "n_out", n_out)
    if x.ndim < 1 or x.shape[-1] != mu.shape[0]:
        raise ValueError(f"lno_decode: x has shape {x.shape} but mu has shape {mu.shape}: "
                         f"the last dim of x must be M = {mu.shape[0]}")
    return matmul(x, laplace_basis(mu, n_out))


__all__ = ["laplace_basis", "lno_encode", "lno_decode"]
