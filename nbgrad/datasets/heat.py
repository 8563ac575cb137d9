"""The 1-D heat equation u_t = nu u_xx on [0, 1]: exact solutions of sine-series
initial data (the reference library's ONO and LNO heat examples) and backward-Euler
trajectories with Dirichlet values (its LNO rollout example). The math is in
docs/datasets.md."""

from __future__ import annotations

import numpy as np
from scipy.linalg import cho_solve_banded, cholesky_banded

from . import _cache, _checks

HEAT1D_MODES = 5  # u0 = sum_{m=1..5} a_m sin(m pi x)
TRAJECTORY_MODES = 3  # u0 = left + (right - left) x + sum_{m=1..3} c_m sin(m pi x)


def grid_points(grid: int) -> np.ndarray:
    """The ``grid`` nodes ``x_i = i / (grid - 1)`` on [0, 1], both ends included."""
    return np.linspace(0.0, 1.0, grid)


def _sine_basis(modes: int, grid: int) -> np.ndarray:
    """``S[m - 1, i] = sin(m pi x_i)``, m = 1..modes, exactly 0 at both ends."""
    m = np.arange(1, modes + 1, dtype=np.float64)
    basis = np.sin(np.pi * m[:, None] * grid_points(grid)[None, :])
    basis[:, 0] = 0.0
    basis[:, -1] = 0.0
    return basis


