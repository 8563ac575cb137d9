"""Graph: a sparse graph in CSR form for the graph neural operator.

Row ``i`` lists the nodes that send messages to node ``i``:
``col[row_ptr[i]:row_ptr[i+1]]``. Entry ``p`` belongs to edge ``edge_id[p]``, whose
features are row ``edge_id[p]`` of an ``edge_feats[num_edge_ids, d]`` array. Two entries
may share an edge id (both directions of an undirected edge, as in the Fortran
reference), so ``num_edge_ids`` may be smaller than ``nnz``.

A graph may be rectangular: its rows (``num_nodes`` target nodes, the receivers) and its
columns (``num_source_nodes`` source nodes, the senders) then index two different point
sets, e.g. the query points and the input points of ``radius_graph(x, r, query=q)``.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import numpy as np

from .kernels import csr


def _index_array(name: str, value: Any, where: str) -> np.ndarray:
    """A fresh read-only 1-D int64 copy of an index argument (TypeError for non-integers)."""
    arr = np.asarray(value)
    if arr.dtype.kind not in "iu" and not (arr.size == 0 and arr.dtype.kind == "f"):
        raise TypeError(f"{where}: {name} must be an integer array, got dtype {arr.dtype}")
    if arr.ndim != 1:
        raise ValueError(f"{where}: {name} must be 1-D, got shape {arr.shape}")
    out = arr.astype(np.int64, copy=True)
    out.setflags(write=False)
    return out


def _node_count(where: str, name: str, value: Any, default: int) -> int:
    """``value`` as a node count (``default`` for None); ValueError unless an int >= 0."""
    if value is None:
        return default
    if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{where}: {name} must be a non-negative integer, got {value!r}")
    return int(value)


def _check_range(name: str, arr: np.ndarray, hi: int, what: str, where: str) -> None:
    bad = csr.first_outside(arr, 0, hi)
    if bad >= 0:
        raise ValueError(f"{where}: {name}[{bad}] = {arr[bad]} is out of range for {what} "
                         f"(must be in [0, {hi}))")


class Graph:
    """A directed graph on ``num_nodes`` nodes in CSR form (int64 arrays, read-only).

    ``Graph(row_ptr, col, edge_id=None, num_edge_ids=None, num_source_nodes=None)``:
    ``edge_id`` defaults to the CSR position (every entry its own edge); ``num_edge_ids``
    defaults to ``max(edge_id) + 1``. Rows need not be sorted. ``num_source_nodes``
    (default ``num_nodes``) is the range of ``col``: a rectangular graph sends messages
    from ``num_source_nodes`` source nodes to ``num_nodes`` target nodes (the rows).
    Build graphs with ``nb.radius_graph``, ``nb.knn_graph`` or ``Graph.from_edges``. The
    transposed CSR and the grouping of entries by edge id, which the backward passes use
    to gather instead of scatter, are built on first use and cached.
    """

    def __init__(self, row_ptr: Any, col: Any, edge_id: Any = None,
                 num_edge_ids: int | None = None, num_source_nodes: int | None = None):
        where = "Graph"
        row_ptr = _index_array("row_ptr", row_ptr, where)
        col = _index_array("col", col, where)
        if row_ptr.shape[0] < 1:
            raise ValueError(f"{where}: row_ptr must have num_nodes + 1 >= 1 entries, got "
                             f"shape {row_ptr.shape}")
        if row_ptr[0] != 0:
            raise ValueError(f"{where}: row_ptr[0] must be 0, got {row_ptr[0]}")
        bad = csr.first_decrease(row_ptr)
        if bad >= 0:
            raise ValueError(f"{where}: row_ptr must be non-decreasing, but row_ptr[{bad}] = "
                             f"{row_ptr[bad]} < row_ptr[{bad - 1}] = {row_ptr[bad - 1]}")
        if row_ptr[-1] != col.shape[0]:
            raise ValueError(f"{where}: row_ptr[-1] = {row_ptr[-1]} must equal the length of "
                             f"col, {col.shape[0]}")
        num_nodes = row_ptr.shape[0] - 1
        num_sources = _node_count(where, "num_source_nodes", num_source_nodes, num_nodes)
        what = (f"{num_nodes} nodes" if num_sources == num_nodes
                else f"{num_sources} source nodes")
        _check_range("col", col, num_sources, what, where)
        if edge_id is None:
            edge_id = np.arange(col.shape[0], dtype=np.int64)
            edge_id.setflags(write=False)
        else:
            edge_id = _index_array("edge_id", edge_id, where)
            if edge_id.shape != col.shape:
                raise ValueError(f"{where}: edge_id has shape {edge_id.shape} but col has "
                                 f"shape {col.shape}")
        if num_edge_ids is None:
            negative = csr.first_outside(edge_id, 0, np.iinfo(np.int64).max)
            if negative >= 0:
                raise ValueError(f"{where}: edge_id[{negative}] = {edge_id[negative]} is out "
                                 f"of range (edge ids must be >= 0)")
            num_edge_ids = int(edge_id.max()) + 1 if edge_id.size else 0
        elif int(num_edge_ids) < 0:
            raise ValueError(f"{where}: num_edge_ids must be >= 0, got {num_edge_ids}")
        num_edge_ids = int(num_edge_ids)
        _check_range("edge_id", edge_id, num_edge_ids, f"{num_edge_ids} edge ids", where)
        self._set(row_ptr, col, edge_id, num_sources, num_edge_ids)

    def _set(self, row_ptr: np.ndarray, col: np.ndarray, edge_id: np.ndarray | None,
             num_sources: int, num_edge_ids: int) -> None:
        """The attributes; ``edge_id`` None: the CSR positions, built on first use."""
        self.row_ptr = row_ptr
        self.col = col
        if edge_id is not None:
            self.edge_id = edge_id
        self.num_nodes = row_ptr.shape[0] - 1
        self.num_source_nodes = num_sources
        self.num_edge_ids = num_edge_ids

    @classmethod
    def _of_search(cls, row_ptr: np.ndarray, col: np.ndarray, num_source_nodes: int) -> Graph:
        """The graph of a CSR that nbgrad's own neighbour search just built (fresh int64
        arrays nobody else holds, row_ptr from 0 non-decreasing to len(col), every column
        in range, the edge ids the CSR positions): made read-only in place, without the
        constructor's copies and checks, each a pass over the arrays."""
        if not all(a.dtype == np.int64 and a.ndim == 1 and a.flags.c_contiguous
                   for a in (row_ptr, col)):
            return cls(row_ptr, col, num_source_nodes=num_source_nodes)
        for a in (row_ptr, col):
            a.setflags(write=False)
        graph = cls.__new__(cls)
        graph._set(row_ptr, col, None, num_source_nodes, col.shape[0])
        return graph

    @classmethod
    def from_edges(cls, src: Any, dst: Any, num_nodes: int, edge_id: Any = None,
                   num_edge_ids: int | None = None,
                   num_source_nodes: int | None = None) -> Graph:
        """The graph with an edge ``src[k] -> dst[k]`` for each k: a message flows from
        src to dst, so row ``dst[k]`` lists ``src[k]`` (PyTorch Geometric's convention).
        ``dst`` indexes ``num_nodes`` nodes and ``src`` indexes ``num_source_nodes``
        (default ``num_nodes``; give it for a rectangular graph).

        ``edge_id[k]`` (default ``k``) is the edge-feature row of edge k, so with the
        default the rows of ``edge_feats`` follow the order of ``src``/``dst``. Give both
        directions of an undirected edge the same id to share features. Rows are sorted
        by source (ties keep input order); repeated edges are kept.
        """
        where = "Graph.from_edges"
        src = _index_array("src", src, where)
        dst = _index_array("dst", dst, where)
        if src.shape != dst.shape:
            raise ValueError(f"{where}: src has shape {src.shape} but dst has shape "
                             f"{dst.shape}")
        if not isinstance(num_nodes, int | np.integer) or num_nodes < 0:
            raise ValueError(f"{where}: num_nodes must be a non-negative integer, got "
                             f"{num_nodes!r}")
        num_nodes = int(num_nodes)
        num_sources = _node_count(where, "num_source_nodes", num_source_nodes, num_nodes)
        _check_range("src", src, num_sources, f"{num_sources} "
                     f"{'nodes' if num_sources == num_nodes else 'source nodes'}", where)
        _check_range("dst", dst, num_nodes, f"{num_nodes} nodes", where)
        if edge_id is None:
            edge_id = np.arange(src.shape[0], dtype=np.int64)
        else:
            edge_id = _index_array("edge_id", edge_id, where)
            if edge_id.shape != src.shape:
                raise ValueError(f"{where}: edge_id has shape {edge_id.shape} but src has "
                                 f"shape {src.shape}")
        order = np.lexsort((src, dst))  # by dst (the row), then src; stable
        row_ptr = np.zeros(num_nodes + 1, dtype=np.int64)
        np.cumsum(np.bincount(dst, minlength=num_nodes), out=row_ptr[1:])
        return cls(row_ptr, src[order], edge_id[order], num_edge_ids, num_sources)

    @cached_property
    def edge_id(self) -> np.ndarray:
        """The edge id of every CSR entry: here each entry its own edge, its position
        (a graph given other ids holds them instead). Built on first use: a radius graph
        whose edges carry no features never needs it."""
        ids = np.arange(self.nnz, dtype=np.int64)
        ids.setflags(write=False)
        return ids

    # -- sizes -------------------------------------------------------------------------
    @property
    def nnz(self) -> int:
        """Number of CSR entries (directed edges)."""
        return self.col.shape[0]

    @property
    def is_square(self) -> bool:
        """Whether sources and targets are one node set (``num_source_nodes == num_nodes``)."""
        return self.num_source_nodes == self.num_nodes

    @cached_property
    def degree(self) -> np.ndarray:
        """Row lengths: the number of entries (in-edges) of every node."""
        return np.diff(self.row_ptr)

    # -- cached index structures for the backward passes --------------------------------
    @cached_property
    def row(self) -> np.ndarray:
        """The row (destination node) of every CSR entry."""
        return csr.csr_rows(self.row_ptr)

    @cached_property
    def transpose(self) -> tuple[np.ndarray, np.ndarray]:
        """Transposed CSR ``(t_ptr[num_source_nodes+1], t_pos[nnz])``: the CSR entries
        whose column is ``j`` are ``t_pos[t_ptr[j]:t_ptr[j+1]]`` (in increasing position)."""
        return csr.group_by(self.col, self.num_source_nodes)

    @cached_property
    def by_edge_id(self) -> tuple[np.ndarray, np.ndarray]:
        """``(e_ptr[num_edge_ids+1], e_pos[nnz])``: the CSR entries with edge id ``e`` are
        ``e_pos[e_ptr[e]:e_ptr[e+1]]`` (in increasing position)."""
        return csr.group_by(self.edge_id, self.num_edge_ids)

    @cached_property
    def with_entry_ids(self) -> Graph:
        """This graph with every CSR entry its own edge id (``edge_id = arange(nnz)``):
        itself when that is already so. For features computed per entry (``x_j - x_i``),
        which differ between the two directions of an edge that shares an id."""
        if "edge_id" not in vars(self) or (
                self.num_edge_ids == self.nnz
                and np.array_equal(self.edge_id, np.arange(self.nnz))):
            return self
        return Graph(self.row_ptr, self.col, None, None, self.num_source_nodes)

    def edge_index(self) -> np.ndarray:
        """``[2, nnz]`` array of (src, dst) = (col, row) pairs, PyTorch Geometric style."""
        return np.stack([self.col, self.row])

    def __repr__(self) -> str:
        sources = "" if self.is_square else f", num_source_nodes={self.num_source_nodes}"
        return (f"Graph(num_nodes={self.num_nodes}{sources}, nnz={self.nnz}, "
                f"num_edge_ids={self.num_edge_ids})")
