"""Graph neural operator: gno_kernel, gno_aggregate, fused gno.

Gradchecks of every argument on random graphs (isolated nodes, self loops, shared edge
ids) and radius graphs; fused == unfused == reference loop; PyTorch oracle;
'mean' on empty rows; 1 vs 2 threads; dtypes; memory of the fused path; bad input.
"""

import tracemalloc

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads
from hypothesis import given, settings
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.kernels import gemm
from nbgrad.kernels import gno as K
from nbgrad.kernels import gno_mlp as M
from nbgrad.kernels import gno_reference as R
from nbgrad.ops.gno import _mlp_params
from nbgrad.testing import gradcheck
from nbgrad.testing.strategies_graph import point_clouds, random_graphs

# -- helpers -------------------------------------------------------------------------------


def gno_inputs(rng, graph, f_in, f_out, hidden, d, margin=0.0):
    """h, edge_feats, U, b_u, V, b_v (float64) for ``graph``; pre-activations at least
    ``margin`` from relu's kink (gradchecks use 1e-3; their eps is 1e-6)."""
    h = rng.standard_normal((graph.num_nodes, f_in))
    x = rng.standard_normal((graph.num_edge_ids, d))
    return (h, x, *_mlp_params(rng, x, hidden, f_out * f_in, margin))


def forward_backward(fn, arrays, upstream):
    """fn(*tensors) and the gradients of <fn(...), upstream> for every array."""
    tensors = [nb.tensor(a, requires_grad=True) for a in arrays]
    out = fn(*tensors)
    grads = nb.grad(out, tensors, grad_outputs=upstream)
    return out.numpy(), [None if g is None else g.numpy() for g in grads]


def unfused(graph, reduce, f_out, f_in):
    return lambda h, x, U, b_u, V, b_v: nb.gno_aggregate(
        h, nb.gno_kernel(x, U, b_u, V, b_v, f_out, f_in), graph, reduce=reduce)


def fused(graph, reduce):
    return lambda h, x, U, b_u, V, b_v: nb.gno(h, x, U, b_u, V, b_v, graph, reduce=reduce)


def assert_all_close(got, want, rtol=1e-10, atol=1e-12):
    for k, (a, b) in enumerate(zip(got, want)):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"item {k}")


sizes = st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 4), st.integers(1, 3))
reduces = st.sampled_from(["sum", "mean"])
seeds = st.integers(0, 2**32 - 1)


def shared_graph():
    """Isolated node 5, self loop on 0, undirected 1-2 and 2-3 sharing ids, fan-in to 4."""
    return nb.Graph.from_edges([0, 1, 2, 2, 3, 0, 1, 3, 4], [0, 2, 1, 3, 2, 4, 4, 4, 1], 6,
                               edge_id=[0, 1, 1, 2, 2, 3, 4, 5, 6])


# -- gradients -----------------------------------------------------------------------------


@settings(max_examples=20)  # ~100 inputs x 2 forward calls per example
@given(random_graphs(max_nodes=6, max_edges=8), sizes, reduces, seeds)
def test_gno_gradcheck_every_argument(graph, size, reduce, seed):
    f_in, f_out, hidden, d = size
    arrays = gno_inputs(np.random.default_rng(seed), graph, f_in, f_out, hidden, d, 1e-3)
    gradcheck(fused(graph, reduce), arrays)


@given(random_graphs(max_nodes=6, max_edges=10), sizes, reduces, seeds)
def test_gno_aggregate_gradcheck(graph, size, reduce, seed):
    f_in, f_out, _, _ = size
    rng = np.random.default_rng(seed)
    h = rng.standard_normal((graph.num_nodes, f_in))
    kernels = rng.standard_normal((graph.num_edge_ids, f_out, f_in))
    gradcheck(lambda a, b: nb.gno_aggregate(a, b, graph, reduce=reduce), [h, kernels])


@given(st.integers(0, 6), sizes, seeds)
def test_gno_kernel_gradcheck(num_edges, size, seed):
    f_in, f_out, hidden, d = size
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((num_edges, d))
    gradcheck(lambda *a: nb.gno_kernel(*a, f_out, f_in),
              [x, *_mlp_params(rng, x, hidden, f_out * f_in, 1e-3)])


@settings(max_examples=15)
@given(point_clouds(min_points=1, max_points=10, dims=(2, 3), lattice=False),
       st.floats(0.2, 1.5), reduces, seeds)
