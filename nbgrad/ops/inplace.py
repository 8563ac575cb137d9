"""In-place ops and item assignment, recorded in the graph as PyTorch records them.

An in-place op on a tensor that nothing differentiates writes the tensor's array and
bumps its version counter. While gradients are recorded, an in-place op on a tensor in
the graph (or one whose value requires grad: ``buf[0] = w``) is recorded instead:

* the op runs out of place on the old value, and the result is written into the
  tensor's own array, so that its views and ``.numpy()`` see it;
* the tensor then becomes the output of the new node, so the overwritten region gets no
  gradient from the old value and the assigned value gets its gradient;
* the version counter is bumped, so a node that saved the old value refuses to run its
  backward (``autograd/versions.py: check``).

Assignments (``x[index] = value``, ``masked_fill_``, ``index_put_``, ``index_fill_``,
``scatter_``, ``copy_``, ``fill_``) are one op, ``IndexPut``, whose backward needs nothing
of the old value, so when recorded it writes in place without a copy. The other in-place
ops (``add_``, ``mul_``, ``clamp_``, ...) compute from a copy of the old value, since
their backward may save it (PyTorch clones it for the same reason).

What PyTorch refuses, nbgrad refuses with PyTorch's words: a leaf that requires grad is
changed in place only under ``no_grad`` (optimisers, initialisation). A view of a tensor
in the graph is not rebased onto its base here: changing one in place while recording is
an error that says to change the base (``base[index] = value``) or clone the view.
The rules and the gradients of an assignment: docs/inplace.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..autograd import grad_mode
from ..device import check_memory_format
from ..function import Function, Sample, register
from ..tensor import Tensor, lift
from . import activation, elementwise
from ._args import one_dim
from .shape import GetItem, normalize_index, reshape


# -- IndexPut: x with x[index] = value (or += value) ------------------------------------------
def _index_put_samples(rng):
    x = rng.standard_normal((4, 5))
    yield Sample(x, rng.standard_normal(3), index=(slice(None, 3), 1), label="slice, int")
    yield Sample(x, np.array(0.7), index=(x > 0.2,), label="bool mask, one value")
    yield Sample(x, rng.standard_normal((2, 5)), index=(np.array([3, 0]),),
                 label="integer rows")
    yield Sample(x, rng.standard_normal((3,)), index=(np.array([1, 1, 2]), np.array([0, 0, 4])),
                 accumulate=True, label="accumulate over repeated positions")
    yield Sample(x, rng.standard_normal((1, 5)), index=(Ellipsis,), label="copy_, broadcast")


@register("index_put", samples=_index_put_samples)
class IndexPut(Function):
    """``x`` with ``value`` written at ``x[index]`` (added there when ``accumulate``,
    repeated positions summing). Backward: g to x except where the write replaced x's
    value (zero there), and ``g[index]`` to the value (the engine sums it to the
    value's shape). With ``inplace`` the forward writes ``x`` itself (what a recorded
    assignment does: the backward needs nothing of the old value)."""

    @staticmethod
    def forward(ctx, x, value, index, accumulate=False, inplace=False):
        ctx.index, ctx.accumulate = index, accumulate
        out = x if inplace else x.copy()
        _write(out, index, value, accumulate)
        return out

    @staticmethod
    def backward(ctx, g):
        gx = g
        if not ctx.accumulate:
            gx = g.copy()
            gx[ctx.index] = 0
        return gx, np.asarray(g[ctx.index])

    @staticmethod
    def vjp(ctx, g):
        gx = g
        if not ctx.accumulate:
            zero = Tensor._wrap(np.zeros((), g.dtype), None, 0)
            gx = IndexPut.apply(g, zero, index=ctx.index)
        return gx, GetItem.apply(g, index=ctx.index)


def _write(out: np.ndarray, index: tuple, value: np.ndarray, accumulate: bool) -> None:
    if accumulate:
        np.add.at(out, index, value)
    else:
        out[index] = value


# -- when an in-place op is recorded, and on what -----------------------------------------------
def _records(t: Tensor, *others: Any) -> bool:
    """Whether an in-place op on ``t`` with ``others`` goes into the graph."""
    if not grad_mode.state.enabled:
        return False
    return t._requires_grad or any(isinstance(o, Tensor) and o._requires_grad
                                   for o in others)


def _check_target(op: str, t: Tensor) -> None:
    """PyTorch's refusals of an in-place op that would be recorded on ``t``."""
    if t._node is None and t._requires_grad:
        raise RuntimeError(f"{op}: a leaf Variable that requires grad is being used in an "
                           "in-place operation.")
    base = t._base
    if base is not None:
        if base._node is None and base._requires_grad:
            raise RuntimeError(f"{op}: a view of a leaf Variable that requires grad is "
                               "being used in an in-place operation.")
        raise RuntimeError(f"{op}: nbgrad does not record in-place changes of a view (of "
                           f"shape {t.shape}) while gradients are recorded; change the "
                           "base tensor instead (base[index] = value), or clone() the view")


