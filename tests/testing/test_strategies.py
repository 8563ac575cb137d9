"""The public hypothesis strategies draw what they promise."""

import numpy as np
from hypothesis import given

from nbgrad.testing import strategies as nbst


@given(nbst.broadcastable_shapes(3, max_dims=6))
def test_broadcastable_shapes_broadcast_together(shapes):
    assert len(shapes) == 3
    np.broadcast_shapes(*shapes)


@given(nbst.data())
def test_reduction_axes_are_valid_numpy_axes(data):
    x = data.draw(nbst.arrays(np.float64, max_dims=4))
    axis = data.draw(nbst.reduction_axes(x.ndim))
    np.sum(x, axis=axis)  # raises for an invalid or repeated axis
    if isinstance(axis, tuple):
        assert len({a % x.ndim for a in axis}) == len(axis)


@given(nbst.data())
def test_index_expressions_index_an_array_of_that_shape(data):
    x = data.draw(nbst.arrays(np.float32, min_value=-1, max_value=1))
    index = data.draw(nbst.index_expressions(x.shape))
    x[index]  # raises for an out-of-range or malformed index
    assert x.dtype == np.float32 and np.all(np.abs(x) <= 1)


@given(nbst.tensors(np.float64, shape=(2, 3)))
def test_float_tensors_require_grad(t):
    assert t.shape == (2, 3) and t.requires_grad
