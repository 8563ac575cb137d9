"""Hypothesis strategies for testing differentiable ops: arrays and tensors, mutually
broadcastable shapes, reduction axes and index expressions (conv parameters and graphs
are re-exported from their own modules at the end).

    from hypothesis import given
    from nbgrad.testing import strategies as nbst

    @given(nbst.broadcastable_shapes(2), nbst.data())
    def test_add(shapes, data): ...
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ..tensor import Tensor

data = st.data


def special_values(dtype=np.float64, huge: bool = True) -> list[float]:
    """The float values of ``dtype`` where ops go wrong: NaN, +-inf, +-0.0, the smallest
    subnormal and the smallest normal of either sign, +-1e30 and (``huge``) the largest
    finite values, whose sums and squares overflow."""
    info = np.finfo(dtype)
    values = [np.nan, np.inf, -np.inf, 0.0, -0.0, float(info.smallest_subnormal),
              -float(info.smallest_subnormal), float(info.tiny), -float(info.tiny), 1e30,
              -1e30]
    return values + [float(info.max), -float(info.max)] if huge else values


def special_floats(dtype=np.float64, min_value: float = -3.0, max_value: float = 3.0,
                   huge: bool = True) -> st.SearchStrategy[float]:
    """Floats of ``dtype``: ``special_values(dtype, huge)`` mixed with ordinary values in
    [min_value, max_value]."""
    width = 32 if np.dtype(dtype) == np.float32 else 64
    return st.one_of(st.sampled_from(special_values(dtype, huge)),
                     st.floats(min_value, max_value, width=width))


def arrays(dtype=np.float64, shape=None, min_value: float = -3.0, max_value: float = 3.0,
           max_dims: int = 4, max_side: int = 5, specials: bool = False,
           huge: bool = True) -> st.SearchStrategy[np.ndarray]:
    """Arrays of finite values in [min_value, max_value]; ``shape`` is a tuple, a strategy
    or None (any shape up to ``max_dims`` dims of side <= ``max_side``). With ``specials``
    (float dtypes), the values are ``special_floats(dtype, min_value, max_value, huge)``:
    NaN, infinities, signed zeros, subnormals and huge values among ordinary ones."""
    dtype = np.dtype(dtype)
    if shape is None:
        shape = hnp.array_shapes(min_dims=0, max_dims=max_dims, min_side=1, max_side=max_side)
    if dtype.kind == "f" and specials:
        elements = special_floats(dtype, min_value, max_value, huge)
    elif dtype.kind == "f":
        width = 32 if dtype == np.float32 else 64
        elements = st.floats(min_value, max_value, allow_nan=False, allow_infinity=False,
                             width=width)
    else:
        elements = st.integers(int(min_value), int(max_value))
    return hnp.arrays(dtype, shape, elements=elements)


def tensors(dtype=np.float64, shape=None, requires_grad: bool = True,
            **kwargs) -> st.SearchStrategy[Tensor]:
    """Tensors over ``arrays(dtype, shape, **kwargs)``."""
    return arrays(dtype, shape, **kwargs).map(
        lambda a: Tensor(a, requires_grad=requires_grad and a.dtype.kind == "f"))


def broadcastable_shapes(num_shapes: int = 2, min_dims: int = 0, max_dims: int = 4,
                         min_side: int = 1, max_side: int = 4
                         ) -> st.SearchStrategy[tuple[tuple[int, ...], ...]]:
    """``num_shapes`` shapes that broadcast together (size-1 axes anywhere, differing
    ranks, 0-d included)."""
    return hnp.mutually_broadcastable_shapes(
        num_shapes=num_shapes, min_dims=min_dims, max_dims=max_dims, min_side=min_side,
        max_side=max_side).map(lambda bs: bs.input_shapes)


@st.composite
def reduction_axes(draw, ndim: int) -> None | int | tuple[int, ...]:
    """An ``axis`` argument for an array of rank ``ndim``: None, an int or a tuple of
    distinct axes, negative ones included."""
    if ndim == 0:
        return draw(st.sampled_from([None, ()]))
    kind = draw(st.sampled_from(["none", "int", "tuple"]))
    if kind == "none":
        return None
    if kind == "int":
        return draw(st.integers(-ndim, ndim - 1))
    axes = draw(st.lists(st.integers(0, ndim - 1), unique=True, max_size=ndim))
    return tuple(a - ndim if draw(st.booleans()) else a for a in axes)


@st.composite
def index_expressions(draw, shape: tuple[int, ...], allow_arrays: bool = True):
    """An index for an array of ``shape``: basic indices (ints, slices with steps and
    negatives, None, Ellipsis) or, when ``allow_arrays``, one axis indexed by an integer
    array with repeats and negative entries."""
    if not allow_arrays or not shape or draw(st.booleans()):
        return draw(hnp.basic_indices(shape, allow_newaxis=True, allow_ellipsis=True))
    axis = draw(st.integers(0, len(shape) - 1))
    size = shape[axis]
    index = draw(hnp.arrays(np.int64, st.integers(1, 6),
                            elements=st.integers(-size, size - 1)))
    return (slice(None),) * axis + (index,)


# Convolution/pooling parameters and point clouds/graphs live in their own modules.
from .strategies_conv import *  # noqa: E402, F403
from .strategies_conv import __all__ as _conv_names  # noqa: E402
from .strategies_graph import *  # noqa: E402, F403
from .strategies_graph import __all__ as _graph_names  # noqa: E402

__all__ = ["arrays", "broadcastable_shapes", "data", "index_expressions", "reduction_axes",
           "special_floats", "special_values", "tensors", *_conv_names, *_graph_names]
