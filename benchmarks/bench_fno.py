"""Fourier neural operators trained as their users train them, nbgrad against the same
model in PyTorch (``nbgrad.testing.torch_reference``: the reference library's forward
written with torch.fft and 1x1 convolutions, from the nbgrad model's weights).

W18  one training epoch of the FNO the reference library's Darcy files are trained
     with: 1,000 samples of 16x16 (the user's converted ``darcy_train_16.npz`` when
     ``NBGRAD_DARCY_DIR`` names its folder, else ``nbgrad.datasets.darcy2d``: the time
     does not depend on the values), batch 32, ``FNO(n_modes=(16, 16), in 1, out 1,
     hidden 32)`` with the grid embedding, a lift and a projection through 256 channels
     (``lifting_channel_ratio = projection_channel_ratio = 8``), four Fourier blocks with
     their channel-MLPs, relative L2 loss, Adam. float32, 2 threads.   target <= 0.7x
W19  the ``darcy-tfno`` example trained to the end on both sides: TFNO with Tucker rank
     0.42, unit-Gaussian encoders, H1 training loss, Adam + cosine annealing, 1,000
     samples in batches of 32, 20 epochs, the same weights and the same batch order;
     the epochs alternate between the two, each side's median epoch is compared, and the
     note gives both sides' test errors at 16x16 (the issue asks for them within 5%).
     PyTorch contracts the spectrum with the dense weight rebuilt from the Tucker
     factors each step (the reference library's default ``implementation``); nbgrad
     contracts with the factors.                                      target <= 0.7x
"""

from __future__ import annotations

import os
import statistics
import time

import numpy as np

import nbgrad as nb
from nbgrad.data import DataLoader, TensorDataset
from nbgrad.datasets import darcy2d, load_darcy_flow
from nbgrad.examples import _common, darcy_tfno
from nbgrad.nn.fno import FNO
from nbgrad.nn.operator_losses import H1Loss, LpLoss

from .harness import Row, paired_times

SAMPLES, BATCH, LR = 1000, 32, 8e-3
TFNO_EPOCHS = 20


