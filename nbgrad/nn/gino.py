"""The reference library's point-cloud neural operators (neuraloperator,
``neuralop.models.gino.GINO`` and ``neuralop.models.fnogno.FNOGNO``) with its parameter
names, defaults and module layout, built from nbgrad's ``GNOBlock``, ``ChannelMLP`` and
``FNOBlocks`` (so gradients flow to any order the ops support).

GINO (Li et al. 2023), for input points y_j with features a(y_j), a latent regular grid
g_k and output queries x_i::

    v(g_k)  = mean_{|y_j - g_k| <= r_in} kappa_in(g_k, y_j[, a(y_j)]) [* a(y_j)]   gno_in
    v       = [v, latent_features]                                         (optional)
    w       = FNOBlocks^L(lifting(v))                       on the grid, channels first
    u(x_i)  = sum_{|g_k - x_i| <= r_out} kappa_out(x_i, g_k[, w(g_k)]) * w(g_k) [* rho]
    out(x_i)= projection(u(x_i))                                               gno_out

FNOGNO: w = FNOBlocks^L(lifting([f, grid coordinates])) on the input grid, then the same
output GNO from the grid points to the queries and the projection.

Neighbourhoods depend only on coordinates. Each GNO here is a ``GNOBlock`` whose
``neighbors`` keeps the last few graphs keyed by the shapes and a BLAKE2 digest of the
float64 coordinate bytes (query and input points) and the radius: repeated calls on the
same geometry (the same arrays, or equal copies) reuse the graph; changed coordinates,
even edited in place, give a new key (identity alone would miss in-place edits and a
reused ``id``). Hashing is O(n d), far below the neighbour search.
"""

from __future__ import annotations

import hashlib
import warnings
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..graph import Graph
from ..ops.activation import gelu, tanh
from ..ops.shape import concat
from ..tensor import Tensor, lift
from .fno import FNOBlocks
from .gno_block import GNOBlock, dispatch_weighting_fn
from .layers import _positive
from .module import Module
from .operator_blocks import ChannelMLP
from .spectral import SpectralConv, _mode_list, check_modes_fit

_TANH = (None, "latent_embed", "both")


class CachedGNOBlock(GNOBlock):
    """A ``GNOBlock`` (same parameters, state-dict keys and math) whose neighbour graphs
    are cached: ``neighbors(y, x)`` looks up the key (shape of y, shape of x, radius,
    BLAKE2b digest of the float64 bytes of y and of x) among the last
    ``graph_cache_size`` graphs before calling the neighbour search. ``graph_cache_hits``
    and ``graph_cache_misses`` count look-ups; ``clear_graph_cache()`` empties it."""

    graph_cache_size = 8

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._graphs: OrderedDict = OrderedDict()
        self.graph_cache_hits = self.graph_cache_misses = 0

    @staticmethod
    def _digest(t: Tensor) -> tuple:
        a = np.ascontiguousarray(np.asarray(t._data, np.float64))
        return a.shape, hashlib.blake2b(a.tobytes(), digest_size=16).digest()

    def neighbors(self, y: Any, x: Any) -> Graph:
        y, x = self._points("y", y), self._points("x", x)
        key = (self._digest(y), self._digest(x), self.radius)
        graph = self._graphs.get(key)
        if graph is not None:
            self._graphs.move_to_end(key)
            self.graph_cache_hits += 1
            return graph
        self.graph_cache_misses += 1
        graph = super().neighbors(y, x)
        self._graphs[key] = graph
        while len(self._graphs) > self.graph_cache_size:
            self._graphs.popitem(last=False)
        return graph

    def clear_graph_cache(self) -> None:
        self._graphs.clear()


