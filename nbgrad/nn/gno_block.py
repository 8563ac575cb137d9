"""The reference library's graph-neural-operator block (neuraloperator,
``neuralop.layers.gno_block.GNOBlock`` with its ``IntegralTransform`` and
``LinearChannelMLP``), with its parameter names and defaults, on nbgrad's radius graph.

For query points x_i and input points y_j, with A(x_i) = {y_j : |y_j - x_i| <= radius}
(the closed ball, ``nb.radius_graph(y, radius, query=x)``), the block computes one of

* ``'linear'`` without f:       out(x_i) = R_{j in A(x_i)} k(x_i, y_j)
* ``'linear'`` with f:          out(x_i) = R_{j in A(x_i)} k(x_i, y_j) * f(y_j)
* ``'nonlinear_kernelonly'``:   out(x_i) = R_{j in A(x_i)} k(x_i, y_j, f(y_j))
* ``'nonlinear'``:              out(x_i) = R_{j in A(x_i)} k(x_i, y_j, f(y_j)) * f(y_j)

with ``*`` the element-wise product (the kernel is diagonal, so out_channels must equal
in_channels there), R the sum or the mean over the neighbourhood (``reduction``), and k a
``LinearChannelMLP`` over the edge features ``[e(y_j), e(x_i) (, f(y_j))]``, e the
sinusoidal positional embedding (or the raw coordinates for ``pos_embedding_type=None``).
A ``weighting_fn`` w multiplies every term by w(|x_i - y_j|^2) and forces the sum (the
reference's mollified GNO).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..graph import Graph
from ..ops._args import is_int
from ..ops.activation import gelu
from ..ops.elementwise import cos, exp
from ..ops.gno import gno_aggregate, radius_graph
from ..ops.shape import concat
from ..tensor import Tensor, lift
from .containers import ModuleList
from .embeddings import SinusoidalEmbedding
from .layers import Linear, _float_dtype, _positive
from .module import Module

_TRANSFORMS = ("linear", "nonlinear_kernelonly", "nonlinear")


class LinearChannelMLP(Module):
    """The reference's ``LinearChannelMLP``: Linear layers of sizes ``layers`` [c_0, c_1,
    ..., c_L] acting on the last dimension, ``non_linearity`` after each but the last:
    ``x -> fcs[L-1](s(... s(fcs[0](x))))``. Parameters ``fcs.<k>.weight`` [c_{k+1}, c_k]
    and ``fcs.<k>.bias`` (PyTorch's Linear initialisation)."""

    def __init__(self, layers: Sequence[int], non_linearity: Callable = gelu,
                 dropout: float = 0.0, dtype: Any = None) -> None:
        super().__init__()
        owner = "LinearChannelMLP"
        layers = list(layers)
        if len(layers) < 2 or not all(is_int(c) and c >= 1 for c in layers):
            raise ValueError(f"{owner}: layers must list at least two positive ints (input, "
                             f"..., output sizes), got {layers!r}")
        if dropout != 0.0:
            raise ValueError(f"{owner}: dropout is not supported (got {dropout!r}); use 0.0")
        self.layers, self.non_linearity = [int(c) for c in layers], non_linearity
        self.n_layers = len(layers) - 1
        self.fcs = ModuleList(Linear(a, b, dtype=dtype) for a, b in zip(layers, layers[1:]))

    def forward(self, x: Tensor) -> Tensor:
        for k, fc in enumerate(self.fcs):
            x = fc(x)
            if k < self.n_layers - 1:
                x = self.non_linearity(x)
        return x

    def extra_repr(self) -> str:
        return f"layers={self.layers}"


# -- weighting functions of the mollified GNO --------------------------------------------
# Each maps the squared distance s = |x_i - y_j|^2 (a Tensor) to a weight; ``radius`` is
# the squared radius of the neighbourhoods (the reference binds sq_radius to it), so that
# d = s / radius runs over [0, 1] inside the ball.


def half_cos_weighting(s: Tensor, radius: float = 1.0, scale: float = 1.0) -> Tensor:
    """w = scale (cos(pi d) / 2 + 1/2), d = s / radius: 1 at the centre, 0 on the rim."""
    return (cos(s * (math.pi / radius)) * 0.5 + 0.5) * scale


def quartic_weighting(s: Tensor, radius: float = 1.0, scale: float = 1.0) -> Tensor:
    """w = scale (s^2 / radius^4 - 2 s / radius^2 + 1) (the reference's quartic, in s)."""
    return (s * s * (1.0 / radius ** 4) - s * (2.0 / radius ** 2) + 1.0) * scale


def octic_weighting(s: Tensor, radius: float = 1.0, scale: float = 1.0) -> Tensor:
    """w = scale (-3 d^8 + 8 d^6 - 6 d^4 + 1), d = s / radius."""
    d = s * (1.0 / radius)
    d2 = d * d
    d4 = d2 * d2
    return (d4 * d4 * -3.0 + d4 * d2 * 8.0 - d4 * 6.0 + 1.0) * scale


def bump_weighting(s: Tensor, radius: float = 1.0, scale: float = 1.0,
                   eps: float = 1e-7) -> Tensor:
    """w = scale e exp(-1 / (1 - d^2 + eps)), d = min(s, radius) / radius."""
    d = s.clamp(0.0, radius) * (1.0 / radius)
    return exp(-1.0 / (1.0 - d * d + eps)) * (math.e * scale)


WEIGHTING_FN_REGISTRY: dict[str, Callable] = {
    "half_cos": half_cos_weighting,
    "quartic": quartic_weighting,
    "octic": octic_weighting,
    "bump": bump_weighting,
}


def dispatch_weighting_fn(weight_function_name: str, sq_radius: float,
                          scale: float = 1.0) -> Callable[[Tensor], Tensor]:
    """The weighting function ``name`` with its squared radius and scale bound, for
    ``GNOBlock(weighting_fn=...)`` (the reference's ``dispatch_weighting_fn``)."""
    base = WEIGHTING_FN_REGISTRY.get(weight_function_name)
    if base is None:
        raise ValueError(f"dispatch_weighting_fn: weight_function_name must be one of "
                         f"{sorted(WEIGHTING_FN_REGISTRY)}, got {weight_function_name!r}")
    if not (isinstance(sq_radius, int | float) and sq_radius > 0):
        raise ValueError(f"dispatch_weighting_fn: sq_radius must be a positive number, got "
                         f"{sq_radius!r}")

    def weighting(s: Tensor) -> Tensor:
        return base(s, radius=float(sq_radius), scale=float(scale))

    weighting.__name__ = f"{weight_function_name}_weighting"
    return weighting


class IntegralTransform(Module):
    """Holds the kernel MLP ``channel_mlp`` of a ``GNOBlock`` under the reference's
    parameter path (``integral_transform.channel_mlp.fcs.<k>``); the block runs it."""

    def __init__(self, channel_mlp: Module, transform_type: str, reduction: str) -> None:
        super().__init__()
        self.channel_mlp = channel_mlp
        self.transform_type, self.reduction = transform_type, reduction

    def extra_repr(self) -> str:
        return f"transform_type={self.transform_type!r}, reduction={self.reduction!r}"


def _segment_reduce(rep: Tensor, graph: Graph, reduction: str) -> Tensor:
    """out[..., i, c] = R_{p in row i} rep[..., p, c] over the CSR rows of ``graph`` (sum
    or mean; an empty row gives 0). Through ``gno_aggregate`` with the per-entry 'kernels'
    rep[p] as [C, 1] matrices acting on h = 1: a batch [B, E, C] is folded into the
    channels ([E, B C]) so the graph is walked once."""
    n_src = graph.num_source_nodes
    ones = Tensor(np.ones((n_src, 1), rep._data.dtype))
    if rep.ndim == 2:
        e, c = rep.shape
        return gno_aggregate(ones, rep.reshape(e, c, 1), graph, reduce=reduction)
    b, e, c = rep.shape
    folded = rep.permute(1, 0, 2).reshape(e, b * c, 1)
    out = gno_aggregate(ones, folded, graph, reduce=reduction)  # [M, B C]
    return out.reshape(graph.num_nodes, b, c).permute(1, 0, 2)


class GNOBlock(Module):
    """Graph neural operator block from input points y [n, d] to query points x [m, d]
    (the module docstring gives the four transforms).

    Parameters (the reference's names and defaults): ``in_channels`` (channels of f),
    ``out_channels``, ``coord_dim`` (d), ``radius`` (closed-ball neighbourhoods),
    ``transform_type`` ('linear', 'nonlinear_kernelonly', 'nonlinear'), ``weighting_fn``
    (None, a callable on squared distances such as ``dispatch_weighting_fn('half_cos',
    radius**2, 1.0)``, or a name of ``WEIGHTING_FN_REGISTRY`` bound to radius^2 and scale
    1), ``reduction`` ('sum' or 'mean'; ignored, i.e. 'sum', with a weighting function),
    ``pos_embedding_type`` ('transformer', 'nerf' or None), ``pos_embedding_channels``
    (frequencies per coordinate), ``pos_embedding_max_positions``, ``channel_mlp_layers``
    (hidden sizes of the kernel MLP, default [128, 256, 128]),
    ``channel_mlp_non_linearity`` (default gelu), ``channel_mlp`` (a module replacing the
    kernel MLP), ``use_torch_scatter_reduce`` (accepted for the reference's signature;
    nbgrad always reduces in its own kernel). ``dtype``: nbgrad's parameter dtype.

    The kernel MLP sees ``2 E + (in_channels if nonlinear)`` features, E =
    ``pos_embedding.out_channels`` (2 L d) or d without an embedding; it is
    ``integral_transform.channel_mlp`` (parameter names as in the reference).

    ``forward(y, x, f_y=None)``: ``f_y`` [n, in_channels] or a batch on the same points
    [B, n, in_channels] -> [m, out_channels] or [B, m, out_channels]. Gradients flow to
    f_y, to every parameter, and to y and x through the embedding; the neighbourhoods and
    the squared distances given to ``weighting_fn`` are constants of the points (as from
    the reference's neighbour search).
    """

    def __init__(self, in_channels: int, out_channels: int, coord_dim: int, radius: float,
                 transform_type: str = "linear", weighting_fn: Callable | str | None = None,
                 reduction: str = "sum", pos_embedding_type: str | None = "transformer",
                 pos_embedding_channels: int = 32, pos_embedding_max_positions: float = 10000,
                 channel_mlp_layers: Sequence[int] | None = None,
                 channel_mlp_non_linearity: Callable = gelu, channel_mlp: Module | None = None,
                 use_torch_scatter_reduce: bool = True, dtype: Any = None) -> None:
        super().__init__()
        owner = "GNOBlock"
        _positive(owner, in_channels=in_channels, out_channels=out_channels,
                  coord_dim=coord_dim)
        if isinstance(radius, bool) or not isinstance(radius, int | float) or not (
                math.isfinite(radius) and radius > 0):
            raise ValueError(f"{owner}: radius must be a finite positive number, got "
                             f"{radius!r}")
        if transform_type not in _TRANSFORMS:
            raise ValueError(f"{owner}: transform_type must be one of {', '.join(_TRANSFORMS)}"
                             f", got {transform_type!r}")
        if reduction not in ("sum", "mean"):
            raise ValueError(f"{owner}: reduction must be 'sum' or 'mean', got {reduction!r}")
        if transform_type == "nonlinear" and out_channels != in_channels:
            raise ValueError(f"{owner}: transform_type='nonlinear' multiplies the kernel by "
                             f"f(y) element-wise, so out_channels ({out_channels}) must equal "
                             f"in_channels ({in_channels})")
        if isinstance(weighting_fn, str):
            weighting_fn = dispatch_weighting_fn(weighting_fn, float(radius) ** 2, 1.0)
        elif weighting_fn is not None and not callable(weighting_fn):
            raise TypeError(f"{owner}: weighting_fn must be None, a name in "
                            f"{sorted(WEIGHTING_FN_REGISTRY)} or a callable on squared "
                            f"distances, got {type(weighting_fn).__name__}")
        dtype = _float_dtype(owner, dtype)
        self.in_channels, self.out_channels, self.coord_dim = in_channels, out_channels, coord_dim
        self.radius, self.transform_type = float(radius), transform_type
        self.weighting_fn, self.reduction = weighting_fn, reduction
        self.pos_embedding_type = pos_embedding_type
        self.use_torch_scatter_reduce = use_torch_scatter_reduce
        if pos_embedding_type in ("transformer", "nerf"):
            self.pos_embedding = SinusoidalEmbedding(
                coord_dim, num_frequencies=pos_embedding_channels,
                embedding_type=pos_embedding_type, max_positions=pos_embedding_max_positions)
            width = self.pos_embedding.out_channels
        elif pos_embedding_type is None:
            self.add_module("pos_embedding", None)
            width = coord_dim
        else:
            raise ValueError(f"{owner}: pos_embedding_type must be 'transformer', 'nerf' or "
                             f"None, got {pos_embedding_type!r}")
        kernel_in = 2 * width + (in_channels if transform_type.startswith("nonlinear") else 0)
        self.kernel_in_dim = kernel_in
        if channel_mlp is None:
            hidden = [128, 256, 128] if channel_mlp_layers is None else list(channel_mlp_layers)
            channel_mlp = LinearChannelMLP([kernel_in, *hidden, out_channels],
                                           non_linearity=channel_mlp_non_linearity,
                                           dtype=dtype)
        elif not isinstance(channel_mlp, Module):
            raise TypeError(f"{owner}: channel_mlp must be an nbgrad Module mapping "
                            f"{kernel_in} edge features to {out_channels}, got "
                            f"{type(channel_mlp).__name__}")
        self.integral_transform = IntegralTransform(channel_mlp, transform_type, reduction)

    # -- pieces ---------------------------------------------------------------------------

    def _points(self, name: str, value: Any) -> Tensor:
        t = value if isinstance(value, Tensor) else lift(np.asarray(value))
        if t.ndim != 2 or t.shape[1] != self.coord_dim:
            raise ValueError(f"GNOBlock: {name} has shape {tuple(t.shape)}, expected "
                             f"[n_points, coord_dim={self.coord_dim}]")
        if not np.all(np.isfinite(t._data)):
            raise ValueError(f"GNOBlock: {name} has a NaN or infinite coordinate")
        return t

    def neighbors(self, y: Any, x: Any) -> Graph:
        """The CSR graph of the neighbourhoods: row i lists, in increasing order, the j
        with |y_j - x_i| <= radius (``nb.radius_graph(y, radius, query=x)``)."""
        y, x = self._points("y", y), self._points("x", x)
        return radius_graph(np.asarray(y._data, np.float64), self.radius,
                            query=np.asarray(x._data, np.float64))

    def _embed(self, p: Tensor, dtype: np.dtype) -> Tensor:
        p = p if p.dtype == dtype else p.to(dtype)
        return p if self.pos_embedding is None else self.pos_embedding(p)

    def forward(self, y: Any, x: Any, f_y: Any = None) -> Tensor:
        owner = "GNOBlock"
        y, x = self._points("y", y), self._points("x", x)
        graph = self.neighbors(y, x)
        col, row = graph.col, graph.row
        nonlinear = self.transform_type.startswith("nonlinear")
        if f_y is None:
            if self.transform_type != "linear":
                raise ValueError(f"{owner}: transform_type={self.transform_type!r} needs f_y "
                                 f"[n, in_channels={self.in_channels}] on the points y")
        else:
            f_y = lift(f_y)
            n = y.shape[0]
            if f_y.ndim not in (2, 3) or f_y.shape[-2:] != (n, self.in_channels):
                raise ValueError(f"{owner}: f_y has shape {tuple(f_y.shape)}, expected "
                                 f"[{n}, {self.in_channels}] or [batch, {n}, "
                                 f"{self.in_channels}] ({n} points y, in_channels = "
                                 f"{self.in_channels})")
            if self.transform_type != "nonlinear_kernelonly" and (
                    self.out_channels != self.in_channels):
                raise ValueError(f"{owner}: transform_type={self.transform_type!r} with f_y "
                                 f"multiplies the kernel by f(y) element-wise, so "
                                 f"out_channels ({self.out_channels}) must equal in_channels "
                                 f"({self.in_channels})")
        dtype = f_y.dtype if f_y is not None else self._param_dtype()
        # edge features of entry p = (j -> i): [e(y_j), e(x_i)] (the reference's order)
        feats = concat([self._embed(y, dtype)[col], self._embed(x, dtype)[row]], axis=1)
        f_nb = None
        if f_y is not None:
            f_nb = f_y[col] if f_y.ndim == 2 else f_y[:, col, :]  # f(y_j) per entry
        if nonlinear:
            if f_nb.ndim == 3:
                feats = feats.unsqueeze(0).expand(f_nb.shape[0], *feats.shape)
            feats = concat([feats, f_nb], axis=-1)
        rep = self.integral_transform.channel_mlp(feats)
        if f_nb is not None and self.transform_type != "nonlinear_kernelonly":
            rep = rep * f_nb
        reduction = self.reduction
        if self.weighting_fn is not None:
            diff = np.asarray(x._data, np.float64)[row] - np.asarray(y._data, np.float64)[col]
            sq = Tensor(np.einsum("pd,pd->p", diff, diff).astype(rep._data.dtype))
            w = lift(self.weighting_fn(sq))
            rep = rep * w.reshape(-1, 1)
            reduction = "sum"  # the weights are the quadrature: no division by |A(x)|
        return _segment_reduce(rep, graph, reduction)

    def _param_dtype(self) -> np.dtype:
        for p in self.parameters():
            return p.dtype
        return np.dtype(np.float32)

    def extra_repr(self) -> str:
        return (f"in_channels={self.in_channels}, out_channels={self.out_channels}, "
                f"coord_dim={self.coord_dim}, radius={self.radius}, "
                f"transform_type={self.transform_type!r}, reduction={self.reduction!r}, "
                f"pos_embedding_type={self.pos_embedding_type!r}")


__all__ = ["GNOBlock", "IntegralTransform", "LinearChannelMLP", "WEIGHTING_FN_REGISTRY",
           "bump_weighting", "dispatch_weighting_fn", "half_cos_weighting", "octic_weighting",
           "quartic_weighting"]
