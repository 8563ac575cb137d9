"""Point clouds to CSR graphs: the checks of ``radius_graph``'s and ``knn_graph``'s
arguments (ops/gno.py) and the build per example of a batch (kernels/csr.py searches)."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from ..kernels import csr
from ..tensor import Tensor


def cloud(op: str, name: str, value: Any) -> np.ndarray:
    """A point cloud ``[N, d]`` as a fresh C-contiguous float64 array (errors name ``op``,
    ``name`` and the shape; coordinates must be finite)."""
    pts = np.asarray(value._data if isinstance(value, Tensor) else value)
    if pts.dtype.kind not in "fiu":
        raise TypeError(f"{op}: {name} must be a real array, got dtype {pts.dtype}")
    if pts.ndim != 2 or pts.shape[1] < 1:
        raise ValueError(f"{op}: {name} must have shape [N, d] with d >= 1, got {pts.shape}")
    pts = np.ascontiguousarray(pts, dtype=np.float64)
    if not np.all(np.isfinite(pts)):
        bad = np.argwhere(~np.isfinite(pts))[0]
        raise ValueError(f"{op}: {name}[{bad[0]}, {bad[1]}] = {pts[tuple(bad)]} is not "
                         f"finite ({name} shape {pts.shape})")
    return pts


def query_cloud(op: str, query: Any, points: np.ndarray) -> np.ndarray | None:
    """The query cloud (``cloud``), of the points' dimension d; None when not given."""
    if query is None:
        return None
    q = cloud(op, "query", query)
    if q.shape[1] != points.shape[1]:
        raise ValueError(f"{op}: query has shape {q.shape} but points has shape "
                         f"{points.shape}: both clouds need the same dimension d")
    return q


def _batch_vector(op: str, name: str, value: Any, cloud: str, shape: tuple) -> np.ndarray:
    """The example index of every point of ``cloud`` (``shape`` [N, d]): a sorted
    (non-decreasing) int vector [N] of indices >= 0, PyTorch Geometric's ``batch``."""
    arr = np.asarray(value._data if isinstance(value, Tensor) else value)
    if arr.dtype.kind not in "iu" and not (arr.size == 0 and arr.dtype.kind == "f"):
        raise TypeError(f"{op}: {name} must be an integer array, got dtype {arr.dtype}")
    if arr.shape != (shape[0],):
        raise ValueError(f"{op}: {name} has shape {arr.shape} but {cloud} has shape {shape}: "
                         f"{name} needs one example index per point, shape ({shape[0]},)")
    arr = arr.astype(np.int64)
    if arr.size and arr[0] < 0:
        raise ValueError(f"{op}: {name}[0] = {arr[0]} is negative (example indices are >= 0)")
    bad = csr.first_decrease(arr)
    if bad >= 0:
        raise ValueError(f"{op}: {name} must be sorted (non-decreasing), but {name}[{bad}] = "
                         f"{arr[bad]} < {name}[{bad - 1}] = {arr[bad - 1]}")
    return arr


def batches(op: str, points: np.ndarray, query: np.ndarray | None, batch: Any,
             query_batch: Any) -> tuple[np.ndarray | None, np.ndarray | None]:
    """``(batch, query_batch)`` validated; for a graph on one cloud ``query_batch`` is
    ``batch``. With a query cloud both or neither must be given."""
    if query is None:
        if query_batch is not None:
            raise ValueError(f"{op}: query_batch was given without query")
        if batch is None:
            return None, None
        batch = _batch_vector(op, "batch", batch, "points", points.shape)
        return batch, batch
    if (batch is None) != (query_batch is None):
        given, missing = ("batch", "query_batch") if query_batch is None else \
            ("query_batch", "batch")
        raise ValueError(f"{op}: {given} was given without {missing}: with a query cloud, "
                         f"give the example index of the points (batch) and of the query "
                         f"points (query_batch), or neither")
    if batch is None:
        return None, None
    return (_batch_vector(op, "batch", batch, "points", points.shape),
            _batch_vector(op, "query_batch", query_batch, "query", query.shape))


def by_example(build, points: np.ndarray, query: np.ndarray | None,
                batch: np.ndarray | None, query_batch: np.ndarray | None
                ) -> tuple[np.ndarray, np.ndarray]:
    """CSR ``(row_ptr, col)`` from ``build(points, query) -> (row_ptr, col)`` run on each
    example's slice of the clouds (the batch vectors are sorted, so an example is a run
    of consecutive points), the columns shifted to global indices: no edge joins two
    examples. One call without a batch."""
    if batch is None:
        return build(points, query)
    rows = points.shape[0] if query is None else query.shape[0]
    ids = np.union1d(batch, query_batch)
    lo, hi = (np.searchsorted(batch, ids, side) for side in ("left", "right"))
    q_lo, q_hi = (np.searchsorted(query_batch, ids, side) for side in ("left", "right"))
    lengths = np.zeros(rows, dtype=np.int64)
    cols = [np.empty(0, dtype=np.int64)]
    for a, b, qa, qb in zip(lo, hi, q_lo, q_hi):
        if qb > qa:
            row_ptr, col = build(points[a:b], None if query is None else query[qa:qb])
            lengths[qa:qb] = np.diff(row_ptr)
            cols.append(col + a)
    row_ptr = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(lengths, out=row_ptr[1:])
    return row_ptr, np.concatenate(cols)


def loop_flag(op: str, loop: Any) -> bool:
    """``loop`` as a bool (TypeError for anything else: a cloud passed positionally)."""
    if not isinstance(loop, bool | np.bool_):
        raise TypeError(f"{op}: loop must be a bool, got {type(loop).__name__} (the query "
                        f"cloud is the keyword argument query=)")
    return bool(loop)


def positive_int(op: str, name: str, value: Any, allow_none: bool = False) -> int | None:
    """An integer >= 1 (or None when ``allow_none``), ValueError naming op and argument."""
    if value is None and allow_none:
        return None
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{op}: {name} must be {'None or ' if allow_none else ''}an integer "
                         f">= 1, got {value!r}")
    return int(value)
