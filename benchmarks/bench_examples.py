"""Training epochs of the examples, as a user runs them.

W12  one epoch of the ``darcy-gno`` example on 16x16 Darcy grids: 1,000 samples of
     ``nbgrad.datasets.darcy2d`` (inputs ``[a, x, y]`` per node) in batches of 8 from
     ``nbgrad.data.DataLoader`` (shuffled), the example's model (lift 3->32, four
     ``nn.GNO`` layers of width 32 with kernel MLP 2->16->32*32 on ``x_j - x_i`` over the
     radius graph of the grid, 2.5 spacings, mean over the neighbours, skip, GELU;
     projection 32->128->1), relative L2 loss, backward, Adam. PyTorch runs
     ``darcy_gno.torch_twin``, the same model from the same weights with index_add
     message passing (every ``[nnz, 32, 32]`` kernel built once per batch), over the same
     batches with ``torch.optim.Adam``. float32, 2 threads              target <= 0.5x

An epoch takes seconds, so each side is timed over single epochs, alternating, the best
of two kept (``paired_times``); the learning-rate schedule of the example is left out
(it would run out of steps over the repeated epochs; its cost is one scalar per step).
"""

from __future__ import annotations

import nbgrad as nb
from nbgrad.data import DataLoader, TensorDataset
from nbgrad.examples import darcy_gno

from .harness import Row, paired_times

SAMPLES = 1000
LR = 1e-3


def _w12(torch) -> Row:
    data = darcy_gno.load_data(SAMPLES, 0)
    nb.manual_seed(12)
    model = darcy_gno.build_model()
    loader = DataLoader(TensorDataset(data["x_train"], data["y_train"]),
                        batch_size=darcy_gno.BATCH_SIZE, shuffle=True, seed=12)
    opt = nb.optim.Adam(model.parameters(), lr=LR)

    def epoch_nb():
        darcy_gno.train_epoch(model, loader, opt)

    epoch_torch = None
    if torch is not None:
        twin = darcy_gno.torch_twin(torch, model)
        t_opt = torch.optim.Adam(twin.parameters(), lr=LR)
        batches = [(torch.from_numpy(x.numpy()), torch.from_numpy(y.numpy()))
                   for x, y in loader]

        def epoch_torch():
            twin.train()
            for x, y in batches:
                diff = ((twin(x) - y) ** 2).sum(dim=1)
                loss = (diff / (y ** 2).sum(dim=1)).sqrt().mean()
                t_opt.zero_grad(set_to_none=True)
                loss.backward()
                t_opt.step()
                loss.item()

    t_nb, t_torch = paired_times(epoch_nb, epoch_torch, repeats=1, warmup=1, rounds=2)
    return Row(f"W12 darcy-gno epoch, {SAMPLES} x 16x16, batch {darcy_gno.BATCH_SIZE}",
               t_nb, t_torch, "<=0.5x",
               f"{model.graph.nnz} edges, 4 GNO layers width {darcy_gno.WIDTH}")


def run(torch) -> list[Row]:
    return [_w12(torch)]
