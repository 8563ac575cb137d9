"""What the ono-heat and lno-heat examples share: the data, the training loop, the
figure and the command line. Each example only builds its model.

The task is the reference library's (athena's) 1-D heat example
(``nbgrad.datasets.heat1d``): ``u_t = nu u_xx`` on [0, 1] with ``u = 0`` at both ends,
``nu = 0.01``, the initial state ``u0 = sum_{m=1..5} a_m sin(m pi x)`` with
``a_m ~ U[-1, 1]``, and the target the exact solution at ``t* = 1``, both on 32 grid
nodes; 200 training pairs and 50 test pairs. The metric is athena's: the test mean
squared error over all samples and nodes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

import nbgrad as nb
from nbgrad import nn
from nbgrad.data import TensorDataset
from nbgrad.datasets import heat1d
from nbgrad.datasets.heat import grid_points
from nbgrad.examples import _common
from nbgrad.examples._common import losses_axis, metric_table, relative_l2

F32 = np.float32


def load_data(n_train: int = 200, n_test: int = 50, grid: int = 32, seed: int = 0) -> dict:
    """``heat1d``'s pairs as float32: inputs ``u0`` and targets ``u(t* = 1)``, train
    ``[n_train, grid]`` and test ``[n_test, grid]``, and the grid nodes ``x``."""
    (u0_train, u_train), (u0_test, u_test) = heat1d(n_train, n_test, grid, seed=seed)
    return {"x_train": u0_train.astype(F32), "y_train": u_train.astype(F32),
            "x_test": u0_test.astype(F32), "y_test": u_test.astype(F32),
            "x": grid_points(grid)}


def operator_net(layer: Callable[[int, int], nn.Module], grid: int = 32,
                 hidden: int = 32) -> nn.Sequential:
    """athena's two-layer network: ``layer(grid, hidden)`` - ReLU -
    ``layer(hidden, grid)``, each ``layer(in_points, out_points)`` an operator layer."""
    return nn.Sequential(layer(grid, hidden), nn.ReLU(), layer(hidden, grid))


def predict(model: nn.Module, inputs: np.ndarray) -> np.ndarray:
    """``model`` on ``inputs`` without a graph."""
    with nb.no_grad():
        return model(nb.tensor(inputs)).numpy()


def mse(prediction: np.ndarray, truth: np.ndarray) -> float:
    """The mean squared error over all samples and nodes (athena's test MSE)."""
    return float(np.mean((prediction.astype(np.float64) - truth) ** 2))


def train(build_model: Callable[[int], nn.Module], epochs: int, lr: float, batch_size: int,
          n_train: int, n_test: int, seed: int, show_progress: bool) -> dict:
    """``fit`` of ``build_model(grid)`` (its weights from ``nb.manual_seed(seed)``) on
    ``load_data``'s pairs; ``fit``'s history."""
    nb.manual_seed(seed)
    data = load_data(n_train, n_test, seed=seed)
    model = build_model(data["x_train"].shape[1])
    return fit(model, data, epochs, batch_size, lr, seed, show_progress)


def fit(model: nn.Module, data: dict, epochs: int, batch_size: int = 20, lr: float = 1e-2,
        seed: int = 0, show_progress: bool = True) -> dict:
    """Train ``model`` on ``data`` with Adam, the learning rate annealed (cosine) from
    ``lr`` to ``lr / 100`` over all steps, the batches shuffled by ``seed``
    (``_common.fit``). Returns the history: per-step losses (``loss``), per-epoch mean
    training loss (``epoch_loss``) and test MSE (``test_mse``), the final ``mse``,
    ``relative_l2`` and test ``prediction``, the ``baseline_mse`` of predicting ``u0``
    itself (no decay), the ``model`` and the ``data``."""
    loader = _common.training_loader(TensorDataset(data["x_train"], data["y_train"]),
                                     batch_size, seed, 1)
    opt, schedule = _common.adam_with_cosine(model, lr, epochs * len(loader), lr / 100)

    def describe(epochs_done: int, history: dict) -> str:
        return (f"epoch {epochs_done:4d}/{epochs}  train MSE {history['epoch_loss'][-1]:.3e}  "
                f"test MSE {history['test_mse'][-1]:.3e}")

    history = _common.fit(
        model, loader, opt, nb.mse_loss, epochs, scheduler=schedule,
        metrics={"test_mse": lambda: mse(predict(model, data["x_test"]), data["y_test"])},
        describe=describe, report_every=max(epochs // 10, 1), show_progress=show_progress,
        loss_format=".2e")
    prediction = predict(model, data["x_test"])
    history.update(model=model, data=data, prediction=prediction,
                   mse=history["test_mse"][-1],
                   relative_l2=relative_l2(prediction, data["y_test"]),
                   baseline_mse=mse(data["x_test"], data["y_test"]))
    return history


def draw(history: dict, plt: Any, title: str, samples: tuple[int, ...] = (0, 1, 2)) -> Any:
    """A figure (on ``plt``, matplotlib.pyplot) of truth and prediction, with the initial
    state, for a few test samples, and of the training loss per step with the test MSE
    per epoch."""
    data, pred = history["data"], history["prediction"]
    x = data["x"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for c, i in enumerate(samples):
        left.plot(x, data["x_test"][i], ":", lw=0.8, color=f"C{c}")
        left.plot(x, data["y_test"][i], "-", lw=1.2, color=f"C{c}",
                  label=f"test {i}: u(t*) exact")
        left.plot(x, pred[i], "o", ms=3, color=f"C{c}", label=f"test {i}: {title}")
    left.set(xlabel="x", ylabel="u", title=f"{title}: u0 (dotted) -> u(t* = 1), "
                                           f"test MSE {history['mse']:.2e}")
    left.legend(fontsize=7, ncol=2)
    losses_axis(right, history["loss"], "MSE")
    steps_per_epoch = len(history["loss"]) // len(history["test_mse"])
    right.plot(steps_per_epoch * np.arange(1, len(history["test_mse"]) + 1),
               history["test_mse"], lw=1.2, label="test MSE (per epoch)")
    right.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot(history: dict, path: str, title: str) -> None:
    """``draw``'s figure saved to ``path``."""
    _common.save_plot(lambda plt: draw(history, plt, title), path)


def main(argv: list[str] | None, name: str, description: str, train: Callable[..., dict],
         sizes: dict) -> int:
    """The command line of a heat example ``name`` whose ``train(epochs, lr, batch_size,
    seed, show_progress)`` returns ``fit``'s history (``lr`` passed only when given);
    ``sizes['full'|'quick']`` hold the epochs."""
    parser = _common.command_line(name, description)
    parser.add_argument("--lr", type=float, default=None,
                        help="the learning rate (default: the example's)")
    parser.add_argument("--batch-size", type=int, default=20, help="samples per step")
    args = parser.parse_args(argv)
    epochs = args.epochs or sizes["quick" if args.quick else "full"]["epochs"]
    start = time.perf_counter()
    lr = {} if args.lr is None else {"lr": args.lr}
    history = train(epochs=epochs, batch_size=args.batch_size, seed=args.seed,
                    show_progress=not args.no_progress, **lr)
    print(metric_table([("epochs", epochs),
                        ("final training MSE", history["epoch_loss"][-1]),
                        ("test MSE", history["mse"]),
                        ("test relative L2", history["relative_l2"]),
                        ("test MSE of u0 (no model)", history["baseline_mse"]),
                        ("seconds", round(time.perf_counter() - start, 1))]))
    plot(history, args.plot, name.split("-")[0].upper())
    return 0
