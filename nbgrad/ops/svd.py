"""The singular value decomposition: ``linalg.svd`` (A = U diag(S) Vh, a registered op
over stacks of matrices [..., m, n], forward ``np.linalg.svd``) and ``linalg.svdvals``.

The backward is PyTorch's ``svd_backward`` (torch/csrc/autograd/FunctionsManual.cpp) for
real matrices, with k = min(m, n), F_ij = 1 / (s_j^2 - s_i^2) off the diagonal and
skew(X) = X - X^T::

    gA = U [ (skew(U^T gU) S + S skew(Vh gVh^T)) o F + diag(gS) ] Vh
       + (I_m - U U^T) gU S^-1 Vh            (m > n)
       + U S^-1 gVh (I_n - Vh^T Vh)          (m < n)

and U diag(gS) Vh when only S gets a gradient (``svdvals``: no division, so repeated or
zero singular values are fine there). The gradient of U or Vh needs distinct singular
values (F is infinite otherwise, as in PyTorch). With ``full_matrices=True`` and m != n,
the columns of U (rows of Vh) past k are any basis of a complement: as PyTorch, their
gradient is ignored. The same formula, written once, runs on arrays (backward) and on the
op's output tensors (vjp), so second derivatives come from the graph, as in PyTorch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import return_types
from ..autograd import grad_mode
from ..function import Function, Sample, register
from ..tensor import Tensor, lift


def _mT(x: Any) -> Any:
    return np.swapaxes(x, -1, -2) if isinstance(x, np.ndarray) else x.transpose(-2, -1)


def _col(x: Any) -> Any:
    """[..., k] -> [..., k, 1]."""
    return x[..., :, None] if isinstance(x, np.ndarray) else x.unsqueeze(-1)


def _row(x: Any) -> Any:
    """[..., k] -> [..., 1, k]."""
    return x[..., None, :] if isinstance(x, np.ndarray) else x.unsqueeze(-2)


def _dtype(x: Any) -> np.dtype:
    return x.dtype if isinstance(x, np.ndarray) else x._data.dtype


def svd_grad(gU: Any, gS: Any, gVh: Any, U: Any, S: Any, Vh: Any) -> Any:
    """PyTorch's ``svd_backward`` (real case) for the reduced SVD U [.., m, k], S [.., k],
    Vh [.., k, n]; a gradient that is None is absent. Arrays in, an array out; Tensors in,
    a Tensor in the graph out."""
    m, n = U.shape[-2], Vh.shape[-1]
    if gU is None and gVh is None:
        if gS is None:
            return None
        return U @ (_col(gS) * Vh) if m >= n else (U * _row(gS)) @ Vh
    eye = np.eye(S.shape[-1], dtype=_dtype(S))
    S2 = S * S
    E = _row(S2) - _col(S2) + eye  # s_j^2 - s_i^2, 1 on the diagonal (divides zeros there)
    if gU is not None:
        UhgU = _mT(U) @ gU
        UhgU = UhgU - _mT(UhgU)
    if gVh is not None:
        VhgV = Vh @ _mT(gVh)
        VhgV = VhgV - _mT(VhgV)
    if gU is not None and gVh is not None:
        gA = (UhgU * _row(S) + _col(S) * VhgV) / E
    elif gU is not None:
        gA = UhgU * (_row(S) / E)
    else:
        gA = _col(S) * (VhgV / E)
    if gS is not None:
        gA = gA + _col(gS) * eye
    if m > n and gU is not None:
        gA = U @ gA
        gUSinv = gU / _row(S)
        gA = gA + gUSinv - U @ (_mT(U) @ gUSinv)
        return gA @ Vh
    if m < n and gVh is not None:
        gA = gA @ Vh
        SinvgVh = gVh / _col(S)
        gA = gA + SinvgVh - (SinvgVh @ _mT(Vh)) @ Vh
        return U @ gA
    return U @ (gA @ Vh) if m >= n else (U @ gA) @ Vh


def _present(g: Any) -> Any:
    """None for an output gradient that is zeros and not itself differentiated (what the
    engine sends for an output no loss used: PyTorch's undefined gradient), else g."""
    if isinstance(g, np.ndarray):
        return g if g.any() else None
    return g if g.requires_grad or g._data.any() else None


def _reduced(U: Any, Vh: Any, k: int, full: bool) -> tuple[Any, Any]:
    """The first k columns of U and rows of Vh (the gradients of the others are ignored,
    as PyTorch does for full_matrices=True)."""
    if not full:
        return U, Vh
    return (U if U.shape[-1] == k else U[..., :, :k]), (Vh if Vh.shape[-2] == k
                                                        else Vh[..., :k, :])


def _separated(rng: np.random.Generator, shape: tuple, s: tuple) -> np.ndarray:
    """A [..., m, n] matrix with the singular values ``s`` (distinct: a differentiable
    U and Vh), random singular vectors."""
    *batch, m, n = shape
    k = min(m, n)
    qu = np.linalg.qr(rng.standard_normal((*batch, m, m)))[0][..., :, :k]
    qv = np.linalg.qr(rng.standard_normal((*batch, n, n)))[0][..., :k, :]
    return (qu * np.asarray(s[:k])) @ qv


def _samples(rng: np.random.Generator):
    s = (3.0, 2.0, 1.0, 0.5)
    yield Sample(_separated(rng, (3, 3), s), full_matrices=False, label="square")
    yield Sample(_separated(rng, (4, 3), s), full_matrices=False, label="tall (m > n)")
    yield Sample(_separated(rng, (2, 4), s), full_matrices=False, label="wide (m < n)")
    yield Sample(_separated(rng, (2, 3, 2), s), full_matrices=False, label="batched tall")
    yield Sample(_separated(rng, (2, 2, 3), s), full_matrices=False, label="batched wide")
    yield Sample(_separated(rng, (2, 3, 3), s), full_matrices=True,
                 label="batched square, full_matrices")


@register("linalg_svd", samples=_samples)
class Svd(Function):
    """A = U diag(S) Vh over the last two dims (``torch.linalg.svd``)."""

    @staticmethod
    def forward(ctx, A, full_matrices):
        try:
            U, S, Vh = np.linalg.svd(A, full_matrices=full_matrices)
        except np.linalg.LinAlgError as err:
            raise np.linalg.LinAlgError(f"linalg.svd: the SVD of A (shape {A.shape}) did not "
                                        f"converge ({err}); does A hold inf or nan?") from None
        ctx.save_for_backward(U, S, Vh)
        return U, S, Vh

    @staticmethod
    def backward(ctx, gU, gS, gVh):
        U, S, Vh = ctx.saved_tensors
        k = S.shape[-1]
        full = ctx.params["full_matrices"]
        U, Vh = _reduced(U, Vh, k, full)
        gU, gVh = _reduced(gU, gVh, k, full)
        gA = svd_grad(_present(gU), _present(gS), _present(gVh), U, S, Vh)
        if gA is None:
            return np.zeros(U.shape[:-1] + Vh.shape[-1:], S.dtype)
        return gA.astype(S.dtype, copy=False)

    @staticmethod
    def vjp(ctx, gU, gS, gVh):
        U, S, Vh = ctx.saved_tensors
        k = S.shape[-1]
        full = ctx.params["full_matrices"]
        U, Vh = _reduced(ctx.output(U, 0), ctx.output(Vh, 2), k, full)
        S = ctx.output(S, 1)
        gU, gVh = _reduced(gU, gVh, k, full)
        gA = svd_grad(_present(gU), _present(gS), _present(gVh), U, S, Vh)
        if gA is None:
            return lift(np.zeros(U.shape[:-1] + Vh.shape[-1:], S._data.dtype))
        return gA


def _matrix_input(op: str, A: Any) -> Tensor:
    A = lift(A)
    if A.ndim < 2:
        raise ValueError(f"{op}: A must have at least 2 dimensions (a matrix or a stack of "
                         f"them), got shape {tuple(A.shape)}")
    dtype = A._data.dtype
    if dtype.kind != "f" or dtype.itemsize < 4:
        raise TypeError(f"{op}: expected a float32 or float64 tensor as A, got {dtype} "
                        f"(shape {tuple(A.shape)})")
    return A


def svd(A: Any, full_matrices: bool = True, *, driver: Any = None) -> return_types.linalg_svd:
    """A = U diag(S) Vh for A [..., m, n]: U [..., m, m] (or [..., m, k] with
    ``full_matrices=False``, k = min(m, n)), S [..., k] descending, Vh [..., n, n] (or
    [..., k, n]). U and Vh are unique up to the signs of matched columns/rows; their
    gradients need distinct singular values. As ``torch.linalg.svd`` (named tuple
    ``(U, S, Vh)``); ``driver`` (CUDA only in PyTorch) must be None."""
    op = "linalg.svd"
    if driver is not None:
        raise ValueError(f"{op}: driver={driver!r} is CUDA-only; use None on the CPU")
    if not isinstance(full_matrices, bool | np.bool_):
        raise TypeError(f"{op}: full_matrices must be a bool, got {full_matrices!r}")
    A = _matrix_input(op, A)
    return return_types.linalg_svd(*Svd.apply(A, full_matrices=bool(full_matrices)))


def svdvals(A: Any, *, driver: Any = None) -> Tensor:
    """The singular values of A [..., m, n], descending, [..., min(m, n)]; the gradient is
    U diag(gS) Vh of the reduced SVD (defined for repeated singular values too). As
    ``torch.linalg.svdvals``."""
    op = "linalg.svdvals"
    if driver is not None:
        raise ValueError(f"{op}: driver={driver!r} is CUDA-only; use None on the CPU")
    A = _matrix_input(op, A)
    if not (A.requires_grad and grad_mode.state.enabled):
        try:
            return lift(np.linalg.svd(A._data, compute_uv=False))
        except np.linalg.LinAlgError as err:
            raise np.linalg.LinAlgError(f"{op}: the SVD of A (shape {tuple(A.shape)}) did not "
                                        f"converge ({err}); does A hold inf or nan?") from None
    return Svd.apply(A, full_matrices=False)[1]


__all__ = ["svd", "svdvals"]
