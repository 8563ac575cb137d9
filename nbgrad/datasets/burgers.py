"""1-D viscous Burgers ``u_t + u u_x = nu u_xx``, periodic on [0, 1), from Gaussian
random-field initial data (the FNO benchmark's construction), by a dealiased
pseudo-spectral solver. The math is in docs/datasets.md."""

from __future__ import annotations

import numpy as np

from . import _cache, _checks

GRF_ALPHA = 2.5  # covariance sigma^2 (-Laplace + tau^2 I)^(-alpha), periodic Laplacian
GRF_TAU = 7.0
SPEED_BOUND = 1.5  # the time step assumes |u| <= max(SPEED_BOUND, max |u0|)
CFL = 2.0  # dt |u|_max k_max <= CFL; RK4 is stable up to 2 sqrt 2 on the imaginary axis


def grid_points(resolution: int) -> np.ndarray:
    """The nodes ``x_i = i / resolution`` of the periodic grid on [0, 1)."""
    return np.arange(resolution) / resolution


def kept_modes(resolution: int) -> int:
    """The largest wavenumber the 2/3 rule keeps: ``K = (resolution - 1) // 3``, so that
    ``3 K < resolution`` and the square of a field with ``|k| <= K`` aliases only onto
    ``|k| > K``."""
    return (resolution - 1) // 3


def grf_periodic_1d(xi: np.ndarray, eta: np.ndarray, resolution: int,
                    alpha: float = GRF_ALPHA, tau: float = GRF_TAU) -> np.ndarray:
    """Samples [n, resolution] of the mean-zero Gaussian random field on the periodic
    [0, 1) with covariance ``sigma^2 (-Laplace + tau^2 I)^(-alpha)``,
    ``sigma = tau^(alpha - d/2)`` (d = 1), at ``grid_points(resolution)``, from
    standard normals ``xi, eta`` [n, K] (``K = kept_modes(resolution)``):
    ``u0(x) = sum_{k=1..K} sqrt 2 sigma (4 pi^2 k^2 + tau^2)^(-alpha/2)
    (xi_k cos 2 pi k x + eta_k sin 2 pi k x)``, the Karhunen-Loeve series over the
    orthonormal ``sqrt 2 cos``, ``sqrt 2 sin`` (FNO's ``GaussianRF`` / ``GRF1.m``
    coefficients; with alpha = 2.5, tau = 7 its Burgers benchmark's sigma = 49),
    truncated at the modes the solver keeps."""
    k = np.arange(1, xi.shape[-1] + 1, dtype=np.float64)
    sigma = tau ** (alpha - 0.5)
    weight = np.sqrt(2.0) * sigma * (4.0 * np.pi ** 2 * k ** 2 + tau ** 2) ** (-alpha / 2.0)
    phase = 2.0 * np.pi * k[:, None] * grid_points(resolution)[None, :]  # [K, res]
    return (weight * xi) @ np.cos(phase) + (weight * eta) @ np.sin(phase)


def solve_burgers(u0: np.ndarray, nu: float, t: float) -> np.ndarray:
    """``u(., t)`` [n, N] of ``u_t + (u^2 / 2)_x = nu u_xx`` on the periodic [0, 1) from
    ``u0`` [n, N] sampled at ``x_i = i / N``.

    Fourier pseudo-spectral in space on the wavenumbers ``0 <= k <= K``
    (``K = kept_modes(N)``, the 2/3 rule; the modes of ``u0`` above ``K`` are dropped):
    ``d/dt u_k = -nu (2 pi k)^2 u_k + N(u)_k``, ``N(u)_k = -(i 2 pi k / 2) F[(F^-1 u)^2]_k``
    with the square taken on the N-point grid, where it aliases only onto ``|k| > K``.
    In time: the integrating factor ``E(s) = exp(-nu (2 pi k)^2 s)`` takes the diffusion
    exactly and classical RK4 integrates the transformed nonlinear term (IF-RK4), in
    equal steps ``dt = t / ceil(t / dt_max)``,
    ``dt_max = CFL / (2 pi K max(SPEED_BOUND, max |u0|))`` (the maximum principle keeps
    ``|u| <= max |u0|``).
    """
    res = u0.shape[-1]
    kmax = kept_modes(res)
    k = 2.0 * np.pi * np.arange(kmax + 1)
    speed = max(SPEED_BOUND, float(np.abs(u0).max(initial=0.0)))
    steps = int(np.ceil(t * k[-1] * speed / CFL))
    dt = t / max(steps, 1)
    e_half = np.exp(-nu * k ** 2 * dt / 2.0)
    e_full = e_half * e_half
    dflux = -0.5j * k

    def nonlinear(v: np.ndarray) -> np.ndarray:
        w = np.fft.irfft(v, n=res)  # zero-padded above K
        return dflux * np.fft.rfft(w * w)[:, :kmax + 1]

    v = np.fft.rfft(u0)[:, :kmax + 1]
    for _ in range(steps):
        a = nonlinear(v)
        b = nonlinear(e_half * (v + 0.5 * dt * a))
        c = nonlinear(e_half * v + 0.5 * dt * b)
        d = nonlinear(e_full * v + dt * e_half * c)
        v = e_full * v + dt / 6.0 * (e_full * a + 2.0 * e_half * (b + c) + d)
    return np.fft.irfft(v, n=res)


def burgers1d(n: int, resolution: int = 128, nu: float = 0.1, t: float = 1.0,
              seed: int = 0, cache: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(u0 [n, res], u_T [n, res]), float64: viscous Burgers ``u_t + u u_x = nu u_xx`` on
    the periodic [0, 1), at the nodes ``x_i = i / res``, at times 0 and ``t``.

    ``u0`` is the periodic Gaussian random field of ``grf_periodic_1d`` (alpha = 2.5,
    tau = 7, sigma = 49: FNO's Burgers benchmark), holding the wavenumbers
    ``1..(res - 1) // 3``; ``u_T`` from ``solve_burgers`` (dealiased Fourier
    pseudo-spectral, integrating-factor RK4). Resolve the viscous scale: fronts are
    ``~ nu / |u|`` wide, so small ``nu`` needs a large ``resolution``. Sample ``k``
    uses row ``k`` of ``default_rng(seed).standard_normal((n, 2, K))`` (cosine then sine
    coefficients). Cached (see docs/datasets.md).
    """
    fn = "burgers1d"
    n = _checks.integer(fn, "n", n, 1)
    resolution = _checks.integer(fn, "resolution", resolution, 4)
    nu, t = _checks.viscosity_and_time(fn, nu, t)
    seed, cache = _checks.seed_and_cache(fn, seed, cache)

    def make() -> dict[str, np.ndarray]:
        z = np.random.default_rng(seed).standard_normal((n, 2, kept_modes(resolution)))
        u0 = grf_periodic_1d(z[:, 0], z[:, 1], resolution)
        return {"u0": u0, "u_T": solve_burgers(u0, nu, t)}

    params = dict(n=n, resolution=resolution, nu=nu, t=t, seed=seed)
    shape = (n, resolution)
    d = _cache.cached(fn, params, {"u0": shape, "u_T": shape}, make, cache)
    return d["u0"], d["u_T"]
