"""PyTorch references of nbgrad's GINO and FNOGNO, computed from the same weights (see
``nbgrad.testing.torch_reference``); needs torch, imported by the caller.

The graph parts are written as a PyTorch user writes them efficiently: the edges as two
index tensors (``neighbourhoods``, or given precomputed), ``index_select`` to gather
point data onto the edges, the kernel MLP on all edges at once, ``index_add`` to reduce.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .torch_reference import channel_mlp, fno_block

__all__ = ["neighbourhoods", "sinusoidal_embedding", "gno_forward", "gino_forward",
           "fnogno_forward"]


def neighbourhoods(torch: Any, y: Any, x: Any, radius: float) -> tuple[Any, Any]:
    """The edges (row i, col j) with |y_j - x_i| <= radius, rows ascending, by brute
    force over all pairs (for small clouds); int64 tensors."""
    yd = np.asarray(y.detach().cpu().numpy(), np.float64)
    xd = np.asarray(x.detach().cpu().numpy(), np.float64)
    d2 = ((xd[:, None, :] - yd[None, :, :]) ** 2).sum(-1)
    row, col = np.nonzero(d2 <= radius ** 2)
    return torch.as_tensor(row), torch.as_tensor(col)


def sinusoidal_embedding(torch: Any, pts: Any, emb: Any) -> Any:
    """e(p) = [sin(w_k p_c), cos(w_k p_c)] over coordinates c and frequencies k
    (channels ordered c, k, sin/cos); w_k = 2^k pi ('nerf') or
    (1 / max_positions)^(2k / L) ('transformer'); ``emb`` None: p itself."""
    if emb is None:
        return pts
    k = torch.arange(emb.num_frequencies, dtype=torch.float64)
    if emb.embedding_type == "nerf":
        w = 2.0 ** k * math.pi
    else:
        w = (1.0 / emb.max_positions) ** (2.0 * k / emb.num_frequencies)
    phase = pts[..., None] * w.to(pts.dtype)
    return torch.stack([torch.sin(phase), torch.cos(phase)], -1).reshape(*pts.shape[:-1], -1)


def _kernel_mlp(torch: Any, h: Any, p: dict, pre: str, n_layers: int) -> Any:
    """The kernel's MLP on the last dim: Linear layers ``pre + 'fcs.{k}'``, gelu between."""
    for k in range(n_layers):
        h = torch.nn.functional.linear(h, p[f"{pre}fcs.{k}.weight"], p[f"{pre}fcs.{k}.bias"])
        if k < n_layers - 1:
            h = torch.nn.functional.gelu(h)
    return h


def gno_forward(torch: Any, block: Any, p: dict, pre: str, y: Any, x: Any, f: Any,
                edges: tuple[Any, Any] | None = None) -> Any:
    """GNOBlock: out_i = R_{j: |y_j - x_i| <= r} k([e(y_j), e(x_i)(, f_j)]) (* f_j)
    (* w(|y_j - x_i|^2)), R the mean (or, weighted, the sum) over the neighbourhood;
    ``f`` [n, c] or [B, n, c] on y (None: the kernel alone); ``edges`` (row, col) as
    ``neighbourhoods`` gives them (None: found here)."""
    row, col = edges if edges is not None else neighbourhoods(torch, y, x, block.radius)
    emb = block.pos_embedding
    h = torch.cat([sinusoidal_embedding(torch, y, emb).index_select(0, col),
                   sinusoidal_embedding(torch, x, emb).index_select(0, row)], -1)
    f_edges = None if f is None else f.index_select(f.ndim - 2, col)
    if block.transform_type.startswith("nonlinear"):
        if f_edges.ndim == 3:
            h = h.unsqueeze(0).expand(f_edges.shape[0], *h.shape)
        h = torch.cat([h, f_edges], -1)
    mlp = block.integral_transform.channel_mlp
    h = _kernel_mlp(torch, h, p, f"{pre}integral_transform.channel_mlp.", mlp.n_layers)
    if f_edges is not None and block.transform_type != "nonlinear_kernelonly":
        h = h * f_edges
    reduction = block.reduction
    if block.weighting_fn is not None:   # half_cos of the squared distance
        s = ((x.detach().index_select(0, row) - y.detach().index_select(0, col)) ** 2).sum(-1)
        h = h * (0.5 * torch.cos(math.pi * s / block.radius ** 2) + 0.5).to(h.dtype)[:, None]
        reduction = "sum"
    out = torch.zeros(*h.shape[:-2], x.shape[0], h.shape[-1], dtype=h.dtype)
    out = out.index_add(out.ndim - 2, row, h)
    if reduction == "mean":
        count = torch.bincount(row, minlength=x.shape[0]).clamp(min=1).to(h.dtype)
        out = out / count[:, None]
    return out


