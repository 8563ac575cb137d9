"""2-D Darcy flow ``-div(a grad u) = 1`` on the unit square with ``u = 0`` on the
boundary and a piecewise-constant permeability ``a`` thresholded from a Gaussian random
field: the FNO benchmark's construction, solved by finite differences. The math is in
docs/datasets.md."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import spsolve

from . import _cache, _checks

GRF_ALPHA = 2.0  # covariance (-Laplace + tau^2 I)^(-alpha), Neumann Laplacian
GRF_TAU = 3.0
A_HIGH = 12.0  # a where the field is >= 0
A_LOW = 3.0  # a where the field is < 0


def grid_points(resolution: int) -> np.ndarray:
    """The nodes ``x_i = i / (resolution - 1)`` on [0, 1], both ends included."""
    return np.linspace(0.0, 1.0, resolution)


def grf_neumann_2d(xi: np.ndarray, alpha: float = GRF_ALPHA, tau: float = GRF_TAU
                   ) -> np.ndarray:
    """Samples [n, s, s] of the mean-zero Gaussian random field with covariance
    ``sigma^2 (-Laplace + tau^2 I)^(-alpha)`` (zero-Neumann Laplacian on [0, 1]^2) at the
    nodes ``x_i = i / (s - 1)``, from standard normals ``xi`` [n, s, s].

    Karhunen-Loeve series over the Laplacian's eigenfunctions
    ``phi_k(x, y) = c_k1 c_k2 cos(pi k1 x) cos(pi k2 y)`` (``c_0 = 1``, ``c_k = sqrt 2``,
    orthonormal on the square) with eigenvalues ``pi^2 |k|^2``, ``k1, k2 = 0..s-1``,
    the constant mode ``k = 0`` dropped (mean zero):
    ``g = sum_k sigma (pi^2 |k|^2 + tau^2)^(-alpha/2) xi_k phi_k``,
    ``sigma = tau^(alpha - d/2)`` with ``d = 2``. This is the scaling of FNO's Darcy
    generator (``GRF.m``: ``tau^(alpha-1) (pi^2 |k|^2 + tau^2)^(-alpha/2)`` weights of
    an inverse 2-D cosine transform), the Neumann-cosine counterpart of its periodic
    ``GaussianRF`` (``sqrt 2 sigma (4 pi^2 |k|^2 + tau^2)^(-alpha/2)``,
    ``sigma = tau^(0.5 (2 alpha - d))``). The thresholded ``a`` depends only on the
    sign of ``g``, so the scale ``sigma`` does not change the data set.
    """
    s = xi.shape[-1]
    k = np.arange(s, dtype=np.float64)
    sigma = tau ** (alpha - 1.0)
    weight = sigma * (np.pi ** 2 * (k[:, None] ** 2 + k[None, :] ** 2) + tau ** 2) ** (
        -alpha / 2.0)
    weight[0, 0] = 0.0
    c = np.where(k == 0, 1.0, np.sqrt(2.0))
    basis = c[None, :] * np.cos(np.pi * grid_points(s)[:, None] * k[None, :])  # [x, k]
    return basis @ (weight * xi) @ basis.T


def harmonic_mean(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``2 p q / (p + q)``: the face coefficient of two cells in series (exact for a
    1-D flux through a piecewise-constant ``a``)."""
    return 2.0 * p * q / (p + q)