def heat1d(n_train: int = 200, n_test: int = 50, grid: int = 32, nu: float = 0.01,
           t: float = 1.0, seed: int = 0, cache: bool = True
           ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """((u0_train, u_train), (u0_test, u_test)), each float64 of shape [n, grid].

    ``u0(x) = sum_{m=1..5} a_m sin(m pi x)`` with ``a_m ~ U[-1, 1]`` and the exact
    solution of ``u_t = nu u_xx``, ``u(0) = u(1) = 0``, at time ``t``:
    ``u(x, t) = sum_m a_m exp(-nu (m pi)^2 t) sin(m pi x)``, both sampled at the ``grid``
    nodes ``x_i = i / (grid - 1)`` (ends included, where both are exactly 0). The train
    and test coefficients come from two independent streams spawned from
    ``numpy.random.SeedSequence(seed)``, so the test set does not depend on ``n_train``.
    Cached (see docs/datasets.md); ``cache=False`` skips the cache.
    """
    fn = "heat1d"
    n_train = _checks.integer(fn, "n_train", n_train, 1)
    n_test = _checks.integer(fn, "n_test", n_test, 1)
    grid = _checks.integer(fn, "grid", grid, 3)
    nu, t = _checks.viscosity_and_time(fn, nu, t)
    seed, cache = _checks.seed_and_cache(fn, seed, cache)

    def make() -> dict[str, np.ndarray]:
        basis = _sine_basis(HEAT1D_MODES, grid)
        m = np.arange(1, HEAT1D_MODES + 1, dtype=np.float64)
        decay = np.exp(-nu * (m * np.pi) ** 2 * t)
        out = {}
        streams = np.random.SeedSequence(seed).spawn(2)
        for split, n, stream in (("train", n_train, streams[0]), ("test", n_test, streams[1])):
            a = np.random.default_rng(stream).uniform(-1.0, 1.0, (n, HEAT1D_MODES))
            out[f"u0_{split}"] = a @ basis
            out[f"u_{split}"] = (a * decay) @ basis
        return out

    params = dict(n_train=n_train, n_test=n_test, grid=grid, nu=nu, t=t, seed=seed)
    shapes = {"u0_train": (n_train, grid), "u_train": (n_train, grid),
              "u0_test": (n_test, grid), "u_test": (n_test, grid)}
    d = _cache.cached(fn, params, shapes, make, cache)
    return (d["u0_train"], d["u_train"]), (d["u0_test"], d["u_test"])


def backward_euler_factor(grid: int, alpha: float, dt: float) -> np.ndarray:
    """The banded Cholesky factor of the interior backward-Euler matrix
    ``A = (1 + 2r) I - r (shift up + shift down)``, ``r = alpha dt / h^2``,
    ``h = 1 / (grid - 1)``: symmetric positive definite, so factored once and reused."""
    r = alpha * dt * (grid - 1) ** 2
    n = grid - 2
    ab = np.empty((2, n))
    ab[0, 0] = 0.0  # upper form: row 0 holds the superdiagonal, shifted right by one
    ab[0, 1:] = -r
    ab[1, :] = 1.0 + 2.0 * r
    return cholesky_banded(ab, lower=False)


def backward_euler_step(u: np.ndarray, factor: np.ndarray, r: float) -> np.ndarray:
    """One backward-Euler step of ``u_t = alpha u_xx`` for a batch ``u`` [B, grid]
    whose end values are the Dirichlet data:
    ``(1 + 2r) v_i - r (v_{i-1} + v_{i+1}) = u_i`` at the interior nodes, the end values
    (known) moved to the right side, ``v_0 = u_0``, ``v_{-1} = u_{-1}``."""
    rhs = u[:, 1:-1].T.copy()  # [grid - 2, B]: one column per trajectory
    rhs[0] += r * u[:, 0]
    rhs[-1] += r * u[:, -1]
    out = np.empty_like(u)
    out[:, 1:-1] = cho_solve_banded((factor, False), rhs).T
    out[:, 0] = u[:, 0]
    out[:, -1] = u[:, -1]
    return out


def heat_trajectories(n_traj: int, steps: int, grid: int = 48, alpha: float = 1e-2,
                      dt: float = 8e-4, left: float = -1.0, right: float = 1.0,
                      seed: int = 0, cache: bool = True) -> np.ndarray:
    """Trajectories [n_traj, steps + 1, grid] (float64) of ``u_t = alpha u_xx`` on
    [0, 1] with ``u(0, t) = left``, ``u(1, t) = right``, for rollout training.

    Nodes ``x_i = i / (grid - 1)`` (ends included, holding the boundary values).
    ``u0(x) = left + (right - left) x + sum_{m=1..3} c_m sin(m pi x)``, ``c_m ~ U[-1, 1]``
    (smooth, and equal to the boundary values at the ends, as in the reference
    library's rollout example). Each step is one backward-Euler step of size ``dt`` of
    the 3-point finite-difference Laplacian; the tridiagonal matrix is factored once
    (banded Cholesky) and every step solves all trajectories together.
    ``out[:, 0]`` is the initial state. Cached (see docs/datasets.md).
    """
    fn = "heat_trajectories"
    n_traj = _checks.integer(fn, "n_traj", n_traj, 1)
    steps = _checks.integer(fn, "steps", steps, 1)
    grid = _checks.integer(fn, "grid", grid, 3)
    alpha = _checks.real(fn, "alpha", alpha, positive=True)
    dt = _checks.real(fn, "dt", dt, positive=True)
    left = _checks.real(fn, "left", left)
    right = _checks.real(fn, "right", right)
    seed, cache = _checks.seed_and_cache(fn, seed, cache)

    def make() -> dict[str, np.ndarray]:
        x = grid_points(grid)
        c = np.random.default_rng(seed).uniform(-1.0, 1.0, (n_traj, TRAJECTORY_MODES))
        u = left + (right - left) * x[None, :] + c @ _sine_basis(TRAJECTORY_MODES, grid)
        u[:, 0], u[:, -1] = left, right
        factor = backward_euler_factor(grid, alpha, dt)
        r = alpha * dt * (grid - 1) ** 2
        out = np.empty((n_traj, steps + 1, grid))
        out[:, 0] = u
        for k in range(steps):
            u = backward_euler_step(u, factor, r)
            out[:, k + 1] = u
        return {"trajectories": out}

    params = dict(n_traj=n_traj, steps=steps, grid=grid, alpha=alpha, dt=dt, left=left,
                  right=right, seed=seed)
    shapes = {"trajectories": (n_traj, steps + 1, grid)}
    return _cache.cached(fn, params, shapes, make, cache)["trajectories"]
