"""Geometry-informed neural operator (GINO) for Poisson's equation on point clouds:
``python -m nbgrad.examples gino-poisson``.

``-Laplace u = f`` in the unit disc, ``u = 0`` on the circle
(``nbgrad.datasets.poisson_point_cloud``, manufactured solutions, so the targets are
exact). Every sample has its own random cloud of input points carrying
``[f, signed distance |p| - 1]`` and its own random query points where ``u`` is wanted.
The model is neuraloperator's ``GINO`` (``nbgrad.nn.GINO``):

    v(g_k)  = mean_{|y_j - g_k| <= r_in} kappa_in(g_k, y_j) a(y_j)   input points -> grid
    w       = FNOBlocks(lifting(v))            on a 16 x 16 latent grid on [-1, 1]^2
    u(x_i)  = projection(sum_{|g_k - x_i| <= r_out} kappa_out(x_i, g_k) w(g_k))

The geometry differs per sample, so GINO runs on one sample at a time (batch 1: its
``input_geom`` and ``output_queries`` are one cloud each); the latent grid is shared.
Each GNO keeps its neighbour graphs in a cache sized to hold every sample's, so the
neighbour search runs once per sample, not once per step.

``f`` and the signed distance (per channel) and ``u`` (one scalar) are encoded by
``UnitGaussianNormalizer``s fitted on the training set; the training loss is the relative
L2 error ``||u_hat - u|| / ||u||`` of the encoded solution at the queries (``LpLoss``),
Adam with cosine annealing per step. The metric is the relative L2 error of the decoded
prediction (physical units) on the test samples, averaged over samples.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

import nbgrad as nb
from nbgrad.data import UnitGaussianNormalizer
from nbgrad.datasets.point_cloud import poisson_point_cloud
from nbgrad.examples import _common
from nbgrad.nn.gino import GINO
from nbgrad.nn.operator_losses import LpLoss

F32 = np.float32

#: the full run and the reduced one (tests, notebook)
SIZES = {
    "full": dict(n_train=200, n_test=50, n_points=512, n_queries=256, epochs=20),
    "quick": dict(n_train=40, n_test=10, n_points=256, n_queries=128, epochs=8),
}


def latent_grid(shape: tuple[int, int] = (16, 16), low: float = -1.0,
                high: float = 1.0) -> np.ndarray:
    """The latent grid ``[n1, n2, 2]`` of ``shape`` points on ``[low, high]^2`` (the
    bounding box of the unit disc), axis 0 along x, axis 1 along y."""
    axes = [np.linspace(low, high, n) for n in shape]
    return np.stack(np.meshgrid(*axes, indexing="ij"), -1).astype(F32)


def load_data(n_train: int, n_test: int, n_points: int = 512, n_queries: int = 256,
              seed: int = 0) -> dict:
    """Float32 arrays of one ``poisson_point_cloud`` draw (seed ``seed``), the first
    ``n_train`` samples for training and the next ``n_test`` for testing: ``points_*``
    [n, n_points, 2], ``features_*`` [n, n_points, 2] (f, signed distance),
    ``queries_*`` [n, n_queries, 2], ``u_*`` [n, n_queries, 1]."""
    raw = poisson_point_cloud(n_train + n_test, n_points, n_queries, seed=seed, dim=2)
    data = {}
    for part, chunk in (("train", slice(0, n_train)), ("test", slice(n_train, None))):
        for key in ("points", "features", "queries", "u"):
            data[f"{key}_{part}"] = raw[key][chunk].astype(F32)
    return data


def build_model(fno_n_modes: tuple[int, int] = (8, 8), fno_hidden_channels: int = 24,
                in_gno_radius: float = 0.2, out_gno_radius: float = 0.2) -> GINO:
    """A small GINO for 2-D clouds: 2 input channels (f, signed distance) -> 1 (u); the
    input GNO's 'linear' kernel (2 channels, multiplying the features element-wise, so
    fno_in_channels=2) averages them onto the grid, lifting to
    fno_hidden_channels, 4 Fourier layers with fno_n_modes, the output GNO and a
    projection of width 2 * fno_hidden_channels. The GNO kernel MLPs are narrower than
    the reference's 3-D car defaults ([80, 80, 80] and [512, 256]): [32, 32] and [64, 64]."""
    return GINO(2, 1, gno_coord_dim=2, in_gno_radius=in_gno_radius,
                out_gno_radius=out_gno_radius, fno_in_channels=2, fno_n_modes=fno_n_modes,
                fno_hidden_channels=fno_hidden_channels, fno_n_layers=4,
                gno_embed_channels=16, in_gno_channel_mlp_hidden_layers=(32, 32),
                out_gno_channel_mlp_hidden_layers=(64, 64), projection_channel_ratio=2)