def _check_latent_grid(owner: str, arg: str, n_modes: list[int], grid: tuple) -> None:
    """fno_n_modes above the Nyquist limit of the grid: a ValueError naming ``owner``,
    fno_n_modes and ``arg``. Dim j keeps n_modes[j] of the grid's n_j modes; the last
    dim keeps n_modes[-1] // 2 + 1 of its n // 2 + 1 rfft bins (as SpectralConv)."""
    kept = [*n_modes[:-1], n_modes[-1] // 2 + 1]
    check_modes_fit(owner, "fno_n_modes", kept, grid, f"{arg} (grid shape {tuple(grid)})",
                    given=n_modes)


def _coords(owner: str, arg: str, value: Any, lead: int, coord_dim: int,
            what: str) -> Tensor:
    """Coordinates [1, *lead, d] or [*lead, d] (``lead`` dims before d) -> [*lead, d]."""
    t = value if isinstance(value, Tensor) else lift(np.asarray(value))
    shape = tuple(t.shape)
    if t.ndim == lead + 2 and t.shape[0] == 1:
        t = t.reshape(*t.shape[1:])
    if t.ndim != lead + 1 or t.shape[-1] != coord_dim:
        raise ValueError(f"{owner}: {arg} has shape {shape}, expected {what} "
                         f"with last dim gno_coord_dim={coord_dim} (an optional leading 1)")
    return t


def _fno_blocks(hidden: int, n_modes: Any, n_layers: int, kw: dict, dtype: Any) -> FNOBlocks:
    """The latent FNOBlocks of both models (the reference passes the fno_* arguments)."""
    if kw["fno_norm"] == "ada_in":
        raise NotImplementedError("fno_norm='ada_in' (adaptive instance norm) is not "
                                  "implemented; use None, 'group_norm', 'instance_norm' or "
                                  "'batch_norm'")
    return FNOBlocks(
        hidden, hidden, n_modes, resolution_scaling_factor=kw["fno_resolution_scaling_factor"],
        n_layers=n_layers, fno_block_precision=kw["fno_block_precision"],
        use_channel_mlp=kw["fno_use_channel_mlp"],
        channel_mlp_dropout=kw["fno_channel_mlp_dropout"],
        channel_mlp_expansion=kw["fno_channel_mlp_expansion"],
        non_linearity=kw["fno_non_linearity"], stabilizer=kw["fno_stabilizer"],
        norm=kw["fno_norm"], norm_groups=kw["fno_norm_groups"],
        preactivation=kw["fno_preactivation"], fno_skip=kw["fno_skip"],
        channel_mlp_skip=kw["fno_channel_mlp_skip"], separable=kw["fno_separable"],
        factorization=kw["fno_factorization"], rank=kw["fno_rank"],
        conv_module=kw["fno_conv_module"], fixed_rank_modes=kw["fno_fixed_rank_modes"],
        implementation=kw["fno_implementation"],
        decomposition_kwargs=kw["fno_decomposition_kwargs"],
        enforce_hermitian_symmetry=kw["fno_enforce_hermitian_symmetry"], dtype=dtype)


def _warn_kwargs(owner: str, kwargs: dict) -> None:
    if kwargs:
        warnings.warn(f"{owner}.forward() received unexpected keyword arguments: "
                      f"{list(kwargs)}. These arguments will be ignored.", UserWarning,
                      stacklevel=3)


def _no_ada_in(owner: str, ada_in: Any) -> None:
    if ada_in is not None:
        raise NotImplementedError(f"{owner}: ada_in (adaptive instance norm) is not "
                                  "implemented; pass ada_in=None")


def _channels_first(v: Tensor) -> Tensor:
    """[B, *grid, C] -> [B, C, *grid]."""
    return v.permute(0, v.ndim - 1, *range(1, v.ndim - 1))


def _channels_last_flat(v: Tensor) -> Tensor:
    """[B, C, *grid] -> [B, prod(grid), C] (grid points in C order, as the coordinates)."""
    b, c = v.shape[0], v.shape[1]
    return v.permute(0, *range(2, v.ndim), 1).reshape(b, -1, c)


class GINO(Module):
    """Geometry-informed neural operator (the module docstring gives the math).

    Parameters, as the reference's (names and defaults): ``in_channels`` (features on
    the input points), ``out_channels``, ``latent_feature_channels`` (channels of the
    optional ``latent_features`` on the grid), ``projection_channel_ratio`` (projection
    hidden width = ratio * fno_hidden_channels), ``gno_coord_dim`` (d),
    ``in_gno_radius`` / ``out_gno_radius``, ``in_gno_transform_type`` /
    ``out_gno_transform_type``, ``gno_weighting_function`` (a name of the weighting
    registry, bound to out_gno_radius^2 and ``gno_weight_function_scale``; output GNO
    only), ``in_gno_pos_embed_type`` / ``out_gno_pos_embed_type``, ``fno_in_channels``
    (channels the input GNO produces for a 'linear' transform; 'nonlinear*' produce
    in_channels), ``fno_n_modes`` (its length is the latent grid's number of dims),
    ``fno_hidden_channels``, ``fno_lifting_channel_ratio``, ``fno_n_layers``,
    ``gno_embed_channels``, ``gno_embed_max_positions``,
    ``in_gno_channel_mlp_hidden_layers`` ([80, 80, 80]),
    ``out_gno_channel_mlp_hidden_layers`` ([512, 256]), ``gno_channel_mlp_non_linearity``,
    ``out_gno_tanh`` (None, 'latent_embed' or 'both': tanh of the latent field before the
    output GNO), and the ``fno_*`` arguments of ``FNOBlocks``. ``gno_use_open3d`` and
    ``gno_use_torch_scatter`` are accepted for the signature (nbgrad has one neighbour
    search and one reduction). ``dtype``: nbgrad's parameter dtype.

    Modules: ``gno_in`` (reduction 'mean'), ``lifting`` (ChannelMLP, 2 layers, width
    fno_lifting_channel_ratio * fno_hidden_channels, gelu), ``fno_blocks``, ``gno_out``
    (reduction 'sum'), ``projection`` (ChannelMLP, 2 layers, fno_non_linearity).
    """

    def __init__(self, in_channels: int, out_channels: int,
                 latent_feature_channels: int | None = None, projection_channel_ratio: int = 4,
                 gno_coord_dim: int = 3, in_gno_radius: float = 0.033,
                 out_gno_radius: float = 0.033, in_gno_transform_type: str = "linear",
                 out_gno_transform_type: str = "linear",
                 gno_weighting_function: str | None = None,
                 gno_weight_function_scale: float = 1,
                 in_gno_pos_embed_type: str | None = "transformer",
                 out_gno_pos_embed_type: str | None = "transformer", fno_in_channels: int = 3,
                 fno_n_modes: Sequence[int] = (16, 16, 16), fno_hidden_channels: int = 64,
                 fno_lifting_channel_ratio: int = 2, fno_n_layers: int = 4,
                 gno_embed_channels: int = 32, gno_embed_max_positions: float = 10000,
                 in_gno_channel_mlp_hidden_layers: Sequence[int] = (80, 80, 80),
                 out_gno_channel_mlp_hidden_layers: Sequence[int] = (512, 256),
                 gno_channel_mlp_non_linearity: Callable = gelu, gno_use_open3d: bool = True,
                 gno_use_torch_scatter: bool = True, out_gno_tanh: str | None = None,
                 fno_resolution_scaling_factor: Any = None, fno_block_precision: str = "full",
                 fno_use_channel_mlp: bool = True, fno_channel_mlp_dropout: float = 0,
                 fno_channel_mlp_expansion: float = 0.5, fno_non_linearity: Callable = gelu,
                 fno_stabilizer: str | None = None, fno_norm: str | None = None,
                 fno_norm_groups: int = 1, fno_ada_in_features: int | None = 4,
                 fno_ada_in_dim: int = 1, fno_preactivation: bool = False,
                 fno_skip: str | None = "linear", fno_channel_mlp_skip: str | None = "soft-gating",
                 fno_separable: bool = False, fno_factorization: str | None = None,
                 fno_rank: float = 1.0, fno_fixed_rank_modes: bool = False,
                 fno_implementation: str = "factorized",
                 fno_decomposition_kwargs: dict | None = None,
                 fno_conv_module: type = SpectralConv,
                 fno_enforce_hermitian_symmetry: bool = True, dtype: Any = None) -> None:
        super().__init__()
        owner = "GINO"
        _positive(owner, in_channels=in_channels, out_channels=out_channels,
                  gno_coord_dim=gno_coord_dim, fno_in_channels=fno_in_channels,
                  fno_hidden_channels=fno_hidden_channels, fno_n_layers=fno_n_layers,
                  projection_channel_ratio=projection_channel_ratio,
                  fno_lifting_channel_ratio=fno_lifting_channel_ratio)
        if latent_feature_channels is not None:
            _positive(owner, latent_feature_channels=latent_feature_channels)
        if out_gno_tanh not in _TANH:
            raise ValueError(f"{owner}: out_gno_tanh must be None, 'latent_embed' or 'both', "
                             f"got {out_gno_tanh!r}")
        modes = _mode_list(owner, "fno_n_modes", fno_n_modes)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.latent_feature_channels, self.gno_coord_dim = latent_feature_channels, gno_coord_dim
        self.fno_hidden_channels = fno_hidden_channels
        self.lifting_channels = fno_lifting_channel_ratio * fno_hidden_channels
        nonlinear_in = in_gno_transform_type in ("nonlinear", "nonlinear_kernelonly")
        in_gno_out_channels = in_channels if nonlinear_in else fno_in_channels
        self.fno_in_channels = in_gno_out_channels + (latent_feature_channels or 0)
        self.in_coord_dim = self.gno_out_coord_dim = len(modes)
        self._fno_modes = modes
        if self.in_coord_dim != gno_coord_dim:
            warnings.warn(f"{owner}: FNO expects {self.in_coord_dim}-d data while input GNO "
                          f"expects {gno_coord_dim}-d data", UserWarning, stacklevel=2)
        self.fno_norm, self.adain_pos_embed, self.ada_in_dim = fno_norm, None, None
        self.in_gno_radius, self.out_gno_radius = in_gno_radius, out_gno_radius
        self.out_gno_tanh = out_gno_tanh
        gno_kw = dict(coord_dim=gno_coord_dim, pos_embedding_channels=gno_embed_channels,
                      pos_embedding_max_positions=gno_embed_max_positions,
                      channel_mlp_non_linearity=gno_channel_mlp_non_linearity,
                      use_torch_scatter_reduce=gno_use_torch_scatter, dtype=dtype)
        self.gno_in = CachedGNOBlock(
            in_channels, in_gno_out_channels, radius=in_gno_radius, reduction="mean",
            weighting_fn=None, pos_embedding_type=in_gno_pos_embed_type,
            channel_mlp_layers=list(in_gno_channel_mlp_hidden_layers),
            transform_type=in_gno_transform_type, **gno_kw)
        self.lifting = ChannelMLP(self.fno_in_channels, fno_hidden_channels,
                                  self.lifting_channels, n_layers=2, dtype=dtype)
        fno_kw = {k: v for k, v in locals().items() if k.startswith("fno_")}
        fno_kw["fno_decomposition_kwargs"] = dict(fno_decomposition_kwargs or {})
        self.fno_blocks = _fno_blocks(fno_hidden_channels, fno_n_modes, fno_n_layers, fno_kw,
                                      dtype)
        weight_fn = None
        if gno_weighting_function is not None:
            weight_fn = dispatch_weighting_fn(gno_weighting_function, out_gno_radius ** 2,
                                              gno_weight_function_scale)
        self.gno_out = CachedGNOBlock(
            fno_hidden_channels, fno_hidden_channels, radius=out_gno_radius, reduction="sum",
            weighting_fn=weight_fn, pos_embedding_type=out_gno_pos_embed_type,
            channel_mlp_layers=list(out_gno_channel_mlp_hidden_layers),
            transform_type=out_gno_transform_type, **gno_kw)
        self.projection = ChannelMLP(fno_hidden_channels, out_channels,
                                     projection_channel_ratio * fno_hidden_channels,
                                     n_layers=2, n_dim=1, non_linearity=fno_non_linearity,
                                     dtype=dtype)

    def latent_embedding(self, in_p: Tensor, ada_in: Any = None) -> Tensor:
        """in_p [B, n_1, .., n_k, fno_in_channels] -> FNOBlocks(lifting(in_p)) as
        [B, fno_hidden_channels, n_1, .., n_k]."""
        _no_ada_in("GINO", ada_in)
        v = self.lifting(_channels_first(in_p))
        for idx in range(self.fno_blocks.n_layers):
            v = self.fno_blocks(v, idx)
        return v

    def forward(self, input_geom: Any, latent_queries: Any, output_queries: Any,
                x: Any = None, latent_features: Any = None, ada_in: Any = None,
                **kwargs: Any) -> Tensor | dict[str, Tensor]:
        """``input_geom`` [1, n_in, d], ``latent_queries`` [1, n_1, .., n_k, d] (a grid,
        k = len(fno_n_modes)), ``output_queries`` [1, n_out, d] or a dict of such (the
        leading 1 optional: one geometry shared by the batch), ``x`` [B, n_in,
        in_channels] or None, ``latent_features`` [B or 1, n_1, .., n_k,
        latent_feature_channels] -> [B, n_out, out_channels] (a dict of them for a dict
        of queries; B = 1 without x)."""
        owner = "GINO"
        _warn_kwargs(owner, kwargs)
        _no_ada_in(owner, ada_in)
        k, d = self.in_coord_dim, self.gno_coord_dim
        input_geom = _coords(owner, "input_geom", input_geom, 1, d, "[1, n_in, d]")
        latent_queries = _coords(owner, "latent_queries", latent_queries, k, d,
                                 f"[1, n_1, .., n_{k}, d] ({k} grid dims = len(fno_n_modes))")
        grid = tuple(latent_queries.shape[:-1])
        _check_latent_grid(owner, "latent_queries", self._fno_modes, grid)
        batch = 1
        if x is not None:
            x = lift(x)
            n_in = input_geom.shape[0]
            if x.ndim != 3 or x.shape[1:] != (n_in, self.in_channels):
                raise ValueError(f"{owner}: x has shape {tuple(x.shape)}, expected [batch, "
                                 f"n_in={n_in}, in_channels={self.in_channels}]")
            batch = x.shape[0]
        if latent_features is not None:
            if self.latent_feature_channels is None:
                raise ValueError(f"{owner}: latent_features given but latent_feature_channels "
                                 "is None; set it at construction")
            latent_features = lift(latent_features)
            want = grid + (self.latent_feature_channels,)
            if latent_features.ndim != k + 2 or latent_features.shape[1:] != want or \
                    latent_features.shape[0] not in (1, batch):
                raise ValueError(f"{owner}: latent_features has shape "
                                 f"{tuple(latent_features.shape)}, expected [{batch} or 1, "
                                 f"{', '.join(map(str, want))}] (the latent_queries grid, "
                                 f"latent_feature_channels)")
            if latent_features.shape[0] != batch:
                latent_features = latent_features.expand(batch, *want)
        elif self.latent_feature_channels is not None:
            raise ValueError(f"{owner}: latent_feature_channels="
                             f"{self.latent_feature_channels} needs latent_features")
        latent_flat = latent_queries.reshape(-1, d)
        in_p = self.gno_in(input_geom, latent_flat, x)   # [(B,) n_1 .. n_k, C]
        in_p = in_p.reshape(batch, *grid, in_p.shape[-1])
        if latent_features is not None:
            in_p = concat([in_p, latent_features], axis=-1)
        latent_embed = _channels_last_flat(self.latent_embedding(in_p))
        if self.out_gno_tanh in ("latent_embed", "both"):
            latent_embed = tanh(latent_embed)
        if isinstance(output_queries, dict):
            return {key: self._query(latent_flat, q, latent_embed, f"output_queries[{key!r}]")
                    for key, q in output_queries.items()}
        return self._query(latent_flat, output_queries, latent_embed, "output_queries")

    def _query(self, latent_flat: Tensor, queries: Any, latent_embed: Tensor,
               arg: str) -> Tensor:
        q = _coords("GINO", arg, queries, 1, self.gno_coord_dim, "[1, n_out, d]")
        out = self.gno_out(latent_flat, q, latent_embed)       # [B, n_out, C]
        return self.projection(out.permute(0, 2, 1)).permute(0, 2, 1)

    def extra_repr(self) -> str:
        return (f"in_channels={self.in_channels}, out_channels={self.out_channels}, "
                f"gno_coord_dim={self.gno_coord_dim}, fno_n_modes={self._fno_modes}")


class FNOGNO(Module):
    """FNO on a regular input grid, then a GNO to arbitrary query points (the module
    docstring gives the math).

    Parameters, as the reference's (names and defaults): ``in_channels``,
    ``out_channels``, ``projection_channel_ratio``, ``gno_coord_dim`` (must equal
    len(fno_n_modes): the grid's coordinates are the GNO's input points),
    ``gno_pos_embed_type``, ``gno_transform_type``, ``fno_n_modes``,
    ``fno_hidden_channels``, ``fno_lifting_channel_ratio`` (4), ``fno_n_layers``,
    ``gno_embed_channels``, ``gno_embed_max_positions``, ``gno_radius``,
    ``gno_weighting_function`` / ``gno_weight_function_scale`` (bound to gno_radius^2),
    ``gno_channel_mlp_hidden_layers`` ([512, 256]), ``gno_channel_mlp_non_linearity``,
    ``gno_batched`` (f carries a batch dim), the ``fno_*`` arguments of ``FNOBlocks``;
    ``gno_use_open3d`` / ``gno_use_torch_scatter`` accepted for the signature.

    Modules: ``lifting`` (ChannelMLP of in_channels + k -> fno_hidden_channels, 3 layers,
    width fno_lifting_channel_ratio * fno_hidden_channels, gelu), ``fno_blocks``, ``gno``
    (reduction 'sum'), ``projection`` (ChannelMLP, 2 layers, fno_non_linearity).
    """

    def __init__(self, in_channels: int, out_channels: int, projection_channel_ratio: int = 4,
                 gno_coord_dim: int = 3, gno_pos_embed_type: str | None = "transformer",
                 gno_transform_type: str = "linear", fno_n_modes: Sequence[int] = (16, 16, 16),
                 fno_hidden_channels: int = 64, fno_lifting_channel_ratio: int = 4,
                 fno_n_layers: int = 4, gno_embed_channels: int = 32,
                 gno_embed_max_positions: float = 10000, gno_radius: float = 0.033,
                 gno_weighting_function: str | None = None,
                 gno_weight_function_scale: float = 1.0,
                 gno_channel_mlp_hidden_layers: Sequence[int] = (512, 256),
                 gno_channel_mlp_non_linearity: Callable = gelu, gno_use_open3d: bool = True,
                 gno_use_torch_scatter: bool = True, gno_batched: bool = False,
                 fno_resolution_scaling_factor: Any = None, fno_block_precision: str = "full",
                 fno_use_channel_mlp: bool = True, fno_channel_mlp_dropout: float = 0,
                 fno_channel_mlp_expansion: float = 0.5, fno_non_linearity: Callable = gelu,
                 fno_stabilizer: str | None = None, fno_norm: str | None = None,
                 fno_norm_groups: int = 1, fno_ada_in_features: int | None = None,
                 fno_ada_in_dim: int = 1, fno_preactivation: bool = False,
                 fno_skip: str | None = "linear", fno_channel_mlp_skip: str | None = "soft-gating",
                 fno_separable: bool = False, fno_factorization: str | None = None,
                 fno_rank: float = 1.0, fno_fixed_rank_modes: bool = False,
                 fno_implementation: str = "factorized",
                 fno_decomposition_kwargs: dict | None = None,
                 fno_conv_module: type = SpectralConv,
                 fno_enforce_hermitian_symmetry: bool = True, dtype: Any = None) -> None:
        super().__init__()
        owner = "FNOGNO"
        _positive(owner, in_channels=in_channels, out_channels=out_channels,
                  gno_coord_dim=gno_coord_dim, fno_hidden_channels=fno_hidden_channels,
                  fno_n_layers=fno_n_layers, projection_channel_ratio=projection_channel_ratio,
                  fno_lifting_channel_ratio=fno_lifting_channel_ratio)
        modes = _mode_list(owner, "fno_n_modes", fno_n_modes)
        if len(modes) != gno_coord_dim:
            # the grid's own coordinates are the GNO's input points, so both must agree
            raise ValueError(f"{owner}: fno_n_modes {tuple(fno_n_modes)} has {len(modes)} "
                             f"grid dims but gno_coord_dim={gno_coord_dim}; the grid "
                             f"coordinates are the GNO's input points, so they must agree")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.gno_coord_dim = self.in_coord_dim = gno_coord_dim
        self._fno_modes, self.gno_batched = modes, bool(gno_batched)
        self.adain_pos_embed, self.ada_in_dim = None, None
        self.fno_hidden_channels, self.gno_radius = fno_hidden_channels, gno_radius
        self.lifting = ChannelMLP(in_channels + self.in_coord_dim, fno_hidden_channels,
                                  fno_lifting_channel_ratio * fno_hidden_channels,
                                  n_layers=3, dtype=dtype)
        fno_kw = {k: v for k, v in locals().items() if k.startswith("fno_")}
        fno_kw["fno_decomposition_kwargs"] = dict(fno_decomposition_kwargs or {})
        self.fno_blocks = _fno_blocks(fno_hidden_channels, fno_n_modes, fno_n_layers, fno_kw,
                                      dtype)
        weight_fn = None
        if gno_weighting_function is not None:
            weight_fn = dispatch_weighting_fn(gno_weighting_function, gno_radius ** 2,
                                              gno_weight_function_scale)
        self.gno = CachedGNOBlock(
            fno_hidden_channels, fno_hidden_channels, gno_coord_dim, gno_radius,
            transform_type=gno_transform_type, weighting_fn=weight_fn,
            pos_embedding_type=gno_pos_embed_type, pos_embedding_channels=gno_embed_channels,
            pos_embedding_max_positions=gno_embed_max_positions,
            channel_mlp_layers=list(gno_channel_mlp_hidden_layers),
            channel_mlp_non_linearity=gno_channel_mlp_non_linearity,
            use_torch_scatter_reduce=gno_use_torch_scatter, dtype=dtype)
        self.projection = ChannelMLP(fno_hidden_channels, out_channels,
                                     projection_channel_ratio * fno_hidden_channels,
                                     n_layers=2, n_dim=1, non_linearity=fno_non_linearity,
                                     dtype=dtype)

    def forward(self, in_p: Any, out_p: Any, f: Any, ada_in: Any = None,
                **kwargs: Any) -> Tensor:
        """``in_p`` [n_1, .., n_k, k] (the grid's coordinates), ``out_p`` [n_out, k],
        ``f`` [n_1, .., n_k, in_channels] (with ``gno_batched``: [B, n_1, .., n_k,
        in_channels]) -> [n_out, out_channels] (batched: [B, n_out, out_channels])."""
        owner = "FNOGNO"
        _warn_kwargs(owner, kwargs)
        _no_ada_in(owner, ada_in)
        k = self.in_coord_dim
        in_p = in_p if isinstance(in_p, Tensor) else lift(np.asarray(in_p))
        if in_p.ndim != k + 1 or in_p.shape[-1] != k:
            raise ValueError(f"{owner}: in_p has shape {tuple(in_p.shape)}, expected "
                             f"[n_1, .., n_{k}, {k}] (grid coordinates, gno_coord_dim={k})")
        grid = tuple(in_p.shape[:-1])
        out_p = out_p if isinstance(out_p, Tensor) else lift(np.asarray(out_p))
        if out_p.ndim != 2 or out_p.shape[1] != k:
            raise ValueError(f"{owner}: out_p has shape {tuple(out_p.shape)}, expected "
                             f"[n_out, gno_coord_dim={k}]")
        _check_latent_grid(owner, "in_p", self._fno_modes, grid)
        f = lift(f)
        lead = (f.shape[0],) if self.gno_batched and f.ndim == k + 2 else ()
        if f.ndim != k + 1 + len(lead) or tuple(f.shape[len(lead):]) != grid + (
                self.in_channels,):
            want = ("[batch, " if self.gno_batched else "[") + \
                f"{', '.join(map(str, grid))}, in_channels={self.in_channels}]"
            raise ValueError(f"{owner}: f has shape {tuple(f.shape)}, expected {want} (the "
                             f"in_p grid{', gno_batched' if self.gno_batched else ''})")
        b = lead[0] if lead else 1
        coords = in_p.unsqueeze(0).expand(b, *in_p.shape) if lead else in_p.unsqueeze(0)
        v = concat([f if lead else f.unsqueeze(0), coords.to(f.dtype)], axis=-1)
        v = self.lifting(_channels_first(v))
        for idx in range(self.fno_blocks.n_layers):
            v = self.fno_blocks(v, idx)
        latent = _channels_last_flat(v)                         # [B, prod(grid), C]
        if not lead:
            latent = latent.reshape(latent.shape[1], latent.shape[2])
        out = self.gno(in_p.reshape(-1, k), out_p, latent)      # [(B,) n_out, C]
        if out.ndim == 2:
            out = out.unsqueeze(0)
        out = self.projection(out.permute(0, 2, 1)).permute(0, 2, 1)
        return out if lead else out.reshape(out.shape[1], out.shape[2])

    def extra_repr(self) -> str:
        return (f"in_channels={self.in_channels}, out_channels={self.out_channels}, "
                f"gno_coord_dim={self.gno_coord_dim}, fno_n_modes={self._fno_modes}")


__all__ = ["GINO", "FNOGNO", "CachedGNOBlock"]