def test_gno_gradcheck_on_radius_graphs(points, radius, reduce, seed):
    # edge features are the offsets p_j - p_i, as in the Fortran reference
    graph = nb.radius_graph(points, radius)
    edge_feats = points[graph.col] - points[graph.row]
    rng = np.random.default_rng(seed)
    h = rng.standard_normal((graph.num_nodes, 2))
    params = _mlp_params(rng, edge_feats, 3, 2 * 2, 1e-3)
    gradcheck(fused(graph, reduce), [h, edge_feats, *params])


def test_shared_edge_id_gradient_is_the_sum_over_both_directions():
    shared = shared_graph()
    # the same graph with every CSR entry its own edge id and its own copy of the features
    split = nb.Graph(shared.row_ptr, shared.col)
    rng = np.random.default_rng(5)
    h, x, U, b_u, V, b_v = gno_inputs(rng, shared, 3, 2, 4, 2)
    upstream = rng.standard_normal((6, 2))
    out_s, grads_s = forward_backward(fused(shared, "sum"), [h, x, U, b_u, V, b_v], upstream)
    out_p, grads_p = forward_backward(fused(split, "sum"),
                                      [h, x[shared.edge_id], U, b_u, V, b_v], upstream)
    np.testing.assert_allclose(out_s, out_p, rtol=1e-12)
    summed = np.zeros_like(x)
    np.add.at(summed, shared.edge_id, grads_p[1])
    np.testing.assert_allclose(grads_s[1], summed, rtol=1e-12)
    assert np.count_nonzero(np.bincount(shared.edge_id) == 2) == 2  # ids 1 and 2 are shared


# -- fused, unfused and the reference loop agree ----------------------------------------


@given(random_graphs(max_nodes=8, max_edges=16), sizes, reduces, seeds)
def test_fused_unfused_and_reference_loop_agree(graph, size, reduce, seed):
    f_in, f_out, hidden, d = size
    rng = np.random.default_rng(seed)
    arrays = gno_inputs(rng, graph, f_in, f_out, hidden, d)
    upstream = rng.standard_normal((graph.num_nodes, f_out))
    out_f, grads_f = forward_backward(fused(graph, reduce), arrays, upstream)
    out_u, grads_u = forward_backward(unfused(graph, reduce, f_out, f_in), arrays, upstream)
    mean = reduce == "mean"
    ref_args = (*arrays, graph.row_ptr, graph.col, graph.edge_id, f_out, mean)
    out_r = R.reference_forward(*ref_args)
    grads_r = R.reference_backward(upstream, *ref_args)
    assert_all_close([out_f, *grads_f], [out_r, *grads_r])
    assert_all_close([out_u, *grads_u], [out_r, *grads_r])


def test_reference_loop_on_a_hand_computed_edge():
    # one edge 0 -> 1, H = 2, F_in = F_out = 1: kappa = V relu(U x + b_u) + b_v
    graph = nb.Graph.from_edges([0], [1], 2)
    h, x = np.array([[2.0], [7.0]]), np.array([[1.0]])
    U, b_u = np.array([[1.0], [-1.0]]), np.array([0.5, 0.5])  # pre = [1.5, -0.5]
    V, b_v = np.array([[3.0, 100.0]]), np.array([0.25])        # kappa = 4.5 + 0.25
    want = np.array([[0.0], [4.75 * 2.0]])
    for fn in (fused(graph, "sum"), unfused(graph, "sum", 1, 1)):
        np.testing.assert_allclose(fn(h, x, U, b_u, V, b_v).numpy(), want)
    np.testing.assert_allclose(R.reference_forward(h, x, U, b_u, V, b_v, graph.row_ptr,
                                                   graph.col, graph.edge_id, 1, False), want)


# -- PyTorch oracle -------------------------------------------------------------------------


def torch_gno(torch, graph, h, x, U, b_u, V, b_v, reduce):
    """The GNO as a PyTorch user writes it: kernel MLP, index_select, bmm, index_add."""
    f_in = h.shape[1]
    f_out = V.shape[0] // f_in
    src, dst = torch.from_numpy(graph.col.copy()), torch.from_numpy(graph.row.copy())
    eid = torch.from_numpy(graph.edge_id.copy())
    hidden = torch.relu(x @ U.T + b_u)
    kappa = (hidden @ V.T + b_v).view(-1, f_out, f_in)
    msg = torch.bmm(kappa.index_select(0, eid), h.index_select(0, src).unsqueeze(-1))
    out = torch.zeros(graph.num_nodes, f_out, dtype=h.dtype).index_add(0, dst, msg[..., 0])
    if reduce == "mean":
        out = out / torch.from_numpy(np.maximum(graph.degree, 1)).to(h.dtype)[:, None]
    return out


