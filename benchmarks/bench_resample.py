"""Resampling workloads: forward + backward, float32, nbgrad vs PyTorch at the same thread
count, timed in alternating blocks in one process (``paired_times``).

* ``interpolate`` bilinear (align_corners=False) [16, 32, 64, 64] -> 128x128, and nearest
  with scale_factor 2 (a decoder's upsampling).
* ``adaptive_avg_pool2d`` [64, 256, 14, 14] -> (1, 1) (a classifier's global pooling) and
  -> (7, 7).

Each timing is one forward and one ``y.backward(g)`` with a precomputed upstream gradient.
"""

from __future__ import annotations

import numpy as np

import nbgrad as nb
from nbgrad.ops.resample import adaptive_avg_pool2d, interpolate

from .harness import Row, paired_times

UPSAMPLE_SHAPE = (16, 32, 64, 64)
POOL_SHAPE = (64, 256, 14, 14)


def _row(name, x, ours, theirs, torch, target="<=1.0x"):
    xt = nb.tensor(x, requires_grad=True)
    g = np.random.default_rng(1).standard_normal(ours(xt).shape).astype(np.float32)

    def run_nb():
        xt.grad = None
        ours(xt).backward(g)

    run_torch = None
    if torch is not None:
        xq, gq = torch.tensor(x, requires_grad=True), torch.tensor(g)

        def run_torch():
            xq.grad = None
            theirs(xq).backward(gq)

    t_nb, t_torch = paired_times(run_nb, run_torch)
    return Row(name, t_nb, t_torch, target)


def run(torch) -> list[Row]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(UPSAMPLE_SHAPE).astype(np.float32)
    p = rng.standard_normal(POOL_SHAPE).astype(np.float32)
    F = None if torch is None else torch.nn.functional
    rows = [
        _row("interpolate bilinear fwd+bwd [16,32,64,64]->128", x,
             lambda t: interpolate(t, size=(128, 128), mode="bilinear", align_corners=False),
             F and (lambda t: F.interpolate(t, size=(128, 128), mode="bilinear",
                                            align_corners=False)), torch),
        _row("interpolate nearest x2 fwd+bwd [16,32,64,64]", x,
             lambda t: interpolate(t, scale_factor=2, mode="nearest"),
             F and (lambda t: F.interpolate(t, scale_factor=2, mode="nearest")), torch),
    ]
    for out in ((1, 1), (7, 7)):
        rows.append(_row(f"adaptive_avg_pool2d fwd+bwd [64,256,14,14]->{out}", p,
                         lambda t, out=out: adaptive_avg_pool2d(t, out),
                         F and (lambda t, out=out: F.adaptive_avg_pool2d(t, out)), torch))
    return rows
