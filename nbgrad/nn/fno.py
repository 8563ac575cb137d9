"""Fourier neural operators as the reference library (neuraloperator) configures them:
``FNOBlocks`` (``neuralop.layers.fno_block``), the skip connections ``SoftGating``,
``Flattened1dConv`` and ``skip_connection`` (``neuralop.layers.skip_connections``), and
the models ``FNO`` and ``TFNO`` (``neuralop.models.fno``) on grids of 1 to 3 dims, with
the reference's parameter names, defaults and module layout (so state-dict keys such as
``fno_blocks.channel_mlp.0.fcs.1.weight`` or ``fno_blocks.fno_skips.2.conv.weight`` match;
the spectral weights are ``fno_blocks.convs.{i}.weight_real`` / ``weight_imag``, the
reference's complex ``weight`` split in two real parameters).

Every layer is a composition of nbgrad ops and modules (SpectralConv, ChannelMLP,
DomainPadding, GridEmbeddingND, conv1d, the norms), so gradients flow to any order.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from numbers import Real
from typing import Any

import numpy as np

from ..ops.activation import gelu, tanh
from ..ops.group_norm import instance_norm
from ..tensor import Tensor, lift
from .containers import ModuleList
from .embeddings import GridEmbedding2D, GridEmbeddingND
from .layers import Conv1d, Conv2d, Identity, _float_dtype, _positive
from .module import Module
from .normalization import BatchNorm1d, BatchNorm2d, GroupNorm, _BatchNorm
from .operator_blocks import AdaIN, ChannelMLP, DomainPadding
from .parameter import Parameter
from .spectral import SpectralConv, _mode_list, check_modes_fit

_SKIPS = ("linear", "identity", "soft-gating")
_NORMS = ("group_norm", "instance_norm", "batch_norm", "ada_in")


class SoftGating(Module):
    """Soft-gating skip: x [B, C, *grid] -> w * x (+ b), a learned weight per channel.

    ``weight`` (and ``bias`` when ``bias=True``) have shape [1, C, 1, .., 1] with ``n_dim``
    ones and start at 1, as the reference's. ``out_features`` is for the API of a linear
    map only and must equal ``in_features`` when given."""

    def __init__(self, in_features: int, out_features: int | None = None, n_dim: int = 2,
                 bias: bool = False, dtype: Any = None) -> None:
        super().__init__()
        _positive("SoftGating", in_features=in_features, n_dim=n_dim)
        if out_features is not None and out_features != in_features:
            raise ValueError(f"SoftGating: in_features={in_features} and out_features="
                             f"{out_features} must be the same for soft-gating")
        self.in_features, self.out_features, self.n_dim = in_features, out_features, n_dim
        dt = _float_dtype("SoftGating", dtype)
        shape = (1, in_features) + (1,) * n_dim
        self.weight = Parameter(np.ones(shape, dt))
        if bias:
            self.bias = Parameter(np.ones(shape, dt))
        else:
            self.register_parameter("bias", None)

    def forward(self, x: Tensor) -> Tensor:
        x = lift(x)
        if x.ndim != self.n_dim + 2 or x.shape[1] != self.in_features:
            raise ValueError(f"SoftGating: input must be [B, in_features={self.in_features}, "
                             f"*grid] with {self.n_dim} grid dims, got shape "
                             f"{tuple(x.shape)}")
        y = self.weight * x
        return y + self.bias if self.bias is not None else y

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, n_dim={self.n_dim}, "
                f"bias={self.bias is not None}")


class Flattened1dConv(Module):
    """x [B, in_channels, *grid] -> [B, out_channels, *grid]: a ``Conv1d`` (``conv``) over
    the grid flattened to one dim, y[b, o, p] = sum_i W[o, i, 0] x[b, i, p] (+ bias[o]) for
    kernel_size 1: the reference's linear skip, one matrix product per sample."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 1,
                 bias: bool = False, dtype: Any = None) -> None:
        super().__init__()
        self.conv = Conv1d(in_channels, out_channels, kernel_size, bias=bias, dtype=dtype)

    def forward(self, x: Tensor) -> Tensor:
        x = lift(x)
        if x.ndim < 3 or x.shape[1] != self.conv.in_channels:
            raise ValueError(f"Flattened1dConv: input must be [B, in_channels="
                             f"{self.conv.in_channels}, *grid], got shape {tuple(x.shape)}")
        shape = tuple(x.shape)
        y = self.conv(x.reshape(shape[0], shape[1], -1))
        return y.reshape(shape[0], self.conv.out_channels, *shape[2:])


