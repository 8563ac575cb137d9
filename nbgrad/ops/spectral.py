"""Spectral convolution, the Fourier layer of FNO: ``spectral_conv1d``, ``spectral_conv2d``
and ``spectral_conv3d`` (docs/derivations.md#spectral-convolution).

The 1-D and 2-D ops run the 2-D kernels of ``kernels/spectral.py`` (the 1-D op is the
grid of one row, H = 1, with one block of modes); the 3-D op runs the 3-D kernels with
four corner blocks. The kernels add blocks that share a mode (the public functions
refuse such weights; ``nn.SpectralConv`` pads a block with zero weights for an odd
mode count and relies on it). The op is bilinear in (x, w): with
f(x, w) the op and h(x, g) its weight gradient (the registered ``*_weight_grad`` ops),

    df/dx^T g = f(g, conj w^T)        df/dw^T g = h(x, g)
    dh/dx^T a = f(g, conj a^T)        dh/dg^T a = f(x, a)

(w^T: input and output channels swapped), so both vjps are written with f and h and
differentiate again to any order.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ..function import Function, Sample, register
from ..kernels import buffers
from ..kernels import matmul as matmul_kernels
from ..runtime.jit import SPECTRAL_PARALLEL_MIN, for_work
from ..runtime.startup import lazy_module
from ..runtime.threads import get_num_threads
from ..tensor import Tensor, lift
from ._args import float_operands

kernels = lazy_module("nbgrad.kernels.spectral")


# -- array helpers (x as [B, C, *grid], weights as [nblk, Cin, Cout, *mshape]) --------------
# ``mshape`` is the mode shape of one block: (1, m) in 1-D (one row), (m1, m2) in 2-D,
# (m1, m2, m3) in 3-D; a block's modes are flattened to M = prod(mshape) for the mixing.
def _complex_like(dtype: np.dtype) -> np.ndarray:
    return np.empty(0, np.complex64 if dtype == np.float32 else np.complex128)


# The kernels read and write the modes as columns of a 2-D array [rows, L]: mode k of grid
# s (k indexing one grid's blocks [nblk, *mshape] flat) at [row_of[k], at[s]], its
# imaginary part ``im_at`` columns further (row_of[k] < 0: a mode no row holds). GEMM
# rows [K, B, 2C] are such an array (grid s = b C + ch at column b 2C + ch, im_at = C);
# so are stacked (re, im) [2, S, K] read transposed (column s, im_at = S).
@functools.cache
def _arange(n: int) -> np.ndarray:
    """0 .. n-1: the row of each mode in block order, the columns of stacked (re, im),
    and the GEMM's batch map (mode k times mode k's weights)."""
    return np.arange(n, dtype=np.int64)


@functools.cache
def _row_columns(B: int, C: int) -> np.ndarray:
    """Grid s = b C + ch's column b 2C + ch in GEMM rows [K, B, 2C] seen as [K, 2BC]."""
    s = np.arange(B * C, dtype=np.int64)
    return s // C * (2 * C) + s % C


def _block_rows(nblk: int, mshape: tuple) -> np.ndarray:
    """Every mode of the blocks in its own row, in block order."""
    return _arange(nblk * int(np.prod(mshape)))


def _spectrum_into(x: np.ndarray, mshape: tuple, out: np.ndarray, row_of: np.ndarray,
                   at: np.ndarray, im_at: int) -> None:
    """The kept modes of rfftn(x) over its grid dims (blocks of mode shape ``mshape``)
    into rows ``row_of`` and columns ``at`` of out [rows, L] (see above)."""
    xs = np.ascontiguousarray(x).reshape((-1,) + x.shape[2:])
    if x.ndim == 5:
        for_work(kernels.rfft3_modes, x.size, SPECTRAL_PARALLEL_MIN)(
            xs, mshape[0], mshape[1], _complex_like(x.dtype), out, row_of, at, im_at)
    else:
        nblk = row_of.size // int(np.prod(mshape))
        for_work(kernels.rfft_modes, x.size, SPECTRAL_PARALLEL_MIN)(
            xs, mshape[0], nblk, _complex_like(x.dtype), out, row_of, at, im_at)


