"""nbgrad's dtype objects (``nb.float32`` ... ``nb.bool``) and the default float dtype.

A dtype object is equal to, and hashes as, the NumPy dtype it stands for
(``nb.float32 == np.float32 == np.dtype('float32')``), so it goes wherever NumPy (or a
Numba kernel) takes a dtype: NumPy reads its ``.dtype`` attribute, and Numba types it as
that dtype. It prints as ``nbgrad.float32``, as PyTorch prints ``torch.float32``; a
Tensor's ``.dtype`` is one of these objects.

float16, int8, int16 and uint8 are storage dtypes: tensors of them are made, converted,
indexed and compared, but the arithmetic kernels are compiled for float32/float64 (and
NumPy's integer ops), and gradients are float32/float64 only.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

import numpy as np
from numba.core.errors import TypingError
from numba.extending import typeof_impl

# What PyTorch's ``Tensor.type()`` calls a tensor of each dtype.
_TENSOR_TYPES = {"float32": "FloatTensor", "float64": "DoubleTensor", "float16": "HalfTensor",
                 "int8": "CharTensor", "int16": "ShortTensor", "int32": "IntTensor",
                 "int64": "LongTensor", "uint8": "ByteTensor", "bool": "BoolTensor"}


class DType:
    """One tensor dtype: NumPy's dtype with PyTorch's name and attributes.

    The common NumPy attributes (``kind``, ``itemsize``, ``name``, ``type``, ``char``,
    ``str``, ``num``) are plain attributes, since ops read them on every call; any other
    attribute is NumPy's. Made once per dtype by this module; compare with ``==``.
    """

    __slots__ = ("dtype", "__numpy_dtype__", "kind", "itemsize", "name", "type", "char", "str",
                 "num", "is_floating_point", "is_signed", "is_complex", "_hash")

    def __init__(self, numpy_dtype: np.dtype):
        # NumPy's protocols: np.dtype(obj) reads obj.__numpy_dtype__ (NumPy >= 2.4, found
        # without the cost of a failed lookup) or obj.dtype
        self.dtype = self.__numpy_dtype__ = numpy_dtype
        for attr in ("kind", "itemsize", "name", "type", "char", "str", "num"):
            setattr(self, attr, getattr(numpy_dtype, attr))
        self.is_floating_point = numpy_dtype.kind == "f"
        self.is_signed = numpy_dtype.kind in "fi"
        self.is_complex = False
        self._hash = hash(numpy_dtype)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.dtype, name)

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, DType):
            return self is other
        if other is None:
            return False  # np.dtype(None) is float64
        try:
            return self.dtype == np.dtype(other)
        except (TypeError, ValueError):
            return NotImplemented

    def __hash__(self) -> int:
        return self._hash  # NumPy's: a DType and its np.dtype are one dict key

    def __repr__(self) -> str:
        return f"nbgrad.{self.name}"

    def __reduce__(self) -> str:
        return self.name  # pickles as the module attribute nbgrad.dtypes.<name>

    @property
    def tensor_type(self) -> str:
        """PyTorch's tensor type name for this dtype ('nbgrad.FloatTensor')."""
        return f"nbgrad.{_TENSOR_TYPES[self.name]}"


float32 = DType(np.dtype(np.float32))
float64 = DType(np.dtype(np.float64))
float16 = DType(np.dtype(np.float16))
int8 = DType(np.dtype(np.int8))
int16 = DType(np.dtype(np.int16))
int32 = DType(np.dtype(np.int32))
int64 = DType(np.dtype(np.int64))
uint8 = DType(np.dtype(np.uint8))
bool = DType(np.dtype(np.bool_))  # noqa: A001  (PyTorch's name; builtins.bool below)
# PyTorch's aliases
float = float32  # noqa: A001
double = float64
half = float16
long = int64
int = int32  # noqa: A001
short = int16

ALL = (float32, float64, float16, int8, int16, int32, int64, uint8, bool)
FLOATS = (float32, float64)  # the dtypes that compute and carry gradients
BY_NUMPY = {d.dtype: d for d in ALL}
_BY_TENSOR_TYPE = {name: BY_NUMPY[np.dtype(key)] for key, name in _TENSOR_TYPES.items()}


