"""Fourier neural operator on 1-D viscous Burgers: ``python -m nbgrad.examples burgers-fno``.

``u_t + u u_x = nu u_xx`` on the periodic [0, 1) with ``nu = 0.1``
(``nbgrad.datasets.burgers1d``, 128 grid points, FNO's Burgers benchmark): the model maps
the initial state ``u0`` to the state ``u(t = 1)``. The input is channels first,
``[u0, x]`` of shape ``[B, 2, N]``; the model is neuraloperator's ``FNO``
(``nbgrad.nn.fno.FNO``) configured as the paper's 1-D FNO (Li et al. 2021): the grid is
already in the input (no positional embedding), lift 2 -> 128 -> 64, four Fourier layers
v <- sigma(K v + W v) keeping 16 rfft bins (n_modes 30) and no channel-MLP inside the
blocks, projection 64 -> 128 -> 1, no padding (the problem is periodic). Adam (lr 1e-3,
weight decay 1e-4) with cosine annealing on the relative L2 loss; the metric is the test
relative L2 error ``mean ||u_pred - u|| / ||u||``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import nbgrad as nb
from nbgrad.datasets import burgers1d
from nbgrad.examples import _common
from nbgrad.examples._common import field_example_main, losses_axis
from nbgrad.examples.darcy_fno import fit, predict
from nbgrad.nn.fno import FNO

F32 = np.float32

#: the full run and the reduced one (tests, notebook)
SIZES = {
    "full": dict(n_train=1000, n_test=200, epochs=40),
    "quick": dict(n_train=100, n_test=40, epochs=10),
}


def load_data(n_train: int, n_test: int, resolution: int = 128, nu: float = 0.1,
              seed: int = 0) -> dict:
    """Train and test inputs ``[n, 2, res]`` (channels ``[u0, x]``; ``u0`` divided by
    the training set's standard deviation, ``x_i = i / res``) and targets ``[n, 1, res]``
    (``u(t = 1)`` divided by the training set's standard deviation, ``u_scale``),
    float32."""
    u0, u_t = burgers1d(n_train + n_test, resolution=resolution, nu=nu, seed=seed)
    u0_scale, u_scale = u0[:n_train].std(), u_t[:n_train].std()
    x = np.broadcast_to(np.arange(resolution) / resolution, u0.shape)
    inputs = np.stack([u0 / u0_scale, x], 1).astype(F32)
    targets = (u_t / u_scale)[:, None].astype(F32)
    return {"x_train": inputs[:n_train], "y_train": targets[:n_train],
            "x_test": inputs[n_train:], "y_test": targets[n_train:],
            "u0_scale": float(u0_scale), "u_scale": float(u_scale), "nu": nu}


def build_model(hidden_channels: int = 64, n_modes: int = 30, n_layers: int = 4) -> FNO:
    """The paper's 1-D FNO on ``[u0, x]`` -> ``u(t = 1)`` (n_modes 30: 30 // 2 + 1 = 16
    rfft bins; without a channel-MLP in the blocks, the reference applies sigma twice
    between blocks)."""
    return FNO((n_modes,), 2, 1, hidden_channels, n_layers, positional_embedding=None,
               projection_channel_ratio=128 / hidden_channels, use_channel_mlp=False)


def train(n_train: int = 1000, n_test: int = 200, epochs: int = 40, batch_size: int = 20,
          lr: float = 1e-3, hidden_channels: int = 64, n_modes: int = 30, n_layers: int = 4,
          resolution: int = 128, nu: float = 0.1, seed: int = 0,
          show_progress: bool = True) -> dict:
    """Train from ``nb.manual_seed(seed)`` weights; returns the history of
    ``darcy_fno.fit``: per-step losses (``loss``), per-epoch mean training loss
    (``epoch_loss``) and test relative L2 (``test_relative_l2``), the trained ``model``
    and the ``data``."""
    nb.manual_seed(seed)
    data = load_data(n_train, n_test, resolution, nu, seed)
    model = build_model(hidden_channels, n_modes, n_layers)
    return fit(model, data, epochs, batch_size, lr, seed=seed, show_progress=show_progress)


def plot(history: dict, path: str, samples: tuple[int, ...] = (0, 1, 2)) -> None:
    """Initial state, true and predicted ``u(t = 1)`` for a few test samples (in the
    data set's units), and the training loss, saved to ``path``."""
    data = history["data"]
    x = data["x_test"][list(samples)]
    pred = predict(history["model"], x)[:, 0] * data["u_scale"]
    truth = data["y_test"][list(samples), 0] * data["u_scale"]
    grid = x[0, 1]

    def draw(plt: Any) -> Any:
        fig, axes = plt.subplots(1, len(samples) + 1, figsize=(4 * len(samples) + 4, 3.2))
        for k, ax in enumerate(axes[:-1]):
            ax.plot(grid, x[k, 0] * data["u0_scale"], color="0.6", lw=1, label="u0")
            ax.set(xlabel="x", ylabel="u0", title=f"test sample {samples[k]}")
            right = ax.twinx()  # u(t = 1) is ~50x smaller than u0 at nu = 0.1
            right.plot(grid, truth[k], "k", lw=1.5, label="u(t=1) truth")
            right.plot(grid, pred[k], "C1--", lw=1.5, label="u(t=1) FNO")
            right.set_ylabel("u(t = 1)")
            if k == 0:
                lines = ax.get_lines() + right.get_lines()
                ax.legend(lines, [line.get_label() for line in lines], fontsize=8)
        losses_axis(axes[-1], history["loss"], "relative L2 (train)")
        return fig

    _common.save_plot(draw, path)


def main(argv: list[str] | None = None) -> int:
    return field_example_main(argv, "burgers-fno", __doc__, train, plot, SIZES, batch_size=20,
                              lr=1e-3)
