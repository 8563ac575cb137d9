"""Ops that rearrange or repeat elements, or pick them by position: expand, repeat, tile,
flip, roll, diag, diagonal, diag_embed, tril, triu, masked_select, nonzero, argwhere, and
the products outer, bmm, addmm, baddbmm.

Registered here (each with forward, backward and vjp): ``flip``, ``roll``, ``diagonal``
and its adjoint ``diag_embed`` (each the other's backward, so both are twice
differentiable), ``tril`` and ``triu``. The rest are compositions of registered ops and
get their gradients from them:

- ``expand``/``expand_as``: ``broadcast_to`` (a read-only view sharing the input's memory,
  as PyTorch's expand is a view);
- ``repeat``/``tile``: ``reshape`` to [1, s0, 1, s1, ...], ``broadcast_to``
  [r0, s0, r1, s1, ...], ``reshape`` to [r0*s0, r1*s1, ...] (a copy), so the backward
  sums the copies of every element;
- ``diag``: ``diagonal`` (2-D in, a copy as PyTorch's) or ``diag_embed`` (1-D in);
- ``masked_select``: ``broadcast_to`` and ``getitem`` with the boolean mask;
- ``outer``: ``reshape`` and ``mul``; ``bmm``: ``matmul``; ``addmm``/``baddbmm``:
  ``matmul``, ``mul`` and ``add``.

``nonzero`` and ``argwhere`` return int64 index tensors outside the graph. ``flip``,
``roll``, ``tril``, ``triu`` and ``diag`` return new memory, as in PyTorch; ``diagonal``
and ``expand`` return read-only NumPy views of the input (writes into the input are seen
through them, as in PyTorch; writes through them are refused by NumPy).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..function import Function, Sample, register
from ..tensor import Tensor, lift
from ._args import is_int, one_dim, real
from .elementwise import add, mul
from .inplace import clone
from .matmul import matmul
from .shape import GetItem, broadcast_to, reshape


# -- argument helpers ----------------------------------------------------------------------
def _ints(op: str, args: tuple, name: str) -> tuple[int, ...]:
    """``f(x, 2, 3)``, ``f(x, (2, 3))`` and ``f(x, [2, 3])`` all give ``(2, 3)``."""
    if len(args) == 1 and isinstance(args[0], Sequence | np.ndarray | Tensor):
        args = tuple(np.asarray(args[0]._data if isinstance(args[0], Tensor) else args[0]
                                ).reshape(-1).tolist())
    if not all(is_int(s) for s in args):
        raise TypeError(f"{op}: {name} must be ints, got {args!r}")
    return tuple(int(s) for s in args)


def _distinct_dims(op: str, dims: tuple, shape: tuple) -> tuple[int, ...]:
    """Each dim normalised (``one_dim``); a repeated dim is a ValueError (PyTorch)."""
    out = tuple(one_dim(op, d, shape, "dims") for d in dims)
    for d in set(out):
        if out.count(d) > 1:
            raise ValueError(f"{op}: dim {d} appears multiple times in dims={dims} "
                             f"(x has shape {shape})")
    return out


# -- expand --------------------------------------------------------------------------------
def expand(x: Any, *sizes: int | Sequence[int]) -> Tensor:
    """``x`` repeated along new leading dims and its size-1 dims to ``sizes``, with -1
    keeping a dim (``Tensor.expand``): a read-only view of ``x`` (``broadcast_to``), so
    the backward sums the gradient over the expanded dims. Only size-1 dims expand."""
    x = lift(x)
    sizes = _ints("expand", sizes, "sizes")
    lead = len(sizes) - x.ndim
    if lead < 0:
        raise ValueError(f"expand: the number of sizes provided ({len(sizes)}) must be greater "
                         f"or equal to the number of dimensions of x ({x.ndim}, shape "
                         f"{x.shape}); sizes={sizes}")
    shape = []
    for i, s in enumerate(sizes):
        if i < lead:
            if s < 0:
                raise ValueError(f"expand: size {s} is not allowed in a leading, new dim {i} "
                                 f"(x has shape {x.shape}, sizes={sizes})")
            shape.append(s)
            continue
        n = x.shape[i - lead]
        if s == -1:
            shape.append(n)
        elif s < 0:
            raise ValueError(f"expand: invalid size {s} at dim {i} (x has shape {x.shape}, "
                             f"sizes={sizes})")
        elif n not in (1, s):
            raise ValueError(f"expand: the expanded size ({s}) must match the existing size "
                             f"({n}) at non-singleton dim {i}: x has shape {x.shape}, "
                             f"sizes={sizes}")
        else:
            shape.append(s)
    return broadcast_to(x, tuple(shape))


def expand_as(x: Any, other: Any) -> Tensor:
    """``x.expand(other.shape)`` (``Tensor.expand_as``)."""
    return expand(x, lift(other).shape)


# -- repeat / tile -------------------------------------------------------------------------
def repeat(x: Any, *sizes: int | Sequence[int]) -> Tensor:
    """``x`` tiled ``sizes[d]`` times along each dim (``Tensor.repeat``, NumPy's ``tile``);
    extra leading sizes add dims. A copy. Backward: ``g`` reshaped to
    [r0, s0, r1, s1, ...] and summed over the r axes (a composition of reshape and
    broadcast_to)."""
    x = lift(x)
    sizes = _ints("repeat", sizes, "sizes")
    if len(sizes) < x.ndim:
        raise ValueError(f"repeat: the number of repeat sizes ({len(sizes)}, sizes={sizes}) "
                         f"can not be smaller than the number of dims of x (shape {x.shape})")
    if any(r < 0 for r in sizes):
        raise ValueError(f"repeat: sizes must be non-negative, got {sizes} (x has shape "
                         f"{x.shape})")
    dims = (1,) * (len(sizes) - x.ndim) + x.shape
    final = tuple(r * s for r, s in zip(sizes, dims))
    if all(r == 1 for r in sizes):
        return clone(reshape(x, final))  # PyTorch copies even then
    ones = tuple(v for s in dims for v in (1, s))
    spread = tuple(v for r, s in zip(sizes, dims) for v in (r, s))
    return reshape(broadcast_to(reshape(x, ones), spread), final)


def tile(x: Any, *dims: int | Sequence[int]) -> Tensor:
    """``torch.tile``: ``repeat`` with ``dims`` padded with leading 1s to ``x.ndim``."""
    x = lift(x)
    dims = _ints("tile", dims, "dims")
    return repeat(x, (1,) * (x.ndim - len(dims)) + dims)


# -- flip / roll ---------------------------------------------------------------------------
def _flip_samples(rng):
    yield Sample(rng.standard_normal((3, 4)), dims=(0,), label="rows")
    yield Sample(rng.standard_normal((2, 3, 4)), dims=(2, 0), label="two dims")
    yield Sample(rng.standard_normal(()), dims=(), label="0-d, no dims")


@register("flip", samples=_flip_samples)
class Flip(Function):
    @staticmethod
    def forward(ctx, x, dims):
        ctx.dims = dims
        return np.array(np.flip(x, dims) if dims else x)  # a copy (an ndarray even if 0-d)

    @staticmethod
    def backward(ctx, g):
        return np.flip(g, ctx.dims) if ctx.dims else g

    @staticmethod
    def vjp(ctx, g):
        return Flip.apply(g, dims=ctx.dims)


def flip(x: Any, *args: int | Sequence[int], dims: Sequence[int] | None = None) -> Tensor:
    """``x`` with the order of its entries reversed along ``dims`` (``torch.flip``; also
    ``x.flip(0, 1)``); a copy. Backward: the gradient flipped along the same dims."""
    x = lift(x)
    if dims is not None and args:
        raise TypeError("flip: got dims both positionally and as a keyword")
    given = _distinct_dims("flip", _ints("flip", args if dims is None else (dims,), "dims"),
                           x.shape)
    return Flip.apply(x, dims=given if x.ndim else ())


def fliplr(x: Any) -> Tensor:
    """``x`` flipped along dim 1 (``torch.fliplr``); x must be at least 2-D."""
    x = lift(x)
    if x.ndim < 2:
        raise ValueError(f"fliplr: x must be at least 2-D, got shape {x.shape}")
    return Flip.apply(x, dims=(1,))


def flipud(x: Any) -> Tensor:
    """``x`` flipped along dim 0 (``torch.flipud``); x must be at least 1-D."""
    x = lift(x)
    if x.ndim < 1:
        raise ValueError(f"flipud: x must be at least 1-D, got shape {x.shape}")
    return Flip.apply(x, dims=(0,))


def _roll_samples(rng):
    yield Sample(rng.standard_normal((3, 4)), shifts=(1,), dims=(1,), label="one dim")
    yield Sample(rng.standard_normal((2, 3, 4)), shifts=(-4, 5), dims=(2, 0),
                 label="two dims, shifts past the size")
    yield Sample(rng.standard_normal((3, 4)), shifts=(5,), dims=None, label="flattened")


@register("roll", samples=_roll_samples)
class Roll(Function):
    @staticmethod
    def forward(ctx, x, shifts, dims):
        ctx.shifts, ctx.dims = shifts, dims
        return _roll(x, shifts, dims)

    @staticmethod
    def backward(ctx, g):
        return _roll(g, tuple(-s for s in ctx.shifts), ctx.dims)

    @staticmethod
    def vjp(ctx, g):
        return Roll.apply(g, shifts=tuple(-s for s in ctx.shifts), dims=ctx.dims)


def _roll(x: np.ndarray, shifts: tuple, dims: tuple | None) -> np.ndarray:
    if dims is None:
        return np.roll(x, shifts[0])
    return np.roll(x, shifts, dims)


def roll(x: Any, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None
         ) -> Tensor:
    """``x`` with its entries moved ``shifts[i]`` places along ``dims[i]``, wrapping around
    (``torch.roll``); without ``dims`` over the flattened tensor, the shape kept. A copy.
    Backward: the gradient rolled by ``-shifts``."""
    x = lift(x)
    s = _ints("roll", (shifts,), "shifts")
    if dims is None:
        if len(s) != 1:
            raise ValueError(f"roll: shifts and dims must align: shifts={s} has {len(s)} "
                             f"entries but dims is None (x has shape {x.shape})")
        return Roll.apply(x, shifts=s, dims=None)
    d = _ints("roll", (dims,), "dims")
    if len(s) != len(d):
        raise ValueError(f"roll: shifts and dims must align: shifts={s}, dims={d} "
                         f"(x has shape {x.shape})")
    d = tuple(one_dim("roll", k, x.shape, "dims") for k in d)
    if x.ndim == 0:
        return Roll.apply(x, shifts=(0,), dims=None)
    return Roll.apply(x, shifts=s, dims=d)


# -- diagonal / diag_embed -----------------------------------------------------------------
def _diagonal_samples(rng):
    yield Sample(rng.standard_normal((3, 4)), offset=0, dim1=0, dim2=1, copy=False,
                 label="main diagonal")
    yield Sample(rng.standard_normal((3, 5)), offset=2, dim1=0, dim2=1, copy=True,
                 label="above, a copy")
    yield Sample(rng.standard_normal((2, 4, 3)), offset=-1, dim1=2, dim2=0, copy=False,
                 label="batched, below, reversed dims")


@register("diagonal", samples=_diagonal_samples)
class Diagonal(Function):
    @staticmethod
    def forward(ctx, x, offset, dim1, dim2, copy):
        ctx.input_shape = x.shape
        out = np.diagonal(x, offset, dim1, dim2)
        return out.copy() if copy else out

    @staticmethod
    def backward(ctx, g):
        p = ctx.params
        return _place_diagonal(g, ctx.input_shape, p["offset"], p["dim1"], p["dim2"])

    @staticmethod
    def vjp(ctx, g):
        p = ctx.params
        return DiagEmbed.apply(g, shape=ctx.input_shape, offset=p["offset"], dim1=p["dim1"],
                               dim2=p["dim2"])


def _place_diagonal(src: np.ndarray, shape: tuple, offset: int, dim1: int, dim2: int
                    ) -> np.ndarray:
    """Zeros of ``shape`` with ``src`` (batch dims, then the diagonal) written on the
    ``offset`` diagonal of dims ``dim1``, ``dim2``: the adjoint of ``np.diagonal``."""
    out = np.zeros(shape, dtype=src.dtype)
    view = np.moveaxis(out, (dim1, dim2), (-2, -1))
    n = src.shape[-1]
    rows = np.arange(n) + max(-offset, 0)
    view[..., rows, rows + offset] = src
    return out


def _diag_embed_samples(rng):
    yield Sample(rng.standard_normal(3), shape=(3, 3), offset=0, dim1=0, dim2=1,
                 label="1-D to a square matrix")
    yield Sample(rng.standard_normal((2, 3)), shape=(2, 4, 4), offset=1, dim1=1, dim2=2,
                 label="batched, above")
    yield Sample(rng.standard_normal((2, 2)), shape=(4, 2, 3), offset=-1, dim1=2, dim2=0,
                 label="non-square, below, reversed dims")


@register("diag_embed", samples=_diag_embed_samples)
class DiagEmbed(Function):
    """``src``'s last dim written on a diagonal of zeros of ``shape`` (``torch.diag_embed``
    with the target shape given): the adjoint of ``diagonal``."""

    @staticmethod
    def forward(ctx, src, shape, offset, dim1, dim2):
        return _place_diagonal(src, shape, offset, dim1, dim2)

    @staticmethod
    def backward(ctx, h):
        p = ctx.params
        return np.diagonal(h, p["offset"], p["dim1"], p["dim2"])

    @staticmethod
    def vjp(ctx, h):
        p = ctx.params
        return Diagonal.apply(h, offset=p["offset"], dim1=p["dim1"], dim2=p["dim2"], copy=False)


def _diagonal_dims(op: str, x: Tensor, dim1: int, dim2: int, ndim: int) -> tuple[int, int]:
    if ndim < 2:
        raise ValueError(f"{op}: needs at least 2 dims, x has shape {x.shape}")
    d1 = one_dim(op, dim1, (0,) * ndim, "dim1")
    d2 = one_dim(op, dim2, (0,) * ndim, "dim2")
    if d1 == d2:
        raise ValueError(f"{op}: diagonal dims cannot be identical: dim1={dim1}, dim2={dim2} "
                         f"(x has shape {x.shape})")
    return d1, d2


def diagonal(x: Any, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The entries ``x[..., i, ..., i + offset, ...]`` of dims ``dim1``, ``dim2``, as a new
    last dim after the other dims (``torch.diagonal``; empty when ``offset`` passes the
    edge). A read-only view of ``x``. Backward: the gradient on that diagonal of zeros."""
    x = lift(x)
    if not is_int(offset):
        raise TypeError(f"diagonal: offset must be an int, got {offset!r}")
    d1, d2 = _diagonal_dims("diagonal", x, dim1, dim2, x.ndim)
    return Diagonal.apply(x, offset=int(offset), dim1=d1, dim2=d2, copy=False)


