"""The two halves of the spectral convolution as ops, for layers that mix the modes with
ops of their own (the factorised weights of ``nn.SpectralConv``): ``rfftn_corners``
(analysis: the kept corner blocks of rfftn(x)) and ``irfftn_corners`` (synthesis: irfftn
of blocks put back among zeros); ``rfftn_rows`` and ``irfftn_rows``, the same with the
centred modes as GEMM rows. All run the kernels of ``kernels/spectral.py``.

Blocks, for a grid of d = 1, 2 or 3 dims and ``modes`` = (p_1, .., p_{d-1}, K) (the rows
per block along each full axis, the rfft bins of the last axis): nblk = 2^(d-1) blocks
[B, C, nblk, *modes]; block j = b_1 + 2 b_2 starts at row 0 (b = 0) or N - p (b = 1) of
each full axis, as the original FNO's weights1..4. With R the block reader, P its adjoint
(overlapping blocks add), N = prod(grid) and s_k = 1 for the last axis's bin 0 and (even
W) Nyquist bin, 1/2 for the others (the bins the half spectrum stands for twice):

    A(x) = R rfftn(x)             S(Y) = irfftn(P Y)
    A^T(G) = N S(s G)             S^T(g) = A(g) / (N s)

(A^T: dx = Re sum_k G_k e^{+ik.n}; S^T: y = sum_k (1/(N s_k)) Re(Y_k e^{ik.n}) over the
half spectrum). Both ops are linear, so each vjp is the other op and they differentiate
to any order.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..function import Function, Sample, register
from ..tensor import Tensor, lift
from ._args import float_operands, is_int
from .spectral import _spectrum_rows, _stacked_spectrum, _stacked_synthesis, _synthesis_rows


def _nblk(dim: int) -> int:
    return 2 ** (dim - 1)


def _kernel_modes(modes: tuple) -> tuple:
    """The kernels' block mode shape: (1, K) in 1-D, the modes otherwise."""
    return (1, modes[0]) if len(modes) == 1 else tuple(modes)


