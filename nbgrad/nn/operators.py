"""Neural-operator layers: the graph neural operator (``GNO``), the orthogonal neural
operator (``ONO``) and the Laplace neural operator (``LNO``, learned or fixed poles).

``GNO`` works on node features over a ``Graph`` (``nb.radius_graph``, ``nb.knn_graph``,
``Graph.from_edges``) through the fused ``nb.gno``. ``ONO`` and ``LNO`` work on fields
sampled on a grid, the grid as the last dimension (``u[..., n_in] -> [..., n_out]``), as
the reference library's (athena's) ``orthogonal_nop_block``, ``dynamic_lno`` and
``fixed_lno`` layers do: every leading dimension (a batch, channels) is a separate field
with the same weights. Activations are separate modules, as in PyTorch (athena puts one
inside each layer). Default initialisation follows PyTorch's ``Linear``:
U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases, except where noted.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..graph import Graph
from ..ops._args import is_int
from ..ops.gno import gno
from ..ops.gram_schmidt import gram_schmidt
from ..ops.laplace import lno_decode, lno_encode
from ..ops.shape import concat
from ..tensor import Tensor, lift
from . import init
from .layers import Linear, _float_dtype, _positive
from .module import Module
from .parameter import Parameter

__all__ = ["GNO", "ONO", "LNO"]

_EDGE_FEATURES = ("relative", "pair")


def _uniform_fan_in(t: Parameter, fan_in: int) -> None:
    """PyTorch's bias initialisation: U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    init.uniform_(t, -bound, bound)


def _last_dim(owner: str, name: str, u: Tensor, n: int, meaning: str) -> None:
    if u.ndim < 1 or u.shape[-1] != n:
        raise ValueError(f"{owner}: {name} has shape {tuple(u.shape)}; its last dim must be "
                         f"{meaning} = {n}")


# -- graph neural operator --------------------------------------------------------------------