def check_target(op: str, t: Tensor) -> None:
    """Raise now what an in-place op on ``t`` alone would raise (before the op draws
    random numbers or does other work)."""
    if _records(t):
        _check_target(op, t)


def _rebase(t: Tensor, old: Tensor, new: Tensor) -> None:
    """``t`` becomes ``new``: the output of the node that recorded the in-place op. The
    node keeps ``old``, the value it replaced: nodes made before the op consumed that one
    (``autograd/engine.py: as_consumed``)."""
    t._version_counter().bump()
    new._node.replaced = old
    t._node, t._index, t._requires_grad = new._node, new._index, True


def _old(t: Tensor, data: np.ndarray) -> Tensor:
    """The tensor's value before the op, as an input of the op's node."""
    old = Tensor._wrap(data, t._node, t._index)
    old._requires_grad = t._requires_grad
    return old


# -- assignments ----------------------------------------------------------------------------------
def _selection_shape(op: str, shape: tuple, index: tuple) -> tuple:
    """The shape of ``x[index]`` for ``x`` of ``shape``, or the op's error (an index out
    of range, a mask of the wrong shape) before anything is written."""
    try:
        return np.broadcast_to(np.int8(0), shape)[index].shape
    except IndexError as e:
        raise IndexError(f"{op}: {e} (the tensor has shape {shape})") from None


def assign(op: str, t: Tensor, index: tuple, value: Any, accumulate: bool = False) -> Tensor:
    """``t[index] = value`` (``+=`` with ``accumulate``) in place, recorded in the graph
    as ``IndexPut`` where it must be. The value is cast to ``t``'s dtype."""
    v = value if isinstance(value, Tensor) else lift(value, t)
    selected = _selection_shape(op, t.shape, index)
    if not _broadcasts(v.shape, selected):
        raise ValueError(f"{op}: a value of shape {v.shape} does not broadcast to the "
                         f"{selected} elements selected of a tensor of shape {t.shape}")
    if v._requires_grad and grad_mode.state.enabled and t.dtype.kind != "f":
        raise RuntimeError(f"{op}: a value that requires grad cannot be written into a "
                           f"{t.dtype} tensor (its gradient would be lost)")
    if not _records(t, v):
        _write(t._writable(op), index, v._data, accumulate)
        return t
    _check_target(op, t)
    old = _old(t, t._data)
    old._counter = t._version_counter()
    new = IndexPut.apply(old, v, index=index, accumulate=accumulate, inplace=True)
    _rebase(t, old, new)
    return t


def _broadcasts(shape: tuple, target: tuple) -> bool:
    try:
        return np.broadcast_shapes(shape, target) == tuple(target)
    except ValueError:
        return False


def setitem(t: Tensor, index: Any, value: Any) -> None:
    """``t[index] = value`` (what ``[]=`` calls): every index form that reading takes
    (ints, slices, ``...``, None, bool masks, integer arrays, lists and tensors, mixed),
    ``value`` a number, array or tensor broadcast to the selection and cast to ``t``'s
    dtype. Recorded in the graph as PyTorch records it (see the module docstring)."""
    assign("setitem", t, normalize_index(index, t.shape, "setitem"), value)


def _index_tensor(op: str, index: Any, name: str = "index") -> np.ndarray:
    array = index._data if isinstance(index, Tensor) else np.asarray(index)
    if array.dtype.kind not in "iu":
        raise TypeError(f"{op}: {name} must hold integers, got {array.dtype} "
                        f"(shape {array.shape})")
    return array.astype(np.int64)


def _mask(op: str, t: Tensor, mask: Any) -> np.ndarray:
    array = mask._data if isinstance(mask, Tensor) else np.asarray(mask)
    if array.dtype != np.bool_:
        raise TypeError(f"{op}: mask must be a bool tensor, got {array.dtype} "
                        f"(shape {array.shape})")
    if not _broadcasts(array.shape, t.shape):
        raise ValueError(f"{op}: a mask of shape {array.shape} does not broadcast to the "
                         f"tensor's shape {t.shape}")
    return np.broadcast_to(array, t.shape)


