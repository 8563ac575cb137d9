"""Function subclasses that wire kernels into autodiff, and the public op functions.

One module per kernel family; each lists its public names in ``__all__``, which
``nbgrad/__init__.py`` re-exports. Importing this package installs the Tensor's operators
and methods: each is the public function of the same name (``x.relu()`` is ``relu(x)``).
"""

from __future__ import annotations

from ..tensor import Tensor
from . import activation, elementwise, indexing, matmul, reduce, select, shape

_METHODS = {
    elementwise: ["add", "sub", "mul", "div", "pow", "neg", "exp", "log", "sqrt", "abs", "to",
                  "sin", "cos", "erf", "square"],
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
}

_OPERATORS = {
    "__add__": (elementwise.add, False), "__radd__": (elementwise.add, True),
    "__sub__": (elementwise.sub, False), "__rsub__": (elementwise.sub, True),
    "__mul__": (elementwise.mul, False), "__rmul__": (elementwise.mul, True),
    "__truediv__": (elementwise.div, False), "__rtruediv__": (elementwise.div, True),
    "__pow__": (elementwise.pow, False), "__rpow__": (elementwise.pow, True),
    "__matmul__": (matmul.matmul, False), "__rmatmul__": (matmul.matmul, True),
    "__getitem__": (shape.getitem, False),
}


def _reflected(fn):
    def method(self, other):
        return fn(other, self)
    method.__name__ = fn.__name__
    method.__doc__ = f"``other {fn.__name__} self``: see ``nbgrad.{fn.__name__}``."
    return method


def _install() -> None:
    for module, names in _METHODS.items():
        for name in names:
            setattr(Tensor, name, getattr(module, name))
    for dunder, (fn, reflected) in _OPERATORS.items():
        setattr(Tensor, dunder, _reflected(fn) if reflected else fn)
    Tensor.__neg__ = elementwise.neg
    Tensor.__abs__ = elementwise.abs
    Tensor.__pos__ = lambda self: self
    # dims this property builds are valid: Permute directly, without permute's checks
    Tensor.T = property(
        lambda self: shape.Permute.apply(self, dims=tuple(range(self.ndim - 1, -1, -1))),
        doc="The dims in reverse order (a view).")


_install()
