"""Scaled dot-product attention: forward + backward, float32, nbgrad's fused kernel vs
PyTorch's CPU kernel (torch 2.13: its flash-attention CPU kernel) at the same thread
count, timed in alternating blocks in one process (``paired_times``).

* ``sdpa`` [B=8, heads=8, L=1024, d=64] (the issue's target, <= 1.0x), its forward
  alone, and L=4096, d=64 with B=1 (for information), no mask, and causal at L=1024.
* The note of the L=4096 row gives the peak memory of nbgrad's forward + backward
  (tracemalloc, which NumPy reports its buffers to) against the bytes of the inputs,
  the output and the three gradients: the fused kernels keep no [L, S] buffer.

Each timing is one forward and one ``out.backward(g)`` with a precomputed upstream
gradient; q, k and v require grad.
"""

from __future__ import annotations

import tracemalloc

import numpy as np

import nbgrad as nb
from nbgrad.ops.attention import scaled_dot_product_attention

from .harness import Row, paired_times


def _operands(rng, shape):
    q, k, v, g = (rng.standard_normal(shape).astype(np.float32) for _ in range(4))
    return q, k, v, g


def _row(rng, torch, shape, causal, target):
    q, k, v, g = _operands(rng, shape)
    leaves = [nb.tensor(a, requires_grad=True) for a in (q, k, v)]

    def run_nb():
        for t in leaves:
            t.grad = None
        scaled_dot_product_attention(*leaves, is_causal=causal).backward(g)

    run_torch = None
    if torch is not None:
        tl = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
        gq = torch.tensor(g)

        def run_torch():
            for t in tl:
                t.grad = None
            torch.nn.functional.scaled_dot_product_attention(*tl, is_causal=causal) \
                .backward(gq)

    t_nb, t_torch = paired_times(run_nb, run_torch, repeats=3, warmup=1, rounds=2)
    name = f"sdpa fwd+bwd {list(shape)} f32{' causal' if causal else ''}"
    return Row(name, t_nb, t_torch, target), run_nb, (q, k, v, g)


def _forward_row(rng, torch, shape) -> Row:
    """Forward only (inputs that require grad, so the saved state is as in training)."""
    q, k, v, _ = _operands(rng, shape)
    leaves = [nb.tensor(a, requires_grad=True) for a in (q, k, v)]

    def run_nb():
        scaled_dot_product_attention(*leaves)

    run_torch = None
    if torch is not None:
        tl = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]

        def run_torch():
            torch.nn.functional.scaled_dot_product_attention(*tl)

    t_nb, t_torch = paired_times(run_nb, run_torch, repeats=3, warmup=1, rounds=2)
    return Row(f"sdpa forward {list(shape)} f32", t_nb, t_torch, "info")


def _peak_note(run_nb, arrays) -> str:
    """Peak bytes NumPy allocated during one forward + backward, against the bytes of
    q, k, v, g, the output and the three gradients."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    run_nb()
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    io = sum(a.nbytes for a in arrays) * 2  # q k v g, then out dq dk dv
    return f"peak {peak / 2**20:.0f} MB vs in+out {io / 2**20:.0f} MB"


def run(torch) -> list[Row]:
    rng = np.random.default_rng(0)
    rows = []
    row, _, _ = _row(rng, torch, (8, 8, 1024, 64), False, "<=1.0x")
    rows.append(row)
    rows.append(_forward_row(rng, torch, (8, 8, 1024, 64)))
    row, _, _ = _row(rng, torch, (8, 8, 1024, 64), True, "info")
    rows.append(row)
    row, run_nb, arrays = _row(rng, torch, (1, 8, 4096, 64), False, "info")
    row.note = _peak_note(run_nb, arrays)
    rows.append(row)
    return rows