def _channels_first(v: Any) -> Any:
    return v.permute(0, v.ndim - 1, *range(1, v.ndim - 1))


def _points_last(v: Any) -> Any:
    """[B, C, *grid] -> [B, prod(grid), C]."""
    return v.permute(0, *range(2, v.ndim), 1).reshape(v.shape[0], -1, v.shape[1])


def _fno_blocks(torch: Any, v: Any, p: dict, blocks: Any) -> Any:
    for i in range(blocks.n_layers):
        v = fno_block(torch, v, p, blocks, i)
    return v


def gino_forward(torch: Any, model: Any, p: dict, geom: Any, latent: Any, queries: Any,
                 x: Any = None, latent_features: Any = None,
                 edges_in: tuple[Any, Any] | None = None,
                 edges_out: tuple[Any, Any] | None = None) -> Any:
    """GINO.forward: gno_in from the points ``geom`` [n, d] (features ``x`` [B, n, c] or
    None) onto the latent grid ``latent`` [*grid, d] (with ``latent_features``
    [1, *grid, c'] appended), lifting, FNOBlocks, (tanh,) gno_out from the grid to
    ``queries`` [m, d], projection: [B, m, out]. ``edges_in``/``edges_out``: the
    precomputed graphs (rows: latent points / queries)."""
    grid = latent.shape[:-1]
    flat = latent.reshape(-1, latent.shape[-1])
    v = gno_forward(torch, model.gno_in, p, "gno_in.", geom, flat, x, edges_in)
    b = 1 if x is None else x.shape[0]
    v = v.reshape(b, *grid, v.shape[-1])
    if latent_features is not None:
        v = torch.cat([v, latent_features.expand(b, *latent_features.shape[1:])], -1)
    v = channel_mlp(torch, _channels_first(v), p, "lifting.")
    v = _points_last(_fno_blocks(torch, v, p, model.fno_blocks))
    if model.out_gno_tanh in ("latent_embed", "both"):
        v = torch.tanh(v)
    out = gno_forward(torch, model.gno_out, p, "gno_out.", flat, queries, v, edges_out)
    return channel_mlp(torch, out.permute(0, 2, 1), p, "projection.").permute(0, 2, 1)


def fnogno_forward(torch: Any, model: Any, p: dict, in_p: Any, out_p: Any, f: Any,
                   edges: tuple[Any, Any] | None = None) -> Any:
    """FNOGNO.forward: lifting([f, in_p]) on the grid ``in_p`` [*grid, d], FNOBlocks, a
    GNO from the grid to ``out_p`` [m, d], projection; ``f`` [*grid, c] or batched
    [B, *grid, c]."""
    batched = f.ndim == in_p.ndim + 1
    fb = f if batched else f[None]
    v = torch.cat([fb, in_p[None].expand(fb.shape[0], *in_p.shape)], -1)
    v = channel_mlp(torch, _channels_first(v), p, "lifting.")
    v = _points_last(_fno_blocks(torch, v, p, model.fno_blocks))
    out = gno_forward(torch, model.gno, p, "gno.", in_p.reshape(-1, in_p.shape[-1]), out_p,
                      v if batched else v[0], edges)
    out = out if batched else out[None]
    out = channel_mlp(torch, out.permute(0, 2, 1), p, "projection.").permute(0, 2, 1)
    return out if batched else out[0]