@pytest.mark.parametrize("reduce", ["sum", "mean"])
@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-10), (np.float32, 2e-4)])
def test_against_pytorch(reduce, dtype, rtol):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    points = rng.random((60, 2))
    graph = nb.radius_graph(points, 0.25)
    arrays = [a.astype(dtype) for a in gno_inputs(rng, graph, 4, 3, 8, 2)]
    upstream = rng.standard_normal((60, 3)).astype(dtype)
    ts = [torch.from_numpy(a).requires_grad_() for a in arrays]
    out_t = torch_gno(torch, graph, *ts, reduce)
    out_t.backward(torch.from_numpy(upstream))
    want = [out_t.detach().numpy()] + [t.grad.numpy() for t in ts]
    for fn in (fused(graph, reduce), unfused(graph, reduce, 3, 4)):
        out, grads = forward_backward(fn, arrays, upstream)
        assert out.dtype == dtype and all(g.dtype == dtype for g in grads)
        assert_all_close([out, *grads], want, rtol=rtol, atol=rtol)


def test_shared_ids_against_pytorch():
    torch = pytest.importorskip("torch")
    graph = shared_graph()
    rng = np.random.default_rng(2)
    arrays = gno_inputs(rng, graph, 3, 2, 5, 2)
    upstream = rng.standard_normal((6, 2))
    ts = [torch.from_numpy(a).requires_grad_() for a in arrays]
    out_t = torch_gno(torch, graph, *ts, "mean")
    out_t.backward(torch.from_numpy(upstream))
    out, grads = forward_backward(fused(graph, "mean"), arrays, upstream)
    assert_all_close([out, *grads], [out_t.detach().numpy()] + [t.grad.numpy() for t in ts])


def second_derivatives(grad, fn, tensors, upstream, weights):
    """d/d(inputs) of sum_k <d<fn(inputs), upstream>/d(input_k), weights_k>: every second
    derivative of fn, seen through random weights (``grad`` is nb.grad or torch's)."""
    firsts = grad(fn(*tensors), tensors, grad_outputs=upstream, create_graph=True)
    return grad(sum((g * w).sum() for g, w in zip(firsts, weights)), tensors)


@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_second_derivatives_against_pytorch(reduce):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    graph = nb.radius_graph(rng.random((30, 2)), 0.3)
    arrays = gno_inputs(rng, graph, 3, 2, 6, 2)
    upstream = rng.standard_normal((30, 2))
    weights = [rng.standard_normal(a.shape) for a in arrays]

    def torch_grad(outputs, inputs, grad_outputs=None, create_graph=False):
        if grad_outputs is not None:
            grad_outputs = torch.from_numpy(grad_outputs)
        return torch.autograd.grad(outputs, inputs, grad_outputs, create_graph=create_graph)

    ts = [torch.from_numpy(a).requires_grad_() for a in arrays]
    want = second_derivatives(torch_grad, lambda *t: torch_gno(torch, graph, *t, reduce), ts,
                              upstream, [torch.from_numpy(w) for w in weights])
    for fn in (fused(graph, reduce), unfused(graph, reduce, 2, 3)):
        tensors = [nb.tensor(a, requires_grad=True) for a in arrays]
        got = second_derivatives(nb.grad, fn, tensors, upstream, weights)
        assert_all_close([g.numpy() for g in got], [w.numpy() for w in want])


def test_second_derivatives_without_biases_are_those_of_zero_biases():
    rng = np.random.default_rng(6)
    graph = shared_graph()
    h, x, U, _, V, _ = gno_inputs(rng, graph, 3, 2, 5, 2)
    zeros = [nb.tensor(np.zeros(5)), nb.tensor(np.zeros(6))]
    upstream = rng.standard_normal((6, 2))
    weights = [rng.standard_normal(a.shape) for a in (h, x, U, V)]
    for reduce in ("sum", "mean"):
        got = []
        for b_u, b_v in ((None, None), zeros):
            tensors = [nb.tensor(a, requires_grad=True) for a in (h, x, U, V)]

            def fn(h, x, U, V, b_u=b_u, b_v=b_v, reduce=reduce):
                return nb.gno(h, x, U, b_u, V, b_v, graph, reduce=reduce)

            got.append([g.numpy() for g in
                        second_derivatives(nb.grad, fn, tensors, upstream, weights)])
        assert_all_close(got[0], got[1])


# -- semantics ------------------------------------------------------------------------------


