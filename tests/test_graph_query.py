"""radius_graph and knn_graph with a query cloud, a batch vector and max_neighbors;
rectangular graphs; gno on rectangular graphs and on a batch [B, N, F] sharing one graph.

Brute-force NumPy references for the graphs (hypothesis over clouds in 1-4 dimensions),
both searches, 1 vs 2 threads, dense references for the rectangular and batched gno,
gradchecks, and the errors for bad input."""

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads
from hypothesis import given, settings
from hypothesis import strategies as st
from test_graph import (
    assert_rows_equal,
    assert_same_graph,
    radius_graph_by,
    rows_of,
    scale_of,
)

import nbgrad as nb
from nbgrad.kernels import gno_reference as R
from nbgrad.ops.gno import _mlp_params
from nbgrad.testing import gradcheck
from nbgrad.testing.strategies_graph import point_clouds, radii, wide_point_clouds, wide_radii

# -- references ----------------------------------------------------------------------------


def scaled_d2(query, points, s):
    """[M, N] sum_a (s (p_j - q_i)_a)^2 in float64 (radius_graph's test quantity)."""
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        diff = s * (points[None, :, :] - query[:, None, :])
        return (diff * diff).sum(axis=-1)


def same_example(batch, query_batch, n, m):
    if batch is None:
        return np.ones((m, n), dtype=bool)
    return np.asarray(query_batch)[:, None] == np.asarray(batch)[None, :]


def brute_radius(points, radius, query=None, batch=None, query_batch=None, loop=True,
                 max_neighbors=None):
    """Rows of radius_graph by brute force: query point i (point i) lists every j with
    the scaled test passing, in the same example; the k nearest by (d2, j) if asked."""
    square = query is None
    query = points if square else query
    query_batch = batch if square else query_batch
    s = scale_of(radius)
    d2 = scaled_d2(query, points, s)
    adj = (d2 <= (s * radius) ** 2) & same_example(batch, query_batch, len(points), len(query))
    if square and not loop:
        np.fill_diagonal(adj, False)
    rows = [np.flatnonzero(adj[i]) for i in range(len(query))]
    if max_neighbors is not None:
        rows = [np.sort(sorted(r, key=lambda j, i=i: (d2[i, j], j))[:max_neighbors])
                for i, r in enumerate(rows)]
    return rows


def brute_knn(points, k, query=None, batch=None, query_batch=None, loop=False):
    """Rows of knn_graph by brute force: the k nearest by (|dx|^2, j) in the same example
    (without the point itself on one cloud unless loop), listed by index."""
    square = query is None
    query = points if square else query
    query_batch = batch if square else query_batch
    d2 = scaled_d2(query, points, 1.0)
    ok = same_example(batch, query_batch, len(points), len(query))
    if square and not loop:
        np.fill_diagonal(ok, False)
    rows = []
    for i in range(len(query)):
        cand = np.flatnonzero(ok[i])
        rows.append(np.sort(sorted(cand, key=lambda j, i=i: (d2[i, j], j))[:k]))
    return rows


@st.composite
def two_clouds(draw, dims=(1, 2, 3, 4), max_points=25):
    """(points [N, d], query [M, d]) with one d, on a lattice half the time."""
    d = draw(st.sampled_from(dims))
    lattice = draw(st.booleans())
    points = draw(point_clouds(max_points=max_points, dims=(d,), lattice=lattice))
    query = draw(point_clouds(max_points=max_points, dims=(d,), lattice=lattice))
    return points, query


@st.composite
def batch_vectors(draw, n, max_examples=3):
    """A sorted example index per point (some examples may be empty)."""
    return np.sort(np.array(draw(st.lists(st.integers(0, max_examples - 1), min_size=n,
                                          max_size=n)), dtype=np.int64))


# -- radius_graph with a query cloud and batches --------------------------------------------


@given(two_clouds(), radii())
def test_radius_query_matches_brute_force(clouds, radius):
    points, query = clouds
    g = nb.radius_graph(points, radius, query=query)
    assert (g.num_nodes, g.num_source_nodes) == (len(query), len(points))
    assert_rows_equal(g, brute_radius(points, radius, query))
    assert np.array_equal(g.edge_id, np.arange(g.nnz))


