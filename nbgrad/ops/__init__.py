"""Function subclasses that wire kernels into autodiff, and the public op functions.

One module per kernel family; each lists its public names in ``__all__``, which
``nbgrad/__init__.py`` re-exports. Importing this package installs the Tensor's operators
and methods: each is the public function of the same name (``x.relu()`` is ``relu(x)``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..tensor import Tensor
from . import (
    activation,
    attention,
    compare,
    convert,
    elementwise,
    factories,
    group_norm,
    indexing,
    inplace,
    layout,
    linalg,
    matmul,
    pointwise_math,
    reduce,
    resample,
    scan,
    select,
    shape,
    sort,
)

_METHODS = {
    elementwise: ["add", "sub", "mul", "div", "pow", "neg", "exp", "log", "sqrt", "abs",
                  "sin", "cos", "erf", "square"],
    pointwise_math: ["log1p", "expm1", "reciprocal", "rsqrt", "floor", "ceil", "trunc",
                     "round", "frac", "sign", "fmod", "remainder", "floor_divide",
                     "clamp_min", "clamp_max"],
    convert.TensorMethods: convert.NAMES,  # to (dtype, device, tensor), float(), cpu(), ...
    matmul: ["matmul"],
    reduce: ["sum", "mean", "max", "min", "amax", "amin", "sum_to_size", "var", "std", "norm",
             "argmax", "argmin"],
    shape: ["reshape", "view", "transpose", "permute", "broadcast_to", "flatten", "split",
            "chunk", "squeeze", "unsqueeze", "size"],
    indexing: ["gather", "scatter_add", "index_select"],
    select: ["maximum", "minimum"],
    select.TensorMethods: ["where"],  # x.where(condition, y) = where(condition, x, y)
    activation: ["tanh", "sigmoid", "relu", "leaky_relu", "elu", "gelu", "gelu_quick", "silu",
                 "softplus", "clamp", "softmax", "log_softmax", "logsumexp"],
    factories: ["new_zeros", "new_ones", "new_full", "new_empty", "new_tensor", "type_as",
                "view_as", "dim", "contiguous"],
    scan: ["cumsum", "cumprod", "diff", "prod"],
    attention: [],
    resample: [],
    group_norm: [],
    linalg: [],
    sort: ["sort", "argsort", "topk", "unique"],
    layout: ["expand", "expand_as", "repeat", "tile", "flip", "fliplr", "flipud", "roll", "diag",
             "diagonal", "diag_embed", "tril", "triu", "outer", "bmm", "addmm", "baddbmm",
             "masked_select", "nonzero", "argwhere"],
    compare: ["eq", "ne", "lt", "le", "gt", "ge", "not_equal", "less", "less_equal", "greater",
              "greater_equal", "equal", "isclose", "allclose", "isnan", "isinf", "isfinite",
              "logical_and", "logical_or", "logical_xor", "logical_not", "bitwise_and",
              "bitwise_or", "bitwise_xor", "bitwise_not", "any", "all"],
}

_IN_PLACE = ["clone", "masked_fill", "masked_fill_", "index_put", "index_put_", "index_fill",
             "index_fill_", "scatter", "scatter_", "scatter_add_", "copy_", "fill_", "zero_",
             "add_", "sub_", "mul_", "div_", "pow_", "clamp_"]

# Binary operators that also have a reflected form: ``__add__`` and ``__radd__`` (``2 + t``)
_REFLECTED = {"add": elementwise.add, "sub": elementwise.sub, "mul": elementwise.mul,
              "truediv": elementwise.div, "pow": elementwise.pow, "matmul": matmul.matmul,
              "and": compare.bitwise_and, "or": compare.bitwise_or, "xor": compare.bitwise_xor,
              "mod": pointwise_math.remainder, "floordiv": pointwise_math.floor_divide}
_OPERATORS = {"__getitem__": shape.getitem, "__setitem__": inplace.setitem,
              "__iadd__": inplace.add_, "__isub__": inplace.sub_, "__imul__": inplace.mul_,
              "__itruediv__": inplace.div_}

# Python reflects a comparison itself (``3 < t`` is ``t > 3``), so none needs a reflected form
_COMPARISONS = {"__eq__": compare.eq, "__ne__": compare.ne, "__lt__": compare.lt,
                "__le__": compare.le, "__gt__": compare.gt, "__ge__": compare.ge}
_COMPARABLE = (Tensor, np.ndarray, np.generic, bool, int, float)


def _reflected(fn):
    def method(self, other):
        return fn(other, self)
    method.__name__ = fn.__name__
    method.__doc__ = f"``other {fn.__name__} self``: see ``nbgrad.{fn.__name__}``."
    return method


def _comparison(fn: Callable[[Any, Any], Tensor]) -> Callable[[Tensor, Any], Any]:
    """``fn`` as a comparison operator: ``NotImplemented`` for an operand that is not a
    tensor, an array or a number, so Python falls back as it does for PyTorch's tensors
    (``t == None`` is False by identity, ``t < None`` a TypeError)."""
    def method(self, other):
        if not isinstance(other, _COMPARABLE):
            return NotImplemented
        return fn(self, other)
    method.__name__ = fn.__name__
    method.__doc__ = f"``self {fn.__name__} other``: see ``nbgrad.{fn.__name__}``."
    return method


def _contains(self: Tensor, value: Any) -> bool:
    """``value in t``: whether any element equals ``value`` (PyTorch's rule)."""
    return bool(compare.eq(self, value).any())


def _install() -> None:
    for module, names in _METHODS.items():
        for name in names:
            setattr(Tensor, name, getattr(module, name))
    for name in _IN_PLACE:
        setattr(Tensor, name, getattr(inplace, name))
    for name, method in inplace.UNARY_IN_PLACE.items():
        setattr(Tensor, name, method)
    for name, fn in _REFLECTED.items():
        setattr(Tensor, f"__{name}__", fn)
        setattr(Tensor, f"__r{name}__", _reflected(fn))
    for dunder, fn in _OPERATORS.items():
        setattr(Tensor, dunder, fn)
    for dunder, fn in _COMPARISONS.items():
        setattr(Tensor, dunder, _comparison(fn))
    Tensor.__hash__ = object.__hash__  # by identity, though == is element-wise (PyTorch)
    Tensor.__invert__ = compare.bitwise_not
    Tensor.__contains__ = _contains
    Tensor.__neg__ = elementwise.neg
    Tensor.__abs__ = elementwise.abs
    Tensor.__pos__ = lambda self: self
    # dims this property builds are valid: Permute directly, without permute's checks
    Tensor.T = property(
        lambda self: shape.Permute.apply(self, dims=tuple(range(self.ndim - 1, -1, -1))),
        doc="The dims in reverse order (a view).")


_install()
