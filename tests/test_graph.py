"""Graph (CSR), Graph.from_edges, radius_graph: oracles, brute force, extreme coordinates,
both searches, validation, threads."""

import contextlib
import math
import threading
import tracemalloc

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads
from hypothesis import given, settings
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.kernels import csr
from nbgrad.testing.strategies_graph import (
    point_clouds,
    radii,
    random_graphs,
    wide_point_clouds,
    wide_radii,
)

# -- helpers -------------------------------------------------------------------------------


def scale_of(radius):
    """radius_graph's power of two s: s * radius in [0.5, 1); 2^1023 for radius 0."""
    exponent = math.frexp(radius)[1] if radius > 0 else -1074
    return math.ldexp(1.0, min(-exponent, 1023))


def brute_force_rows(points, radius, loop):
    """Row i: all j with sum_a (s (p_j - p_i)_a)^2 <= (s r)^2 in float64, s = scale_of(r)
    (radius_graph's test), sorted; and the scaled squared distances."""
    s = scale_of(radius)
    with np.errstate(over="ignore", under="ignore"):
        diff = s * (points[None, :, :] - points[:, None, :])
        d2 = (diff * diff).sum(axis=-1)
    adj = d2 <= (s * radius) ** 2
    if not loop:
        np.fill_diagonal(adj, False)
    return [np.flatnonzero(adj[i]) for i in range(len(points))], d2


def rows_of(graph):
    return [graph.col[graph.row_ptr[i]:graph.row_ptr[i + 1]] for i in range(graph.num_nodes)]


def assert_rows_equal(graph, rows):
    assert graph.num_nodes == len(rows)
    for i, (got, want) in enumerate(zip(rows_of(graph), rows)):
        assert np.array_equal(got, want), f"row {i}: {got} != {want}"


def assert_same_graph(a, b):
    """Same CSR arrays (values, dtype and order), edge ids and sizes."""
    for name in ("row_ptr", "col", "edge_id"):
        assert_same_bits(getattr(a, name), getattr(b, name))
    assert (a.num_nodes, a.num_edge_ids) == (b.num_nodes, b.num_edge_ids)


SEARCHES = ("cells", "tree")


@contextlib.contextmanager
def forced_search(search):
    """radius_graph with its search fixed to ``search`` ("cells" or "tree")."""
    chosen = csr.radius_search
    csr.radius_search = lambda n, d: search
    try:
        yield
    finally:
        csr.radius_search = chosen


def radius_graph_by(search, *args, **kwargs):
    with forced_search(search):
        return nb.radius_graph(*args, **kwargs)