@given(two_clouds(max_points=20), radii(), st.integers(1, 4), st.data())
def test_radius_query_batch_max_neighbors_matches_brute_force(clouds, radius, k, data):
    points, query = clouds
    batch = data.draw(batch_vectors(len(points)))
    query_batch = data.draw(batch_vectors(len(query)))
    g = nb.radius_graph(points, radius, query=query, batch=batch, query_batch=query_batch,
                        max_neighbors=k)
    assert_rows_equal(g, brute_radius(points, radius, query, batch, query_batch,
                                      max_neighbors=k))


@given(point_clouds(dims=(1, 2, 3, 4)), radii(), st.booleans(), st.data())
def test_radius_batch_matches_brute_force(points, radius, loop, data):
    batch = data.draw(batch_vectors(len(points)))
    g = nb.radius_graph(points, radius, loop=loop, batch=batch)
    assert_rows_equal(g, brute_radius(points, radius, batch=batch, loop=loop))
    assert g.is_square


@settings(max_examples=50)
@given(wide_point_clouds(), wide_point_clouds(), wide_radii())
def test_radius_query_over_float64_range(points, query, radius):
    if points.shape[1] != query.shape[1]:
        query = np.resize(query, (len(query), points.shape[1]))
    for search in ("cells", "tree"):
        g = radius_graph_by(search, points, radius, query=query)
        assert_rows_equal(g, brute_radius(points, radius, query))


@given(two_clouds(), radii())
def test_radius_query_same_graph_from_either_search(clouds, radius):
    points, query = clouds
    a = radius_graph_by("cells", points, radius, query=query)
    b = radius_graph_by("tree", points, radius, query=query)
    assert_same_graph(a, b)


def test_radius_query_larger_clouds_both_searches_and_threads():
    rng = np.random.default_rng(1)
    points, query = rng.random((6000, 3)), rng.random((3000, 3))
    batch = np.repeat(np.arange(3), 2000)
    query_batch = np.repeat(np.arange(3), 1000)
    kw = dict(query=query, batch=batch, query_batch=query_batch)
    graphs = [radius_graph_by(s, points, 0.06, **kw) for s in ("cells", "tree")]
    assert_same_graph(*graphs)
    g1 = at_threads(1, nb.radius_graph, points, 0.06, max_neighbors=5, **kw)
    g2 = at_threads(2, nb.radius_graph, points, 0.06, max_neighbors=5, **kw)
    assert_same_graph(g1, g2)
    # no edge joins two examples
    assert np.array_equal(batch[g1.col], query_batch[g1.row])


@pytest.mark.parametrize("d, radius", [(2, 0.02), (3, 0.06)])
def test_radius_query_cell_list_threads_and_tree(d, radius):
    rng = np.random.default_rng(d)
    points, query = rng.random((20000, d)), rng.random((15000, d))
    g1 = at_threads(1, radius_graph_by, "cells", points, radius, query=query)
    g2 = at_threads(2, radius_graph_by, "cells", points, radius, query=query)
    assert g1.nnz > 5 * len(query)
    assert_same_graph(g1, g2)
    assert_same_graph(g1, radius_graph_by("tree", points, radius, query=query))


def test_radius_query_edge_cases():
    pts = np.array([[0.0, 0.0], [1.0, 0.0]])
    # empty query cloud, empty input cloud
    g = nb.radius_graph(pts, 1.0, query=np.zeros((0, 2)))
    assert (g.num_nodes, g.num_source_nodes, g.nnz) == (0, 2, 0)
    g = nb.radius_graph(np.zeros((0, 2)), 1.0, query=pts)
    assert (g.num_nodes, g.num_source_nodes, g.nnz) == (2, 0, 0)
    assert np.array_equal(g.row_ptr, [0, 0, 0])
    # no self pairs to drop on a rectangular graph: a coincident point is a neighbour
    g = nb.radius_graph(pts, 0.0, query=pts[:1], loop=False)
    assert_rows_equal(g, [[0]])
    # an example of the query cloud that has no input points gets empty rows
    g = nb.radius_graph(pts, 5.0, query=pts, batch=[0, 0], query_batch=[0, 3])
    assert_rows_equal(g, [[0, 1], []])


# -- knn_graph -----------------------------------------------------------------------------


@given(point_clouds(dims=(1, 2, 3, 4)), st.integers(1, 5), st.booleans(), st.data())
def test_knn_matches_brute_force(points, k, loop, data):
    batch = data.draw(st.one_of(st.none(), batch_vectors(len(points))))
    g = nb.knn_graph(points, k, loop=loop, batch=batch)
    assert_rows_equal(g, brute_knn(points, k, batch=batch, loop=loop))


