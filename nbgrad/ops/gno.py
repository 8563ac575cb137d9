"""Graphs and the graph neural operator (GNO): ``radius_graph``, ``knn_graph``, ``Graph``,
``gno_kernel``, ``gno_aggregate`` and the fused ``gno`` (the point-cloud checks of the two
graph builders are in ops/graph_build.py).

Edge features are indexed by edge id: ``edge_feats[e]`` (and ``kernels[e]``) belong to
every CSR entry ``p`` with ``graph.edge_id[p] == e``. For ``radius_graph`` and
``Graph(row_ptr, col)`` the id of an entry is its CSR position; for
``Graph.from_edges(src, dst, n)`` it is the position of the edge in ``src``/``dst``
unless ``edge_id`` says otherwise (both directions of an undirected edge may share one).
The three ops use this one mapping, so ``gno(h, x, ...) == gno_aggregate(h,
gno_kernel(x, ...), graph)``.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any

import numpy as np

from ..function import Function, Sample, register
from ..graph import Graph
from ..kernels import csr, gno_mlp
from ..kernels import gno as gno_kernels
from ..kernels import gno_aggregate as aggregation
from ..tensor import Tensor, lift
from ._args import float_operands, promoted_dtype
from ._recompute import recompute_vjp
from .graph_build import batches, by_example, cloud, loop_flag, positive_int, query_cloud
from .shape import stack

# -- radius graph and k nearest neighbours ---------------------------------------------------


def radius_graph(points: Any, radius: float, loop: bool = True,
                 max_neighbors: int | None = None, *, query: Any = None, batch: Any = None,
                 query_batch: Any = None) -> Graph:
    """The graph joining every pair of points at distance ``<= radius`` (closed ball,
    like SciPy's ``sparse_distance_matrix``), in CSR form; no gradient flows through it.

    ``points[N, d]`` (any d >= 1, computed in float64). ``loop=True`` keeps the self
    loop (i, i). Row i lists its neighbours in increasing index order; ``edge_id`` is the
    CSR position. ``max_neighbors=k`` keeps, in every row, the k nearest neighbours
    (distance ties go to the smaller index; the self loop, at distance 0, counts as one)
    -- PyTorch Cluster keeps the first k it finds instead.

    ``query[M, d]``: a rectangular graph from the input cloud to the query cloud (the
    GINO pattern): row i (query point i) lists the points within ``radius`` of it, so
    ``nb.gno(h[N, F], ...)`` gives ``[M, F_out]``; ``num_source_nodes = N``,
    ``num_nodes = M``. There are no self pairs then: every pair within the radius is
    kept, and ``loop`` is not used.

    ``batch[N]`` (and ``query_batch[M]`` with a query cloud): the example index of each
    point, sorted, as in PyTorch Geometric; only points of one example are joined.

    Distances anywhere in float64's range: the test is ``sum_a (s dx_a)^2 <= (s radius)^2``
    with s a power of two that puts ``s radius`` in [0.5, 1) -- the plain
    ``|dx|^2 <= radius^2`` bit for bit wherever that neither overflows nor underflows.
    So points whose difference overflows (1e308 and -1e308) are never neighbours, and a
    nonzero difference is never rounded to 0: radius 0 joins only equal points (-0.0
    equals 0.0). Points must be finite: a NaN or inf coordinate is a ValueError naming
    it (a distance to such a point has no meaning, and a silently isolated node is
    harder to find than an error).

    Search: a cell list, O(N * neighbours) but walking 3^d cells per point, for d <= 2,
    and for d <= 4 from 5000 points on; SciPy's k-d tree otherwise
    (``kernels/csr.py:radius_search`` has the measurements). Both give the same graph.
    """
    op = "radius_graph"
    pts = cloud(op, "points", points)
    loop = loop_flag(op, loop)
    if not isinstance(radius, numbers.Real) or not np.isfinite(radius) or radius < 0:
        raise ValueError(f"{op}: radius must be a finite number >= 0, got {radius!r}")
    max_neighbors = positive_int(op, "max_neighbors", max_neighbors, allow_none=True)
    qry = query_cloud(op, query, pts)
    batch, query_batch = batches(op, pts, qry, batch, query_batch)
    radius = float(radius)
    row_ptr, col = by_example(lambda p, q: csr.radius_csr(p, radius, loop, q), pts, qry,
                               batch, query_batch)
    if max_neighbors is not None:
        row_ptr, col = csr.prune_rows(pts if qry is None else qry, pts, row_ptr, col,
                                      max_neighbors, csr.distance_scale(radius))
    return Graph._of_search(row_ptr, col, pts.shape[0])


def knn_graph(points: Any, k: int, loop: bool = False, *, query: Any = None,
              batch: Any = None, query_batch: Any = None) -> Graph:
    """The k-nearest-neighbour graph: row i lists the k points nearest to point i
    (itself excluded unless ``loop=True``, then it counts as one of the k), in increasing
    index order; fewer where its example has fewer points. No gradient flows through it.

    Nearest by Euclidean distance in float64 (``|dx|^2`` as ``radius_graph``'s test, with
    coordinates beyond 2^500 scaled by a power of two first), distance ties to the
    smaller index, so the graph does not depend on the search (SciPy's k-d tree proposes
    the candidates; the choice among them is exact). ``edge_id`` is the CSR position.

    ``query[M, d]``: row i lists the k input points nearest to query point i (a
    rectangular graph, ``num_source_nodes = N``, ``num_nodes = M``; ``loop`` unused).
    ``batch``/``query_batch``: example indices, sorted, as in ``radius_graph``.
    """
    op = "knn_graph"
    pts = cloud(op, "points", points)
    loop = loop_flag(op, loop)
    k = positive_int(op, "k", k)
    qry = query_cloud(op, query, pts)
    batch, query_batch = batches(op, pts, qry, batch, query_batch)
    row_ptr, col = by_example(lambda p, q: csr.knn_csr(p, k, loop, q), pts, qry, batch,
                               query_batch)
    return Graph._of_search(row_ptr, col, pts.shape[0])


# -- validation helpers ----------------------------------------------------------------------


def _expect(op: str, name: str, t: Tensor | None, shape: tuple, meaning: str) -> None:
    """ValueError unless ``t`` (if given) has ``shape`` (None entries match anything)."""
    if t is None:
        return
    ok = t.ndim == len(shape) and all(s is None or s == a for s, a in zip(shape, t.shape))
    if not ok:
        want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
        raise ValueError(f"{op}: {name} has shape {t.shape}, expected {want} ({meaning})")


def _sources(graph: Graph) -> str:
    """How many nodes h must have, in words."""
    if graph.is_square:
        return f"{graph.num_nodes} nodes in the graph"
    return (f"{graph.num_source_nodes} source nodes of the rectangular graph (its "
            f"{graph.num_nodes} target nodes are the output's rows)")


def _check_h(op: str, h: Tensor, graph: Graph) -> None:
    """h is [N_s, F_in], or a batch [B, N_s, F_in] on the shared graph."""
    if h.ndim == 3:
        _expect(op, "h", h, (None, graph.num_source_nodes, None),
                f"[B, N, F_in] with N = {_sources(graph)}")
    else:
        _expect(op, "h", h, (graph.num_source_nodes, None),
                f"[N, F_in] or [B, N, F_in] with N = {_sources(graph)}")


def _check_graph(op: str, graph: Any) -> None:
    if not isinstance(graph, Graph):
        raise TypeError(f"{op}: graph must be an nb.Graph, got {type(graph).__name__}")


def _check_reduce(op: str, reduce: str) -> bool:
    if reduce not in ("sum", "mean"):
        raise ValueError(f"{op}: reduce must be 'sum' or 'mean', got {reduce!r}")
    return reduce == "mean"


def _lift_optional(x: Any) -> Tensor | None:
    return None if x is None else lift(x)


def _mean_divisor(graph: Graph, dtype: np.dtype) -> np.ndarray:
    """Row lengths as a column of ``dtype``, with empty rows counted as 1 (their sum is 0)."""
    return np.maximum(graph.degree, 1).astype(dtype)[:, None]


def _aggregate(graph: Graph, h: np.ndarray, kernels: np.ndarray) -> np.ndarray:
    """``m[i] = sum_{p in row i} kernels[edge_id[p]] @ h[col[p]]`` (the sum)."""
    return aggregation.aggregate_forward(h, kernels, graph.row_ptr, graph.col, graph.edge_id)


def _aggregate_grad_h(graph: Graph, g: np.ndarray, kernels: np.ndarray) -> np.ndarray:
    """``dh[j] = sum_{p: col[p] = j} kernels[edge_id[p]]^T g[row[p]]``."""
    return aggregation.aggregate_grad_h(g, kernels, graph.row, graph.edge_id, *graph.transpose)


def _aggregate_grad_kernels(graph: Graph, g: np.ndarray, h: np.ndarray) -> np.ndarray:
    """``dk[e] = sum_{p: edge_id[p] = e} g[row[p]] h[col[p]]^T``."""
    return aggregation.aggregate_grad_kappa(g, h, graph.row, graph.col, *graph.by_edge_id)


def _contiguous(*arrays: np.ndarray | None) -> list:
    return [None if a is None else np.ascontiguousarray(a) for a in arrays]


# -- samples for the registry gradcheck ------------------------------------------------------


def _sample_graph() -> Graph:
    """6 nodes: node 5 isolated, node 0 has a self loop, the undirected edges 1-2 and 2-3
    share one id per pair, node 4 receives from three nodes; 7 edge ids for 9 entries."""
    src = [0, 1, 2, 2, 3, 0, 1, 3, 4]
    dst = [0, 2, 1, 3, 2, 4, 4, 4, 1]
    ids = [0, 1, 1, 2, 2, 3, 4, 5, 6]
    return Graph.from_edges(src, dst, 6, edge_id=ids)


def _mlp_params(rng: np.random.Generator, x: np.ndarray, hidden: int, f: int,
                margin: float = 0.1):
    """U, b_u, V, b_v with every pre-activation |U x_e + b_u| >= margin (away from relu's
    kink, so finite differences see one side of it)."""
    while True:
        U = rng.standard_normal((hidden, x.shape[1]))
        b_u = rng.standard_normal(hidden)
        if np.all(np.abs(x @ U.T + b_u) >= margin):
            return U, b_u, rng.standard_normal((f, hidden)), rng.standard_normal(f)


def _kernel_samples(rng):
    x = rng.standard_normal((5, 2))
    yield Sample(x, *_mlp_params(rng, x, 4, 6), f_out=2, f_in=3, label="E=5 d=2 H=4 2x3")
    x = rng.standard_normal((3, 1))
    yield Sample(x, *_mlp_params(rng, x, 3, 2), f_out=1, f_in=2, label="E=3 d=1 H=3 1x2")


def _rectangular_graph() -> Graph:
    """5 source nodes to 3 target nodes: target 1 has no sources, source 4 sends to no
    target, target 2 receives source 0 twice (ids 4 and 5)."""
    return Graph.from_edges([0, 3, 1, 2, 0, 0], [0, 0, 2, 2, 2, 2], 3, num_source_nodes=5)


def _aggregate_samples(rng):
    graph = _sample_graph()
    for reduce in ("sum", "mean"):
        yield Sample(rng.standard_normal((6, 3)), rng.standard_normal((7, 2, 3)),
                     graph=graph, reduce=reduce, label=f"shared ids, isolated node, {reduce}")
    yield Sample(rng.standard_normal((5, 2)), rng.standard_normal((6, 3, 2)),
                 graph=_rectangular_graph(), reduce="mean", label="rectangular 5 -> 3")


def _gno_samples(rng):
    graph = _sample_graph()
    for reduce in ("sum", "mean"):
        x = rng.standard_normal((7, 2))
        yield Sample(rng.standard_normal((6, 3)), x, *_mlp_params(rng, x, 4, 2 * 3),
                     graph=graph, reduce=reduce, label=f"shared ids, isolated node, {reduce}")
    x = rng.standard_normal((7, 2))
    yield Sample(rng.standard_normal((2, 6, 3)), x, *_mlp_params(rng, x, 3, 2 * 3),
                 graph=graph, reduce="mean", label="batch of 2 on a shared graph")
    x = rng.standard_normal((6, 1))
    yield Sample(rng.standard_normal((5, 2)), x, *_mlp_params(rng, x, 3, 3 * 2),
                 graph=_rectangular_graph(), label="rectangular 5 -> 3")
    yield Sample(rng.standard_normal((3, 5, 2)), x, *_mlp_params(rng, x, 3, 3 * 2),
                 graph=_rectangular_graph(), label="rectangular 5 -> 3, batch of 3")


# -- ops -----------------------------------------------------------------------------------


def _zeros_if_none(b: np.ndarray | None, n: int, like: np.ndarray) -> np.ndarray:
    return np.zeros(n, dtype=like.dtype) if b is None else b


@register("gno_kernel", samples=_kernel_samples)
class GnoKernel(Function):
    """kappa[e] = (V relu(U x_e + b_u) + b_v) as an [F_out, F_in] matrix."""

    @staticmethod
    def forward(ctx, x, U, b_u, V, b_v, f_out, f_in):
        x, U, b_u, V, b_v = _contiguous(x, U, b_u, V, b_v)
        b_u = _zeros_if_none(b_u, U.shape[0], x)
        b_v = _zeros_if_none(b_v, V.shape[0], x)
        kappa, hidden = gno_mlp.kernel_forward(x, U, b_u, V, b_v)
        ctx.save_for_backward(x, hidden, U, V)
        return kappa.reshape(x.shape[0], f_out, f_in)

    @staticmethod
    def backward(ctx, g):
        x, hidden, U, V = ctx.saved_tensors
        g = np.ascontiguousarray(g).reshape(x.shape[0], V.shape[0])
        return gno_mlp.kernel_backward(g, x, hidden, U, V)

    @staticmethod
    def vjp(ctx, g):
        # relu's derivative is the constant mask hidden > 0 (its second derivative is
        # zero); the products with x, U, V and the recomputed hidden layer are not linear.
        x, U, b_u, V, b_v = (None if a is None else lift(a) for a in ctx.inputs)
        hidden = ctx.saved_tensors[1]
        mask = lift((hidden > 0).astype(hidden.dtype))
        need = ctx.needs_input_grad
        g2 = g.reshape(x.shape[0], V.shape[0])
        dx = dU = db_u = dV = db_v = None
        if need[3]:
            pre = x @ U.T if b_u is None else x @ U.T + b_u
            dV = g2.T @ (pre * mask)
        if need[4]:
            db_v = g2.sum(0)
        if need[0] or need[1] or need[2]:
            gh = (g2 @ V) * mask
            dx = gh @ U if need[0] else None
            dU = gh.T @ x if need[1] else None
            db_u = gh.sum(0) if need[2] else None
        return dx, dU, db_u, dV, db_v


@register("gno_aggregate", samples=_aggregate_samples)
class GnoAggregate(Function):
    """m_i = sum over row i of kernels[edge_id[p]] @ h[col[p]] (or the mean)."""

    @staticmethod
    def forward(ctx, h, kernels, graph, reduce="sum"):
        h, kernels = _contiguous(h, kernels)
        m = _aggregate(graph, h, kernels)
        if reduce == "mean":
            m /= _mean_divisor(graph, m.dtype)
        ctx.save_for_backward(h, kernels)
        ctx.graph = graph
        ctx.reduce = reduce
        return m

    @staticmethod
    def backward(ctx, g):
        h, kernels = ctx.saved_tensors
        graph = ctx.graph
        g = g / _mean_divisor(graph, g.dtype) if ctx.reduce == "mean" else g
        g = np.ascontiguousarray(g)
        dh = dk = None
        if ctx.needs_input_grad[0]:
            dh = _aggregate_grad_h(graph, g, kernels)
        if ctx.needs_input_grad[1]:
            dk = _aggregate_grad_kernels(graph, g, h)
        return dh, dk

    @staticmethod
    def vjp(ctx, g):
        h, kernels = (lift(a) for a in ctx.inputs)
        graph = ctx.graph
        if ctx.reduce == "mean":
            g = g / lift(_mean_divisor(graph, g.dtype))
        dh = dk = None
        if ctx.needs_input_grad[0]:
            dh = GnoAggregateGradH.apply(g, kernels, graph=graph)
        if ctx.needs_input_grad[1]:
            dk = GnoAggregateGradKernels.apply(g, h, graph=graph)
        return dh, dk


# gno_aggregate's two backward maps as ops of their own (forward: the backward's kernel),
# so that gno_aggregate is twice differentiable. m = A(h, kernels) is bilinear, and so
# are its gradients: dh = A_h^T(g, kernels), dkernels = A_k^T(g, h). The adjoints of
# these in each argument are A and the other map.

def _grad_h_samples(rng):
    graph = _sample_graph()
    yield Sample(rng.standard_normal((6, 2)), rng.standard_normal((7, 2, 3)), graph=graph,
                 label="shared ids, isolated node")
    yield Sample(rng.standard_normal((3, 2)), rng.standard_normal((6, 2, 3)),
                 graph=_rectangular_graph(), label="rectangular 5 -> 3")


def _grad_kernels_samples(rng):
    graph = _sample_graph()
    yield Sample(rng.standard_normal((6, 2)), rng.standard_normal((6, 3)), graph=graph,
                 label="shared ids, isolated node")
    yield Sample(rng.standard_normal((3, 2)), rng.standard_normal((5, 3)),
                 graph=_rectangular_graph(), label="rectangular 5 -> 3")


def _common(*arrays: np.ndarray) -> list:
    dtype = promoted_dtype(*(a.dtype for a in arrays))
    return [np.ascontiguousarray(a, dtype=dtype) for a in arrays]


class _AggregateGradient(Function):
    """One of gno_aggregate's gradient maps, ``y = B(g, a)`` for upstream g[N, F_out]
    and the other operand ``a`` of the aggregation (kernels for the gradient in h, h for
    the gradient in the kernels). A subclass gives ``gradient(graph, g, a)``, ``partner``
    (the other map) and ``output_is_h``. For upstream u (shaped like y), B's gradients
    are ``dg = A(u, a)`` (the aggregation, u in y's place) and ``da = partner(g, u)``."""

    gradient: Callable[[Graph, np.ndarray, np.ndarray], np.ndarray]
    partner: type[_AggregateGradient]
    output_is_h: bool

    @staticmethod
    def forward(ctx, g, a, graph):
        g, a = _common(g, a)
        ctx.save_for_backward(g, a)
        ctx.graph = graph
        return ctx.fn.gradient(graph, g, a)

    @staticmethod
    def backward(ctx, u):
        g, a = ctx.saved_tensors
        u = np.ascontiguousarray(u, dtype=g.dtype)
        need = ctx.needs_input_grad
        h, kernels = (u, a) if ctx.fn.output_is_h else (a, u)
        dg = _aggregate(ctx.graph, h, kernels) if need[0] else None
        da = ctx.fn.partner.gradient(ctx.graph, g, u) if need[1] else None
        return dg, da

    @staticmethod
    def vjp(ctx, u):
        g, a = (lift(x) for x in ctx.inputs)
        need = ctx.needs_input_grad
        h, kernels = (u, a) if ctx.fn.output_is_h else (a, u)
        dg = GnoAggregate.apply(h, kernels, graph=ctx.graph, reduce="sum") if need[0] else None
        da = ctx.fn.partner.apply(g, u, graph=ctx.graph) if need[1] else None
        return dg, da


@register("gno_aggregate_grad_h", samples=_grad_h_samples)
class GnoAggregateGradH(_AggregateGradient):
    """gno_aggregate's gradient in h for upstream g[N, F_out]: the transposed aggregation
    ``dh[j] = sum_{p: col[p] = j} kernels[edge_id[p]]^T g[row[p]]`` -> [N, F_in]."""

    gradient = staticmethod(_aggregate_grad_h)
    output_is_h = True


@register("gno_aggregate_grad_kernels", samples=_grad_kernels_samples)
class GnoAggregateGradKernels(_AggregateGradient):
    """gno_aggregate's gradient in the kernels for upstream g[N, F_out]: per-edge outer
    products ``dk[e] = sum_{p: edge_id[p] = e} g[row[p]] h[col[p]]^T`` ->
    [num_edge_ids, F_out, F_in]."""

    gradient = staticmethod(_aggregate_grad_kernels)
    partner = GnoAggregateGradH
    output_is_h = False


GnoAggregateGradH.partner = GnoAggregateGradKernels


@register("gno", samples=_gno_samples)
class Gno(Function):
    """gno_aggregate(h, gno_kernel(edge_feats, U, b_u, V, b_v), graph), fused and
    re-associated (see kernels/gno.py): no [E, F_out, F_in] array in forward or backward.
    The second-derivative path (``vjp``, under ``create_graph=True``) does build them."""

    @staticmethod
    def forward(ctx, h, x, U, b_u, V, b_v, graph, reduce="sum"):
        h, x, U, b_u, V, b_v = _contiguous(h, x, U, b_u, V, b_v)
        b_u = _zeros_if_none(b_u, U.shape[0], h)
        b_v = _zeros_if_none(b_v, V.shape[0], h)
        f_out = V.shape[0] // h.shape[-1]
        m, sums = gno_kernels.gno_forward(h, x, U, b_u, V, b_v, graph.row_ptr, graph.col,
                                          graph.edge_id, f_out)
        # a batch's per-node sums give dV and db_v; kept only when one of them is wanted
        ctx.sums = sums if any(ctx.needs_input_grad[4:6]) else None
        if reduce == "mean":
            m /= _mean_divisor(graph, m.dtype)
        ctx.save_for_backward(h, x, U, b_u, V, b_v)
        ctx.graph = graph
        ctx.reduce = reduce
        return m

    @staticmethod
    def backward(ctx, g):
        h, x, U, b_u, V, b_v = ctx.saved_tensors
        graph = ctx.graph
        g = g / _mean_divisor(graph, g.dtype) if ctx.reduce == "mean" else g
        return gno_kernels.gno_backward(np.ascontiguousarray(g), h, x, U, b_u, V, b_v,
                                        graph.row_ptr, graph.col, graph.edge_id,
                                        lambda: graph.by_edge_id, lambda: graph.transpose,
                                        ctx.needs_input_grad, ctx.sums)

    @staticmethod
    def vjp(ctx, g):
        # The unfused composition recomputed on the inputs and differentiated: this path
        # materialises the [E, F_out, F_in] kernels (and the [E, H] hidden layer), which
        # the fused forward and backward never build.
        # A batch h[B, N, F_in] aggregates each example with the same kernels.
        graph, reduce = ctx.graph, ctx.reduce
        f_in = ctx.inputs[0].shape[-1]
        f_out = ctx.inputs[4].shape[0] // f_in

        def unfused(h, x, U, b_u, V, b_v):
            kernels = GnoKernel.apply(x, U, b_u, V, b_v, f_out=f_out, f_in=f_in)
            if h.ndim == 2:
                return GnoAggregate.apply(h, kernels, graph=graph, reduce=reduce)
            return stack([GnoAggregate.apply(h[b], kernels, graph=graph, reduce=reduce)
                          for b in range(h.shape[0])])

        return recompute_vjp(ctx, unfused, (g,))


# -- public functions --------------------------------------------------------------------------


def _check_mlp(op: str, x: Tensor, U: Tensor, b_u: Tensor | None, V: Tensor,
               b_v: Tensor | None, f: int | None) -> None:
    """Shapes of the kernel MLP: x[E, d], U[H, d], b_u[H], V[F, H], b_v[F]."""
    _expect(op, "edge_feats", x, (None, None), "[E, d]")
    d = x.shape[1]
    _expect(op, "U", U, (None, d), f"[H, d] with d = {d} from edge_feats {x.shape}")
    H = U.shape[0]
    _expect(op, "b_u", b_u, (H,), f"[H] with H = {H} from U {U.shape}")
    _expect(op, "V", V, (f, H), f"[F_out*F_in, H] with H = {H} from U {U.shape}")
    _expect(op, "b_v", b_v, (V.shape[0],), f"[F_out*F_in] = [{V.shape[0]}] from V {V.shape}")


def gno_kernel(edge_feats: Any, U: Any, b_u: Any, V: Any, b_v: Any, f_out: int,
               f_in: int) -> Tensor:
    """Per-edge kernel matrices of the graph neural operator
    (docs/derivations.md#graph-neural-operator):
    ``kappa[e] = reshape(V relu(U edge_feats[e] + b_u) + b_v, [f_out, f_in])``.

    ``edge_feats[E, d]``, ``U[H, d]``, ``b_u[H]``, ``V[f_out*f_in, H]``,
    ``b_v[f_out*f_in]`` (biases may be None) -> ``[E, f_out, f_in]``. Row e of the result
    is the kernel of edge id e (see the module docstring). relu'(0) = 0.
    """
    op = "gno_kernel"
    x, U, V = lift(edge_feats), lift(U), lift(V)
    b_u, b_v = _lift_optional(b_u), _lift_optional(b_v)
    for name, val in (("f_out", f_out), ("f_in", f_in)):
        if not isinstance(val, numbers.Integral) or isinstance(val, bool) or val < 1:
            raise ValueError(f"{op}: {name} must be a positive integer, got {val!r}")
    float_operands(op, edge_feats=x, U=U, b_u=b_u, V=V, b_v=b_v)
    _check_mlp(op, x, U, b_u, V, b_v, int(f_out) * int(f_in))
    return GnoKernel.apply(x, U, b_u, V, b_v, f_out=int(f_out), f_in=int(f_in))


def gno_aggregate(h: Any, kernels: Any, graph: Graph, reduce: str = "sum") -> Tensor:
    """Graph aggregation with per-edge matrices:
    ``m[i] = sum_{p in row i} kernels[edge_id[p]] @ h[col[p]]`` (``reduce='mean'`` divides
    by the row length; nodes without neighbours get 0).

    ``h[N_s, F_in]``, ``kernels[num_edge_ids, F_out, F_in]`` -> ``[N, F_out]`` (N_s = N
    but on a rectangular graph: its source and target nodes). The gradient of ``h`` is
    gathered through the graph's cached transposed CSR, that of ``kernels`` by
    edge id (entries sharing an id add up).
    """
    op = "gno_aggregate"
    _check_graph(op, graph)
    mean_ = _check_reduce(op, reduce)
    h, kernels = lift(h), lift(kernels)
    float_operands(op, h=h, kernels=kernels)
    _expect(op, "h", h, (graph.num_source_nodes, None), f"[N, F_in] with N = "
            f"{_sources(graph)}")
    _expect(op, "kernels", kernels, (graph.num_edge_ids, None, h.shape[1]),
            f"[num_edge_ids, F_out, F_in] with num_edge_ids = {graph.num_edge_ids} from the "
            f"graph and F_in = {h.shape[1]} from h {h.shape}")
    return GnoAggregate.apply(h, kernels, graph=graph, reduce="mean" if mean_ else "sum")


def gno(h: Any, edge_feats: Any, U: Any, b_u: Any, V: Any, b_v: Any, graph: Graph,
        reduce: str = "sum") -> Tensor:
    """Graph neural operator layer, fused:
    ``m[i] = sum_{p in row i} kappa(edge_feats[edge_id[p]]) @ h[col[p]]`` with
    ``kappa(x) = reshape(V relu(U x + b_u) + b_v, [F_out, F_in])``; equal to
    ``gno_aggregate(h, gno_kernel(edge_feats, U, b_u, V, b_v, F_out, F_in), graph, reduce)``
    but never building the ``[E, F_out, F_in]`` kernels.

    ``h[N_s, F_in]``, ``edge_feats[num_edge_ids, d]``, ``U[H, d]``, ``b_u[H]``,
    ``V[F_out*F_in, H]`` (F_out = V.shape[0] / F_in), ``b_v[F_out*F_in]`` (biases may be
    None) -> ``[N, F_out]``; N_s = N but on a rectangular graph (``radius_graph(x, r,
    query=q)``: messages from the N_s input points to the N query points).

    A batch on one shared graph (the grid case): ``h[B, N_s, F_in]`` -> ``[B, N, F_out]``,
    ``m[b, i] = sum_p kappa_e h[b, col p]``. Each edge's kernel MLP runs once for the
    whole batch (the batch is folded into the feature dimension, see kernels/gno.py).

    The forward keeps nothing beyond its inputs (hidden and the per-node sums are
    recomputed in the backward); the backward's extra memory is O(nnz * (d + B*F_in))
    plus a few parameter-sized partials.
    """
    op = "gno"
    _check_graph(op, graph)
    mean_ = _check_reduce(op, reduce)
    h, x, U, V = lift(h), lift(edge_feats), lift(U), lift(V)
    b_u, b_v = _lift_optional(b_u), _lift_optional(b_v)
    float_operands(op, h=h, edge_feats=x, U=U, b_u=b_u, V=V, b_v=b_v)
    _check_h(op, h, graph)
    _expect(op, "edge_feats", x, (graph.num_edge_ids, None),
            f"[num_edge_ids, d] with num_edge_ids = {graph.num_edge_ids} from the graph")
    _expect(op, "V", V, (None, None), "[F_out*F_in, H]")
    f_in = h.shape[-1]
    if f_in < 1:
        raise ValueError(f"{op}: h has shape {h.shape}: F_in = 0 features leaves "
                         f"F_out = V.shape[0] / F_in undefined (needs F_in >= 1)")
    if V.shape[0] % f_in:
        raise ValueError(f"{op}: V has {V.shape[0]} rows (shape {V.shape}), not a multiple "
                         f"of F_in = {f_in} from h {h.shape}")
    _check_mlp(op, x, U, b_u, V, b_v, None)
    return Gno.apply(h, x, U, b_u, V, b_v, graph=graph, reduce="mean" if mean_ else "sum")


__all__ = ["Graph", "gno", "gno_aggregate", "gno_kernel", "knn_graph", "radius_graph"]