def finishes_within(seconds, fn, *args):
    """fn(*args), or AssertionError if it has not returned after ``seconds`` (it runs on a
    daemon thread, so a hang fails the test instead of the whole run)."""
    result = {}
    worker = threading.Thread(target=lambda: result.update(value=fn(*args)), daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"{fn.__name__} did not return within {seconds} s"
    return result["value"]


# -- radius_graph --------------------------------------------------------------------------


def test_radius_graph_5x5_grid_oracle():
    # spacing 0.25, radius 0.3, self loops: 25 self + 80 directed 4-neighbours
    ticks = np.arange(5) * 0.25
    points = np.array([(x, y) for x in ticks for y in ticks])
    g = nb.radius_graph(points, 0.3)
    assert g.nnz == 105
    assert g.num_edge_ids == 105 and np.array_equal(g.edge_id, np.arange(105))
    assert np.array_equal(rows_of(g)[0], [0, 1, 5])          # corner (0, 0)
    assert np.array_equal(rows_of(g)[12], [7, 11, 12, 13, 17])  # centre (0.5, 0.5)
    assert np.array_equal(g.degree, [3 if i in (0, 4, 20, 24) else 5 if i in
                                     (6, 7, 8, 11, 12, 13, 16, 17, 18) else 4
                                     for i in range(25)])
    assert nb.radius_graph(points, 0.3, loop=False).nnz == 80


@given(point_clouds(), radii(), st.booleans())
def test_radius_graph_matches_brute_force(points, radius, loop):
    g = nb.radius_graph(points, radius, loop=loop)
    rows, _ = brute_force_rows(points, radius, loop)
    assert_rows_equal(g, rows)
    assert np.array_equal(g.edge_id, np.arange(g.nnz))


@given(point_clouds(min_points=1), radii(), st.booleans(), st.integers(1, 5))
def test_radius_graph_max_neighbors_keeps_nearest(points, radius, loop, k):
    g = nb.radius_graph(points, radius, loop=loop, max_neighbors=k)
    rows, d2 = brute_force_rows(points, radius, loop)
    # nearest k by (distance, index), then listed by index
    want = [np.sort(sorted(r, key=lambda j, i=i: (d2[i, j], j))[:k]) for i, r in enumerate(rows)]
    assert_rows_equal(g, want)


# (points, radius, rows with loop=False): the true geometry, where |dx|^2 <= r^2 in
# float64 would over- or underflow.
EXTREME_CASES = [
    # coordinate differences overflow: 2e308 apart is farther than any finite radius
    ([[-1e308, -1e308], [1e308, 1e308], [0.0, 0.0]], 1.0, [[], [], []]),
    ([[-1e308, -1e308], [1e308, 1e308], [0.0, 0.0]], 1.5e308, [[2], [2], [0, 1]]),
    ([[-1e308], [1e308], [0.0]], 1.0, [[], [], []]),
    ([[-1e308], [1e308], [0.0]], 1e308, [[2], [2], [0, 1]]),
    ([[-1.7976931348623157e308], [1.7976931348623157e308]], 1.7976931348623157e308, [[], []]),
    # squares overflow: 1e300 apart is outside radius 1e200 (both squares are inf)
    ([[0.0], [1e300]], 1e200, [[], []]),
    ([[0.0], [1e200]], 1e200, [[1], [0]]),
    # squares underflow: 2.1e-215 apart is outside radius 0 and 1e-215
    ([[0.0], [2.1e-215]], 0.0, [[], []]),
    ([[0.0], [2.1e-215]], 1e-215, [[], []]),
    ([[0.0], [2.1e-215]], 2.1e-215, [[1], [0]]),
    ([[0.0], [5e-324], [-0.0]], 0.0, [[2], [], [0]]),
    # a 3-4-5 triangle at 2^-540, whose squares are subnormal or 0
    ([[0.0, 0.0], [math.ldexp(3, -540), math.ldexp(4, -540)]], math.ldexp(5, -540),
     [[1], [0]]),
    ([[0.0, 0.0], [math.ldexp(3, -540), math.ldexp(4, -540)]],
     math.nextafter(math.ldexp(5, -540), 0.0), [[], []]),
]


@pytest.mark.parametrize("search", SEARCHES)
@pytest.mark.parametrize("points, radius, rows", EXTREME_CASES)
def test_radius_graph_extreme_coordinates(points, radius, rows, search):
    # the extent of such points overflows: no search may size a grid from it
    points = np.array(points)
    g = finishes_within(60, radius_graph_by, search, points, radius, False)
    assert_rows_equal(g, rows)
    with_loops = radius_graph_by(search, points, radius)
    assert_rows_equal(with_loops, [sorted([i, *r]) for i, r in enumerate(rows)])
    nearest = radius_graph_by(search, points, radius, loop=False, max_neighbors=1)
    assert all(len(r) <= 1 and set(r) <= set(w) for r, w in zip(rows_of(nearest), rows))


@settings(max_examples=60)
@given(wide_point_clouds(), wide_radii(), st.booleans())
def test_radius_graph_wide_range_matches_brute_force(points, radius, loop):
    rows, _ = brute_force_rows(points, radius, loop)
    for search in SEARCHES:
        assert_rows_equal(radius_graph_by(search, points, radius, loop=loop), rows)


@given(st.one_of(point_clouds(), wide_point_clouds()), st.one_of(radii(), wide_radii()),
       st.booleans(), st.one_of(st.none(), st.integers(1, 4)))
def test_radius_graph_same_graph_from_either_search(points, radius, loop, k):
    cells = radius_graph_by("cells", points, radius, loop=loop, max_neighbors=k)
    tree = radius_graph_by("tree", points, radius, loop=loop, max_neighbors=k)
    assert_same_graph(cells, tree)


@pytest.mark.parametrize("n, d, radius", [(3000, 3, 0.1), (2000, 5, 0.3), (500, 1, 0.01)])
def test_radius_graph_same_graph_from_either_search_larger_clouds(n, d, radius):
    points = np.random.default_rng(d).random((n, d))
    graphs = [radius_graph_by(search, points, radius) for search in SEARCHES]
    assert graphs[0].nnz > 5 * n
    assert_same_graph(*graphs)


def test_radius_graph_search_choice():
    # the measured rule of kernels/csr.py:radius_search
    assert [csr.radius_search(100, d) for d in (1, 2, 3, 4, 5)] == \
        ["cells", "cells", "tree", "tree", "tree"]
    assert [csr.radius_search(10_000, d) for d in (1, 2, 3, 4, 5, 8, 16)] == \
        ["cells"] * 4 + ["tree"] * 3


@pytest.mark.parametrize("n, d", [(10, 16), (40, 32)])
def test_radius_graph_high_dimension_stays_small(n, d):
    # a cell list walks 3^(d-1) runs of cells per point (its offset table alone would be
    # 3^15 x 15 int64 at d = 16): the search must stay O(N d + nnz) here
    points = np.random.default_rng(d).random((n, d))
    radius = math.sqrt(d / 6)  # the root mean square distance: about half the pairs
    tracemalloc.start()
    try:
        g = nb.radius_graph(points, radius)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, f"peak {peak / 2**20:.0f} MB"
    assert_rows_equal(g, brute_force_rows(points, radius, True)[0])
    assert 0 < g.nnz - n < n * (n - 1)


def test_radius_graph_tree_same_bits_at_1_and_2_threads():
    points = np.random.default_rng(1).random((5000, 5))
    g1 = at_threads(1, radius_graph_by, "tree", points, 0.25)
    g2 = at_threads(2, radius_graph_by, "tree", points, 0.25)
    assert_same_graph(g1, g2)
    assert_same_graph(g1, radius_graph_by("tree", points, 0.25))


def test_radius_graph_max_neighbors_tie_goes_to_smaller_index():
    points = np.array([[0.0], [-1.0], [1.0], [2.0]])  # 1 and 2 are both at distance 1 from 0
    g = nb.radius_graph(points, 1.5, loop=False, max_neighbors=1)
    assert np.array_equal(rows_of(g)[0], [1])
    assert np.array_equal(rows_of(g)[3], [2])


def test_radius_graph_against_scipy_larger_cloud():
    from scipy.spatial import cKDTree
    points = np.random.default_rng(3).random((3000, 3))
    g = nb.radius_graph(points, 0.08)
    tree = cKDTree(points)
    want = tree.query_ball_point(points, 0.08, return_sorted=True)
    assert_rows_equal(g, [np.array(w) for w in want])


@pytest.mark.parametrize("n", [40, 300])
def test_radius_graph_long_rows_are_sorted(n):
    """Rows far longer than the usual few neighbours (up to n - 1) come out sorted too."""
    points = np.random.default_rng(n).random((n, 2))
    g = nb.radius_graph(points, 0.9, loop=False)
    d2 = ((points[:, None] - points[None]) ** 2).sum(-1)
    want = [np.flatnonzero((d2[i] <= 0.81) & (np.arange(n) != i)) for i in range(n)]
    assert max(len(w) for w in want) > (n - 1) // 2
    assert_rows_equal(g, want)


def test_radius_graph_tiny_radius_coarsens_grid_and_finds_duplicates():
    # a radius far below the spread would need ~1e24 cells; the grid is coarsened instead
    points = np.array([[0.0, 0.0], [1e6, 1e6], [0.0, 0.0], [5.0, 5.0]])
    g = nb.radius_graph(points, 1e-9, loop=False)
    assert_rows_equal(g, [[2], [], [0], []])


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), d=st.integers(1, 3), n=st.integers(1, 300),
       radius=st.sampled_from([0.0, 0.1, 0.25, 0.5]), loop=st.booleans())