def _stacked_spectrum(x: np.ndarray, nblk: int, mshape: tuple) -> np.ndarray:
    """The kept modes of rfftn(x) over its grid dims as stacked (re, im) [2, B, C, nblk, M]."""
    B, C = x.shape[:2]
    S, every = B * C, _block_rows(nblk, mshape)
    stacked = np.empty((2, B, C, nblk, every.size // nblk), x.dtype)
    _spectrum_into(x, mshape, stacked.reshape(2 * S, -1).T, every, _arange(S), S)
    return stacked


def _spectrum_rows(x: np.ndarray, mshape: tuple, row_of: np.ndarray) -> np.ndarray:
    """The kept modes of rfftn(x) written straight into GEMM rows [rows, B, 2C] (row
    row_of[k] holds [re | im] of mode k for every batch and channel)."""
    B, C = x.shape[:2]
    rows = buffers.empty((int(row_of.max()) + 1, B, 2 * C), x.dtype)
    _spectrum_into(x, mshape, rows.reshape(rows.shape[0], -1), row_of, _row_columns(B, C), C)
    return rows


def _synthesis_from(y: np.ndarray, row_of: np.ndarray, at: np.ndarray, im_at: int,
                    mshape: tuple, grid: tuple) -> np.ndarray:
    """irfftn onto ``grid`` (2 or 3 dims) of each grid's modes, rows ``row_of`` and
    columns ``at`` of y [rows, L] (see above): [S, *grid]."""
    out = np.empty((at.size,) + tuple(grid), y.dtype)
    if len(grid) == 3:
        for_work(kernels.irfft3_modes, out.size, SPECTRAL_PARALLEL_MIN)(
            y, row_of, at, im_at, mshape[0], mshape[1], _complex_like(y.dtype), out)
    else:
        nblk = row_of.size // int(np.prod(mshape))
        for_work(kernels.irfft_modes, out.size, SPECTRAL_PARALLEL_MIN)(
            y, row_of, at, im_at, nblk, mshape[0], _complex_like(y.dtype), out)
    return out


def _stacked_synthesis(stacked: np.ndarray, mshape: tuple, grid: tuple) -> np.ndarray:
    """irfftn onto ``grid`` (2 or 3 dims) of stacked modes (re, im) [2, B, C, nblk, M]."""
    _, B, C, nblk = stacked.shape[:4]
    S = B * C
    out = _synthesis_from(np.ascontiguousarray(stacked).reshape(2 * S, -1).T,
                          _block_rows(nblk, mshape), _arange(S), S, mshape, grid)
    return out.reshape((B, C) + tuple(grid))


def _synthesis_rows(rows: np.ndarray, mshape: tuple, grid: tuple,
                    row_of: np.ndarray) -> np.ndarray:
    """irfftn onto ``grid`` of the modes held as GEMM rows [rows, B, 2C] (mode k in row
    row_of[k]): [B, C, *grid]."""
    n, B, C2 = rows.shape
    out = _synthesis_from(rows.reshape(n, -1), row_of, _row_columns(B, C2 // 2), C2 // 2,
                          mshape, grid)
    return out.reshape((B, C2 // 2) + tuple(grid))


def _weight_scale(grid: tuple, mshape: tuple, dtype: np.dtype) -> np.ndarray:
    """c_k / prod(grid) for the flattened modes (last-axis index k fastest): c = 1 for
    k = 0 and for k = W/2 (W even), the bins that stand for themselves only; 2 for the
    others, which stand for k and W - k."""
    W, m = grid[-1], mshape[-1]
    c = np.full(m, 2.0)
    c[0] = 1.0
    if W % 2 == 0 and m > W // 2:
        c[W // 2] = 1.0
    return np.tile(c / np.prod(grid), int(np.prod(mshape[:-1]))).astype(dtype)


# -- the two ways of mixing the modes (kernels/spectral.py) -----------------------------------
# Both hold a layer's modes as one array and its weights as a tuple of arrays: ``analysis``
# (modes of x or g), ``weights``, ``mix`` (the op's mixing, or its adjoint), ``synthesis``,
# ``weight_grad``.
# The GEMM's weight blocks cost about as much as mixing ten batch rows in place, so a batch
# from GEMM_MIN_BATCH rows takes the GEMM and a smaller one (a GINO's single latent grid,
# where the blocks would be most of the work) the loops.
GEMM_MIN_BATCH = 16


class _GemmMixing:
    """Modes as GEMM rows (rows [nblk M, B, 2C]), weights as real blocks
    [nblk M, 2 Cin, 2 Cout], each mode's mixing one real product."""

    def __init__(self, nblk: int, mshape: tuple) -> None:
        self.nblk, self.mshape, self.rows = nblk, mshape, _block_rows(nblk, mshape)

    def analysis(self, x: np.ndarray) -> np.ndarray:
        return _spectrum_rows(x, self.mshape, self.rows)

    @staticmethod
    def weights(w_re: np.ndarray, w_im: np.ndarray) -> tuple:
        nblk, Cin, Cout, M = w_re.shape
        out = buffers.empty((nblk * M, 2 * Cin, 2 * Cout), w_re.dtype)
        for_work(kernels.weight_rows, out.size, SPECTRAL_PARALLEL_MIN)(w_re, w_im, out)
        return (out,)

    def mix(self, rows: np.ndarray, weights: tuple, adjoint: bool) -> np.ndarray:
        """Rows times each mode's block (its transpose, conj w^T, if adjoint)."""
        every = _arange(self.rows.size)
        return matmul_kernels.product(rows, weights[0], every, every, False, adjoint,
                                      get_num_threads())

    def synthesis(self, rows: np.ndarray, grid: tuple) -> np.ndarray:
        return _synthesis_rows(rows, self.mshape, grid, self.rows)

    def weight_grad(self, x_rows: np.ndarray, g_rows: np.ndarray, grid: tuple) -> tuple:
        """dW [nblk, Cin, Cout, M] from X's rows transposed times G's."""
        every = _arange(self.rows.size)
        c = matmul_kernels.product(x_rows, g_rows, every, every, True, False,
                                   get_num_threads())
        shape = (self.nblk, x_rows.shape[2] // 2, g_rows.shape[2] // 2,
                 self.rows.size // self.nblk)
        out_re = np.empty(shape, x_rows.dtype)
        out_im = np.empty_like(out_re)
        for_work(kernels.weight_grad_rows, c.size, SPECTRAL_PARALLEL_MIN)(
            c, _weight_scale(grid, self.mshape, x_rows.dtype), out_re, out_im)
        return out_re, out_im


class _LoopMixing:
    """Modes as stacked (re, im) [2, B, C, nblk, M], weights as given, mixed in place by
    loops vectorised along the modes."""

    def __init__(self, nblk: int, mshape: tuple) -> None:
        self.nblk, self.mshape = nblk, mshape

    def analysis(self, x: np.ndarray) -> np.ndarray:
        return _stacked_spectrum(x, self.nblk, self.mshape)

    @staticmethod
    def weights(w_re: np.ndarray, w_im: np.ndarray) -> tuple:
        return w_re, w_im

    @staticmethod
    def mix(a: np.ndarray, weights: tuple, adjoint: bool) -> np.ndarray:
        w_re, w_im = weights
        _, B, Q, nblk, M = a.shape
        P = w_re.shape[1] if adjoint else w_re.shape[2]
        out = np.empty((2, B, P, nblk, M), a.dtype)
        for_work(kernels.mix_modes, B * P * Q * nblk * M, SPECTRAL_PARALLEL_MIN)(
            a[0], a[1], w_re, w_im, adjoint, out[0], out[1])
        return out

    def synthesis(self, modes: np.ndarray, grid: tuple) -> np.ndarray:
        return _stacked_synthesis(modes, self.mshape, grid)

    def weight_grad(self, x_modes: np.ndarray, g_modes: np.ndarray, grid: tuple) -> tuple:
        (x_re, x_im), (g_re, g_im) = x_modes, g_modes
        B, Cin, nblk, M = x_re.shape
        Cout = g_re.shape[1]
        out_re = np.empty((nblk, Cin, Cout, M), x_re.dtype)
        out_im = np.empty_like(out_re)
        for_work(kernels.weight_grad_modes, B * Cin * Cout * nblk * M, SPECTRAL_PARALLEL_MIN)(
            x_re, x_im, g_re, g_im, _weight_scale(grid, self.mshape, x_re.dtype), out_re,
            out_im)
        return out_re, out_im


def _mixing(batch: int, nblk: int, mshape: tuple) -> _GemmMixing | _LoopMixing:
    return (_GemmMixing if batch >= GEMM_MIN_BATCH else _LoopMixing)(nblk, mshape)


def _as_grid(a: np.ndarray, dim: int) -> np.ndarray:
    """x [B, C, N] as [B, C, 1, N] (1-D); 2-D and 3-D grids unchanged."""
    return a.reshape(a.shape[:2] + (1, a.shape[2])) if dim == 1 else a


def _as_blocks(w: np.ndarray, dim: int) -> np.ndarray:
    """Weights as [nblk, Cin, Cout, M]: from [Cin, Cout, m] (1-D), [2, Cin, Cout, m1, m2]
    (2-D) or [4, Cin, Cout, m1, m2, m3] (3-D)."""
    w = np.ascontiguousarray(w)
    if dim == 1:
        return w.reshape((1,) + w.shape)
    return w.reshape(w.shape[:3] + (int(np.prod(w.shape[3:])),))


def _swap(dim: int) -> tuple:
    """The axes of w^T: input and output channels swapped."""
    return (1, 0, 2) if dim == 1 else (0, 2, 1) + tuple(range(3, dim + 3))


def _channels_swapped(w: Tensor, dim: int) -> Tensor:
    return w.permute(*_swap(dim))


# -- the ops ------------------------------------------------------------------------------
class _SpectralConv(Function):
    """y = irfftn(P mix(R rfftn(x), w_real + i w_imag)); subclasses fix ``dim``."""

    dim = 2

    @classmethod
    def _modes(cls, w_shape: tuple) -> tuple[int, tuple]:
        """(nblk, mshape) of weights of ``w_shape``."""
        if cls.dim == 1:
            return 1, (1, w_shape[2])
        return w_shape[0], tuple(w_shape[3:])

    @classmethod
    def _run(cls, x, w_real, w_imag) -> tuple:
        """(y, (the modes of x, the weights) as the mixing holds them, (the mixing, grid))
        on arrays."""
        nblk, mshape = cls._modes(w_real.shape)
        xg = _as_grid(x, cls.dim)
        grid = xg.shape[2:]
        mixing = _mixing(x.shape[0], nblk, mshape)
        x_modes = mixing.analysis(xg)
        weights = mixing.weights(_as_blocks(w_real, cls.dim), _as_blocks(w_imag, cls.dim))
        y = mixing.synthesis(mixing.mix(x_modes, weights, False), grid)
        if cls.dim == 1:
            y = y.reshape(y.shape[0], y.shape[1], y.shape[3])
        return y, (x_modes, weights), (mixing, grid)

    @classmethod
    def forward(cls, ctx, x, w_real, w_imag):
        y, (x_modes, weights), ctx.geometry = cls._run(x, w_real, w_imag)
        ctx.save_for_backward(x_modes, *weights)
        return y

    @classmethod
    def backward(cls, ctx, g):
        x_modes, *weights = ctx.saved_tensors
        mixing, grid = ctx.geometry
        need_x, need_wr, need_wi = ctx.needs_input_grad[:3]
        g_modes = mixing.analysis(_as_grid(g, cls.dim))
        dx = dwr = dwi = None
        if need_x:
            dx = mixing.synthesis(mixing.mix(g_modes, weights, True), grid)
            dx = dx.reshape(ctx.input_arrays[0].shape)
        if need_wr or need_wi:
            dr, di = mixing.weight_grad(x_modes, g_modes, grid)
            w_shape = ctx.input_arrays[1].shape
            dwr = dr.reshape(w_shape) if need_wr else None
            dwi = di.reshape(w_shape) if need_wi else None
        return dx, dwr, dwi

    @classmethod
    def vjp(cls, ctx, g):
        x, w_real, w_imag = (lift(t) for t in ctx.inputs[:3])
        need_x, need_wr, need_wi = ctx.needs_input_grad[:3]
        dx = dwr = dwi = None
        if need_x:
            dx = cls.apply(g, _channels_swapped(w_real, cls.dim),
                           -_channels_swapped(w_imag, cls.dim))
        if need_wr or need_wi:
            mshape = cls._modes(w_real.shape)[1]
            dwr, dwi = cls.weight_grad_op.apply(x, g, modes=mshape)
        return dx, dwr if need_wr else None, dwi if need_wi else None


class _SpectralConvWeightGrad(Function):
    """(dw_real, dw_imag) = h(x, g) = c_k / prod(grid) sum_b conj(R rfftn x) (R rfftn g), the
    weight gradient of spectral_conv as an op (params: modes = the block's mode shape,
    (1, m) in 1-D, (m1, m2) in 2-D, (m1, m2, m3) in 3-D). Bilinear: its vjp is
    spectral_conv itself."""

    conv_op: type[_SpectralConv]

    @classmethod
    def forward(cls, ctx, x, g, modes):
        dim = cls.conv_op.dim
        mshape = tuple(int(m) for m in modes)
        nblk = 2 ** (dim - 1)
        xg, gg = _as_grid(x, dim), _as_grid(g, dim)
        mixing = _mixing(x.shape[0], nblk, mshape)
        dr, di = mixing.weight_grad(mixing.analysis(xg), mixing.analysis(gg), xg.shape[2:])
        shape = ((x.shape[1], g.shape[1], mshape[1]) if dim == 1
                 else (nblk, x.shape[1], g.shape[1]) + mshape)
        ctx.save_for_backward(x, g)
        return dr.reshape(shape), di.reshape(shape)

    @classmethod
    def vjp(cls, ctx, a_re, a_im):
        x, g = lift(ctx.inputs[0]), lift(ctx.inputs[1])
        f, dim = cls.conv_op, cls.conv_op.dim
        need_x, need_g = ctx.needs_input_grad[:2]
        dx = (f.apply(g, _channels_swapped(a_re, dim), -_channels_swapped(a_im, dim))
              if need_x else None)
        dg = f.apply(x, a_re, a_im) if need_g else None
        return dx, dg

    @classmethod
    def backward(cls, ctx, a_re, a_im):
        # the vjp's two spectral convolutions, run on arrays
        x, g = ctx.saved_tensors
        f, dim = cls.conv_op, cls.conv_op.dim
        need_x, need_g = ctx.needs_input_grad[:2]
        swap = _swap(dim)
        dx = f._run(g, a_re.transpose(swap), -a_im.transpose(swap))[0] if need_x else None
        dg = f._run(x, a_re, a_im)[0] if need_g else None
        return dx, dg


def _conv_samples(dim: int):
    def samples(rng):
        def sample(x_shape, w_shape, label):
            return Sample(rng.standard_normal(x_shape), rng.standard_normal(w_shape),
                          rng.standard_normal(w_shape), label=label)

        if dim == 1:
            yield sample((2, 3, 8), (3, 2, 3), "even N, modes 3")
            yield sample((1, 2, 7), (2, 3, 4), "odd N, all modes (N//2 + 1)")
            yield sample((2, 1, 6), (1, 2, 4), "even N, the Nyquist mode kept")
        elif dim == 2:
            yield sample((2, 2, 6, 8), (2, 2, 3, 2, 3), "even grid")
            yield sample((1, 3, 5, 7), (2, 3, 2, 2, 4), "odd grid, all columns")
            yield sample((1, 2, 4, 6), (2, 2, 1, 2, 4), "m1 = H/2, Nyquist column kept")
        else:
            yield sample((2, 2, 4, 4, 6), (4, 2, 3, 2, 1, 3), "even grid, m1 = D/2")
            yield sample((1, 2, 5, 3, 5), (4, 2, 2, 1, 1, 3), "odd grid, all columns")
            yield sample((1, 1, 2, 4, 4), (4, 1, 2, 1, 2, 3), "m2 = H/2, Nyquist column kept")
    return samples


def _weight_grad_samples(dim: int):
    def samples(rng):
        def sample(x_shape, cout, modes, label):
            g_shape = (x_shape[0], cout) + x_shape[2:]
            return Sample(rng.standard_normal(x_shape), rng.standard_normal(g_shape),
                          modes=modes, label=label)

        if dim == 1:
            yield sample((2, 3, 8), 2, (1, 3), "even N, modes 3")
            yield sample((1, 2, 7), 3, (1, 4), "odd N, all modes")
            yield sample((2, 1, 6), 2, (1, 4), "even N, the Nyquist mode kept")
        elif dim == 2:
            yield sample((2, 2, 6, 8), 3, (2, 3), "even grid")
            yield sample((1, 2, 5, 7), 2, (2, 4), "odd grid, all columns")
            yield sample((1, 2, 4, 6), 1, (2, 4), "m1 = H/2, Nyquist column kept")
        else:
            yield sample((2, 2, 4, 4, 6), 3, (2, 1, 3), "even grid, m1 = D/2")
            yield sample((1, 2, 5, 3, 5), 2, (1, 1, 3), "odd grid, all columns")
            yield sample((1, 1, 2, 4, 4), 2, (1, 2, 3), "m2 = H/2, Nyquist column kept")
    return samples


@register("spectral_conv1d", samples=_conv_samples(1))
class SpectralConv1dFn(_SpectralConv):
    dim = 1


@register("spectral_conv2d", samples=_conv_samples(2))
class SpectralConv2dFn(_SpectralConv):
    dim = 2


@register("spectral_conv3d", samples=_conv_samples(3))
class SpectralConv3dFn(_SpectralConv):
    dim = 3


@register("spectral_conv1d_weight_grad", samples=_weight_grad_samples(1))
class SpectralConv1dWeightGrad(_SpectralConvWeightGrad):
    conv_op = SpectralConv1dFn


@register("spectral_conv2d_weight_grad", samples=_weight_grad_samples(2))
class SpectralConv2dWeightGrad(_SpectralConvWeightGrad):
    conv_op = SpectralConv2dFn


@register("spectral_conv3d_weight_grad", samples=_weight_grad_samples(3))
class SpectralConv3dWeightGrad(_SpectralConvWeightGrad):
    conv_op = SpectralConv3dFn


SpectralConv1dFn.weight_grad_op = SpectralConv1dWeightGrad
SpectralConv2dFn.weight_grad_op = SpectralConv2dWeightGrad
SpectralConv3dFn.weight_grad_op = SpectralConv3dWeightGrad


# -- public functions ---------------------------------------------------------------------
def _check(op: str, x: Tensor, w_real: Tensor, w_imag: Tensor, dim: int) -> None:
    """Ranks, channels and modes of a spectral convolution (ValueError naming the op, the
    argument and the shapes)."""
    float_operands(op, x=x, w_real=w_real, w_imag=w_imag)
    x_layout = {1: "[B, C_in, N]", 2: "[B, C_in, H, W]", 3: "[B, C_in, D, H, W]"}[dim]
    w_layout = {1: "[C_in, C_out, modes]", 2: "[2, C_in, C_out, modes1, modes2]",
                3: "[4, C_in, C_out, modes1, modes2, modes3]"}[dim]
    if x.ndim != dim + 2:
        raise ValueError(f"{op}: x must be {dim + 2}-D {x_layout}, got shape {x.shape}")
    w_rank = 3 if dim == 1 else dim + 3
    if w_real.ndim != w_rank:
        raise ValueError(f"{op}: w_real must be {w_rank}-D {w_layout}, got shape "
                         f"{w_real.shape}")
    if w_imag.shape != w_real.shape:
        raise ValueError(f"{op}: w_imag has shape {w_imag.shape} but w_real has shape "
                         f"{w_real.shape}; they must match")
    if dim == 2 and w_real.shape[0] != 2:
        raise ValueError(f"{op}: w_real must hold 2 blocks of modes (rows [:modes1] and "
                         f"[-modes1:]) in its first dim {w_layout}, got shape {w_real.shape}")
    if dim == 3 and w_real.shape[0] != 4:
        raise ValueError(f"{op}: w_real must hold 4 blocks of modes (the corners [:modes1] "
                         f"or [-modes1:] x [:modes2] or [-modes2:]) in its first dim "
                         f"{w_layout}, got shape {w_real.shape}")
    cin = w_real.shape[0 if dim == 1 else 1]
    if x.shape[1] != cin:
        raise ValueError(f"{op}: x has {x.shape[1]} channels (shape {x.shape}) but w_real "
                         f"expects C_in = {cin} (shape {w_real.shape})")
    if 0 in w_real.shape or 0 in x.shape[2:]:
        raise ValueError(f"{op}: empty grid or modes: x has shape {x.shape}, w_real has "
                         f"shape {w_real.shape}")
    n = x.shape[-1]
    m = w_real.shape[-1]
    if m > n // 2 + 1:
        name = "modes" if dim == 1 else f"modes{dim}"
        raise ValueError(f"{op}: {name} = {m} (w_real shape {w_real.shape}) is larger than "
                         f"the {n // 2 + 1} Fourier modes (N // 2 + 1) of the last dim of x "
                         f"(shape {x.shape})")
    for d in range(dim - 1):  # the full (two-sided) axes: D and H, or H
        m, n, axis = w_real.shape[3 + d], x.shape[2 + d], "DH"[d + 3 - dim]
        if 2 * m > n:
            raise ValueError(f"{op}: modes{d + 1} = {m} (w_real shape {w_real.shape}) is "
                             f"larger than {axis} // 2 = {n // 2} for x of shape {x.shape}: "
                             f"the blocks [:modes{d + 1}] and [-modes{d + 1}:] would overlap")


def spectral_conv1d(x: Any, w_real: Any, w_imag: Any) -> Tensor:
    """FNO's 1-D Fourier layer: ``y = irfft(rfft(x)[..., :m] (*) w, n=N)``.

    x[B, C_in, N], w_real and w_imag [C_in, C_out, m] (the complex weights w = w_real +
    i w_imag), m <= N // 2 + 1:

        X = rfft(x, dim=-1)[:, :, :m]
        Y[b, o, k] = sum_i X[b, i, k] w[i, o, k]
        y = irfft(Y zero-padded to N // 2 + 1 modes, n=N)    -> [B, C_out, N]

    as the original FNO's SpectralConv1d and neuraloperator's. Gradients for x, w_real
    and w_imag; twice differentiable (bilinear in x and w).
    """
    x, w_real, w_imag = lift(x), lift(w_real), lift(w_imag)
    _check("spectral_conv1d", x, w_real, w_imag, 1)
    return SpectralConv1dFn.apply(x, w_real, w_imag)


def spectral_conv2d(x: Any, w_real: Any, w_imag: Any) -> Tensor:
    """FNO's 2-D Fourier layer on x[B, C_in, H, W] -> [B, C_out, H, W].

    w_real and w_imag [2, C_in, C_out, m1, m2] (w = w_real + i w_imag), m1 <= H // 2,
    m2 <= W // 2 + 1. With X = rfft2(x) ([B, C_in, H, W // 2 + 1]) and Y zero but

        Y[:, :, :m1, :m2]  = einsum('bixy,ioxy->boxy', X[:, :, :m1, :m2],  w[0])
        Y[:, :, -m1:, :m2] = einsum('bixy,ioxy->boxy', X[:, :, -m1:, :m2], w[1])

    y = irfft2(Y, s=(H, W)), as the original FNO's SpectralConv2d (weights1, weights2)
    and neuraloperator's. Gradients for x, w_real and w_imag; twice differentiable.
    """
    x, w_real, w_imag = lift(x), lift(w_real), lift(w_imag)
    _check("spectral_conv2d", x, w_real, w_imag, 2)
    return SpectralConv2dFn.apply(x, w_real, w_imag)


def spectral_conv3d(x: Any, w_real: Any, w_imag: Any) -> Tensor:
    """FNO's 3-D Fourier layer on x[B, C_in, D, H, W] -> [B, C_out, D, H, W].

    w_real and w_imag [4, C_in, C_out, m1, m2, m3] (w = w_real + i w_imag), m1 <= D // 2,
    m2 <= H // 2, m3 <= W // 2 + 1. With X = rfftn(x) over (D, H, W)
    ([B, C_in, D, H, W // 2 + 1]) and Y zero but the four corner blocks

        Y[:, :, s1, s2, :m3] = einsum('bixyz,ioxyz->boxyz', X[:, :, s1, s2, :m3], w[j])

    for j = 0 .. 3 with s1 = [:m1] (j even) or [-m1:] (j odd) and s2 = [:m2] (j < 2) or
    [-m2:] (j >= 2), y = irfftn(Y, s=(D, H, W)): the original FNO's SpectralConv3d
    (weights1 .. weights4 are w[0], w[1], w[2], w[3]). Gradients for x, w_real and
    w_imag; twice differentiable (bilinear in x and w).
    """
    x, w_real, w_imag = lift(x), lift(w_real), lift(w_imag)
    _check("spectral_conv3d", x, w_real, w_imag, 3)
    return SpectralConv3dFn.apply(x, w_real, w_imag)


__all__ = ["spectral_conv1d", "spectral_conv2d", "spectral_conv3d"]