def diag_embed(x: Any, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:
    """A tensor whose ``offset`` diagonals of dims ``dim1``, ``dim2`` (of the result) hold
    the last dim of ``x``, zeros elsewhere (``torch.diag_embed``); those dims have size
    ``x.shape[-1] + |offset|``. Backward: the diagonal of the gradient."""
    x = lift(x)
    if not is_int(offset):
        raise TypeError(f"diag_embed: offset must be an int, got {offset!r}")
    if x.ndim < 1:
        raise ValueError(f"diag_embed: x must be at least 1-D, got shape {x.shape}")
    d1, d2 = _diagonal_dims("diag_embed", x, dim1, dim2, x.ndim + 1)
    m = x.shape[-1] + abs(int(offset))
    batch = iter(x.shape[:-1])
    shape = tuple(m if d in (d1, d2) else next(batch) for d in range(x.ndim + 1))
    return DiagEmbed.apply(x, shape=shape, offset=int(offset), dim1=d1, dim2=d2)


def diag(x: Any, diagonal: int = 0) -> Tensor:
    """``torch.diag``: a 1-D ``x`` as the ``diagonal``-th diagonal of a square matrix of
    size ``len(x) + |diagonal|``; of a 2-D ``x`` its ``diagonal``-th diagonal (a copy)."""
    x = lift(x)
    if not is_int(diagonal):
        raise TypeError(f"diag: diagonal must be an int, got {diagonal!r}")
    if x.ndim == 1:
        return diag_embed(x, diagonal, 0, 1)
    if x.ndim == 2:
        return Diagonal.apply(x, offset=int(diagonal), dim1=0, dim2=1, copy=True)
    raise ValueError(f"diag: supports 1-D or 2-D tensors, got shape {x.shape}")


# -- tril / triu ---------------------------------------------------------------------------
def _triangle_samples(rng):
    yield Sample(rng.standard_normal((4, 4)), diagonal=0, label="square")
    yield Sample(rng.standard_normal((3, 5)), diagonal=1, label="wide, above")
    yield Sample(rng.standard_normal((2, 4, 3)), diagonal=-1, label="batched, below")


class _Triangle(Function):
    """x with the elements off one side of a diagonal zeroed (``keep``: np.tril or
    np.triu); the gradient is the same mask on g."""

    keep = staticmethod(np.tril)

    @classmethod
    def forward(cls, ctx, x, diagonal):
        return cls.keep(x, diagonal)

    @classmethod
    def backward(cls, ctx, g):
        return cls.keep(g, ctx.params["diagonal"])

    @classmethod
    def vjp(cls, ctx, g):
        return cls.apply(g, diagonal=ctx.params["diagonal"])


@register("tril", samples=_triangle_samples)
class Tril(_Triangle):
    keep = staticmethod(np.tril)


@register("triu", samples=_triangle_samples)
class Triu(_Triangle):
    keep = staticmethod(np.triu)


def _triangle(op: str, fn: type[Function], x: Any, diagonal: int) -> Tensor:
    x = lift(x)
    if not is_int(diagonal):
        raise TypeError(f"{op}: diagonal must be an int, got {diagonal!r}")
    if x.ndim < 2:
        raise ValueError(f"{op}: x must have at least 2 dims, got shape {x.shape}")
    return fn.apply(x, diagonal=int(diagonal))


def tril(x: Any, diagonal: int = 0) -> Tensor:
    """The lower triangle of the last two dims: ``x[..., i, j]`` where ``j - i <=
    diagonal``, zeros elsewhere (``torch.tril``). Backward: the same mask on the gradient."""
    return _triangle("tril", Tril, x, diagonal)


def triu(x: Any, diagonal: int = 0) -> Tensor:
    """The upper triangle of the last two dims: ``x[..., i, j]`` where ``j - i >=
    diagonal``, zeros elsewhere (``torch.triu``). Backward: the same mask on the gradient."""
    return _triangle("triu", Triu, x, diagonal)


# -- products ------------------------------------------------------------------------------
def outer(a: Any, b: Any) -> Tensor:
    """The outer product ``a[i] * b[j]`` of two 1-D tensors (``torch.outer``, also
    ``ger``): ``a[:, None] * b[None, :]`` through ``mul``."""
    a, b = lift(a), lift(b)
    for name, t in (("a", a), ("b", b)):
        if t.ndim != 1:
            raise ValueError(f"outer: expected 1-D arguments, got {name} of shape {t.shape} "
                             f"(a has shape {a.shape}, b {b.shape})")
    return mul(reshape(a, -1, 1), reshape(b, 1, -1))


def _check_bmm(op: str, b1: Tensor, b2: Tensor) -> None:
    for name, t in (("batch1", b1), ("batch2", b2)):
        if t.ndim != 3:
            raise ValueError(f"{op}: {name} must be a 3-D tensor, got shape {t.shape} "
                             f"(batch1 has shape {b1.shape}, batch2 {b2.shape})")
    if b2.shape[:2] != (b1.shape[0], b1.shape[2]):
        raise ValueError(f"{op}: expected the first two dims of batch2 to be "
                         f"[{b1.shape[0]}, {b1.shape[2]}] but got {list(b2.shape[:2])} "
                         f"(batch1 has shape {b1.shape}, batch2 {b2.shape})")


def bmm(batch1: Any, batch2: Any) -> Tensor:
    """Batched matrix product of [b, n, m] and [b, m, p] into [b, n, p] (``torch.bmm``, no
    broadcasting): ``matmul`` after PyTorch's shape checks."""
    b1, b2 = lift(batch1), lift(batch2)
    _check_bmm("bmm", b1, b2)
    return matmul(b1, b2)


def _scaled_sum(op: str, x: Tensor, product: Tensor, beta: Any, alpha: Any) -> Tensor:
    """``beta * x + alpha * product``, with ``x`` broadcast to the product's shape (and
    left out, NaNs and all, when ``beta`` is 0, as PyTorch does)."""
    beta, alpha = real(op, "beta", beta), real(op, "alpha", alpha)
    try:
        bad = np.broadcast_shapes(x.shape, product.shape) != product.shape
    except ValueError:
        bad = True
    if bad:
        raise ValueError(f"{op}: input of shape {x.shape} does not broadcast to the "
                         f"product's shape {product.shape}")
    out = product if alpha == 1 else mul(product, alpha)
    if beta == 0:
        return out
    return add(out, x if beta == 1 else mul(x, beta))


def addmm(input: Any, mat1: Any, mat2: Any, *, beta: float = 1, alpha: float = 1) -> Tensor:
    """``beta * input + alpha * (mat1 @ mat2)`` for matrices mat1 [n, m] and mat2 [m, p],
    ``input`` broadcast to [n, p] (``torch.addmm``; with ``beta=0`` input is ignored and
    gets no gradient). Composed of matmul, mul and add."""
    x, m1, m2 = lift(input), lift(mat1), lift(mat2)
    for name, t in (("mat1", m1), ("mat2", m2)):
        if t.ndim != 2:
            raise ValueError(f"addmm: {name} must be a matrix, got shape {t.shape} "
                             f"(mat1 has shape {m1.shape}, mat2 {m2.shape})")
    if m1.shape[1] != m2.shape[0]:
        raise ValueError(f"addmm: mat1 and mat2 shapes cannot be multiplied ({m1.shape[0]}x"
                         f"{m1.shape[1]} and {m2.shape[0]}x{m2.shape[1]})")
    return _scaled_sum("addmm", x, matmul(m1, m2), beta, alpha)


def baddbmm(input: Any, batch1: Any, batch2: Any, *, beta: float = 1, alpha: float = 1
            ) -> Tensor:
    """``beta * input + alpha * bmm(batch1, batch2)``, ``input`` broadcast to [b, n, p]
    (``torch.baddbmm``; with ``beta=0`` input is ignored and gets no gradient)."""
    x, b1, b2 = lift(input), lift(batch1), lift(batch2)
    _check_bmm("baddbmm", b1, b2)
    return _scaled_sum("baddbmm", x, matmul(b1, b2), beta, alpha)


# -- masked_select / nonzero ---------------------------------------------------------------
def masked_select(x: Any, mask: Any) -> Tensor:
    """The entries of ``x`` where the boolean ``mask`` holds, in row-major order, as a 1-D
    tensor; ``x`` and ``mask`` broadcast together (``torch.masked_select``). Backward: the
    gradient scattered into zeros at the mask (``broadcast_to`` and ``getitem``)."""
    x = lift(x)
    m = mask._data if isinstance(mask, Tensor) else np.asarray(mask)
    if m.dtype != np.bool_:
        raise TypeError(f"masked_select: expected a bool mask, got dtype {m.dtype} "
                        f"(x has shape {x.shape}, mask {m.shape})")
    try:
        shape = np.broadcast_shapes(x.shape, m.shape)
    except ValueError:
        raise ValueError(f"masked_select: mask of shape {m.shape} and x of shape {x.shape} "
                         "do not broadcast") from None
    if shape != x.shape:
        x = broadcast_to(x, shape)
    index = np.array(np.broadcast_to(m, shape))  # a private copy: the backward reads it
    return GetItem.apply(x, index=(index,))  # a mask over every dim: always 1-D


def nonzero(x: Any, as_tuple: bool = False) -> Tensor | tuple[Tensor, ...]:
    """The indices of the non-zero entries of ``x`` in row-major order (``torch.nonzero``):
    int64 [n, ndim], or with ``as_tuple`` one int64 [n] tensor per dim (a 0-d ``x`` as
    1-D). Not differentiable."""
    data = lift(x)._data
    if as_tuple:
        return tuple(Tensor._wrap(i.astype(np.int64), None, 0)
                     for i in np.nonzero(np.atleast_1d(data)))
    return Tensor._wrap(np.argwhere(data).astype(np.int64), None, 0)


def argwhere(x: Any) -> Tensor:
    """``nonzero(x)``: int64 [n, ndim] indices of the non-zero entries (``torch.argwhere``)."""
    return nonzero(x)


__all__ = ["addmm", "argwhere", "baddbmm", "bmm", "diag", "diag_embed", "diagonal", "expand",
           "expand_as", "flip", "fliplr", "flipud", "masked_select", "nonzero", "outer",
           "repeat", "roll", "tile", "tril", "triu"]
