"""Indexing along one dim: gather, scatter_add, index_select, embedding (torch semantics).

* ``gather(x, dim, index)``: ``y[i][j][k] = x[index[i][j][k]][j][k]`` for dim 0 (and
  likewise along any dim). ``index`` has x's number of dims, may be longer than x along
  ``dim`` and no longer in the others; y has its shape.
* ``scatter_add(x, dim, index, src)``: a copy of x with ``src[i][j][k]`` added at
  ``[index[i][j][k]][j][k]`` for dim 0 (out of place, ``torch.scatter_add``); repeated
  positions sum.
* ``index_select(x, dim, index)``: the entries ``index`` (1-D) of x along ``dim``.
* ``embedding(index, weight, padding_idx=None, max_norm=None, norm_type=2.0,
  scale_grad_by_freq=False, sparse=False)``: the rows ``weight[index]``
  (``torch.nn.functional.embedding``); the row ``padding_idx`` gets no gradient.

Indices are int64 or int32 in [0, size): as in PyTorch, negative indices are not
accepted here (an IndexError naming the op, the index and the size, raised before any
kernel runs). The kernels are ``kernels/indexing.py: gather_along`` and
``scatter_add_along``, each the other's adjoint. So gather's backward is a scatter-add
into zeros and scatter_add's backward to src is a gather. Their vjps are the ops
themselves, so both are twice differentiable. index_select and embedding are gathers
whose index is broadcast along the other dims (a 0-stride view, never materialised).
Scatter-adds run in index order, so they are deterministic. Derivations:
docs/derivations.md#selection-and-indexing-along-a-dim.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..autograd import grad_mode
from ..function import Function, Sample, register
from ..kernels import indexing as kernels
from ..runtime.jit import for_work
from ..tensor import Tensor, lift
from ._args import is_int, one_dim, real
from .shape import getitem, reshape

_INDEX_DTYPES = (np.dtype(np.int64), np.dtype(np.int32))


# -- arrays as [A, N, B] ----------------------------------------------------------------------
def _as_3d(shape: tuple, dim: int) -> tuple[int, int, int]:
    """(A, N, B): the sizes of the dims before ``dim``, of ``dim``, and after it."""
    return math.prod(shape[:dim]), shape[dim], math.prod(shape[dim + 1:])


def _region(shape: tuple, dim: int, index_shape: tuple) -> tuple | None:
    """The part of an array of ``shape`` that an index of ``index_shape`` along ``dim``
    reaches: the leading ``index_shape[d]`` entries of every other dim d (all of
    ``dim``). None when that is the whole array."""
    if all(i == n for d, (i, n) in enumerate(zip(index_shape, shape)) if d != dim):
        return None
    return tuple(slice(None) if d == dim else slice(0, i) for d, i in enumerate(index_shape))


def _gather(x: np.ndarray, dim: int, index: np.ndarray, fill: float = 0) -> np.ndarray:
    """y = x gathered along ``dim`` at ``index`` (entries in [-1, x.shape[dim]); -1 gives
    ``fill``), of index's shape."""
    region = _region(x.shape, dim, index.shape)
    source = x if region is None else x[region]
    a, n, b = _as_3d(source.shape, dim)
    k = index.shape[dim]
    y = for_work(kernels.gather_along, index.size)(
        source.reshape(a, n, b), index.reshape(a, k, b), x.dtype.type(fill))
    return y.reshape(index.shape)


def _scatter_into(out: np.ndarray, dim: int, index: np.ndarray, src: np.ndarray
                  ) -> np.ndarray:
    """``out`` (C-contiguous) with ``src`` (index's shape) added in place at ``index``
    along ``dim`` (entries of -1 add nothing); returns ``out``."""
    region = _region(out.shape, dim, index.shape)
    target = out if region is None else np.ascontiguousarray(out[region])
    a, n, b = _as_3d(target.shape, dim)
    k = index.shape[dim]
    for_work(kernels.scatter_add_along, index.size)(
        target.reshape(a, n, b), index.reshape(a, k, b), src.reshape(a, k, b))
    if region is not None:
        out[region] = target
    return out


