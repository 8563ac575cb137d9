"""Linear, convolution and pooling layers, Flatten and Identity, with PyTorch's
constructor arguments, parameter shapes and default initialisation: weights
kaiming-uniform with a = sqrt(5), i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and biases
U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..dtypes import default_numpy
from ..ops._args import float_dtype, is_int
from ..ops.conv import conv1d, conv2d, conv_transpose2d
from ..ops.matmul import linear
from ..ops.pool import avg_pool1d, avg_pool2d, max_pool1d, max_pool2d
from ..ops.shape import flatten
from ..tensor import Tensor
from . import init
from .module import Module
from .parameter import Parameter


def _float_dtype(owner: str, dtype: Any) -> np.dtype:
    """A layer's parameter dtype: float32 or float64, the default float dtype for None."""
    return default_numpy() if dtype is None else float_dtype(owner, dtype)


def _positive(owner: str, **sizes: int) -> None:
    for name, value in sizes.items():
        if not is_int(value) or value <= 0:
            raise ValueError(f"{owner}: {name} must be a positive int, got {value!r}")


def _tuple(value: int | tuple, n: int) -> tuple:
    return tuple(value) if isinstance(value, tuple | list) else (value,) * n


def _reset(weight: Parameter, bias: Parameter | None) -> None:
    """PyTorch's default: kaiming_uniform(a=sqrt 5) weights, U(+-1/sqrt(fan_in)) biases."""
    init.kaiming_uniform_(weight, a=math.sqrt(5))
    if bias is not None:
        fan_in, _ = init.fan_in_and_fan_out(weight)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0.0
        init.uniform_(bias, -bound, bound)


class Identity(Module):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        return x


