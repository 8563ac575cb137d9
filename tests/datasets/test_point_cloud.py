"""poisson_point_cloud (nbgrad/datasets/point_cloud.py): the manufactured solution checked
numerically (a finite-difference Laplacian of u, written here from its definition, equals
the stored f; u = 0 on the boundary), the clouds, determinism, the cache, shapes and
argument checks."""

import numpy as np
import pytest
from conftest import assert_same_bits

from nbgrad.datasets.point_cloud import manufactured, poisson_point_cloud


@pytest.fixture(autouse=True)
def data_dir(tmp_path, monkeypatch):
    """Every test caches into its own directory."""
    monkeypatch.setenv("NBGRAD_DATA_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def u_definition(p, a, w, phi):
    """u(p) = (1 - |p|^2) sum_k a_k sin(w_k . p + phi_k), straight from the definition."""
    return (1.0 - (p ** 2).sum(-1)) * (np.sin(p @ w.T + phi) @ a)


def fd_laplacian(fun, p, h=1e-2):
    """Fourth-order central differences: u'' ~ (-u(-2h) + 16 u(-h) - 30 u + 16 u(h) -
    u(2h)) / (12 h^2) per axis, summed."""
    total = np.zeros(p.shape[0])
    for axis in range(p.shape[1]):
        e = np.zeros(p.shape[1])
        e[axis] = h
        total += (-fun(p - 2 * e) + 16 * fun(p - e) - 30 * fun(p) + 16 * fun(p + e)
                  - fun(p + 2 * e)) / (12 * h * h)
    return total


@pytest.mark.parametrize("dim", [2, 3])
def test_minus_laplacian_of_u_is_f(dim):
    data = poisson_point_cloud(3, 200, 50, seed=11, dim=dim, cache=False)
    for i in range(3):
        a, w, phi = data["amplitudes"][i], data["wavevectors"][i], data["phases"][i]
        p = data["points"][i]
        lap = fd_laplacian(lambda q, a=a, w=w, phi=phi: u_definition(q, a, w, phi), p)
        f = data["features"][i, :, 0]
        # truncation error ~ h^4 |u^(6)| / 90 (|w| <= 3 sqrt(dim)): ~2e-8 max|f| measured
        np.testing.assert_allclose(-lap, f, atol=1e-6 * np.abs(f).max())


def test_u_at_queries_is_the_definition_and_vanishes_on_the_boundary():
    data = poisson_point_cloud(2, 30, 40, seed=3, cache=False)
    for i in range(2):
        a, w, phi = data["amplitudes"][i], data["wavevectors"][i], data["phases"][i]
        np.testing.assert_allclose(data["u"][i, :, 0],
                                   u_definition(data["queries"][i], a, w, phi),
                                   rtol=1e-12, atol=1e-13)
        t = np.linspace(0, 2 * np.pi, 64, endpoint=False)
        rim = np.stack([np.cos(t), np.sin(t)], 1)
        u_rim, _ = manufactured(rim, a, w, phi)
        np.testing.assert_allclose(u_rim, 0.0, atol=1e-14)


def test_clouds_inside_the_domain_and_signed_distance():
    data = poisson_point_cloud(2, 4000, 100, seed=5, cache=False)
    r = np.linalg.norm(data["points"], axis=-1)
    assert r.max() <= 1.0 and np.linalg.norm(data["queries"], axis=-1).max() <= 1.0
    np.testing.assert_allclose(data["features"][..., 1], r - 1.0, rtol=0, atol=1e-15)
    # uniform in the disc: P(r < 1/2) = 1/4 (8000 points: standard error 0.005)
    assert abs((r < 0.5).mean() - 0.25) < 0.02


def test_shapes_and_dtype():
    for dim in (2, 3):
        data = poisson_point_cloud(4, 17, 9, dim=dim, modes=3, cache=False)
        assert data["points"].shape == (4, 17, dim)
        assert data["features"].shape == (4, 17, 2)
        assert data["queries"].shape == (4, 9, dim)
        assert data["u"].shape == (4, 9, 1)
        assert data["amplitudes"].shape == (4, 3) and data["phases"].shape == (4, 3)
        assert data["wavevectors"].shape == (4, 3, dim)
        assert all(v.dtype == np.float64 for v in data.values())
        assert np.abs(data["wavevectors"]).max() <= 3.0


def test_deterministic_and_sample_streams():
    a = poisson_point_cloud(3, 20, 10, seed=9, cache=False)
    b = poisson_point_cloud(3, 20, 10, seed=9, cache=False)
    for key in a:
        assert_same_bits(a[key], b[key])
    c = poisson_point_cloud(3, 20, 10, seed=10, cache=False)
    assert not np.array_equal(a["points"], c["points"])
    # sample i does not depend on n_samples
    d = poisson_point_cloud(5, 20, 10, seed=9, cache=False)
    for key in a:
        assert_same_bits(a[key], d[key][:3])


def test_cache_round_trip(data_dir):
    first = poisson_point_cloud(2, 12, 6, seed=1)
    files = list(data_dir.glob("poisson_point_cloud-*.npz"))
    assert len(files) == 1
    again = poisson_point_cloud(2, 12, 6, seed=1)
    for key in first:
        assert_same_bits(first[key], again[key])
    fresh = poisson_point_cloud(2, 12, 6, seed=1, cache=False)
    for key in first:
        assert_same_bits(first[key], fresh[key])


@pytest.mark.parametrize("kwargs, match", [
    (dict(n_samples=0), "poisson_point_cloud: n_samples must be an integer >= 1"),
    (dict(n_points=2.5), "poisson_point_cloud: n_points must be an integer"),
    (dict(n_queries=-1), "poisson_point_cloud: n_queries must be an integer >= 1"),
    (dict(dim=1), "poisson_point_cloud: dim must be an integer >= 2"),
    (dict(dim=4), "poisson_point_cloud: dim must be 2 .* or 3"),
    (dict(modes=0), "poisson_point_cloud: modes"),
    (dict(max_frequency=0.0), "poisson_point_cloud: max_frequency must be > 0"),
    (dict(max_frequency=float("inf")), "poisson_point_cloud: max_frequency must be finite"),
    (dict(seed=-1), "poisson_point_cloud: seed"),
    (dict(cache="yes"), "poisson_point_cloud: cache must be True or False"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        poisson_point_cloud(**{"n_samples": 1, "n_points": 4, "n_queries": 4, **kwargs})