# -- argument checks --------------------------------------------------------------------------
def _index_array(op: str, index: Any) -> np.ndarray:
    """``index`` (a Tensor, an array or a list of ints) as a private int64 array: the
    backward must see the indices the forward checked, even if the caller changes its
    array in between."""
    arr = index._data if isinstance(index, Tensor) else np.asarray(index)
    if arr.dtype not in _INDEX_DTYPES:
        raise TypeError(f"{op}: index must hold int64 or int32, got {arr.dtype} "
                        f"(shape {arr.shape})")
    return arr.astype(np.int64)


def _check_range(op: str, index: np.ndarray, size: int, dim: int, shape: tuple,
                 name: str = "x") -> None:
    """IndexError unless every index is in [0, size) (``size`` is dim ``dim`` of ``name``,
    of ``shape``), naming the first bad one."""
    bad = index[(index < 0) | (index >= size)]
    if bad.size:
        raise IndexError(f"{op}: index {bad[0]} is out of range for dim {dim} of size {size} "
                         f"({name} has shape {shape}); indices must be in [0, {size}), negative "
                         "ones are not accepted")


def _same_rank(op: str, x: Tensor, index: np.ndarray) -> tuple[Tensor, np.ndarray]:
    """x and index with equal numbers of dims (a 0-d one counting as 1-d, as in PyTorch),
    both at least 1-d."""
    if max(x.ndim, 1) != max(index.ndim, 1):
        raise ValueError(f"{op}: index of shape {index.shape} must have as many dims as x "
                         f"of shape {x.shape}")
    return (x if x.ndim else reshape(x, 1)), index.reshape(index.shape or (1,))


# -- gather -----------------------------------------------------------------------------------
def _gather_samples(rng):
    x = rng.standard_normal((3, 4))
    yield Sample(x, dim=1, index=rng.integers(0, 4, (3, 6)), label="repeats, longer dim")
    yield Sample(rng.standard_normal((3, 4, 2)), dim=0, index=rng.integers(0, 3, (2, 4, 2)),
                 label="3-D, dim 0")
    yield Sample(x, dim=0, index=np.array([[2, 0, 2], [1, 1, 0]]),
                 label="index smaller in the other dim")
    yield Sample(x, dim=1, index=np.broadcast_to(np.array([[3, -1, 0, 3, -1]]), (3, 5)),
                 fill=2.5, label="broadcast index, -1 filled (index_select, pad)")


@register("gather", samples=_gather_samples)
class Gather(Function):
    """y = x gathered along ``dim`` at ``index``: int64, x's number of dims, entries in
    [-1, x.shape[dim]); -1 gives ``fill`` (the public ``gather`` accepts no -1; ``pad``
    uses it). ``dim`` is non-negative."""

    @staticmethod
    def forward(ctx, x, dim, index, fill=0):
        return _gather(x, dim, index, fill)

    @staticmethod
    def backward(ctx, g):
        x = ctx.input_arrays[0]
        return _scatter_into(np.zeros(x.shape, g.dtype), ctx.params["dim"],
                             ctx.params["index"], g)

    @staticmethod
    def vjp(ctx, g):
        x = ctx.input_arrays[0]
        return ScatterAdd.apply(np.zeros(x.shape, g.dtype), g, dim=ctx.params["dim"],
                                index=ctx.params["index"])