def test_radius_graph_on_lattice_points_matches_brute_force(seed, d, n, radius, loop):
    # points on a coarse lattice: many equal points share a cell, so without the self
    # loop the cell list must leave out the point itself (by its position in the cell
    # order), not every point equal to it
    points = np.random.default_rng(seed).integers(0, 4, (n, d)) / 4.0
    want = brute_force_rows(points, radius, loop)[0]
    for threads in (1, 2):
        graph = at_threads(threads, radius_graph_by, "cells", points, radius, loop=loop)
        assert_rows_equal(graph, want)


def test_radius_graph_edge_cases():
    assert nb.radius_graph(np.zeros((0, 2)), 1.0).nnz == 0
    assert nb.radius_graph(np.zeros((0, 2)), 1.0).num_nodes == 0
    assert_rows_equal(nb.radius_graph(np.ones((1, 4)), 0.5), [[0]])
    assert nb.radius_graph(np.ones((1, 4)), 0.5, loop=False).nnz == 0
    # integer and float32 points and a Tensor are accepted (computed in float64)
    pts = np.array([[0, 0], [1, 0], [3, 0]])
    for p in (pts, pts.astype(np.float32), nb.tensor(pts.astype(np.float32))):
        assert_rows_equal(nb.radius_graph(p, 1, loop=False), [[1], [0], []])