@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_isolated_nodes_give_zeros_and_finite_gradients(reduce):
    graph = nb.Graph.from_edges([0, 1], [1, 0], 4)  # nodes 2 and 3 have no neighbours
    rng = np.random.default_rng(0)
    arrays = gno_inputs(rng, graph, 2, 3, 4, 2)
    upstream = rng.standard_normal((4, 3))
    for fn in (fused(graph, reduce), unfused(graph, reduce, 3, 2)):
        out, grads = forward_backward(fn, arrays, upstream)
        assert np.array_equal(out[2:], np.zeros((2, 3)))
        assert np.all(np.isfinite(out)) and all(np.all(np.isfinite(g)) for g in grads)
        assert np.array_equal(grads[0][2:], np.zeros((2, 2)))  # isolated h rows: no gradient


@pytest.mark.parametrize("reduce", ["sum", "mean"])
@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_upstream_gradient_of_isolated_nodes_reaches_nothing(reduce, bad):
    # m_i = 0 for a node without neighbours whatever the inputs, so an inf or NaN upstream
    # gradient there leaves every gradient as a zero one would
    graph = nb.Graph.from_edges([0, 1], [1, 0], 4)
    rng = np.random.default_rng(1)
    arrays = gno_inputs(rng, graph, 2, 3, 4, 2)
    upstream = rng.standard_normal((4, 3))
    upstream[2:] = 0
    polluted = upstream.copy()
    polluted[2:] = bad
    for fn in (fused(graph, reduce), unfused(graph, reduce, 3, 2)):
        _, want = forward_backward(fn, arrays, upstream)
        _, got = forward_backward(fn, arrays, polluted)
        for g, w in zip(got, want):
            assert_same_bits(g, w)


@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_relu_propagates_nan(reduce):
    # relu(NaN) = NaN, as nb.relu and torch.relu: a NaN pre-activation makes every message
    # of its edge NaN; the relu mask is 0 there, so dU, db_u and dx get nothing through it
    graph = nb.Graph.from_edges([0, 1, 2], [1, 0, 0], 4)  # node 3 has no neighbours
    rng = np.random.default_rng(2)
    h, x, U, b_u, V, b_v = gno_inputs(rng, graph, 2, 3, 4, 2)
    b_u[1] = np.nan
    arrays = (h, x, U, b_u, V, b_v)
    upstream = rng.standard_normal((4, 3))
    outs = [forward_backward(fn, arrays, upstream)
            for fn in (fused(graph, reduce), unfused(graph, reduce, 3, 2))]
    ref_args = (*arrays, graph.row_ptr, graph.col, graph.edge_id, 3, reduce == "mean")
    has_neighbours = graph.degree > 0
    for out in (outs[0][0], outs[1][0], R.reference_forward(*ref_args)):
        assert np.isnan(out[has_neighbours]).all() and not np.any(out[~has_neighbours])
    for _, (dh, dx, dU, db_u, dV, _) in outs:
        assert np.isnan(dV[:, 1]).all() and np.isnan(dh[:3]).all()
        assert np.isfinite(dx).all() and np.isfinite(dU).all() and np.isfinite(db_u).all()
        assert db_u[1] == 0 and not np.any(dU[1])


@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_no_output_features(reduce):
    # F_out = 0 (V has no rows): an empty result and zero gradients, as in an einsum
    graph = shared_graph()
    arrays = gno_inputs(np.random.default_rng(3), graph, 2, 0, 4, 2)
    out, grads = forward_backward(fused(graph, reduce), arrays, np.ones((6, 0)))
    assert out.shape == (6, 0)
    for g, a in zip(grads, arrays):
        assert g.shape == a.shape and not np.any(g)


@pytest.mark.parametrize("hidden, d", [(0, 2), (4, 0)])
def test_no_hidden_units_or_edge_features(hidden, d):
    # H = 0 or d = 0: the empty sums are 0 (kappa = b_v, or relu(b_u) in the hidden layer)
    graph = shared_graph()
    arrays = gno_inputs(np.random.default_rng(4), graph, 2, 3, hidden, d)
    upstream = np.ones((graph.num_nodes, 3))
    for reduce in ("sum", "mean"):
        results = [forward_backward(fn, arrays, upstream)
                   for fn in (fused(graph, reduce), unfused(graph, reduce, 3, 2))]
        assert [g.shape for g in results[0][1]] == [a.shape for a in arrays]
        assert_all_close([results[0][0], *results[0][1]], [results[1][0], *results[1][1]])


