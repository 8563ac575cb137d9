"""Fourier neural operator on 2-D Darcy flow: ``python -m nbgrad.examples darcy-fno``.

``-div(a grad u) = 1`` on the unit square (``nbgrad.datasets.darcy2d``, 16x16 grid): the
model maps the permeability ``a`` to the pressure ``u``. The input is channels first,
``[a, x, y]`` of shape ``[B, 3, H, W]``; the model is neuraloperator's ``FNO``
(``nbgrad.nn.fno.FNO``) configured as the original paper's (Li et al. 2021): the grid is
already in the input (no positional embedding), lift 3 -> 64 -> 32, four Fourier layers
v <- sigma(K v + W v) with n_modes (16, 14) (frequencies -8 .. 7 along x, the first 8
rfft bins along y) and no channel-MLP inside the blocks, projection 32 -> 128 -> 1, the
grid zero-padded by a quarter on each side because Darcy flow is not periodic. Adam
(lr 3e-3, weight decay 1e-4) with cosine annealing on the relative L2 loss; the metric is
the test relative L2 error ``mean ||u_pred - u|| / ||u||``, the FNO papers' (and the
reference library's).

The training here (``fit``, ``relative_l2_loss``) is shared with ``burgers-fno``: it
works on any channels-first model and data.
"""

from __future__ import annotations

import numpy as np

import nbgrad as nb
from nbgrad import nn
from nbgrad.data import TensorDataset
from nbgrad.datasets import darcy2d
from nbgrad.examples import _common
from nbgrad.examples._common import field_example_main, predict
from nbgrad.nn.fno import FNO

F32 = np.float32

#: the full run and the reduced one (tests, notebook)
SIZES = {
    "full": dict(n_train=1000, n_test=200, epochs=20),
    "quick": dict(n_train=100, n_test=40, epochs=8),
}


def load_data(n_train: int, n_test: int, resolution: int = 16, seed: int = 0) -> dict:
    """Train and test inputs ``[n, 3, res, res]`` (channels ``[a, x, y]``; ``a`` scaled to
    mean 0 and unit variance by the training set's statistics, ``(x, y)`` the grid nodes
    in [0, 1]^2) and targets ``[n, 1, res, res]`` (``u`` divided by the training set's
    standard deviation, ``u_scale``), float32."""
    a, u = darcy2d(n_train + n_test, resolution=resolution, seed=seed)
    a_mean, a_std = a[:n_train].mean(), a[:n_train].std()
    u_scale = u[:n_train].std()
    axis = np.linspace(0.0, 1.0, resolution)
    xy = np.stack(np.meshgrid(axis, axis, indexing="ij"))  # [2, res, res], axis 1 = x
    xy = np.broadcast_to(xy, (len(a),) + xy.shape)
    inputs = np.concatenate([((a - a_mean) / a_std)[:, None], xy], 1).astype(F32)
    targets = (u / u_scale)[:, None].astype(F32)
    return {"x_train": inputs[:n_train], "y_train": targets[:n_train],
            "x_test": inputs[n_train:], "y_test": targets[n_train:],
            "u_scale": float(u_scale), "resolution": resolution}


def build_model(hidden_channels: int = 32, n_modes: tuple[int, int] = (16, 14),
                n_layers: int = 4, domain_padding: float = 0.25) -> FNO:
    """The paper's 2-D FNO on ``[a, x, y]`` -> ``u`` (projection to 128 channels; without
    a channel-MLP in the blocks, the reference applies sigma twice between blocks)."""
    return FNO(n_modes, 3, 1, hidden_channels, n_layers, positional_embedding=None,
               projection_channel_ratio=128 / hidden_channels, use_channel_mlp=False,
               domain_padding=domain_padding)


def relative_l2_loss(prediction: nb.Tensor, target: nb.Tensor) -> nb.Tensor:
    """mean over the batch (dim 0) of ``||prediction - target|| / ||target||``, the norms
    over all other dims."""
    dims = tuple(range(1, target.ndim))
    return (nb.norm(prediction - target, dim=dims) / nb.norm(target, dim=dims)).mean()


def fit(model: nn.Module, data: dict, epochs: int, batch_size: int = 20, lr: float = 1e-3,
        weight_decay: float = 1e-4, seed: int = 0, show_progress: bool = True) -> dict:
    """Train ``model`` on ``data`` (``x_train``, ``y_train``, ``x_test``, ``y_test``) with
    Adam and cosine annealing over all steps (``_common.fit``); returns the history:
    per-step losses (``loss``), per-epoch mean training loss (``epoch_loss``) and test
    relative L2 (``test_relative_l2``), the ``model`` and the ``data``."""
    loader = _common.training_loader(TensorDataset(data["x_train"], data["y_train"]),
                                     batch_size, seed, 1)
    opt, schedule = _common.adam_with_cosine(model, lr, epochs * len(loader),
                                             weight_decay=weight_decay)
    return _common.fit_field_map(model, data, loader, opt, schedule, relative_l2_loss, epochs,
                                 show_progress)


def train(n_train: int = 1000, n_test: int = 200, epochs: int = 20, batch_size: int = 20,
          lr: float = 3e-3, hidden_channels: int = 32, n_modes: tuple[int, int] = (16, 14),
          n_layers: int = 4, domain_padding: float = 0.25, resolution: int = 16, seed: int = 0,
          show_progress: bool = True) -> dict:
    """Train from ``nb.manual_seed(seed)`` weights; returns ``fit``'s history."""
    nb.manual_seed(seed)
    data = load_data(n_train, n_test, resolution, seed)
    model = build_model(hidden_channels, n_modes, n_layers, domain_padding)
    return fit(model, data, epochs, batch_size, lr, seed=seed, show_progress=show_progress)


def plot(history: dict, path: str, sample: int = 0) -> None:
    """Permeability, true and predicted pressure, their difference for one test sample,
    and the training loss, saved to ``path``."""
    data = history["data"]
    x, y = data["x_test"][sample:sample + 1], data["y_test"][sample, 0]
    pred = predict(history["model"], x)[0, 0]
    panels = [(x[0, 0], "permeability a (scaled)"), (y, "u (truth)"), (pred, "u (FNO)"),
              (pred - y, "error")]
    # axis 1 is x: transpose so that x runs left to right
    _common.save_plot(lambda plt: _common.field_panels(plt, [(f.T, t) for f, t in panels],
                                               history["loss"]), path)


def main(argv: list[str] | None = None) -> int:
    return field_example_main(argv, "darcy-fno", __doc__, train, plot, SIZES, batch_size=20,
                              lr=3e-3)
