"""Hypothesis strategies for point clouds, radii and random graphs.

    from hypothesis import given
    from nbgrad.testing.strategies_graph import point_clouds, radii, random_graphs

    @given(random_graphs(max_nodes=6))
    def test_my_graph_op(graph): ...

``random_graphs`` draws the awkward cases on purpose: isolated nodes, self loops,
repeated edges, both directions of an undirected edge sharing one edge id, edge ids that
no entry uses. ``wide_point_clouds`` and ``wide_radii`` spread over float64's whole finite
range, where squared distances over- and underflow. ``special_arrays`` mixes NaN, infinities,
signed zeros, huge and subnormal values into operator inputs.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ..graph import Graph

__all__ = ["point_clouds", "radii", "random_graphs", "special_arrays", "wide_point_clouds",
           "wide_radii"]


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


# Finite float64 values at which a distance computation goes wrong: differences of the
# largest ones overflow, squares of 1.5e154 overflow, squares of 1e-160 and of the
# subnormals underflow, and -0.0 must equal 0.0.
_WIDE_MAGNITUDES = (1.7976931348623157e308, 1e308, 1.5e154, 1.0, 1e-160,
                    2.2250738585072014e-308, 5e-324)
_WIDE_VALUES = [v for m in _WIDE_MAGNITUDES for v in (m, -m)] + [0.0, -0.0]


@st.composite
def wide_point_clouds(draw, min_points: int = 0, max_points: int = 12,
                      dims: tuple[int, ...] = (1, 2, 3)) -> np.ndarray:
    """``[N, d]`` finite float64 points over float64's whole range: the values of
    ``_WIDE_VALUES`` (often repeated, so points coincide) mixed with any finite float."""
    n = draw(st.integers(min_points, max_points))
    d = draw(st.sampled_from(dims))
    coords = st.one_of(st.sampled_from(_WIDE_VALUES),
                       st.floats(allow_nan=False, allow_infinity=False))
    values = draw(st.lists(coords, min_size=n * d, max_size=n * d))
    return np.array(values, dtype=np.float64).reshape(n, d)


def wide_radii() -> st.SearchStrategy[float]:
    """Radii over float64's whole finite range: 0, one of ``_WIDE_MAGNITUDES``, or any
    finite float >= 0."""
    return st.one_of(st.sampled_from((0.0, *_WIDE_MAGNITUDES)),
                     st.floats(0, allow_nan=False, allow_infinity=False))


@st.composite
def random_graphs(draw, min_nodes: int = 1, max_nodes: int = 8, max_edges: int = 16,
                  self_loops: bool = True, shared_edge_ids: bool = True) -> Graph:
    """A ``Graph.from_edges`` graph with up to ``max_edges`` edges (undirected ones count
    twice). Edge ids are one of: one per edge; one per undirected pair (both directions
    share it); or drawn at random (any entries may share, some ids may be unused).
    ``min_nodes=0`` allows the graph without nodes (and edges)."""
    n = draw(st.integers(min_nodes, max_nodes))
    if n == 0:
        return Graph.from_edges([], [], 0)
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


def special_arrays(shape: tuple[int, ...], dtype=np.float64, extremes: bool = True,
                   factors: int = 5) -> st.SearchStrategy[np.ndarray]:
    """Arrays of ``shape`` whose entries are, about one in four, special: NaN, +-inf,
    +-0.0 and (``extremes``) +-huge and +-subnormal; the others are ordinary values k/8 in
    [-3, 3]. Every finite value is a binary fraction with few bits, so that products
    round alike however an op groups them (with or without FMA):

    * huge = 2^((maxexp - 16) // factors): a product of ``factors`` huge values and a few
      ordinary ones stays finite (so no sum's overflow depends on its order); with
      ``factors=1`` a huge value's square overflows;
    * subnormal = 2^14 times the smallest one: its products with up to four ordinary
      values are exact.

    Without ``extremes`` all arithmetic on the finite values is exact (for sums of a
    few products), so a result exactly 0 is 0 in any summation order (relu's kink)."""
    info = np.finfo(dtype)
    special = [np.nan, np.inf, -np.inf, 0.0, -0.0]
    if extremes:
        huge = 2.0 ** ((info.maxexp - 16) // factors)
        tiny = float(info.smallest_subnormal) * 2.0 ** 14
        special += [huge, -huge, tiny, -tiny]
    ordinary = st.integers(-24, 24).map(lambda k: k / 8)
    elements = st.one_of(ordinary, ordinary, ordinary, st.sampled_from(special))
    size = int(np.prod(shape))
    return st.lists(elements, min_size=size, max_size=size).map(
        lambda values: np.array(values, dtype=dtype).reshape(shape))
