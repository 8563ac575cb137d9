"""Tensor conversions with PyTorch's names: ``to`` (a dtype, a device, both, or another
tensor's), ``float double half long int short bool byte char``, ``type``, ``cpu``,
``cuda``, and the ``device``/``is_cpu``/``is_cuda`` properties (installed by
``nbgrad/ops/__init__.py``).

A conversion between float32 and float64 is the differentiable ``to`` op; any other is
cut from the graph, as in PyTorch (an integer or bool tensor has no gradient). float16
is a storage dtype without gradients, so converting a tensor that requires grad to it
raises rather than silently dropping the gradient. The device is always the CPU.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes
from ..autograd import grad_mode
from ..device import CPU, check_device, check_memory_format, is_device
from ..tensor import FLOAT_DTYPES, Tensor
from . import elementwise


def to_arguments(op: str, args: tuple, kwargs: dict) -> tuple[np.dtype | None, bool]:
    """(dtype or None, copy) from the arguments of ``Tensor.to``/``Module.to`` in
    PyTorch's forms: ``to(dtype)``, ``to(device, dtype)``, ``to(other_tensor)`` and the
    keywords ``dtype device copy non_blocking memory_format`` (the last two accepted
    without effect: nbgrad's arrays are always C-contiguous, and no value depends on the
    layout). A device other than the CPU raises, naming ``op``."""
    options = dict(kwargs)
    dtype = options.pop("dtype", None)
    place = options.pop("device", None)
    copy = bool(options.pop("copy", False))
    options.pop("non_blocking", None)
    check_memory_format(options.pop("memory_format", None), op)
    if options:
        raise TypeError(f"{op}: unexpected keyword argument {next(iter(options))!r}")
    rest = list(args)
    if rest and isinstance(rest[0], Tensor):
        dtype = _once(op, dtype, rest.pop(0).dtype)
    elif rest and (is_device(rest[0]) or isinstance(rest[0], int)
                   and not isinstance(rest[0], bool)):
        place = rest.pop(0)
    if rest and not isinstance(rest[0], bool):
        dtype = _once(op, dtype, _dtype_argument(op, rest.pop(0)))
    if len(rest) > 2 or any(not isinstance(a, bool) for a in rest):
        raise TypeError(f"{op}: expected (dtype), (device, dtype) or (tensor), then "
                        f"non_blocking and copy; got {args!r}")
    if len(rest) == 2:
        copy = rest[1]
    check_device(place, op)
    return (None if dtype is None else dtypes.to_numpy(dtype, op)), copy


def _dtype_argument(op: str, value: Any) -> Any:
    """A positional argument taken for a dtype: a string that names neither a device nor
    a NumPy dtype is refused as both."""
    if isinstance(value, str):
        try:
            np.dtype(value)
        except TypeError:
            raise TypeError(f"{op}: {value!r} is neither a device (nbgrad runs on 'cpu') "
                            "nor a dtype") from None
    return value


def _once(op: str, given: Any, value: Any) -> Any:
    if given is not None:
        raise TypeError(f"{op}: the dtype is given twice ({given!r} and {value!r})")
    return value


def convert(x: Tensor, dtype: np.dtype, op: str) -> Tensor:
    """``x`` in ``dtype``: ``x`` itself when it has it; float32 <-> float64 in the
    graph; anything else a new tensor cut from the graph."""
    source = x._data.dtype
    if dtype == source:
        return x
    if dtype in FLOAT_DTYPES and source in FLOAT_DTYPES:
        return elementwise.to(x, dtype)
    if dtype.kind == "f" and x.requires_grad and grad_mode.state.enabled:
        raise TypeError(f"{op}: x (shape {x.shape}) requires grad, and nbgrad's gradients "
                        f"are float32/float64, so it cannot become {dtypes.of(dtype)!r}; "
                        f"convert x.detach() instead")
    return Tensor._wrap(x._data.astype(dtype), None, 0)


def _method(dtype: dtypes.DType, name: str):
    def method(self: Tensor, memory_format: Any = None) -> Tensor:
        check_memory_format(memory_format, name, self.ndim)
        return convert(self, dtype.dtype, name)
    method.__name__ = name
    method.__doc__ = (f"``self`` as {dtype!r} (``self.to({dtype!r})``; PyTorch's "
                      f"``Tensor.{name}()``). ``memory_format`` (``nb.preserve_format``, "
                      "``nb.contiguous_format``, ``nb.channels_last``) is accepted and has "
                      "no effect: arrays are always C-contiguous.")
    return method


class TensorMethods:
    """Installed on Tensor by ``nbgrad/ops/__init__.py``."""

    def to(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        """``self`` in another dtype and/or on a device, PyTorch's ``Tensor.to``:
        ``to(dtype)``, ``to(device, dtype)``, ``to(other)`` (other's dtype),
        ``to(dtype=..., device=..., copy=False, non_blocking=False,
        memory_format=nb.preserve_format)``. ``self`` itself when nothing changes and
        ``copy`` is False; float32 <-> float64 is differentiable, other conversions are cut
        from the graph. ``memory_format`` is a no-op (arrays are always C-contiguous)."""
        dtype, copy = to_arguments("to", args, kwargs)
        check_memory_format(kwargs.get("memory_format"), "to", self.ndim)
        out = self if dtype is None else convert(self, dtype, "to")
        return out.clone() if copy and out is self else out

    float = _method(dtypes.float32, "float")
    double = _method(dtypes.float64, "double")
    half = _method(dtypes.float16, "half")
    long = _method(dtypes.int64, "long")
    int = _method(dtypes.int32, "int")
    short = _method(dtypes.int16, "short")
    char = _method(dtypes.int8, "char")
    byte = _method(dtypes.uint8, "byte")
    bool = _method(dtypes.bool, "bool")

    def type(self: Tensor, dtype: Any = None, non_blocking: Any = False) -> Any:
        """With no argument, PyTorch's type name ('nbgrad.FloatTensor'); with a dtype or a
        type name ('torch.DoubleTensor'), ``self`` converted as by ``to``."""
        if dtype is None:
            return self.dtype.tensor_type
        if isinstance(dtype, str) and dtype.endswith("Tensor"):
            return convert(self, dtypes.from_tensor_type(dtype, "type").dtype, "type")
        return convert(self, dtypes.to_numpy(dtype, "type"), "type")

    def cpu(self: Tensor, memory_format: Any = None) -> Tensor:
        """``self``: tensors are always on the CPU (``memory_format`` is a no-op)."""
        check_memory_format(memory_format, "cpu", self.ndim)
        return self

    def cuda(self: Tensor, device: Any = None, non_blocking: Any = False) -> Tensor:
        """Raises: nbgrad runs on the CPU."""
        raise RuntimeError("cuda: nbgrad runs on the CPU; got 'cuda'")

    def is_floating_point(self: Tensor) -> bool:
        return self._data.dtype.kind == "f"

    def element_size(self: Tensor) -> int:
        """Bytes per element."""
        return self._data.dtype.itemsize

    device = property(lambda self: CPU, doc="The tensor's device: always the CPU.")
    is_cpu = property(lambda self: True, doc="True: tensors are always on the CPU.")
    is_cuda = property(lambda self: False, doc="False: nbgrad runs on the CPU.")


NAMES = ["to", "float", "double", "half", "long", "int", "short", "char", "byte", "bool",
         "type", "cpu", "cuda", "is_floating_point", "element_size", "device", "is_cpu",
         "is_cuda"]
