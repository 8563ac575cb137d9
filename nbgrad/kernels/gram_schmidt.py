"""Modified Gram-Schmidt and its reverse sweep (seed 001), on transposed bases.

Every kernel works on ``Bt = B.T`` (shape ``[k, n]``, C-contiguous), so a column of B is a
contiguous row here and the inner dot/axpy loops vectorise. ``R`` is ``[k, k]`` upper
triangular with ``R[i, j] = q_i . v_j`` (the projection MGS subtracts) and ``R[j, j]`` the
norm of what is left of column j.

Rank threshold: column j is *dropped* when ``R[j, j] <= tol * ||b_j||`` (relative to its
own norm, so Q is unchanged by scaling a column, and a zero column is always dropped).
A dropped column gets ``q_j = 0`` and ``R[j, j] = 0``; the backward gives it ``dB_j = 0``
and it contributes nothing to the other columns' gradients (seed 001 skips it the same
way), so Q and dB stay finite whatever B is.

Two forms of each pass:
* ``mgs`` / ``mgs_sweep``: the loop nests of REFERENCE.md and seed 001 (left-looking
  forward; backward column by column, j = k..1, i = j-1..1), serial.
* ``mgs_parallel`` / ``mgs_sweep_parallel``: the same floating-point operations
  reorganised so that the independent work of one step runs in parallel (right-looking
  forward: once q_i is final, every later column j > i is projected at once; the sweep
  as a wavefront: at step t every still-open column j > t takes its i = t step at once,
  and q_t's gradient gathers their contributions over row chunks in the reference's j
  order). Each column sees its operations in the reference order, so the results are
  bitwise those of the serial forms, at any thread count.
"""

import numpy as np
from numba import njit, prange

# Reassociation lets LLVM vectorise the dot-product reductions. The compiled reduction
# order is fixed, so results do not depend on the thread count.
_FM = {"reassoc"}

# Row-chunk length of the sweep's gather step: a fixed partition (not one per thread), so
# the work split never changes the arithmetic.
_CHUNK = 256


@njit(cache=True, fastmath=_FM)
def _dot(a, b):
    s = a.dtype.type(0)
    for p in range(a.shape[0]):
        s += a[p] * b[p]
    return s


@njit(cache=True, fastmath=_FM)
def _column_norms(Bt):
    """||b_j|| for every row of Bt (computed as the forward computes them)."""
    k = Bt.shape[0]
    norms = np.empty(k, Bt.dtype)
    for j in range(k):
        norms[j] = np.sqrt(_dot(Bt[j], Bt[j]))
    return norms


@njit(cache=True, fastmath=_FM)
def _finish_column(Qt, R, j, norm_b, tol):
    """R_jj = |v_j|; q_j = v_j / R_jj, or drop the column (q_j = 0, R_jj = 0) when
    R_jj <= tol ||b_j|| (a NaN fails that test, so it propagates as in PyTorch)."""
    zero = Qt.dtype.type(0)
    r = np.sqrt(_dot(Qt[j], Qt[j]))
    if r <= tol * norm_b:
        R[j, j] = zero
        Qt[j, :] = zero
    else:
        R[j, j] = r
        for p in range(Qt.shape[1]):
            Qt[j, p] = Qt[j, p] / r


@njit(cache=True, fastmath=_FM)
def _project_out(Qt, R, i, j):
    """MGS step: R_ij = q_i . v_j; v_j -= R_ij q_i."""
    r = _dot(Qt[i], Qt[j])
    R[i, j] = r
    for p in range(Qt.shape[1]):
        Qt[j, p] = Qt[j, p] - r * Qt[i, p]


@njit(cache=True, fastmath=_FM)
def mgs(Qt, tol):
    """Left-looking MGS, as in REFERENCE.md: for j: v = b_j; for i < j: R_ij = q_i.v;
    v -= R_ij q_i; R_jj = |v|; q_j = v / R_jj. ``Qt`` holds B.T on entry and Q.T on
    return (in place: the caller passes a fresh copy); returns R."""
    k = Qt.shape[0]
    R = np.zeros((k, k), Qt.dtype)
    norms = _column_norms(Qt)
    for j in range(k):
        for i in range(j):
            _project_out(Qt, R, i, j)
        _finish_column(Qt, R, j, norms[j], tol)
    return R