def darcy_matrix(a: np.ndarray) -> sp.csc_matrix:
    """The 5-point matrix of ``-div(a grad u)`` on the interior nodes of the
    ``s x s`` node grid (``h = 1 / (s - 1)``, ``u = 0`` on the boundary), unknown
    ``(i, j)`` (1 <= i, j <= s-2) at row ``(i - 1) (s - 2) + (j - 1)``:
    ``(A u)_P = [a_e (u_P - u_E) + a_w (u_P - u_W) + a_n (u_P - u_N) + a_s (u_P - u_S)]
    / h^2`` with the face coefficients the harmonic means of ``a`` at the two nodes.
    Boundary neighbours are 0 and drop out; their faces stay on the diagonal."""
    s = a.shape[0]
    m = s - 2
    inv_h2 = float(s - 1) ** 2
    fx = harmonic_mean(a[:-1, 1:-1], a[1:, 1:-1])  # face (i + 1/2, j), [s - 1, m]
    fy = harmonic_mean(a[1:-1, :-1], a[1:-1, 1:])  # face (i, j + 1/2), [m, s - 1]
    diag = (fx[:-1] + fx[1:] + fy[:, :-1] + fy[:, 1:]) * inv_h2  # [m, m]
    idx = np.arange(m * m).reshape(m, m)  # row of unknown (i, j) is idx[i - 1, j - 1]
    off_x = -fx[1:-1] * inv_h2  # coupling (i, j) - (i + 1, j), [m - 1, m]
    off_y = -fy[:, 1:-1] * inv_h2  # coupling (i, j) - (i, j + 1), [m, m - 1]
    rows = [idx, idx[:-1], idx[1:], idx[:, :-1], idx[:, 1:]]
    cols = [idx, idx[1:], idx[:-1], idx[:, 1:], idx[:, :-1]]
    vals = [diag, off_x, off_x, off_y, off_y]
    return sp.coo_matrix((np.concatenate([v.reshape(-1) for v in vals]),
                          (np.concatenate([r.reshape(-1) for r in rows]),
                           np.concatenate([c.reshape(-1) for c in cols]))),
                         shape=(m * m, m * m)).tocsc()


def solve_darcy(a: np.ndarray, f: np.ndarray | float = 1.0) -> np.ndarray:
    """``u`` [s, s] with ``-div(a grad u) = f`` on the interior nodes and ``u = 0`` on the
    boundary nodes, for ``a`` [s, s] > 0 and ``f`` [s, s] (its boundary values unused) or
    a number, by ``darcy_matrix`` and a sparse LU solve. Second-order accurate for smooth
    ``a`` and ``u``."""
    s = a.shape[0]
    rhs = np.broadcast_to(np.asarray(f, dtype=np.float64), (s, s))[1:-1, 1:-1]
    u = np.zeros((s, s))
    u[1:-1, 1:-1] = spsolve(darcy_matrix(a), rhs.reshape(-1)).reshape(s - 2, s - 2)
    return u


def darcy2d(n: int, resolution: int = 16, seed: int = 0, cache: bool = True
            ) -> tuple[np.ndarray, np.ndarray]:
    """(a [n, res, res], u [n, res, res]), float64: ``-div(a grad u) = 1`` on [0, 1]^2,
    ``u = 0`` on the boundary.

    Both arrays live on the ``res x res`` nodes ``(x_i, y_j) = (i, j) / (res - 1)``,
    boundary included (``u`` is exactly 0 there); axis 1 is x, axis 2 is y.
    ``a = 12`` where a mean-zero Gaussian random field with covariance
    ``(-Laplace + 9 I)^(-2)`` (``grf_neumann_2d``: alpha = 2, tau = 3, FNO's
    construction) is >= 0 and ``a = 3`` elsewhere; ``u`` from the 5-point scheme with
    harmonic-mean face coefficients (``solve_darcy``). Sample ``k`` uses the standard
    normals ``default_rng(seed).standard_normal((n, res, res))[k]``, so the first samples
    do not depend on ``n``. Cached (see docs/datasets.md).
    """
    fn = "darcy2d"
    n = _checks.integer(fn, "n", n, 1)
    resolution = _checks.integer(fn, "resolution", resolution, 3)
    seed, cache = _checks.seed_and_cache(fn, seed, cache)

    def make() -> dict[str, np.ndarray]:
        xi = np.random.default_rng(seed).standard_normal((n, resolution, resolution))
        a = np.where(grf_neumann_2d(xi) >= 0.0, A_HIGH, A_LOW)
        u = np.stack([solve_darcy(a_k) for a_k in a])
        return {"a": a, "u": u}

    params = dict(n=n, resolution=resolution, seed=seed)
    shape = (n, resolution, resolution)
    d = _cache.cached(fn, params, {"a": shape, "u": shape}, make, cache)
    return d["a"], d["u"]
