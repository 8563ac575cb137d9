"""``nb.device``: nbgrad runs on the CPU, and says so when a script asks for anything else.

PyTorch scripts name a device everywhere (``x.to(device)``, ``zeros(..., device=d)``,
``model.to('cuda')``). nbgrad accepts the CPU in every form PyTorch writes it ('cpu',
'cpu:0', ``device('cpu', 0)``) and raises for any other device rather than ignoring it:
a script that silently ran on the CPU where it asked for a GPU would mislead its reader.
"""

from __future__ import annotations

from typing import Any

# PyTorch's device types: a string starting with one of these names a device, not a dtype.
DEVICE_TYPES = frozenset({"cpu", "cuda", "mps", "xpu", "xla", "meta", "hip", "ipu", "hpu",
                          "mtia", "maia", "vulkan", "lazy", "ve", "fpga", "opengl", "opencl",
                          "ideep", "mkldnn", "privateuseone"})


class device:  # noqa: N801  (PyTorch's name)
    """A device: ``device('cpu')``, ``device('cpu', 0)``, ``device('cpu:0')`` (the only
    kind nbgrad has). Equal to another device of the same type and index, as in PyTorch."""

    __slots__ = ("type", "index")

    def __init__(self, type: str | device, index: int | None = None):  # noqa: A002
        if isinstance(type, device):
            if index is not None:
                raise TypeError("device: give an index only with a device type string")
            self.type, self.index = type.type, type.index
            return
        self.type, self.index = _parse(type, index, "device")

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, device):
            return NotImplemented
        return self.type == other.type and self.index == other.index

    def __hash__(self) -> int:
        return hash((self.type, self.index))

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self) -> str:
        index = "" if self.index is None else f", index={self.index}"
        return f"device(type={self.type!r}{index})"

    def __reduce__(self) -> tuple:
        return device, (self.type, self.index)


def _parse(spec: Any, index: Any, op: str) -> tuple[str, int | None]:
    """(type, index) of a device string and optional index; raises for a device other
    than the CPU, naming ``op``."""
    if isinstance(spec, int) and not isinstance(spec, bool):
        raise RuntimeError(f"{op}: nbgrad runs on the CPU; got device {spec} (a CUDA "
                           "device index)")
    if not isinstance(spec, str):
        raise TypeError(f"{op}: a device is a string such as 'cpu' or an nbgrad.device, "
                        f"got {type(spec).__name__}")
    kind, _, tail = spec.partition(":")
    if kind not in DEVICE_TYPES:
        raise RuntimeError(f"{op}: unknown device {spec!r}; nbgrad runs on the CPU "
                           "(device 'cpu')")
    if kind != "cpu":
        raise RuntimeError(f"{op}: nbgrad runs on the CPU; got {spec!r}")
    if tail:
        if index is not None or not tail.isdigit():
            raise RuntimeError(f"{op}: invalid device string {spec!r}")
        index = int(tail)
    if index is not None and (not isinstance(index, int) or isinstance(index, bool)
                              or index < 0):
        raise RuntimeError(f"{op}: device index must be a non-negative int, got {index!r}")
    return kind, index


CPU = device("cpu")


def is_device(value: Any) -> bool:
    """Whether ``value`` is meant as a device (a device object or a string naming a
    device type), as opposed to a dtype: how ``Tensor.to``'s arguments are told apart."""
    return isinstance(value, device) or (
        isinstance(value, str) and value.partition(":")[0] in DEVICE_TYPES)


def check_device(value: Any, op: str) -> device:
    """The device a ``device=`` argument names: None and every spelling of the CPU give
    the CPU device; anything else raises, naming ``op`` ("randn: nbgrad runs on the CPU;
    got 'cuda'"). Factories and ``.to`` call it on their ``device`` argument."""
    if value is None or value is CPU:
        return CPU
    if isinstance(value, device):
        return value  # only the CPU can be made
    _parse(value, None, op)
    return CPU


# -- memory formats and layouts: PyTorch's names, accepted and without effect ----------------
class _Named:
    """A constant known by its name: printed as ``nbgrad.<name>`` and pickled as the
    module attribute ``nbgrad.device.<name>``."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"nbgrad.{self.name}"

    def __reduce__(self) -> str:
        return self.name


class memory_format(_Named):  # noqa: N801  (PyTorch's name)
    """A memory format (``nb.preserve_format``, ``nb.contiguous_format``,
    ``nb.channels_last``, ``nb.channels_last_3d``), the ``memory_format=`` argument of
    ``Tensor.to``, ``float()``..., ``clone``, ``contiguous`` and the ``*_like`` factories.
    nbgrad's arrays are C-contiguous (or NumPy views of such) and no value depends on
    the layout, so every format is accepted and none changes anything."""

    __slots__ = ()


class layout(_Named):  # noqa: N801  (PyTorch's name)
    """A tensor layout: only ``nb.strided`` (dense arrays), the ``layout=`` argument of
    PyTorch's factories."""

    __slots__ = ()


preserve_format = memory_format("preserve_format")
contiguous_format = memory_format("contiguous_format")
channels_last = memory_format("channels_last")
channels_last_3d = memory_format("channels_last_3d")
strided = layout("strided")


def check_memory_format(value: Any, op: str, ndim: int | None = None) -> None:
    """Accept a ``memory_format=`` argument (None or an nbgrad memory format, all of them
    no-ops: arrays are always C-contiguous); TypeError naming ``op`` for anything else.
    Given the tensor's ``ndim``, refuse what PyTorch refuses: ``channels_last`` on a
    tensor that is not 4-D, ``channels_last_3d`` on one that is not 5-D (RuntimeError)."""
    if value is None:
        return
    if not isinstance(value, memory_format):
        raise TypeError(f"{op}: memory_format must be nbgrad.preserve_format, "
                        "contiguous_format, channels_last or channels_last_3d, got "
                        f"{value!r}")
    rank = {"channels_last": 4, "channels_last_3d": 5}.get(value.name)
    if ndim is not None and rank is not None and ndim != rank:
        raise RuntimeError(f"{op}: required rank {rank} tensor to use {value.name} format, "
                           f"got a {ndim}-D tensor")


def check_layout(value: Any, op: str) -> None:
    """Accept a ``layout=`` argument: None or ``nb.strided`` (nbgrad's only layout);
    TypeError naming ``op`` for any other value (sparse layouts do not exist here)."""
    if value is not None and value is not strided:
        raise TypeError(f"{op}: layout must be nbgrad.strided (the only layout nbgrad has), "
                        f"got {value!r}")