def _fill_value(op: str, value: Any) -> Any:
    """A fill value: a number or a one-element tensor (which may require grad)."""
    if isinstance(value, Tensor):
        if value.ndim != 0:
            raise ValueError(f"{op}: only a 0-dim tensor can be the fill value; got one "
                             f"of shape {value.shape}")
        return value
    if not isinstance(value, bool | int | float | np.generic):
        raise TypeError(f"{op}: value must be a number or a 0-dim tensor, got "
                        f"{type(value).__name__}")
    return value


def masked_fill_(t: Tensor, mask: Any, value: Any) -> Tensor:
    """``t`` with ``value`` where ``mask`` (bool, broadcast to ``t``'s shape) holds, in
    place."""
    return assign("masked_fill_", t, (_mask("masked_fill_", t, mask),),
                   _fill_value("masked_fill_", value))


def index_put_(t: Tensor, indices: tuple, values: Any, accumulate: bool = False) -> Tensor:
    """``t[indices] = values`` in place (``+=`` with ``accumulate``, repeated positions
    summing), ``indices`` a tuple of integer or bool tensors (``torch.index_put_``)."""
    if not isinstance(indices, tuple | list):
        raise TypeError(f"index_put_: indices must be a tuple of tensors, got "
                        f"{type(indices).__name__}")
    index = normalize_index(tuple(indices), t.shape, "index_put_")
    return assign("index_put_", t, index, values, accumulate=bool(accumulate))


def index_fill_(t: Tensor, dim: int, index: Any, value: Any) -> Tensor:
    """The entries ``index`` (1-D) of ``t`` along ``dim`` set to ``value``, in place."""
    dim = one_dim("index_fill_", dim, t.shape)
    positions = _index_tensor("index_fill_", index)
    if positions.ndim > 1:
        raise ValueError(f"index_fill_: index must be 1-D, got shape {positions.shape}")
    value = _fill_value("index_fill_", value)
    if t.ndim == 0:  # a 0-d tensor is one of size 1 along dim 0, as in PyTorch
        bad = positions[(positions != 0) & (positions != -1)]
        if bad.size:
            raise IndexError(f"index_fill_: index {bad[0]} is out of bounds for dim 0 of "
                             "size 1 (the tensor has shape ())")
        return assign("index_fill_", t, (), value) if positions.size else t
    where = (slice(None),) * dim + (positions.reshape(-1),)
    return assign("index_fill_", t, where, value)


def _scatter_index(op: str, t: Tensor, dim: int, index: Any, src: Tensor | None) -> tuple:
    """The advanced index that puts ``src[i][j][k]`` at ``t[index[i][j][k]][j][k]`` (for
    dim 0; likewise along any dim), checked as PyTorch checks scatter's arguments."""
    positions = _index_tensor(op, index)
    if positions.ndim != t.ndim:
        raise ValueError(f"{op}: index must have as many dims as the tensor ({t.ndim}), got "
                         f"shape {positions.shape}")
    for d, n in enumerate(positions.shape):
        if d != dim and n > t.shape[d]:
            raise ValueError(f"{op}: index of shape {positions.shape} is larger than the "
                             f"tensor's shape {t.shape} in dim {d}")
        if src is not None and n > src.shape[d]:
            raise ValueError(f"{op}: index of shape {positions.shape} is larger than src's "
                             f"shape {src.shape} in dim {d}")
    if positions.size and (positions.min() < 0 or positions.max() >= t.shape[dim]):
        bad = positions.min() if positions.min() < 0 else positions.max()
        raise IndexError(f"{op}: index {bad} is out of bounds for dim {dim} of size "
                         f"{t.shape[dim]}")
    grid = np.indices(positions.shape, sparse=True)
    return tuple(positions if d == dim else grid[d] for d in range(t.ndim))


def _scatter_arguments(src: Any, value: Any, reduce: Any) -> tuple[Any, Any]:
    """(src, value) of scatter's forms: a number given as ``src`` is the value (PyTorch's
    ``scatter(dim, index, value)`` overload)."""
    if isinstance(src, bool | int | float | np.generic) and value is None:
        src, value = None, src
    if (src is None) == (value is None):
        raise TypeError("scatter_: give exactly one of src and value")
    if reduce not in (None, "add", "multiply"):
        raise ValueError(f"scatter_: reduce must be None, 'add' or 'multiply', got {reduce!r}")
    return src, value