def _skip(owner: str, arg: str, in_features: int, out_features: int, n_dim: int,
          bias: bool, skip_type: Any, dtype: Any) -> Module:
    kind = skip_type.lower() if isinstance(skip_type, str) else skip_type
    if kind == "soft-gating":
        return SoftGating(in_features, out_features, n_dim=n_dim, bias=bias, dtype=dtype)
    if kind == "linear":
        return Flattened1dConv(in_features, out_features, 1, bias=bias, dtype=dtype)
    if kind == "identity":
        if in_features != out_features:
            raise ValueError(f"{owner}: {arg}='identity' needs in_features == out_features, "
                             f"got {in_features} and {out_features}")
        return Identity()
    raise ValueError(f"{owner}: {arg} must be one of {', '.join(map(repr, _SKIPS))}"
                     f"{' or None' if arg != 'skip_type' else ''}, got {skip_type!r}")


def skip_connection(in_features: int, out_features: int, n_dim: int = 2, bias: bool = False,
                    skip_type: str = "soft-gating", dtype: Any = None) -> Module:
    """The skip module of ``skip_type``: 'soft-gating' (``SoftGating``, w * x per channel),
    'linear' (``Flattened1dConv``, a 1x1 convolution W x) or 'identity' (x)."""
    return _skip("skip_connection", "skip_type", in_features, out_features, n_dim, bias,
                 skip_type, dtype)