def fit_normalizers(data: dict) -> tuple[UnitGaussianNormalizer, UnitGaussianNormalizer]:
    """The encoders of the features (per channel: mean and std over samples and points)
    and of u (one mean and std), fitted on the training set."""
    encode_x = UnitGaussianNormalizer(dim=[0, 1]).fit(data["features_train"])
    encode_u = UnitGaussianNormalizer().fit(data["u_train"])
    return encode_x, encode_u


def predict(model: GINO, encode_x: UnitGaussianNormalizer,
            encode_u: UnitGaussianNormalizer, data: dict, part: str = "test") -> np.ndarray:
    """The decoded prediction of u [n, n_queries, 1] (physical units) on the samples of
    ``part``, one sample at a time, in eval mode without a graph."""
    grid = latent_grid()[None]
    model.eval()
    out = []
    with nb.no_grad():
        for i in range(len(data[f"u_{part}"])):
            x = encode_x.transform(data[f"features_{part}"][i][None])
            prediction = model(data[f"points_{part}"][i][None], grid,
                               data[f"queries_{part}"][i][None], x=x)
            out.append(encode_u.inverse_transform(prediction.numpy())[0])
    model.train()
    return np.stack(out)


def train(n_train: int = 200, n_test: int = 50, n_points: int = 512, n_queries: int = 256,
          epochs: int = 10, lr: float = 3e-3, seed: int = 0,
          show_progress: bool = True) -> dict:
    """Train the GINO from ``nb.manual_seed(seed)`` weights, one sample per step in a
    seeded random order per epoch; returns the history: per-step losses (``loss``, the
    relative L2 of the encoded u), per-epoch mean training loss (``epoch_loss``), the
    test relative L2 of the decoded u after every epoch (``test_relative_l2``), seconds
    per epoch (``epoch_seconds``), the ``model``, the normalisers (``encode_x``,
    ``encode_u``) and the ``data``."""
    nb.manual_seed(seed)
    data = load_data(n_train, n_test, n_points, n_queries, seed=seed)
    encode_x, encode_u = fit_normalizers(data)
    model = build_model()
    # one graph per sample geometry and GNO: keep them all (train and test) across epochs
    for gno in (model.gno_in, model.gno_out):
        gno.graph_cache_size = n_train + n_test
    optimizer, scheduler = _common.adam_with_cosine(model, lr, epochs * n_train)
    loss_fn = LpLoss(d=1, p=2)   # over the queries of [1, 1, n_queries]
    grid = latent_grid()[None]
    x_train = encode_x.transform(data["features_train"])
    u_train = encode_u.transform(data["u_train"])
    order_rng = np.random.default_rng(seed)
    history: dict[str, Any] = {"loss": [], "epoch_loss": [], "test_relative_l2": [],
                               "epoch_seconds": []}
    bar = _common.progress(epochs * n_train, show_progress)
    for epoch in range(epochs):
        start = time.perf_counter()
        losses = []
        for i in order_rng.permutation(n_train):
            out = model(data["points_train"][i][None], grid, data["queries_train"][i][None],
                        x=x_train[i][None])
            loss = loss_fn(out.permute(0, 2, 1), nb.tensor(u_train[i][None].transpose(0, 2, 1)))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            losses.append(loss.item())
            _common.advance(bar, loss=f"{losses[-1]:.4f}")
        history["epoch_seconds"].append(time.perf_counter() - start)
        history["loss"] += losses
        history["epoch_loss"].append(float(np.mean(losses)))
        prediction = predict(model, encode_x, encode_u, data)
        history["test_relative_l2"].append(_common.relative_l2(prediction, data["u_test"]))
        _common.report(bar, f"epoch {epoch + 1:3d}/{epochs}  train rel L2 (encoded) "
                            f"{history['epoch_loss'][-1]:.4f}  test rel L2 "
                            f"{history['test_relative_l2'][-1]:.4f}")
    if bar is not None:
        bar.close()
    history.update(model=model, encode_x=encode_x, encode_u=encode_u, data=data)
    return history