def _half_weight(grid: tuple, modes: tuple, dtype: Any) -> np.ndarray:
    """s broadcast over [.., *modes]: 1 at last-axis bin 0 and the Nyquist bin (even W),
    1/2 elsewhere."""
    W, K = grid[-1], modes[-1]
    s = np.full(K, 0.5)
    s[0] = 1.0
    if W % 2 == 0 and K > W // 2:
        s[W // 2] = 1.0
    return s.astype(dtype)


def _analysis(x: np.ndarray, modes: tuple) -> tuple[np.ndarray, np.ndarray]:
    dim = x.ndim - 2
    mshape = _kernel_modes(modes)
    xg = x.reshape(x.shape[:2] + (1, x.shape[2])) if dim == 1 else x
    re, im = _stacked_spectrum(xg, _nblk(dim), mshape)
    shape = x.shape[:2] + (_nblk(dim),) + tuple(modes)
    return re.reshape(shape), im.reshape(shape)


def _synth(re: np.ndarray, im: np.ndarray, grid: tuple) -> np.ndarray:
    B, C, nblk = re.shape[:3]
    mshape = _kernel_modes(re.shape[3:])
    g2 = (1,) + tuple(grid) if len(grid) == 1 else tuple(grid)
    y = _stacked_synthesis(np.stack((re, im)).reshape(2, B, C, nblk, -1), mshape, g2)
    return y.reshape((B, C) + tuple(grid))


@register("rfftn_corners", samples=lambda rng: _samples(rng, True))
class RfftnCorners(Function):
    """(re, im) = R rfftn(x): x [B, C, *grid] -> [B, C, 2^(d-1), *modes] each."""

    @staticmethod
    def forward(ctx, x, modes):
        ctx.modes, ctx.grid = tuple(int(m) for m in modes), tuple(x.shape[2:])
        return _analysis(x, ctx.modes)

    @staticmethod
    def backward(ctx, g_re, g_im):
        s = _half_weight(ctx.grid, ctx.modes, g_re.dtype)
        n = float(np.prod(ctx.grid))
        return n * _synth(g_re * s, g_im * s, ctx.grid)

    @staticmethod
    def vjp(ctx, g_re, g_im):
        s = Tensor(_half_weight(ctx.grid, ctx.modes, g_re.dtype))
        n = float(np.prod(ctx.grid))
        return IrfftnCorners.apply(g_re * s, g_im * s, grid=ctx.grid) * n


@register("irfftn_corners", samples=lambda rng: _samples(rng, False))
class IrfftnCorners(Function):
    """y = irfftn(P (re + i im)) onto ``grid``: [B, C, 2^(d-1), *modes] -> [B, C, *grid]."""

    @staticmethod
    def forward(ctx, re, im, grid):
        ctx.grid, ctx.modes = tuple(int(n) for n in grid), tuple(re.shape[3:])
        return _synth(re, im, ctx.grid)

    @staticmethod
    def backward(ctx, g):
        c = 1.0 / (np.prod(ctx.grid) * _half_weight(ctx.grid, ctx.modes, g.dtype))
        g_re, g_im = _analysis(np.ascontiguousarray(g), ctx.modes)
        need_re, need_im = ctx.needs_input_grad[:2]
        return (g_re * c if need_re else None), (g_im * c if need_im else None)

    @staticmethod
    def vjp(ctx, g):
        c = Tensor(1.0 / (np.prod(ctx.grid) * _half_weight(ctx.grid, ctx.modes, g.dtype)))
        g_re, g_im = RfftnCorners.apply(g, modes=ctx.modes)
        return g_re * c, g_im * c


# -- the centred modes as GEMM rows -----------------------------------------------------------
#
# ``modes`` k = (k_1, .., k_{d-1}, K): the centred mode counts of the full axes (index i <->
# frequency i - k_j // 2) and the rfft bins of the last. The corner blocks hold
# p_j = k_j - k_j // 2 rows per full axis: frequency f >= 0 at row f of the b = 0 block,
# f < 0 at row p_j + f of the b = 1 block (its row 0 unused for odd k_j).


def corner_modes(modes: Sequence[int]) -> tuple:
    """The corner blocks' mode shape (p_1, .., p_{d-1}, K) for centred counts ``modes``."""
    return tuple(int(m) - int(m) // 2 for m in modes[:-1]) + (int(modes[-1]),)


@functools.cache
def mode_sources(modes: tuple) -> np.ndarray:
    """For each centred mode (row-major over ``modes``), its flat offset in one channel's
    corner blocks [2^(d-1), p_1, .., p_{d-1}, K]."""
    *full, K = modes
    rows = corner_modes(modes)[:-1]
    offset = np.zeros(1, np.int64)
    block = np.zeros(1, np.int64)
    for j, (m, p) in enumerate(zip(full, rows)):
        i = np.arange(m) - m // 2                       # the frequencies along axis j
        b = (i < 0).astype(np.int64)
        offset = (offset[:, None] * p + np.where(i < 0, p + i, i)).reshape(-1)
        block = (block[:, None] + (b << j)).reshape(-1)
    corner = int(np.prod(rows, dtype=np.int64)) * K
    flat = (block * corner + offset * K)[:, None] + np.arange(K)
    return flat.reshape(-1)


@functools.cache
def _centred_rows(modes: tuple) -> np.ndarray:
    """For each mode of the corner blocks (flat over [2^(d-1), p_1, .., K]), the row of
    its centred mode, or -1 for the corner rows no centred mode reads (the row before an
    odd count's negative block)."""
    source = mode_sources(modes)
    rows = np.full(_nblk(len(modes)) * math.prod(corner_modes(modes)), -1, np.int64)
    rows[source] = np.arange(source.size)
    return rows


def _row_half_weight(grid: tuple, modes: tuple, dtype: Any) -> np.ndarray:
    """s of each centred mode's last-axis bin, as [M, 1, 1] against rows [M, B, 2C]."""
    s = _half_weight(grid, modes, dtype)
    return np.tile(s, math.prod(modes) // s.size)[:, None, None]


def _to_rows(x: np.ndarray, modes: tuple) -> np.ndarray:
    xg = x.reshape(x.shape[:2] + (1, x.shape[2])) if x.ndim == 3 else x
    return _spectrum_rows(xg, _kernel_modes(corner_modes(modes)), _centred_rows(modes))


def _from_rows(t: np.ndarray, grid: tuple, modes: tuple) -> np.ndarray:
    g2 = (1,) + tuple(grid) if len(grid) == 1 else tuple(grid)
    y = _synthesis_rows(np.ascontiguousarray(t), _kernel_modes(corner_modes(modes)), g2,
                        _centred_rows(modes))
    return y.reshape(y.shape[:2] + tuple(grid))


@register("rfftn_rows", samples=lambda rng: _rows_samples(rng, True))
class RfftnRows(Function):
    """t = R_c rfftn(x): x [B, C, *grid] -> [M, B, 2C], row m = [re | im] of centred mode
    m (row-major over ``modes``) for every batch element and channel, written by the
    transform itself (no corner blocks in between). Its adjoint is N irfftn_rows(s t),
    as A's is N S(s G) above."""

    @staticmethod
    def forward(ctx, x, modes):
        ctx.modes, ctx.grid = modes, tuple(x.shape[2:])
        return _to_rows(x, modes)

    @staticmethod
    def backward(ctx, g):
        s = _row_half_weight(ctx.grid, ctx.modes, g.dtype)
        return float(np.prod(ctx.grid)) * _from_rows(g * s, ctx.grid, ctx.modes)

    @staticmethod
    def vjp(ctx, g):
        s = Tensor(_row_half_weight(ctx.grid, ctx.modes, g.dtype))
        return IrfftnRows.apply(g * s, grid=ctx.grid, modes=ctx.modes) * float(np.prod(ctx.grid))


@register("irfftn_rows", samples=lambda rng: _rows_samples(rng, False))
class IrfftnRows(Function):
    """y = irfftn(P_c t) onto ``grid``: rows [M, B, 2C] of centred modes back among zeros
    of a half spectrum, the adjoint layout of ``rfftn_rows`` (its vjp: rfftn_rows(g) /
    (N s), as S's is A(g) / (N s) above)."""

    @staticmethod
    def forward(ctx, t, grid, modes):
        ctx.grid, ctx.modes = grid, modes
        return _from_rows(t, grid, modes)

    @staticmethod
    def backward(ctx, g):
        c = 1.0 / (np.prod(ctx.grid) * _row_half_weight(ctx.grid, ctx.modes, g.dtype))
        return _to_rows(g, ctx.modes) * c

    @staticmethod
    def vjp(ctx, g):
        c = Tensor(1.0 / (np.prod(ctx.grid) * _row_half_weight(ctx.grid, ctx.modes, g.dtype)))
        return RfftnRows.apply(g, modes=ctx.modes) * c


def _rows_samples(rng, analysis: bool):
    cases = [((2, 2, 8), (3,), "1-D"), ((1, 2, 5, 7), (4, 3), "2-D even rows"),
             ((2, 1, 6, 6), (5, 4), "2-D odd rows (an unused corner row), Nyquist"),
             ((1, 2, 3, 4, 5), (3, 2, 3), "3-D odd rows, overlapping blocks")]
    for shape, modes, label in cases:
        if analysis:
            yield Sample(rng.standard_normal(shape), modes=modes, label=label)
        else:
            yield Sample(rng.standard_normal((math.prod(modes), shape[0], 2 * shape[1])),
                         grid=shape[2:], modes=modes, label=label)


# -- a complex matrix as one real block ------------------------------------------------------


@register("complex_block", samples=lambda rng: [
    Sample(rng.standard_normal((3, 4)), rng.standard_normal((3, 4)), label="matrix"),
    Sample(rng.standard_normal((2, 3, 2)), rng.standard_normal((2, 3, 2)), label="batched")])
class ComplexBlock(Function):
    """w = re + i im [.., c, c'] -> the real [.., 2c, 2c'] block [[re, im], [-im, re]]:
    [xr | xi] @ block = [xr re - xi im | xr im + xi re], a complex product as one real
    GEMM. Its adjoint adds the two copies of re and subtracts the two of im."""

    @staticmethod
    def forward(ctx, re, im):
        c, k = re.shape[-2:]
        out = np.empty(re.shape[:-2] + (2 * c, 2 * k), np.result_type(re, im))
        out[..., :c, :k] = re
        out[..., :c, k:] = im
        np.negative(im, out=out[..., c:, :k])
        out[..., c:, k:] = re
        return out

    @staticmethod
    def backward(ctx, g):
        """(g's two re quadrants added, its im quadrant less the -im one): the same
        slicing and arithmetic on arrays and, as the vjp, on Tensors."""
        c, k = ctx.input_arrays[0].shape[-2:]
        return g[..., :c, :k] + g[..., c:, k:], g[..., :c, k:] - g[..., c:, :k]

    vjp = backward


def _samples(rng, analysis: bool):
    cases = [((2, 2, 8), (3,), "1-D even N, modes 3"),
             ((1, 2, 6), (4,), "1-D even N, Nyquist kept"),
             ((1, 2, 5, 7), (3, 4), "2-D odd grid, overlapping rows, all columns"),
             ((2, 1, 4, 6), (2, 4), "2-D even grid, Nyquist column"),
             ((1, 2, 3, 4, 5), (2, 2, 2), "3-D mixed grid, overlapping rows")]
    for shape, modes, label in cases:
        if analysis:
            yield Sample(rng.standard_normal(shape), modes=modes, label=label)
        else:
            bshape = shape[:2] + (2 ** (len(modes) - 1),) + modes
            yield Sample(rng.standard_normal(bshape), rng.standard_normal(bshape),
                         grid=shape[2:], label=label)


def _check_modes(op: str, grid: tuple, modes: Any, shape_desc: str) -> tuple:
    d = len(grid)
    if not 1 <= d <= 3:
        raise ValueError(f"{op}: the grid must have 1 to 3 dims, got {shape_desc}")
    if isinstance(modes, (str, bytes)) or not hasattr(modes, "__len__") \
            or len(modes) != d or not all(is_int(m) and m > 0 for m in modes):
        raise ValueError(f"{op}: modes must be {d} positive ints (one per grid dim), got "
                         f"{modes!r} for {shape_desc}")
    for j, (m, n) in enumerate(zip(modes, grid)):
        avail = n // 2 + 1 if j == d - 1 else n
        if m > avail:
            raise ValueError(f"{op}: modes[{j}] = {m} exceeds the {avail} modes of grid dim "
                             f"{j} ({shape_desc})")
    return tuple(int(m) for m in modes)


def _grid_operand(op: str, x: Any, modes: Any) -> tuple[Tensor, tuple]:
    """x [B, C, *grid] as a float Tensor and ``modes`` checked against its grid."""
    x = lift(x)
    float_operands(op, x=x)
    if x.ndim < 3:
        raise ValueError(f"{op}: x must be [B, C, *grid], got shape {x.shape}")
    return x, _check_modes(op, tuple(x.shape[2:]), modes, f"x of shape {x.shape}")


def rfftn_corners(x: Any, modes: tuple) -> tuple[Tensor, Tensor]:
    """The kept corner blocks of rfftn(x) over the grid of x [B, C, *grid] (d = 1-3
    dims): (re, im), each [B, C, 2^(d-1), *modes]; block j = b_1 + 2 b_2 holds rows
    [0, p) (b = 0) or [N - p, N) (b = 1) of each full axis and bins [0, K) of the last
    (``modes`` = (p_1, .., K)). Unnormalised (numpy.fft.rfftn's 'backward' norm)."""
    x, m = _grid_operand("rfftn_corners", x, modes)
    return RfftnCorners.apply(x, modes=m)


def irfftn_corners(re: Any, im: Any, grid: tuple) -> Tensor:
    """irfftn onto ``grid`` of corner blocks (re + i im) [B, C, 2^(d-1), *modes] put back
    into a zero half spectrum (overlaps add), the adjoint layout of ``rfftn_corners``; the
    imaginary parts of the last axis's bin 0 and Nyquist bin are ignored (c2r)."""
    re, im = lift(re), lift(im)
    float_operands("irfftn_corners", re=re, im=im)
    if re.shape != im.shape:
        raise ValueError(f"irfftn_corners: re has shape {re.shape} but im has shape "
                         f"{im.shape}; they must match")
    grid = tuple(grid)
    d = len(grid)
    if re.ndim != d + 3 or re.shape[2] != 2 ** (d - 1):
        raise ValueError(f"irfftn_corners: re must be [B, C, {2 ** (d - 1)}, *modes] for a "
                         f"grid of {d} dims {grid}, got shape {re.shape}")
    _check_modes("irfftn_corners", grid, tuple(re.shape[3:]), f"grid {grid}")
    return IrfftnCorners.apply(re, im, grid=grid)


def rfftn_rows(x: Any, modes: tuple) -> Tensor:
    """The centred modes ``modes`` = (k_1, .., K) of rfftn(x) over the grid of x
    [B, C, *grid] as rows: [M, B, 2C], row m = [re | im] of centred mode m (row-major
    over ``modes``; index i of a full axis is frequency i - k // 2, the last axis's bins
    from 0) for every batch element. A weight that mixes channels per mode is then one
    batched GEMM. Unnormalised, as ``rfftn_corners``."""
    x, m = _grid_operand("rfftn_rows", x, modes)
    return RfftnRows.apply(x, modes=m)


def irfftn_rows(t: Any, grid: tuple, modes: tuple) -> Tensor:
    """irfftn onto ``grid`` of rows t [M, B, 2C] of the centred modes ``modes`` (the
    layout of ``rfftn_rows``) put back into a zero half spectrum: [B, C, *grid]."""
    t = lift(t)
    float_operands("irfftn_rows", t=t)
    grid = tuple(int(n) for n in grid)
    m = _check_modes("irfftn_rows", grid, modes, f"grid {grid}")
    M = math.prod(m)
    if t.ndim != 3 or t.shape[0] != M or t.shape[2] % 2:
        raise ValueError(f"irfftn_rows: t must be [{M}, B, 2C] for modes {m}, got shape "
                         f"{t.shape}")
    return IrfftnRows.apply(t, grid=grid, modes=m)


__all__ = ["rfftn_corners", "irfftn_corners", "rfftn_rows", "irfftn_rows"]