@njit(cache=True, parallel=True, fastmath=_FM)
def mgs_parallel(Qt, tol):
    """Right-looking MGS, in place like ``mgs`` and bitwise equal to it: once q_i is
    final, project it out of every later column in parallel (each prange iteration owns
    column j). Returns R."""
    k = Qt.shape[0]
    R = np.zeros((k, k), Qt.dtype)
    norms = _column_norms(Qt)
    for i in range(k):
        _finish_column(Qt, R, i, norms[i], tol)
        for j in prange(i + 1, k):
            _project_out(Qt, R, i, j)
    return R


@njit(cache=True, fastmath=_FM)
def _open_column(dq, q, rjj, dv, v):
    """Backward through q_j = v_j / R_jj: dv = (dq_j - (dq_j.q_j) q_j) / R_jj, and the
    pre-normalisation v_j = R_jj q_j the projections are undone from."""
    dprod = _dot(dq, q)
    for p in range(q.shape[0]):
        dv[p] = (dq[p] - dprod * q[p]) / rjj
        v[p] = rjj * q[p]


@njit(cache=True, fastmath=_FM)
def _undo_projection(v, dv, dq, q, rij, dr):
    """One step i of column j's backward, given dr = -dv.q_i (computed before it):
    v += R_ij q_i; dq_i += -R_ij dv + dr v; dv += dr q_i (elementwise, so a row chunk of
    the four vectors can be done on its own)."""
    for p in range(q.shape[0]):
        v[p] = v[p] + rij * q[p]
        dq[p] = dq[p] - rij * dv[p]
        dq[p] = dq[p] + dr * v[p]
        dv[p] = dv[p] + dr * q[p]


@njit(cache=True, fastmath=_FM)
def mgs_sweep(Qt, R, dQw):
    """Seed 001's reverse sweep: dL/dQ -> dL/dB (all transposed, ``[k, n]``).

    for j = k..1 (dropped columns: dB_j = 0): dv = (dq_j - (dq_j.q_j) q_j) / R_jj;
    v = R_jj q_j; for i = j-1..1: v += R_ij q_i; dR = -dv.q_i; dq_i += -R_ij dv + dR v;
    dv += dR q_i; dB_j = dv. ``dQw`` (dL/dQ.T on entry) is the workspace the sweep adds
    the dq_i updates into, so it is overwritten: the caller passes a fresh copy."""
    k, n = Qt.shape
    dBt = np.zeros((k, n), Qt.dtype)
    dv = np.empty(n, Qt.dtype)
    v = np.empty(n, Qt.dtype)
    for j in range(k - 1, -1, -1):
        if R[j, j] == 0:
            continue
        _open_column(dQw[j], Qt[j], R[j, j], dv, v)
        for i in range(j - 1, -1, -1):
            dr = -_dot(dv, Qt[i])
            _undo_projection(v, dv, dQw[i], Qt[i], R[i, j], dr)
        dBt[j] = dv
    return dBt


@njit(cache=True, parallel=True, fastmath=_FM)
def mgs_sweep_parallel(Qt, R, dQw):
    """The reverse sweep as a wavefront (bitwise equal to ``mgs_sweep``).

    Column j's backward runs its steps i = j-1..1 in order, and q_i's gradient receives
    the contributions of columns j = k..i+1 in that order, as in the reference; but at
    step t every open column j > t takes its step together: first dR_tj = -dv_j.q_t for
    all j (parallel over j), then each row chunk applies the updates of v_j, dq_t and dv_j
    for j = k..t+1 (parallel over chunks, each owning its elements). Then column t opens.
    ``dQw`` is overwritten, as in ``mgs_sweep``.
    """
    k, n = Qt.shape
    Dv = np.zeros((k, n), Qt.dtype)   # dv_j of every open column; ends as dB
    V = np.empty((k, n), Qt.dtype)    # v_j of every open column, rebuilt step by step
    dR = np.empty(k, Qt.dtype)
    nchunks = (n + _CHUNK - 1) // _CHUNK
    for t in range(k - 1, -1, -1):
        for j in prange(t + 1, k):
            if R[j, j] != 0:
                dR[j] = -_dot(Dv[j], Qt[t])
        for c in prange(nchunks):
            lo = c * _CHUNK
            hi = min(lo + _CHUNK, n)
            qt = Qt[t, lo:hi]
            dqt = dQw[t, lo:hi]
            for j in range(k - 1, t, -1):
                if R[j, j] != 0:
                    _undo_projection(V[j, lo:hi], Dv[j, lo:hi], dqt, qt, R[t, j], dR[j])
        if R[t, t] != 0:
            _open_column(dQw[t], Qt[t], R[t, t], Dv[t], V[t])
    return Dv
