"""Normalisation and dropout layers: LayerNorm, BatchNorm1d, BatchNorm2d, GroupNorm,
InstanceNorm1d, InstanceNorm2d, Dropout (``torch.nn``'s constructor arguments, parameters,
buffers, train/eval behaviour and reprs). Each calls the nbgrad function of the same family
(``ops/norm.py``, ``ops/group_norm.py``)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ..ops.group_norm import group_norm, instance_norm
from ..ops.norm import _normalized_shape, batch_norm, dropout, layer_norm
from ..tensor import Tensor
from .layers import _float_dtype, _positive
from .module import Module
from .parameter import Parameter


def _affine_parameters(module: Module, affine: bool, bias: bool, shape: tuple,
                       dtype: Any) -> None:
    """``weight`` (ones) and ``bias`` (zeros) of ``shape`` when ``affine`` (bias only with
    ``bias``); None under those names otherwise, as PyTorch registers them."""
    module.register_parameter("weight", Parameter(np.ones(shape, dtype)) if affine else None)
    module.register_parameter("bias", Parameter(np.zeros(shape, dtype))
                              if affine and bias else None)


class LayerNorm(Module):
    """Normalise over the trailing dims ``normalized_shape``; weight (ones) and bias
    (zeros) of that shape when ``elementwise_affine`` (bias only with ``bias=True``)."""

    def __init__(self, normalized_shape: int | tuple[int, ...] | list[int], eps: float = 1e-5,
                 elementwise_affine: bool = True, bias: bool = True,
                 dtype: Any = None) -> None:
        super().__init__()
        self.normalized_shape = _normalized_shape(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        dtype = _float_dtype("LayerNorm", dtype)
        _affine_parameters(self, elementwise_affine, bias, self.normalized_shape, dtype)

    def forward(self, x: Tensor) -> Tensor:
        return layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}")


class _BatchNorm(Module):
    """Shared by BatchNorm1d and BatchNorm2d: parameters, running-statistics buffers
    (``running_mean`` zeros, ``running_var`` ones, ``num_batches_tracked``), forward."""

    input_dims: tuple[int, ...] = ()

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True, dtype: Any = None,
                 *, bias: bool = True) -> None:
        super().__init__()
        owner = type(self).__name__
        _positive(owner, num_features=num_features)
        dtype = _float_dtype(owner, dtype)
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        _affine_parameters(self, affine, bias, (num_features,), dtype)
        if track_running_stats:
            self.register_buffer("running_mean", Tensor(np.zeros(num_features, dtype)))
            self.register_buffer("running_var", Tensor(np.ones(num_features, dtype)))
            self.register_buffer("num_batches_tracked", Tensor(np.array(0, np.int64)))
        else:
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                self.register_buffer(name, None)

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            self.running_mean._data[...] = 0
            self.running_var._data[...] = 1
            self.num_batches_tracked._data[...] = 0

    def _update_factor(self) -> float:
        """The running-average weight of this batch, as PyTorch: ``momentum``, or
        1 / num_batches_tracked (a cumulative average) when momentum is None. Counts the
        batch when training with tracked statistics."""
        if self.training and self.track_running_stats:
            self.num_batches_tracked._data[...] += 1
            if self.momentum is None:
                return 1.0 / float(self.num_batches_tracked._data)
        return 0.0 if self.momentum is None else self.momentum

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim not in self.input_dims:
            dims = " or ".join(f"{d}D" for d in self.input_dims)
            raise ValueError(f"{type(self).__name__}: expected {dims} input (got {x.ndim}D "
                             f"input of shape {tuple(x.shape)})")
        factor = self._update_factor()
        # batch statistics in training, and in evaluation when nothing is tracked
        use_batch = self.training or self.running_mean is None
        update = not self.training or self.track_running_stats
        return batch_norm(x, self.running_mean if update else None,
                          self.running_var if update else None, self.weight, self.bias,
                          use_batch, factor, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, bias={self.bias is not None}, "
                f"track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Batch normalisation of [N, C] or [N, C, L] input over every dim but C."""

    input_dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalisation of [N, C, H, W] input over N, H and W."""

    input_dims = (4,)


class GroupNorm(Module):
    """Group normalisation of [N, C, *] input: the C = ``num_channels`` channels in
    ``num_groups`` groups, each normalised per sample; per-channel weight (ones) and bias
    (zeros) when ``affine`` (bias only with ``bias=True``). Batch statistics in both
    training and evaluation, as ``torch.nn.GroupNorm``."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5,
                 affine: bool = True, dtype: Any = None, *, bias: bool = True) -> None:
        super().__init__()
        _positive("GroupNorm", num_groups=num_groups, num_channels=num_channels)
        if num_channels % num_groups:
            raise ValueError(f"GroupNorm: num_channels ({num_channels}) must be divisible "
                             f"by num_groups ({num_groups})")
        dtype = _float_dtype("GroupNorm", dtype)
        self.num_groups, self.num_channels = num_groups, num_channels
        self.eps, self.affine = eps, affine
        _affine_parameters(self, affine, bias, (num_channels,), dtype)

    def forward(self, x: Tensor) -> Tensor:
        return group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, "
                f"affine={self.affine}, bias={self.bias is not None}")


