"""Tensorised Fourier neural operator on 2-D Darcy flow, the reference library's Darcy
configuration: ``python -m nbgrad.examples darcy-tfno``.

``-div(a grad u) = 1`` on the unit square (``nbgrad.datasets.darcy2d``): the model maps
the permeability ``a`` [B, 1, 16, 16] to the pressure ``u`` [B, 1, 16, 16]. The model is
neuraloperator's ``TFNO`` (``nbgrad.nn.TFNO``) as its Darcy example builds it:
n_modes (16, 16), hidden_channels 32, the grid embedding ``[a, x, y]``, lifting
3 -> 64 -> 32, four Fourier blocks with a channel-MLP each, projection 32 -> 64 -> 1
(projection_channel_ratio 2), and every spectral weight a Tucker decomposition of rank
0.42 (a core of about 0.42 of each weight's size: fewer parameters than the dense FNO).

The data go through the reference's processing: ``UnitGaussianNormalizer`` (per
channel, fitted on the training set) encodes ``a`` and ``u``; a ``DefaultDataProcessor``
encodes the inputs always, the targets while training, and decodes the model's output in
eval mode, so the test metrics are in physical units. The training loss is the relative
H1 loss ``H1Loss(d=2)`` summed over the batch (``reduction='sum'``, the reference's);
Adam (lr 8e-3, weight decay 1e-4) with ``CosineAnnealingLR(T_max=30)`` stepped once per
epoch; batches of 32. The metrics are the test relative L2 (``LpLoss(d=2, p=2)``) and
H1 (``H1Loss(d=2)``) errors per sample at the training resolution 16 and, zero-shot, at
32 (a test set ``darcy2d`` generates on the 32x32 grid; the Fourier layers take any grid).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

import nbgrad as nb
from nbgrad.data import DataLoader, DefaultDataProcessor, TensorDataset, UnitGaussianNormalizer
from nbgrad.datasets import darcy2d
from nbgrad.examples import _common
from nbgrad.nn.fno import TFNO
from nbgrad.nn.operator_losses import H1Loss, LpLoss

F32 = np.float32

#: the full run and the reduced one (tests, notebook); the test sets are
#: ``n_tests[k]`` samples at ``test_resolutions[k]``
SIZES = {
    "full": dict(n_train=1000, n_tests=(100, 50), epochs=20),
    "quick": dict(n_train=200, n_tests=(40, 20), epochs=6),
}
TEST_RESOLUTIONS = (16, 32)


def load_data(n_train: int, n_tests: tuple[int, ...] = (100, 50), train_resolution: int = 16,
              test_resolutions: tuple[int, ...] = TEST_RESOLUTIONS, seed: int = 0) -> dict:
    """Raw float32 fields ``[n, 1, res, res]`` (``a`` in {3, 12}, ``u`` in physical
    units): ``x_train``, ``y_train`` at ``train_resolution``, and under ``tests[res]`` the
    pairs ``(x, y)`` of each test resolution. The training set and the test set at the
    training resolution are disjoint samples of one ``darcy2d`` draw (seed ``seed``);
    every other resolution has its own draw (seed ``seed + 1 + k``)."""
    if len(n_tests) != len(test_resolutions):
        raise ValueError(f"darcy-tfno: n_tests {n_tests} and test_resolutions "
                         f"{test_resolutions} must have one entry each")
    n_same = sum(n for n, r in zip(n_tests, test_resolutions) if r == train_resolution)
    a, u = darcy2d(n_train + n_same, resolution=train_resolution, seed=seed)
    data: dict[str, Any] = {"x_train": a[:n_train, None].astype(F32),
                            "y_train": u[:n_train, None].astype(F32), "tests": {},
                            "train_resolution": train_resolution}
    for k, (n, res) in enumerate(zip(n_tests, test_resolutions)):
        if res == train_resolution:
            pair = (a[n_train:n_train + n], u[n_train:n_train + n])
        else:
            pair = darcy2d(n, resolution=res, seed=seed + 1 + k)
        data["tests"][res] = (pair[0][:, None].astype(F32), pair[1][:, None].astype(F32))
    return data


def build_model(n_modes: tuple[int, int] = (16, 16), hidden_channels: int = 32,
                rank: float = 0.42, implementation: str = "factorized") -> TFNO:
    """The reference's Darcy TFNO on ``a`` -> ``u`` (one channel each; the grid embedding
    adds the coordinates). ``implementation='factorized'`` contracts the spectrum with
    the Tucker factors without forming the dense weight ('reconstructed' builds it and
    mixes with it: the same function, slower at this batch)."""
    return TFNO(n_modes, 1, 1, hidden_channels, projection_channel_ratio=2,
                factorization="tucker", rank=rank, implementation=implementation)


def build_processor(data: dict, model: Any) -> DefaultDataProcessor:
    """The reference's data processor around ``model``: per-channel unit-Gaussian encoders
    of the inputs and of the targets, fitted on the training set."""
    encode_x = UnitGaussianNormalizer(dim=[0, 2, 3]).fit(data["x_train"])
    encode_y = UnitGaussianNormalizer(dim=[0, 2, 3]).fit(data["y_train"])
    return DefaultDataProcessor(encode_x, encode_y).wrap(model)


def predict(processor: DefaultDataProcessor, inputs: np.ndarray,
            batch_size: int = 50) -> np.ndarray:
    """The decoded prediction (physical units) of the processor's model on raw inputs,
    in eval mode without a graph."""
    processor.eval()
    out = []
    with nb.no_grad():
        for i in range(0, len(inputs), batch_size):
            x = inputs[i:i + batch_size]
            prediction, _ = processor(x=x, y=x)  # y unused in eval mode
            out.append(prediction.numpy())
    processor.train()
    return np.concatenate(out)


def evaluate(processor: DefaultDataProcessor, data: dict) -> dict[str, float]:
    """Test relative L2 and H1 errors per sample (the losses summed, then divided by the
    number of samples, as the reference's evaluation) at every test resolution:
    ``{'16_l2': ..., '16_h1': ..., '32_l2': ..., ...}``."""
    l2, h1 = LpLoss(d=2, p=2), H1Loss(d=2)
    metrics = {}
    for res, (x, y) in data["tests"].items():
        prediction = predict(processor, x)
        metrics[f"{res}_l2"] = l2(prediction, y).item() / len(y)
        metrics[f"{res}_h1"] = h1(prediction, y).item() / len(y)
    return metrics


def train(n_train: int = 1000, n_tests: tuple[int, ...] = (100, 50), epochs: int = 20,
          batch_size: int = 32, lr: float = 8e-3, weight_decay: float = 1e-4,
          t_max: int = 30, rank: float = 0.42, implementation: str = "factorized",
          seed: int = 0, show_progress: bool = True) -> dict:
    """Train the TFNO from ``nb.manual_seed(seed)`` weights on the H1 loss; returns the
    history: per-step losses (``loss``, summed over each batch), per-epoch training H1
    per sample (``epoch_loss``), the metrics of ``evaluate`` after every epoch (under
    their names), seconds per epoch (``epoch_seconds``), the ``processor`` (its
    ``model``) and the ``data``."""
    nb.manual_seed(seed)
    data = load_data(n_train, tuple(n_tests), seed=seed)
    model = build_model(rank=rank, implementation=implementation)
    processor = build_processor(data, model)
    loader = DataLoader(TensorDataset(data["x_train"], data["y_train"]),
                        batch_size=batch_size, shuffle=True, seed=seed)
    optimizer = nb.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    # the reference's Trainer steps its scheduler once per epoch
    scheduler = nb.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=t_max)
    h1 = H1Loss(d=2)
    history: dict[str, Any] = {"loss": [], "epoch_loss": [], "epoch_seconds": []}
    bar = _common.progress(epochs * len(loader), show_progress)
    for epoch in range(epochs):
        start = time.perf_counter()
        processor.train()
        losses = []
        for x, y in _common.start_epoch(loader, epoch):
            output, batch = processor(x=x, y=y)  # encoded x in, encoded y to compare
            loss = h1(output, batch["y"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            _common.advance(bar, h1=f"{losses[-1] / len(x):.4f}")
        scheduler.step()
        history["epoch_seconds"].append(time.perf_counter() - start)
        history["loss"] += losses
        history["epoch_loss"].append(float(np.sum(losses)) / n_train)
        for name, value in evaluate(processor, data).items():
            history.setdefault(name, []).append(value)
        _common.report(bar, f"epoch {epoch + 1:3d}/{epochs}  train H1 "
                            f"{history['epoch_loss'][-1]:.4f}  "
                       + "  ".join(f"test {r} L2 {history[f'{r}_l2'][-1]:.4f} "
                                   f"H1 {history[f'{r}_h1'][-1]:.4f}" for r in data["tests"]))
    if bar is not None:
        bar.close()
    history.update(processor=processor, model=model, data=data)
    return history


def figure(plt: Any, history: dict, sample: int = 0) -> Any:
    """Input, truth, prediction and error of test sample ``sample`` at each test
    resolution (one row each), and the training and test losses."""
    tests = history["data"]["tests"]
    fig, axes = plt.subplots(len(tests), 5, figsize=(18, 3.2 * len(tests)), squeeze=False)
    for row, (res, (x, y)) in zip(axes, tests.items()):
        prediction = predict(history["processor"], x[sample:sample + 1])[0, 0]
        truth = y[sample, 0]
        limits = dict(vmin=truth.min(), vmax=truth.max())
        # axis 1 of the fields is x: transposed so that x runs left to right
        for ax, field, title, kw in ((row[0], x[sample, 0], f"permeability a ({res}x{res})",
                                      {}),
                                     (row[1], truth, "u (truth)", limits),
                                     (row[2], prediction, "u (TFNO)", limits),
                                     (row[3], prediction - truth, "error", {})):
            shown = ax.imshow(field.T, origin="lower", extent=(0, 1, 0, 1), **kw)
            ax.set_title(title)
            fig.colorbar(shown, ax=ax, fraction=0.046)
        row[4].set_axis_off()
    ax = axes[0, 4]
    ax.set_axis_on()
    epochs = np.arange(1, len(history["epoch_loss"]) + 1)
    ax.plot(epochs, history["epoch_loss"], "o-", label="train H1")
    for res in tests:
        ax.plot(epochs, history[f"{res}_l2"], "s--", label=f"test L2, {res}")
        ax.plot(epochs, history[f"{res}_h1"], "^:", label=f"test H1, {res}")
    ax.set(xlabel="epoch", ylabel="relative error", yscale="log")
    ax.legend(fontsize=7)
    return fig


def plot(history: dict, path: str, sample: int = 0) -> None:
    """``figure`` saved to ``path``."""
    _common.save_plot(lambda plt: figure(plt, history, sample), path)


def main(argv: list[str] | None = None) -> int:
    parser = _common.command_line("darcy-tfno", __doc__)
    parser.add_argument("--lr", type=float, default=8e-3, help="Adam's initial learning rate")
    parser.add_argument("--batch-size", type=int, default=32, help="samples per step")
    parser.add_argument("--t-max", type=int, default=30,
                        help="CosineAnnealingLR's T_max, in epochs")
    parser.add_argument("--implementation", choices=("reconstructed", "factorized"),
                        default="factorized", help="how the Tucker weights are applied")
    args = parser.parse_args(argv)
    size = dict(SIZES["quick" if args.quick else "full"])
    if args.epochs is not None:
        size["epochs"] = args.epochs
    start = time.perf_counter()
    history = train(**size, batch_size=args.batch_size, lr=args.lr, t_max=args.t_max,
                    implementation=args.implementation, seed=args.seed,
                    show_progress=not args.no_progress)
    rows: list[tuple[str, Any]] = [("epochs", size["epochs"]),
                                   ("train samples", size["n_train"]),
                                   ("parameters", sum(p.numel() for p in
                                                      history["model"].parameters())),
                                   ("final training H1", history["epoch_loss"][-1])]
    for res in history["data"]["tests"]:
        rows += [(f"test relative L2 ({res}x{res})", history[f"{res}_l2"][-1]),
                 (f"test relative H1 ({res}x{res})", history[f"{res}_h1"][-1])]
    rows += [("seconds per epoch", round(float(np.mean(history["epoch_seconds"])), 2)),
             ("seconds", round(time.perf_counter() - start, 1))]
    print(_common.metric_table(rows))
    plot(history, args.plot)
    return 0