def test_mean_is_sum_divided_by_row_length():
    graph = shared_graph()
    arrays = gno_inputs(np.random.default_rng(1), graph, 3, 2, 4, 2)
    total = nb.gno(*arrays, graph).numpy()
    mean = nb.gno(*arrays, graph, reduce="mean").numpy()
    deg = np.array([1, 2, 2, 1, 3, 0])  # in-edges per node (dst counts)
    np.testing.assert_allclose(mean, total / np.maximum(deg, 1)[:, None], rtol=1e-13)


def test_optional_biases_are_zero_biases():
    graph = shared_graph()
    h, x, U, b_u, V, b_v = gno_inputs(np.random.default_rng(3), graph, 3, 2, 4, 2)
    np.testing.assert_allclose(nb.gno(h, x, U, None, V, None, graph).numpy(),
                               nb.gno(h, x, U, 0 * b_u, V, 0 * b_v, graph).numpy(), rtol=1e-13)
    np.testing.assert_allclose(nb.gno_kernel(x, U, None, V, None, 2, 3).numpy(),
                               nb.gno_kernel(x, U, 0 * b_u, V, 0 * b_v, 2, 3).numpy())


def test_non_contiguous_upstream_gradient():
    graph = shared_graph()
    arrays = gno_inputs(np.random.default_rng(4), graph, 3, 2, 4, 2)
    upstream = np.random.default_rng(5).standard_normal((2, 6)).T  # a transposed view
    assert not upstream.flags.c_contiguous
    _, grads = forward_backward(fused(graph, "mean"), arrays, upstream)
    _, want = forward_backward(fused(graph, "mean"), arrays, np.ascontiguousarray(upstream))
    assert_all_close(grads, want, rtol=0, atol=0)


def test_only_the_requested_gradients_are_computed():
    graph = shared_graph()
    h, x, U, b_u, V, b_v = gno_inputs(np.random.default_rng(6), graph, 3, 2, 4, 2)
    Vt = nb.tensor(V, requires_grad=True)
    out = nb.gno(h, x, U, b_u, Vt, b_v, graph)
    (dV,) = nb.grad(out, [Vt], grad_outputs=np.ones((6, 2)))
    _, grads = forward_backward(fused(graph, "sum"), [h, x, U, b_u, V, b_v], np.ones((6, 2)))
    np.testing.assert_allclose(dV.numpy(), grads[4], rtol=1e-13)


@pytest.mark.parametrize("wanted", [(0,), (0, 4), (5,)])
def test_a_batch_keeps_its_per_node_sums_only_for_dV_and_db_v(wanted):
    """A batch's forward keeps its per-node sums (N*B*(H+1)*F_in values) for the
    backward only when V or b_v wants a gradient; the gradients are the same bits as
    when every input wants one."""
    graph = shared_graph()
    rng = np.random.default_rng(9)
    h, x, U, b_u, V, b_v = gno_inputs(rng, graph, 3, 2, 4, 2)
    arrays = [np.stack([h, 2 * h, -h]), x, U, b_u, V, b_v]
    tensors = [nb.tensor(a, requires_grad=k in wanted) for k, a in enumerate(arrays)]
    out = nb.gno(*tensors, graph)
    assert (out.grad_fn.sums is not None) == (4 in wanted or 5 in wanted)
    upstream = rng.standard_normal(out.shape)
    grads = nb.grad(out, [tensors[k] for k in wanted], grad_outputs=upstream)
    _, every = forward_backward(fused(graph, "sum"), arrays, upstream)
    for k, g in zip(wanted, grads):
        assert_same_bits(g.numpy(), every[k])


def test_float32_stays_float32_and_matches_float64():
    rng = np.random.default_rng(8)
    graph = nb.radius_graph(rng.random((80, 2)), 0.2)
    arrays = gno_inputs(rng, graph, 4, 4, 16, 2)
    upstream = rng.standard_normal((80, 4))
    out64, grads64 = forward_backward(fused(graph, "sum"), arrays, upstream)
    out32, grads32 = forward_backward(fused(graph, "sum"), [a.astype(np.float32) for a in
                                                           arrays], upstream.astype(np.float32))
    assert out32.dtype == np.float32 and all(g.dtype == np.float32 for g in grads32)
    for a, b in zip([out32, *grads32], [out64, *grads64]):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3 * np.abs(b).max())


# -- determinism and memory -------------------------------------------------------------------