def figure(plt: Any, history: dict, sample: int = 0) -> Any:
    """Test sample ``sample``: its input cloud coloured by f, u at the queries (truth and
    GINO's prediction on one colour scale), the pointwise error, and the loss curves."""
    data = history["data"]
    prediction = predict(history["model"], history["encode_x"], history["encode_u"],
                         {k: v[sample:sample + 1] for k, v in data.items()})[0, :, 0]
    truth = data["u_test"][sample, :, 0]
    points, queries = data["points_test"][sample], data["queries_test"][sample]
    fig, axes = plt.subplots(1, 5, figsize=(20, 3.6))
    limits = dict(vmin=truth.min(), vmax=truth.max())
    error = prediction - truth
    bound = float(np.abs(error).max())
    for ax, xy, values, title, kw in (
            (axes[0], points, data["features_test"][sample, :, 0], "f at the input points",
             {}),
            (axes[1], queries, truth, "u at the queries (truth)", limits),
            (axes[2], queries, prediction, "u (GINO)", limits),
            (axes[3], queries, error, "error", dict(vmin=-bound, vmax=bound,
                                                    cmap="RdBu_r"))):
        shown = ax.scatter(xy[:, 0], xy[:, 1], c=values, s=8, **kw)
        ax.add_patch(plt.Circle((0, 0), 1.0, fill=False, lw=0.6, color="k"))
        ax.set(title=title, aspect="equal", xlim=(-1.05, 1.05), ylim=(-1.05, 1.05))
        fig.colorbar(shown, ax=ax, fraction=0.046)
    steps_per_epoch = len(history["loss"]) // len(history["epoch_loss"])
    ax = axes[4]
    ax.plot(np.arange(1, len(history["loss"]) + 1) / steps_per_epoch, history["loss"],
            lw=0.5, alpha=0.6, label="train (encoded, per step)")
    epochs = np.arange(1, len(history["epoch_loss"]) + 1)
    ax.plot(epochs, history["test_relative_l2"], "o-", label="test")
    ax.set(xlabel="epoch", ylabel="relative L2", yscale="log")
    ax.legend(fontsize=7)
    return fig


def plot(history: dict, path: str, sample: int = 0) -> None:
    """``figure`` saved to ``path``."""
    _common.save_plot(lambda plt: figure(plt, history, sample), path)


def main(argv: list[str] | None = None) -> int:
    parser = _common.command_line("gino-poisson", __doc__)
    parser.add_argument("--lr", type=float, default=3e-3, help="Adam's initial learning rate")
    args = parser.parse_args(argv)
    size = dict(SIZES["quick" if args.quick else "full"])
    if args.epochs is not None:
        size["epochs"] = args.epochs
    start = time.perf_counter()
    history = train(**size, lr=args.lr, seed=args.seed, show_progress=not args.no_progress)
    print(_common.metric_table([
        ("epochs", size["epochs"]), ("train samples", size["n_train"]),
        ("points / queries per sample", f"{size['n_points']} / {size['n_queries']}"),
        ("parameters", sum(p.numel() for p in history["model"].parameters())),
        ("final training relative L2 (encoded)", history["epoch_loss"][-1]),
        ("test relative L2", history["test_relative_l2"][-1]),
        ("seconds per epoch", round(float(np.mean(history["epoch_seconds"])), 2)),
        ("seconds", round(time.perf_counter() - start, 1))]))
    plot(history, args.plot)
    return 0
