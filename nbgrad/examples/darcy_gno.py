"""Graph neural operator on 2-D Darcy flow: ``python -m nbgrad.examples darcy-gno``.

``-div(a grad u) = 1`` on the unit square (``nbgrad.datasets.darcy2d``, 16x16 grid): the
model maps the permeability ``a`` to the pressure ``u``. Every grid node carries
``[a, x, y]``; lift 3 -> width, four ``nn.GNO`` layers (kernel MLP on ``x_j - x_i`` over
the radius graph of the grid points, point-wise linear skip, mean over the neighbours,
GELU between), projection width -> 128 -> 1. All samples share one graph, so a batch is
``h[B, N, F]`` and each edge's kernel is evaluated once per batch. Adam with a one-cycle
schedule on the relative L2 loss; the metric is the test relative L2 error
``mean ||u_pred - u|| / ||u||`` (the FNO papers' metric). Data-parallel over MPI ranks
with ``mpiexec -n 2 python -m nbgrad.examples darcy-gno --distributed``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

import nbgrad as nb
from nbgrad import nn
from nbgrad.data import TensorDataset
from nbgrad.datasets import darcy2d
from nbgrad.distributed import DistributedDataParallel
from nbgrad.examples import _common
from nbgrad.examples._common import field_example_main, init_distributed, predict

F32 = np.float32

#: the model: width, kernel MLP hidden size, GNO layers, graph radius in grid spacings
WIDTH, KERNEL_HIDDEN, DEPTH, RADIUS_CELLS = 32, 16, 4, 2.5
BATCH_SIZE = 8

#: the full run and the reduced one (tests, notebook)
SIZES = {
    "full": dict(n_train=800, n_test=200, epochs=25),
    "quick": dict(n_train=96, n_test=32, epochs=6),
}


def grid_graph(resolution: int, radius_cells: float) -> tuple[np.ndarray, nb.Graph]:
    """The ``resolution**2`` grid nodes ``(x_i, y_j)`` in [0, 1]^2 (row-major, x the
    slow axis as in ``darcy2d``) and their radius graph (self loops kept), the radius
    given in grid spacings."""
    axis = np.linspace(0.0, 1.0, resolution)
    points = np.stack(np.meshgrid(axis, axis, indexing="ij"), -1).reshape(-1, 2)
    return points.astype(F32), nb.radius_graph(points, radius_cells * (axis[1] - axis[0]))


class DarcyGNO(nn.Module):
    """lift -> ``depth`` x (GNO, GELU but after the last) -> projection MLP, on
    ``h[B, N, in_features]`` over one shared graph of the N grid points ``points``."""

    def __init__(self, points: np.ndarray, graph: nb.Graph, width: int = WIDTH,
                 kernel_hidden: int = KERNEL_HIDDEN, depth: int = DEPTH, in_features: int = 3,
                 projection: int = 128) -> None:
        super().__init__()
        self.graph = graph
        self.register_buffer("points", nb.tensor(np.asarray(points, F32)))
        self.lift = nn.Linear(in_features, width)
        self.layers = nn.ModuleList([
            nn.GNO(width, width, kernel_hidden, edge_features="relative", coord_dim=2,
                   reduce="mean") for _ in range(depth)])
        self.project = nn.Sequential(nn.Linear(width, projection), nn.GELU(),
                                     nn.Linear(projection, 1))
        self.act = nn.GELU()

    def forward(self, h: Any) -> nb.Tensor:
        h = self.lift(h)
        for k, layer in enumerate(self.layers):
            h = layer(h, self.graph, self.points)
            if k < len(self.layers) - 1:
                h = self.act(h)
        return self.project(h)[..., 0]


def torch_twin(torch: Any, model: DarcyGNO) -> Any:
    """The same model in PyTorch (``torch`` the module) with ``model``'s weights copied,
    written the way a PyTorch user writes a GNO: the kernel MLP on the ``[nnz, 2]``
    offsets builds every ``[nnz, width, width]`` kernel once per batch, the messages are
    per-edge matrix products on the gathered ``h[:, src]`` and ``index_add`` sums them
    into their target nodes. Parameter names match ``model.named_parameters()``."""
    tnn = torch.nn
    graph = model.graph
    src, dst = torch.from_numpy(graph.col.astype(np.int64)), torch.from_numpy(
        graph.row.astype(np.int64))
    points = torch.from_numpy(model.points.numpy().copy())
    rel = points[src] - points[dst]
    inv_deg = 1.0 / torch.bincount(dst, minlength=graph.num_nodes).clamp(min=1).float()

    class GNO(tnn.Module):
        def __init__(self, width: int, hidden: int) -> None:
            super().__init__()
            self.width = width
            self.bias = tnn.Parameter(torch.zeros(width))
            self.kernel_in = tnn.Linear(2, hidden)
            self.kernel_out = tnn.Linear(hidden, width * width)
            self.skip = tnn.Linear(width, width, bias=False)

        def forward(self, h: Any) -> Any:
            kappa = self.kernel_out(torch.relu(self.kernel_in(rel)))
            msg = torch.einsum("eoi,bei->beo", kappa.view(-1, self.width, self.width),
                               h[:, src])
            m = torch.zeros(h.shape[0], graph.num_nodes, self.width).index_add(1, dst, msg)
            return m * inv_deg[:, None] + self.skip(h) + self.bias

    class Twin(tnn.Module):
        def __init__(self) -> None:
            super().__init__()
            width = model.lift.out_features
            hidden = model.layers[0].kernel_hidden
            self.lift = tnn.Linear(model.lift.in_features, width)
            self.layers = tnn.ModuleList([GNO(width, hidden) for _ in model.layers])
            first, last = model.project[0], model.project[2]
            self.project = tnn.Sequential(tnn.Linear(first.in_features, first.out_features),
                                          tnn.GELU(), tnn.Linear(last.in_features, 1))
            self.act = tnn.GELU()

        def forward(self, h: Any) -> Any:
            h = self.lift(h)
            for k, layer in enumerate(self.layers):
                h = layer(h)
                if k < len(self.layers) - 1:
                    h = self.act(h)
            return self.project(h)[..., 0]

    twin = Twin()
    twin.load_state_dict({name: torch.from_numpy(p.numpy().copy())
                          for name, p in model.named_parameters()})
    return twin


def load_data(n_train: int, n_test: int, resolution: int = 16, seed: int = 0) -> dict:
    """Train and test inputs ``[n, N, 3]`` (``[a, x, y]`` per node, ``a`` scaled to mean
    0 and unit variance by the training set's statistics) and targets ``[n, N]`` (``u``
    divided by the training set's standard deviation, ``u_scale``), float32."""
    a, u = darcy2d(n_train + n_test, resolution=resolution, seed=seed)
    a = a.reshape(len(a), -1)
    u = u.reshape(len(u), -1)
    a_mean, a_std = a[:n_train].mean(), a[:n_train].std()
    u_scale = u[:n_train].std()
    points, _ = grid_graph(resolution, 1.0)
    xy = np.broadcast_to(points, (len(a),) + points.shape)
    inputs = np.concatenate([((a - a_mean) / a_std)[..., None], xy], -1).astype(F32)
    targets = (u / u_scale).astype(F32)
    return {"x_train": inputs[:n_train], "y_train": targets[:n_train],
            "x_test": inputs[n_train:], "y_test": targets[n_train:],
            "u_scale": float(u_scale), "resolution": resolution}


def relative_l2_loss(prediction: nb.Tensor, target: nb.Tensor) -> nb.Tensor:
    """mean over the batch of ``||prediction - target|| / ||target||`` (rows)."""
    diff = ((prediction - target) ** 2).sum(dim=1)
    return (diff / (target ** 2).sum(dim=1)).sqrt().mean()


def train_epoch(model: nn.Module, loader: Iterable, optimizer: Any, scheduler: Any = None,
                bar: Any = None) -> list[float]:
    """One pass over ``loader`` (inputs ``[B, N, 3]``, targets ``[B, N]``) on the
    relative L2 loss (``_common.train_epoch``)."""
    return _common.train_epoch(model, loader, optimizer, relative_l2_loss, scheduler, bar)


def build_model(resolution: int = 16, radius_cells: float = RADIUS_CELLS,
                width: int = WIDTH, kernel_hidden: int = KERNEL_HIDDEN,
                depth: int = DEPTH) -> DarcyGNO:
    """The example's model on the ``resolution x resolution`` grid (weights from the
    default generator: call ``nb.manual_seed`` first for a fixed start)."""
    points, graph = grid_graph(resolution, radius_cells)
    return DarcyGNO(points, graph, width, kernel_hidden, depth)


def train(n_train: int = 800, n_test: int = 200, epochs: int = 25,
          batch_size: int = BATCH_SIZE, lr: float = 3e-3, width: int = WIDTH,
          kernel_hidden: int = KERNEL_HIDDEN, depth: int = DEPTH,
          radius_cells: float = RADIUS_CELLS, resolution: int = 16, seed: int = 0,
          show_progress: bool = True, distributed: bool = False) -> dict:
    """Train from ``nb.manual_seed(seed)`` weights with Adam and a one-cycle schedule
    peaking at ``lr``; returns the history: per-step losses (``loss``), per-epoch mean
    training loss (``epoch_loss``) and test relative L2 (``test_relative_l2``), the
    trained ``model`` and the ``data``. With ``distributed`` (under ``mpiexec``) the
    ranks share each batch of ``batch_size`` samples and average their gradients."""
    ranks = init_distributed(distributed)
    nb.manual_seed(seed)
    data = load_data(n_train, n_test, resolution, seed)
    model = build_model(resolution, radius_cells, width, kernel_hidden, depth)
    net = DistributedDataParallel(model) if distributed else model
    loader = _common.training_loader(TensorDataset(data["x_train"], data["y_train"]),
                                     batch_size, seed, ranks)
    opt = nb.optim.Adam(model.parameters(), lr=lr)
    schedule = nb.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, epochs=epochs,
                                                steps_per_epoch=len(loader))
    return _common.fit_field_map(model, data, loader, opt, schedule, relative_l2_loss, epochs,
                                 show_progress, net)


def plot(history: dict, path: str, sample: int = 0) -> None:
    """Permeability, true and predicted pressure, their difference for one test sample,
    and the training loss, saved to ``path``."""
    data = history["data"]
    res = data["resolution"]
    x, y = data["x_test"][sample:sample + 1], data["y_test"][sample]
    pred = predict(history["model"], x)[0]
    panels = [(x[0, :, 0], "permeability a (scaled)"), (y, "u (truth)"),
              (pred, "u (GNO)"), (pred - y, "error")]
    _common.save_plot(lambda plt: _common.field_panels(
        plt, [(f.reshape(res, res).T, t) for f, t in panels], history["loss"]), path)


def main(argv: list[str] | None = None) -> int:
    return field_example_main(argv, "darcy-gno", __doc__, train, plot, SIZES,
                              batch_size=BATCH_SIZE, lr=3e-3, distributed=True,
                              lr_help="Adam's peak learning rate (one-cycle schedule)")
