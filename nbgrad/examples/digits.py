"""Train a small CNN on the bundled 8x8 digits: ``python -m nbgrad.examples digits``.

conv(1->16, k3, p1) - relu - conv(16->32, k3, p1) - relu - maxpool 2 - flatten -
linear(512->64) - relu - linear(64->10), cross-entropy, SGD with momentum 0.9 (or Adam),
batch 64, 15 epochs on 1,437 images; accuracy on the 360 held-out images.
Data-parallel over MPI ranks with ``mpiexec -n 2 python -m nbgrad.examples digits
--distributed``; ``--checkpoint PATH`` saves the run after every epoch and ``--resume
PATH`` continues one.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import numpy as np

import nbgrad as nb
from nbgrad import nn
from nbgrad.data import TensorDataset
from nbgrad.datasets import split_digits
from nbgrad.distributed import DistributedDataParallel
from nbgrad.examples import _common
from nbgrad.examples._common import (
    init_distributed,
    is_main_process,
    losses_axis,
    metric_table,
    read_checkpoint,
    save_checkpoint,
    training_loader,
)


def build_model() -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(512, 64), nn.ReLU(), nn.Linear(64, 10))


def torch_twin(torch: Any) -> Any:
    """The same model in PyTorch (``torch`` the module), for comparisons: layer for layer,
    so ``named_parameters`` pair up in order."""
    nn_ = torch.nn
    return nn_.Sequential(
        nn_.Conv2d(1, 16, 3, padding=1), nn_.ReLU(),
        nn_.Conv2d(16, 32, 3, padding=1), nn_.ReLU(), nn_.MaxPool2d(2),
        nn_.Flatten(), nn_.Linear(512, 64), nn_.ReLU(), nn_.Linear(64, 10))


def make_optimizer(model: nn.Module, name: str, lr: float | None) -> Any:
    if name == "sgd":
        return nb.optim.SGD(model.parameters(), lr=lr or 0.05, momentum=0.9)
    if name == "adam":
        return nb.optim.Adam(model.parameters(), lr=lr or 1e-3)
    raise ValueError(f"digits: optimizer must be 'sgd' or 'adam', got {name!r}")


def accuracy(model: nn.Module, images: np.ndarray, labels: np.ndarray) -> float:
    """The fraction of ``images`` whose largest logit is at the right label."""
    with nb.no_grad():
        logits = model(nb.tensor(images)).numpy()
    return float((logits.argmax(axis=1) == labels).mean())


def train_epoch(model: nn.Module, loader: Iterable, optimizer: Any,
                bar: Any = None) -> list[float]:
    """One pass over ``loader`` on the cross-entropy (``_common.train_epoch``)."""
    return _common.train_epoch(model, loader, optimizer, nb.cross_entropy, bar=bar)


def train(epochs: int = 15, optimizer: str = "sgd", lr: float | None = None,
          batch_size: int = 64, seed: int = 0, show_progress: bool = True,
          distributed: bool = False, checkpoint: str | None = None,
          resume: str | None = None) -> dict:
    """Train from ``nb.manual_seed(seed)`` weights; returns the history: per-step losses
    (``loss``), per-epoch mean loss (``epoch_loss``) and test accuracy (``test_accuracy``),
    and the trained ``model``.

    With ``distributed`` (under ``mpiexec``) the ranks share each batch of ``batch_size``
    images and average their gradients. ``checkpoint``: where the model, the optimiser,
    the number of epochs done and the default generator's state are saved after every
    epoch (by rank 0); ``resume``: such a file to continue from, up to ``epochs`` epochs
    in all, drawing the random numbers the uninterrupted run would."""
    ranks = init_distributed(distributed)
    nb.manual_seed(seed)
    model = build_model()
    opt = make_optimizer(model, optimizer, lr)
    done = 0 if resume is None else load_checkpoint(resume, model, opt)
    net = DistributedDataParallel(model) if distributed else model
    (x_train, y_train), (x_test, y_test) = split_digits(seed)
    loader = training_loader(TensorDataset(x_train, y_train), batch_size, seed, ranks)

    def describe(epochs_done: int, history: dict) -> str:
        return (f"epoch {epochs_done:2d}/{epochs}  loss {history['epoch_loss'][-1]:.4f}  "
                f"test accuracy {history['test_accuracy'][-1]:.4f}")

    def save(epochs_done: int) -> None:
        save_checkpoint({"model": model.state_dict(), "optimizer": opt.state_dict(),
                         "epoch": epochs_done}, checkpoint)

    history = _common.fit(net, loader, opt, nb.cross_entropy, epochs,
                          metrics={"test_accuracy": lambda: accuracy(model, x_test, y_test)},
                          describe=describe, first_epoch=done,
                          after_epoch=None if checkpoint is None else save,
                          show_progress=show_progress)
    history["model"] = model
    return history


def load_checkpoint(path: str, model: nn.Module, optimizer: Any) -> int:
    """Load a checkpoint of ``train`` into ``model`` and ``optimizer`` and set the default
    generator to its state; the number of epochs it had done."""
    state = read_checkpoint(path)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return int(state["epoch"])


def plot(history: dict, path: str) -> None:
    """Loss per step and test accuracy per epoch, side by side, saved to ``path``."""

    def draw(plt: Any) -> Any:
        fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
        losses_axis(left, history["loss"])
        right.plot(range(1, len(history["test_accuracy"]) + 1), history["test_accuracy"],
                   "o-")
        right.set(xlabel="epoch", ylabel="test accuracy")
        return fig

    _common.save_plot(draw, path)


def main(argv: list[str] | None = None) -> int:
    parser = _common.command_line("digits", __doc__,
                                  "where to save the loss and accuracy curves", epochs=15,
                                  quick=False)
    parser.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd",
                        help="SGD with momentum 0.9, or Adam")
    parser.add_argument("--lr", type=float, default=None,
                        help="the learning rate (default: 0.05 for SGD, 1e-3 for Adam)")
    _common.add_distributed_options(parser, batch_size=64)
    parser.add_argument("--checkpoint", metavar="NPZ", default=None,
                        help="save model and optimiser here after every epoch")
    parser.add_argument("--resume", metavar="NPZ", default=None,
                        help="continue from a --checkpoint file")
    args = parser.parse_args(argv)
    _common.check_distributed(parser, args)
    start = time.perf_counter()
    history = train(args.epochs, args.optimizer, args.lr, args.batch_size, args.seed,
                    not args.no_progress, args.distributed, args.checkpoint, args.resume)
    if is_main_process() and history["epoch_loss"]:
        print(metric_table([("epochs", args.epochs),
                            ("final training loss", history["epoch_loss"][-1]),
                            ("test accuracy", history["test_accuracy"][-1]),
                            ("seconds", round(time.perf_counter() - start, 1))]))
        plot(history, args.plot)
    return 0
