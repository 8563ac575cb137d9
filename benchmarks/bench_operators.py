"""W20 neural operators: GINO forward + backward against PyTorch from the same weights.

W20: a 3-D ``nb.nn.GINO(3, 1)`` in neuraloperator's GINO defaults (gno_coord_dim=3,
in/out_gno_radius=0.033, linear GNO transforms, transformer sinusoidal embeddings with
gno_embed_channels=32, in-GNO kernel MLP 80-80-80, out-GNO kernel MLP 512-256,
fno_in_channels=3, fno_n_modes=(16, 16, 16), fno_hidden_channels=64, 4 FNO layers,
lifting ratio 2, linear fno skip, soft-gating channel-MLP skip with expansion 0.5,
projection ratio 4), float32; 3 input channels, as the
linear in-GNO transform multiplies its kernel by the features channel by channel, so
they are fno_in_channels. 10,000 input points and 10,000 queries uniform in
[0, 1]^3, the latent grid the regular 32^3 grid on [0, 1]^3, the features
standard normal. A step is the forward, the loss mean(out^2) and its backward (gradients
of every parameter). PyTorch runs the same model from the same weights
(``nbgrad.testing.torch_reference_gino.gino_forward`` on ``torch_parameters``: the graph
parts with index_select / index_add over edge lists, the spectral part with torch.fft).
Both neighbour graphs are built outside the timed region for both: nbgrad's GINO caches
them per coordinates (found in the warm-up, looked up by a hash of the coordinates in
each timed step), and PyTorch gets the same graphs as precomputed edge lists. The note
gives the largest relative difference of the two forwards.
"""

from __future__ import annotations

import numpy as np

import nbgrad as nb

from .harness import Row, paired_times

N_POINTS, N_QUERIES, GRID = 10_000, 10_000, 32
W20 = "W20 GINO fwd+bwd, 10k pts -> 32^3 latent -> 10k queries"


def _gino() -> nb.nn.GINO:
    """neuraloperator's GINO defaults, 3 input channels and one output, float32."""
    nb.manual_seed(0)
    return nb.nn.GINO(3, 1, gno_coord_dim=3, dtype=np.float32)


def _inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    axis = np.linspace(0.0, 1.0, GRID)
    latent = np.stack(np.meshgrid(axis, axis, axis, indexing="ij"), -1)
    f32 = np.float32
    return {"geom": rng.uniform(0, 1, (N_POINTS, 3)).astype(f32),
            "queries": rng.uniform(0, 1, (N_QUERIES, 3)).astype(f32),
            "latent": latent.astype(f32),
            "x": rng.standard_normal((1, N_POINTS, 3)).astype(f32)}


def _nbgrad_forward(model: nb.nn.GINO, a: dict[str, np.ndarray]) -> nb.Tensor:
    return model(a["geom"][None], a["latent"][None], a["queries"][None], x=a["x"])


def _nbgrad_step(model: nb.nn.GINO, a: dict[str, np.ndarray]) -> None:
    for q in model.parameters():
        q.grad = None
    (_nbgrad_forward(model, a) ** 2).mean().backward()


def _edges(torch, block, y: np.ndarray, x: np.ndarray) -> tuple:
    """The block's neighbour graph (rows: the points x) as int64 (row, col) tensors."""
    graph = block.neighbors(y, x)
    return torch.from_numpy(np.array(graph.row)), torch.from_numpy(np.array(graph.col))


def _torch_setup(torch, model: nb.nn.GINO, a: dict[str, np.ndarray]):
    """The PyTorch forward on the model's weights and the precomputed graphs."""
    from nbgrad.testing.torch_reference import torch_parameters
    from nbgrad.testing.torch_reference_gino import gino_forward

    flat = a["latent"].reshape(-1, 3)
    edges_in = _edges(torch, model.gno_in, a["geom"], flat)
    edges_out = _edges(torch, model.gno_out, flat, a["queries"])
    params = torch_parameters(torch, model)
    t = {k: torch.from_numpy(v) for k, v in a.items()}

    def forward():
        return gino_forward(torch, model, params, t["geom"], t["latent"], t["queries"],
                            t["x"], edges_in=edges_in, edges_out=edges_out)

    def step():
        for q in params.values():
            q.grad = None
        (forward() ** 2).mean().backward()

    return forward, step


def _max_rel_diff(ours: np.ndarray, theirs: np.ndarray) -> float:
    return float(np.abs(ours - theirs).max() / np.abs(theirs).max())


def run(torch) -> list[Row]:
    model, a = _gino(), _inputs()
    torch_step, note = None, ""
    if torch is not None:
        forward, torch_step = _torch_setup(torch, model, a)
        with torch.no_grad():
            theirs = forward().numpy()
        with nb.no_grad():
            ours = _nbgrad_forward(model, a).numpy()
        note = f"max rel diff {_max_rel_diff(ours, theirs):.1e}"
    nb_s, torch_s = paired_times(lambda: _nbgrad_step(model, a), torch_step, repeats=3,
                                 warmup=1, rounds=2)
    return [Row(W20, nb_s, torch_s, "<=0.5x", note)]
