"""Comparisons, logic and value tests: bool (or integer) tensors outside the graph.

* ``eq ne lt le gt ge`` and the operators ``== != < <= > >=``: element-wise, the operands
  broadcast the NumPy way and compared in their promoted dtype as PyTorch promotes
  (float64 over float32 over integers, so int64 with float32 compares in float32; a
  Python number takes the tensor's dtype, ``tensor.lift``). NaN is unequal to everything,
  itself included. Two differences from PyTorch: a 0-d tensor promotes like any other
  (PyTorch lets an n-d float32 tensor win over a 0-d float64 one, as over a Python
  float), and a Python int outside an integer tensor's range compares by value (PyTorch
  wraps it to the tensor's width, so its ``int32 == 2**40`` can be true).
* ``isclose``: PyTorch's test ``a == b or |a - b| <= atol + |rtol b|`` with the error
  finite (so equal infinities are close, different ones are not), ``or`` both NaN with
  ``equal_nan``; the tolerances are taken in the operands' promoted dtype (an integer
  or bool pair compares its error in float32, as PyTorch). Unlike PyTorch, operands of
  different dtypes are promoted instead of refused. ``allclose`` is ``isclose`` for
  every element; ``equal`` is "same shape and every element equal" (Python bools).
* ``isnan isinf isfinite``: integer and bool tensors are finite.
* ``logical_and/or/xor/not``: operands as truth values (non-zero and NaN are true).
* ``bitwise_and/or/xor/not`` (``& | ^ ~``): bool and integer tensors only; logical on
  bools, two's-complement bitwise on integers, a bool with an integer is an integer,
  as PyTorch.
* ``any``/``all`` over ``dim`` (int, tuple or None for every dim), ``keepdim``.

None of them has a gradient (PyTorch's comparisons and logic are not differentiable),
so each is one NumPy ufunc over the arrays: there is no backward loop to write. The
operators (installed by ``ops/__init__.py``) give ``NotImplemented`` for an operand that
is not a tensor, an array or a number, so ``t == None`` is False and ``t < None`` a
TypeError, as in PyTorch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..dtypes import default_numpy
from ..kernels.strided_apply import broadcast_shapes
from ..tensor import Tensor, lift
from ._args import axes, dim_arg, keepdim_arg, promoted, real


# -- operands --------------------------------------------------------------------------------
def _pair(op: str, a: Any, b: Any) -> tuple[np.ndarray, np.ndarray]:
    """The arrays of a and b (a Python number takes the other operand's dtype, ``lift``),
    each in its own dtype; ValueError naming the op unless their shapes broadcast."""
    ta = lift(a, like=b if isinstance(b, Tensor) else None)
    tb = lift(b, like=ta)
    broadcast_shapes(op, ta.shape, tb.shape)
    return ta._data, tb._data


def _comparable(op: str, a: Any, b: Any) -> tuple[Any, Any]:
    """The two operands of a comparison in their promoted dtype; a Python int that does
    not fit its integer tensor's dtype stays a Python int, which NumPy compares exactly
    with an integer array (a bool array is widened to int64 for that)."""
    try:
        return promoted(*_pair(op, a, b))
    except OverflowError:
        x, y = (v._data if isinstance(v, Tensor) else v for v in (a, b))
        x, y = (v.astype(np.int64) if isinstance(v, np.ndarray) and v.dtype.kind == "b"
                else v for v in (x, y))
        broadcast_shapes(op, np.shape(x), np.shape(y))
        return x, y


def _result(array: Any) -> Tensor:
    """A result array (or NumPy scalar, from 0-d operands) as a tensor outside the graph."""
    return Tensor._wrap(np.asarray(array), None, 0)


def _binary(name: str, ufunc: np.ufunc, operands: Callable, doc: str) -> Callable:
    """The public function ``name(a, b)``: ``ufunc`` over ``operands(name, a, b)`` (the
    operands' arrays, checked), as a tensor outside the graph."""
    def fn(a: Any, b: Any) -> Tensor:
        return _result(ufunc(*operands(name, a, b)))

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return fn


# -- comparisons ----------------------------------------------------------------------------
eq = _binary("eq", np.equal, _comparable,
             """a == b element-wise (broadcast; bool); NaN == NaN is False.""")
ne = _binary("ne", np.not_equal, _comparable,
             """a != b element-wise (broadcast; bool); NaN != anything is True.""")
lt = _binary("lt", np.less, _comparable,
             """a < b element-wise (broadcast; bool); False where either is NaN.""")
le = _binary("le", np.less_equal, _comparable,
             """a <= b element-wise (broadcast; bool); False where either is NaN.""")
gt = _binary("gt", np.greater, _comparable,
             """a > b element-wise (broadcast; bool); False where either is NaN.""")
ge = _binary("ge", np.greater_equal, _comparable,
             """a >= b element-wise (broadcast; bool); False where either is NaN.""")

# PyTorch's longer names for the same functions
not_equal, less, less_equal, greater, greater_equal = ne, lt, le, gt, ge


def equal(a: Any, b: Any) -> bool:
    """True if a and b have the same shape and every element is equal (``torch.equal``:
    no broadcasting; dtypes promote; any NaN makes it False)."""
    x = lift(a, like=b if isinstance(b, Tensor) else None)
    y = lift(b, like=x)
    return x.shape == y.shape and bool(np.array_equal(*promoted(x._data, y._data)))


def isclose(a: Any, b: Any, rtol: float = 1e-05, atol: float = 1e-08,
            equal_nan: bool = False) -> Tensor:
    """Element-wise ``a == b or (|a - b| finite and <= atol + |rtol b|)``, also true where
    both are NaN with ``equal_nan`` (``torch.isclose``; see the module docstring for the
    dtypes). Not symmetric: the relative tolerance scales ``b``."""
    rtol, atol = real("isclose", "rtol", rtol), real("isclose", "atol", atol)
    if not (rtol >= 0 and atol >= 0):
        raise ValueError(f"isclose: rtol and atol must be >= 0, got rtol={rtol} and "
                         f"atol={atol}")
    x, y = promoted(*_pair("isclose", a, b))
    close = x == y
    if equal_nan and x.dtype.kind == "f":
        close |= np.isnan(x) & np.isnan(y)
    if rtol == 0 and atol == 0:
        return _result(close)
    if x.dtype.kind == "b":
        x, y = x.astype(default_numpy()), y.astype(default_numpy())
    tol = x.dtype if x.dtype.kind == "f" else default_numpy()
    with np.errstate(over="ignore", invalid="ignore"):
        allowed = tol.type(atol) + np.abs(tol.type(rtol) * y.astype(tol, copy=False))
        error = np.abs(x - y)  # an integer error is compared in float32, as PyTorch
        close |= np.isfinite(error) & (error.astype(tol, copy=False) <= allowed)
    return _result(close)


def allclose(a: Any, b: Any, rtol: float = 1e-05, atol: float = 1e-08,
             equal_nan: bool = False) -> bool:
    """True if ``isclose(a, b, rtol, atol, equal_nan)`` holds for every element (the
    operands broadcast), as ``torch.allclose``."""
    return bool(np.all(isclose(a, b, rtol, atol, equal_nan)._data))


# -- value tests ---------------------------------------------------------------------------
def isnan(x: Any) -> Tensor:
    """Where x is NaN (bool; all False for integer and bool tensors)."""
    return _result(np.isnan(lift(x)._data))


def isinf(x: Any) -> Tensor:
    """Where x is +inf or -inf (bool)."""
    return _result(np.isinf(lift(x)._data))


def isfinite(x: Any) -> Tensor:
    """Where x is neither NaN nor infinite (bool; all True for integers and bools)."""
    return _result(np.isfinite(lift(x)._data))


# -- logic ---------------------------------------------------------------------------------
logical_and = _binary("logical_and", np.logical_and, _pair,
                      """a and b element-wise, each element taken as a truth value (non-zero
                      is true; bool).""")
logical_or = _binary("logical_or", np.logical_or, _pair,
                     """a or b element-wise (truth values; bool).""")
logical_xor = _binary("logical_xor", np.logical_xor, _pair,
                      """Exactly one of a and b element-wise (truth values; bool).""")


def logical_not(x: Any) -> Tensor:
    """not x element-wise (zero is false, everything else true, NaN included; bool)."""
    return _result(np.logical_not(lift(x)._data))


def _integers(op: str, *arrays: np.ndarray) -> None:
    """TypeError naming the op unless every array is bool or integer (PyTorch has no
    bitwise ops on floats)."""
    for a in arrays:
        if a.dtype.kind not in "biu":
            raise TypeError(f"{op}: only bool and integer tensors are supported, got "
                            f"{a.dtype} (shape {a.shape}), as in PyTorch")


def _integer_pair(op: str, a: Any, b: Any) -> tuple[np.ndarray, np.ndarray]:
    x, y = _pair(op, a, b)
    _integers(op, x, y)
    return x, y


bitwise_and = _binary("bitwise_and", np.bitwise_and, _integer_pair,
                      """a & b: logical and of bools, bitwise and of integers (NumPy's
                      integer dtype).""")
bitwise_or = _binary("bitwise_or", np.bitwise_or, _integer_pair,
                     """a | b: logical or of bools, bitwise or of integers.""")
bitwise_xor = _binary("bitwise_xor", np.bitwise_xor, _integer_pair,
                      """a ^ b: logical xor of bools, bitwise xor of integers.""")


def bitwise_not(x: Any) -> Tensor:
    """~x: logical not of a bool tensor, the two's complement -x - 1 of an integer one."""
    x = lift(x)
    _integers("bitwise_not", x._data)
    return _result(np.invert(x._data))


# -- any, all ------------------------------------------------------------------------------
def _truth_reduce(op: str, reduce: Callable, x: Any, dim: Any, keepdim: Any, axis: Any,
                  keepdims: Any) -> Tensor:
    x = lift(x)
    reduced = axes(op, dim_arg(op, dim, axis), x.shape)
    keep = keepdim_arg(op, keepdim, keepdims)
    return _result(reduce(x._data, axis=reduced, keepdims=keep))


def any(x: Any, dim: Any = None, keepdim: bool | None = None, *, axis: Any = None,
        keepdims: bool | None = None) -> Tensor:
    """Whether any element over ``dim`` (int, tuple, or None for all) is true (non-zero
    or NaN); False over an empty dim. Bool; ``axis``/``keepdims`` as NumPy spells them."""
    return _truth_reduce("any", np.any, x, dim, keepdim, axis, keepdims)


def all(x: Any, dim: Any = None, keepdim: bool | None = None, *, axis: Any = None,
        keepdims: bool | None = None) -> Tensor:
    """Whether every element over ``dim`` is true (non-zero or NaN); True over an empty
    dim. Bool."""
    return _truth_reduce("all", np.all, x, dim, keepdim, axis, keepdims)


__all__ = ["eq", "ne", "lt", "le", "gt", "ge", "not_equal", "less", "less_equal", "greater",
           "greater_equal", "equal", "isclose", "allclose", "isnan", "isinf", "isfinite",
           "logical_and", "logical_or", "logical_xor", "logical_not", "bitwise_and",
           "bitwise_or", "bitwise_xor", "bitwise_not", "any", "all"]
