"""Fourier neural operator layers: ``SpectralConv1d``, ``SpectralConv2d`` and the ``FNO``
model (Li et al., "Fourier Neural Operator for Parametric PDEs", 2021), channels first.

The complex weights of a spectral convolution are stored as two real parameters,
``weight_real`` and ``weight_imag``, initialised as the original FNO code does:
``scale * U[0, 1)`` for both parts with ``scale = 1 / (in_channels * out_channels)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ops._args import is_int
from ..ops.activation import gelu
from ..ops.pad import pad
from ..ops.spectral import spectral_conv1d, spectral_conv2d
from ..tensor import Tensor
from . import init
from .layers import Conv1d, Conv2d, _float_dtype, _positive
from .module import Module
from .parameter import Parameter


def _fno_weights(owner: Module, shape: tuple, dtype: Any, generator: Any) -> None:
    """weight_real and weight_imag of ``shape``, each scale * U[0, 1)."""
    dtype = _float_dtype(type(owner).__name__, dtype)
    owner.scale = 1.0 / (owner.in_channels * owner.out_channels)
    owner.weight_real = Parameter(np.empty(shape, dtype))
    owner.weight_imag = Parameter(np.empty(shape, dtype))
    init.uniform_(owner.weight_real, 0.0, owner.scale, generator=generator)
    init.uniform_(owner.weight_imag, 0.0, owner.scale, generator=generator)


class SpectralConv1d(Module):
    """x [B, C_in, N] -> [B, C_out, N]: keep the lowest ``modes`` Fourier modes of x, multiply
    them by complex weights [C_in, C_out, modes], transform back (``spectral_conv1d``)."""

    def __init__(self, in_channels: int, out_channels: int, modes: int, dtype: Any = None,
                 generator: Any = None) -> None:
        super().__init__()
        _positive("SpectralConv1d", in_channels=in_channels, out_channels=out_channels,
                  modes=modes)
        self.in_channels, self.out_channels, self.modes = in_channels, out_channels, modes
        _fno_weights(self, (in_channels, out_channels, modes), dtype, generator)

    def forward(self, x: Tensor) -> Tensor:
        return spectral_conv1d(x, self.weight_real, self.weight_imag)

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}, modes={self.modes}"


class SpectralConv2d(Module):
    """x [B, C_in, H, W] -> [B, C_out, H, W]: the Fourier modes [:modes1, :modes2] and
    [-modes1:, :modes2] of rfft2(x), each block multiplied by its own complex weights
    (``weight_real``/``weight_imag`` [2, C_in, C_out, modes1, modes2]: the original FNO's
    weights1 and weights2), transformed back (``spectral_conv2d``)."""

    def __init__(self, in_channels: int, out_channels: int, modes1: int, modes2: int,
                 dtype: Any = None, generator: Any = None) -> None:
        super().__init__()
        _positive("SpectralConv2d", in_channels=in_channels, out_channels=out_channels,
                  modes1=modes1, modes2=modes2)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.modes1, self.modes2 = modes1, modes2
        _fno_weights(self, (2, in_channels, out_channels, modes1, modes2), dtype, generator)

    def forward(self, x: Tensor) -> Tensor:
        return spectral_conv2d(x, self.weight_real, self.weight_imag)

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, modes1={self.modes1}, "
                f"modes2={self.modes2}")


class FNO(Module):
    """Fourier neural operator, channels first: x [B, C_in, *grid] -> [B, C_out, *grid]
    with ``dim`` = 1 (grid N) or 2 (grid H x W).

    As the original FNO: a point-wise lift to ``width`` channels; ``n_layers`` Fourier
    layers v <- gelu(K(v) + W v) (K a spectral convolution, W a point-wise linear map; no
    gelu after the last layer); a point-wise projection width -> ``hidden`` (128) -> gelu
    -> out_channels. The point-wise maps are 1x1 convolutions. ``modes``: an int (every
    spectral dim) or a pair (modes1, modes2). ``padding`` > 0 zero-pads the end of each
    spatial dim after the lift and crops it before the projection (the original code's
    treatment of non-periodic inputs). The grid coordinates, if wanted, are channels of x.
    """

    def __init__(self, in_channels: int, out_channels: int, width: int,
                 modes: int | tuple[int, int], n_layers: int = 4, dim: int = 2,
                 padding: int = 0, hidden: int = 128, dtype: Any = None) -> None:
        super().__init__()
        if dim not in (1, 2):
            raise ValueError(f"FNO: dim must be 1 or 2, got {dim!r}")
        modes = (modes,) * dim if is_int(modes) else tuple(modes)
        if len(modes) != dim:
            raise ValueError(f"FNO: modes must be an int or {dim} ints for dim={dim}, got "
                             f"{modes!r}")
        _positive("FNO", in_channels=in_channels, out_channels=out_channels, width=width,
                  n_layers=n_layers, hidden=hidden, **{f"modes[{i}]": m
                                                       for i, m in enumerate(modes)})
        if not is_int(padding) or padding < 0:
            raise ValueError(f"FNO: padding must be a non-negative int, got {padding!r}")
        self.dim, self.modes, self.padding, self.n_layers = dim, modes, int(padding), n_layers
        pointwise = Conv1d if dim == 1 else Conv2d
        spectral = SpectralConv1d if dim == 1 else SpectralConv2d
        self.lift = pointwise(in_channels, width, 1, dtype=dtype)
        for i in range(n_layers):
            setattr(self, f"spectral{i}", spectral(width, width, *modes, dtype=dtype))
            setattr(self, f"pointwise{i}", pointwise(width, width, 1, dtype=dtype))
        self.proj1 = pointwise(width, hidden, 1, dtype=dtype)
        self.proj2 = pointwise(hidden, out_channels, 1, dtype=dtype)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim != self.dim + 2:
            layout = "[B, C, N]" if self.dim == 1 else "[B, C, H, W]"
            raise ValueError(f"FNO: input must be {self.dim + 2}-D {layout} for dim="
                             f"{self.dim}, got shape {tuple(x.shape)}")
        v = self.lift(x)
        p = self.padding
        if p:
            v = pad(v, (0, p) * self.dim)
        for i in range(self.n_layers):
            v = getattr(self, f"spectral{i}")(v) + getattr(self, f"pointwise{i}")(v)
            if i < self.n_layers - 1:
                v = gelu(v)
        if p:
            v = v[..., :-p] if self.dim == 1 else v[..., :-p, :-p]
        return self.proj2(gelu(self.proj1(v)))

    def extra_repr(self) -> str:
        return f"dim={self.dim}, modes={self.modes}, padding={self.padding}"