class _InstanceNorm(_BatchNorm):
    """Shared by InstanceNorm1d and InstanceNorm2d: BatchNorm's parameters, buffers and
    repr (PyTorch's ``_NormBase``), with PyTorch's instance-norm defaults (no affine, no
    running statistics) and forward: per-sample statistics in training, and in evaluation
    unless ``track_running_stats``; unbatched input ([C, *]) taken as a batch of one.
    ``num_batches_tracked`` is registered but not counted, as in PyTorch."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = False, track_running_stats: bool = False, dtype: Any = None,
                 *, bias: bool = True) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats, dtype,
                         bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        owner = type(self).__name__
        unbatched = self.input_dims[0]
        if x.ndim not in self.input_dims:
            dims = " or ".join(f"{d}D" for d in self.input_dims)
            raise ValueError(f"{owner}: expected {dims} input (got {x.ndim}D input of shape "
                             f"{tuple(x.shape)})")
        feature_dim = x.ndim - unbatched
        if x.shape[feature_dim] != self.num_features:
            if self.affine:
                raise ValueError(f"{owner}: expected input's size at dim={feature_dim} to "
                                 f"match num_features ({self.num_features}), but got: "
                                 f"{x.shape[feature_dim]} (input of shape {tuple(x.shape)})")
            warnings.warn(f"{owner}: input's size at dim={feature_dim} does not match "
                          f"num_features. You can silence this warning by not passing in "
                          f"num_features, which is not used because affine=False",
                          stacklevel=2)
        batched = x.unsqueeze(0) if x.ndim == unbatched else x
        y = instance_norm(batched, self.running_mean, self.running_var, self.weight,
                          self.bias, self.training or not self.track_running_stats,
                          0.0 if self.momentum is None else self.momentum, self.eps)
        return y.squeeze(0) if x.ndim == unbatched else y


class InstanceNorm1d(_InstanceNorm):
    """Instance normalisation of [N, C, L] (or unbatched [C, L]) input over L."""

    input_dims = (2, 3)


class InstanceNorm2d(_InstanceNorm):
    """Instance normalisation of [N, C, H, W] (or unbatched [C, H, W]) input over H, W."""

    input_dims = (3, 4)


class Dropout(Module):
    """Zero each element with probability p in training, scaling the rest by 1 / (1 - p);
    the identity in evaluation. ``inplace=True`` is accepted for ported code and computes
    out of place (nbgrad's kernels never write into their inputs)."""

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if not 0 <= p <= 1:
            raise ValueError(f"Dropout: dropout probability has to be between 0 and 1, "
                             f"but got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"