class Linear(Module):
    """y = x W^T + b, W of shape [out_features, in_features]."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 dtype: Any = None) -> None:
        super().__init__()
        _positive("Linear", in_features=in_features, out_features=out_features)
        dtype = _float_dtype("Linear", dtype)
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(np.empty((out_features, in_features), dtype))
        if bias:
            self.bias = Parameter(np.empty(out_features, dtype))
        else:
            self.register_parameter("bias", None)
        _reset(self.weight, self.bias)

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[-1:] != (self.in_features,):
            raise ValueError(f"Linear: input of shape {tuple(x.shape)} does not end in "
                             f"in_features = {self.in_features}")
        return linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class _ConvNd(Module):
    """Shared by the convolution layers: arguments, parameters, repr."""

    dims = 2
    transposed = False

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple,
                 stride: int | tuple = 1, padding: int | tuple | str = 0,
                 dilation: int | tuple = 1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros", dtype: Any = None,
                 output_padding: int | tuple = 0) -> None:
        super().__init__()
        owner = type(self).__name__
        _positive(owner, in_channels=in_channels, out_channels=out_channels, groups=groups)
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"{owner}: in_channels ({in_channels}) and out_channels "
                             f"({out_channels}) must be divisible by groups ({groups})")
        if padding_mode != "zeros":
            raise NotImplementedError(f"{owner}: padding_mode {padding_mode!r} is not "
                                      "supported yet; only 'zeros'")
        n = self.dims
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size, self.stride = _tuple(kernel_size, n), _tuple(stride, n)
        self.padding = padding if isinstance(padding, str) else _tuple(padding, n)
        self.dilation, self.output_padding = _tuple(dilation, n), _tuple(output_padding, n)
        self.padding_mode = padding_mode
        dtype = _float_dtype(owner, dtype)
        pair = (in_channels, out_channels // groups) if self.transposed \
            else (out_channels, in_channels // groups)
        self.weight = Parameter(np.empty(pair + self.kernel_size, dtype))
        if bias:
            self.bias = Parameter(np.empty(out_channels, dtype))
        else:
            self.register_parameter("bias", None)
        _reset(self.weight, self.bias)

    def _args(self) -> dict:
        one = lambda v: v[0] if self.dims == 1 and isinstance(v, tuple) else v  # noqa: E731
        return dict(stride=one(self.stride), padding=one(self.padding),
                    dilation=one(self.dilation), groups=self.groups)

    def extra_repr(self) -> str:
        n = self.dims
        text = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}")
        if self.padding != (0,) * n:
            text += f", padding={self.padding!r}"
        if self.dilation != (1,) * n:
            text += f", dilation={self.dilation}"
        if self.output_padding != (0,) * n:
            text += f", output_padding={self.output_padding}"
        if self.groups != 1:
            text += f", groups={self.groups}"
        if self.bias is None:
            text += ", bias=False"
        return text


class _Conv(_ConvNd):
    """Conv1d and Conv2d: PyTorch's arguments (no output_padding), and the forward through
    the functional op ``convolve``."""

    convolve = staticmethod(conv2d)

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple,
                 stride: int | tuple = 1, padding: int | tuple | str = 0,
                 dilation: int | tuple = 1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros", dtype: Any = None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, dtype)

    def forward(self, x: Tensor) -> Tensor:
        return self.convolve(x, self.weight, self.bias, **self._args())


class Conv1d(_Conv):
    """1-D convolution layer: x [N, C_in, L] -> [N, C_out, L_out] (``conv1d``)."""

    dims = 1
    convolve = staticmethod(conv1d)


class Conv2d(_Conv):
    """2-D convolution layer: x [N, C_in, H, W] -> [N, C_out, H_out, W_out] (``conv2d``)."""


class ConvTranspose2d(_ConvNd):
    """2-D transposed convolution layer, weight [C_in, C_out / groups, kh, kw]
    (``conv_transpose2d``)."""

    transposed = True

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple,
                 stride: int | tuple = 1, padding: int | tuple = 0,
                 output_padding: int | tuple = 0, groups: int = 1, bias: bool = True,
                 dilation: int | tuple = 1, padding_mode: str = "zeros",
                 dtype: Any = None) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, dtype, output_padding)

    def forward(self, x: Tensor) -> Tensor:
        return conv_transpose2d(x, self.weight, self.bias, output_padding=self.output_padding,
                                **self._args())


class MaxPool2d(Module):
    """``max_pool2d`` as a layer (PyTorch's arguments; with ``return_indices`` the
    forward returns ``(y, indices)``)."""

    def __init__(self, kernel_size: int | tuple, stride: int | tuple | None = None,
                 padding: int | tuple = 0, dilation: int | tuple = 1,
                 return_indices: bool = False, ceil_mode: bool = False) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = kernel_size if stride is None else stride
        self.padding, self.dilation = padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def forward(self, x: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        return max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation,
                          ceil_mode=self.ceil_mode, return_indices=self.return_indices)

    def extra_repr(self) -> str:
        # PyTorch's text (return_indices is not shown), so reprs compare equal.
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}, dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class AvgPool2d(Module):
    """``avg_pool2d`` as a layer (PyTorch's arguments)."""

    def __init__(self, kernel_size: int | tuple, stride: int | tuple | None = None,
                 padding: int | tuple = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override: int | None = None) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = kernel_size if stride is None else stride
        self.padding, self.ceil_mode = padding, ceil_mode
        self.count_include_pad, self.divisor_override = count_include_pad, divisor_override

    def forward(self, x: Tensor) -> Tensor:
        return avg_pool2d(x, self.kernel_size, self.stride, self.padding,
                          ceil_mode=self.ceil_mode, count_include_pad=self.count_include_pad,
                          divisor_override=self.divisor_override)

    def extra_repr(self) -> str:
        # PyTorch's text (only kernel_size, stride and padding), so reprs compare equal.
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxPool1d(MaxPool2d):
    """``max_pool1d`` as a layer (PyTorch's arguments and repr)."""

    def forward(self, x: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        return max_pool1d(x, self.kernel_size, self.stride, self.padding, self.dilation,
                          ceil_mode=self.ceil_mode, return_indices=self.return_indices)


class AvgPool1d(Module):
    """``avg_pool1d`` as a layer (PyTorch's arguments and repr)."""

    def __init__(self, kernel_size: int | tuple, stride: int | tuple | None = None,
                 padding: int | tuple = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = kernel_size if stride is None else stride
        self.padding, self.ceil_mode = padding, ceil_mode
        self.count_include_pad = count_include_pad

    def forward(self, x: Tensor) -> Tensor:
        return avg_pool1d(x, self.kernel_size, self.stride, self.padding,
                          ceil_mode=self.ceil_mode, count_include_pad=self.count_include_pad)

    def extra_repr(self) -> str:
        # PyTorch's AvgPool1d keeps its sizes as 1-tuples
        sizes = [(v,) if is_int(v) else tuple(v)
                 for v in (self.kernel_size, self.stride, self.padding)]
        return "kernel_size={}, stride={}, padding={}".format(*sizes)


class Flatten(Module):
    """Merge dims ``start_dim`` .. ``end_dim`` (default: all but the batch dim)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Tensor) -> Tensor:
        return flatten(x, self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"
