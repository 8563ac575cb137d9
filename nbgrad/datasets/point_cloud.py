"""Poisson's equation on random point clouds in the unit disc (or ball): the data of a
geometry-informed neural operator (GINO), generated from a manufactured solution, so
every value is exact (no solver error).

On Omega = {|p| < 1} in d = 2 (the disc) or d = 3 (the ball),

    -Laplace u = f  in Omega,      u = 0  on |p| = 1,

with u = b g, b(p) = 1 - |p|^2 (zero on the boundary) and the smooth random field

    g(p) = sum_{k=1..K} a_k sin(w_k . p + phi_k).

With grad b = -2 p, Laplace b = -2 d, grad g = sum a_k cos(theta_k) w_k and
Laplace g = -sum a_k |w_k|^2 sin(theta_k) (theta_k = w_k . p + phi_k),
Laplace(b g) = g Laplace b + 2 grad b . grad g + b Laplace g, so

    f = -Laplace u = sum_k a_k [(2 d + b |w_k|^2) sin(theta_k) + 4 (p . w_k) cos(theta_k)].
"""

from __future__ import annotations

import numpy as np

from . import _cache, _checks


def disc_sdf(points: np.ndarray) -> np.ndarray:
    """The signed distance of ``points`` [..., d] to the unit sphere |p| = 1:
    ``|p| - 1`` (negative inside, zero on the boundary, positive outside)."""
    return np.linalg.norm(points, axis=-1) - 1.0


def uniform_in_ball(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    """``n`` points uniform in the unit ball of R^dim: a direction uniform on the sphere
    (a normalised standard normal) times a radius U^(1/dim) (the volume of the ball of
    radius r grows as r^dim)."""
    z = rng.standard_normal((n, dim))
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    return z * rng.uniform(0.0, 1.0, (n, 1)) ** (1.0 / dim)


def manufactured(points: np.ndarray, amplitudes: np.ndarray, wavevectors: np.ndarray,
                 phases: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(u, f) at ``points`` [n, d] for one field: ``amplitudes`` [K], ``wavevectors``
    [K, d], ``phases`` [K] (the formulas of the module docstring)."""
    d = points.shape[-1]
    theta = points @ wavevectors.T + phases  # [n, K]
    b = 1.0 - np.einsum("nd,nd->n", points, points)
    s, c = np.sin(theta), np.cos(theta)
    u = b * (s @ amplitudes)
    w2 = np.einsum("kd,kd->k", wavevectors, wavevectors)
    pw = points @ wavevectors.T  # p . w_k
    f = ((2.0 * d + b[:, None] * w2) * s + 4.0 * pw * c) @ amplitudes
    return u, f


def poisson_point_cloud(n_samples: int = 100, n_points: int = 1024, n_queries: int = 1024,
                        seed: int = 0, dim: int = 2, modes: int = 4,
                        max_frequency: float = 3.0, cache: bool = True
                        ) -> dict[str, np.ndarray]:
    """Samples of Poisson's equation ``-Laplace u = f`` on the unit disc (``dim=2``) or
    ball (``dim=3``) with ``u = 0`` on the boundary, on random point clouds (the
    manufactured family of the module docstring). Returns float64 arrays:

    * ``points`` [n_samples, n_points, dim]: the input cloud, uniform in the domain;
    * ``features`` [n_samples, n_points, 2]: f at the points and their signed distance
      to the boundary ``|p| - 1`` (negative inside);
    * ``queries`` [n_samples, n_queries, dim]: query points, uniform in the domain,
      independent of the input cloud;
    * ``u`` [n_samples, n_queries, 1]: the solution at the queries;
    * ``amplitudes`` [n_samples, modes] (a_k ~ N(0, 1/modes)), ``wavevectors``
      [n_samples, modes, dim] (each component ~ U[-max_frequency, max_frequency]) and
      ``phases`` [n_samples, modes] (~ U[0, 2 pi)): the field of each sample, so u and
      f can be evaluated anywhere with ``manufactured``.

    Sample i draws its field, then its points, then its queries from the i-th stream
    spawned from ``numpy.random.SeedSequence(seed)``, so it does not depend on
    ``n_samples``. Cached like the other generated data sets (docs/datasets.md);
    ``cache=False`` skips the cache.
    """
    fn = "poisson_point_cloud"
    n_samples = _checks.integer(fn, "n_samples", n_samples, 1)
    n_points = _checks.integer(fn, "n_points", n_points, 1)
    n_queries = _checks.integer(fn, "n_queries", n_queries, 1)
    dim = _checks.integer(fn, "dim", dim, 2)
    if dim > 3:
        raise ValueError(f"{fn}: dim must be 2 (the unit disc) or 3 (the unit ball), got "
                         f"{dim}")
    modes = _checks.integer(fn, "modes", modes, 1)
    max_frequency = _checks.real(fn, "max_frequency", max_frequency, positive=True)
    seed, cache = _checks.seed_and_cache(fn, seed, cache)

    def make() -> dict[str, np.ndarray]:
        out = {
            "points": np.empty((n_samples, n_points, dim)),
            "features": np.empty((n_samples, n_points, 2)),
            "queries": np.empty((n_samples, n_queries, dim)),
            "u": np.empty((n_samples, n_queries, 1)),
            "amplitudes": np.empty((n_samples, modes)),
            "wavevectors": np.empty((n_samples, modes, dim)),
            "phases": np.empty((n_samples, modes)),
        }
        for i, stream in enumerate(np.random.SeedSequence(seed).spawn(n_samples)):
            rng = np.random.default_rng(stream)
            a = rng.standard_normal(modes) / np.sqrt(modes)
            w = rng.uniform(-max_frequency, max_frequency, (modes, dim))
            phi = rng.uniform(0.0, 2.0 * np.pi, modes)
            pts = uniform_in_ball(rng, n_points, dim)
            qry = uniform_in_ball(rng, n_queries, dim)
            _, f = manufactured(pts, a, w, phi)
            u, _ = manufactured(qry, a, w, phi)
            out["points"][i], out["queries"][i] = pts, qry
            out["features"][i, :, 0], out["features"][i, :, 1] = f, disc_sdf(pts)
            out["u"][i, :, 0] = u
            out["amplitudes"][i], out["wavevectors"][i], out["phases"][i] = a, w, phi
        return out

    params = dict(n_samples=n_samples, n_points=n_points, n_queries=n_queries, seed=seed,
                  dim=dim, modes=modes, max_frequency=max_frequency)
    shapes = {"points": (n_samples, n_points, dim), "features": (n_samples, n_points, 2),
              "queries": (n_samples, n_queries, dim), "u": (n_samples, n_queries, 1),
              "amplitudes": (n_samples, modes), "wavevectors": (n_samples, modes, dim),
              "phases": (n_samples, modes)}
    return _cache.cached(fn, params, shapes, make, cache)


__all__ = ["disc_sdf", "manufactured", "poisson_point_cloud", "uniform_in_ball"]