@given(two_clouds(), st.integers(1, 5), st.data())
def test_knn_query_matches_brute_force(clouds, k, data):
    points, query = clouds
    batches = data.draw(st.booleans())
    batch = data.draw(batch_vectors(len(points))) if batches else None
    query_batch = data.draw(batch_vectors(len(query))) if batches else None
    g = nb.knn_graph(points, k, query=query, batch=batch, query_batch=query_batch)
    assert (g.num_nodes, g.num_source_nodes) == (len(query), len(points))
    assert_rows_equal(g, brute_knn(points, k, query, batch, query_batch))


def test_knn_ties_go_to_the_smaller_index_and_threads():
    # four points at distance 1 from the origin, and duplicates of the origin
    points = np.array([[0, 1], [1, 0], [0, -1], [-1, 0], [0, 0], [0, 0]], dtype=float)
    g = nb.knn_graph(points, 2, query=np.zeros((1, 2)))
    assert_rows_equal(g, [[4, 5]])
    g = nb.knn_graph(points, 3, query=np.zeros((1, 2)))
    assert_rows_equal(g, [[0, 4, 5]])
    assert_rows_equal(nb.knn_graph(points[:4], 1, query=np.zeros((1, 2))), [[0]])
    rng = np.random.default_rng(3)
    lattice = rng.integers(0, 20, (5000, 2)).astype(float)  # many ties
    g1 = at_threads(1, nb.knn_graph, lattice, 6)
    g2 = at_threads(2, nb.knn_graph, lattice, 6)
    assert_same_graph(g1, g2)
    assert np.all(g1.degree == 6)


def test_knn_fewer_points_than_k():
    g = nb.knn_graph(np.array([[0.0], [1.0], [5.0]]), 4, batch=[0, 0, 1])
    assert_rows_equal(g, [[1], [0], []])
    g = nb.knn_graph(np.array([[0.0], [1.0], [5.0]]), 4, loop=True, batch=[0, 0, 1])
    assert_rows_equal(g, [[0, 1], [0, 1], [2]])


# -- bad input -----------------------------------------------------------------------------

P = np.zeros((4, 2))


@pytest.mark.parametrize("fn, args, kwargs, error, match", [
    (nb.radius_graph, (P, 1.0), {"query": np.zeros((3, 3))}, ValueError,
     r"radius_graph: query has shape \(3, 3\) but points has shape \(4, 2\): both clouds "
     r"need the same dimension d"),
    (nb.knn_graph, (P, 2), {"query": np.zeros((3, 1))}, ValueError,
     r"knn_graph: query has shape \(3, 1\) but points has shape \(4, 2\)"),
    (nb.radius_graph, (P, 1.0), {"batch": [0, 1, 0, 1]}, ValueError,
     r"radius_graph: batch must be sorted \(non-decreasing\), but batch\[2\] = 0 < "
     r"batch\[1\] = 1"),
    (nb.radius_graph, (P, 1.0), {"batch": [0, 0, 1]}, ValueError,
     r"radius_graph: batch has shape \(3,\) but points has shape \(4, 2\): batch needs one "
     r"example index per point, shape \(4,\)"),
    (nb.knn_graph, (P, 1), {"query": P[:2], "batch": [0, 0, 0, 0], "query_batch": [1]},
     ValueError, r"knn_graph: query_batch has shape \(1,\) but query has shape \(2, 2\)"),
    (nb.knn_graph, (P, 1), {"batch": [-1, 0, 0, 0]}, ValueError,
     r"knn_graph: batch\[0\] = -1 is negative"),
    (nb.radius_graph, (P, 1.0), {"batch": [0.0, 0, 0, 0]}, TypeError,
     r"radius_graph: batch must be an integer array, got dtype float64"),
    (nb.radius_graph, (P, 1.0), {"query": P, "batch": [0, 0, 0, 0]}, ValueError,
     r"radius_graph: batch was given without query_batch"),
    (nb.radius_graph, (P, 1.0), {"query_batch": [0, 0, 0, 0]}, ValueError,
     r"radius_graph: query_batch was given without query"),
    (nb.radius_graph, (P, -1.0), {}, ValueError, r"radius_graph: radius must be a finite "
     r"number >= 0, got -1.0"),
    (nb.radius_graph, (P, 1.0, P), {}, TypeError, r"radius_graph: loop must be a bool, got "
     r"ndarray \(the query cloud is the keyword argument query=\)"),
    (nb.knn_graph, (P, 0), {}, ValueError, r"knn_graph: k must be an integer >= 1, got 0"),
    (nb.knn_graph, (P, 2.0), {}, ValueError, r"knn_graph: k must be an integer >= 1"),
    (nb.knn_graph, (P, 1), {"query": np.array([[0.0, np.nan]])}, ValueError,
     r"knn_graph: query\[0, 1\] = nan is not finite \(query shape \(1, 2\)\)"),
])
def test_bad_input(fn, args, kwargs, error, match):
    with pytest.raises(error, match=match):
        fn(*args, **kwargs)


