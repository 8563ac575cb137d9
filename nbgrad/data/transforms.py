"""Data normalisers and the data processor that wraps a model, with neuraloperator's
(``neuralop.data.transforms``) names: ``UnitGaussianNormalizer`` (fitted on training
data, ``transform`` / ``inverse_transform``) and ``DefaultDataProcessor`` (encodes a
batch's inputs and targets before the model and decodes its output after it).

Both are nbgrad Modules: the fitted mean and std are buffers, so ``state_dict`` and
``load_state_dict`` round-trip them and ``to(dtype)`` casts them. They take nbgrad
Tensors or NumPy arrays; a transform of a Tensor is made of nbgrad ops, so gradients flow
through it."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..nn.module import Module
from ..tensor import Tensor


def _array(data: Any) -> np.ndarray:
    """The values of a Tensor or array-like as float ndarray (statistics are constants)."""
    values = data.detach().numpy() if isinstance(data, Tensor) else np.asarray(data)
    if not np.issubdtype(values.dtype, np.floating):
        values = values.astype(np.float64)
    return values


class UnitGaussianNormalizer(Module):
    r"""Normalises data to zero mean and unit standard deviation:
    ``transform(x) = (x - mean) / (std + eps)``,
    ``inverse_transform(x) = x * (std + eps) + mean``.

    ``fit(data)`` takes the mean and the unbiased (Bessel-corrected) standard deviation
    over the dims ``dim`` (a list that includes the batch dim, e.g. ``[0, 2, 3]`` for
    per-channel statistics of ``[batch, channel, h, w]`` data; ``None``: every dim, one
    scalar mean and std), kept with those dims of size 1 so they broadcast against a
    batch. ``partial_fit`` updates them chunk by chunk (Chan's pairwise update of the
    count, mean and sum of squared deviations), so fitting in chunks gives the statistics
    of all the data seen, to rounding. ``mean`` and ``std`` may also be given.
    """

    def __init__(self, mean: Any = None, std: Any = None, eps: float = 1e-7,
                 dim: int | Sequence[int] | None = None) -> None:
        super().__init__()
        if (mean is None) != (std is None):
            raise ValueError("UnitGaussianNormalizer: mean and std must be given together "
                             f"(got mean={'None' if mean is None else 'a value'}, "
                             f"std={'None' if std is None else 'a value'})")
        if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not eps >= 0:
            raise ValueError(f"UnitGaussianNormalizer: eps must be a real number >= 0, "
                             f"got {eps!r}")
        if isinstance(dim, numbers.Integral) and not isinstance(dim, bool):
            dim = [int(dim)]
        elif dim is not None:
            dim = list(dim)
            if not dim or not all(isinstance(k, numbers.Integral) and not isinstance(k, bool)
                                  for k in dim) or len(set(dim)) != len(dim):
                raise ValueError(f"UnitGaussianNormalizer: dim must be an int, a list of "
                                 f"distinct ints or None, got {dim!r}")
            dim = [int(k) for k in dim]
        self.dim: list[int] | None = dim
        self.eps = float(eps)
        self.register_buffer("mean", None if mean is None else Tensor(_array(mean)))
        self.register_buffer("std", None if std is None else Tensor(_array(std)))
        if mean is not None and tuple(self.mean.shape) != tuple(self.std.shape):
            raise ValueError(f"UnitGaussianNormalizer: mean and std must have one shape, "
                             f"got {tuple(self.mean.shape)} and {tuple(self.std.shape)}")
        # Running statistics of partial_fit: the count and the sum of squared deviations.
        self.n_elements = 0
        self._m2: np.ndarray | None = None

    # -- fitting ---------------------------------------------------------------------
    def _axes(self, values: np.ndarray) -> tuple[int, ...]:
        if self.dim is None:
            return tuple(range(values.ndim))
        axes = []
        for k in self.dim:
            if not -values.ndim <= k < values.ndim:
                raise ValueError(f"UnitGaussianNormalizer: dim={self.dim} is out of range "
                                 f"for data of shape {values.shape}")
            axes.append(k % values.ndim)
        if len(set(axes)) != len(axes):
            raise ValueError(f"UnitGaussianNormalizer: dim={self.dim} names a dim twice for "
                             f"data of shape {values.shape}")
        return tuple(axes)

    def _set(self, mean: np.ndarray, m2: np.ndarray, count: int, dtype: np.dtype) -> None:
        self.n_elements, self._m2 = count, m2
        # Unbiased variance m2 / (n - 1), as torch.std; a single element has none (NaN).
        with np.errstate(divide="ignore", invalid="ignore"):
            std = np.sqrt(m2 / (count - 1)) if count > 1 else np.full_like(m2, np.nan)
        self.mean = Tensor(mean.astype(dtype))
        self.std = Tensor(std.astype(dtype))

    def fit(self, data: Any) -> UnitGaussianNormalizer:
        """Mean and unbiased std of ``data`` over ``dim`` (replacing earlier statistics)."""
        values = _array(data)
        if values.size == 0:
            raise ValueError(f"UnitGaussianNormalizer.fit: data is empty (shape "
                             f"{values.shape})")
        axes = self._axes(values)
        wide = values.astype(np.float64)  # accumulate in float64, store in data's dtype
        mean = wide.mean(axis=axes, keepdims=True)
        m2 = ((wide - mean) ** 2).sum(axis=axes, keepdims=True)
        count = int(np.prod([values.shape[a] for a in axes]))
        self._set(mean, m2, count, values.dtype)
        return self

    def partial_fit(self, data: Any, batch_size: int = 1) -> UnitGaussianNormalizer:
        """Update the statistics with ``data``, ``batch_size`` samples (along dim 0) at a
        time; the first call on an unfitted normaliser starts from nothing."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) \
                or batch_size < 1:
            raise ValueError(f"UnitGaussianNormalizer.partial_fit: batch_size must be a "
                             f"positive int, got {batch_size!r}")
        values = _array(data)
        if values.size == 0:
            return self
        for start in range(0, len(values), batch_size):
            chunk = values[start:start + batch_size]
            if self.n_elements == 0 or self._m2 is None:
                self.fit(chunk)
                continue
            axes = self._axes(chunk)
            wide = chunk.astype(np.float64)
            n_b = int(np.prod([chunk.shape[a] for a in axes]))
            mean_b = wide.mean(axis=axes, keepdims=True)
            m2_b = ((wide - mean_b) ** 2).sum(axis=axes, keepdims=True)
            mean_a = self.mean.numpy().astype(np.float64)
            if mean_a.shape != mean_b.shape:
                raise ValueError(f"UnitGaussianNormalizer.partial_fit: data of shape "
                                 f"{chunk.shape} gives statistics of shape {mean_b.shape}, "
                                 f"but the fitted ones have shape {mean_a.shape}")
            n_a = self.n_elements
            n = n_a + n_b
            # Chan et al.: merge (n_a, mean_a, m2_a) with (n_b, mean_b, m2_b).
            delta = mean_b - mean_a
            mean = mean_a + delta * (n_b / n)
            m2 = self._m2 + m2_b + delta ** 2 * (n_a * n_b / n)
            self._set(mean, m2, n, self.mean.numpy().dtype)
        return self

    # -- applying --------------------------------------------------------------------
    def _stats(self, method: str) -> tuple[Tensor, Tensor]:
        if self.mean is None or self.std is None:
            raise RuntimeError(f"UnitGaussianNormalizer.{method}: the normaliser is not "
                               "fitted: call fit(data) or partial_fit(data), or give mean "
                               "and std")
        return self.mean, self.std

    def _check_shape(self, method: str, x: Any) -> None:
        mean = self.mean
        shape = tuple(np.shape(x)) if not isinstance(x, Tensor) else tuple(x.shape)
        try:
            np.broadcast_shapes(shape, tuple(mean.shape))
        except ValueError:
            raise ValueError(f"UnitGaussianNormalizer.{method}: data of shape {shape} does "
                             f"not broadcast with the fitted statistics of shape "
                             f"{tuple(mean.shape)}") from None

    def transform(self, x: Any) -> Any:
        """``(x - mean) / (std + eps)``: a Tensor for a Tensor, an ndarray otherwise."""
        mean, std = self._stats("transform")
        self._check_shape("transform", x)
        if isinstance(x, Tensor):
            return (x - mean) / (std + self.eps)
        return (np.asarray(x) - mean.numpy()) / (std.numpy() + self.eps)

    def inverse_transform(self, x: Any) -> Any:
        """``x * (std + eps) + mean``, undoing ``transform``."""
        mean, std = self._stats("inverse_transform")
        self._check_shape("inverse_transform", x)
        if isinstance(x, Tensor):
            return x * (std + self.eps) + mean
        return np.asarray(x) * (std.numpy() + self.eps) + mean.numpy()

    def forward(self, x: Any) -> Any:
        return self.transform(x)

    def load_state_dict(self, state_dict: dict, strict: bool = True) -> Any:
        """As Module's, and an unfitted normaliser takes the saved mean and std as they
        are (its buffers have no shape to copy into yet)."""
        if self.mean is None and "mean" in state_dict and "std" in state_dict:
            self.mean = Tensor(_array(state_dict["mean"]).copy())
            self.std = Tensor(_array(state_dict["std"]).copy())
        return super().load_state_dict(state_dict, strict)

    def extra_repr(self) -> str:
        shape = None if self.mean is None else tuple(self.mean.shape)
        return f"dim={self.dim}, eps={self.eps}, fitted_shape={shape}"


