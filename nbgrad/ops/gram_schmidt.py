"""Orthonormal bases by modified Gram-Schmidt, and the orthogonal neural operator's
encode/decode (ONO) built on them.

``gram_schmidt(B)`` orthonormalises the columns of ``B[n, k]`` in order (Q spans the same
nested subspaces as B, with ``B = Q R``, R upper triangular with positive diagonal), so
it matches ``torch.linalg.qr(B).Q`` up to the sign of each column. Its backward is seed
001's reverse sweep, which is linear in dL/dQ: ``ono_encode`` / ``ono_decode`` are each
one op (MGS, then the product with Q or Q.T) whose backward sums the batch into one dL/dQ
before a single sweep. Their products run on Numba's threads (kernels/gemm.py), not
BLAS, whose own thread pool would compete with Numba's.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..function import Function, Sample, register
from ..kernels import gemm
from ..kernels import gram_schmidt as gram_schmidt_kernels
from ..runtime.jit import PARALLEL_WORK_MIN
from ..tensor import Tensor, lift
from ._args import float_input, promoted_dtype
from ._recompute import recompute_vjp
from .shape import stack


def rank_tolerance(dtype: Any, k: int) -> float:
    """Relative rank threshold of ``gram_schmidt``: column j is dropped when what is left
    of it after projecting out the earlier columns has norm ``<= tol * ||b_j||``, with
    ``tol = 4 sqrt(k) eps(dtype)`` (the size of the rounding residue of an exactly
    dependent column). Since ``R_jj >= sigma_min(B)`` and ``||b_j|| <= sigma_max(B)``, a B
    with condition number below ``1 / tol`` keeps every column."""
    return float(4.0 * np.sqrt(max(k, 1)) * np.finfo(dtype).eps)


def _column_scales(Bt: np.ndarray) -> np.ndarray:
    """Per column of B (row of ``Bt``), the power of two s_j that brings its largest finite
    |entry| into [0.5, 1) (1 for a column without finite nonzero entries), clipped to
    2^+-(maxexp - 24): within that range every scaled column's squared norm is a normal
    number. MGS of B diag(s) is Q, R diag(s): bit for bit MGS of B wherever B's squares
    neither overflow nor underflow, and right where they would (columns of 1e200 or of
    subnormals)."""
    largest = np.where(np.isfinite(Bt), np.abs(Bt), 0).max(axis=1, initial=0)
    limit = np.finfo(Bt.dtype).maxexp - 24
    exponents = np.clip(np.frexp(largest)[1], -limit, limit)
    return np.ldexp(np.ones(Bt.shape[0], Bt.dtype), -exponents)


def _orthonormalise(B: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(Q.T, R_s, s) of MGS on the columns of B[n, k] scaled by ``s = _column_scales``
    (``B diag(s) = Q R_s``)."""
    Qt = np.array(B.T, order="C")        # a fresh copy: the kernels work in place
    scales = _column_scales(Qt)
    Qt *= scales[:, None]
    tol = Qt.dtype.type(rank_tolerance(Qt.dtype, Qt.shape[0]))
    mgs = gram_schmidt_kernels.mgs_panels if _parallel_pays(Qt) else gram_schmidt_kernels.mgs
    return Qt, mgs(Qt, tol), scales


def _parallel_pays(Qt: np.ndarray) -> bool:
    """Whether MGS over ``Qt`` [k, n] (~k^2 n / 2 multiply-adds) is worth a parallel region
    (docs/threads.md); ``mgs`` and ``mgs_panels`` give the same bits."""
    return Qt.shape[0] * Qt.size // 2 >= PARALLEL_WORK_MIN


def _passes(B: np.ndarray, reorthogonalize: bool) -> list[tuple]:
    """(Q.T, R_s, s) of each MGS pass: one, or two with the second on the first one's Q."""
    passes = [_orthonormalise(B)]
    if reorthogonalize:
        passes.append(_orthonormalise(passes[0][0].T))
    return passes


# A product runs beside the serial sweep (on the other thread) when it has at most this
# many multiply-adds per (column pair, row) step of the sweep, k^2 n / 2 of them: one step
# costs ~10 multiply-adds of the micro-kernel (W7's size), so up to here the product takes
# less than twice as long as the sweep, and beside it beats sweep-then-parallel-product.
_BESIDE_MAX_RATIO = 20