# -- rectangular Graph -----------------------------------------------------------------------


def test_rectangular_from_edges_and_transpose():
    g = nb.Graph.from_edges([4, 0, 2], [1, 1, 0], 2, num_source_nodes=5)
    assert (g.num_nodes, g.num_source_nodes, g.is_square) == (2, 5, False)
    assert rows_of(g)[1].tolist() == [0, 4]
    t_ptr, t_pos = g.transpose
    assert len(t_ptr) == 6 and t_ptr[-1] == 3
    assert "num_source_nodes=5" in repr(g)
    with pytest.raises(ValueError, match=r"Graph.from_edges: src\[0\] = 4 is out of range "
                                         r"for 3 source nodes"):
        nb.Graph.from_edges([4], [0], 2, num_source_nodes=3)
    with pytest.raises(ValueError, match=r"Graph: num_source_nodes must be a non-negative "
                                         r"integer, got -1"):
        nb.Graph([0, 1], [0], num_source_nodes=-1)
    with pytest.raises(ValueError, match=r"Graph: col\[0\] = 3 is out of range for 2 source"):
        nb.Graph([0, 1], [3], num_source_nodes=2)


def test_with_entry_ids():
    g = nb.Graph.from_edges([0, 1], [1, 0], 2, edge_id=[0, 0])
    e = g.with_entry_ids
    assert e is g.with_entry_ids and np.array_equal(e.edge_id, [0, 1])
    assert np.array_equal(e.col, g.col) and e.num_edge_ids == 2
    plain = nb.radius_graph(np.zeros((3, 1)), 1.0)
    assert plain.with_entry_ids is plain


# -- gno on rectangular graphs and on a batch ---------------------------------------------