def test_radius_graph_same_bits_at_1_and_2_threads():
    points = np.random.default_rng(0).random((20000, 2))
    g1 = at_threads(1, nb.radius_graph, points, 0.02)
    g2 = at_threads(2, nb.radius_graph, points, 0.02)
    assert_same_bits(g1.row_ptr, g2.row_ptr)
    assert_same_bits(g1.col, g2.col)
    k1 = at_threads(1, nb.radius_graph, points, 0.02, max_neighbors=4)
    k2 = at_threads(2, nb.radius_graph, points, 0.02, max_neighbors=4)
    assert_same_bits(k1.col, k2.col)


def test_radius_graph_3d_same_bits_at_1_and_2_threads():
    points = np.random.default_rng(2).random((20000, 3))
    g1 = at_threads(1, nb.radius_graph, points, 0.05, loop=False)
    g2 = at_threads(2, nb.radius_graph, points, 0.05, loop=False)
    assert g1.nnz > 5 * len(points)
    assert_same_graph(g1, g2)


def test_radius_graph_rows_beyond_the_sampled_room():
    # the cell list sizes each chunk's staging part from every 8th row's count: here
    # those rows are isolated points and the others share one dense cluster, so every
    # part fills up and the remaining rows take the count-then-write path (with rows
    # far longer than the rank sort's 64 entries: the merge sort)
    n = 2048
    rng = np.random.default_rng(4)
    points = rng.random((n, 2)) * 0.5
    isolated = np.arange(0, n, 8)
    points[isolated] = 10.0 * np.stack([isolated, isolated], axis=1)
    rows = brute_force_rows(points, 1.0, False)[0]
    assert max(len(r) for r in rows) > 1000
    for threads in (1, 2):
        assert_rows_equal(at_threads(threads, nb.radius_graph, points, 1.0, loop=False), rows)


@pytest.mark.parametrize("d", [1, 2, 3, 4, 5])
def test_cell_list_same_graph_at_any_cell_side(d):
    # cells of side r / reach, (2 reach + 1)^(d-1) runs per point: one graph for any reach
    from nbgrad.kernels.cell_list import radius_cells
    rng = np.random.default_rng(d)
    points, query = rng.random((700, d)), rng.random((300, d))
    radius = 0.3 if d > 2 else 0.1
    s = scale_of(radius)
    frame = radius * (1 + 2.0 ** -20)
    for loop in (True, False):
        want = rows_of(radius_graph_by("tree", points, radius, loop=loop))
        want_query = rows_of(radius_graph_by("tree", points, radius, query=query))
        for reach in (1, 2, 3):
            row_ptr, col = radius_cells(points, points, None, None, frame, s,
                                        (s * radius) ** 2, loop, reach)
            assert_rows_equal(nb.Graph(row_ptr, col), want)
            row_ptr, col = radius_cells(points, points, query, query, frame, s,
                                        (s * radius) ** 2, True, reach)
            assert_rows_equal(nb.Graph(row_ptr, col, num_source_nodes=700), want_query)


@pytest.mark.parametrize("points, radius, kwargs, error, match", [
    (np.zeros(5), 1.0, {}, ValueError, r"radius_graph: points must have shape \[N, d\].*\(5,\)"),
    (np.zeros((3, 0)), 1.0, {}, ValueError, r"radius_graph: points .*\(3, 0\)"),
    (np.array([[0.0, np.nan]]), 1.0, {}, ValueError, r"radius_graph: points\[0, 1\] = nan"),
    (np.array([[0.0, np.inf]]), 1.0, {}, ValueError, r"radius_graph: points\[0, 1\] = inf"),
    (np.zeros((2, 2), dtype=complex), 1.0, {}, TypeError, r"radius_graph: points .*complex"),
    (np.zeros((2, 2)), -0.5, {}, ValueError, r"radius_graph: radius .*-0.5"),
    (np.zeros((2, 2)), float("nan"), {}, ValueError, r"radius_graph: radius .*nan"),
    (np.zeros((2, 2)), 1.0, {"max_neighbors": 0}, ValueError,
     r"radius_graph: max_neighbors .*got 0"),
    (np.zeros((2, 2)), 1.0, {"max_neighbors": 2.5}, ValueError,
     r"radius_graph: max_neighbors .*got 2.5"),
])
def test_radius_graph_bad_input(points, radius, kwargs, error, match):
    with pytest.raises(error, match=match):
        nb.radius_graph(points, radius, **kwargs)


