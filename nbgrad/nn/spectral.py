"""Spectral convolutions, the Fourier layers of FNO (Li et al., "Fourier Neural Operator
for Parametric PDEs", 2021), channels first: ``SpectralConv1d`` and ``SpectralConv2d`` as
the original code has them, and ``SpectralConv`` (any grid dimension 1-3; dense,
separable or factorised weights) as neuraloperator configures it. The models built from
them are in nn/fno.py.

The complex weights of a spectral convolution are stored as two real parameters,
``weight_real`` and ``weight_imag``. SpectralConv1d/2d initialise them as the original
FNO code does: ``scale * U[0, 1)`` for both parts with ``scale = 1 / (in_channels *
out_channels)``; ``SpectralConv`` as neuraloperator does (see its docstring).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..ops._args import float_operands, is_int
from ..ops.pad import pad
from ..ops.shape import concat, stack
from ..ops.spectral import (
    SpectralConv1dFn,
    SpectralConv2dFn,
    SpectralConv3dFn,
    spectral_conv1d,
    spectral_conv2d,
)
from ..ops.spectral_parts import (
    IrfftnCorners,
    IrfftnRows,
    RfftnCorners,
    RfftnRows,
    corner_modes,
)
from ..tensor import Tensor, lift
from . import init
from .factorized import FactorizedTensor, canonical_factorization
from .layers import _float_dtype, _positive
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


def check_modes_fit(owner: str, name: str, kept: Sequence[int], grid: Sequence[int],
                    where: str, given: Sequence[int] | None = None) -> None:
    """The Nyquist limit: grid dim j of ``where`` has ``grid[j]`` Fourier modes, the last
    ``grid[-1] // 2 + 1`` rfft bins; ``kept[j]`` (the last counted in rfft bins) must fit.
    A ValueError names ``owner`` and its argument ``name`` (``given``: the values the user
    passed, when they differ from the kept counts)."""
    d = len(kept)
    for j, (m, n) in enumerate(zip(kept, grid)):
        last = j == d - 1
        avail = n // 2 + 1 if last else n
        if m > avail:
            arg = f"{name}[{j}]" + (f" = {given[j]}" if given is not None else "")
            what = f"{m} rfft bins ({name}[-1] // 2 + 1)" if last else f"{m} modes"
            count = f" ({n} // 2 + 1)" if last else ""
            raise ValueError(f"{owner}: {arg} keeps {what} but grid dim {j} of {where} has "
                             f"only {avail} Fourier modes{count}, the Nyquist limit of {n} "
                             "points")


# -- SpectralConv: neuraloperator's layer, any dimension 1-3 -------------------------------
_FN = {1: SpectralConv1dFn, 2: SpectralConv2dFn, 3: SpectralConv3dFn}
_FFT_NORMS = ("forward", "backward", "ortho")


def _mode_list(owner: str, name: str, value: Any) -> list[int]:
    """An int or a sequence of 1-3 positive ints as a list (ValueError naming ``name``)."""
    values = [value] if is_int(value) else value
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise ValueError(f"{owner}: {name} must be an int or a sequence of 1 to 3 ints, got "
                         f"{value!r}")
    values = list(values)
    if not 1 <= len(values) <= 3 or not all(is_int(m) and m > 0 for m in values):
        raise ValueError(f"{owner}: {name} must be 1 to 3 positive ints (one per grid dim), "
                         f"got {value!r}")
    return [int(m) for m in values]


def _check_rank(rank: Any) -> None:
    """rank: a fraction of the dense parameter count in (0, 1], or a positive int."""
    if isinstance(rank, bool) or not isinstance(rank, (int, float, np.integer, np.floating)):
        raise ValueError(f"SpectralConv: rank must be a float in (0, 1] or a positive int, "
                         f"got {rank!r}")
    if is_int(rank) and rank <= 0:
        raise ValueError(f"SpectralConv: rank must be a positive int or a float in (0, 1], "
                         f"got {rank!r}")
    if not is_int(rank) and not 0.0 < float(rank) <= 1.0:
        raise ValueError(f"SpectralConv: rank = {rank!r} is outside (0, 1]")


def _two_sided(w: Tensor, axis: int, k: int) -> tuple[Tensor, Tensor]:
    """The positive and negative frequency blocks of weights ``w`` whose ``axis`` holds k
    modes in fftshift order (index i <-> frequency i - k // 2, so frequencies
    -(k // 2) .. k - k // 2 - 1): with p = k - k // 2 and n = k // 2,

        pos = w[.., n : n + p, ..]           frequencies 0 .. p - 1    (rows 0 .. p - 1)
        neg = [0,] w[.., 0 : n, ..]          frequencies -p .. -1      (rows N - p .. N - 1)

    both p long: for odd k, neg starts with a zero row for the frequency -p that is not
    kept (the op adds overlapping blocks, so that zero row also covers k = N odd)."""
    p, n = k - k // 2, k // 2
    lead = (slice(None),) * axis
    pos = w[lead + (slice(n, n + p),)]
    neg = w[lead + (slice(0, n),)]
    if p > n:
        widths = [0, 0] * (w.ndim - 1 - axis) + [1, 0]
        neg = pad(neg, widths)
    return pos, neg


def _selects_all(index: tuple, shape: tuple) -> bool:
    """Whether the slices ``index`` select every entry of an array of ``shape`` (the
    weights then go to the op as they are: a slice's gradient is a full-size zero
    array with the slice's gradient written in)."""
    return all(s.indices(n) == (0, n, 1) for s, n in zip(index, shape))


def _even_blocks(w: Tensor) -> Tensor:
    """``SpectralConv._blocks`` where every two-sided dim holds an even number of modes:
    each such dim of w [in, out, K_1, .., K_d] is two halves (``_two_sided``: the
    negative frequencies, then the positive ones), so the blocks are w viewed as
    [in, out, 2, K_1 / 2, 2, K_2 / 2, .., K_d], each 2 reversed (positive first) and
    moved to the front: views and one copy. Slicing the halves out one by one cost a
    full-size zero gradient per slice in the backward pass."""
    two_sided = w.ndim - 3
    halves = [n for m in w.shape[2:-1] for n in (2, m // 2)]
    v = w.reshape(tuple(w.shape[:2]) + tuple(halves) + (w.shape[-1],))
    pairs = [2 + 2 * j for j in range(two_sided)]
    v = v[tuple(slice(None, None, -1) if a in pairs else slice(None) for a in range(v.ndim))]
    rest = [a for a in range(v.ndim) if a not in pairs]
    blocks = v.permute(*reversed(pairs), *rest)   # block j = b_1 + 2 b_2
    return blocks.reshape((2 ** two_sided,) + tuple(blocks.shape[two_sided:])).contiguous()


class SpectralConv(Module):
    """neuraloperator's ``SpectralConv`` on grids of 1 to 3 dims, dense weights.

    x [B, in_channels, *grid] -> [B, out_channels, *grid] with d = len(n_modes) grid dims:

        X = rfftn(x) over the grid, fftshift over all but the last grid dim
        Y = 0 except Y[b, o, S] = sum_i X[b, i, S] W[i, o]         (separable: X[b, o, S] W[o])
        y = irfftn(ifftshift(Y), s=grid) + bias

    S: the kept modes, ``n_modes[j]`` frequencies centred on 0 along each grid dim j < d-1
    (-(n // 2) .. n - n // 2 - 1) and the first ``n_modes[-1]`` rfft bins of the last.
    ``n_modes`` counts the last dim as the reference does: given m, it keeps m // 2 + 1
    bins (the property returns the kept counts, e.g. n_modes=(8, 8) -> [8, 5]).

    Weights: ``weight_real`` and ``weight_imag`` (the reference's complex ``weight`` =
    weight_real + i weight_imag), each [in, out, *max_n_modes] ([in, *max_n_modes] if
    ``separable``; then in_channels == out_channels), modes in fftshift order along the
    first d - 1 grid dims; ``max_n_modes`` defaults to the kept n_modes and is taken as
    given (the reference does not halve its last entry). ``n_modes`` may be set after
    construction up to ``max_n_modes``: the forward uses the centre of the weights along
    the first d - 1 dims and their first bins along the last, as the reference slices
    them. Initialisation as the reference: each complex weight ~ CN(0, init_std^2) (real
    and imaginary parts N(0, init_std^2 / 2)), bias ~ init_std * N(0, 1) [out, 1, ..];
    init_std 'auto' = sqrt(2 / (in + out)).

    ``fft_norm`` ('forward', the default, 'backward' or 'ortho') is kept for the
    reference's API: with output grid = input grid the three give the same layer (the
    forward and inverse scalings multiply to 1 / prod(grid) in each). The inverse ignores
    the imaginary parts of the last dim's bin 0 and Nyquist bin, as the reference's
    ``enforce_hermitian_symmetry=True`` (and any c2r transform) does.

    Factorised weights: ``factorization`` 'CP', 'Tucker' or 'TT' (any case; None or
    'Dense' for dense) holds the complex weight tensor of the shape above as factors in
    ``self.weight`` (``nn.factorized.FactorizedTensor``: ranks from ``rank``, a fraction in
    (0, 1] of the dense parameter count or a positive int, as tensorly computes them;
    ``fixed_rank_modes`` (Tucker; True = [0]) keeps those modes at full rank; entries of
    the dense tensor ~ CN(0, init_std^2) at start). ``implementation='reconstructed'``
    forms the dense weights from the factors with ops and runs the spectral convolution
    op; 'factorized' contracts the kept spectrum with the factors directly (the
    ``rfftn_rows``/``irfftn_rows`` ops around ``FactorizedTensor.contract_rows``); both
    give the same layer. ``decomposition_kwargs`` is kept and unused.

    Not here (NotImplementedError naming the argument): ``complex_data``,
    ``resolution_scaling_factor`` and an ``output_shape`` other than the input grid,
    'half'/'mixed' ``fno_block_precision``. Modes beyond a grid's Fourier modes
    (n_modes[j] > N_j, or n_modes[-1] // 2 + 1 > N_last // 2 + 1) are a ValueError.
    """

    def __init__(self, in_channels: int, out_channels: int, n_modes: int | Sequence[int],
                 complex_data: bool = False, max_n_modes: int | Sequence[int] | None = None,
                 bias: bool = True, separable: bool = False,
                 resolution_scaling_factor: Any = None, fno_block_precision: str = "full",
                 rank: float = 1.0, factorization: str | None = None,
                 implementation: str = "reconstructed", enforce_hermitian_symmetry: bool = True,
                 fixed_rank_modes: bool = False, decomposition_kwargs: dict | None = None,
                 init_std: float | str = "auto", fft_norm: str = "forward", dtype: Any = None,
                 generator: Any = None) -> None:
        super().__init__()
        name = "SpectralConv"
        _positive(name, in_channels=in_channels, out_channels=out_channels)
        factorization = canonical_factorization(name, factorization)
        if complex_data:
            raise NotImplementedError(f"{name}: complex_data=True is not implemented; "
                                      "nbgrad's spectral convolution takes real data")
        if resolution_scaling_factor is not None:
            raise NotImplementedError(f"{name}: resolution_scaling_factor="
                                      f"{resolution_scaling_factor!r} is not implemented; "
                                      "use None (output grid = input grid)")
        if fno_block_precision != "full":
            raise NotImplementedError(f"{name}: fno_block_precision={fno_block_precision!r} "
                                      "is not implemented; use 'full' (the dtype argument "
                                      "picks float32 or float64)")
        if implementation not in ("reconstructed", "factorized"):
            raise ValueError(f"{name}: implementation must be 'reconstructed' or "
                             f"'factorized', got {implementation!r}")
        if fft_norm not in _FFT_NORMS:
            raise ValueError(f"{name}: fft_norm must be one of {_FFT_NORMS}, got {fft_norm!r}")
        _check_rank(rank)
        if isinstance(fixed_rank_modes, bool):  # the reference: True keeps mode 0's rank
            fixed_rank_modes = [0] if fixed_rank_modes else None
        if separable and in_channels != out_channels:
            raise ValueError(f"{name}: separable=True needs in_channels == out_channels, got "
                             f"in_channels={in_channels} and out_channels={out_channels}")
        if init_std == "auto":
            init_std = (2.0 / (in_channels + out_channels)) ** 0.5
        elif isinstance(init_std, bool) or not isinstance(init_std, (int, float)) \
                or not init_std > 0:
            raise ValueError(f"{name}: init_std must be 'auto' or a positive float, got "
                             f"{init_std!r}")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.complex_data, self.separable = False, bool(separable)
        self.order = None
        self.n_modes = n_modes
        self.order = len(self._n_modes)
        if max_n_modes is None:
            max_n_modes = list(self._n_modes)
        else:
            max_n_modes = _mode_list(name, "max_n_modes", max_n_modes)
            if len(max_n_modes) != self.order:
                raise ValueError(f"{name}: max_n_modes {max_n_modes} has {len(max_n_modes)} "
                                 f"entries but n_modes has {self.order}")
        self.max_n_modes = max_n_modes
        self._check_modes_fit(self._n_modes)
        self.resolution_scaling_factor = None
        self.fno_block_precision, self.rank = fno_block_precision, rank
        self.factorization, self.implementation = factorization, implementation
        self.enforce_hermitian_symmetry = bool(enforce_hermitian_symmetry)
        self.fixed_rank_modes = fixed_rank_modes
        self.decomposition_kwargs = dict(decomposition_kwargs or {})
        self.init_std, self.fft_norm = float(init_std), fft_norm
        dt = _float_dtype(name, dtype)
        chans = (in_channels,) if separable else (in_channels, out_channels)
        shape = chans + tuple(max_n_modes)
        if factorization is None:
            self.weight_real = Parameter(np.empty(shape, dt))
            self.weight_imag = Parameter(np.empty(shape, dt))
            # a complex normal of variance init_std^2: each part carries half of it
            init.normal_(self.weight_real, 0.0, self.init_std / 2 ** 0.5, generator=generator)
            init.normal_(self.weight_imag, 0.0, self.init_std / 2 ** 0.5, generator=generator)
        else:  # factors whose dense tensor has entries ~ CN(0, init_std^2)
            self.weight = FactorizedTensor(shape, factorization, rank, fixed_rank_modes, dt,
                                           owner=name)
            self.weight.normal_(self.init_std, generator=generator)
        if bias:
            self.bias = Parameter(np.empty((out_channels,) + (1,) * self.order, dt))
            init.normal_(self.bias, 0.0, self.init_std, generator=generator)
        else:
            self.register_parameter("bias", None)

    @property
    def n_modes(self) -> list[int]:
        """The kept modes per grid dim (the last: rfft bins, m // 2 + 1 of the m given)."""
        return list(self._n_modes)

    @n_modes.setter
    def n_modes(self, n_modes: int | Sequence[int]) -> None:
        modes = _mode_list("SpectralConv", "n_modes", n_modes)
        if self.order is not None and len(modes) != self.order:
            raise ValueError(f"SpectralConv: n_modes {n_modes!r} has {len(modes)} entries "
                             f"but the layer has {self.order} grid dims")
        # the last dim's rfft keeps m // 2 + 1 bins of m modes, as the reference
        modes[-1] = modes[-1] // 2 + 1
        if self.order is not None:
            self._check_modes_fit(modes)
        self._n_modes = modes

    def _check_modes_fit(self, modes: list[int]) -> None:
        for j, (m, mx) in enumerate(zip(modes, self.max_n_modes)):
            if m > mx:
                raise ValueError(f"SpectralConv: n_modes[{j}] keeps {m} modes (n_modes = "
                                 f"{modes}, the last as rfft bins) but max_n_modes[{j}] = "
                                 f"{mx}: the weights hold {self.max_n_modes}")

    def transform(self, x: Tensor, output_shape: Sequence[int] | None = None) -> Tensor:
        """The reference's resampling of a skip connection to the output grid: x itself
        here (output grid = input grid; anything else is not implemented)."""
        x = lift(x)
        if output_shape is not None and tuple(output_shape) != tuple(x.shape[2:]):
            raise NotImplementedError(f"SpectralConv.transform: output_shape={output_shape!r}"
                                      f" differs from the input grid {tuple(x.shape[2:])}; "
                                      "resampling is not implemented")
        return x

    def _active_index(self) -> tuple:
        """The kept part of the weights, as the reference slices them: the centre of
        max_n_modes along the first d - 1 dims, the first bins along the last."""
        lead = (slice(None),) * (1 if self.separable else 2)
        idx = []
        for j, (m, mx) in enumerate(zip(self._n_modes, self.max_n_modes)):
            start = mx - m
            if j == self.order - 1:
                idx.append(slice(0, m))
            else:  # [start // 2, mx - ceil(start / 2)): m entries, centred
                idx.append(slice(start // 2, mx - (start + 1) // 2))
        return lead + tuple(idx)

    def _active_weights(self) -> tuple[Tensor, Tensor]:
        """The kept dense weights (reconstructed from the factors if factorised), the
        separable ones as the diagonal [c, c, ..]."""
        key = self._active_index()
        if self.factorization is None and _selects_all(key, self.weight_real.shape):
            wr, wi = self.weight_real, self.weight_imag
        elif self.factorization is None:
            wr, wi = self.weight_real[key], self.weight_imag[key]
        else:
            wr, wi = self.weight.to_tensor(key)
        if self.separable:  # diagonal in the channels: W[i, o] = delta_io w[i]
            c = self.in_channels
            eye = Tensor(np.eye(c, dtype=wr.dtype).reshape((c, c) + (1,) * self.order))
            wr = wr.reshape((c, 1) + tuple(wr.shape[1:])) * eye
            wi = wi.reshape((c, 1) + tuple(wi.shape[1:])) * eye
        return wr, wi

    def _blocks(self, w: Tensor) -> Tensor:
        """Weights [in, out, K_1, .., K_d] as the op's blocks: [in, out, K_d] (1-D),
        [2, in, out, p_1, K_2] (2-D), [4, in, out, p_1, p_2, K_3] (3-D) with block
        j = b_1 + 2 b_2 (b = 1: the negative frequencies of that dim)."""
        k = self._n_modes
        if self.order == 1:
            return w
        if all(m % 2 == 0 for m in k[:-1]) and tuple(w.shape[2:-1]) == tuple(k[:-1]):
            return _even_blocks(w)
        pos, neg = _two_sided(w, 2, k[0])
        if self.order == 2:
            return stack([pos, neg], 0)
        blocks = [None] * 4
        for b1, half in enumerate((pos, neg)):
            p2, n2 = _two_sided(half, 3, k[1])
            blocks[b1], blocks[b1 + 2] = p2, n2
        return stack(blocks, 0)

    def forward(self, x: Tensor, output_shape: Sequence[int] | None = None) -> Tensor:
        x = lift(x)
        d = self.order
        if x.ndim != d + 2:
            layout = "[B, C, " + ", ".join(f"N{j + 1}" for j in range(d)) + "]"
            raise ValueError(f"SpectralConv: x must be {d + 2}-D {layout} for n_modes of "
                             f"{d} dims, got shape {tuple(x.shape)}")
        if x.shape[1] != self.in_channels:
            raise ValueError(f"SpectralConv: x has {x.shape[1]} channels (shape "
                             f"{tuple(x.shape)}) but in_channels = {self.in_channels}")
        grid = tuple(x.shape[2:])
        if output_shape is not None and tuple(output_shape) != grid:
            raise NotImplementedError(f"SpectralConv: output_shape={tuple(output_shape)!r} "
                                      f"differs from the input grid {grid}; resampling is "
                                      "not implemented")
        float_operands("SpectralConv", x=x, **self._a_weight())
        check_modes_fit("SpectralConv", "n_modes", self._n_modes, grid,
                        f"x (shape {tuple(x.shape)})")
        if self.factorization is not None and self.implementation == "factorized":
            y = self._factorized_forward(x)
        else:
            wr, wi = self._active_weights()
            y = _FN[d].apply(x, self._blocks(wr), self._blocks(wi))
        if self.bias is not None:
            y = y + self.bias
        return y

    def _a_weight(self) -> dict[str, Tensor]:
        if self.factorization is None:
            return {"weight_real": self.weight_real}
        return {"weight.factor0_real": self.weight.factor0_real}

    def _factorized_forward(self, x: Tensor, out_grid: tuple | None = None) -> Tensor:
        """The factors applied to the kept spectrum directly (W never formed), onto
        ``out_grid`` (default: x's grid). Not separable, the centred modes go to GEMM rows
        [M, B, 2 in] straight from the transform and back (``rfftn_rows``,
        ``FactorizedTensor.contract_rows``, ``irfftn_rows``). Separable, through corner
        blocks and the centred layout:

            X = R rfftn(x) (corner blocks) -> centred modes [B, in, k_1, .., K_d]
            Y = W.contract(X)  (FactorizedTensor.contract)
            y = irfftn(P Y) with Y cut back into corner blocks

        The corner op rows are p = k - k // 2 per block: the centred layout takes the
        positive block (frequencies 0 .. p - 1) after the last k // 2 rows of the
        negative one (frequencies -(k // 2) .. -1); going back, ``_two_sided`` pads the
        negative block with the zero row it needs for odd k."""
        out = tuple(x.shape[2:]) if out_grid is None else tuple(out_grid)
        k = tuple(int(m) for m in self._n_modes)
        if not self.separable:
            t = self.weight.contract_rows(RfftnRows.apply(x, modes=k), self._active_index())
            return IrfftnRows.apply(t, grid=out, modes=k)
        re, im = RfftnCorners.apply(x, modes=self._corner_modes())
        yr, yi = self.weight.contract((self._centred(re), self._centred(im)), True,
                                      self._active_index())
        return IrfftnCorners.apply(self._corners(yr), self._corners(yi), grid=out)

    def _corner_modes(self) -> tuple:
        """The corner blocks' rows p = k - k // 2 per full axis, then the last axis's K."""
        return corner_modes(self._n_modes)

    def _centred(self, a: Tensor) -> Tensor:
        """Corner blocks [B, C, 2^(d-1), p_1, .., K] -> centred modes [B, C, k_1, .., K]."""
        d, k = self.order, self._n_modes
        blocks = [a[:, :, j] for j in range(2 ** (d - 1))]

        def join(pos: Tensor, neg: Tensor, axis: int, m: int) -> Tensor:
            n, pp = m // 2, m - m // 2
            tail = (slice(None),) * axis + (slice(pp - n, pp),)
            return concat([neg[tail], pos], axis) if n else pos

        if d == 1:
            return blocks[0]
        if d == 2:
            return join(blocks[0], blocks[1], 2, k[0])
        # block j = b1 + 2 b2: join along dim 1 for each b2, then along dim 2
        rows = [join(blocks[2 * b2], blocks[2 * b2 + 1], 2, k[0]) for b2 in (0, 1)]
        return join(rows[0], rows[1], 3, k[1])

    def _corners(self, y: Tensor) -> Tensor:
        """Centred modes [B, C, k_1, .., K] -> corner blocks [B, C, 2^(d-1), p_1, .., K]."""
        d, k = self.order, self._n_modes
        if d == 1:
            return y.unsqueeze(2)
        pos, neg = _two_sided(y, 2, k[0])
        if d == 2:
            return stack([pos, neg], 2)
        blocks = [None] * 4
        for b1, half in enumerate((pos, neg)):
            blocks[b1], blocks[b1 + 2] = _two_sided(half, 3, k[1])
        return stack(blocks, 2)

    def extra_repr(self) -> str:
        fac = "" if self.factorization is None else (
            f", factorization={self.factorization!r}, rank={self.rank!r}, "
            f"implementation={self.implementation!r}")
        return (f"{self.in_channels}, {self.out_channels}, n_modes={self._n_modes}, "
                f"max_n_modes={self.max_n_modes}, separable={self.separable}, "
                f"bias={self.bias is not None}{fac}")
