"""The U-shaped neural operator of neuraloperator (``neuralop.models.UNO``; Rahman, Ross and
Azizzadenesheli, "U-NO: U-shaped Neural Operators", 2023): Fourier layers whose output
grid is the input grid scaled per layer, with horizontal skips between layers, and the
two resampling pieces it needs, ``ScaledSpectralConv`` (a ``SpectralConv`` whose inverse
transform lands on another grid) and ``resample`` (the reference's interpolation of a
skip connection to another grid).

Parameter names follow the reference: ``fno_blocks.{i}.convs.0.weight_real`` /
``weight_imag`` (the reference's complex ``weight``), ``fno_blocks.{i}.fno_skips.0...``,
``horizontal_skips.{j}.conv.weight``, ``lifting.fcs.{k}...``, ``projection.fcs.{k}...``.
Every layer is a composition of nbgrad ops, so gradients flow to any order.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from numbers import Real
from typing import Any

import numpy as np

from ..ops._args import float_operands, is_int
from ..ops.activation import gelu
from ..ops.resample import interpolate
from ..ops.shape import concat
from ..ops.spectral_parts import irfftn_corners, rfftn_corners
from ..tensor import Tensor, lift
from .containers import ModuleDict, ModuleList
from .embeddings import GridEmbeddingND
from .factorized import ceinsum
from .fno import FNOBlocks, grid_embedding, skip_connection
from .layers import _positive
from .module import Module
from .operator_blocks import ChannelMLP, DomainPadding
from .spectral import SpectralConv, _mode_list, check_modes_fit

_FFT_FACTOR = {"forward": 1.0, "backward": 0.0, "ortho": 0.5}


def _scalings(owner: str, arg: str, value: Any, n_dim: int) -> list[float]:
    """A resolution scaling factor as one positive float per grid dim: a number (every
    dim) or a sequence of 1 or ``n_dim`` numbers (ValueError naming ``arg``)."""
    ok = isinstance(value, Real) and not isinstance(value, bool)
    values = [value] if ok else value
    if not ok and (isinstance(value, (str, bytes)) or not isinstance(value, Sequence)
                   or len(value) not in (1, n_dim)
                   or not all(isinstance(v, Real) and not isinstance(v, bool)
                              for v in value)):
        raise ValueError(f"{owner}: {arg} must be a number or a list of 1 or {n_dim} numbers "
                         f"(one per grid dim), got {value!r}")
    if not all(float(v) > 0 for v in values):
        raise ValueError(f"{owner}: {arg} must be positive, got {value!r}")
    values = [float(v) for v in values]
    return values * n_dim if len(values) == 1 else values


def _scaled(grid: Sequence[int], factors: Sequence[float]) -> tuple[int, ...]:
    """round(n_k s_k) per grid dim (Python's round, as the reference)."""
    return tuple(int(round(n * s)) for n, s in zip(grid, factors))


def _spectral_resample(x: Tensor, out: tuple[int, ...]) -> Tensor:
    """The reference's Fourier resampling (its ``resample`` for 3 or more grid dims):
    with m_j = min(N_j, N'_j) along each full axis, keep the frequencies -ceil(m_j / 2) ..
    floor(m_j / 2) - 1 and the first min(N_d // 2, N'_d // 2) + 1 rfft bins of the last,
    y = (N' / N) irfftn_{N'}(R rfftn_N(x)) (numpy norms; the reference's 'forward' norm on
    both transforms gives the factor N' / N = prod(out) / prod(grid)).

    The corner blocks hold p_j = ceil(m_j / 2) rows from each end; for odd m_j the positive
    block's last row (frequency p_j - 1, not kept) is masked to zero."""
    grid = tuple(x.shape[2:])
    d = len(grid)
    m = [min(a, b) for a, b in zip(grid[:-1], out[:-1])]
    p = [k - k // 2 for k in m] + [min(grid[-1] // 2, out[-1] // 2) + 1]
    mask = np.ones((2 ** (d - 1),) + tuple(p))
    for j, k in enumerate(m):
        if k % 2:
            for blk in range(2 ** (d - 1)):
                if not (blk >> j) & 1:  # block bit j = 0: the positive rows of axis j
                    idx = (blk,) + (slice(None),) * j + (p[j] - 1,)
                    mask[idx] = 0.0
    re, im = rfftn_corners(x, tuple(p))
    if not mask.all():
        w = Tensor(mask.astype(re.dtype))
        re, im = re * w, im * w
    return irfftn_corners(re, im, out) * (float(np.prod(out)) / float(np.prod(grid)))


def resample(x: Any, output_shape: Sequence[int]) -> Tensor:
    """x [B, C, *grid] on the grid ``output_shape``, as the reference's
    ``resample(x, 1.0, dims, output_shape)``: 1 grid dim: linear interpolation, 2: bicubic
    (A = -0.75), both with ``align_corners=True`` (output point o reads source position
    o (N - 1) / (N' - 1)); 3: Fourier resampling (``_spectral_resample``). The input
    itself when the grids agree."""
    x = lift(x)
    float_operands("resample", x=x)
    d = x.ndim - 2
    out = tuple(output_shape)
    if not 1 <= d <= 3 or len(out) != d or not all(is_int(n) and n > 0 for n in out):
        raise ValueError(f"resample: x must be [B, C, *grid] with 1 to 3 grid dims and "
                         f"output_shape one positive int per grid dim, got x of shape "
                         f"{tuple(x.shape)} and output_shape {output_shape!r}")
    out = tuple(int(n) for n in out)
    if out == tuple(x.shape[2:]):
        return x
    if d == 1:
        return interpolate(x, size=out, mode="linear", align_corners=True)
    if d == 2:
        return interpolate(x, size=out, mode="bicubic", align_corners=True)
    return _spectral_resample(x, out)


class ScaledSpectralConv(SpectralConv):
    """``SpectralConv`` whose output grid is its input grid scaled, the reference's
    ``SpectralConv(resolution_scaling_factor=s)``: x [B, in, *grid] -> [B, out, *grid'] with
    grid'_k = round(N_k s_k) (or ``forward(x, output_shape)``), by the same kept modes
    and weights as ``SpectralConv`` put onto the new grid:

        y = c * irfftn_{grid'}(P (W . R rfftn_grid(x))) + bias,   c = (N' / N)^a

    R, P: the corner blocks of ``rfftn_corners`` / ``irfftn_corners`` (each kept frequency
    lands on the same frequency of the new grid, zeros around it: band-limited
    interpolation of the layer's output when upsampling, a low-pass when downsampling);
    N, N' the grid sizes (products); a = 1 for fft_norm 'forward' (the default), 0
    'backward', 1/2 'ortho'. The kept modes must fit both grids (ValueError). With
    grid' = grid this is ``SpectralConv.forward`` itself.

    Differences from the reference, chosen on purpose: the reference pads/crops its
    ifftshift-ed spectrum at the END of each full axis (``torch.fft.ifftn(s=...)``), so
    on 2-D/3-D grids its negative frequencies move to high positive ones when upsampling
    and are dropped when downsampling; here they stay where they are. In 1-D (and along
    the last axis) both agree, except for a kept Nyquist bin of an even input grid when
    upsampling: it is used as any other bin here, while the reference zeroes its
    imaginary part when N'_d is even.

    ``transform(x, output_shape)`` resamples a skip connection onto the output grid
    (``resample``). ``resolution_scaling_factor``: None, a number or one per grid dim;
    settable after construction (``UNO`` sets it per layer).
    """

    def __init__(self, in_channels: int, out_channels: int, n_modes: int | Sequence[int],
                 resolution_scaling_factor: Any = None, **kwargs: Any) -> None:
        super().__init__(in_channels, out_channels, n_modes, **kwargs)
        self.resolution_scaling_factor = resolution_scaling_factor

    @property
    def resolution_scaling_factor(self) -> list[float] | None:
        return self._scaling

    @resolution_scaling_factor.setter
    def resolution_scaling_factor(self, value: Any) -> None:
        self._scaling = None if value is None else _scalings(
            "ScaledSpectralConv", "resolution_scaling_factor", value, self.order)

    def output_grid(self, grid: Sequence[int],
                    output_shape: Sequence[int] | None = None) -> tuple[int, ...]:
        """The output grid for an input ``grid``: ``output_shape`` if given, else the
        grid scaled by resolution_scaling_factor (rounded), else the grid."""
        grid = tuple(int(n) for n in grid)
        if output_shape is not None:
            out = tuple(output_shape)
            if len(out) != len(grid) or not all(is_int(n) and n > 0 for n in out):
                raise ValueError(f"ScaledSpectralConv: output_shape must be {len(grid)} "
                                 f"positive ints, got {output_shape!r}")
            return tuple(int(n) for n in out)
        if self._scaling is None:
            return grid
        return _scaled(grid, self._scaling)

    def transform(self, x: Tensor, output_shape: Sequence[int] | None = None) -> Tensor:
        """A skip connection x [B, C, *grid] resampled onto the output grid."""
        x = lift(x)
        return resample(x, self.output_grid(x.shape[2:], output_shape))

    def check_modes(self, grid: Sequence[int], what: str, owner: str | None = None) -> None:
        """ValueError when the kept modes do not fit ``grid`` (Nyquist limits)."""
        check_modes_fit(owner or "ScaledSpectralConv", "n_modes", self._n_modes, grid,
                        f"the {what} {tuple(grid)}")

    def forward(self, x: Tensor, output_shape: Sequence[int] | None = None) -> Tensor:
        x = lift(x)
        d = self.order
        if x.ndim != d + 2 or x.shape[1] != self.in_channels:
            raise ValueError(f"ScaledSpectralConv: x must be [B, in_channels="
                             f"{self.in_channels}, *grid] with {d} grid dims, got shape "
                             f"{tuple(x.shape)}")
        grid = tuple(x.shape[2:])
        out = self.output_grid(grid, output_shape)
        if out == grid:
            return super().forward(x)
        float_operands("ScaledSpectralConv", x=x, **self._a_weight())
        self.check_modes(grid, "input")
        self.check_modes(out, "output")
        if self.factorization is not None and self.implementation == "factorized":
            y = self._factorized_forward(x, out)
        else:  # dense (or reconstructed) weights [in, out, *modes], separable as diagonal
            re, im = rfftn_corners(x, self._corner_modes())
            letters = "xyz"[:d]
            yr, yi = ceinsum(f"bi{letters},io{letters}->bo{letters}",
                             (self._centred(re), self._centred(im)), self._active_weights())
            y = irfftn_corners(self._corners(yr), self._corners(yi), out)
        c = (float(np.prod(out)) / float(np.prod(grid))) ** _FFT_FACTOR[self.fft_norm]
        if c != 1.0:
            y = y * c
        return y + self.bias if self.bias is not None else y

    def extra_repr(self) -> str:
        return (super().extra_repr()
                + f", resolution_scaling_factor={self.resolution_scaling_factor}")


def _per_layer(owner: str, arg: str, value: Any, n_layers: int) -> list:
    if value is None:
        raise ValueError(f"{owner}: {arg} is required (a list of n_layers={n_layers} "
                         f"entries, one per layer), got None")
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ValueError(f"{owner}: {arg} must be a list of n_layers={n_layers} entries "
                         f"(one per layer), got {value!r}")
    if len(value) != n_layers:
        raise ValueError(f"{owner}: {arg} has {len(value)} entries but n_layers = "
                         f"{n_layers}; give one per layer")
    return list(value)


def _skips_map(owner: str, value: Any, n_layers: int) -> dict[int, int]:
    """{b: a}: layer b takes the (resampled) output of layer a < b as extra channels."""
    if value is None:  # the reference's default: n - 1 - i <- i for i < n // 2
        return {n_layers - i - 1: i for i in range(n_layers // 2)}
    if not isinstance(value, Mapping):
        raise ValueError(f"{owner}: horizontal_skips_map must be a dict {{b: a}} (layer b "
                         f"takes layer a's output), got {value!r}")
    out = {}
    for b, a in value.items():
        if not (is_int(a) and is_int(b) and 0 <= a < b < n_layers):
            raise ValueError(f"{owner}: horizontal_skips_map entry {b!r}: {a!r} must map a "
                             f"layer b to an earlier layer a, 0 <= a < b < n_layers="
                             f"{n_layers}")
        out[int(b)] = int(a)
    return out


class UNO(Module):
    """neuraloperator's U-shaped neural operator, x [B, in_channels, *grid] ->
    [B, out_channels, *grid'] on d = len(uno_n_modes[0]) grid dims (1 to 3), grid' = grid
    scaled by the product of the layer scalings (round(N_k prod_i s_ik))::

        x = [x, grid coordinates]          positional_embedding 'grid' (d more channels)
        v = lifting(x)                     ChannelMLP in -> lifting_channels -> hidden
        v = pad(v)                         DomainPadding (if domain_padding > 0)
        for i < n_layers:
            v = [v, resample(h_a)]         if horizontal_skips_map[i] = a: layer a's skip
            v = fno_blocks[i](v)           FNOBlocks (one layer), grid scaled by s_i
            h_i = horizontal_skips[i](v)   if i is a skip source
        v = unpad(v);  y = projection(v)   ChannelMLP -> projection_channels -> out

    Layer i maps c_in -> ``uno_out_channels[i]`` channels with ``uno_n_modes[i]`` modes
    (c_in = hidden_channels for i = 0, else uno_out_channels[i - 1], plus
    uno_out_channels[a] with a skip from a), on a grid scaled by ``uno_scalings[i]`` (a
    number or one per dim): its spectral convolution is a ``ScaledSpectralConv`` (see
    there: the choices where the reference's 2-D/3-D spectral resizing differs) and its
    own skips are resampled by ``resample`` (linear 1-D / bicubic 2-D with
    align_corners=True / Fourier 3-D, as the reference), as are the horizontal skips
    onto the grid of the layer that takes them. The last layer's output grid is
    round(padded grid * end_to_end_scaling_factor), as the reference sets it.
    ``horizontal_skips_map`` {b: a} defaults to {n - 1 - i: i, i < n // 2};
    ``horizontal_skip`` is 'linear', 'identity' or 'soft-gating'. Each block is
    ``FNOBlocks(n_layers=1)``: as in the reference it applies no non-linearity after
    its channel-MLP. The other arguments configure FNOBlocks with the reference's
    defaults; ``dtype`` (nbgrad's) picks float32 or float64 parameters. ``verbose``
    prints the end-to-end scaling factor. Not here: other ``operator_block`` classes
    than FNOBlocks, other ``integral_operator`` classes than (Scaled)SpectralConv when a
    layer changes the grid (NotImplementedError).
    """

    def __init__(self, in_channels: int, out_channels: int, hidden_channels: int,
                 lifting_channels: int = 256, projection_channels: int = 256,
                 positional_embedding: str | GridEmbeddingND | None = "grid",
                 n_layers: int = 4, uno_out_channels: Sequence[int] | None = None,
                 uno_n_modes: Sequence[Sequence[int]] | None = None,
                 uno_scalings: Sequence[Any] | None = None,
                 horizontal_skips_map: Mapping[int, int] | None = None,
                 channel_mlp_dropout: float = 0, channel_mlp_expansion: float = 0.5,
                 non_linearity: Callable[[Tensor], Tensor] = gelu, norm: str | None = None,
                 norm_groups: int = 1, preactivation: bool = False,
                 fno_skip: str | None = "linear", horizontal_skip: str = "linear",
                 channel_mlp_skip: str | None = "soft-gating", separable: bool = False,
                 factorization: str | None = None, rank: float = 1.0,
                 fixed_rank_modes: bool = False, integral_operator: type = SpectralConv,
                 operator_block: type = FNOBlocks, implementation: str = "factorized",
                 decomposition_kwargs: dict | None = None,
                 domain_padding: float | Sequence[float] | None = None,
                 verbose: bool = False, enforce_hermitian_symmetry: bool = True,
                 dtype: Any = None) -> None:
        super().__init__()
        name = "UNO"
        _positive(name, in_channels=in_channels, out_channels=out_channels,
                  hidden_channels=hidden_channels, lifting_channels=lifting_channels,
                  projection_channels=projection_channels, n_layers=n_layers)
        outs = _per_layer(name, "uno_out_channels", uno_out_channels, n_layers)
        modes = _per_layer(name, "uno_n_modes", uno_n_modes, n_layers)
        scalings = _per_layer(name, "uno_scalings", uno_scalings, n_layers)
        d = len(_mode_list(name, "uno_n_modes[0]", modes[0]))
        for i in range(n_layers):
            if not is_int(outs[i]) or outs[i] <= 0:
                raise ValueError(f"{name}: uno_out_channels[{i}] (layer {i}) must be a "
                                 f"positive int, got {outs[i]!r}")
            if len(_mode_list(name, f"uno_n_modes[{i}]", modes[i])) != d:
                raise ValueError(f"{name}: uno_n_modes[{i}] (layer {i}) = {modes[i]!r} has "
                                 f"not the {d} grid dims of uno_n_modes[0] = {modes[0]!r}")
        factors = [_scalings(name, f"uno_scalings[{i}] (layer {i})", s, d)
                   for i, s in enumerate(scalings)]
        if not (isinstance(operator_block, type) and issubclass(operator_block, FNOBlocks)):
            raise NotImplementedError(f"{name}: operator_block={operator_block!r} is not "
                                      "implemented; use FNOBlocks")
        conv = integral_operator
        if isinstance(conv, type) and issubclass(conv, SpectralConv) \
                and not issubclass(conv, ScaledSpectralConv):
            conv = ScaledSpectralConv
        elif not (isinstance(conv, type) and issubclass(conv, ScaledSpectralConv)) \
                and any(f != [1.0] * d for f in factors):
            raise NotImplementedError(f"{name}: integral_operator={integral_operator!r} "
                                      "cannot change the grid (uno_scalings other than 1); "
                                      "use SpectralConv or ScaledSpectralConv")
        self.n_dim, self.n_layers = d, n_layers
        self.in_channels, self.out_channels = in_channels, out_channels
        self.hidden_channels = hidden_channels
        self.lifting_channels, self.projection_channels = lifting_channels, projection_channels
        self.uno_out_channels, self.uno_n_modes = list(outs), list(modes)
        self.uno_scalings = list(scalings)
        self.horizontal_skips_map = _skips_map(name, horizontal_skips_map, n_layers)
        self.non_linearity, self.rank, self.factorization = non_linearity, rank, factorization
        self.fixed_rank_modes, self.implementation = fixed_rank_modes, implementation
        self.decomposition_kwargs = dict(decomposition_kwargs or {})
        self.fno_skip, self.channel_mlp_skip = fno_skip, channel_mlp_skip
        self.horizontal_skip = horizontal_skip
        self.separable, self.preactivation = separable, preactivation
        self.operator_block, self.integral_operator = operator_block, conv
        self._factors = factors

        self.positional_embedding = grid_embedding(name, positional_embedding, in_channels,
                                                   d, "uno_n_modes")

        # end to end: the product of the layer scalings, per grid dim
        self.end_to_end_scaling_factor = [float(np.prod([f[k] for f in factors]))
                                          for k in range(d)]
        if verbose:
            print("calculated out factor", self.end_to_end_scaling_factor)
        positive = domain_padding is not None and (
            sum(domain_padding) > 0 if isinstance(domain_padding, Sequence)
            else domain_padding > 0)
        self.domain_padding = DomainPadding(
            domain_padding, resolution_scaling_factor=self.end_to_end_scaling_factor) \
            if positive else None

        lifting_in = in_channels + (d if self.positional_embedding is not None else 0)
        # the reference's lifting keeps ChannelMLP's default gelu; the projection uses
        # non_linearity
        self.lifting = ChannelMLP(lifting_in, hidden_channels, lifting_channels, n_layers=2,
                                  n_dim=d, dtype=dtype)
        blocks, skips = [], {}
        prev = hidden_channels
        for i in range(n_layers):
            if i in self.horizontal_skips_map:
                prev += outs[self.horizontal_skips_map[i]]
            try:  # e.g. a soft-gating skip between different channel counts
                block = operator_block(
                    prev, outs[i], modes[i], channel_mlp_dropout=channel_mlp_dropout,
                    channel_mlp_expansion=channel_mlp_expansion,
                    non_linearity=non_linearity, norm=norm, norm_groups=norm_groups,
                    preactivation=preactivation, fno_skip=fno_skip,
                    channel_mlp_skip=channel_mlp_skip, rank=rank,
                    fixed_rank_modes=fixed_rank_modes, implementation=implementation,
                    separable=separable, factorization=factorization,
                    decomposition_kwargs=self.decomposition_kwargs, conv_module=conv,
                    enforce_hermitian_symmetry=enforce_hermitian_symmetry, dtype=dtype)
            except ValueError as err:
                raise ValueError(f"{name}: layer {i} ({prev} -> uno_out_channels[{i}] = "
                                 f"{outs[i]} channels): {err}") from None
            if isinstance(block.convs[0], ScaledSpectralConv):
                block.convs[0].resolution_scaling_factor = factors[i]
            blocks.append(block)
            if i in self.horizontal_skips_map.values():
                try:
                    skips[str(i)] = skip_connection(outs[i], outs[i], n_dim=d,
                                                    skip_type=horizontal_skip, dtype=dtype)
                except ValueError as err:
                    raise ValueError(f"{name}: horizontal_skip: {err}") from None
            prev = outs[i]
        self.fno_blocks = ModuleList(blocks)
        self.horizontal_skips = ModuleDict(skips)
        self.projection = ChannelMLP(prev, out_channels, projection_channels, n_layers=2,
                                     n_dim=d, non_linearity=non_linearity, dtype=dtype)

    def _check_layer(self, i: int, grid: tuple, out: tuple) -> None:
        conv = self.fno_blocks[i].convs[0]
        if not isinstance(conv, ScaledSpectralConv):
            return
        owner = f"UNO: layer {i} (uno_n_modes[{i}] = {self.uno_n_modes[i]!r})"
        conv.check_modes(grid, "layer input", owner)
        conv.check_modes(out, f"layer output (uno_scalings[{i}] = "
                              f"{self.uno_scalings[i]!r})", owner)

    def forward(self, x: Tensor, **kwargs: Any) -> Tensor:
        if kwargs:
            warnings.warn(f"UNO.forward() received unexpected keyword arguments: "
                          f"{list(kwargs)}. These arguments will be ignored.", UserWarning,
                          stacklevel=2)
        x = lift(x)
        d = self.n_dim
        if x.ndim != d + 2 or x.shape[1] != self.in_channels:
            raise ValueError(f"UNO: input must be [B, in_channels={self.in_channels}, *grid] "
                             f"with {d} grid dims (uno_n_modes {self.uno_n_modes[0]!r}), "
                             f"got shape {tuple(x.shape)}")
        if self.positional_embedding is not None:
            x = self.positional_embedding(x)
        v = self.lifting(x)
        if self.domain_padding is not None:
            v = self.domain_padding.pad(v)
        final = _scaled(v.shape[2:], self.end_to_end_scaling_factor)
        saved: dict[int, Tensor] = {}
        for i in range(self.n_layers):
            if i in self.horizontal_skips_map:
                h = resample(saved[self.horizontal_skips_map[i]], tuple(v.shape[2:]))
                v = concat([v, h], 1)
            grid = tuple(v.shape[2:])
            last = i == self.n_layers - 1
            out = final if last else _scaled(grid, self._factors[i])
            self._check_layer(i, grid, out)
            v = self.fno_blocks[i](v, 0, output_shape=final if last else None)
            if i in self.horizontal_skips_map.values():
                saved[i] = self.horizontal_skips[str(i)](v)
        if self.domain_padding is not None:
            v = self.domain_padding.unpad(v)
        return self.projection(v)

    def extra_repr(self) -> str:
        return (f"in_channels={self.in_channels}, out_channels={self.out_channels}, "
                f"hidden_channels={self.hidden_channels}, n_layers={self.n_layers}, "
                f"uno_out_channels={self.uno_out_channels}, uno_n_modes={self.uno_n_modes}, "
                f"uno_scalings={self.uno_scalings}, "
                f"horizontal_skips_map={self.horizontal_skips_map}")


__all__ = ["UNO", "ScaledSpectralConv", "resample"]