# -- Graph, from_edges ---------------------------------------------------------------------


def test_from_edges_follows_pyg_convention():
    # messages 0->1, 2->1, 1->0, 2->2, 1->1 (src -> dst): row dst lists src, sorted by src
    g = nb.Graph.from_edges([0, 2, 1, 2, 1], [1, 1, 0, 2, 1], 4)
    assert np.array_equal(g.row_ptr, [0, 1, 4, 5, 5])  # node 3 is isolated
    assert np.array_equal(g.col, [1, 0, 1, 2, 2])
    assert np.array_equal(g.edge_id, [2, 0, 4, 1, 3])  # default id = position in src/dst
    assert g.num_edge_ids == 5
    assert np.array_equal(g.edge_index(), [[1, 0, 1, 2, 2], [0, 1, 1, 1, 2]])


def test_from_edges_undirected_shared_ids():
    # undirected 0-1 (id 0) and 1-2 (id 1), both directions listed with one id each
    g = nb.Graph.from_edges([0, 1, 1, 2], [1, 0, 2, 1], 3, edge_id=[0, 0, 1, 1])
    assert g.nnz == 4 and g.num_edge_ids == 2
    assert np.array_equal(g.col, [1, 0, 2, 1])
    assert np.array_equal(g.edge_id, [0, 0, 1, 1])
    e_ptr, e_pos = g.by_edge_id
    assert np.array_equal(e_ptr, [0, 2, 4]) and np.array_equal(e_pos, [0, 1, 2, 3])
    # ids beyond the largest used one may be declared (they get zero gradients)
    assert nb.Graph.from_edges([0], [1], 2, edge_id=[0], num_edge_ids=3).num_edge_ids == 3


@given(random_graphs(max_nodes=10, max_edges=30))
def test_cached_transpose_and_edge_groups(g):
    t_ptr, t_pos = g.transpose
    assert g.transpose is g.transpose  # built once
    order = np.argsort(g.col, kind="stable")
    assert np.array_equal(t_pos, order)
    assert np.array_equal(t_ptr, np.concatenate([[0], np.cumsum(np.bincount(
        g.col, minlength=g.num_nodes))]))
    e_ptr, e_pos = g.by_edge_id
    assert np.array_equal(e_pos, np.argsort(g.edge_id, kind="stable"))
    assert e_ptr[-1] == g.nnz and len(e_ptr) == g.num_edge_ids + 1
    assert np.array_equal(g.row, np.repeat(np.arange(g.num_nodes), g.degree))


def test_graph_arrays_are_read_only_copies():
    row_ptr, col = np.array([0, 1, 2]), np.array([1, 0])
    g = nb.Graph(row_ptr, col)
    col[0] = 5  # the graph keeps its own copy
    assert g.col[0] == 1
    with pytest.raises(ValueError):
        g.col[0] = 0