def scatter_(t: Tensor, dim: int, index: Any, src: Any = None, *, value: Any = None,
             reduce: str | None = None) -> Tensor:
    """``t[index[i][j][k]][j][k] = src[i][j][k]`` for dim 0 (likewise along any dim), in
    place; ``value`` (keyword, or a number in place of ``src``) instead of ``src``;
    ``reduce='add'`` adds (repeated positions summing), ``reduce='multiply'`` multiplies
    (repeated positions multiplying; no gradient, as in PyTorch, so it refuses tensors
    that would record one). Where ``index`` repeats a position without ``reduce``, one of
    the values is written (which one is unspecified, as in PyTorch). A 0-d tensor is one
    of size 1 along dim 0."""
    src, value = _scatter_arguments(src, value, reduce)
    if t.ndim == 0:
        return assign("scatter_", t, (Ellipsis,),
                      scatter(t, dim, index, src, value=value, reduce=reduce))
    dim = one_dim("scatter_", dim, t.shape)
    if src is not None:
        src = lift(src, t)
        if src.ndim != t.ndim:
            raise ValueError(f"scatter_: src must have as many dims as the tensor "
                             f"({t.ndim}), got shape {src.shape}")
    where = _scatter_index("scatter_", t, dim, index, src)
    if src is None:
        written = _fill_value("scatter_", value)
    else:
        positions_shape = np.shape(where[dim])
        region = tuple(slice(0, n) for n in positions_shape)
        written = src if src.shape == positions_shape else src[region]
    if reduce == "multiply":
        return _scatter_multiply(t, where, written)
    return assign("scatter_", t, where, written, accumulate=reduce == "add")


def _scatter_multiply(t: Tensor, where: tuple, written: Any) -> Tensor:
    """``t[where] *= written`` in place, repeated positions multiplying. PyTorch has no
    derivative for it ("derivative for aten::scatter is not implemented"), so rather than
    a graph that fails at backward, it refuses operands that would be recorded."""
    if _records(t, written):
        raise RuntimeError("scatter_: reduce='multiply' has no gradient (PyTorch's neither); "
                           "call it under nb.no_grad() or on detached tensors "
                           f"(tensor of shape {t.shape})")
    values = written._data if isinstance(written, Tensor) else np.asarray(written)
    np.multiply.at(t._writable("scatter_"), where, values.astype(t.dtype, copy=False))
    return t


def scatter_add_(t: Tensor, dim: int, index: Any, src: Any) -> Tensor:
    """``scatter_(dim, index, src, reduce='add')``."""
    return scatter_(t, dim, index, src, reduce="add")


def copy_(t: Tensor, src: Any) -> Tensor:
    """``src`` (broadcast to ``t``'s shape, cast to its dtype) copied into ``t``."""
    return assign("copy_", t, (Ellipsis,), src)


def fill_(t: Tensor, value: Any) -> Tensor:
    """Every element of ``t`` set to ``value`` (a number or a 0-dim tensor)."""
    return assign("fill_", t, (Ellipsis,), _fill_value("fill_", value))


def zero_(t: Tensor) -> Tensor:
    return fill_(t, 0)


# -- the out-of-place forms --------------------------------------------------------------------
@register("clone", samples=lambda rng: [Sample(rng.standard_normal((3, 4)))])
class Clone(Function):
    """A copy with its own memory; the gradient passes unchanged."""

    @staticmethod
    def forward(ctx, x):
        return x.copy()

    @staticmethod
    def backward(ctx, g):
        return g

    @staticmethod
    def vjp(ctx, g):
        return g


def clone(x: Any, *, memory_format: Any = None) -> Tensor:
    """A copy of ``x`` in new memory, in the graph (``torch.clone``). ``memory_format``
    (``nb.preserve_format``, ``nb.contiguous_format``, ``nb.channels_last``) is accepted
    and has no effect: the copy is C-contiguous, and no value depends on the layout."""
    x = lift(x)
    check_memory_format(memory_format, "clone", x.ndim)
    return Clone.apply(x)


def masked_fill(t: Any, mask: Any, value: Any) -> Tensor:
    """A copy of ``t`` with ``value`` where ``mask`` holds (``torch.masked_fill``): the
    result has the broadcast shape of ``t`` and ``mask``, which may be larger than
    ``t``'s (``t`` is broadcast first; the in-place form keeps ``t``'s shape)."""
    t = lift(t)
    array = mask._data if isinstance(mask, Tensor) else np.asarray(mask)
    if not _broadcasts(array.shape, t.shape):
        try:
            shape = np.broadcast_shapes(array.shape, t.shape)
        except ValueError:
            raise ValueError(f"masked_fill: a mask of shape {array.shape} does not broadcast "
                             f"with the tensor's shape {t.shape}") from None
        t = t.expand(shape)
    return masked_fill_(clone(t), mask, value)