def test_same_bits_at_1_and_2_threads():
    rng = np.random.default_rng(9)
    points = rng.random((500, 2))
    # shared ids: both directions of each pair get the id of the lower-index direction
    base = nb.radius_graph(points, 0.08, loop=False)
    src, dst = base.col, base.row
    lo, hi = np.minimum(src, dst), np.maximum(src, dst)
    pair_id = np.unique(lo * 500 + hi, return_inverse=True)[1]
    graphs = [base, nb.Graph.from_edges(src, dst, 500, edge_id=pair_id)]
    for graph in graphs:
        arrays = [a.astype(np.float32) for a in gno_inputs(rng, graph, 8, 8, 32, 2)]
        upstream = rng.standard_normal((500, 8)).astype(np.float32)
        for fn in (fused(graph, "mean"), unfused(graph, "mean", 8, 8)):
            one = at_threads(1, forward_backward, fn, arrays, upstream)
            two = at_threads(2, forward_backward, fn, arrays, upstream)
            for a, b in zip([one[0], *one[1]], [two[0], *two[1]]):
                assert_same_bits(a, b)


def test_fused_never_builds_the_edge_kernels():
    rng = np.random.default_rng(10)
    n, deg, f, hidden = 200, 8, 16, 8
    graph = nb.Graph.from_edges(rng.integers(0, n, n * deg), np.repeat(np.arange(n), deg), n)
    arrays = gno_inputs(rng, graph, f, f, hidden, 2)
    upstream = rng.standard_normal((n, f))
    kernels_bytes = graph.num_edge_ids * f * f * 8

    def peak(fn):
        forward_backward(fn, arrays, upstream)  # warm caches (transposed CSR, compilation)
        tracemalloc.start()
        forward_backward(fn, arrays, upstream)
        result = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return result

    assert peak(unfused(graph, "sum", f, f)) >= kernels_bytes  # tracemalloc sees NumPy
    assert peak(fused(graph, "sum")) < kernels_bytes / 2


# -- fused kernels -----------------------------------------------------------------------------


def _big_graph(rng, n, max_deg, shared):
    """Rows of 0..max_deg random in-neighbours (isolated nodes and rows longer than
    ENTRY_BLOCK included); ``shared`` gives pairs of consecutive entries one edge id."""
    deg = rng.integers(0, max_deg + 1, n)
    dst = np.repeat(np.arange(n), deg)
    src = rng.integers(0, n, dst.shape[0])
    edge_id = np.arange(dst.shape[0]) // 2 if shared else None
    return nb.Graph.from_edges(src, dst, n, edge_id=edge_id)


def _fused_grads(graph, arrays, upstream, needs=(True,) * 6):
    h, x, U, b_u, V, b_v = arrays
    return K.gno_backward(upstream, h, x, U, b_u, V, b_v, graph.row_ptr, graph.col,
                          graph.edge_id, lambda: graph.by_edge_id, lambda: graph.transpose,
                          needs)


@pytest.mark.parametrize("f_in, f_out, hidden, d, shared", [
    (5, 6, 70, 3, True),   # H = 64 + 6: a register tile and an edge in every product
    (16, 16, 64, 2, False),  # W6's shapes: full tiles only
    (1, 1, 1, 1, True),
])
def test_fused_kernels_match_the_reference_loop(f_in, f_out, hidden, d, shared):
    rng = np.random.default_rng(12)
    graph = _big_graph(rng, 150, 2 * K.ENTRY_BLOCK + 3, shared)
    arrays = gno_inputs(rng, graph, f_in, f_out, hidden, d)
    upstream = rng.standard_normal((graph.num_nodes, f_out))
    ref_args = (*arrays, graph.row_ptr, graph.col, graph.edge_id, f_out, False)
    m = K.gno_forward(*arrays, graph.row_ptr, graph.col, graph.edge_id, f_out)[0]
    assert_all_close([m, *_fused_grads(graph, arrays, upstream)],
                     [R.reference_forward(*ref_args),
                      *R.reference_backward(upstream, *ref_args)])


def test_fused_backward_gradients_do_not_depend_on_which_are_requested():
    rng = np.random.default_rng(13)
    graph = _big_graph(rng, 60, 12, True)
    arrays = [a.astype(np.float32) for a in gno_inputs(rng, graph, 4, 3, 64, 2)]
    upstream = rng.standard_normal((60, 3)).astype(np.float32)
    full = _fused_grads(graph, arrays, upstream)
    for k in range(6):
        needs = tuple(j == k for j in range(6))
        grads = _fused_grads(graph, arrays, upstream, needs)
        assert all(g is None for j, g in enumerate(grads) if j != k)
        assert_same_bits(grads[k], full[k])