class GNO(Module):
    """Graph neural operator layer:
    ``out_i = reduce_{p in row i} kappa(e_p) h_{col p}  [+ W h_i]  [+ b]``, with the
    per-edge kernel MLP ``kappa(e) = reshape(V relu(U e + b_u) + b_v, [out, in])``
    (``nb.gno``, fused: the ``[E, out, in]`` kernels are never built).

    Edge features ``e``:

    * ``'relative'``: ``x_j - x_i`` for the message j -> i (``coord_dim`` = d features);
    * ``'pair'``: ``[x_i, x_j]`` (2 d features);
    * an int ``d_e``: user-supplied ``edge_feats[num_edge_ids, d_e]``, indexed by the
      graph's edge ids (both directions of an undirected edge may share a row).

    Positions for the first two are ``forward``'s ``x``: ``[N, d]``, or a pair
    ``(x_source[N_s, d], x_target[N, d])`` for a rectangular graph (``radius_graph(x, r,
    query=q)``: ``(x, q)``). They are computed per CSR entry, so a graph whose entries
    share edge ids is used through ``graph.with_entry_ids``. Positions of another dtype
    (float64 points from ``radius_graph``'s input) are cast to the layer's.

    ``forward(h, graph, x=None, edge_feats=None)``: ``h[N_s, in_features]`` ->
    ``[N, out_features]``, or a batch on one shared graph, ``h[B, N_s, in]`` ->
    ``[B, N, out]`` (each edge's kernel runs once for the batch). ``skip=True`` adds the
    point-wise linear path ``W h_i`` (needs a square graph: h lives on the targets too);
    ``bias=True`` adds ``b``. ``reduce='mean'`` divides the sum by the row length.

    Parameters: ``kernel_in`` = Linear(d_e, kernel_hidden) (U, b_u), ``kernel_out`` =
    Linear(kernel_hidden, out*in) (V, b_v), ``skip`` = Linear(in, out, bias=False) (W),
    ``bias`` [out] (U(+-1/sqrt(in))): each with PyTorch's Linear initialisation.
    """

    def __init__(self, in_features: int, out_features: int, kernel_hidden: int,
                 edge_features: str | int = "relative", coord_dim: int | None = None,
                 reduce: str = "sum", bias: bool = True, skip: bool = True,
                 dtype: Any = None) -> None:
        super().__init__()
        owner = "GNO"
        _positive(owner, in_features=in_features, out_features=out_features,
                  kernel_hidden=kernel_hidden)
        if reduce not in ("sum", "mean"):
            raise ValueError(f"{owner}: reduce must be 'sum' or 'mean', got {reduce!r}")
        if edge_features in _EDGE_FEATURES:
            if coord_dim is None:
                raise ValueError(f"{owner}: edge_features={edge_features!r} needs coord_dim, "
                                 f"the dimension d of the positions x")
            _positive(owner, coord_dim=coord_dim)
            width = coord_dim * (2 if edge_features == "pair" else 1)
        elif is_int(edge_features):
            _positive(owner, edge_features=edge_features)
            width = int(edge_features)
        else:
            raise ValueError(f"{owner}: edge_features must be 'relative', 'pair' or a positive "
                             f"int (the width of user-supplied features), got "
                             f"{edge_features!r}")
        dtype = _float_dtype(owner, dtype)
        self.in_features, self.out_features = in_features, out_features
        self.kernel_hidden, self.edge_features = kernel_hidden, edge_features
        self.coord_dim, self.edge_width, self.reduce = coord_dim, width, reduce
        self.kernel_in = Linear(width, kernel_hidden, dtype=dtype)
        self.kernel_out = Linear(kernel_hidden, out_features * in_features, dtype=dtype)
        if skip:
            self.skip = Linear(in_features, out_features, bias=False, dtype=dtype)
        else:
            self.add_module("skip", None)
        if bias:
            self.bias = Parameter(np.empty(out_features, dtype))
            _uniform_fan_in(self.bias, in_features)
        else:
            self.register_parameter("bias", None)

    def edge_feats(self, graph: Graph, x: Any) -> Tensor:
        """The ``[nnz, d_e]`` features of every CSR entry p = (j -> i) from positions
        ``x`` (see the class docstring): ``x_j - x_i`` or ``[x_i, x_j]``."""
        owner = "GNO"
        if isinstance(x, tuple | list):
            if len(x) != 2:
                raise ValueError(f"{owner}: x must be positions [N, d] or a pair (x_source, "
                                 f"x_target), got a sequence of {len(x)}")
            x_src, x_dst = lift(x[0]), lift(x[1])
        else:
            x_src = x_dst = lift(x)
        for name, t, n, what in (("x_source" if x_src is not x_dst else "x", x_src,
                                  graph.num_source_nodes, "source nodes"),
                                 ("x_target" if x_src is not x_dst else "x", x_dst,
                                  graph.num_nodes, "target nodes")):
            if t.ndim != 2 or t.shape != (n, self.coord_dim):
                raise ValueError(f"{owner}: {name} has shape {tuple(t.shape)}, expected "
                                 f"[{n}, {self.coord_dim}] ({n} {what} of {graph}, "
                                 f"coord_dim = {self.coord_dim})")
        x_j, x_i = x_src[graph.col], x_dst[graph.row]
        feats = x_j - x_i if self.edge_features == "relative" else concat([x_i, x_j], axis=1)
        dtype = self.kernel_in.weight.dtype
        return feats if feats.dtype == dtype else feats.to(dtype)

    def forward(self, h: Any, graph: Graph, x: Any = None, edge_feats: Any = None) -> Tensor:
        owner = "GNO"
        if not isinstance(graph, Graph):
            raise TypeError(f"{owner}: graph must be an nb.Graph, got {type(graph).__name__}")
        h = lift(h)
        if self.edge_features in _EDGE_FEATURES:
            if x is None or edge_feats is not None:
                raise ValueError(f"{owner}: edge_features={self.edge_features!r} computes the "
                                 f"edge features from the positions: pass x (and not "
                                 f"edge_feats)")
            graph = graph.with_entry_ids
            feats = self.edge_feats(graph, x)
        else:
            if edge_feats is None or x is not None:
                raise ValueError(f"{owner}: edge_features={self.edge_features} takes "
                                 f"user-supplied features: pass edge_feats "
                                 f"[num_edge_ids, {self.edge_width}] (and not x)")
            feats = lift(edge_feats)
        if self.skip is not None and not graph.is_square:
            raise ValueError(f"{owner}: skip=True adds W h_i at every target node, but {graph} "
                             f"is rectangular (h lives on its source nodes only); build the "
                             f"layer with skip=False")
        m = gno(h, feats, self.kernel_in.weight, self.kernel_in.bias, self.kernel_out.weight,
                self.kernel_out.bias, graph, reduce=self.reduce)
        if self.skip is not None:
            m = m + self.skip(h)
        return m if self.bias is None else m + self.bias

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"kernel_hidden={self.kernel_hidden}, edge_features={self.edge_features!r}, "
                f"reduce={self.reduce!r}, bias={self.bias is not None}, "
                f"skip={self.skip is not None}")


# -- orthogonal neural operator -------------------------------------------------------------