def index_put(t: Any, indices: tuple, values: Any, accumulate: bool = False) -> Tensor:
    """A copy of ``t`` with ``values`` put at ``indices`` (see ``index_put_``)."""
    return index_put_(clone(t), indices, values, accumulate)


def index_fill(t: Any, dim: int, index: Any, value: Any) -> Tensor:
    """A copy of ``t`` with the entries ``index`` along ``dim`` set to ``value``."""
    return index_fill_(clone(t), dim, index, value)


def scatter(t: Any, dim: int, index: Any, src: Any = None, *, value: Any = None,
            reduce: str | None = None) -> Tensor:
    """A copy of ``t`` with ``src`` (or ``value``) scattered along ``dim`` (see
    ``scatter_``; ``reduce`` None, 'add' or 'multiply')."""
    t = lift(t)
    if t.ndim:
        return scatter_(clone(t), dim, index, src, value=value, reduce=reduce)
    # a 0-d tensor is one of size 1 along dim 0 (PyTorch): scatter into that, then back
    src, value = _scatter_arguments(src, value, reduce)
    positions = _index_tensor("scatter_", index)
    if src is not None:
        src = lift(src, t)
        src = src if src.ndim else reshape(src, 1)
    one = scatter_(clone(reshape(t, 1)), dim, positions.reshape(positions.shape or (1,)), src,
                   value=value, reduce=reduce)
    return reshape(one, ())


# -- arithmetic in place ----------------------------------------------------------------------
def _in_place(op: str, t: Tensor, compute: Callable[[Tensor], Tensor], *others: Any) -> Tensor:
    """``t = compute(t)`` in place. The result must keep ``t``'s shape and cast to its
    dtype as PyTorch allows (``same_kind``: no float result into an integer tensor)."""
    if not _records(t, *others):
        new = compute(t)
        _check_result(op, t, new)
        np.copyto(t._writable(op), new._data, casting="unsafe")
        return t
    _check_target(op, t)
    old = _old(t, t._data.copy())
    new = compute(old)
    _check_result(op, t, new)
    if new.dtype != t.dtype:
        new = new.to(t.dtype)
    np.copyto(t._data, new._data)
    _rebase(t, old, new)
    return t


def _check_result(op: str, t: Tensor, new: Tensor) -> None:
    if new.shape != t.shape:
        raise RuntimeError(f"{op}: the result of shape {new.shape} cannot be written in "
                           f"place into a tensor of shape {t.shape}")
    if not np.can_cast(new.dtype, t.dtype, "same_kind"):
        raise RuntimeError(f"{op}: result type {new.dtype} can't be cast to the desired "
                           f"output type {t.dtype}")


def add_(t: Tensor, other: Any, *, alpha: Any = 1) -> Tensor:
    """``t += alpha * other``, in place."""
    return _in_place("add_", t, lambda x: elementwise.add(x, other, alpha=alpha), other)


def sub_(t: Tensor, other: Any, *, alpha: Any = 1) -> Tensor:
    """``t -= alpha * other``, in place."""
    return _in_place("sub_", t, lambda x: elementwise.sub(x, other, alpha=alpha), other)


def mul_(t: Tensor, other: Any) -> Tensor:
    """``t *= other``, in place."""
    return _in_place("mul_", t, lambda x: elementwise.mul(x, other), other)


def div_(t: Tensor, other: Any, *, rounding_mode: str | None = None) -> Tensor:
    """``t /= other``, in place (true division unless ``rounding_mode``)."""
    return _in_place("div_", t,
                     lambda x: elementwise.div(x, other, rounding_mode=rounding_mode), other)


def pow_(t: Tensor, exponent: Any) -> Tensor:
    """``t **= exponent``, in place."""
    return _in_place("pow_", t, lambda x: elementwise.pow(x, exponent), exponent)


def clamp_(t: Tensor, min: Any = None, max: Any = None) -> Tensor:
    """``t`` clamped to [min, max], in place."""
    return _in_place("clamp_", t, lambda x: activation.clamp(x, min, max), min, max)


def _unary_in_place(name: str, fn: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    def method(t: Tensor) -> Tensor:
        return _in_place(name, t, fn)
    method.__name__ = name
    method.__doc__ = f"``{fn.__name__}`` in place."
    return method


UNARY_IN_PLACE = {f"{fn.__name__}_": _unary_in_place(f"{fn.__name__}_", fn) for fn in (
    elementwise.neg, elementwise.exp, elementwise.log, elementwise.sqrt, elementwise.abs,
    elementwise.sin, elementwise.cos, activation.tanh, activation.sigmoid, activation.relu)}

__all__ = ["clone", "index_fill", "index_put", "masked_fill", "scatter"]
