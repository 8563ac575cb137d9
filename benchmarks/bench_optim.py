"""Optimiser steps: the multi-tensor update on its own.

W11  one Adam step (lr 1e-3, default betas) over 100 float32 parameters of 10k elements
     each (1M floats), gradients present; PyTorch: torch.optim.Adam(foreach=True)
                                                                   target <= 0.5x
"""

from __future__ import annotations

import numpy as np

import nbgrad as nb
import nbgrad.optim

from .harness import Row, paired_times

PARAMS, SIZE = 100, 10_000


def _w11(torch) -> Row:
    rng = np.random.default_rng(11)
    values = [rng.standard_normal(SIZE).astype(np.float32) for _ in range(PARAMS)]
    grads = [rng.standard_normal(SIZE).astype(np.float32) for _ in range(PARAMS)]
    p_nb = [nb.tensor(v, requires_grad=True) for v in values]
    for p, g in zip(p_nb, grads):
        p.grad = nb.tensor(g)
    step_nb = nbgrad.optim.Adam(p_nb, lr=1e-3).step
    step_torch = None
    if torch is not None:
        p_t = [torch.tensor(v, requires_grad=True) for v in values]
        for p, g in zip(p_t, grads):
            p.grad = torch.tensor(g)
        step_torch = torch.optim.Adam(p_t, lr=1e-3, foreach=True).step
    t_nb, t_torch = paired_times(step_nb, step_torch, repeats=21, warmup=3, rounds=5)
    return Row(f"W11 Adam step, {PARAMS} x {SIZE // 1000}k float32", t_nb, t_torch, "<=0.5x",
               "one kernel per group vs foreach=True")


def run(torch) -> list[Row]:
    return [_w11(torch)]
