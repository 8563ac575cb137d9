"""Sorting along a dim: sort, argsort, topk and unique.

* sort: the values of x along ``dim`` in ascending (or descending) order with the index
  each came from (``torch.sort``; ``return_types.sort``). The order is stable (ties keep
  their order in x, PyTorch's ``stable=True``, also given for ``stable=False``) and NaN
  counts as the largest value, as in PyTorch. Backward: g put back at the indices (each
  output position has its own index, so nothing accumulates).
* topk: the first k of the sort in descending (``largest``) or ascending order
  (``return_types.topk``), the same backward into zeros elsewhere.
* argsort: the indices of sort, without a gradient.
* unique: the distinct values in ascending order (``torch.unique``), with the inverse
  indices and the counts on request; no gradient.

The order comes from ``kernels/sort.py``: the values become unsigned keys in the same
order (NaN the largest, -0.0 equal to 0.0, descending as the keys' complement), each
row along the dim is radix-sorted (stable), and topk with a small k keeps the k smallest
keys by insertion instead of sorting the row. Values are x taken along the dim at the
indices.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import return_types
from ..function import Function, Sample, register
from ..kernels import sort as sort_kernels
from ..runtime.jit import for_work
from ..tensor import Tensor, lift
from ._args import is_int, one_dim
from .indexing import ScatterAdd
from .shape import reshape

#: Up to this k, topk selects by insertion into a sorted buffer (about one comparison per
#: element); for larger k, shifting the buffer costs more than sorting the whole row.
SELECT_K_MAX = 64


def _bits(rows: np.ndarray) -> tuple[np.ndarray, int, int, int]:
    """(bits, width, kind, infinity): ``rows`` (2-D) as the unsigned integers that
    ``kernels/sort.py`` turns into sort keys, their width in bytes, what they hold
    (FLOAT, SIGNED or UNSIGNED) and the bits of inf for floats. Half floats are read as
    float32, integers of 4 bytes or fewer (and bools) as 4-byte integers."""
    kind, size = rows.dtype.kind, rows.dtype.itemsize
    if kind == "f":
        rows = rows.astype(np.float64 if size > 4 else np.float32, copy=False)
        code = sort_kernels.FLOAT
        infinity = int(np.array(np.inf, rows.dtype).view(np.uint64 if size > 4
                                                         else np.uint32))
    else:
        signed = kind != "u"
        wide = np.int64 if signed else np.uint64
        rows = rows.astype((wide if size > 4 else np.int32 if signed else np.uint32),
                           copy=False)
        code, infinity = (sort_kernels.SIGNED if signed else sort_kernels.UNSIGNED), 0
    width = rows.dtype.itemsize
    bits = np.ascontiguousarray(rows).view(np.uint64 if width == 8 else np.uint32)
    return bits, width, code, infinity


def _order(x: np.ndarray, dim: int, descending: bool, k: int | None = None) -> np.ndarray:
    """The stable sorting permutation of ``x`` along ``dim`` (int64; its first ``k``
    entries unless k is None): NaN last ascending, first descending; ties in their order
    in x."""
    n = x.shape[dim]
    count = n if k is None else k
    moved = np.moveaxis(x, dim, -1)
    idx = np.empty(moved.shape[:-1] + (count,), np.int64)  # every entry written below
    if idx.size:
        bits, width, code, infinity = _bits(moved.reshape(-1, n))
        rows = idx.reshape(-1, count)
        key_args = (bits, width, code, infinity, descending)
        if count < n and count <= SELECT_K_MAX:
            for_work(sort_kernels.smallest_rows, bits.size)(*key_args, rows)
        else:
            keys = np.empty(bits.shape, np.uint64)
            for_work(sort_kernels.ordered_keys, bits.size)(*key_args, keys)
            order = rows if count == n else np.empty(keys.shape, np.int64)
            for_work(sort_kernels.argsort_rows, keys.size)(keys, width, order)
            if order is not rows:
                rows[:] = order[:, :count]
    return np.moveaxis(idx, -1, dim)


def _sort_samples(rng):
    for shape, dim, descending, k in [((6,), 0, False, None), ((3, 5), 1, True, None),
                                      ((4, 3), 0, False, None), ((2, 3, 4), 1, True, None),
                                      ((3, 5), 1, True, 2), ((4, 3, 2), 0, False, 3),
                                      ((5,), 0, True, 0)]:
        # distinct values, so no tie sits inside the finite-difference step
        size = int(np.prod(shape))
        x = rng.permutation(size).reshape(shape) * 0.1 + 0.01 * rng.random(shape)
        yield Sample(np.asarray(x), dim=dim, descending=descending, k=k,
                     label=f"{shape} dim={dim} descending={descending} k={k}")


@register("sort", samples=_sort_samples)
class Sort(Function):
    """(values, indices) of x (at least 1-d) sorted along ``dim`` (non-negative), the
    first ``k`` only unless k is None; indices int64 without a gradient."""

    @staticmethod
    def forward(ctx, x, dim, descending=False, k=None):
        idx = _order(x, dim, descending, k)
        ctx.indices = idx
        return np.take_along_axis(x, idx, axis=dim), idx

    @staticmethod
    def backward(ctx, g, g_indices):
        gx = np.zeros(ctx.input_arrays[0].shape, g.dtype)
        np.put_along_axis(gx, ctx.indices, g, axis=ctx.params["dim"])
        return gx

    @staticmethod
    def vjp(ctx, g, g_indices):
        x = ctx.input_arrays[0]
        return ScatterAdd.apply(np.zeros(x.shape, x.dtype), g, dim=ctx.params["dim"],
                                index=ctx.indices)


def _sorted(op: str, x: Tensor, dim: Any, descending: bool, k: int | None
            ) -> tuple[Tensor, Tensor]:
    """(values, indices) of ``Sort`` on x (a 0-d x as one element): the indices a tensor
    of their own, outside the graph."""
    d = one_dim(op, dim, x.shape)
    if x.ndim == 0:  # the element (for any k: PyTorch's topk)
        values, indices = Sort.apply(reshape(x, 1), dim=0, descending=bool(descending))
        values, idx = reshape(values, ()), indices._data.reshape(())
    else:
        values, indices = Sort.apply(x, dim=d, descending=bool(descending), k=k)
        idx = indices._data
    if values.requires_grad:  # the node keeps its own copy for the backward
        idx = idx.copy()
    return values, Tensor._wrap(idx, None, 0)


def _bool_arg(op: str, name: str, value: Any) -> bool:
    """A flag argument (Python or NumPy bool) as a bool; TypeError naming op and argument."""
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{op}: {name} must be a bool, got {value!r}")
    return bool(value)


def sort(input: Any, dim: int = -1, descending: bool = False, *, stable: bool = False
         ) -> return_types.sort:
    """x sorted along ``dim`` (``torch.sort``): the named tuple ``(values, indices)``,
    values[..., i, ...] = x at indices[..., i, ...] (int64). Stable for any ``stable``
    (ties keep their order); NaN is the largest value. Backward: g to the index each
    value came from."""
    x = lift(input)
    _bool_arg("sort", "stable", stable)
    values, indices = _sorted("sort", x, dim, _bool_arg("sort", "descending", descending),
                              None)
    return return_types.sort(values, indices)


def argsort(input: Any, dim: int = -1, descending: bool = False, *, stable: bool = False
            ) -> Tensor:
    """The indices that sort x along ``dim`` (``torch.argsort``): ``sort(...).indices``,
    int64, stable, no gradient."""
    x = lift(input)
    d = one_dim("argsort", dim, x.shape)
    descending = _bool_arg("argsort", "descending", descending)
    _bool_arg("argsort", "stable", stable)
    if x.ndim == 0:
        return Tensor._wrap(np.zeros((), np.int64), None, 0)
    return Tensor._wrap(_order(x._data, d, descending), None, 0)


def topk(input: Any, k: int, dim: int = -1, largest: bool = True, sorted: bool = True
         ) -> return_types.topk:
    """The k largest (``largest``) or smallest values of x along ``dim`` with their
    indices (``torch.topk``): ``(values, indices)``, in order (also for
    ``sorted=False``); ties go to the lower index, NaN is the largest value. Backward: g
    to the chosen indices, 0 elsewhere."""
    x = lift(input)
    if not is_int(k):
        raise TypeError(f"topk: k must be an int, got {k!r}")
    d = one_dim("topk", dim, x.shape)
    size = x.shape[d] if x.ndim else 1
    if not 0 <= k <= size:
        raise ValueError(f"topk: k={k} is out of range for dim {d} of size {size} (x of "
                         f"shape {x.shape}); expected 0 <= k <= {size}")
    largest = _bool_arg("topk", "largest", largest)
    _bool_arg("topk", "sorted", sorted)
    values, indices = _sorted("topk", x, d, largest, int(k))
    return return_types.topk(values, indices)


def unique(input: Any, sorted: bool = True, return_inverse: bool = False,
           return_counts: bool = False, dim: int | None = None) -> Any:
    """The distinct values of x in ascending order (``torch.unique``): flattened for
    ``dim=None``, else the distinct slices along ``dim``. With ``return_inverse``, also
    the index of each element (each slice) in the output (int64, x's shape; the size of
    ``dim``); with ``return_counts``, how often each value occurs. A tensor, or a tuple
    (output, inverse?, counts?) as PyTorch returns. NaNs are distinct (each its own).
    ``sorted=False`` also sorts. No gradient."""
    x = lift(input)
    _bool_arg("unique", "sorted", sorted)
    data = x._data
    if dim is None:
        values, inverse, counts = np.unique(data.reshape(-1), return_inverse=True,
                                            return_counts=True, equal_nan=False)
        inverse = inverse.reshape(data.shape)
    else:
        d = one_dim("unique", dim, data.shape)
        if data.ndim == 0:
            raise ValueError("unique: dim needs x of at least one dim, got a 0-d tensor")
        values, inverse, counts = np.unique(data, return_inverse=True, return_counts=True,
                                            axis=d)
        inverse = inverse.reshape(-1)
    result = [Tensor._wrap(values, None, 0)]
    if return_inverse:
        result.append(Tensor._wrap(inverse.astype(np.int64), None, 0))
    if return_counts:
        result.append(Tensor._wrap(counts.astype(np.int64), None, 0))
    return result[0] if len(result) == 1 else tuple(result)


__all__ = ["sort", "argsort", "topk", "unique"]