def _darcy_16(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``a`` and ``u`` [n, 1, 16, 16] float32: the reference's files if the user has them."""
    folder = os.environ.get("NBGRAD_DARCY_DIR")
    if folder:
        (x, y), _ = load_darcy_flow(folder, n, 1, test_resolutions=16, as_arrays=True)
        return x, y
    a, u = darcy2d(n, resolution=16, seed=0)
    return a[:, None].astype(np.float32), u[:, None].astype(np.float32)


def _batches(x: np.ndarray, y: np.ndarray, epoch: int) -> list:
    loader = DataLoader(TensorDataset(x, y), batch_size=BATCH, shuffle=True, seed=18)
    return [(bx.numpy(), by.numpy()) for bx, by in _common.start_epoch(loader, epoch)]


def _w18(torch) -> Row:
    x, y = _darcy_16(SAMPLES)
    nb.manual_seed(18)
    model = FNO((16, 16), 1, 1, 32, lifting_channel_ratio=8, projection_channel_ratio=8,
                dtype=np.float32)
    batches = _batches(x, y, 0)
    l2 = LpLoss(d=2, p=2)
    opt = nb.optim.Adam(model.parameters(), lr=LR)

    def epoch_nb():
        for bx, by in batches:
            loss = l2(model(bx), by)
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss.item()

    epoch_torch, agreement = None, ""
    if torch is not None:
        from nbgrad.testing.torch_reference import fno_forward, torch_parameters
        from nbgrad.testing.torch_reference_losses import lp_loss

        params = torch_parameters(torch, model)
        t_opt = torch.optim.Adam(list(params.values()), lr=LR)
        t_batches = [(torch.from_numpy(bx), torch.from_numpy(by)) for bx, by in batches]
        first = fno_forward(torch, t_batches[0][0], params, model).detach().numpy()
        agreement = (f"first batch's output agrees to "
                     f"{_relative(model(batches[0][0]).numpy(), first):.0e}")

        def epoch_torch():
            for bx, by in t_batches:
                loss = lp_loss(torch, fno_forward(torch, bx, params, model), by, d=2, p=2)
                t_opt.zero_grad(set_to_none=True)
                loss.backward()
                t_opt.step()
                loss.item()

    t_nb, t_torch = paired_times(epoch_nb, epoch_torch, repeats=1, warmup=1, rounds=3)
    return Row(f"W18 darcy FNO epoch, {SAMPLES} x 16x16, batch {BATCH}", t_nb, t_torch,
               "<=0.7x", "lift/projection 256, modes 16x16; " + agreement)


def _relative(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


# -- W19: darcy-tfno trained on both sides ------------------------------------------------


def _w19(torch) -> Row:
    nb.manual_seed(0)
    data = darcy_tfno.load_data(SAMPLES, (100,), test_resolutions=(16,))
    model = darcy_tfno.build_model()
    processor = darcy_tfno.build_processor(data, model)
    twin = _TorchTFNO(torch, model, processor) if torch is not None else None
    opt = nb.optim.Adam(model.parameters(), lr=LR, weight_decay=1e-4)
    scheduler = nb.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=30)
    h1 = H1Loss(d=2)

    def epoch_nb(batches):
        processor.train()
        for bx, by in batches:
            out, batch = processor(x=bx, y=by)
            loss = h1(out, batch["y"])
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss.item()
        scheduler.step()

    times_nb, times_torch = [], []
    for epoch in range(TFNO_EPOCHS):
        batches = _batches(data["x_train"], data["y_train"], epoch)
        times_nb.append(_seconds(epoch_nb, batches))
        if twin is not None:
            times_torch.append(_seconds(twin.epoch, batches))
    ours = darcy_tfno.evaluate(processor, data)
    note = f"{TFNO_EPOCHS} epochs: nbgrad test L2 {ours['16_l2']:.4f} H1 {ours['16_h1']:.4f}"
    if twin is not None:
        theirs = twin.evaluate(*data["tests"][16])
        note += f", PyTorch L2 {theirs[0]:.4f} H1 {theirs[1]:.4f}"
    return Row("W19 darcy-tfno epoch, trained 20 epochs both sides",
               statistics.median(times_nb),
               statistics.median(times_torch) if times_torch else None, "<=0.7x", note)


def _seconds(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


class _TorchTFNO:
    """The darcy-tfno training in PyTorch from the nbgrad model's weights and encoders:
    ``(x - mean) / (std + eps)`` in, the same out in training, decoded in evaluation."""

    def __init__(self, torch, model, processor) -> None:
        from nbgrad.testing.torch_reference import torch_parameters

        self.torch, self.model = torch, model
        self.params = torch_parameters(torch, model)
        self.opt = torch.optim.Adam(list(self.params.values()), lr=LR, weight_decay=1e-4)
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(self.opt, T_max=30)
        self.encoders = [(torch.from_numpy(n.mean.numpy()), torch.from_numpy(n.std.numpy()),
                          n.eps) for n in (processor.in_normalizer, processor.out_normalizer)]

    def _encode(self, k: int, v):
        mean, std, eps = self.encoders[k]
        return (self.torch.from_numpy(v) - mean) / (std + eps)

    def _forward(self, x):
        from nbgrad.testing.torch_reference import fno_forward

        return fno_forward(self.torch, self._encode(0, x), self.params, self.model)

    def epoch(self, batches) -> None:
        from nbgrad.testing.torch_reference_losses import h1_loss

        for bx, by in batches:
            loss = h1_loss(self.torch, self._forward(bx), self._encode(1, by), d=2)
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
            loss.item()
        self.scheduler.step()

    def evaluate(self, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
        """Test relative L2 and H1 per sample, in physical units."""
        from nbgrad.testing.torch_reference_losses import h1_loss, lp_loss

        mean, std, eps = self.encoders[1]
        with self.torch.no_grad():
            out = self._forward(x) * (std + eps) + mean
            target = self.torch.from_numpy(y)
            return (lp_loss(self.torch, out, target, d=2, p=2).item() / len(y),
                    h1_loss(self.torch, out, target, d=2).item() / len(y))


def run(torch) -> list[Row]:
    return [_w18(torch), _w19(torch)]