@pytest.mark.parametrize("args, kwargs, error, match", [
    (([0, 2, 1, 3], [0, 1, 2]), {}, ValueError,
     r"Graph: row_ptr must be non-decreasing, but row_ptr\[2\] = 1 < row_ptr\[1\] = 2"),
    (([1, 2], [0, 0]), {}, ValueError, r"Graph: row_ptr\[0\] must be 0, got 1"),
    (([0, 1, 3], [0, 1]), {}, ValueError, r"Graph: row_ptr\[-1\] = 3 must equal the length "
     r"of col, 2"),
    (([], []), {}, ValueError, r"Graph: row_ptr must have num_nodes \+ 1 >= 1 entries"),
    (([0, 1, 2], [0, 2]), {}, ValueError, r"Graph: col\[1\] = 2 is out of range for 2 nodes"),
    (([0, 1, 2], [-1, 0]), {}, ValueError, r"Graph: col\[0\] = -1 is out of range"),
    (([0, 1, 2], [0, 1], [0, -3]), {}, ValueError, r"Graph: edge_id\[1\] = -3 is out of range"),
    (([0, 1, 2], [0, 1], [0, 4]), {"num_edge_ids": 2}, ValueError,
     r"Graph: edge_id\[1\] = 4 is out of range for 2 edge ids"),
    (([0, 1, 2], [0, 1], [0]), {}, ValueError, r"Graph: edge_id has shape \(1,\) but col has "
     r"shape \(2,\)"),
    (([0, 1, 2], [0.0, 1.0]), {}, TypeError, r"Graph: col must be an integer array, got "
     r"dtype float64"),
    (([[0, 1]], [0]), {}, ValueError, r"Graph: row_ptr must be 1-D, got shape \(1, 2\)"),
    (([0, 1, 2], [0, 1], None), {"num_edge_ids": -1}, ValueError,
     r"Graph: num_edge_ids must be >= 0, got -1"),
])
def test_graph_bad_input(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        nb.Graph(*args, **kwargs)


@pytest.mark.parametrize("args, kwargs, match", [
    (([0, 1], [1], 2), {}, r"Graph.from_edges: src has shape \(2,\) but dst has shape \(1,\)"),
    (([0, 3], [1, 1], 3), {}, r"Graph.from_edges: src\[1\] = 3 is out of range for 3 nodes"),
    (([0, 1], [1, -1], 3), {}, r"Graph.from_edges: dst\[1\] = -1 is out of range"),
    (([0], [1], -2), {}, r"Graph.from_edges: num_nodes must be a non-negative integer, got -2"),
    (([0, 1], [1, 0], 2), {"edge_id": [0]}, r"Graph.from_edges: edge_id has shape \(1,\) but "
     r"src has shape \(2,\)"),
    (([0, 1], [1, 0], 2), {"edge_id": [0, 1], "num_edge_ids": 1},
     r"Graph: edge_id\[\d\] = 1 is out of range for 1 edge ids"),
])
def test_from_edges_bad_input(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        nb.Graph.from_edges(*args, **kwargs)


def test_radius_that_overflows_the_search_frame():
    # radius * (1 + 2^-20) is inf: one cell holds every point; differences that overflow
    # are still no neighbours
    big = np.finfo(np.float64).max
    assert nb.radius_graph(np.array([[0.0]]), big, loop=False).nnz == 0
    g = nb.radius_graph(np.array([[0.0], [1e308], [-1e308]]), big, loop=False)
    assert sorted(zip(np.repeat(np.arange(3), np.diff(g.row_ptr)).tolist(),
                      g.col.tolist())) == [(0, 1), (0, 2), (1, 0), (2, 0)]


def test_a_searched_graph_equals_the_checked_constructor_and_is_read_only():
    # radius_graph hands its fresh CSR to Graph._of_search, which skips the copies and
    # checks of Graph(...): the same graph, as read-only
    points = np.random.default_rng(3).random((300, 2))
    g = nb.radius_graph(points, 0.1)
    checked = nb.Graph(g.row_ptr, g.col, num_source_nodes=300)
    for name in ("row_ptr", "col", "edge_id"):
        np.testing.assert_array_equal(getattr(g, name), getattr(checked, name))
        assert not getattr(g, name).flags.writeable
    assert (g.num_nodes, g.num_source_nodes, g.num_edge_ids) == (
        checked.num_nodes, checked.num_source_nodes, checked.num_edge_ids)
    fallback = nb.Graph._of_search(np.array([0, 1], np.int32), np.array([0], np.int32), 1)
    assert fallback.col.dtype == np.int64 and fallback.nnz == 1


def test_a_radius_graph_numbers_its_edges_by_position():
    """The search's graph builds its edge ids (each entry its own edge) on first use:
    they are the CSR positions, read-only, and the graph is its own ``with_entry_ids``."""
    points = np.random.default_rng(5).random((200, 2))
    graph = nb.radius_graph(points, 0.2)
    assert graph.with_entry_ids is graph
    np.testing.assert_array_equal(graph.edge_id, np.arange(graph.nnz))
    assert not graph.edge_id.flags.writeable
    assert graph.num_edge_ids == graph.nnz
    with pytest.raises(ValueError):
        graph.edge_id[0] = 1
