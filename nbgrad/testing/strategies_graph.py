"""Hypothesis strategies for point clouds, radii and random graphs.

    from hypothesis import given
    from nbgrad.testing.strategies_graph import point_clouds, radii, random_graphs

    @given(random_graphs(max_nodes=6))
    def test_my_graph_op(graph): ...

``random_graphs`` draws the awkward cases on purpose: isolated nodes, self loops,
repeated edges, both directions of an undirected edge sharing one edge id, edge ids that
no entry uses.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ..graph import Graph

__all__ = ["point_clouds", "radii", "random_graphs"]


@st.composite
def point_clouds(draw, min_points: int = 0, max_points: int = 30,
                 dims: tuple[int, ...] = (1, 2, 3), lattice: bool | None = None) -> np.ndarray:
    """``[N, d]`` float64 points in [-1, 1]^d. On a lattice (multiples of 1/8, drawn half
    the time unless ``lattice`` is given) points repeat and pairwise distances hit a
    lattice radius exactly, which exercises the ``<= radius`` boundary."""
    n = draw(st.integers(min_points, max_points))
    d = draw(st.sampled_from(dims))
    on_lattice = draw(st.booleans()) if lattice is None else lattice
    if on_lattice:
        coords = st.integers(-8, 8).map(lambda v: v / 8)
    else:
        coords = st.floats(-1, 1, allow_nan=False, allow_infinity=False)
    values = draw(st.lists(coords, min_size=n * d, max_size=n * d))
    return np.array(values, dtype=np.float64).reshape(n, d)


def radii(max_radius: float = 1.0) -> st.SearchStrategy[float]:
    """Radii in [0, max_radius]: 0, lattice multiples of 1/8 (exact ties with lattice
    point clouds), or any float."""
    return st.one_of(st.just(0.0),
                     st.integers(1, int(max_radius * 8)).map(lambda v: v / 8),
                     st.floats(0, max_radius, allow_nan=False))


@st.composite
def random_graphs(draw, min_nodes: int = 1, max_nodes: int = 8, max_edges: int = 16,
                  self_loops: bool = True, shared_edge_ids: bool = True) -> Graph:
    """A ``Graph.from_edges`` graph with up to ``max_edges`` edges (undirected ones count
    twice). Edge ids are one of: one per edge; one per undirected pair (both directions
    share it); or drawn at random (any entries may share, some ids may be unused)."""
    n = draw(st.integers(min_nodes, max_nodes))
    node = st.integers(0, n - 1)
    pairs = draw(st.lists(st.tuples(node, node), max_size=max_edges))
    if not self_loops:
        pairs = [(s, t) for s, t in pairs if s != t]
    modes = ["distinct", "undirected", "random"] if shared_edge_ids else ["distinct"]
    mode = draw(st.sampled_from(modes))
    if mode == "undirected":
        pairs = pairs[: max_edges // 2]
        src = [s for s, t in pairs] + [t for s, t in pairs]
        dst = [t for s, t in pairs] + [s for s, t in pairs]
        ids = list(range(len(pairs))) * 2
        return Graph.from_edges(src, dst, n, edge_id=ids, num_edge_ids=len(pairs))
    src = [s for s, _ in pairs]
    dst = [t for _, t in pairs]
    if mode == "distinct":
        return Graph.from_edges(src, dst, n)
    num_ids = draw(st.integers(1, max(1, len(pairs))))
    ids = draw(st.lists(st.integers(0, num_ids - 1), min_size=len(pairs),
                        max_size=len(pairs)))
    return Graph.from_edges(src, dst, n, edge_id=ids, num_edge_ids=num_ids)
