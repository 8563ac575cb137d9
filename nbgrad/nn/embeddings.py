"""Positional embeddings of the reference library's neural operators (neuraloperator,
``neuralop.layers.embeddings``), with its parameter names and defaults:

* ``GridEmbeddingND`` (and ``GridEmbedding2D``, its 2-D case): the coordinates of a
  regular grid appended to x [B, C, d_1, ..., d_n] as n more channels;
* ``SinusoidalEmbedding``: coordinates p lifted to sines and cosines of several
  frequencies (Transformer or NeRF style).

The grids and frequencies are constants built in float64 and cast to x's dtype (the
reference builds them in PyTorch's default float32 first); gradients flow to x through
nbgrad ops (concat, mul, sin, cos, stack, reshape).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Real
from typing import Any

import numpy as np

from ..ops.elementwise import cos, sin
from ..ops.shape import concat, stack
from ..tensor import Tensor
from .layers import _positive
from .module import Module


class Embedding(Module):
    """Base of the embeddings: ``out_channels`` gives the channels an embedding outputs."""

    @property
    def out_channels(self) -> int:
        raise NotImplementedError


def _boundaries(owner: str, grid_boundaries: Any, dim: int) -> list[list[float]]:
    """``dim`` pairs [start, stop] of numbers."""
    try:
        pairs = [[float(a), float(b)] for a, b in grid_boundaries]
    except (TypeError, ValueError):
        raise ValueError(f"{owner}: grid_boundaries must be {dim} pairs [start, stop] of "
                         f"numbers, got {grid_boundaries!r}") from None
    if len(pairs) != dim:
        raise ValueError(f"{owner}: grid_boundaries must have one [start, stop] pair per dim "
                         f"(dim={dim}), got {len(pairs)}: {grid_boundaries!r}")
    return pairs


def regular_grid_nd(resolutions: Sequence[int],
                    grid_boundaries: Sequence[Sequence[float]]) -> list[np.ndarray]:
    """The coordinates of a regular grid of shape ``resolutions`` (float64): in dim k,
    x_k(i_1, ..., i_n) = a_k + (b_k - a_k) i_k / n_k for i_k = 0 .. n_k - 1, with
    [a_k, b_k] = grid_boundaries[k] (the left end points of n_k equal cells: the grid of
    a periodic function, b_k itself excluded). One array of shape ``resolutions`` per dim."""
    axes = [a + (b - a) * np.arange(n, dtype=np.float64) / n
            for n, (a, b) in zip(resolutions, grid_boundaries)]
    return list(np.meshgrid(*axes, indexing="ij"))


class GridEmbeddingND(Embedding):
    """x [B, C, d_1, ..., d_dim] -> [B, C + dim, d_1, ..., d_dim]: x followed by the
    coordinate channels x_1, ..., x_dim of ``regular_grid_nd`` over ``grid_boundaries``
    (``dim`` pairs [start, stop]; default [[0, 1]] * dim, where the reference's default
    [[0, 1], [0, 1]] serves only dim = 2). The grid is computed once per spatial shape.
    ``forward(data, batched=False)`` takes an unbatched [C, d_1, ...] and, as the
    reference's GridEmbeddingND, returns it batched, [1, C + dim, d_1, ...]."""

    _owner = "GridEmbeddingND"

    def __init__(self, in_channels: int, dim: int = 2,
                 grid_boundaries: Sequence[Sequence[float]] | None = None) -> None:
        super().__init__()
        _positive(self._owner, in_channels=in_channels, dim=dim)
        if grid_boundaries is None:
            grid_boundaries = [[0.0, 1.0] for _ in range(dim)]
        self.in_channels, self.dim = in_channels, dim
        self.grid_boundaries = _boundaries(self._owner, grid_boundaries, dim)
        self._grid: tuple[tuple, np.dtype, np.ndarray] | None = None

    @property
    def out_channels(self) -> int:
        return self.in_channels + self.dim

    def grid(self, spatial_dims: Sequence[int], dtype: Any) -> np.ndarray:
        """The coordinate channels [1, dim, *spatial_dims] in ``dtype``, cached for the
        last spatial shape."""
        key, dtype = tuple(int(n) for n in spatial_dims), np.dtype(dtype)
        if self._grid is None or self._grid[:2] != (key, dtype):
            coords = np.stack(regular_grid_nd(key, self.grid_boundaries))[None]
            self._grid = (key, dtype, coords.astype(dtype))
        return self._grid[2]

    def _layout(self) -> str:
        return f"[B, in_channels={self.in_channels}, " + ", ".join(
            f"d_{k + 1}" for k in range(self.dim)) + "]"

    def _check(self, data: Tensor) -> None:
        if data.ndim != self.dim + 2 or data.shape[1] != self.in_channels:
            raise ValueError(f"{self._owner}: input must be {self._layout()} (dim={self.dim}), "
                             f"got shape {tuple(data.shape)}")

    def _embed(self, data: Tensor) -> Tensor:
        grid = self.grid(data.shape[2:], data._data.dtype)
        # The grid is a constant: one copy per batch item, no gradient.
        coords = Tensor(np.ascontiguousarray(
            np.broadcast_to(grid, (data.shape[0],) + grid.shape[1:])))
        return concat([data, coords], dim=1)

    def forward(self, data: Tensor, batched: bool = True) -> Tensor:
        if not batched and data.ndim == self.dim + 1:
            data = data.unsqueeze(0)
        self._check(data)
        return self._embed(data)

    def extra_repr(self) -> str:
        return (f"in_channels={self.in_channels}, dim={self.dim}, "
                f"grid_boundaries={self.grid_boundaries}")