def test_fused_kernels_same_bits_at_1_and_2_threads():
    # W6's feature sizes (full register tiles), rows of 0..20 entries, shared edge ids
    rng = np.random.default_rng(14)
    graph = _big_graph(rng, 700, 20, True)
    arrays = [a.astype(np.float32) for a in gno_inputs(rng, graph, 16, 16, 64, 2)]
    upstream = rng.standard_normal((700, 16)).astype(np.float32)

    def run():
        m = K.gno_forward(*arrays, graph.row_ptr, graph.col, graph.edge_id, 16)[0]
        return [m, *_fused_grads(graph, arrays, upstream)]

    for a, b in zip(at_threads(1, run), at_threads(2, run)):
        assert_same_bits(a, b)


@pytest.mark.parametrize("E, d, hidden, F", [(1000, 2, 64, 256), (37, 3, 70, 6), (0, 2, 4, 6)])
def test_kernel_mlp_against_numpy_and_same_bits_at_1_and_2_threads(E, d, hidden, F):
    rng = np.random.default_rng(18)
    x = rng.standard_normal((E, d)).astype(np.float32)
    U, b_u, V, b_v = (rng.standard_normal(s).astype(np.float32)
                      for s in ((hidden, d), hidden, (F, hidden), F))
    g = rng.standard_normal((E, F)).astype(np.float32)
    kappa, hid = at_threads(1, M.kernel_forward, x, U, b_u, V, b_v)
    grads = at_threads(1, M.kernel_backward, g, x, hid, U, V)
    kappa2, hid2 = at_threads(2, M.kernel_forward, x, U, b_u, V, b_v)
    for a, b in zip([kappa, hid, *grads],
                    [kappa2, hid2, *at_threads(2, M.kernel_backward, g, x, hid2, U, V)]):
        assert_same_bits(a, b)
    x64, U64, V64, g64 = (a.astype(np.float64) for a in (x, U, V, g))
    pre = x64 @ U64.T + b_u
    gh = (g64 @ V64) * (hid > 0)  # float32's relu mask (pre may round to either side of 0)
    want = [np.maximum(pre, 0) @ V64.T + b_v, np.maximum(pre, 0), gh @ U64, gh.T @ x64,
            gh.sum(axis=0), g64.T @ np.maximum(pre, 0), g64.sum(axis=0)]
    for got, w in zip([kappa, hid, *grads], want):
        np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-4 * max(1, np.abs(w).max(initial=0)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows, k, cols", [(0, 3, 5), (4, 0, 64), (4, 5, 64), (9, 17, 130),
                                           (3, 2, 63), (8, 16, 1024)])
