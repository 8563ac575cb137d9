"""An LNO time stepper for heat, rolled out: ``python -m nbgrad.examples lno-rollout``.

The reference library's (athena's) LNO rollout example: trajectories of
``u_t = 0.01 u_xx`` on [0, 1] with ``u(0) = -1`` and ``u(1) = +1`` on 48 nodes, from
``u0 = -1 + 2x + sum_{m=1..3} c_m sin(m pi x)``, solved by backward Euler with
``dt = 8e-4`` (``nbgrad.datasets.heat_trajectories``). The model learns one step of
``K = 50`` solver steps, ``u(t) -> u(t + K dt)`` (t grows by 0.04; one solver step moves
the state by about 1e-4, too little to learn), from all pairs ``(u(t_i), u(t_i + K dt))``
with ``t_i`` every 10 solver steps of 32 training trajectories. It is then rolled out
autoregressively over 50 of its steps (t from 0 to 2, where the sine modes have decayed
to 82%, 45% and 17%) on 8 held-out trajectories, the boundary values set after every
step as athena does.

The model is one ``nn.LNO(48 -> 48, 16 modes)`` (learned poles and residues, plus the
dense bypass ``W u + b``), Adam (lr 1e-2, batch 64, cosine annealing) on the one-step
MSE. One layer, without an activation, because a backward-Euler step is affine in ``u``:
the layer can represent it exactly, and it is what stays stable when rolled out.
athena's two-layer ReLU network (``--hidden 32``: LNO 48 -> 32 - ReLU - LNO 32 -> 48)
fits the training pairs far better than the held-out ones: 32 trajectories span a
3-parameter family of states, and off it the ReLU pieces extrapolate.

Metrics: the test one-step MSE, the rollout MSE over the horizon (all held-out
trajectories, steps and nodes), the same for the "persistence" forecast ``u(t) = u0``,
and athena's relative L2 error of the final rolled-out state.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

import nbgrad as nb
from nbgrad import nn
from nbgrad.data import TensorDataset
from nbgrad.datasets import heat_trajectories
from nbgrad.datasets.heat import grid_points
from nbgrad.examples import _common
from nbgrad.examples._common import losses_axis, metric_table, relative_l2
from nbgrad.examples._heat import mse, predict

F32 = np.float32
DT = 8e-4  # the solver's time step
LEFT, RIGHT = -1.0, 1.0  # the boundary values

#: the full run and the reduced one (tests, notebook)
SIZES = {"full": dict(n_train=32, n_test=8, epochs=10),
         "quick": dict(n_train=12, n_test=4, epochs=4)}


def load_data(n_train: int = 32, n_test: int = 8, k: int = 50, horizon: int = 50,
              pair_every: int = 10, grid: int = 48, seed: int = 0) -> dict:
    """``n_train + n_test`` trajectories of ``k * horizon`` solver steps (float32; the
    first ``n_train`` for training). Training and test one-step pairs ``x -> y`` are
    ``(u(t_i), u(t_i + k dt))`` with ``t_i`` every ``pair_every`` solver steps
    (``[pairs, grid]``); ``test_states`` ``[n_test, horizon + 1, grid]`` are the test
    trajectories every ``k`` steps (the rollout's truth, initial state first)."""
    steps = k * horizon
    traj = heat_trajectories(n_train + n_test, steps, grid, dt=DT, left=LEFT, right=RIGHT,
                             seed=seed).astype(F32)
    starts = np.arange(0, steps - k + 1, pair_every)

    def pairs(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return t[:, starts].reshape(-1, grid), t[:, starts + k].reshape(-1, grid)

    (x_train, y_train), (x_test, y_test) = pairs(traj[:n_train]), pairs(traj[n_train:])
    return {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test,
            "test_states": np.ascontiguousarray(traj[n_train:, ::k]),
            "x": grid_points(grid), "k": k, "dt": DT}


def build_model(grid: int = 48, modes: int = 16, hidden: int = 0) -> nn.Module:
    """``nn.LNO(grid -> grid, modes)``; with ``hidden > 0`` athena's network,
    LNO(grid -> hidden) - ReLU - LNO(hidden -> grid)."""
    if hidden == 0:
        return nn.LNO(grid, grid, modes)
    return nn.Sequential(nn.LNO(grid, hidden, modes), nn.ReLU(), nn.LNO(hidden, grid, modes))


def rollout(model: nn.Module, u0: np.ndarray, steps: int) -> np.ndarray:
    """``steps`` autoregressive model steps from ``u0`` ``[B, grid]``, the boundary
    values set after each; ``[B, steps + 1, grid]`` with ``u0`` first."""
    states = [u0]
    for _ in range(steps):
        u = predict(model, states[-1])
        u[:, 0], u[:, -1] = LEFT, RIGHT
        states.append(u)
    return np.stack(states, axis=1)


def rollout_errors(model: nn.Module, data: dict) -> tuple[np.ndarray, np.ndarray]:
    """The rolled-out test trajectories and their squared errors (float64) over the
    horizon, all steps after the initial state."""
    truth = data["test_states"]
    states = rollout(model, truth[:, 0], truth.shape[1] - 1)
    return states, (states[:, 1:].astype(np.float64) - truth[:, 1:]) ** 2


def one_step_mse(model: nn.Module, data: dict) -> float:
    """The MSE of one model step on the test pairs."""
    return mse(predict(model, data["x_test"]), data["y_test"])


def evaluate(model: nn.Module, data: dict) -> dict:
    """The test one-step MSE, the rolled-out test trajectories, their MSE over the
    horizon and per step, and the relative L2 error of the final state (athena's
    benchmark error)."""
    states, err = rollout_errors(model, data)
    return {"one_step_mse": one_step_mse(model, data),
            "rollout": states, "rollout_mse": float(err.mean()),
            "rollout_mse_per_step": err.mean(axis=(0, 2)),
            "final_relative_l2": relative_l2(states[:, -1], data["test_states"][:, -1])}


def train(n_train: int = 32, n_test: int = 8, epochs: int = 10, lr: float = 1e-2,
          batch_size: int = 64, modes: int = 16, hidden: int = 0, k: int = 50,
          horizon: int = 50, seed: int = 0, show_progress: bool = True) -> dict:
    """Train from ``nb.manual_seed(seed)`` weights with Adam, the learning rate annealed
    (cosine) to ``lr / 100`` over all steps. Returns the history: per-step losses
    (``loss``), per-epoch mean training loss (``epoch_loss``), test one-step MSE
    (``test_one_step``) and rollout MSE (``test_rollout``), ``evaluate``'s results for
    the final model, ``persistence_mse`` (the rollout MSE of keeping ``u0``), the
    ``model`` and the ``data``."""
    nb.manual_seed(seed)
    data = load_data(n_train, n_test, k, horizon, seed=seed)
    model = build_model(data["x_train"].shape[1], modes, hidden)
    loader = _common.training_loader(TensorDataset(data["x_train"], data["y_train"]),
                                     batch_size, seed, 1)
    opt, schedule = _common.adam_with_cosine(model, lr, epochs * len(loader), lr / 100)

    def describe(epochs_done: int, history: dict) -> str:
        return (f"epoch {epochs_done:3d}/{epochs}  train MSE {history['epoch_loss'][-1]:.3e}  "
                f"test one-step MSE {history['test_one_step'][-1]:.3e}  "
                f"rollout MSE {history['test_rollout'][-1]:.3e}")

    history = _common.fit(
        model, loader, opt, nb.mse_loss, epochs, scheduler=schedule,
        metrics={"test_one_step": lambda: one_step_mse(model, data),
                 "test_rollout": lambda: float(rollout_errors(model, data)[1].mean())},
        describe=describe, show_progress=show_progress, loss_format=".2e")
    history.update(evaluate(model, data), model=model, data=data)
    truth = data["test_states"]
    history["persistence_mse"] = mse(np.broadcast_to(truth[:, :1], truth[:, 1:].shape),
                                     truth[:, 1:])
    return history


def draw(history: dict, plt: Any, sample: int = 0) -> Any:
    """A figure (on ``plt``, matplotlib.pyplot) of the space-time images of one held-out
    trajectory, solver and rollout (x across, t down, one colour scale), their
    difference, and the loss curves."""
    data = history["data"]
    truth, pred = data["test_states"][sample], history["rollout"][sample]
    t_end = data["k"] * data["dt"] * (len(truth) - 1)
    extent = (0.0, 1.0, t_end, 0.0)
    scale = float(np.abs(truth).max())
    fig, axes = plt.subplots(1, 4, figsize=(16, 4),
                             gridspec_kw={"width_ratios": [1, 1, 1, 1.3]})
    for ax, image, title in ((axes[0], truth, "backward Euler (truth)"),
                             (axes[1], pred, f"LNO rollout, {len(truth) - 1} steps")):
        shown = ax.imshow(image, aspect="auto", extent=extent, cmap="RdBu_r", vmin=-scale,
                          vmax=scale, interpolation="nearest")
        ax.set(xlabel="x", ylabel="t", title=title)
    fig.colorbar(shown, ax=axes[1])
    diff = pred.astype(np.float64) - truth
    limit = max(float(np.abs(diff).max()), 1e-12)
    shown = axes[2].imshow(diff, aspect="auto", extent=extent, cmap="PuOr", vmin=-limit,
                           vmax=limit, interpolation="nearest")
    axes[2].set(xlabel="x", ylabel="t", title="rollout - truth")
    fig.colorbar(shown, ax=axes[2], format="%.0e")
    losses_axis(axes[3], history["loss"], "MSE")
    per_epoch = len(history["loss"]) // len(history["test_rollout"])
    steps = per_epoch * np.arange(1, len(history["test_rollout"]) + 1)
    axes[3].plot(steps, history["test_one_step"], "o-", ms=3, label="test one-step")
    axes[3].plot(steps, history["test_rollout"], "s-", ms=3, label="test rollout")
    axes[3].legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot(history: dict, path: str) -> None:
    """``draw``'s figure saved to ``path``."""
    _common.save_plot(lambda plt: draw(history, plt), path)


def main(argv: list[str] | None = None) -> int:
    parser = _common.command_line("lno-rollout", __doc__,
                                  "where to save the rollout vs truth images")
    parser.add_argument("--lr", type=float, default=1e-2, help="Adam's initial learning rate")
    parser.add_argument("--hidden", type=int, default=0,
                        help="0: one LNO layer; N: athena's LNO -> N - ReLU - LNO")
    args = parser.parse_args(argv)
    size = dict(SIZES["quick" if args.quick else "full"])
    if args.epochs:
        size["epochs"] = args.epochs
    start = time.perf_counter()
    history = train(**size, lr=args.lr, hidden=args.hidden, seed=args.seed,
                    show_progress=not args.no_progress)
    horizon = history["data"]["test_states"].shape[1] - 1
    print(metric_table([("epochs", size["epochs"]),
                        ("final training MSE", history["epoch_loss"][-1]),
                        ("test one-step MSE", history["one_step_mse"]),
                        (f"test rollout MSE ({horizon} steps)", history["rollout_mse"]),
                        ("rollout MSE of u0 (no model)", history["persistence_mse"]),
                        ("final-state relative L2", history["final_relative_l2"]),
                        ("seconds", round(time.perf_counter() - start, 1))]))
    plot(history, args.plot)
    return 0