def gather(x: Any, dim: int, index: Any) -> Tensor:
    """Values of ``x`` along ``dim`` at ``index`` (``torch.gather``): for dim 0,
    ``y[i][j][k] = x[index[i][j][k]][j][k]``. ``index`` (int64 or int32) has x's number
    of dims and is no larger than x except along ``dim``; y has index's shape (an empty
    index may have any number of dims, as in PyTorch). Backward: g scatter-added back to
    the positions read (repeats sum)."""
    x = lift(x)
    index = _index_array("gather", index)
    out_shape = index.shape
    if index.size == 0 and max(x.ndim, 1) != max(index.ndim, 1):
        # PyTorch checks no ranks for an empty index: an empty y of index's shape
        one_dim("gather", dim, x.shape, ndim=max(x.ndim, 1))
        return reshape(getitem(reshape(x, -1), slice(0, 0)), out_shape)
    x, index = _same_rank("gather", x, index)
    d = one_dim("gather", dim, x.shape)
    for e, (i, n) in enumerate(zip(index.shape, x.shape)):
        if e != d and i > n:
            raise ValueError(f"gather: index of shape {index.shape} is larger than x of shape "
                             f"{x.shape} in dim {e} (only dim {d} may be larger)")
    _check_range("gather", index, x.shape[d], d, x.shape)
    y = Gather.apply(x, dim=d, index=index)
    return y if y.shape == out_shape else reshape(y, out_shape)


# -- scatter_add ------------------------------------------------------------------------------
def _scatter_add_samples(rng):
    yield Sample(rng.standard_normal((3, 5)), rng.standard_normal((2, 5)), dim=0,
                 index=np.array([[0, 1, 2, 0, 0], [2, 0, 0, 1, 2]]), label="torch's example")
    yield Sample(rng.standard_normal((4, 3)), rng.standard_normal((2, 4)), dim=1,
                 index=np.array([[1, 1, 0, 1], [2, 0, 2, 2]]), label="index smaller than x")
    yield Sample(rng.standard_normal((2, 3, 2)), rng.standard_normal((2, 2, 2)), dim=1,
                 index=np.array([[[0, -1], [0, 2]], [[-1, 1], [1, 1]]]),
                 label="-1 adds nothing")


@register("scatter_add", samples=_scatter_add_samples)
class ScatterAdd(Function):
    """out = x with ``src`` (index's shape, x's dtype) added at ``index`` along ``dim``;
    index as in ``Gather`` (-1 adds nothing)."""

    @staticmethod
    def forward(ctx, x, src, dim, index):
        return _scatter_into(np.array(x, order="C"), dim, index, src)

    @staticmethod
    def backward(ctx, g):
        need_src = ctx.needs_input_grad[1]
        return g, _gather(g, ctx.params["dim"], ctx.params["index"]) if need_src else None

    @staticmethod
    def vjp(ctx, g):
        return g, Gather.apply(g, dim=ctx.params["dim"], index=ctx.params["index"])


def scatter_add(x: Any, dim: int, index: Any, src: Any) -> Tensor:
    """A copy of ``x`` with ``src`` added at ``index`` along ``dim``
    (``torch.scatter_add``, out of place): for dim 0,
    ``out[index[i][j][k]][j][k] += src[i][j][k]``, repeated positions summed in index
    order. ``index`` (int64 or int32) has x's number of dims, is no larger than ``src``
    in any dim and no larger than x except along ``dim``; entries of src beyond index's
    shape are not used. ``src`` has x's dtype. Backward: g to x, g gathered at
    ``index`` to src (0 for its unused entries)."""
    x, src = lift(x), lift(src)
    if src.dtype != x.dtype:
        raise TypeError(f"scatter_add: src ({src.dtype}, shape {src.shape}) must have the "
                        f"dtype of x ({x.dtype}, shape {x.shape})")
    index = _index_array("scatter_add", index)
    x_shape = x.shape
    x, index = _same_rank("scatter_add", x, index)
    src = src if src.ndim else reshape(src, 1)
    d = one_dim("scatter_add", dim, x.shape)
    if src.ndim != index.ndim or any(
            i > s or (e != d and i > n)
            for e, (i, s, n) in enumerate(zip(index.shape, src.shape, x.shape))):
        raise ValueError(f"scatter_add: index of shape {index.shape} must be no larger than "
                         f"src (shape {src.shape}) in every dim and than x (shape {x.shape}) "
                         f"in every dim but {d}")
    _check_range("scatter_add", index, x.shape[d], d, x.shape)
    if src.shape != index.shape:
        src = getitem(src, tuple(slice(0, i) for i in index.shape))
    out = ScatterAdd.apply(x, src, dim=d, index=index)
    return out if out.shape == x_shape else reshape(out, x_shape)