class _InstanceNorm(Module):
    """The reference's dimension-agnostic ``InstanceNorm``: no parameters, each (sample,
    channel) normalised over its grid points, (x - mean) / sqrt(var + eps)."""

    def __init__(self, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        return instance_norm(x, eps=self.eps)


class _BatchNorm3d(_BatchNorm):
    """Batch normalisation of [N, C, D, H, W] input over N, D, H and W."""

    input_dims = (5,)


def _norm(owner: str, norm: Any, n_dim: int, channels: int, groups: int,
          dtype: Any, ada_in_features: Any = None) -> Module:
    if norm == "instance_norm":
        return _InstanceNorm()
    if norm == "group_norm":
        return GroupNorm(groups, channels, dtype=dtype)
    if norm == "batch_norm":
        return {1: BatchNorm1d, 2: BatchNorm2d, 3: _BatchNorm3d}[n_dim](channels, dtype=dtype)
    if norm == "ada_in":
        if ada_in_features is None:
            raise ValueError(f"{owner}: norm='ada_in' needs ada_in_features (the size of "
                             "the embedding that set_ada_in_embeddings sets)")
        return AdaIN(ada_in_features, channels, dtype=dtype)
    raise ValueError(f"{owner}: norm must be None or one of {', '.join(map(repr, _NORMS))}, "
                     f"got {norm!r}")


def _real_same_grid(owner: str, complex_data: bool, resolution_scaling_factor: Any) -> None:
    """What nbgrad's Fourier layers do not implement: complex data, and an output grid
    other than the input's."""
    if complex_data:
        raise NotImplementedError(f"{owner}: complex_data=True is not implemented; "
                                  "nbgrad's Fourier layers take real data")
    if resolution_scaling_factor is not None:
        raise NotImplementedError(f"{owner}: resolution_scaling_factor="
                                  f"{resolution_scaling_factor!r} is not implemented; "
                                  "use None (output grid = input grid)")


def _check_grid(owner: str, conv: Module, shape: tuple, after: str = "") -> None:
    """Modes above a grid's Fourier modes: a ValueError naming ``owner`` and n_modes."""
    if isinstance(conv, SpectralConv):
        check_modes_fit(owner, "n_modes", conv.n_modes, shape[2:],
                        f"the input{after} (shape {shape})")


class FNOBlocks(Module):
    """``n_layers`` Fourier layers sharing one configuration; ``forward(x, index)`` runs
    layer ``index``, x [B, in_channels, *grid] -> [B, out_channels, *grid].

    With K = ``convs[index]`` (a ``SpectralConv``, or ``conv_module``), S =
    ``fno_skips[index]``, M = ``channel_mlp[index]`` (a 2-layer ``ChannelMLP``, hidden
    width round(out_channels * channel_mlp_expansion)), T = ``channel_mlp_skips[index]``,
    N_1, N_2 = ``norm[2 index]``, ``norm[2 index + 1]`` and sigma = ``non_linearity``
    applied only when index < n_layers - 1 (written [sigma]), the post-activation layer::

        u = N_1(K(x)) + S(x);  u = [sigma](u);  u = M(u) + T(x);  u = [sigma](N_2(u))

    and with ``preactivation=True``::

        x = N_1(sigma(x));  u = [sigma](K(x) + S(x));  u = M(N_2(u)) + T(x)

    (a missing skip, channel-MLP or norm drops its term; without the channel-MLP the
    post-activation layer applies [sigma] twice, as the reference does). With
    ``stabilizer='tanh'`` K sees tanh(x). Skips (``fno_skip``, ``channel_mlp_skip``):
    'linear' (a 1x1 convolution without bias, or with ``conv_bias_kernel`` k > 1 a
    ``Conv{n}d`` of kernel k, 'same' padding, no bias: 1-D and 2-D here), 'identity',
    'soft-gating' (a weight per channel) or None. Norms: None, 'group_norm' (GroupNorm of
    ``norm_groups`` groups), 'instance_norm' (no parameters), 'batch_norm', 'ada_in'
    (``AdaIN`` of ``ada_in_features``; ``set_ada_in_embeddings`` sets the embeddings).

    ``n_modes`` (settable, for every layer) and ``max_n_modes``, ``separable``,
    ``factorization``, ``rank``, ``fixed_rank_modes``, ``implementation``,
    ``decomposition_kwargs``, ``fno_block_precision`` and ``enforce_hermitian_symmetry``
    go to the spectral convolutions, which raise on what they do not implement. Not here
    (NotImplementedError): ``complex_data``, ``resolution_scaling_factor``.
    """

    def __init__(self, in_channels: int, out_channels: int, n_modes: int | Sequence[int],
                 resolution_scaling_factor: Any = None, n_layers: int = 1,
                 max_n_modes: int | Sequence[int] | None = None,
                 fno_block_precision: str = "full", use_channel_mlp: bool = True,
                 channel_mlp_dropout: float = 0, channel_mlp_expansion: float = 0.5,
                 non_linearity: Callable[[Tensor], Tensor] = gelu, stabilizer: str | None = None,
                 norm: str | None = None, norm_groups: int = 1, ada_in_features: Any = None,
                 preactivation: bool = False, fno_skip: str | None = "linear",
                 conv_bias_kernel: int = 1, channel_mlp_skip: str | None = "soft-gating",
                 complex_data: bool = False, separable: bool = False,
                 factorization: str | None = None, rank: float = 1.0,
                 conv_module: type = SpectralConv, fixed_rank_modes: bool = False,
                 implementation: str = "factorized", decomposition_kwargs: dict | None = None,
                 enforce_hermitian_symmetry: bool = True, dtype: Any = None) -> None:
        super().__init__()
        name = "FNOBlocks"
        _positive(name, in_channels=in_channels, out_channels=out_channels,
                  n_layers=n_layers, conv_bias_kernel=conv_bias_kernel)
        modes = _mode_list(name, "n_modes", n_modes)
        _real_same_grid(name, complex_data, resolution_scaling_factor)
        if stabilizer not in (None, "tanh"):
            raise ValueError(f"{name}: stabilizer must be None or 'tanh', got {stabilizer!r}")
        if not callable(non_linearity):
            raise TypeError(f"{name}: non_linearity must be callable, got {non_linearity!r}")
        if not (isinstance(conv_module, type) and issubclass(conv_module, Module)):
            raise TypeError(f"{name}: conv_module must be a Module class, got "
                            f"{conv_module!r}")
        if isinstance(channel_mlp_expansion, bool) or not isinstance(
                channel_mlp_expansion, Real) or not channel_mlp_expansion > 0:
            raise ValueError(f"{name}: channel_mlp_expansion must be a positive number, got "
                             f"{channel_mlp_expansion!r}")
        self._n_modes = n_modes if not isinstance(n_modes, int) else [n_modes]
        self.n_dim = len(modes)
        self.in_channels, self.out_channels, self.n_layers = in_channels, out_channels, n_layers
        self.max_n_modes, self.fno_block_precision = max_n_modes, fno_block_precision
        self.resolution_scaling_factor, self.stabilizer = None, stabilizer
        self.rank, self.factorization, self.fixed_rank_modes = rank, factorization, \
            fixed_rank_modes
        self.decomposition_kwargs = dict(decomposition_kwargs or {})
        self.fno_skip, self.conv_bias_kernel = fno_skip, conv_bias_kernel
        self.channel_mlp_skip, self.complex_data = channel_mlp_skip, False
        self.use_channel_mlp, self.channel_mlp_expansion = use_channel_mlp, \
            channel_mlp_expansion
        self.channel_mlp_dropout, self.implementation = channel_mlp_dropout, implementation
        self.separable, self.preactivation = separable, preactivation
        self.ada_in_features = ada_in_features
        self.enforce_hermitian_symmetry = enforce_hermitian_symmetry
        self.non_linearity = non_linearity

        extra = {}
        if issubclass(conv_module, SpectralConv):
            extra = dict(enforce_hermitian_symmetry=enforce_hermitian_symmetry, dtype=dtype)
        self.convs = ModuleList([
            conv_module(in_channels, out_channels, self._n_modes, max_n_modes=max_n_modes,
                        rank=rank, fixed_rank_modes=fixed_rank_modes,
                        implementation=implementation, separable=separable,
                        factorization=factorization, fno_block_precision=fno_block_precision,
                        decomposition_kwargs=self.decomposition_kwargs, complex_data=False,
                        **extra)
            for _ in range(n_layers)])

        if fno_skip is None or (isinstance(fno_skip, str) and fno_skip.lower() != "linear"):
            if conv_bias_kernel != 1:
                raise ValueError(f"{name}: conv_bias_kernel={conv_bias_kernel} needs "
                                 f"fno_skip='linear', got fno_skip={fno_skip!r}")
        if fno_skip is None:
            self.fno_skips = None
        else:
            self.fno_skips = ModuleList([
                self._conv_bias(dtype) if conv_bias_kernel > 1
                else _skip(name, "fno_skip", in_channels, out_channels, self.n_dim, False,
                           fno_skip, dtype)
                for _ in range(n_layers)])

        self.channel_mlp = self.channel_mlp_skips = None
        if use_channel_mlp:
            hidden = round(out_channels * channel_mlp_expansion)
            if hidden < 1:
                raise ValueError(f"{name}: channel_mlp_expansion={channel_mlp_expansion!r} "
                                 f"gives round({out_channels} * {channel_mlp_expansion!r}) "
                                 "= 0 hidden channels in the channel-MLP")
            self.channel_mlp = ModuleList([
                ChannelMLP(out_channels, hidden_channels=hidden,
                           dropout=channel_mlp_dropout, n_dim=self.n_dim, dtype=dtype)
                for _ in range(n_layers)])
            if channel_mlp_skip is not None:
                self.channel_mlp_skips = ModuleList([
                    _skip(name, "channel_mlp_skip", in_channels, out_channels, self.n_dim,
                          False, channel_mlp_skip, dtype)
                    for _ in range(n_layers)])

        # two norms per layer: after the convolution and after the channel-MLP
        self.n_norms = 2
        self.norm = None if norm is None else ModuleList([
            _norm(name, norm, self.n_dim, out_channels, norm_groups, dtype, ada_in_features)
            for _ in range(n_layers * self.n_norms)])

    def _conv_bias(self, dtype: Any) -> Module:
        """A local convolution of kernel conv_bias_kernel beside the spectral one."""
        conv = {1: Conv1d, 2: Conv2d}.get(self.n_dim)
        if conv is None:
            raise NotImplementedError(f"FNOBlocks: conv_bias_kernel > 1 is implemented for "
                                      f"1-D and 2-D grids, not {self.n_dim}-D")
        return conv(self.in_channels, self.out_channels, self.conv_bias_kernel,
                    padding="same", bias=False, dtype=dtype)

    @property
    def n_modes(self) -> Any:
        """The modes as given (the spectral convolutions' ``n_modes`` give the kept ones)."""
        return self._n_modes

    @n_modes.setter
    def n_modes(self, n_modes: int | Sequence[int]) -> None:
        for conv in self.convs:
            conv.n_modes = n_modes
        self._n_modes = n_modes

    def set_ada_in_embeddings(self, *embeddings: Any) -> None:
        """The embedding of every 'ada_in' norm: one for all, or one per norm (two per
        layer: after the spectral convolution, after the channel-MLP)."""
        if self.norm is None or not isinstance(self.norm[0], AdaIN):
            raise RuntimeError("FNOBlocks.set_ada_in_embeddings: the blocks have no 'ada_in' "
                               "norm")
        if len(embeddings) not in (1, len(self.norm)):
            raise ValueError(f"FNOBlocks.set_ada_in_embeddings: give one embedding or "
                             f"{len(self.norm)} (one per norm), got {len(embeddings)}")
        for k, norm in enumerate(self.norm):
            norm.set_embedding(embeddings[0 if len(embeddings) == 1 else k])

    def forward(self, x: Tensor, index: int = 0,
                output_shape: Sequence[int] | None = None) -> Tensor:
        x = lift(x)
        if not (isinstance(index, (int, np.integer)) and 0 <= index < self.n_layers):
            raise IndexError(f"FNOBlocks: index must be an int in [0, {self.n_layers}), got "
                             f"{index!r}")
        if x.ndim != self.n_dim + 2 or x.shape[1] != self.in_channels:
            raise ValueError(f"FNOBlocks: input must be [B, in_channels={self.in_channels}, "
                             f"*grid] with {self.n_dim} grid dims (n_modes "
                             f"{self._n_modes}), got shape {tuple(x.shape)}")
        _check_grid("FNOBlocks", self.convs[index], tuple(x.shape))
        if self.preactivation:
            return self._forward_pre(x, index, output_shape)
        return self._forward_post(x, index, output_shape)

    def _skips(self, x: Tensor, index: int, output_shape: Any) -> tuple:
        conv = self.convs[index]
        move = getattr(conv, "transform", lambda v, output_shape=None: v)
        s_fno = s_mlp = None
        if self.fno_skips is not None:
            s_fno = move(self.fno_skips[index](x), output_shape=output_shape)
        if self.channel_mlp_skips is not None:
            s_mlp = move(self.channel_mlp_skips[index](x), output_shape=output_shape)
        return s_fno, s_mlp

    def _conv(self, x: Tensor, index: int, output_shape: Any) -> Tensor:
        if self.stabilizer == "tanh":
            x = tanh(x)
        return self.convs[index](x, output_shape=output_shape)

    def _forward_post(self, x: Tensor, index: int, output_shape: Any) -> Tensor:
        inner = index < self.n_layers - 1
        s_fno, s_mlp = self._skips(x, index, output_shape)
        u = self._conv(x, index, output_shape)
        if self.norm is not None:
            u = self.norm[self.n_norms * index](u)
        if s_fno is not None:
            u = u + s_fno
        if inner:
            u = self.non_linearity(u)
        if self.channel_mlp is not None:
            u = self.channel_mlp[index](u)
            if s_mlp is not None:
                u = u + s_mlp
        if self.norm is not None:
            u = self.norm[self.n_norms * index + 1](u)
        return self.non_linearity(u) if inner else u

    def _forward_pre(self, x: Tensor, index: int, output_shape: Any) -> Tensor:
        x = self.non_linearity(x)
        if self.norm is not None:
            x = self.norm[self.n_norms * index](x)
        s_fno, s_mlp = self._skips(x, index, output_shape)
        u = self._conv(x, index, output_shape)
        if s_fno is not None:
            u = u + s_fno
        if index < self.n_layers - 1:
            u = self.non_linearity(u)
        if self.norm is not None:
            u = self.norm[self.n_norms * index + 1](u)
        if self.channel_mlp is not None:
            u = self.channel_mlp[index](u)
            if s_mlp is not None:
                u = u + s_mlp
        return u

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, n_modes={self._n_modes}, "
                f"n_layers={self.n_layers}, fno_skip={self.fno_skip!r}, "
                f"channel_mlp_skip={self.channel_mlp_skip!r}, "
                f"preactivation={self.preactivation}")


