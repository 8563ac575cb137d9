"""The reference library's graph-neural-operator regression: a chain of points on
[0, 2 pi] with targets [sin x, cos x]."""

from __future__ import annotations

import numpy as np

from ..graph import Graph
from . import _checks


def chain_graph(n: int = 20) -> tuple[np.ndarray, Graph, np.ndarray]:
    """(points [n, 1], graph, targets [n, 2]).

    ``points[i] = 2 pi i / (n - 1)``, ``i = 0..n-1`` (both ends included); the graph
    has the 2 (n - 1) directed edges ``i -> i+1`` and ``i+1 -> i`` (edge ids in that
    order: ``2i`` for ``i -> i+1``, ``2i + 1`` for ``i+1 -> i``), built with
    ``Graph.from_edges``; ``targets[i] = [sin x_i, cos x_i]``. The node feature is the
    point itself (the reference library feeds a constant 1 and lets the kernel see
    ``x_j - x_i``; both work with these arrays). Closed form and tiny, so not cached.
    """
    n = _checks.integer("chain_graph", "n", n, 2)
    x = np.linspace(0.0, 2.0 * np.pi, n)
    left = np.arange(n - 1)
    src = np.stack([left, left + 1], axis=1).reshape(-1)
    dst = np.stack([left + 1, left], axis=1).reshape(-1)
    graph = Graph.from_edges(src, dst, n)
    targets = np.stack([np.sin(x), np.cos(x)], axis=1)
    return x[:, None], graph, targets
