"""Graph neural operator regression on a chain: ``python -m nbgrad.examples gno-regression``.

The reference library's GNO example: 20 points ``x_i`` on [0, 2 pi] joined into a chain
(``nbgrad.datasets.chain_graph``: edges ``i -> i+1`` and ``i+1 -> i``), targets
``[sin x_i, cos x_i]``. Each node carries its scaled position ``s = x / pi - 1`` in
[-1, 1]; lift 1 -> 16, two ``nn.GNO`` layers whose kernel MLP sees the pair of end points
``[s_i, s_j]`` (a chain's offsets ``s_j - s_i`` are all +-h, so they could not tell the
nodes apart), tanh between, projection 16 -> 2. Full-batch Adam with cosine annealing on
the mean squared error, the metric the reference library prints. It runs in float64,
as ``python -m nbgrad demo`` (which trains this model) does: on 20 points float32 saves
nothing, and a user who ran the demo finds every kernel compiled (``--dtype float32``
compiles the float32 ones).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

import nbgrad as nb
from nbgrad import nn
from nbgrad.datasets import chain_graph
from nbgrad.examples import _common
from nbgrad.examples._common import advance, losses_axis, metric_table, progress, report

#: the example's precision, the demo's (see the module docstring)
DTYPE = np.float64

#: the full run and the reduced one (tests, notebook)
SIZES = {"full": dict(epochs=1000), "quick": dict(epochs=200)}


class ChainGNO(nn.Module):
    """lift -> GNO -> tanh -> GNO -> tanh -> projection on node features ``h[N, 1]``
    over ``graph``, the kernels seeing the end points' positions ``[s_i, s_j]``."""

    def __init__(self, width: int = 16, kernel_hidden: int = 16) -> None:
        super().__init__()
        self.lift = nn.Linear(1, width)
        self.gno1 = nn.GNO(width, width, kernel_hidden, edge_features="pair", coord_dim=1)
        self.gno2 = nn.GNO(width, width, kernel_hidden, edge_features="pair", coord_dim=1)
        self.project = nn.Linear(width, 2)

    def forward(self, s: nb.Tensor, graph: nb.Graph) -> nb.Tensor:
        h = self.lift(s)
        h = nb.tanh(self.gno1(h, graph, s))
        h = nb.tanh(self.gno2(h, graph, s))
        return self.project(h)


def load_data(n: int = 20, dtype: type = DTYPE) -> dict:
    """The chain: scaled positions ``s[n, 1]`` (the node features and the kernel's
    positions), the points ``x`` on [0, 2 pi], the graph and targets ``[n, 2]``."""
    x, graph, targets = chain_graph(n)
    s = (x / np.pi - 1.0).astype(dtype)
    return {"s": nb.tensor(s), "x": x[:, 0], "graph": graph,
            "y": nb.tensor(targets.astype(dtype))}


def train(epochs: int = 1000, lr: float = 1e-2, width: int = 16, kernel_hidden: int = 16,
          n: int = 20, seed: int = 0, show_progress: bool = True, dtype: type = DTYPE,
          on_first_loss: Callable[[nb.Tensor], None] | None = None) -> dict:
    """Full-batch training from ``nb.manual_seed(seed)`` weights (one step per epoch) in
    ``dtype``; returns the history: the loss of every step (``loss``), the final ``mse``
    and ``prediction`` ``[n, 2]``, the trained ``model`` and the ``data``.
    ``on_first_loss(loss)`` is called with the first step's loss before its backward."""
    nb.manual_seed(seed)
    data = load_data(n, dtype)
    model = ChainGNO(width, kernel_hidden).to(dtype)
    opt = nb.optim.Adam(model.parameters(), lr=lr)
    schedule = nb.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs, eta_min=lr / 100)
    history: dict = {"loss": [], "model": model, "data": data}
    bar = progress(epochs, show_progress, unit="epoch")
    every = max(epochs // 10, 1)
    for epoch in range(epochs):
        loss = nb.mse_loss(model(data["s"], data["graph"]), data["y"])
        if epoch == 0 and on_first_loss is not None:
            on_first_loss(loss)
        opt.zero_grad()
        loss.backward()
        opt.step()
        schedule.step()
        history["loss"].append(loss.item())
        advance(bar, loss=f"{history['loss'][-1]:.2e}")
        if (epoch + 1) % every == 0:
            report(bar, f"epoch {epoch + 1:5d}/{epochs}  MSE {history['loss'][-1]:.3e}")
    if bar is not None:
        bar.close()
    with nb.no_grad():
        prediction = model(data["s"], data["graph"]).numpy()
    history["prediction"] = prediction
    history["mse"] = float(np.mean((prediction - data["y"].numpy()) ** 2))
    return history


def plot(history: dict, path: str) -> None:
    """sin and cos against the model's prediction at the 20 nodes, and the loss per
    step, saved to ``path``."""
    x, pred = history["data"]["x"], history["prediction"]
    fine = np.linspace(0.0, 2.0 * np.pi, 200)

    def draw(plt: Any) -> Any:
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.5))
        for k, (name, fn) in enumerate((("sin x", np.sin), ("cos x", np.cos))):
            left.plot(fine, fn(fine), lw=0.8, color=f"C{k}", label=name)
            left.plot(x, pred[:, k], "o", ms=4, color=f"C{k}", label=f"GNO, {name}")
        left.set(xlabel="x", title=f"prediction at the nodes (MSE {history['mse']:.2e})")
        left.legend(fontsize=8)
        losses_axis(right, history["loss"], "MSE")
        right.set(xlabel="epoch")
        return fig

    _common.save_plot(draw, path)


def main(argv: list[str] | None = None) -> int:
    parser = _common.command_line("gno-regression", __doc__)
    parser.add_argument("--lr", type=float, default=1e-2, help="Adam's initial learning rate")
    parser.add_argument("--dtype", choices=["float64", "float32"], default="float64",
                        help="precision of the weights and data")
    args = parser.parse_args(argv)
    epochs = args.epochs or SIZES["quick" if args.quick else "full"]["epochs"]
    start = time.perf_counter()
    history = train(epochs, args.lr, seed=args.seed, show_progress=not args.no_progress,
                    dtype=np.dtype(args.dtype).type)
    print(metric_table([("epochs", epochs),
                        ("final MSE", history["mse"]),
                        ("seconds", round(time.perf_counter() - start, 1))]))
    plot(history, args.plot)
    return 0