def test_gemm_tn_acc_is_out_plus_a_transpose_b(dtype, rows, k, cols):
    rng = np.random.default_rng(15)
    A = rng.standard_normal((rows, k)).astype(dtype).T  # a strided [k, rows] view
    B = rng.standard_normal((k, cols)).astype(dtype)
    out = rng.standard_normal((rows, cols)).astype(dtype)
    want = out + A.T.astype(np.float64) @ B
    gemm.gemm_tn_acc(A, B, out)
    np.testing.assert_allclose(out, want, rtol=1e-5 if dtype == np.float32 else 1e-12,
                               atol=1e-5 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("n", range(10))
def test_dots_are_dot_products_by_fours_and_rest(n):
    rng = np.random.default_rng(17)
    v, S = rng.standard_normal(37), rng.standard_normal((n, 37))
    out = np.full((n + 2, 3), np.nan)
    K._dots(v, S, n, out, 2, 1)
    np.testing.assert_allclose(out[2:, 1], S @ v, rtol=1e-12)
    assert np.isnan(out[:2]).all() and np.isnan(out[:, [0, 2]]).all()  # nothing else written


def test_row_chunks_split_the_entries_evenly():
    rng = np.random.default_rng(16)
    graph = _big_graph(rng, 1000, 20, False)
    bounds = K.row_chunks(graph.row_ptr, 16)
    assert bounds.shape == (17,) and bounds[0] == 0 and bounds[-1] == 1000
    assert np.all(np.diff(bounds) >= 0)
    per_chunk = np.diff(graph.row_ptr[bounds])
    assert per_chunk.max() - per_chunk.min() <= 2 * 20
    assert list(K.row_chunks(np.zeros(4, np.int64), 16)) == [0, 0, 0, 3]  # no entries
    assert list(K.row_chunks(np.zeros(1, np.int64), 16)) == [0, 0]  # no nodes


# -- bad input ------------------------------------------------------------------------------


def _good():
    graph = shared_graph()
    h, x, U, b_u, V, b_v = gno_inputs(np.random.default_rng(0), graph, 3, 2, 4, 2)
    return dict(h=h, edge_feats=x, U=U, b_u=b_u, V=V, b_v=b_v, graph=graph)


@pytest.mark.parametrize("change, error, match", [
    ({"h": np.zeros((5, 3))}, ValueError, r"gno: h has shape \(5, 3\), expected \[6, \*\]"),
    ({"edge_feats": np.zeros((9, 2))}, ValueError,
     r"gno: edge_feats has shape \(9, 2\), expected \[7, \*\].*num_edge_ids = 7"),
    ({"V": np.zeros((7, 4))}, ValueError, r"gno: V has 7 rows \(shape \(7, 4\)\), not a "
     r"multiple of F_in = 3 from h \(6, 3\)"),
    ({"V": np.zeros((6, 5))}, ValueError, r"gno: V has shape \(6, 5\), expected \[\*, 4\]"),
    ({"h": np.zeros((6, 0))}, ValueError, r"gno: h has shape \(6, 0\): F_in = 0 features "
     r"leaves F_out = V.shape\[0\] / F_in undefined"),
    ({"U": np.zeros((4, 3))}, ValueError, r"gno: U has shape \(4, 3\), expected \[\*, 2\]"),
    ({"b_u": np.zeros(3)}, ValueError, r"gno: b_u has shape \(3,\), expected \[4\]"),
    ({"b_v": np.zeros(5)}, ValueError, r"gno: b_v has shape \(5,\), expected \[6\]"),
    ({"U": np.zeros((4, 2), np.float32)}, TypeError,
     r"gno: inputs must share one dtype \(h is nbgrad.float64, edge_feats is nbgrad.float64, "
     r"U is nbgrad.float32"),
    ({"h": np.zeros((6, 3), np.int64)}, TypeError, r"gno: h must be float32 or float64"),
    ({"graph": "graph"}, TypeError, r"gno: graph must be an nb.Graph, got str"),
    ({"reduce": "max"}, ValueError, r"gno: reduce must be 'sum' or 'mean', got 'max'"),
])
def test_gno_bad_input(change, error, match):
    args = {**_good(), **change}
    reduce = args.pop("reduce", "sum")
    with pytest.raises(error, match=match):
        nb.gno(**args, reduce=reduce)


@pytest.mark.parametrize("h_shape, k_shape, match", [
    ((5, 3), (7, 2, 3), r"gno_aggregate: h has shape \(5, 3\), expected \[6, \*\]"),
    ((6, 3), (7, 2, 4), r"gno_aggregate: kernels has shape \(7, 2, 4\), expected "
     r"\[7, \*, 3\]"),
    ((6, 3), (9, 2, 3), r"gno_aggregate: kernels has shape \(9, 2, 3\), expected \[7, \*, 3\]"),
    ((6, 3), (7, 6), r"gno_aggregate: kernels has shape \(7, 6\)"),
])
def test_gno_aggregate_bad_input(h_shape, k_shape, match):
    with pytest.raises(ValueError, match=match):
        nb.gno_aggregate(np.zeros(h_shape), np.zeros(k_shape), shared_graph())
    with pytest.raises(ValueError, match=r"gno_aggregate: reduce must be 'sum' or 'mean'"):
        nb.gno_aggregate(np.zeros((6, 3)), np.zeros((7, 2, 3)), shared_graph(), reduce="min")


@pytest.mark.parametrize("f_out, f_in, V_shape, match", [
    (0, 3, (6, 4), r"gno_kernel: f_out must be a positive integer, got 0"),
    (2, 2.5, (6, 4), r"gno_kernel: f_in must be a positive integer, got 2.5"),
    (3, 3, (6, 4), r"gno_kernel: V has shape \(6, 4\), expected \[9, 4\]"),
])
def test_gno_kernel_bad_input(f_out, f_in, V_shape, match):
    args = _good()
    with pytest.raises(ValueError, match=match):
        nb.gno_kernel(args["edge_feats"], args["U"], args["b_u"], np.zeros(V_shape),
                      np.zeros(V_shape[0]), f_out, f_in)


@pytest.mark.parametrize("num_nodes", [0, 3])
def test_graph_without_edges(num_nodes):
    graph = nb.Graph.from_edges([], [], num_nodes)
    arrays = gno_inputs(np.random.default_rng(0), graph, 3, 2, 4, 2)
    assert arrays[1].shape == (0, 2)
    for reduce in ("sum", "mean"):
        for fn in (fused(graph, reduce), unfused(graph, reduce, 2, 3)):
            out, grads = forward_backward(fn, arrays, np.ones((num_nodes, 2)))
            assert np.array_equal(out, np.zeros((num_nodes, 2)))
            for g, a in zip(grads, arrays):
                assert g.shape == a.shape and not np.any(g)
