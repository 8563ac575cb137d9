"""The PyTorch-surface ops a ported script calls in its training step, float32, nbgrad vs
PyTorch at the same thread count, timed in alternating blocks in one process
(``paired_times``):

* ``cumsum`` along the last dim of [256, 4096], forward + backward (the backward is the
  reverse scan),
* ``sort`` along the last dim of [256, 4096] (values and stable indices), forward +
  backward (the backward scatters the gradient through the indices),
* ``topk`` (k = 32) along the last dim of [256, 4096], forward only,
* ``einsum`` products that route to the GEMM: a batched product ``bij,bjk->bik`` over
  [64, 128, 128] operands, and the attention-style contraction ``bhqd,bhkd->bhqk`` over
  [8, 8, 256, 64], forward + backward.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import nbgrad as nb

from .harness import Row, paired_times

SCAN_SHAPE = (256, 4096)


def _grad_row(name: str, nb_fn: Callable, torch_fn: Callable | None, arrays: list[np.ndarray],
              torch, rng) -> Row:
    """Row for ``fn(*inputs)`` (a tensor, or a tuple whose first entry is the
    differentiable one) and its backward with a fixed upstream gradient."""
    ours = [nb.tensor(a, requires_grad=True) for a in arrays]
    first = nb_fn(*ours)
    out = first[0] if isinstance(first, tuple) else first
    g = rng.standard_normal(out.shape).astype(np.float32)

    def run_nb():
        for t in ours:
            t.grad = None
        y = nb_fn(*ours)
        (y[0] if isinstance(y, tuple) else y).backward(g)

    run_torch = None
    if torch is not None:
        theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
        gq = torch.tensor(g)

        def run_torch():
            for t in theirs:
                t.grad = None
            y = torch_fn(*theirs)
            (y[0] if isinstance(y, tuple) else y).backward(gq)

    t_nb, t_torch = paired_times(run_nb, run_torch)
    return Row(name, t_nb, t_torch, "<=1.0x")


def _forward_row(name: str, nb_fn: Callable, torch_fn: Callable, array: np.ndarray,
                 torch) -> Row:
    x = nb.tensor(array)
    run_torch = None
    if torch is not None:
        xq = torch.tensor(array)

        def run_torch():
            torch_fn(xq)

    t_nb, t_torch = paired_times(lambda: nb_fn(x), run_torch)
    return Row(name, t_nb, t_torch, "<=1.0x")


def run(torch) -> list[Row]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(SCAN_SHAPE).astype(np.float32)
    a = rng.standard_normal((64, 128, 128)).astype(np.float32)
    b = rng.standard_normal((64, 128, 128)).astype(np.float32)
    q = rng.standard_normal((8, 8, 256, 64)).astype(np.float32)
    k = rng.standard_normal((8, 8, 256, 64)).astype(np.float32)
    t = torch
    return [
        _grad_row("cumsum fwd+bwd, [256,4096] dim=-1 f32", lambda v: nb.cumsum(v, -1),
                  t and (lambda v: t.cumsum(v, -1)), [x], torch, rng),
        _grad_row("sort fwd+bwd, [256,4096] dim=-1 f32", lambda v: nb.sort(v, -1),
                  t and (lambda v: t.sort(v, dim=-1, stable=True)), [x], torch, rng),
        _forward_row("topk k=32 fwd, [256,4096] f32", lambda v: nb.topk(v, 32),
                     t and (lambda v: t.topk(v, 32)), x, torch),
        _grad_row("einsum bij,bjk->bik fwd+bwd, [64,128,128] f32",
                  lambda u, v: nb.einsum("bij,bjk->bik", u, v),
                  t and (lambda u, v: t.einsum("bij,bjk->bik", u, v)), [a, b], torch, rng),
        _grad_row("einsum bhqd,bhkd->bhqk fwd+bwd, [8,8,256,64] f32",
                  lambda u, v: nb.einsum("bhqd,bhkd->bhqk", u, v),
                  t and (lambda u, v: t.einsum("bhqd,bhkd->bhqk", u, v)), [q, k], torch, rng),
    ]