def _padding_fractions(value: Any, n_dim: int) -> list[float] | float | None:
    """domain_padding: None, a number or n_dim numbers, each in [0, 1) (ValueError)."""
    if value is None:
        return None
    ok = isinstance(value, Real) and not isinstance(value, bool)
    values = [value] if ok else value
    if not ok and not (isinstance(value, Sequence) and not isinstance(value, str)
                       and len(value) == n_dim and all(isinstance(v, Real)
                                                       and not isinstance(v, bool)
                                                       for v in value)):
        raise ValueError(f"FNO: domain_padding must be None, a number or {n_dim} numbers (one "
                         f"per grid dim), got {value!r}")
    if not all(0.0 <= float(v) < 1.0 for v in values):
        raise ValueError(f"FNO: domain_padding must be fractions in [0, 1) of each grid "
                         f"size, got {value!r}")
    return float(value) if ok else [float(v) for v in value]


def grid_embedding(name: str, positional_embedding: Any, in_channels: int, d: int,
                   modes_text: str) -> GridEmbeddingND | None:
    """The positional embedding a model takes: a GridEmbeddingND of the unit box for
    'grid', the given one (checked against the grid's ``d`` dims, named ``modes_text``,
    and ``in_channels``), or None."""
    if isinstance(positional_embedding, str) and positional_embedding == "grid":
        return GridEmbeddingND(in_channels, dim=d, grid_boundaries=[[0.0, 1.0]] * d)
    if isinstance(positional_embedding, GridEmbeddingND):
        if positional_embedding.dim != d or (isinstance(positional_embedding, GridEmbedding2D)
                                             and d != 2):
            raise ValueError(f"{name}: positional_embedding has dim="
                             f"{positional_embedding.dim} but {modes_text} has {d} grid dims")
        if positional_embedding.in_channels != in_channels:
            raise ValueError(f"{name}: positional_embedding takes in_channels="
                             f"{positional_embedding.in_channels}, but in_channels="
                             f"{in_channels}")
        return positional_embedding
    if positional_embedding is None:
        return None
    raise ValueError(f"{name}: positional_embedding must be 'grid', a GridEmbeddingND or "
                     f"None, got {positional_embedding!r}")