class GridEmbedding2D(GridEmbeddingND):
    """``GridEmbeddingND`` with dim = 2: x [B, C, d_1, d_2] -> [B, C + 2, d_1, d_2],
    grid_boundaries by default [[0, 1], [0, 1]]. As the reference's GridEmbedding2D,
    ``forward(data, batched=False)`` on an unbatched [C, d_1, d_2] returns [C + 2, d_1,
    d_2]."""

    _owner = "GridEmbedding2D"

    def __init__(self, in_channels: int,
                 grid_boundaries: Sequence[Sequence[float]] | None = None) -> None:
        super().__init__(in_channels, 2, grid_boundaries)

    def forward(self, data: Tensor, batched: bool = True) -> Tensor:
        unbatched = not batched and data.ndim == 3
        if unbatched:
            data = data.unsqueeze(0)
        self._check(data)
        out = self._embed(data)
        return out.squeeze(0) if unbatched else out

    def extra_repr(self) -> str:
        return f"in_channels={self.in_channels}, grid_boundaries={self.grid_boundaries}"


class SinusoidalEmbedding(Embedding):
    """x [batch, n_in, in_channels] (or unbatched [n_in, in_channels]) -> [batch, n_in,
    2 L in_channels] with L = ``num_frequencies`` (default: in_channels): each coordinate
    p = x[..., c] becomes, at output channels 2 L c + 2 k and 2 L c + 2 k + 1,

        sin(w_k p), cos(w_k p),   k = 0 .. L - 1,

    with w_k = max_positions^(-2 k / L) for ``embedding_type='transformer'`` (Vaswani et
    al. 2017) and w_k = 2^k pi for ``'nerf'`` (Mildenhall et al. 2020). To resolve the
    highest frequency on N samples, keep it below N / 2."""

    _TYPES = ("nerf", "transformer")

    def __init__(self, in_channels: int, num_frequencies: int | None = None,
                 embedding_type: str = "transformer", max_positions: float = 10000) -> None:
        super().__init__()
        num_frequencies = in_channels if num_frequencies is None else num_frequencies
        _positive("SinusoidalEmbedding", in_channels=in_channels,
                  num_frequencies=num_frequencies)
        if embedding_type not in self._TYPES:
            raise ValueError(f"SinusoidalEmbedding: embedding_type must be one of "
                             f"{', '.join(self._TYPES)}, got {embedding_type!r}")
        if embedding_type == "transformer" and (
                not isinstance(max_positions, Real) or isinstance(max_positions, bool)
                or not max_positions > 0):
            raise ValueError(f"SinusoidalEmbedding: max_positions must be a positive number "
                             f"for embedding_type='transformer', got {max_positions!r}")
        self.in_channels, self.num_frequencies = in_channels, num_frequencies
        self.embedding_type, self.max_positions = embedding_type, max_positions

    @property
    def out_channels(self) -> int:
        return 2 * self.num_frequencies * self.in_channels

    def frequencies(self) -> np.ndarray:
        """w_k, k = 0 .. L - 1 (float64)."""
        k = np.arange(self.num_frequencies, dtype=np.float64)
        if self.embedding_type == "nerf":
            return 2.0 ** k * math.pi
        return (1.0 / float(self.max_positions)) ** (2.0 * k / self.num_frequencies)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim not in (2, 3) or x.shape[-1] != self.in_channels:
            raise ValueError(f"SinusoidalEmbedding: input must be [batch, n_in, in_channels="
                             f"{self.in_channels}] or [n_in, in_channels], got shape "
                             f"{tuple(x.shape)}")
        w = Tensor(self.frequencies().astype(x._data.dtype))
        phase = x.unsqueeze(-1) * w  # [..., n_in, C, L]
        # [..., n_in, C, L, 2] flattened: channel 2 L c + 2 k + j, sin (j=0) then cos (j=1)
        pairs = stack([sin(phase), cos(phase)], dim=-1)
        return pairs.reshape(*x.shape[:-1], self.out_channels)

    def extra_repr(self) -> str:
        return (f"in_channels={self.in_channels}, num_frequencies={self.num_frequencies}, "
                f"embedding_type={self.embedding_type!r}, max_positions={self.max_positions}")
