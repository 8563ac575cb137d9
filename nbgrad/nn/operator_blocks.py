"""Small blocks of the neural operators of the reference library (neuraloperator,
``neuralop.layers``), channels first, with its parameter names and defaults:

* ``ChannelMLP``: a point-wise MLP over the channels of x [B, C, *spatial], the lifting and
  projection maps of an FNO (``neuralop.layers.channel_mlp.ChannelMLP``);
* ``DomainPadding``: zero padding of every spatial dim by a fraction of its size, and its
  inverse crop (``neuralop.layers.padding.DomainPadding``), the treatment of
  non-periodic inputs before Fourier layers;
* ``AdaIN``: instance normalisation whose per-channel scale and shift an MLP computes
  from an embedding (``neuralop.layers.normalization_layers.AdaIN``), FNOBlocks'
  ``norm='ada_in'``.

All are compositions of nbgrad ops (conv1d, linear, gelu, dropout, pad, group_norm,
slicing), so gradients flow through them to any order the ops support.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from numbers import Real
from typing import Any

from ..ops.activation import gelu
from ..ops.group_norm import group_norm
from ..ops.pad import pad as _pad
from ..tensor import Tensor
from .activation import GELU
from .containers import ModuleList, Sequential
from .layers import Conv1d, Linear, _positive
from .module import Module
from .normalization import Dropout


def _is_number(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


class ChannelMLP(Module):
    """Point-wise MLP over channels: x [B, in_channels, *spatial] -> [B, out_channels,
    *spatial], the same map at every spatial point.

    With h_0 = x (spatial dims flattened to one, as the reference does) and W_i, b_i the
    weight [c_{i+1}, c_i, 1] and bias of ``fcs[i]`` (a 1x1 ``Conv1d``)::

        h_{i+1} = dropout_i(sigma(W_i h_i + b_i))   for i < n_layers - 1
        y       = dropout_{n-1}(W_{n-1} h_{n-1} + b_{n-1})

    with sigma = ``non_linearity`` (gelu by default) and channel widths in_channels ->
    hidden_channels -> ... -> out_channels (one layer maps in_channels -> out_channels).
    ``out_channels`` and ``hidden_channels`` default to ``in_channels``. As in the
    reference's code, a dropout with probability ``dropout`` follows every layer,
    the last included, when ``dropout > 0`` (none otherwise). ``n_dim`` is accepted for
    compatibility and unused: inputs of any number of spatial dims (>= 1) are taken.
    Parameter names follow the reference: ``fcs.{i}.weight``, ``fcs.{i}.bias``.
    """

    def __init__(self, in_channels: int, out_channels: int | None = None,
                 hidden_channels: int | None = None, n_layers: int = 2, n_dim: int = 2,
                 non_linearity: Callable[[Tensor], Tensor] = gelu, dropout: float = 0.0,
                 dtype: Any = None) -> None:
        super().__init__()
        out_channels = in_channels if out_channels is None else out_channels
        hidden_channels = in_channels if hidden_channels is None else hidden_channels
        _positive("ChannelMLP", in_channels=in_channels, out_channels=out_channels,
                  hidden_channels=hidden_channels, n_layers=n_layers, n_dim=n_dim)
        if not callable(non_linearity):
            raise TypeError(f"ChannelMLP: non_linearity must be callable, got "
                            f"{non_linearity!r}")
        if not _is_number(dropout) or not 0.0 <= dropout <= 1.0:
            raise ValueError(f"ChannelMLP: dropout must be a probability in [0, 1], got "
                             f"{dropout!r}")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.hidden_channels, self.n_layers, self.n_dim = hidden_channels, n_layers, n_dim
        self.non_linearity = non_linearity
        widths = [in_channels] + [hidden_channels] * (n_layers - 1) + [out_channels]
        self.fcs = ModuleList([Conv1d(widths[i], widths[i + 1], 1, dtype=dtype)
                               for i in range(n_layers)])
        self.dropout = (ModuleList([Dropout(dropout) for _ in range(n_layers)])
                        if dropout > 0.0 else None)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim < 3 or x.shape[1] != self.in_channels:
            raise ValueError(f"ChannelMLP: input must be [B, in_channels={self.in_channels}, "
                             f"*spatial] with at least one spatial dim, got shape "
                             f"{tuple(x.shape)}")
        shape = tuple(x.shape)
        # A 1x1 convolution acts on each point alone, so flattening the spatial dims to
        # one changes nothing but lets Conv1d serve every dimension.
        h = x.reshape(shape[0], shape[1], -1) if x.ndim > 3 else x
        for i, fc in enumerate(self.fcs):
            h = fc(h)
            if i < self.n_layers - 1:
                h = self.non_linearity(h)
            if self.dropout is not None:
                h = self.dropout[i](h)
        return h.reshape(shape[0], self.out_channels, *shape[2:]) if x.ndim > 3 else h

    def extra_repr(self) -> str:
        return (f"in_channels={self.in_channels}, out_channels={self.out_channels}, "
                f"hidden_channels={self.hidden_channels}, n_layers={self.n_layers}")


def _per_dim(owner: str, name: str, value: Any) -> list[float] | float:
    """A number, or a list/tuple of numbers (one per spatial dim), as floats."""
    if _is_number(value):
        return float(value)
    if isinstance(value, Sequence) and not isinstance(value, str) and len(value) > 0 \
            and all(_is_number(v) for v in value):
        return [float(v) for v in value]
    raise ValueError(f"{owner}: {name} must be a number or a non-empty list of numbers "
                     f"(one per spatial dim), got {value!r}")


class DomainPadding(Module):
    """Zero-pad each spatial dim of x [B, C, d_1, ..., d_N] by a fraction of its size
    (``pad``), and crop the padding off again (``unpad``).

    Dim k of size n_k gets p_k = round(f_k n_k) zeros (Python's round, as the reference)
    with f_k = ``domain_padding`` (one number for every dim, or a list of N), each in
    [0, 1). ``padding_mode='symmetric'`` (the reference's behaviour today) pads p_k on
    both sides, ``'one-sided'`` (the reference's earlier default) p_k at the end only.

    ``resolution_scaling_factor`` s_k (a number or a list of N; default 1) is for models
    that change the resolution between ``pad`` and ``unpad``: the padded size m_k =
    n_k + (1 or 2) p_k becomes round(s_k m_k), and ``unpad`` removes round(s_k p_k) from
    each padded side of an input of that spatial shape. ``pad`` remembers the output
    shape it leads to; ``unpad`` of any other shape is an error. ``forward`` is ``pad``.
    """

    _MODES = ("symmetric", "one-sided")

    def __init__(self, domain_padding: float | Sequence[float],
                 resolution_scaling_factor: float | Sequence[float] | None = 1,
                 padding_mode: str = "symmetric") -> None:
        super().__init__()
        fractions = _per_dim("DomainPadding", "domain_padding", domain_padding)
        for f in fractions if isinstance(fractions, list) else [fractions]:
            if not 0.0 <= f < 1.0:
                raise ValueError(f"DomainPadding: domain_padding must be a fraction in "
                                 f"[0, 1) of each spatial size, got {domain_padding!r}")
        scale = _per_dim("DomainPadding", "resolution_scaling_factor",
                         1 if resolution_scaling_factor is None else resolution_scaling_factor)
        for s in scale if isinstance(scale, list) else [scale]:
            if not s > 0:
                raise ValueError(f"DomainPadding: resolution_scaling_factor must be "
                                 f"positive, got {resolution_scaling_factor!r}")
        mode = padding_mode.lower() if isinstance(padding_mode, str) else padding_mode
        if mode not in self._MODES:
            raise ValueError(f"DomainPadding: padding_mode must be one of "
                             f"{', '.join(self._MODES)}, got {padding_mode!r}")
        self.domain_padding, self.resolution_scaling_factor = fractions, scale
        self.padding_mode = mode
        # spatial shape of an input to unpad -> the slices that crop it
        self._unpad_indices: dict[tuple[int, ...], tuple] = {}

    def _for_dims(self, name: str, value: list[float] | float, n: int,
                  shape: tuple) -> list[float]:
        if not isinstance(value, list):
            return [value] * n
        if len(value) != n:
            raise ValueError(f"DomainPadding: {name} has {len(value)} entries but the input "
                             f"of shape {shape} has {n} spatial dims")
        return value

    def padding(self, resolution: Sequence[int], shape: tuple | None = None) -> list[int]:
        """p_k = round(f_k n_k): the zeros added to each padded side of dim k of size n_k
        (``shape``: the whole input's, for error messages)."""
        resolution = tuple(resolution)
        fractions = self._for_dims("domain_padding", self.domain_padding, len(resolution),
                                   resolution if shape is None else shape)
        return [round(f * n) for f, n in zip(fractions, resolution)]

    def pad(self, x: Tensor) -> Tensor:
        """x [B, C, n_1, ..., n_N] -> [B, C, n_1 + (1|2) p_1, ...], zeros in the padding."""
        if x.ndim < 3:
            raise ValueError(f"DomainPadding: input must be [B, C, d_1, ..., d_N] with at "
                             f"least one spatial dim, got shape {tuple(x.shape)}")
        shape = tuple(x.shape)
        resolution = shape[2:]
        p = self.padding(resolution, shape)
        scale = self._for_dims("resolution_scaling_factor", self.resolution_scaling_factor,
                               len(resolution), shape)
        sides = 2 if self.padding_mode == "symmetric" else 1
        crop = [round(s * pk) for s, pk in zip(scale, p)]
        out_shape = tuple(round(s * (n + sides * pk))
                          for s, n, pk in zip(scale, resolution, p))
        if self.padding_mode == "symmetric":
            self._unpad_indices[out_shape] = tuple(slice(c, -c) if c else slice(None)
                                                   for c in crop)
            pairs = [q for pk in reversed(p) for q in (pk, pk)]
        else:
            self._unpad_indices[out_shape] = tuple(slice(None, -c) if c else slice(None)
                                                   for c in crop)
            pairs = [q for pk in reversed(p) for q in (0, pk)]
        return _pad(x, pairs) if any(p) else x

    def unpad(self, x: Tensor) -> Tensor:
        """Crop the padding of an output whose spatial shape a ``pad`` call led to."""
        key = tuple(x.shape[2:])
        if x.ndim < 3 or key not in self._unpad_indices:
            known = sorted(self._unpad_indices) or "none (pad was not called)"
            raise ValueError(f"DomainPadding: unpad got an input of shape {tuple(x.shape)} "
                             f"whose spatial shape no pad() call produced; known: {known}")
        return x[(Ellipsis, *self._unpad_indices[key])]

    def forward(self, x: Tensor) -> Tensor:
        return self.pad(x)

    def extra_repr(self) -> str:
        return (f"domain_padding={self.domain_padding}, resolution_scaling_factor="
                f"{self.resolution_scaling_factor}, padding_mode={self.padding_mode!r}")


class AdaIN(Module):
    """Adaptive instance normalisation (``neuralop.layers.normalization_layers.AdaIN``):
    x [B, C, *spatial] normalised per sample and channel over its grid points, then
    scaled and shifted per channel by an affine map computed from an embedding vector
    (the conditioning of the operator, e.g. a PDE parameter)::

        [w, b] = mlp(e)                  e: [embed_dim], w, b: [C]
        y = w[c] (x - mean) / sqrt(var + eps) + b[c]

    ``mlp`` defaults to Linear(embed_dim, 512) -> GELU -> Linear(512, 2 C), the
    reference's. ``set_embedding(e)`` sets e (any shape of embed_dim values) before
    ``forward``; gradients flow to x, to the mlp's parameters and to e."""

    def __init__(self, embed_dim: int, in_channels: int, mlp: Module | None = None,
                 eps: float = 1e-5, dtype: Any = None) -> None:
        super().__init__()
        _positive("AdaIN", embed_dim=embed_dim, in_channels=in_channels)
        self.embed_dim, self.in_channels, self.eps = embed_dim, in_channels, eps
        self.mlp = mlp if mlp is not None else Sequential(
            Linear(embed_dim, 512, dtype=dtype), GELU(), Linear(512, 2 * in_channels,
                                                                dtype=dtype))
        self.embedding: Tensor | None = None

    def set_embedding(self, x: Any) -> None:
        e = x if isinstance(x, Tensor) else Tensor(x)
        if e.numel() != self.embed_dim:
            raise ValueError(f"AdaIN: the embedding must have embed_dim={self.embed_dim} "
                             f"values, got shape {tuple(e.shape)}")
        self.embedding = e.reshape(self.embed_dim)

    def forward(self, x: Tensor) -> Tensor:
        if self.embedding is None:
            raise RuntimeError("AdaIN: call set_embedding(e) before forward")
        affine = self.mlp(self.embedding)
        weight, bias = affine[:self.in_channels], affine[self.in_channels:]
        return group_norm(x, self.in_channels, weight, bias, eps=self.eps)