class FNO(Module):
    """The Fourier neural operator of neuraloperator (Li et al. 2021; Kossaifi et al.
    2024), x [B, in_channels, *grid] -> [B, out_channels, *grid] on d = len(n_modes) grid
    dims (1 to 3)::

        x = [x, grid coordinates]          positional_embedding 'grid' (d more channels)
        v = lifting(x)                     ChannelMLP in -> lifting_channels -> hidden
        v = pad(v)                         DomainPadding by ``domain_padding`` (if > 0)
        v = fno_blocks(v, i), i < n_layers FNOBlocks (see there)
        v = unpad(v)
        y = projection(v)                  ChannelMLP hidden -> projection_channels -> out

    lifting_channels = int(lifting_channel_ratio * hidden_channels), likewise
    projection_channels. ``positional_embedding``: 'grid' (a ``GridEmbeddingND`` over
    [0, 1]^d), a ``GridEmbeddingND`` of d dims, or None. ``domain_padding``: a fraction in
    [0, 1) for every grid dim or one per dim (symmetric zero padding). The other
    arguments configure ``FNOBlocks`` with the reference's defaults; ``n_modes`` may be
    set after construction. ``dtype`` (nbgrad's) picks float32 or float64 parameters.
    """

    def __init__(self, n_modes: Sequence[int], in_channels: int, out_channels: int,
                 hidden_channels: int, n_layers: int = 4, lifting_channel_ratio: float = 2,
                 projection_channel_ratio: float = 2,
                 positional_embedding: str | GridEmbeddingND | None = "grid",
                 non_linearity: Callable[[Tensor], Tensor] = gelu, norm: str | None = None,
                 norm_groups: int = 1, complex_data: bool = False, use_channel_mlp: bool = True,
                 channel_mlp_dropout: float = 0, channel_mlp_expansion: float = 0.5,
                 channel_mlp_skip: str | None = "soft-gating", fno_skip: str | None = "linear",
                 conv_bias_kernel: int = 1, resolution_scaling_factor: Any = None,
                 domain_padding: float | Sequence[float] | None = None,
                 fno_block_precision: str = "full", stabilizer: str | None = None,
                 max_n_modes: Sequence[int] | None = None, factorization: str | None = None,
                 rank: float = 1.0, fixed_rank_modes: bool = False,
                 implementation: str = "factorized", decomposition_kwargs: dict | None = None,
                 separable: bool = False, preactivation: bool = False,
                 conv_module: type = SpectralConv, enforce_hermitian_symmetry: bool = True,
                 dtype: Any = None) -> None:
        super().__init__()
        name = type(self).__name__
        modes = _mode_list(name, "n_modes", n_modes)
        d = len(modes)
        _positive(name, in_channels=in_channels, out_channels=out_channels,
                  hidden_channels=hidden_channels, n_layers=n_layers)
        for arg, ratio in (("lifting_channel_ratio", lifting_channel_ratio),
                           ("projection_channel_ratio", projection_channel_ratio)):
            if isinstance(ratio, bool) or not isinstance(ratio, Real) \
                    or int(ratio * hidden_channels) < 1:
                raise ValueError(f"{name}: {arg} * hidden_channels must be at least 1 "
                                 f"channel, got {arg}={ratio!r} and hidden_channels="
                                 f"{hidden_channels}")
        _real_same_grid(name, complex_data, resolution_scaling_factor)
        fractions = _padding_fractions(domain_padding, d)
        self.n_dim, self._n_modes = d, n_modes
        self.in_channels, self.out_channels = in_channels, out_channels
        self.hidden_channels, self.n_layers = hidden_channels, n_layers
        self.lifting_channel_ratio = lifting_channel_ratio
        self.lifting_channels = int(lifting_channel_ratio * hidden_channels)
        self.projection_channel_ratio = projection_channel_ratio
        self.projection_channels = int(projection_channel_ratio * hidden_channels)
        self.non_linearity, self.rank, self.factorization = non_linearity, rank, factorization
        self.fixed_rank_modes, self.implementation = fixed_rank_modes, implementation
        self.decomposition_kwargs = dict(decomposition_kwargs or {})
        self.fno_skip, self.channel_mlp_skip = fno_skip, channel_mlp_skip
        self.conv_bias_kernel, self.separable = conv_bias_kernel, separable
        self.preactivation, self.complex_data = preactivation, False
        self.fno_block_precision, self.resolution_scaling_factor = fno_block_precision, None

        self.positional_embedding = grid_embedding(name, positional_embedding, in_channels,
                                                   d, f"n_modes {n_modes!r}")

        positive = fractions is not None and (
            sum(fractions) > 0 if isinstance(fractions, list) else fractions > 0)
        self.domain_padding = DomainPadding(fractions) if positive else None

        self.fno_blocks = FNOBlocks(
            hidden_channels, hidden_channels, n_modes, n_layers=n_layers,
            max_n_modes=max_n_modes, fno_block_precision=fno_block_precision,
            use_channel_mlp=use_channel_mlp, channel_mlp_dropout=channel_mlp_dropout,
            channel_mlp_expansion=channel_mlp_expansion, non_linearity=non_linearity,
            stabilizer=stabilizer, norm=norm, norm_groups=norm_groups,
            preactivation=preactivation, fno_skip=fno_skip, conv_bias_kernel=conv_bias_kernel,
            channel_mlp_skip=channel_mlp_skip, separable=separable,
            factorization=factorization, rank=rank, conv_module=conv_module,
            fixed_rank_modes=fixed_rank_modes, implementation=implementation,
            decomposition_kwargs=self.decomposition_kwargs,
            enforce_hermitian_symmetry=enforce_hermitian_symmetry, dtype=dtype)

        lifting_in = in_channels + (d if self.positional_embedding is not None else 0)
        self.lifting = ChannelMLP(lifting_in, hidden_channels, self.lifting_channels,
                                  n_layers=2, n_dim=d, non_linearity=non_linearity, dtype=dtype)
        self.projection = ChannelMLP(hidden_channels, out_channels, self.projection_channels,
                                     n_layers=2, n_dim=d, non_linearity=non_linearity,
                                     dtype=dtype)

    @property
    def n_modes(self) -> Any:
        return self._n_modes

    @n_modes.setter
    def n_modes(self, n_modes: Sequence[int]) -> None:
        self.fno_blocks.n_modes = n_modes
        self._n_modes = n_modes

    def forward(self, x: Tensor, output_shape: Any = None, **kwargs: Any) -> Tensor:
        """``output_shape``: None, a grid shape for the last block, or a list of one per
        block (only the input's own grid is implemented)."""
        name = type(self).__name__
        if kwargs:
            warnings.warn(f"{name}.forward() received unexpected keyword arguments: "
                          f"{list(kwargs)}. These arguments will be ignored.", UserWarning,
                          stacklevel=2)
        x = lift(x)
        if x.ndim != self.n_dim + 2 or x.shape[1] != self.in_channels:
            layout = ", ".join(f"d_{k + 1}" for k in range(self.n_dim))
            raise ValueError(f"{name}: input must be [B, in_channels={self.in_channels}, "
                             f"{layout}] ({self.n_dim} grid dims, n_modes {self._n_modes}), "
                             f"got shape {tuple(x.shape)}")
        if output_shape is None:
            output_shape = [None] * self.n_layers
        elif isinstance(output_shape, tuple):
            output_shape = [None] * (self.n_layers - 1) + [output_shape]
        if self.positional_embedding is not None:
            x = self.positional_embedding(x)
        v = self.lifting(x)
        if self.domain_padding is not None:
            v = self.domain_padding.pad(v)
        _check_grid(name, self.fno_blocks.convs[0], tuple(v.shape),
                    " after domain padding" if self.domain_padding is not None else "")
        for i in range(self.n_layers):
            v = self.fno_blocks(v, i, output_shape=output_shape[i])
        if self.domain_padding is not None:
            v = self.domain_padding.unpad(v)
        return self.projection(v)

    def extra_repr(self) -> str:
        return (f"n_modes={self._n_modes}, in_channels={self.in_channels}, out_channels="
                f"{self.out_channels}, hidden_channels={self.hidden_channels}, n_layers="
                f"{self.n_layers}")


class TFNO(FNO):
    """``FNO`` with Tucker-factorised spectral weights by default: factorization='Tucker'
    and rank=0.1 unless given (a rank-0.1 TFNO holds about 10% of a dense FNO's spectral
    parameters). Every other argument is FNO's."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("factorization", "Tucker")
        kwargs.setdefault("rank", 0.1)
        super().__init__(*args, **kwargs)
