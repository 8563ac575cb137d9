"""The generated PDE data sets: solver accuracy against exact, manufactured and
independently computed solutions, determinism, the file cache (round trip, corrupt
files regenerated, never loaded) and argument checks."""

import json
import os
import warnings

import numpy as np
import pytest
from conftest import assert_same_bits

from nbgrad.datasets import _cache as cache_mod
from nbgrad.datasets import (
    burgers1d,
    cache_dir,
    chain_graph,
    darcy2d,
    heat1d,
    heat_trajectories,
)
from nbgrad.datasets.burgers import grf_periodic_1d, kept_modes, solve_burgers
from nbgrad.datasets.burgers import grid_points as periodic_points
from nbgrad.datasets.darcy import darcy_matrix, grf_neumann_2d, solve_darcy
from nbgrad.datasets.darcy import grid_points as node_points
from nbgrad.datasets.heat import grid_points as heat_points


@pytest.fixture(autouse=True)
def data_dir(tmp_path, monkeypatch):
    """Every test caches into its own empty directory."""
    monkeypatch.setenv("NBGRAD_DATA_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


# -- chain graph -------------------------------------------------------------------------

def test_chain_graph():
    x, graph, y = chain_graph()
    assert x.shape == (20, 1) and y.shape == (20, 2)
    np.testing.assert_allclose(x[:, 0], np.linspace(0, 2 * np.pi, 20))
    np.testing.assert_array_equal(y, np.stack([np.sin(x[:, 0]), np.cos(x[:, 0])], 1))
    dst = np.repeat(np.arange(20), np.diff(graph.row_ptr))
    edges = set(zip(graph.col.tolist(), dst.tolist()))
    expected = {(i, i + 1) for i in range(19)} | {(i + 1, i) for i in range(19)}
    assert edges == expected and graph.nnz == 38


# -- heat equation -----------------------------------------------------------------------

def _sine_coefficients(u, grid, modes=5):
    """Least-squares sine coefficients of rows of u on the grid (an independent fit)."""
    x = heat_points(grid)
    basis = np.sin(np.pi * np.arange(1, modes + 1)[:, None] * x[None, :])
    return np.linalg.lstsq(basis.T, u.T, rcond=None)[0].T


def test_heat1d_exact_solution():
    (u0, u), (v0, v) = heat1d(n_train=30, n_test=7, grid=32, nu=0.01, t=1.0, cache=False)
    assert u0.shape == u.shape == (30, 32) and v0.shape == v.shape == (7, 32)
    x = heat_points(32)
    assert x[0] == 0.0 and x[-1] == 1.0  # the grid includes both ends
    for a0, at in ((u0, u), (v0, v)):
        a = _sine_coefficients(a0, 32)
        assert np.abs(a).max() <= 1.0
        np.testing.assert_allclose(a @ np.sin(np.pi * np.arange(1, 6)[:, None] * x), a0,
                                   atol=1e-13)  # u0 is a 5-mode sine series
        decay = np.exp(-0.01 * (np.pi * np.arange(1, 6)) ** 2)
        np.testing.assert_allclose(_sine_coefficients(at, 32), a * decay, atol=1e-13)
        assert np.all(a0[:, [0, -1]] == 0.0) and np.all(at[:, [0, -1]] == 0.0)


def test_heat1d_satisfies_the_pde():
    """u_t = nu u_xx by central differences in t and x on a fine grid: O(h^2 + d^2)."""
    nu, t, d, grid = 0.05, 0.4, 1e-3, 401
    (_, um), _ = heat1d(4, 1, grid=grid, nu=nu, t=t - d, cache=False)
    (_, up), _ = heat1d(4, 1, grid=grid, nu=nu, t=t + d, cache=False)
    (_, u), _ = heat1d(4, 1, grid=grid, nu=nu, t=t, cache=False)
    h = 1.0 / (grid - 1)
    u_t = (up - um) / (2 * d)
    u_xx = (u[:, 2:] - 2 * u[:, 1:-1] + u[:, :-2]) / h ** 2
    np.testing.assert_allclose(u_t[:, 1:-1], nu * u_xx, atol=2e-4)


def test_heat1d_test_set_independent_of_n_train():
    _, test_a = heat1d(10, 5, cache=False)
    _, test_b = heat1d(20, 5, cache=False)
    assert_same_bits(test_a[0], test_b[0])


def _dense_backward_euler(u, alpha, dt):
    """One backward-Euler step by a dense solve of the full-grid system, boundary rows
    the identity (an independent implementation)."""
    grid = u.shape[-1]
    r = alpha * dt * (grid - 1) ** 2
    a = np.eye(grid)
    for i in range(1, grid - 1):
        a[i, i - 1:i + 2] = [-r, 1 + 2 * r, -r]
    return np.linalg.solve(a, u.T).T


@pytest.mark.parametrize("grid,alpha,dt", [(48, 1e-2, 8e-4), (7, 0.3, 0.05), (3, 1.0, 0.1)])
def test_heat_trajectories_against_dense_backward_euler(grid, alpha, dt):
    traj = heat_trajectories(5, 12, grid=grid, alpha=alpha, dt=dt, left=-1.0, right=2.0,
                             seed=3, cache=False)
    assert traj.shape == (5, 13, grid)
    assert np.all(traj[:, :, 0] == -1.0) and np.all(traj[:, :, -1] == 2.0)
    u = traj[:, 0]
    for k in range(12):
        u = _dense_backward_euler(u, alpha, dt)
        np.testing.assert_allclose(traj[:, k + 1], u, rtol=0, atol=1e-12)


def test_heat_trajectories_initial_state_and_discrete_modes():
    """u0 - (linear profile) is a 3-mode sine series; each sine mode decays by the exact
    backward-Euler factor 1 / (1 + 4 r sin^2(m pi h / 2)) per step."""
    grid, alpha, dt, steps = 48, 1e-2, 8e-4, 30
    traj = heat_trajectories(6, steps, grid=grid, alpha=alpha, dt=dt, cache=False)
    x = heat_points(grid)
    lin = -1.0 + 2.0 * x
    c = _sine_coefficients(traj[:, 0] - lin, grid, modes=3)
    assert np.abs(c).max() <= 1.0
    m = np.arange(1, 4)
    np.testing.assert_allclose(c @ np.sin(np.pi * m[:, None] * x) + lin, traj[:, 0],
                               atol=1e-13)
    r = alpha * dt * (grid - 1) ** 2
    g = 1.0 / (1.0 + 4 * r * np.sin(m * np.pi / (2 * (grid - 1))) ** 2)
    expected = (c * g ** steps) @ np.sin(np.pi * m[:, None] * x) + lin
    np.testing.assert_allclose(traj[:, -1], expected, atol=1e-12)


# -- Darcy -------------------------------------------------------------------------------

def _manufactured(s, variable):
    """(a, f, u) with u = sin(pi x) sin(pi y) and f = -div(a grad u)."""
    x = node_points(s)
    X, Y = np.meshgrid(x, x, indexing="ij")
    u = np.sin(np.pi * X) * np.sin(np.pi * Y)
    if not variable:
        return 2.5 * np.ones((s, s)), 2.5 * 2 * np.pi ** 2 * u, u
    a = 1 + 0.5 * np.sin(np.pi * X) * np.cos(2 * Y)
    a_x = 0.5 * np.pi * np.cos(np.pi * X) * np.cos(2 * Y)
    a_y = -np.sin(np.pi * X) * np.sin(2 * Y)
    u_x = np.pi * np.cos(np.pi * X) * np.sin(np.pi * Y)
    u_y = np.pi * np.sin(np.pi * X) * np.cos(np.pi * Y)
    return a, -(a_x * u_x + a_y * u_y) + a * 2 * np.pi ** 2 * u, u


@pytest.mark.parametrize("variable", [False, True])
def test_darcy_solver_second_order(variable):
    sizes = [9, 17, 33, 65]
    errors = []
    for s in sizes:
        a, f, u = _manufactured(s, variable)
        errors.append(np.abs(solve_darcy(a, f) - u).max())
    h = 1.0 / (np.array(sizes) - 1)
    orders = np.diff(np.log(errors)) / np.diff(np.log(h))
    assert np.all(np.abs(orders - 2.0) < 0.1), orders
    assert errors[-1] < 1e-3


def test_darcy_matrix_symmetric_positive_definite():
    a = np.random.default_rng(1).uniform(3, 12, (7, 7))
    m = darcy_matrix(a).toarray()
    assert m.shape == (25, 25)
    np.testing.assert_array_equal(m, m.T)
    assert np.linalg.eigvalsh(m).min() > 0


def test_darcy_solver_one_unknown():
    """s = 3: one interior node with four faces of a, so u = f h^2 / (4 a)."""
    u = solve_darcy(np.full((3, 3), 2.0), 1.0)
    np.testing.assert_allclose(u, np.pad([[0.25 / 8]], 1))


def test_grf_neumann_single_mode():
    """One standard normal at mode (k1, k2) gives w_k c_k1 c_k2 cos(pi k1 x) cos(pi k2 y)."""
    s = 9
    xi = np.zeros((1, s, s))
    xi[0, 2, 1] = 1.0
    x = node_points(s)
    w = 3.0 * (np.pi ** 2 * 5 + 9.0) ** -1.0  # tau^(alpha-1) (pi^2 |k|^2 + tau^2)^(-alpha/2)
    expected = w * 2.0 * np.outer(np.cos(2 * np.pi * x), np.cos(np.pi * x))
    np.testing.assert_allclose(grf_neumann_2d(xi)[0], expected, atol=1e-14)
    xi[0, 0, 0] = 5.0  # the constant mode is dropped (mean zero)
    np.testing.assert_allclose(grf_neumann_2d(xi)[0], expected, atol=1e-14)


def test_darcy2d_data():
    a, u = darcy2d(6, resolution=12, seed=2, cache=False)
    assert a.shape == u.shape == (6, 12, 12)
    assert set(np.unique(a)) <= {3.0, 12.0} and 0.05 < (a == 12.0).mean() < 0.95
    assert np.all(u[:, [0, -1], :] == 0) and np.all(u[:, :, [0, -1]] == 0)
    assert np.all(u[:, 1:-1, 1:-1] > 0)  # f = 1 > 0: positive inside (maximum principle)
    for k in range(6):
        np.testing.assert_allclose(u[k], solve_darcy(a[k], 1.0), rtol=0, atol=0)
    a3, u3 = darcy2d(3, resolution=12, seed=2, cache=False)  # samples do not depend on n
    np.testing.assert_allclose(a3, a[:3], rtol=0, atol=0)
    np.testing.assert_allclose(u3, u[:3], rtol=1e-14, atol=1e-16)


# -- Burgers -----------------------------------------------------------------------------

def _cole_hopf(x, t, nu, c=1.6):
    """u = -2 nu phi_x / phi with phi_t = nu phi_xx:
    phi = c + e^(-4 pi^2 nu t) cos 2 pi x + 0.5 e^(-16 pi^2 nu t) sin 4 pi x > 0."""
    e1, e2 = np.exp(-4 * np.pi ** 2 * nu * t), np.exp(-16 * np.pi ** 2 * nu * t)
    phi = c + e1 * np.cos(2 * np.pi * x) + 0.5 * e2 * np.sin(4 * np.pi * x)
    phi_x = -2 * np.pi * e1 * np.sin(2 * np.pi * x) + 2 * np.pi * e2 * np.cos(4 * np.pi * x)
    return -2 * nu * phi_x / phi


@pytest.mark.parametrize("nu,t,tol", [(0.05, 0.5, 1e-7), (0.01, 0.3, 1e-8), (0.1, 1.0, 1e-7)])
def test_burgers_against_cole_hopf(nu, t, tol):
    x = periodic_points(128)
    u0 = np.stack([_cole_hopf(x, 0.0, nu), _cole_hopf(x - 0.3, 0.0, nu)])
    u = solve_burgers(u0, nu, t)
    exact = np.stack([_cole_hopf(x, t, nu), _cole_hopf(x - 0.3, t, nu)])
    assert np.abs(u - exact).max() < tol


def test_burgers_converges_in_resolution():
    nu, t = 0.02, 0.4
    errors = []
    for res in (16, 24, 32):  # where the spatial error dominates the time error
        x = periodic_points(res)
        errors.append(np.abs(solve_burgers(_cole_hopf(x, 0.0, nu)[None], nu, t)
                             - _cole_hopf(x, t, nu)).max())
    # spectral: the error ratios beat any fixed order (4th order would give 3.2 and 2.4)
    assert errors[0] > 5 * errors[1] and errors[1] > 5 * errors[2], errors


def test_burgers1d_data():
    u0, ut = burgers1d(8, resolution=64, nu=0.1, t=0.2, seed=4, cache=False)
    assert u0.shape == ut.shape == (8, 64)
    spectrum = np.abs(np.fft.rfft(u0))
    k = kept_modes(64)
    assert spectrum[:, 0].max() < 1e-12 and spectrum[:, k + 1:].max() < 1e-12
    np.testing.assert_allclose(ut.mean(1), u0.mean(1), atol=1e-14)  # mass is conserved
    assert np.all((ut ** 2).sum(1) < (u0 ** 2).sum(1))  # energy decays
    assert np.abs(ut).max() <= np.abs(u0).max()  # maximum principle
    np.testing.assert_allclose(ut, solve_burgers(u0, 0.1, 0.2), rtol=0, atol=0)


def test_grf_periodic_single_mode():
    k = kept_modes(32)
    xi, eta = np.zeros((1, k)), np.zeros((1, k))
    xi[0, 2], eta[0, 0] = 1.0, -2.0
    x = periodic_points(32)
    sigma = 7.0 ** 2
    w = lambda m: np.sqrt(2) * sigma * (4 * np.pi ** 2 * m ** 2 + 49.0) ** -1.25  # noqa: E731
    expected = w(3) * np.cos(6 * np.pi * x) - 2 * w(1) * np.sin(2 * np.pi * x)
    np.testing.assert_allclose(grf_periodic_1d(xi, eta, 32)[0], expected, atol=1e-14)


# -- determinism and cache ---------------------------------------------------------------

SMALL = {
    "heat1d": (heat1d, dict(n_train=6, n_test=3, grid=16)),
    "heat_trajectories": (heat_trajectories, dict(n_traj=3, steps=4, grid=10)),
    "darcy2d": (darcy2d, dict(n=3, resolution=8)),
    "burgers1d": (burgers1d, dict(n=3, resolution=32, t=0.1)),
}


def _flat(result):
    """The arrays of a generator's result, in order."""
    if isinstance(result, np.ndarray):
        return [result]
    return [a for item in result for a in _flat(item)]


def _files(directory):
    return sorted(p for p in directory.glob("*.npz")) if directory.exists() else []


@pytest.mark.parametrize("name", sorted(SMALL))
def test_deterministic_and_cached_round_trip(name, data_dir):
    fn, kwargs = SMALL[name]
    fresh = _flat(fn(**kwargs, seed=5, cache=False))
    again = _flat(fn(**kwargs, seed=5, cache=False))
    other = _flat(fn(**kwargs, seed=6, cache=False))
    assert not _files(data_dir)  # cache=False writes nothing
    for a, b in zip(fresh, again):
        assert_same_bits(a, b)
    assert any(not np.array_equal(a, b) for a, b in zip(fresh, other))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        first = _flat(fn(**kwargs, seed=5))  # generated and written
        (path,) = _files(data_dir)
        assert path.name.startswith(f"{name}-v{cache_mod.FORMAT}-")
        stamp = path.stat().st_mtime_ns
        second = _flat(fn(**kwargs, seed=5))  # loaded
        assert path.stat().st_mtime_ns == stamp
    for a, b, c in zip(fresh, first, second):
        assert_same_bits(a, b)
        assert_same_bits(a, c)
    fn(**kwargs, seed=6)  # other parameters: another file
    assert len(_files(data_dir)) == 2


def test_cache_key_covers_every_parameter():
    base = dict(n_train=3, n_test=2, grid=8, nu=0.01, t=1.0, seed=0)
    paths = {cache_mod.cache_path("heat1d", base)}
    for key, value in [("n_train", 4), ("n_test", 3), ("grid", 9), ("nu", 0.02),
                       ("t", 0.5), ("seed", 1)]:
        paths.add(cache_mod.cache_path("heat1d", {**base, key: value}))
    assert len(paths) == 7
    assert cache_mod.cache_path("heat1d", base) != cache_mod.cache_path("burgers1d", base)


def test_cache_dir_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("NBGRAD_DATA_DIR", str(tmp_path / "d"))
    assert cache_dir() == tmp_path / "d"
    monkeypatch.delenv("NBGRAD_DATA_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "nbgrad" / "datasets"


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _flip_bytes(path):
    data = bytearray(path.read_bytes())
    for i in range(len(data) // 3, len(data) // 3 + 64, 7):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def _rewrite(path, change):
    """Rewrite the file as a valid archive after ``change(arrays, meta)``."""
    with np.load(path) as archive:
        arrays = {k: archive[k] for k in archive.files}
    meta = json.loads(str(arrays.pop("__meta__")[()]))
    change(arrays, meta)
    with open(path, "wb") as f:
        np.savez(f, **arrays, __meta__=np.array(json.dumps(meta)))


def _poison_values(arrays, meta):
    arrays["u0"] = arrays["u0"] + 1.0  # checksum now stale


def _poison_nan(arrays, meta):
    arrays["u0"] = arrays["u0"].copy()
    arrays["u0"][0, 0] = np.nan
    meta["checksum"] = cache_mod.checksum(arrays)


def _poison_params(arrays, meta):
    meta["params"]["nu"] = 0.5  # a file for other parameters (a hash collision)


def _poison_shape(arrays, meta):
    arrays["u0"] = arrays["u0"][:, :-1]
    meta["checksum"] = cache_mod.checksum(arrays)


@pytest.mark.parametrize("damage", [
    _truncate, _flip_bytes, lambda p: p.write_bytes(b""), lambda p: p.write_bytes(b"PK\x03"),
    lambda p: _rewrite(p, _poison_values), lambda p: _rewrite(p, _poison_nan),
    lambda p: _rewrite(p, _poison_params), lambda p: _rewrite(p, _poison_shape)],
    ids=["truncated", "flipped", "empty", "junk", "values", "nan", "params", "shape"])
def test_corrupt_cache_file_regenerated(damage, data_dir):
    kwargs = dict(n=4, resolution=32, t=0.05, seed=1)
    good = _flat(burgers1d(**kwargs))
    (path,) = _files(data_dir)
    damage(path)
    with pytest.warns(RuntimeWarning, match="burgers1d.*regenerating"):
        again = _flat(burgers1d(**kwargs))
    for a, b in zip(good, again):
        assert_same_bits(a, b)
    with warnings.catch_warnings():  # the file was overwritten with a good one
        warnings.simplefilter("error")
        for a, b in zip(good, _flat(burgers1d(**kwargs))):
            assert_same_bits(a, b)
    assert not [p for p in data_dir.iterdir() if p.suffix == ".tmp"]


def test_unwritable_cache_dir_warns_and_returns(monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("NBGRAD_DATA_DIR", str(blocker / "sub"))
    with pytest.warns(RuntimeWarning, match="could not write"):
        out = heat1d(3, 2, grid=8)
    assert_same_bits(out[0][0], heat1d(3, 2, grid=8, cache=False)[0][0])


def test_cache_files_written_atomically(data_dir, monkeypatch):
    """A failure while writing leaves no file and no temporary behind."""
    def fail(*args, **kwargs):
        raise OSError("disk full")
    monkeypatch.setattr(os, "replace", fail)
    with pytest.warns(RuntimeWarning, match="could not write"):
        heat1d(3, 2, grid=8)
    assert not list(data_dir.iterdir())


# -- argument checks ---------------------------------------------------------------------

@pytest.mark.parametrize("fn,kwargs,arg", [
    (chain_graph, dict(n=1), "n"),
    (heat1d, dict(n_train=0), "n_train"),
    (heat1d, dict(n_test=-1), "n_test"),
    (heat1d, dict(grid=2), "grid"),
    (heat1d, dict(nu=0.0), "nu"),
    (heat1d, dict(nu=float("nan")), "nu"),
    (heat1d, dict(t=-1.0), "t"),
    (heat1d, dict(seed=-1), "seed"),
    (heat1d, dict(n_train=2.5), "n_train"),
    (heat1d, dict(cache="yes"), "cache"),
    (heat_trajectories, dict(n_traj=0, steps=3), "n_traj"),
    (heat_trajectories, dict(n_traj=2, steps=0), "steps"),
    (heat_trajectories, dict(n_traj=2, steps=3, grid=2), "grid"),
    (heat_trajectories, dict(n_traj=2, steps=3, alpha=-1.0), "alpha"),
    (heat_trajectories, dict(n_traj=2, steps=3, dt=0.0), "dt"),
    (heat_trajectories, dict(n_traj=2, steps=3, left=float("inf")), "left"),
    (heat_trajectories, dict(n_traj=2, steps=3, right="1"), "right"),
    (darcy2d, dict(n=0), "n"),
    (darcy2d, dict(n=2, resolution=2), "resolution"),
    (darcy2d, dict(n=True), "n"),
    (burgers1d, dict(n=0), "n"),
    (burgers1d, dict(n=2, resolution=3), "resolution"),
    (burgers1d, dict(n=2, nu=0.0), "nu"),
    (burgers1d, dict(n=2, t=-0.1), "t"),
])
def test_bad_arguments(fn, kwargs, arg):
    with pytest.raises(ValueError, match=rf"^{fn.__name__}: {arg} "):
        fn(**kwargs)