def _beside_pays(Qt: np.ndarray, a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a @ b`` is short enough to run beside the sweep over ``Qt`` [k, n]."""
    (M, Kd), P = a.shape, b.shape[1]
    k, n = Qt.shape
    return M * Kd * P <= _BESIDE_MAX_RATIO * (k * k * n // 2)


def _sweep(Qt: np.ndarray, R: np.ndarray, scales: np.ndarray, dQw: np.ndarray,
           beside: tuple = ()) -> tuple[np.ndarray, np.ndarray | None]:
    """dL/dB.T [k, n] of one MGS pass (``B diag(s) = Q R``: the sweep gives the gradient
    of B diag(s), whose column j times s_j is that of b_j) from dL/dQ.T (``dQw``,
    C-contiguous [k, n]: the sweep's workspace, overwritten), and ``a @ b`` for
    ``beside = (a, b)`` (else None): on the second thread while the (serial) sweep runs,
    or after it on both threads if the product is much longer than the sweep."""
    if beside and _parallel_pays(Qt) and _beside_pays(Qt, *beside):
        dBt, product = gram_schmidt_kernels.mgs_sweep_beside_product(Qt, R, dQw, *beside)
    else:
        # one layout, so one compile of the sweep (dQw is its workspace either way)
        dBt = gram_schmidt_kernels.mgs_sweep_blocked(Qt, R, np.ascontiguousarray(dQw))
        product = gemm.product(*beside) if beside else None
    with np.errstate(over="ignore"):  # a subnormal column's gradient may round to inf
        dBt *= scales[:, None]
    return dBt, product


def _sweep_passes(passes: list, dQw: np.ndarray, beside: tuple = ()
                  ) -> tuple[np.ndarray, np.ndarray | None]:
    """dL/dB [n, k] from dL/dQ.T of the last pass (overwritten): each pass maps the
    gradient of its Q to that of its input, the last pass first, whose sweep runs beside
    the product ``beside`` (see ``_sweep``)."""
    last, *earlier = reversed(passes)
    dQw, product = _sweep(*last, dQw, beside)
    for Qt, R, scales in earlier:
        dQw, _ = _sweep(Qt, R, scales, dQw)
    return gemm.transpose(dQw), product


# -- the same MGS in differentiable ops (second derivatives) ---------------------------------


def _mgs_tensor(B: Tensor, R: np.ndarray) -> Tensor:
    """One MGS pass on the columns of ``B[n, k]`` written with differentiable ops, for the
    vjps (``create_graph=True``): right-looking (q_j is projected out of all the later
    columns at once), which gives every column its projections in the order of the
    left-looking kernel. A column the kernel dropped (``R[j, j] == 0``, the decision is
    a constant) is dropped again: q_j = 0, no gradient, no projection."""
    n, k = B.shape
    if k == 0:
        return B
    cols = []
    rest = B
    for j in range(k):
        v, rest = rest[:, 0], rest[:, 1:]
        if R[j, j] == 0:
            cols.append(lift(np.zeros(n, B.dtype)))
            continue
        q = v / (v * v).sum().sqrt()
        if j + 1 < k:
            rest = rest - q.reshape(n, 1) * (q @ rest).reshape(1, k - j - 1)
        cols.append(q)
    return stack(cols, axis=1)


def _mgs_passes(B: Tensor, passes: list) -> Tensor:
    """Q of ``_passes`` (one MGS pass or two) recomputed with ``_mgs_tensor`` from the
    same column scales and rank decisions (the R of each saved pass)."""
    for _, R, scales in passes:
        B = _mgs_tensor(B * lift(scales), R)
    return B


def _samples(rng):
    n = rng.standard_normal
    yield Sample(n((5, 3)), label="tall")
    yield Sample(n((4, 4)), label="square")
    yield Sample(n((6, 1)), label="one column")
    yield Sample(n((7, 4)), reorthogonalize=True, label="reorthogonalized")


@register("gram_schmidt", samples=_samples)
class GramSchmidt(Function):
    @staticmethod
    def forward(ctx, B, reorthogonalize=False):
        passes = _passes(B, reorthogonalize)
        ctx.save_for_backward(*passes)
        return gemm.transpose(passes[-1][0])

    @staticmethod
    def backward(ctx, g):
        return _sweep_passes(list(ctx.saved_tensors), np.array(g.T, order="C"))[0]

    @staticmethod
    def vjp(ctx, g):
        passes = list(ctx.saved_tensors)
        return recompute_vjp(ctx, lambda B: _mgs_passes(B, passes), (g,))


def _check_basis(op: str, B: Any) -> Tensor:
    """The basis ``B[n, k]`` (n >= k) as a float Tensor."""
    B = float_input(op, B, "B")
    if B.ndim != 2:
        raise ValueError(f"{op}: B must be 2-D [n, k], got shape {B.shape}")
    n, k = B.shape
    if n < k:
        raise ValueError(f"{op}: B has shape {B.shape}: k = {k} columns cannot be "
                         f"orthonormal in n = {n} dimensions (needs n >= k)")
    return B


def gram_schmidt(B: Any, reorthogonalize: bool = False) -> Tensor:
    """Orthonormalise the columns of ``B[n, k]`` (n >= k) by modified Gram-Schmidt.

    For j = 1..k: ``v = b_j``; for i < j: ``R_ij = q_i . v``, ``v -= R_ij q_i``; then
    ``R_jj = |v|`` and ``q_j = v / R_jj``. So ``B = Q R`` with ``Q^T Q = I`` and R upper
    triangular with a positive diagonal: ``torch.linalg.qr(B).Q`` up to column signs.

    Rank deficiency: column j is dropped when ``R_jj <= tol * ||b_j||`` with
    ``tol = 4 sqrt(k) eps`` (``rank_tolerance``; relative to the column's own norm, so
    scaling a column never changes Q, and a zero column is always dropped). A dropped
    column gives ``q_j = 0`` and ``dL/db_j = 0`` and adds nothing to the other columns'
    gradients: no NaN or inf for any finite B (a NaN in B propagates, as in PyTorch; it
    is never taken for a dependency). Close to the threshold the gradient grows like
    ``1 / R_jj``, as for any QR.

    Columns are scaled by powers of two before MGS (``_column_scales``), which leaves Q
    unchanged but keeps squared norms from overflowing or underflowing: columns of 1e200
    or of subnormals are orthonormalised like any other. A column holding an inf is
    never dropped: its q_j is v_j / inf, NaN where v_j is inf, and the NaN reaches the
    later columns, as a NaN does.

    ``reorthogonalize=True`` runs MGS a second time on Q ("twice is enough"), which keeps
    ``Q^T Q = I`` to rounding for ill-conditioned B (plain MGS loses orthogonality in
    proportion to the condition number); the backward sweeps through both passes.

    Backward: the reverse sweep (docs/derivations.md#gram-schmidt-and-its-reverse-sweep;
    for j = k..1: ``dv = (dq_j - (dq_j.q_j) q_j)/R_jj``,
    then undo the projections i = j-1..1), which equals the QR adjoint
    ``dB = [dQ + Q copyltu(-dQ^T Q)] R^{-T}`` for full-rank B.

    Second derivatives (``create_graph=True``): the vjp recomputes the same MGS with
    differentiable ops (same dropped columns) and differentiates it; also for
    ``ono_encode`` / ``ono_decode``.
    """
    B = _check_basis("gram_schmidt", B)
    return GramSchmidt.apply(B, reorthogonalize=bool(reorthogonalize))


def _ono_samples(rng, decode):
    n = rng.standard_normal
    width = 3 if decode else 7
    yield Sample(n((4, width)), n((7, 3)), label="batch of 4")
    yield Sample(n(width), n((7, 3)), label="one field")
    yield Sample(n((2, 3, width)), n((7, 3)), label="2-D batch")
    yield Sample(n((2, width)), n((7, 3)), reorthogonalize=True, label="reorthogonalized")


class _OnoProduct(Function):
    """``a @ Q`` (encode, ``decode = False``) or ``a @ Q.T`` (decode) for a[..., n or k],
    Q = MGS(B); float32 with float64 gives float64, as ``matmul``."""

    decode = False

    @classmethod
    def forward(cls, ctx, a, B, reorthogonalize=False):
        dtype = promoted_dtype(a.dtype, B.dtype)
        ctx.input_dtypes, ctx.input_shape = (a.dtype, B.dtype), a.shape
        a2 = np.ascontiguousarray(a.reshape(math.prod(a.shape[:-1]), a.shape[-1]),
                                  dtype=dtype)
        passes = _passes(B.astype(dtype, copy=False), reorthogonalize)
        Qt = passes[-1][0]
        y = gemm.product(a2, Qt if cls.decode else gemm.transpose(Qt))
        ctx.save_for_backward(a2, *passes)
        return y.reshape(a.shape[:-1] + y.shape[1:])

    @classmethod
    def backward(cls, ctx, g):
        """Encode y = a Q: da = g Q^T, dQ^T = g^T a. Decode y = a Q^T: da = g Q,
        dQ^T = a^T g. dQ^T, summed over the whole batch by the product, goes through one
        sweep per pass; da's product runs beside the first sweep."""
        a2, *passes = ctx.saved_tensors
        Qt = passes[-1][0]
        g2 = np.ascontiguousarray(g.reshape(a2.shape[0], g.shape[-1]), dtype=a2.dtype)
        da_factors = ()
        if ctx.needs_input_grad[0]:
            da_factors = (g2, gemm.transpose(Qt) if cls.decode else Qt)
        da = dB = None
        if ctx.needs_input_grad[1]:
            if cls.decode:
                dQw = gemm.product(gemm.transpose(a2), g2)
            else:
                dQw = gemm.product(gemm.transpose(g2), a2)
            dB, da = _sweep_passes(passes, dQw, da_factors)
            dB = dB.astype(ctx.input_dtypes[1], copy=False)
        elif da_factors:
            da = gemm.product(*da_factors)
        if da is not None:
            if da.shape != ctx.input_shape:
                da = da.reshape(ctx.input_shape)
            da = da.astype(ctx.input_dtypes[0], copy=False)
        return da, dB

    @classmethod
    def vjp(cls, ctx, g):
        """``a @ Q`` or ``a @ Q.T`` recomputed with the differentiable MGS, differentiated."""
        passes = ctx.saved_tensors[1:]
        dtype = promoted_dtype(*ctx.input_dtypes)

        def product(a, B):
            Q = _mgs_passes(B.to(dtype), passes)
            return a @ (Q.T if cls.decode else Q)

        return recompute_vjp(ctx, product, (g,))


@register("ono_encode", samples=lambda rng: _ono_samples(rng, decode=False))
class OnoEncode(_OnoProduct):
    decode = False


@register("ono_decode", samples=lambda rng: _ono_samples(rng, decode=True))
class OnoDecode(_OnoProduct):
    decode = True


def _check_operand(op: str, name: str, x: Any, size: int, B: Tensor, what: str) -> Tensor:
    """The operand ``x[..., size]`` multiplying the basis, as a float Tensor."""
    x = float_input(op, x, name)
    if x.ndim < 1 or x.shape[-1] != size:
        raise ValueError(f"{op}: {name} has shape {x.shape} but B has shape {B.shape}: "
                         f"the last dim of {name} must be {what} = {size}")
    return x


def ono_encode(u: Any, B: Any, reorthogonalize: bool = False) -> Tensor:
    """Coefficients of ``u[..., n]`` in the orthonormal basis of ``B[n, k]``:
    ``u @ gram_schmidt(B)`` -> ``[..., k]``. One op: its backward sums the batch into one
    dL/dQ = u^T g and runs a single Gram-Schmidt sweep (per pass)."""
    B = _check_basis("ono_encode", B)
    u = _check_operand("ono_encode", "u", u, B.shape[0], B, "n")
    return OnoEncode.apply(u, B, reorthogonalize=bool(reorthogonalize))


def ono_decode(x: Any, B: Any, reorthogonalize: bool = False) -> Tensor:
    """Field with coefficients ``x[..., k]`` in the orthonormal basis of ``B[n, k]``:
    ``x @ gram_schmidt(B).T`` -> ``[..., n]`` (one op; one Gram-Schmidt sweep in
    backward)."""
    B = _check_basis("ono_decode", B)
    x = _check_operand("ono_decode", "x", x, B.shape[1], B, "k")
    return OnoDecode.apply(x, B, reorthogonalize=bool(reorthogonalize))


__all__ = ["gram_schmidt", "ono_encode", "ono_decode"]
