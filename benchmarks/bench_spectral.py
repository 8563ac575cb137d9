"""Spectral convolution workload (W14): FNO's Fourier layer forward + backward, float32,
nbgrad vs PyTorch at the same thread count, timed in alternating blocks in one process
(``paired_times``).

* W14: ``spectral_conv2d`` on x [16, 32, 64, 64] with weights [2, 32, 32, 12, 12] (batch
  16, width 32, 12 x 12 modes per corner block), x and both weight halves requiring grad.
  PyTorch runs the original FNO's SpectralConv2d: ``torch.fft.rfft2``, two
  ``einsum('bixy,ioxy->boxy')`` on the corner blocks of a zero spectrum, ``irfft2``.
* The 1-D layer on x [16, 32, 1024] with 16 modes, for information.

Each timing is one forward and one ``y.backward(g)`` with a precomputed upstream
gradient.
"""

from __future__ import annotations

import numpy as np

import nbgrad as nb

from .harness import Row, paired_times

BATCH, WIDTH, GRID, MODES = 16, 32, 64, 12
GRID_1D, MODES_1D = 1024, 16


def _torch_layer2d(torch, x, wr, wi):
    """The original FNO SpectralConv2d forward in PyTorch."""
    B, _, H, W = x.shape
    m1, m2 = wr.shape[3], wr.shape[4]
    w = torch.complex(wr, wi)
    xf = torch.fft.rfft2(x)
    out = torch.zeros(B, wr.shape[2], H, W // 2 + 1, dtype=xf.dtype)
    out[:, :, :m1, :m2] = torch.einsum("bixy,ioxy->boxy", xf[:, :, :m1, :m2], w[0])
    out[:, :, -m1:, :m2] = torch.einsum("bixy,ioxy->boxy", xf[:, :, -m1:, :m2], w[1])
    return torch.fft.irfft2(out, s=(H, W))


def _torch_layer1d(torch, x, wr, wi):
    B, _, N = x.shape
    m = wr.shape[2]
    xf = torch.fft.rfft(x)
    out = torch.zeros(B, wr.shape[1], N // 2 + 1, dtype=xf.dtype)
    out[:, :, :m] = torch.einsum("bix,iox->box", xf[:, :, :m], torch.complex(wr, wi))
    return torch.fft.irfft(out, n=N)


def _row(name, rng, torch, x_shape, w_shape, ours, theirs, target):
    scale = 1.0 / (WIDTH * WIDTH)
    arrays = [rng.standard_normal(x_shape).astype(np.float32),
              (scale * rng.random(w_shape)).astype(np.float32),
              (scale * rng.random(w_shape)).astype(np.float32)]
    cout = w_shape[1] if len(w_shape) == 3 else w_shape[2]
    g = rng.standard_normal((x_shape[0], cout) + x_shape[2:]).astype(np.float32)
    leaves = [nb.tensor(a, requires_grad=True) for a in arrays]

    def run_nb():
        for t in leaves:
            t.grad = None
        ours(*leaves).backward(g)

    run_torch = None
    if torch is not None:
        tleaves = [torch.tensor(a, requires_grad=True) for a in arrays]
        gq = torch.tensor(g)

        def run_torch():
            for t in tleaves:
                t.grad = None
            theirs(torch, *tleaves).backward(gq)

    t_nb, t_torch = paired_times(run_nb, run_torch)
    return Row(name, t_nb, t_torch, target)


def run(torch) -> list[Row]:
    rng = np.random.default_rng(0)
    return [
        _row(f"W14 spectral_conv2d fwd+bwd, [{BATCH},{WIDTH},{GRID},{GRID}] m{MODES} f32",
             rng, torch, (BATCH, WIDTH, GRID, GRID), (2, WIDTH, WIDTH, MODES, MODES),
             nb.spectral_conv2d, _torch_layer2d, "<=1.0x"),
        _row(f"spectral_conv1d fwd+bwd, [{BATCH},{WIDTH},{GRID_1D}] m{MODES_1D} f32",
             rng, torch, (BATCH, WIDTH, GRID_1D), (WIDTH, WIDTH, MODES_1D),
             nb.spectral_conv1d, _torch_layer1d, "info"),
    ]
