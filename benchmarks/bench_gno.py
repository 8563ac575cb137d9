"""W6 graph neural operator and W6b radius graph.

W6: 4,096 nodes, 8 random in-neighbours each (E = 32,768 edges, one edge id each), edge
features d=2, H=64, F_in=F_out=16, float32; forward + backward with gradients for U,
b_u, V, b_v and h. nbgrad's fused ``gno`` against PyTorch written the way a PyTorch user
would (kernel MLP, index_select, bmm, index_add); also nbgrad's unfused
``gno_aggregate(gno_kernel(...))``, and the peak NumPy memory (tracemalloc) of both.

W6b: ``radius_graph`` on uniform points in [0,1]^d (d = 2, 3; 100k and 1M points; radii
for 18-32 neighbours a point), on one cloud and from as many query points (another
uniform cloud), against SciPy's fastest call for the same graph, tree builds included:
``cKDTree.query_pairs`` (each pair once, no CSR) or ``sparse_distance_matrix`` with
``coo_matrix`` output for one cloud; ``sparse_distance_matrix`` (coo) or
``query_ball_point(workers=2)`` (100k only: a list per query point) to queries. Each
row names the call that was fastest.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
from scipy.spatial import cKDTree

import nbgrad as nb

from .harness import Row, median_time, paired_times

N, DEG, D, H, F_IN, F_OUT = 4096, 8, 2, 64, 16, 16
# (d, points, radius): about 32, 28, 18 and 17 neighbours a point
RADIUS_CASES = [(2, 100_000, 0.01), (2, 1_000_000, 0.003), (3, 100_000, 0.035),
                (3, 1_000_000, 0.016)]


def _w6_data():
    rng = np.random.default_rng(0)
    E = N * DEG
    dst = np.repeat(np.arange(N), DEG)
    src = rng.integers(0, N, E)
    f32 = np.float32
    arrays = {
        "h": rng.standard_normal((N, F_IN)).astype(f32),
        "x": rng.standard_normal((E, D)).astype(f32),
        "U": (rng.standard_normal((H, D)) / np.sqrt(D)).astype(f32),
        "b_u": (0.1 * rng.standard_normal(H)).astype(f32),
        "V": (rng.standard_normal((F_OUT * F_IN, H)) / np.sqrt(H)).astype(f32),
        "b_v": (0.1 * rng.standard_normal(F_OUT * F_IN)).astype(f32),
        "g": rng.standard_normal((N, F_OUT)).astype(f32),
    }
    return src, dst, arrays


def _nbgrad_step(graph, a, fused):
    h = nb.tensor(a["h"], requires_grad=True)
    U = nb.tensor(a["U"], requires_grad=True)
    b_u = nb.tensor(a["b_u"], requires_grad=True)
    V = nb.tensor(a["V"], requires_grad=True)
    b_v = nb.tensor(a["b_v"], requires_grad=True)
    if fused:
        m = nb.gno(h, a["x"], U, b_u, V, b_v, graph)
    else:
        m = nb.gno_aggregate(h, nb.gno_kernel(a["x"], U, b_u, V, b_v, F_OUT, F_IN), graph)
    m.backward(a["g"])
    return h.grad


def _torch_step(torch, src, dst, t):
    h, U, b_u, V, b_v = (t[k].detach().requires_grad_() for k in ("h", "U", "b_u", "V",
                                                                 "b_v"))
    hidden = torch.relu(t["x"] @ U.T + b_u)
    kappa = (hidden @ V.T + b_v).view(-1, F_OUT, F_IN)
    msg = torch.bmm(kappa, h.index_select(0, src).unsqueeze(-1)).squeeze(-1)
    out = torch.zeros(N, F_OUT, dtype=msg.dtype).index_add(0, dst, msg)
    out.backward(t["g"])
    return h.grad


def _peak_mb(fn) -> float:
    """Peak traced (NumPy) allocation of one call, in MB, after a warm-up call."""
    fn()
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def run(torch) -> list[Row]:
    src, dst, a = _w6_data()
    graph = nb.Graph.from_edges(src, dst, N)
    torch_fn = None
    if torch is not None:
        t = {k: torch.from_numpy(v) for k, v in a.items()}
        ts, td = torch.from_numpy(src), torch.from_numpy(dst)

        def torch_fn():
            return _torch_step(torch, ts, td, t)

    fused_s, torch_s = paired_times(lambda: _nbgrad_step(graph, a, True), torch_fn)
    unfused_s = median_time(lambda: _nbgrad_step(graph, a, False))
    fused_mb = _peak_mb(lambda: _nbgrad_step(graph, a, True))
    unfused_mb = _peak_mb(lambda: _nbgrad_step(graph, a, False))
    rows = [
        Row("W6 gno fused fwd+bwd (N=4096, E=32768)", fused_s, torch_s, "<=0.25x",
            f"peak NumPy mem {fused_mb:.0f} MB"),
        Row("W6 gno unfused gno_aggregate(gno_kernel)", unfused_s, torch_s, "",
            f"peak NumPy mem {unfused_mb:.0f} MB"),
    ]

    for d, n, radius in RADIUS_CASES:
        rows += [_radius_row(d, n, radius, to_queries) for to_queries in (False, True)]
    return rows


def _scipy_calls(points, query, radius):
    """SciPy's calls giving the radius graph (name -> call), tree builds included."""
    if query is None:
        def coo():
            tree = cKDTree(points)
            return tree.sparse_distance_matrix(tree, radius, output_type="coo_matrix")
        return {"query_pairs(ndarray)": lambda: cKDTree(points).query_pairs(
                    radius, output_type="ndarray"),
                "sparse_distance_matrix(coo)": coo}
    calls = {"sparse_distance_matrix(coo)": lambda: cKDTree(query).sparse_distance_matrix(
        cKDTree(points), radius, output_type="coo_matrix")}
    if points.shape[0] <= 100_000:
        calls["query_ball_point(workers=2)"] = lambda: cKDTree(points).query_ball_point(
            query, radius, workers=2)
    return calls


def _radius_row(d, n, radius, to_queries) -> Row:
    """nbgrad's radius graph against SciPy's fastest call (picked by one timing each at
    1M points, the median of three below), measured alternating."""
    rng = np.random.default_rng(d)
    points = rng.random((n, d))
    query = rng.random((n, d)) if to_queries else None
    big = n >= 1_000_000
    calls = _scipy_calls(points, query, radius)
    spent = {name: median_time(fn, repeats=1 if big else 3, warmup=0 if big else 1)
             for name, fn in calls.items()}
    fastest = min(spent, key=spent.get)

    def ours():
        return nb.radius_graph(points, radius, query=query)

    nnz = ours().nnz
    ours_s, scipy_s = paired_times(ours, calls[fastest], repeats=1 if big else 5,
                                   warmup=0 if big else 1, rounds=2)
    kind = "to queries" if to_queries else "one cloud"
    return Row(f"W6b radius_graph {d}-D {n // 1000}k pts {kind}", ours_s, scipy_s, "<=0.5x",
               f"r={radius}, {nnz / n:.0f} nbrs/pt; vs SciPy {fastest}")