@typeof_impl.register(DType)
def _numba_type(value: DType, context: Any) -> Any:
    """A DType passed to a Numba kernel is typed as its NumPy dtype."""
    return typeof_impl(value.dtype, context)


def of(numpy_dtype: np.dtype) -> DType | np.dtype:
    """The DType of an array's dtype (an unsupported one is returned as it is)."""
    return BY_NUMPY.get(numpy_dtype, numpy_dtype)


def to_numpy(dtype: Any, op: builtins.str, arg: builtins.str = "dtype") -> np.dtype:
    """The NumPy dtype a dtype argument names (a DType, a NumPy dtype or type, a NumPy
    name such as 'float32', or Python's float/int/bool: float64/int64/bool, as in
    PyTorch); a TypeError naming ``op`` and ``arg`` for anything that is not a supported
    dtype."""
    if isinstance(dtype, DType):
        return dtype.dtype
    if dtype is None:
        raise TypeError(f"{op}: {arg} must be a dtype, got None")
    try:
        dt = np.dtype(dtype)
    except (TypeError, ValueError):
        raise TypeError(f"{op}: {arg}={dtype!r} is not a dtype; use one of "
                        f"{_names(ALL)}") from None
    if dt not in BY_NUMPY:
        raise TypeError(f"{op}: {arg} {dt} is not supported; use one of {_names(ALL)}")
    return dt


def resolve(dtype: Any, op: builtins.str, arg: builtins.str = "dtype") -> DType:
    """The DType a dtype argument names (see ``to_numpy``)."""
    return BY_NUMPY[to_numpy(dtype, op, arg)]


def from_tensor_type(name: builtins.str, op: builtins.str) -> DType:
    """The DType of a PyTorch tensor type name ('torch.DoubleTensor', 'nbgrad.LongTensor',
    'DoubleTensor')."""
    short_name = name.rsplit(".", 1)[-1]
    if short_name not in _BY_TENSOR_TYPE:
        raise TypeError(f"{op}: unknown tensor type {name!r}; use a dtype or one of "
                        f"{', '.join(_BY_TENSOR_TYPE)}")
    return _BY_TENSOR_TYPE[short_name]


def _names(dtypes: tuple) -> builtins.str:
    return ", ".join(repr(d) for d in dtypes)


# -- the default float dtype -------------------------------------------------------------
class _Default:
    """The dtype Python floats and the float factories give (``set_default_dtype``)."""

    __slots__ = ("dtype",)

    def __init__(self) -> None:
        self.dtype = float32


_default = _Default()


def get_default_dtype() -> DType:
    """The dtype of tensors made from Python floats and of ``zeros``/``randn``/layer
    parameters without a ``dtype=`` (float32 until ``set_default_dtype``)."""
    return _default.dtype


def set_default_dtype(dtype: Any) -> None:
    """Make ``dtype`` (float32 or float64, as PyTorch allows) the default float dtype."""
    d = resolve(dtype, "set_default_dtype")
    if d not in FLOATS:
        raise TypeError(f"set_default_dtype: only float32 and float64 can be the default "
                        f"dtype (gradients are computed in them), got {d!r}")
    _default.dtype = d


def default_numpy() -> np.dtype:
    """The default dtype as NumPy's dtype, for the ops that make arrays in it."""
    return _default.dtype.dtype


# -- storage-only dtypes -----------------------------------------------------------------
def raise_if_storage_only(op: builtins.str, arrays: Sequence, err: Exception) -> None:
    """Raise a TypeError naming ``op`` when ``err`` is Numba refusing a float16 array
    (it has no float16 arithmetic on the CPU, and nbgrad compiles its kernels for
    float32/float64): otherwise return, and the caller re-raises ``err``."""
    if not isinstance(err, NotImplementedError | TypingError):
        return
    for a in arrays:
        if getattr(a, "dtype", None) == float16.dtype:
            raise TypeError(f"{op}: not available for float16 tensors, which are storage "
                            f"only in nbgrad (made, converted, indexed and compared); "
                            f"convert with .float() first") from err
