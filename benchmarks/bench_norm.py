"""Normalisation workloads (W2e): forward + backward, float32, nbgrad vs PyTorch at the same
thread count, timed in alternating blocks in one process (``paired_times``).

* W2e: ``layer_norm`` over the rows of [4096, 1024] with weight and bias that require
  grad (a transformer block's LayerNorm): the forward reads x and writes y, the backward
  reads g and x and writes dx (dw and db are [1024]).
* ``batch_norm`` in training on [64, 32, 16, 16] (a CNN's BatchNorm2d), for information.

Each timing is one forward and one ``y.backward(g)`` with a precomputed upstream
gradient.
"""

from __future__ import annotations

import numpy as np

import nbgrad as nb

from .harness import Row, paired_times

LAYER_NORM_SHAPE = (4096, 1024)
BATCH_NORM_SHAPE = (64, 32, 16, 16)


def _affine_pair(rng, n, torch):
    """(weight, bias) requiring grad, as nbgrad tensors and (if available) torch tensors."""
    w = rng.uniform(0.5, 1.5, n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    ours = (nb.tensor(w, requires_grad=True), nb.tensor(b, requires_grad=True))
    theirs = None if torch is None else (torch.tensor(w, requires_grad=True),
                                         torch.tensor(b, requires_grad=True))
    return ours, theirs


def _timed(name, nb_call, torch_call, leaves, torch_leaves, g, torch, target):
    """Row for ``call(...).backward(g)`` with the gradients of ``leaves`` reset each run."""
    def run_nb():
        for t in leaves:
            t.grad = None
        nb_call().backward(g)

    run_torch = None
    if torch is not None:
        gq = torch.tensor(g)

        def run_torch():
            for t in torch_leaves:
                t.grad = None
            torch_call().backward(gq)

    t_nb, t_torch = paired_times(run_nb, run_torch)
    return Row(name, t_nb, t_torch, target)


def _layer_norm_row(rng, torch):
    x = rng.standard_normal(LAYER_NORM_SHAPE).astype(np.float32)
    g = rng.standard_normal(LAYER_NORM_SHAPE).astype(np.float32)
    d = LAYER_NORM_SHAPE[-1]
    (w, b), torch_wb = _affine_pair(rng, d, torch)
    xt = nb.tensor(x, requires_grad=True)
    torch_call, torch_leaves = None, ()
    if torch is not None:
        xq = torch.tensor(x, requires_grad=True)
        torch_leaves = (xq,) + torch_wb

        def torch_call():
            return torch.nn.functional.layer_norm(xq, (d,), *torch_wb)

    return _timed("W2e layer_norm fwd+bwd, [4096,1024] f32",
                  lambda: nb.layer_norm(xt, d, w, b), torch_call, (xt, w, b), torch_leaves,
                  g, torch, "<=1.0x")


def _batch_norm_row(rng, torch):
    x = rng.standard_normal(BATCH_NORM_SHAPE).astype(np.float32)
    g = rng.standard_normal(BATCH_NORM_SHAPE).astype(np.float32)
    c = BATCH_NORM_SHAPE[1]
    (w, b), torch_wb = _affine_pair(rng, c, torch)
    xt = nb.tensor(x, requires_grad=True)
    running = (np.zeros(c, np.float32), np.ones(c, np.float32))
    torch_call, torch_leaves = None, ()
    if torch is not None:
        xq = torch.tensor(x, requires_grad=True)
        torch_leaves = (xq,) + torch_wb
        running_q = (torch.zeros(c), torch.ones(c))

        def torch_call():
            return torch.nn.functional.batch_norm(xq, *running_q, *torch_wb, training=True)

    return _timed("batch_norm train fwd+bwd, [64,32,16,16] f32",
                  lambda: nb.batch_norm(xt, *running, w, b, training=True), torch_call,
                  (xt, w, b), torch_leaves, g, torch, "info")


def run(torch) -> list[Row]:
    rng = np.random.default_rng(0)
    return [_layer_norm_row(rng, torch), _batch_norm_row(rng, torch)]