# -- index_select -----------------------------------------------------------------------------
def index_along(positions: np.ndarray, dim: int, shape: tuple) -> np.ndarray:
    """A gather index that reads ``positions`` [K] along ``dim`` of an array of ``shape``
    at every position of the other dims: [.., K, ..], a 0-stride view of ``positions``."""
    d, nd = dim, len(shape)
    view = positions.reshape((1,) * d + (-1,) + (1,) * (nd - d - 1))
    return np.broadcast_to(view, shape[:d] + (positions.size,) + shape[d + 1:])


def index_select(x: Any, dim: int, index: Any) -> Tensor:
    """The entries ``index`` (0-d or 1-d, int64 or int32, repeats allowed) of ``x`` along
    ``dim`` (``torch.index_select``): y has x's shape with ``len(index)`` along ``dim``.
    Backward: g added back into the rows read (repeats sum)."""
    x = lift(x)
    index = _index_array("index_select", index)
    if index.ndim > 1:
        raise ValueError(f"index_select: index must be 0-d or 1-d, got shape {index.shape} "
                         f"(x has shape {x.shape})")
    index = index.reshape(-1)
    x1 = x if x.ndim else reshape(x, 1)
    d = one_dim("index_select", dim, x.shape, ndim=x1.ndim)
    _check_range("index_select", index, x1.shape[d], d, x.shape)
    if x.ndim == 0 and index.size != 1:
        raise IndexError(f"index_select: a 0-d x takes exactly one index, got {index.size}")
    y = Gather.apply(x1, dim=d, index=index_along(index, d, x1.shape))
    return y if x.ndim else reshape(y, ())


# -- embedding --------------------------------------------------------------------------------
def _embedding_samples(rng):
    weight = rng.standard_normal((5, 3))
    rows = np.array([0, 2, 2, 4, 1, 2])
    yield Sample(weight, rows=rows, padding_idx=None, label="repeated rows")
    # a padding row that is read gets 0 by design, not its derivative: the sample's
    # padding row is not read (tests/ops/test_indexing_ops.py checks the masking)
    yield Sample(weight, rows=rows, padding_idx=3, label="padding row 3")


@register("embedding", samples=_embedding_samples)
class EmbeddingLookup(Function):
    """y[m, :] = weight[rows[m], :] (rows: int64 in [0, num_embeddings)); a row equal to
    ``padding_idx`` (None or in [0, num_embeddings)) passes no gradient. ``scale`` (None,
    or one factor per row read, [M]) multiplies g[m] before it is summed into its row
    (``scale_grad_by_freq``: 1 / the number of times the row is read)."""

    @staticmethod
    def forward(ctx, weight, rows, padding_idx, scale=None):
        return _gather(weight, 0, index_along(rows, 0, weight.shape))

    @staticmethod
    def backward(ctx, g):
        weight, scale = ctx.input_arrays[0], ctx.params.get("scale")
        if scale is not None:
            g = g * scale.astype(g.dtype)[:, None]
        return _scatter_into(np.zeros(weight.shape, g.dtype), 0, _gradient_rows(ctx),
                             np.ascontiguousarray(g))

    @staticmethod
    def vjp(ctx, g):
        weight, scale = ctx.input_arrays[0], ctx.params.get("scale")
        if scale is not None:  # scaled values, unscaled derivative: PyTorch's double
            # backward (embedding_dense_double_backward) gathers without the scale
            g = g + (g * Tensor._wrap(scale.astype(g.dtype)[:, None] - 1, None, 0)).detach()
        return ScatterAdd.apply(np.zeros(weight.shape, g.dtype), g, dim=0,
                                index=_gradient_rows(ctx))


