"""Resampling layers with PyTorch's constructor arguments and ``extra_repr`` text:
Upsample (and UpsamplingNearest2d / UpsamplingBilinear2d), adaptive pooling, pixel
(un)shuffle and Unflatten."""

from __future__ import annotations

import math
from typing import Any

from ..ops._args import is_int, one_dim
from ..ops.resample import (
    adaptive_avg_pool1d,
    adaptive_avg_pool2d,
    adaptive_max_pool2d,
    interpolate,
    pixel_shuffle,
    pixel_unshuffle,
)
from ..tensor import Tensor
from .module import Module


class Upsample(Module):
    """``interpolate`` as a layer (PyTorch's arguments)."""

    def __init__(self, size: int | tuple | None = None,
                 scale_factor: float | tuple | None = None, mode: str = "nearest",
                 align_corners: bool | None = None,
                 recompute_scale_factor: bool | None = None) -> None:
        super().__init__()
        self.name = type(self).__name__
        self.size = size
        if isinstance(scale_factor, tuple):
            self.scale_factor = tuple(float(f) for f in scale_factor)
        else:
            self.scale_factor = float(scale_factor) if scale_factor else None
        self.mode, self.align_corners = mode, align_corners
        self.recompute_scale_factor = recompute_scale_factor

    def forward(self, input: Tensor) -> Tensor:
        return interpolate(input, self.size, self.scale_factor, self.mode, self.align_corners,
                           recompute_scale_factor=self.recompute_scale_factor)

    def extra_repr(self) -> str:
        if self.scale_factor is not None:
            info = "scale_factor=" + repr(self.scale_factor)
        else:
            info = "size=" + repr(self.size)
        return info + ", mode=" + repr(self.mode)


class UpsamplingNearest2d(Upsample):
    """Nearest-neighbour 2-D upsampling (``Upsample(mode='nearest')``)."""

    def __init__(self, size: int | tuple | None = None,
                 scale_factor: float | tuple | None = None) -> None:
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    """Bilinear 2-D upsampling with align_corners=True."""

    def __init__(self, size: int | tuple | None = None,
                 scale_factor: float | tuple | None = None) -> None:
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)


class _AdaptivePool(Module):
    def __init__(self, output_size: int | tuple) -> None:
        super().__init__()
        self.output_size = output_size

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(_AdaptivePool):
    """``adaptive_avg_pool1d`` as a layer."""

    def forward(self, input: Tensor) -> Tensor:
        return adaptive_avg_pool1d(input, self.output_size)


class AdaptiveAvgPool2d(_AdaptivePool):
    """``adaptive_avg_pool2d`` as a layer (None in output_size keeps the input's size)."""

    def forward(self, input: Tensor) -> Tensor:
        return adaptive_avg_pool2d(input, self.output_size)


class AdaptiveMaxPool2d(_AdaptivePool):
    """``adaptive_max_pool2d`` as a layer (with ``return_indices``: (y, indices))."""

    def __init__(self, output_size: int | tuple, return_indices: bool = False) -> None:
        super().__init__(output_size)
        self.return_indices = return_indices

    def forward(self, input: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        return adaptive_max_pool2d(input, self.output_size, self.return_indices)


class PixelShuffle(Module):
    """``pixel_shuffle`` as a layer."""

    def __init__(self, upscale_factor: int) -> None:
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, input: Tensor) -> Tensor:
        return pixel_shuffle(input, self.upscale_factor)

    def extra_repr(self) -> str:
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    """``pixel_unshuffle`` as a layer."""

    def __init__(self, downscale_factor: int) -> None:
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, input: Tensor) -> Tensor:
        return pixel_unshuffle(input, self.downscale_factor)

    def extra_repr(self) -> str:
        return f"downscale_factor={self.downscale_factor}"


class Unflatten(Module):
    """Split dim ``dim`` into ``unflattened_size`` (a tuple or list of ints; one may be
    -1), as ``torch.nn.Unflatten``."""

    def __init__(self, dim: int, unflattened_size: tuple | list) -> None:
        super().__init__()
        if not is_int(dim):
            raise TypeError(f"Unflatten: dim must be an int, got {dim!r}")
        if not isinstance(unflattened_size, tuple | list) or not all(
                is_int(s) for s in unflattened_size):
            raise TypeError("Unflatten: unflattened_size must be a tuple or list of ints, "
                            f"got {unflattened_size!r}")
        self.dim, self.unflattened_size = dim, unflattened_size

    def forward(self, input: Tensor) -> Tensor:
        shape = tuple(input.shape)
        d = one_dim("Unflatten", self.dim, shape)
        sizes = tuple(int(s) for s in self.unflattened_size)
        known = math.prod(s for s in sizes if s != -1)
        if (sizes.count(-1) > 1 or (-1 not in sizes and known != shape[d])
                or (-1 in sizes and (known == 0 or shape[d] % known))):
            raise ValueError(f"Unflatten: unflattened_size {self.unflattened_size!r} does not "
                             f"multiply to the size {shape[d]} of dim {self.dim} of input "
                             f"of shape {shape}")
        return input.reshape(*shape[:d], *sizes, *shape[d + 1:])

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


__all__: list[Any] = ["AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveMaxPool2d",
                      "PixelShuffle", "PixelUnshuffle", "Unflatten", "Upsample",
                      "UpsamplingBilinear2d", "UpsamplingNearest2d"]