class ONO(Module):
    """Orthogonal neural operator layer (athena's ``orthogonal_nop_block``):

        ``v = W (Q R Q^T u + u) + b``,  ``Q = gram_schmidt(B)``

    on fields ``u[..., in_points] -> [..., out_points]``: encode onto the learned
    orthonormal basis Q (``[in_points, k]``, modified Gram-Schmidt of the parameter
    ``basis`` B), mix the k coefficients with ``mixing`` R ``[k, k]``, decode, add the
    field itself and apply the dense map ``linear`` (W ``[out, in]``, b) -- as in athena,
    one W serves the decoded spectral path and the bypass. ``reorthogonalize=True`` runs
    Gram-Schmidt twice (orthogonality to rounding for an ill-conditioned B).

    Q is built once per forward and used by both products, so the backward sums dL/dQ of
    both (and over the batch) before a single reverse sweep. Initialisation: B and R
    U(-1/sqrt(k), 1/sqrt(k)) (Q does not depend on B's scale), ``linear`` PyTorch's.
    """

    def __init__(self, in_points: int, out_points: int, k: int, bias: bool = True,
                 reorthogonalize: bool = False, dtype: Any = None) -> None:
        super().__init__()
        owner = "ONO"
        _positive(owner, in_points=in_points, out_points=out_points, k=k)
        if k > in_points:
            raise ValueError(f"ONO: k = {k} basis functions cannot be orthonormal on "
                             f"in_points = {in_points} points (needs k <= in_points)")
        dtype = _float_dtype(owner, dtype)
        self.in_points, self.out_points, self.k = in_points, out_points, k
        self.reorthogonalize = bool(reorthogonalize)
        self.basis = Parameter(np.empty((in_points, k), dtype))
        self.mixing = Parameter(np.empty((k, k), dtype))
        for p in (self.basis, self.mixing):
            _uniform_fan_in(p, k)
        self.linear = Linear(in_points, out_points, bias=bias, dtype=dtype)

    def orthonormal_basis(self) -> Tensor:
        """Q = gram_schmidt(basis), ``[in_points, k]``."""
        return gram_schmidt(self.basis, reorthogonalize=self.reorthogonalize)

    def forward(self, u: Any) -> Tensor:
        u = lift(u)
        _last_dim("ONO", "u", u, self.in_points, "in_points")
        Q = self.orthonormal_basis()
        spectral = ((u @ Q) @ self.mixing.T) @ Q.T
        return self.linear(spectral + u)

    def extra_repr(self) -> str:
        return (f"in_points={self.in_points}, out_points={self.out_points}, k={self.k}, "
                f"bias={self.linear.bias is not None}, reorthogonalize={self.reorthogonalize}")


# -- Laplace neural operator ----------------------------------------------------------------


class LNO(Module):
    """Laplace neural operator layer on fields ``u[..., in_points] -> [..., out_points]``:

        ``v = D(mu) K E(mu) u + W u + b``

    with the Laplace bases ``E(mu)[m, j] = exp(-mu_m t_j)`` on the input grid and
    ``D(mu)[i, m] = exp(-mu_m tau_i)`` on the output grid (t, tau uniform on [0, 1];
    ``nb.lno_encode`` / ``nb.lno_decode``), a mixing K of the ``modes`` coefficients, and
    the dense bypass ``linear`` (W ``[out, in]``, b). The poles start at
    ``mu_m = m pi`` (m = 1..modes), as in athena.

    * ``learn_poles=True`` (athena's ``dynamic_lno``): ``poles`` mu is a Parameter and
      K = diag(``residues``) -- the pole-residue form; the gradient reaches mu through
      both bases.
    * ``learn_poles=False`` (athena's ``fixed_lno``): ``poles`` is a buffer (saved in the
      state dict, never trained) and K = ``mixing`` ``[modes, modes]``, a full matrix.

    ``mixing='diagonal'`` or ``'full'`` overrides the choice of K. Initialisation:
    residues and mixing U(-1/sqrt(modes), 1/sqrt(modes)), ``linear`` PyTorch's.
    """

    def __init__(self, in_points: int, out_points: int, modes: int, learn_poles: bool = True,
                 mixing: str | None = None, bias: bool = True, dtype: Any = None) -> None:
        super().__init__()
        owner = "LNO"
        _positive(owner, in_points=in_points, out_points=out_points, modes=modes)
        mixing = ("diagonal" if learn_poles else "full") if mixing is None else mixing
        if mixing not in ("diagonal", "full"):
            raise ValueError(f"{owner}: mixing must be None, 'diagonal' or 'full', got "
                             f"{mixing!r}")
        dtype = _float_dtype(owner, dtype)
        self.in_points, self.out_points, self.modes = in_points, out_points, modes
        self.learn_poles, self.mixing_kind = bool(learn_poles), mixing
        poles = (np.pi * np.arange(1, modes + 1)).astype(dtype)
        if learn_poles:
            self.poles = Parameter(poles)
        else:
            self.register_buffer("poles", Tensor(poles))
        shape = (modes,) if mixing == "diagonal" else (modes, modes)
        weights = Parameter(np.empty(shape, dtype))
        _uniform_fan_in(weights, modes)
        if mixing == "diagonal":
            self.residues = weights
        else:
            self.mixing = weights
        self.linear = Linear(in_points, out_points, bias=bias, dtype=dtype)

    def forward(self, u: Any) -> Tensor:
        u = lift(u)
        _last_dim("LNO", "u", u, self.in_points, "in_points")
        coeffs = lno_encode(u, self.poles)
        if self.mixing_kind == "diagonal":
            coeffs = coeffs * self.residues
        else:
            coeffs = coeffs @ self.mixing.T
        return lno_decode(coeffs, self.poles, self.out_points) + self.linear(u)

    def extra_repr(self) -> str:
        return (f"in_points={self.in_points}, out_points={self.out_points}, "
                f"modes={self.modes}, learn_poles={self.learn_poles}, "
                f"mixing={self.mixing_kind!r}, bias={self.linear.bias is not None}")