def _inverse_frequency(rows: np.ndarray) -> np.ndarray:
    """1 / (how many times each entry of ``rows`` occurs in ``rows``), per entry."""
    _, inverse, counts = np.unique(rows, return_inverse=True, return_counts=True)
    return 1.0 / counts[inverse.reshape(-1)]


def _renorm_rows(weight: Tensor, rows: np.ndarray, max_norm: float, norm_type: float
                 ) -> None:
    """PyTorch's ``embedding_renorm_``: each row of ``weight`` read by ``rows`` whose
    ``norm_type``-norm exceeds ``max_norm`` is scaled in place (outside the graph) by
    ``max_norm / (norm + 1e-7)``."""
    read = np.unique(rows)
    if not read.size:
        return
    data = weight._data[read]
    norms = np.linalg.norm(data.astype(np.float64), ord=norm_type, axis=1)
    over = norms > max_norm
    if not over.any():
        return
    with grad_mode.no_grad():
        target = weight._writable("embedding")
    scale = (max_norm / (norms[over] + 1e-7)).astype(data.dtype)
    target[read[over]] = data[over] * scale[:, None]


def _gradient_rows(ctx) -> np.ndarray:
    """The scatter index of the lookup's backward: the rows read, with -1 (add nothing)
    where a row is the padding row."""
    rows, padding_idx = ctx.params["rows"], ctx.params["padding_idx"]
    if padding_idx is not None:
        rows = np.where(rows == padding_idx, -1, rows)
    return index_along(rows, 0, ctx.input_arrays[0].shape)


def embedding(index: Any, weight: Any, padding_idx: int | None = None,
              max_norm: float | None = None, norm_type: float = 2.0,
              scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    """The rows of ``weight`` [num_embeddings, embedding_dim] at ``index`` (int64 or
    int32, any shape): y has shape ``index.shape + (embedding_dim,)``
    (``torch.nn.functional.embedding``). Backward: g summed into the rows read, except
    the row ``padding_idx`` (negative counts from the end), which gets no gradient.

    As in PyTorch: with ``max_norm``, each row read whose ``norm_type``-norm exceeds
    ``max_norm`` is first renormalised in place (``weight`` is modified, outside the
    graph: row * max_norm / (norm + 1e-7)); with ``scale_grad_by_freq``, each row's
    gradient is divided by the number of times the row occurs in ``index``.
    ``sparse=True`` is accepted, and the gradient is dense (nbgrad has no sparse
    tensors; the values are the same)."""
    weight = lift(weight)
    if weight.ndim != 2:
        raise ValueError(f"embedding: weight must be 2-D [num_embeddings, embedding_dim], "
                         f"got shape {weight.shape}")
    index = _index_array("embedding", index)
    n = weight.shape[0]
    _check_range("embedding", index, n, 0, weight.shape, "weight")
    padding_idx = normalize_padding_idx("embedding", padding_idx, n)
    rows = index.reshape(-1)
    if max_norm is not None:
        _renorm_rows(weight, rows, real("embedding", "max_norm", max_norm),
                     real("embedding", "norm_type", norm_type))
    scale = _inverse_frequency(rows) if scale_grad_by_freq else None
    y = EmbeddingLookup.apply(weight, rows=rows, padding_idx=padding_idx, scale=scale)
    return reshape(y, index.shape + (weight.shape[1],))


def normalize_padding_idx(op: str, padding_idx: Any, num_embeddings: int) -> int | None:
    """``padding_idx`` (None, or an int in [-num_embeddings, num_embeddings)) as None or
    a row in [0, num_embeddings); ValueError naming ``op`` otherwise."""
    if padding_idx is None:
        return None
    if not is_int(padding_idx) or not -num_embeddings <= padding_idx < num_embeddings:
        raise ValueError(f"{op}: padding_idx={padding_idx!r} must be an int in "
                         f"[{-num_embeddings}, {num_embeddings}) (num_embeddings is "
                         f"{num_embeddings})")
    return int(padding_idx) % num_embeddings


__all__ = ["embedding", "gather", "index_select", "scatter_add"]
