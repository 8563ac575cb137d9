"""Shape ops and indexing: reshape, transpose, permute, broadcast_to, concat, stack, split,
chunk, squeeze, unsqueeze, x[...].

These ops move elements without arithmetic, so their forwards are NumPy views where
NumPy gives one (reshape of a contiguous array, transpose, permute, broadcast_to, basic
slicing, split) and copies otherwise (concat, stack, integer-array indexing). Nothing
writes into those views. The backwards are the adjoint moves: reshape back, the inverse
permutation, slices of the upstream gradient, the pieces' gradients joined (split), and
for indexing a scatter-add (``kernels/shape.py``), which sums the contributions of
repeated indices. squeeze and unsqueeze are reshapes; chunk is a split.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..function import Function, Sample, register
from ..kernels import shape as shape_kernels
from ..kernels.broadcast_sum import sum_to_shape
from ..tensor import Tensor, lift
from ._args import dim_arg, is_int, one_dim, promoted_dtype


# -- argument helpers ----------------------------------------------------------------------
def _sizes(op: str, args: tuple, name: str) -> tuple:
    """``f(x, 2, 3)`` and ``f(x, (2, 3))`` both give ``(2, 3)``; every entry an int."""
    if len(args) == 1 and isinstance(args[0], Sequence | np.ndarray):
        args = tuple(args[0])
    if not all(is_int(s) for s in args):
        raise TypeError(f"{op}: {name} must be ints, got {args!r}")
    return tuple(int(s) for s in args)


# -- reshape ----------------------------------------------------------------------------
def _reshape_samples(rng):
    yield Sample(rng.standard_normal((3, 4)), shape=(2, 6), label="2-D to 2-D")
    yield Sample(rng.standard_normal((2, 3, 4)), shape=(4, 1, 6), label="3-D, size-1 axis")
    yield Sample(rng.standard_normal((1,)), shape=(), label="(1,) to 0-d")


@register("reshape", samples=_reshape_samples)
class Reshape(Function):
    @staticmethod
    def forward(ctx, x, shape):
        ctx.input_shape = x.shape
        return x.reshape(shape)

    @staticmethod
    def backward(ctx, g):
        return g.reshape(ctx.input_shape)

    @staticmethod
    def vjp(ctx, g):
        return g.reshape(ctx.input_shape)


def reshape(x: Any, *shape: int | Sequence[int]) -> Tensor:
    """The elements of ``x`` in row-major order, arranged as ``shape``.

    ``reshape(x, 2, 3)`` or ``reshape(x, (2, 3))``; one entry may be -1 and is then
    inferred from the size. A view of ``x`` when its layout allows (as NumPy), else a
    copy. Backward: the gradient reshaped to ``x.shape``.
    """
    x = lift(x)
    shape = _sizes("reshape", shape, "shape")
    if any(s < -1 for s in shape) or shape.count(-1) > 1:
        raise ValueError(f"reshape: invalid shape {shape} for x of shape {x.shape}: sizes "
                         "must be non-negative, with at most one -1 to infer")
    known = math.prod(s for s in shape if s != -1)
    if -1 in shape:
        if known == 0 or x.numel() % known:
            raise ValueError(f"reshape: cannot reshape x of shape {x.shape} (size {x.numel()}) "
                             f"into {shape}")
        shape = tuple(x.numel() // known if s == -1 else s for s in shape)
    elif known != x.numel():
        raise ValueError(f"reshape: cannot reshape x of shape {x.shape} (size {x.numel()}) "
                         f"into {shape} (size {known})")
    return Reshape.apply(x, shape=shape)


# -- permute / transpose -----------------------------------------------------------------
def _permute_samples(rng):
    yield Sample(rng.standard_normal((3, 4)), dims=(1, 0), label="2-D transpose")
    yield Sample(rng.standard_normal((2, 3, 4)), dims=(2, 0, 1), label="3-D cycle")
    yield Sample(rng.standard_normal((2, 1, 3, 2)), dims=(3, 1, 0, 2), label="4-D")


@register("permute", samples=_permute_samples)
class Permute(Function):
    @staticmethod
    def forward(ctx, x, dims):
        ctx.dims = dims
        return x.transpose(dims)

    @staticmethod
    def backward(ctx, g):
        return g.transpose(_inverse(ctx.dims))

    @staticmethod
    def vjp(ctx, g):
        return g.permute(*_inverse(ctx.dims))


@functools.lru_cache(maxsize=64)
def _inverse(dims: tuple) -> tuple:
    """The permutation that undoes ``dims`` (cached: computing it was a large part of a
    small transpose's backward)."""
    return tuple(sorted(range(len(dims)), key=dims.__getitem__))


def permute(x: Any, *dims: int | Sequence[int]) -> Tensor:
    """Axes reordered: ``y.shape[i] == x.shape[dims[i]]`` (a view, as ``torch.permute``).

    ``permute(x, 2, 0, 1)`` or ``permute(x, (2, 0, 1))``; negative dims count from the
    end. Backward: the gradient permuted by the inverse permutation.
    """
    x = lift(x)
    dims = _sizes("permute", dims, "dims")
    if len(dims) != x.ndim:
        raise ValueError(f"permute: x of shape {x.shape} has {x.ndim} dims but dims={dims} "
                         f"lists {len(dims)}")
    dims = tuple(one_dim("permute", d, x.shape) for d in dims)
    if len(set(dims)) != len(dims):
        raise ValueError(f"permute: dims={dims} repeats a dim (x has shape {x.shape})")
    return Permute.apply(x, dims=dims)


def transpose(x: Any, dim0: int = -2, dim1: int = -1) -> Tensor:
    """``x`` with dims ``dim0`` and ``dim1`` swapped (a view, as ``torch.transpose``);
    negative dims count from the end. The defaults swap the last two dims."""
    x = lift(x)
    d0 = one_dim("transpose", dim0, x.shape, "dim0")
    d1 = one_dim("transpose", dim1, x.shape, "dim1")
    if x.ndim == 0:
        return x
    dims = list(range(x.ndim))
    dims[d0], dims[d1] = dims[d1], dims[d0]
    return Permute.apply(x, dims=tuple(dims))


# -- broadcast_to ------------------------------------------------------------------------
def _broadcast_samples(rng):
    yield Sample(rng.standard_normal((1, 3)), shape=(4, 3), label="rows")
    yield Sample(rng.standard_normal((3, 1)), shape=(2, 3, 4), label="new leading dim")
    yield Sample(rng.standard_normal(()), shape=(2, 2), label="0-d")
    yield Sample(rng.standard_normal((2, 3)), shape=(2, 3), label="same shape")


@register("broadcast_to", samples=_broadcast_samples)
class BroadcastTo(Function):
    @staticmethod
    def forward(ctx, x, shape):
        ctx.input_shape = x.shape
        return np.broadcast_to(x, shape)

    @staticmethod
    def backward(ctx, g):
        return sum_to_shape(g, ctx.input_shape)

    @staticmethod
    def vjp(ctx, g):
        return g.sum_to_size(ctx.input_shape)


def broadcast_to(x: Any, shape: int | Sequence[int]) -> Tensor:
    """``x`` repeated along new leading dims and along its size-1 dims to ``shape``
    (NumPy broadcasting; a read-only view, as ``torch.broadcast_to``). A -1 in ``shape``
    keeps that dim of ``x``. Backward: the gradient summed over the broadcast dims."""
    x = lift(x)
    shape = _sizes("broadcast_to", (shape,) if is_int(shape) else tuple(shape), "shape")
    lead = len(shape) - x.ndim
    bad = lead < 0 or any(s == -1 and i < lead for i, s in enumerate(shape))
    if not bad:
        shape = tuple(x.shape[i - lead] if s == -1 else s for i, s in enumerate(shape))
        bad = any(s < 0 for s in shape) or any(
            n not in (1, s) for n, s in zip(x.shape, shape[lead:]))
    if bad:
        raise ValueError(f"broadcast_to: cannot broadcast x of shape {x.shape} to {shape}")
    return BroadcastTo.apply(x, shape=shape)


# -- concat / stack ------------------------------------------------------------------------
def _concat_samples(rng):
    yield Sample(rng.standard_normal((2, 3)), rng.standard_normal((4, 3)), axis=0,
                 label="rows")
    yield Sample(rng.standard_normal((2, 1, 3)), rng.standard_normal((2, 2, 3)),
                 rng.standard_normal((2, 3, 3)), axis=-2, label="three, middle axis")
    yield Sample(rng.standard_normal(3), axis=0, label="one tensor")


@register("concat", samples=_concat_samples)
class Concat(Function):
    @staticmethod
    def forward(ctx, *xs, axis):
        ctx.dim = axis
        ctx.input_shapes = [x.shape for x in xs]
        ctx.input_dtypes = [x.dtype for x in xs]
        return np.concatenate(xs, axis=axis)

    @staticmethod
    def backward(ctx, g):
        return tuple(g[piece].astype(dtype, copy=False) if piece is not None else None
                     for piece, dtype in zip(_pieces(ctx, g.ndim), ctx.input_dtypes))

    @staticmethod
    def vjp(ctx, g):
        return tuple(GetItem.apply(g, index=piece) if piece is not None else None
                     for piece in _pieces(ctx, g.ndim))


def _pieces(ctx, ndim: int) -> list[tuple | None]:
    """The index of each input's slice of the concatenated gradient (None where the
    input needs no gradient)."""
    lead = (slice(None),) * (ctx.dim % ndim)
    pieces, start = [], 0
    for need, shape in zip(ctx.needs_input_grad, ctx.input_shapes):
        n = shape[ctx.dim]
        pieces.append(lead + (slice(start, start + n),) if need else None)
        start += n
    return pieces


def _sequence(op: str, tensors: Any) -> list[Tensor]:
    if isinstance(tensors, Tensor | np.ndarray) or not isinstance(tensors, Sequence):
        raise TypeError(f"{op}: expected a list or tuple of tensors, got "
                        f"{type(tensors).__name__}")
    if not tensors:
        raise ValueError(f"{op}: expected a non-empty list of tensors")
    return [lift(t) for t in tensors]


def _promoted_inputs(ts: list[Tensor]) -> list[Tensor]:
    """The tensors in their common dtype (``promoted_dtype``); one that requires grad
    keeps its own, and the op's backward casts its gradient back."""
    dtype = promoted_dtype(*(t.dtype for t in ts))
    return [t if t.dtype == dtype or t.requires_grad else lift(t._data.astype(dtype))
            for t in ts]


def concat(tensors: Sequence[Any], dim: int | None = None, *, axis: int | None = None
           ) -> Tensor:
    """The tensors joined along an existing dim (``torch.cat``, also ``nb.cat``; ``dim``
    or NumPy's ``axis``, default 0): every other dim must agree. Mixed dtypes promote as
    in PyTorch (float64 over float32 over integers). PyTorch's legacy rule: a 1-D empty
    tensor (shape ``(0,)``) among tensors of other ranks is skipped whatever ``dim`` (it
    still takes part in the dtype promotion, and gets no gradient). Backward: each input gets its
    slice of the gradient."""
    given = dim_arg("concat", dim, axis, 0)
    ts = _sequence("concat", tensors)
    target = None
    if any(t.shape == (0,) for t in ts) and (all(t.shape == (0,) for t in ts)
                                              or any(t.ndim != 1 for t in ts)):
        target = promoted_dtype(*(t.dtype for t in ts))
        kept = [t for t in ts if t.shape != (0,)]
        if not kept:
            return Concat.apply(*_promoted_inputs(ts), axis=0)
        ts = kept
    first = ts[0]
    if first.ndim == 0:
        raise ValueError("concat: zero-dimensional tensors cannot be concatenated "
                         "(use stack)")
    ax = one_dim("concat", given, first.shape,
                 "dim" if axis is None else "axis")
    for i, t in enumerate(ts[1:], 1):
        if t.ndim != first.ndim or any(
                a != b for d, (a, b) in enumerate(zip(t.shape, first.shape)) if d != ax):
            raise ValueError(f"concat: tensor {i} has shape {t.shape} but tensor 0 has shape "
                             f"{first.shape}; all dims but axis {ax} must match")
    out = Concat.apply(*_promoted_inputs(ts), axis=ax)
    return out if target is None or out.dtype == target else out.to(target)


def _stack_samples(rng):
    yield Sample(rng.standard_normal((2, 3)), rng.standard_normal((2, 3)), axis=0,
                 label="two, new first axis")
    yield Sample(rng.standard_normal((2, 3)), rng.standard_normal((2, 3)),
                 rng.standard_normal((2, 3)), axis=-1, label="three, new last axis")
    yield Sample(rng.standard_normal(()), rng.standard_normal(()), axis=0, label="0-d")


@register("stack", samples=_stack_samples)
class Stack(Function):
    @staticmethod
    def forward(ctx, *xs, axis):
        ctx.dim = axis
        ctx.input_dtypes = [x.dtype for x in xs]
        return np.stack(xs, axis=axis)

    @staticmethod
    def backward(ctx, g):
        lead = (slice(None),) * (ctx.dim % g.ndim)
        return tuple(g[lead + (i,)].astype(dtype, copy=False) if need else None
                     for i, (need, dtype) in enumerate(zip(ctx.needs_input_grad,
                                                           ctx.input_dtypes)))

    @staticmethod
    def vjp(ctx, g):
        lead = (slice(None),) * (ctx.dim % g.ndim)
        return tuple(GetItem.apply(g, index=lead + (i,)) if need else None
                     for i, need in enumerate(ctx.needs_input_grad))


def stack(tensors: Sequence[Any], dim: int | None = None, *, axis: int | None = None
          ) -> Tensor:
    """The tensors, all of one shape, joined along a new dim (``torch.stack``; ``dim`` or
    NumPy's ``axis``, default 0), from -(ndim + 1) to ndim. Mixed dtypes promote as in
    ``concat``. Backward: each input gets its slice of the gradient."""
    given = dim_arg("stack", dim, axis, 0)
    ts = _sequence("stack", tensors)
    first = ts[0]
    for i, t in enumerate(ts[1:], 1):
        if t.shape != first.shape:
            raise ValueError(f"stack: tensor {i} has shape {t.shape} but tensor 0 has shape "
                             f"{first.shape}; stack needs equal shapes")
    ax = one_dim("stack", given, first.shape + (1,),
                 "dim" if axis is None else "axis")
    ts = _promoted_inputs(ts)
    return Stack.apply(*ts, axis=ax)


# -- indexing --------------------------------------------------------------------------------
def normalize_index(index: Any, shape: tuple, op: str = "getitem") -> tuple:
    """The index as a tuple NumPy understands: Tensors and lists become integer (int64)
    or boolean arrays; ints, slices, None and Ellipsis pass through."""
    items = index if isinstance(index, tuple) else (index,)
    out = []
    for item in items:
        if isinstance(item, Tensor):
            item = item._data
        if isinstance(item, list | bool | np.bool_):
            item = np.asarray(item)
            if item.size == 0:
                item = item.astype(np.int64)
        if isinstance(item, np.ndarray):
            if item.dtype.kind not in "iub":
                raise TypeError(f"{op}: index arrays must hold integers or booleans, got "
                                f"{item.dtype} (x has shape {shape})")
            # A private copy: the backward must see the indices the forward validated,
            # even if the caller changes its array in between.
            item = item.astype(np.bool_ if item.dtype.kind == "b" else np.int64)
        elif is_int(item):
            item = int(item)
        elif not (item is None or item is Ellipsis or isinstance(item, slice)):
            raise TypeError(f"{op}: cannot index with {type(item).__name__} {item!r}; use "
                            f"ints, slices, None, ..., or integer/boolean arrays "
                            f"(x has shape {shape})")
        out.append(item)
    return tuple(out)


def _whole_trailing_dims(shape: tuple, index: tuple) -> tuple[tuple, int]:
    """Split off the trailing dims that ``index`` takes whole: returns the index without
    them (Ellipsis and implicit trailing dims written out as full slices) and their
    number t. ``x[index]`` then gathers whole rows of ``x`` viewed as [..., prod(t dims)],
    and those dims come last in the result, in order."""
    used = sum(0 if i is None or i is Ellipsis else
               i.ndim if isinstance(i, np.ndarray) and i.dtype.kind == "b" else 1
               for i in index)
    fill = (slice(None),) * (len(shape) - used)
    where = [k for k, i in enumerate(index) if i is Ellipsis]
    index = (index[:where[0]] + fill + index[where[0] + 1:]) if where else index + fill
    t = 0
    while (index and isinstance(index[-1], slice)
           and index[-1].indices(shape[-1 - t]) == (0, shape[-1 - t], 1)):
        index, t = index[:-1], t + 1
    return index, t


def _source_positions(shape: tuple, index: tuple) -> np.ndarray:
    """For every element of ``x[index]``, its flat (row-major) position in ``x``.

    NumPy applies the index to ``ndim`` zero-stride views, the d-th holding
    ``i_d * stride_d`` at ``(i_0, .., i_d, ..)``; their sum is the flat position. This
    follows NumPy's own rules for every index kind without materialising ``x.size``
    positions.
    """
    flat = np.array(np.broadcast_to(np.int64(0), shape)[index], dtype=np.int64)
    stride = 1
    for d in range(len(shape) - 1, -1, -1):
        coord = (np.arange(shape[d], dtype=np.int64) * stride).reshape(
            (shape[d],) + (1,) * (len(shape) - 1 - d))
        flat += np.broadcast_to(coord, shape)[index]
        stride *= shape[d]
    return flat


def _getitem_samples(rng):
    x = rng.standard_normal((4, 5))
    yield Sample(x, index=(slice(3, 0, -2), slice(None, None, 2)), label="negative steps")
    yield Sample(x, index=(None, Ellipsis, 1), label="None, ..., int")
    yield Sample(x, index=(np.array([0, 2, 0, 3, 0]),), label="repeated rows")
    yield Sample(rng.standard_normal((3, 4, 5)),
                 index=(slice(None, None, -1), np.array([[1, 1], [3, 0]]), np.array([4, 4])),
                 label="slice + broadcast integer arrays with repeats")
    yield Sample(rng.standard_normal((3, 4, 5)),
                 index=(np.array([2, 0, 2]), slice(1, 3), np.array([1, 1, 4])),
                 label="separated arrays (advanced axes first)")
    yield Sample(x, index=(x > 0.3,), label="boolean mask")
    yield Sample(x, index=(2, 3), label="0-d result")


@register("getitem", samples=_getitem_samples)
class GetItem(Function):
    @staticmethod
    def forward(ctx, x, index):
        ctx.input_shape = x.shape
        ctx.index = index
        return np.asarray(x[index])

    @staticmethod
    def backward(ctx, g):
        return _scatter(g, ctx.input_shape, ctx.index)

    @staticmethod
    def vjp(ctx, g):
        return IndexScatter.apply(g, shape=ctx.input_shape, index=ctx.index)


def _scatter(g: np.ndarray, shape: tuple, index: tuple) -> np.ndarray:
    """The adjoint of ``x[index]``: zeros of ``shape`` with ``g`` added at the positions
    the index read (repeated positions sum)."""
    if all(not isinstance(i, np.ndarray) for i in index):
        # Basic indexing picks each element of x at most once: assign, no sums.
        grad = np.zeros(shape, dtype=g.dtype)
        grad[index] = g
        return grad
    # Integer arrays may repeat an index: scatter-add whole rows of x's trailing dims.
    index, t = _whole_trailing_dims(shape, index)
    lead, row = shape[:len(shape) - t], math.prod(shape[len(shape) - t:])
    rows = _source_positions(lead, index).reshape(-1)
    values = g.reshape(rows.size, row)  # a view even of a 0-stride broadcast g
    return shape_kernels.scatter_add_rows(values, rows, math.prod(lead)).reshape(shape)


def _index_scatter_samples(rng):
    for s in _getitem_samples(rng):
        x, index = s.inputs[0], s.params["index"]
        yield Sample(np.asarray(rng.standard_normal(np.shape(x[index]))), shape=x.shape,
                     index=index,
                     label=s.label)


@register("index_scatter", samples=_index_scatter_samples)
class IndexScatter(Function):
    """The backward of getitem as an op (its own backward is getitem): what makes
    indexing twice differentiable."""

    @staticmethod
    def forward(ctx, g, shape, index):
        ctx.index = index
        return _scatter(g, shape, index)

    @staticmethod
    def backward(ctx, h):
        return np.asarray(h[ctx.index])

    @staticmethod
    def vjp(ctx, h):
        return GetItem.apply(h, index=ctx.index)


def getitem(x: Any, index: Any) -> Tensor:
    """``x[index]`` with NumPy's indexing semantics (what the ``[]`` operator calls).

    Basic indices (ints, slices with steps and negatives, None, ...) give a view;
    integer arrays, lists and integer Tensors (advanced indexing, broadcast together and
    combined with basic indices as in NumPy) and boolean masks give a copy. Backward:
    the gradient scattered back to the positions read, summing over repeated indices
    (``np.add.at``), in a fixed order, so it is deterministic.
    """
    x = lift(x)
    index = normalize_index(index, x.shape)
    try:
        return GetItem.apply(x, index=index)
    except IndexError as e:
        raise IndexError(f"getitem: {e} (x has shape {x.shape})") from None


def view(x: Any, *shape: int | Sequence[int]) -> Tensor:
    """``reshape`` under PyTorch's other name."""
    return reshape(x, *shape)


def flatten(x: Any, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Dims ``start_dim`` .. ``end_dim`` (inclusive) merged into one (``torch.flatten``);
    a 0-d tensor becomes 1-D."""
    x = lift(x)
    if x.ndim == 0:
        return reshape(x, 1)
    s = one_dim("flatten", start_dim, x.shape, "start_dim")
    e = one_dim("flatten", end_dim, x.shape, "end_dim")
    if s > e:
        raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim} "
                         f"(x has shape {x.shape})")
    return reshape(x, x.shape[:s] + (math.prod(x.shape[s:e + 1]),) + x.shape[e + 1:])


def size(x: Tensor, dim: int | None = None) -> tuple[int, ...] | int:
    """PyTorch's ``Tensor.size``: the shape tuple, or the length of ``dim``."""
    if dim is None:
        return x.shape
    if x.ndim == 0:
        raise IndexError(f"size: a 0-d tensor has no dim {dim}")
    return x.shape[one_dim("size", dim, x.shape)]


# -- split / chunk / squeeze / unsqueeze -----------------------------------------------------
def _split_samples(rng):
    yield Sample(rng.standard_normal((5, 3)), sizes=(2, 2, 1), dim=0, label="uneven rows")
    yield Sample(rng.standard_normal((2, 6)), sizes=(1, 0, 5), dim=1, label="an empty piece")
    yield Sample(rng.standard_normal((2, 3, 4)), sizes=(4,), dim=2, label="one piece")


@register("split", samples=_split_samples)
class Split(Function):
    """Consecutive pieces of ``sizes`` along ``dim`` (non-negative, summing to its size):
    views of x. Backward: the pieces' gradients joined along ``dim``."""

    @staticmethod
    def forward(ctx, x, sizes, dim):
        lead = (slice(None),) * dim
        ends = np.cumsum(sizes)
        return tuple(x[lead + (slice(end - n, end),)] for n, end in zip(sizes, ends))

    @staticmethod
    def backward(ctx, *grads):
        return np.concatenate(grads, axis=ctx.params["dim"])

    @staticmethod
    def vjp(ctx, *grads):
        return Concat.apply(*grads, axis=ctx.params["dim"])


def split(x: Any, split_size_or_sections: int | Sequence[int], dim: int = 0
          ) -> tuple[Tensor, ...]:
    """``x`` cut along ``dim`` into consecutive pieces (``torch.split``), views of x: of
    ``split_size_or_sections`` entries each when it is an int (the last piece smaller if
    the size does not divide), else of the listed sizes, which must sum to the size.
    Backward: the pieces' gradients joined (unused pieces count as zeros)."""
    x = lift(x)
    if x.ndim == 0:
        raise ValueError("split: x must have at least one dim, got a 0-d tensor")
    d = one_dim("split", dim, x.shape)
    n = x.shape[d]
    if is_int(split_size_or_sections):
        size = int(split_size_or_sections)
        if size < 0 or (size == 0 and n):
            raise ValueError(f"split: split_size must be positive (0 only for a dim of size "
                             f"0), got {size} for dim {d} of size {n} (x has shape {x.shape})")
        sizes = (size,) * (n // size) + ((n % size,) if n % size else ()) if n else (0,)
    else:
        sizes = _sizes("split", (split_size_or_sections,), "split sizes")
        if any(s < 0 for s in sizes) or sum(sizes) != n:
            raise ValueError(f"split: split sizes {sizes} must be non-negative and sum to the "
                             f"size {n} of dim {d} (x has shape {x.shape})")
    return Split.apply(x, sizes=sizes, dim=d)


def chunk(x: Any, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    """``x`` cut along ``dim`` into at most ``chunks`` pieces of ceil(size / chunks)
    entries, the last smaller (``torch.chunk``: fewer pieces when they run out, e.g. 5
    entries in 4 chunks give sizes 2, 2, 1); a dim of size 0 gives ``chunks`` empty
    pieces. Views of x, as in ``split``."""
    x = lift(x)
    if not is_int(chunks) or chunks <= 0:
        raise ValueError(f"chunk: chunks must be a positive int, got {chunks!r}")
    if x.ndim == 0:
        raise ValueError("chunk: x must have at least one dim, got a 0-d tensor")
    d = one_dim("chunk", dim, x.shape)
    n = x.shape[d]
    if n == 0:
        return split(x, (0,) * chunks, d)
    return split(x, -(-n // chunks), d)


def squeeze(x: Any, dim: int | Sequence[int] | None = None) -> Tensor:
    """``x`` without size-1 dims (``torch.squeeze``): all of them (``dim=None``), or those
    among ``dim`` (an int or a tuple); a listed dim whose size is not 1 stays. A view;
    backward reshapes g back."""
    x = lift(x)
    if dim is None:
        drop = {d for d, n in enumerate(x.shape) if n == 1}
    else:
        items = tuple(dim) if isinstance(dim, Sequence) else (dim,)
        listed = [one_dim("squeeze", d, x.shape) for d in items]
        if len(set(listed)) != len(listed):
            raise ValueError(f"squeeze: dim {dim!r} names a dim more than once (x has shape "
                             f"{x.shape})")
        drop = {d for d in listed if d < x.ndim and x.shape[d] == 1}
    return Reshape.apply(x, shape=tuple(n for d, n in enumerate(x.shape) if d not in drop))


def unsqueeze(x: Any, dim: int) -> Tensor:
    """``x`` with a new size-1 dim at ``dim`` (``torch.unsqueeze``; -ndim-1 <= dim <= ndim,
    negative counting from the end of the result). A view; backward reshapes g back."""
    x = lift(x)
    d = one_dim("unsqueeze", dim, x.shape, ndim=x.ndim + 1)
    return Reshape.apply(x, shape=x.shape[:d] + (1,) + x.shape[d:])


cat = concat  # PyTorch's name

__all__ = ["broadcast_to", "cat", "chunk", "concat", "flatten", "getitem", "permute",
           "reshape", "split", "squeeze", "stack", "transpose", "unsqueeze", "view"]