def dense_gno(h, x, U, b_u, V, b_v, graph, reduce="sum"):
    """NumPy: m[i] = sum over row i of kappa(x[edge_id p]) @ h[..., col p, :]."""
    f_in = h.shape[-1]
    hidden = np.maximum(x @ U.T + b_u, 0)
    kappa = (hidden @ V.T + b_v).reshape(len(x), V.shape[0] // f_in, f_in)
    m = np.zeros(h.shape[:-2] + (graph.num_nodes, kappa.shape[1]))
    for i, j, e in zip(graph.row, graph.col, graph.edge_id):
        m[..., i, :] += h[..., j, :] @ kappa[e].T
    if reduce == "mean":
        m /= np.maximum(graph.degree, 1)[:, None]
    return m


def gno_args(rng, graph, f_in, f_out, hidden, d, batch=None, margin=1e-3):
    shape = (graph.num_source_nodes, f_in) if batch is None else (batch,
                                                                   graph.num_source_nodes, f_in)
    x = rng.standard_normal((graph.num_edge_ids, d))
    return (rng.standard_normal(shape), x, *_mlp_params(rng, x, hidden, f_out * f_in, margin))


@settings(max_examples=30)
@given(two_clouds(dims=(1, 2, 3), max_points=12), st.sampled_from(["sum", "mean"]),
       st.integers(0, 2**32 - 1), st.sampled_from([None, 1, 3]))
def test_rectangular_and_batched_gno_match_dense_reference_and_gradcheck(clouds, reduce, seed,
                                                                         batch):
    points, query = clouds
    graph = nb.radius_graph(points, 0.75, query=query)
    args = gno_args(np.random.default_rng(seed), graph, 2, 3, 4, points.shape[1], batch)
    m = nb.gno(*args, graph, reduce=reduce)
    lead = () if batch is None else (batch,)
    assert m.shape == lead + (len(query), 3)
    np.testing.assert_allclose(m.numpy(), dense_gno(*args, graph, reduce), rtol=1e-10,
                               atol=1e-12)
    gradcheck(lambda *a: nb.gno(*a, graph, reduce=reduce), args)


def test_rectangular_gno_matches_reference_loops_and_unfused():
    rng = np.random.default_rng(5)
    graph = nb.radius_graph(rng.random((40, 2)), 0.3, query=rng.random((25, 2)))
    args = gno_args(rng, graph, 3, 2, 5, 2)
    ids = (graph.row_ptr, graph.col, graph.edge_id)
    want = R.reference_forward(*args, *ids, 2, False)
    np.testing.assert_allclose(nb.gno(*args, graph).numpy(), want, rtol=1e-12, atol=1e-12)
    unfused = nb.gno_aggregate(args[0], nb.gno_kernel(*args[1:], 2, 3), graph)
    np.testing.assert_allclose(unfused.numpy(), want, rtol=1e-12, atol=1e-12)
    tensors = [nb.tensor(a, requires_grad=True) for a in args]
    g = rng.standard_normal((25, 2))
    grads = nb.grad(nb.gno(*tensors, graph), tensors, grad_outputs=g)
    for got, ref in zip(grads, R.reference_backward(g, *args, *ids, 2, False)):
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_batched_gno_equals_a_loop_over_examples(reduce):
    rng = np.random.default_rng(7)
    graph = nb.radius_graph(rng.random((60, 2)), 0.25)
    h, *params = gno_args(rng, graph, 3, 4, 6, 2, batch=5)
    g = rng.standard_normal((5, 60, 4))
    hs = nb.tensor(h, requires_grad=True)
    ps = [nb.tensor(p, requires_grad=True) for p in params]
    out = nb.gno(hs, *ps, graph, reduce=reduce)
    out.backward(g)
    want_grads = [np.zeros_like(p) for p in params]
    for b in range(5):
        hb = nb.tensor(h[b], requires_grad=True)
        pb = [nb.tensor(p, requires_grad=True) for p in params]
        ob = nb.gno(hb, *pb, graph, reduce=reduce)
        ob.backward(g[b])
        np.testing.assert_allclose(out.numpy()[b], ob.numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(hs.grad.numpy()[b], hb.grad.numpy(), rtol=1e-12,
                                   atol=1e-12)
        for acc, p in zip(want_grads, pb):
            acc += p.grad.numpy()
    for p, want in zip(ps, want_grads):
        np.testing.assert_allclose(p.grad.numpy(), want, rtol=1e-10, atol=1e-12)


def test_batched_gno_second_derivatives():
    rng = np.random.default_rng(8)
    graph = nb.Graph.from_edges([0, 1, 2, 2], [1, 2, 0, 1], 3)
    args = gno_args(rng, graph, 2, 2, 3, 1, batch=2)
    nb.testing.gradgradcheck(lambda *a: nb.gno(*a, graph, reduce="mean"), args)


def test_batched_rectangular_gno_same_bits_at_1_and_2_threads():
    rng = np.random.default_rng(9)
    graph = nb.radius_graph(rng.random((3000, 2)), 0.05, query=rng.random((2000, 2)))
    args = [a.astype(np.float32) for a in gno_args(rng, graph, 4, 4, 16, 2, batch=3,
                                                    margin=0.0)]
    g = rng.standard_normal((3, 2000, 4)).astype(np.float32)

    def run():
        tensors = [nb.tensor(a, requires_grad=True) for a in args]
        out = nb.gno(*tensors, graph)
        return [out.numpy()] + [t.numpy() for t in nb.grad(out, tensors, grad_outputs=g)]

    for a, b in zip(at_threads(1, run), at_threads(2, run)):
        assert_same_bits(a, b)


@pytest.mark.parametrize("h_shape, match", [
    ((4, 2), r"gno: h has shape \(4, 2\), expected \[5, \*\] \(\[N, F_in\] or \[B, N, "
             r"F_in\] with N = 5 source nodes of the rectangular graph"),
    ((2, 3, 2), r"gno: h has shape \(2, 3, 2\), expected \[\*, 5, \*\] \(\[B, N, F_in\]"),
    ((2, 2, 5, 2), r"gno: h has shape \(2, 2, 5, 2\), expected \[5, \*\]"),
])
def test_gno_bad_h_on_rectangular_graph(h_shape, match):
    graph = nb.Graph.from_edges([0, 4], [0, 2], 3, num_source_nodes=5)
    rng = np.random.default_rng(0)
    _, x, U, b_u, V, b_v = gno_args(rng, graph, 2, 1, 2, 1)
    with pytest.raises(ValueError, match=match):
        nb.gno(np.zeros(h_shape), x, U, b_u, V, b_v, graph)