class DataProcessor(Module):
    """A module that prepares a batch for a model and its output for the loss:
    ``preprocess(data_dict)``, then the wrapped model on ``data_dict['x']``, then
    ``postprocess(output, data_dict)``. ``wrap(model)`` sets the model (a submodule, so
    ``train()`` / ``eval()`` and ``state_dict`` reach it)."""

    def __init__(self) -> None:
        super().__init__()
        self.model: Any = None

    def wrap(self, model: Any) -> DataProcessor:
        self.model = model
        return self

    def preprocess(self, data_dict: dict, batched: bool = True) -> dict:
        raise NotImplementedError(f"{type(self).__name__}.preprocess")

    def postprocess(self, output: Any, data_dict: dict) -> tuple[Any, dict]:
        raise NotImplementedError(f"{type(self).__name__}.postprocess")

    def forward(self, **data_dict: Any) -> tuple[Any, dict]:
        """``output, data_dict`` for the loss: preprocess, the model, postprocess."""
        if self.model is None:
            raise RuntimeError(f"{type(self).__name__}.forward: no model: call wrap(model) "
                               "first")
        data_dict = self.preprocess(data_dict)
        output = self.model(data_dict["x"])
        return self.postprocess(output, data_dict)


class DefaultDataProcessor(DataProcessor):
    """neuralop's default processor: ``in_normalizer`` encodes the inputs ``x`` always;
    ``out_normalizer`` encodes the targets ``y`` in training mode (the training loss
    compares normalised output with normalised target) and, in eval mode, decodes the
    model's output instead (the eval loss compares in physical units)."""

    def __init__(self, in_normalizer: Module | None = None,
                 out_normalizer: Module | None = None) -> None:
        super().__init__()
        self.in_normalizer = in_normalizer
        self.out_normalizer = out_normalizer

    @staticmethod
    def _field(data_dict: Any, key: str) -> Any:
        if not isinstance(data_dict, dict):
            raise TypeError(f"DefaultDataProcessor: data_dict must be a dict with keys 'x' "
                            f"and 'y', got {type(data_dict).__name__}")
        if key not in data_dict:
            raise KeyError(f"DefaultDataProcessor: data_dict has no key {key!r} (keys: "
                           f"{sorted(data_dict)})")
        value = data_dict[key]
        return value if isinstance(value, Tensor) else Tensor(_array(value))

    def preprocess(self, data_dict: dict, batched: bool = True) -> dict:
        """A new dict with ``x`` (and ``y`` in training mode) normalised; other keys kept.
        NumPy values of ``x`` and ``y`` become Tensors."""
        x = self._field(data_dict, "x")
        y = self._field(data_dict, "y")
        if self.in_normalizer is not None:
            x = self.in_normalizer.transform(x)
        if self.out_normalizer is not None and self.training:
            y = self.out_normalizer.transform(y)
        return {**data_dict, "x": x, "y": y}

    def postprocess(self, output: Any, data_dict: dict) -> tuple[Any, dict]:
        """In eval mode the output decoded by ``out_normalizer``; in training mode as is."""
        if self.out_normalizer is not None and not self.training:
            output = self.out_normalizer.inverse_transform(output)
        return output, data_dict
