"""Modified Gram-Schmidt and its reverse sweep, on transposed bases (derivations:
docs/derivations.md#gram-schmidt-and-its-reverse-sweep).

Every kernel works on ``Bt = B.T`` (shape ``[k, n]``, C-contiguous), so a column of B is a
contiguous row here and the inner dot/axpy loops vectorise. ``R`` is ``[k, k]`` upper
triangular with ``R[i, j] = q_i . v_j`` (the projection MGS subtracts) and ``R[j, j]`` the
norm of what is left of column j.

Rank threshold: column j is *dropped* when ``R[j, j] <= tol * ||b_j||`` (relative to its
own norm, so Q is unchanged by scaling a column, and a zero column is always dropped).
A dropped column gets ``q_j = 0`` and ``R[j, j] = 0``; the backward gives it ``dB_j = 0``
and it contributes nothing to the other columns' gradients, so Q and dB stay finite
whatever finite B is. A column whose norm is inf or NaN is never dropped. The ops scale
every column by a power of two first (ops/gram_schmidt.py), so that its squared norm
neither overflows nor underflows.

The forms:
* ``mgs`` / ``mgs_sweep``: the reference loop nests (left-looking forward; backward
  column by column, j = k..1, i = j-1..1), serial.
* ``mgs_panels``: MGS with one barrier per panel of PANEL columns, bitwise ``mgs`` at any
  thread count (each column sees its projections in the reference order).
* ``mgs_sweep_blocked``: the sweep with the columns in groups of GROUP that take their
  steps below the group together, two steps i, i-1 per pass over memory (the sweep is
  bound by its stores: v_j and dv_j are written once per two steps, dq_i once per group
  instead of once per column). Every element sees the reference's operations in the
  reference order, except that dR_{i-1,j} = -dv_j.q_{i-1} is computed from dv_j before
  step i plus a correction (mathematically the same number, rounded differently), so it
  matches ``mgs_sweep`` to rounding, not bitwise. Serial: a sweep parallel over rows
  needs a barrier per step; ``mgs_sweep_beside_product`` gives the second thread a
  matrix product instead.

Compile options: ``SERIAL_REASSOC`` / ``PARALLEL_REASSOC`` (runtime/jit.py), i.e.
reassociation so that LLVM vectorises the dot products, in an order fixed at compile
time, and no FMA contraction: every product is rounded before it is added, in every
form, so the forms round alike wherever they do the same operations (``mgs_panels`` is
bitwise ``mgs``).
"""

import numpy as np
from numba import njit, prange

from ..runtime.jit import PARALLEL, PARALLEL_REASSOC, SERIAL, SERIAL_REASSOC
from .basics import copy_into
from .gemm import offset_gemm, padded_operands


@njit(**SERIAL_REASSOC)
def _dot_no_fma(a, b):
    """sum_p a[p] * b[p], reassociated (vectorised) but without FMA contraction, unlike
    ``basics.dot``: every product is rounded before it is added, as in the other kernels
    of this module."""
    s = a.dtype.type(0)
    for p in range(a.shape[0]):
        s += a[p] * b[p]
    return s


@njit(**SERIAL_REASSOC)
def _column_norms(Bt):
    """||b_j|| for every row of Bt (computed as the forward computes them)."""
    k = Bt.shape[0]
    norms = np.empty(k, Bt.dtype)
    for j in range(k):
        norms[j] = np.sqrt(_dot_no_fma(Bt[j], Bt[j]))
    return norms


@njit(**SERIAL_REASSOC)
def _finish_column(Qt, R, j, norm_b, tol):
    """R_jj = |v_j|; q_j = v_j / R_jj, or drop the column (q_j = 0, R_jj = 0) when
    R_jj <= tol ||b_j|| with ||b_j|| finite (a NaN fails that test and an inf column
    skips it, so both propagate, as in PyTorch)."""
    zero = Qt.dtype.type(0)
    r = np.sqrt(_dot_no_fma(Qt[j], Qt[j]))
    if r <= tol * norm_b and np.isfinite(norm_b):
        R[j, j] = zero
        Qt[j, :] = zero
    else:
        R[j, j] = r
        for p in range(Qt.shape[1]):
            Qt[j, p] = Qt[j, p] / r


@njit(**SERIAL_REASSOC)
def _project_out(Qt, R, i, j):
    """MGS step: R_ij = q_i . v_j; v_j -= R_ij q_i."""
    r = _dot_no_fma(Qt[i], Qt[j])
    R[i, j] = r
    for p in range(Qt.shape[1]):
        Qt[j, p] = Qt[j, p] - r * Qt[i, p]


@njit(**SERIAL_REASSOC)
def mgs(Qt, tol):
    """Left-looking MGS: for j: v = b_j; for i < j: R_ij = q_i.v;
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


PANEL = 8  # columns mgs_panels finishes before projecting them out of the later ones


@njit(**PARALLEL_REASSOC)
def mgs_panels(Qt, tol):
    """MGS in panels of PANEL columns, in place like ``mgs`` and bitwise equal to it: the
    panel's columns are finished by left-looking MGS among themselves, then each later
    column j applies the panel's projections, in order, in parallel over j. Column j
    thus sees i = 0..j-1 in order, as in ``mgs``, with one barrier per panel instead of
    one per column. Returns R."""
    k = Qt.shape[0]
    R = np.zeros((k, k), Qt.dtype)
    norms = _column_norms(Qt)
    for p0 in range(0, k, PANEL):
        p1 = min(p0 + PANEL, k)
        for j in range(p0, p1):
            for i in range(p0, j):
                _project_out(Qt, R, i, j)
            _finish_column(Qt, R, j, norms[j], tol)
        for j in prange(p1, k):
            for i in range(p0, p1):
                _project_out(Qt, R, i, j)
    return R


@njit(**SERIAL_REASSOC)
def _open_column(dq, q, rjj, dv, v):
    """Backward through q_j = v_j / R_jj: dv = (dq_j - (dq_j.q_j) q_j) / R_jj, and the
    pre-normalisation v_j = R_jj q_j the projections are undone from."""
    dprod = _dot_no_fma(dq, q)
    for p in range(q.shape[0]):
        dv[p] = (dq[p] - dprod * q[p]) / rjj
        v[p] = rjj * q[p]


@njit(**SERIAL_REASSOC)
def _undo_projection(v, dv, dq, q, rij, dr):
    """One step i of column j's backward, given dr = -dv.q_i (computed before it):
    v += R_ij q_i; dq_i += -R_ij dv + dr v; dv += dr q_i."""
    for p in range(q.shape[0]):
        v[p] = v[p] + rij * q[p]
        dq[p] = dq[p] - rij * dv[p]
        dq[p] = dq[p] + dr * v[p]
        dv[p] = dv[p] + dr * q[p]


@njit(**SERIAL_REASSOC)
def mgs_sweep(Qt, R, dQw):
    """The reverse sweep of MGS: dL/dQ -> dL/dB (all transposed, ``[k, n]``).

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
            dr = -_dot_no_fma(dv, Qt[i])
            _undo_projection(v, dv, dQw[i], Qt[i], R[i, j], dr)
        dBt[j] = dv
    return dBt


GROUP = 4  # columns of mgs_sweep_blocked that take their steps together


@njit(**SERIAL_REASSOC)
def _sweep_step(Qt, dQw, R, i, j, v, dv):
    """Column j's step i of the sweep: dR = -dv.q_i, then ``_undo_projection``."""
    _undo_projection(v, dv, dQw[i], Qt[i], R[i, j], -_dot_no_fma(dv, Qt[i]))


@njit(**SERIAL, inline="always")
def _undo_one(qp, acc, r, dr, v, dv, p):
    """Element p of ``_undo_projection`` for one column, its dq_i term added to ``acc``:
    v += r q_i; acc += -r dv + dr v (in this order); dv += dr q_i."""
    vp = v[p] + r * qp
    dvp = dv[p]
    v[p] = vp
    dv[p] = dvp + dr * qp
    return (acc - r * dvp) + dr * vp


# No fastmath: reassociation could sum the GROUP terms of dq_i in another order.
@njit(**SERIAL)
def _undo_projection_group(q, dq, r, dr, v0, v1, v2, v3, dv0, dv1, dv2, dv3):
    """``_undo_projection`` of step i for GROUP = 4 columns at once, in the order given
    (tuples r[c] = R_ij, dr[c] = dR_ij of the c-th column: scalars, not arrays the
    loop's stores might alias), with q_i and dq_i read once."""
    for p in range(q.shape[0]):
        qp = q[p]
        acc = dq[p]
        acc = _undo_one(qp, acc, r[0], dr[0], v0, dv0, p)
        acc = _undo_one(qp, acc, r[1], dr[1], v1, dv1, p)
        acc = _undo_one(qp, acc, r[2], dr[2], v2, dv2, p)
        acc = _undo_one(qp, acc, r[3], dr[3], v3, dv3, p)
        dq[p] = acc


@njit(**SERIAL_REASSOC)
def _kept_columns(R):
    """Indices j with R_jj != 0 (the columns the forward kept), descending."""
    k = R.shape[0]
    kept = np.empty(k, np.int64)
    m = 0
    for j in range(k - 1, -1, -1):
        if R[j, j] != 0:
            kept[m] = j
            m += 1
    return kept[:m]


@njit(**SERIAL_REASSOC)
def _dot2(d, q1, q2):
    """(d.q1, d.q2) in one pass over d."""
    s1 = d.dtype.type(0)
    s2 = d.dtype.type(0)
    for p in range(d.shape[0]):
        s1 += d[p] * q1[p]
        s2 += d[p] * q2[p]
    return s1, s2


@njit(**SERIAL_REASSOC)
def _two_step_dr(dv, q1, q2, g12):
    """(dR_ij, dR_{i-1,j}) of a column from its dv before step i, with g12 = q_{i-1}.q_i:
    dR_ij = -dv.q_i; step i makes dv' = dv + dR_ij q_i, so dR_{i-1,j} = -dv'.q_{i-1} =
    -(dv.q_{i-1} + dR_ij g12), and both come from one pass over dv."""
    x1, x2 = _dot2(dv, q1, q2)
    dr1 = -x1
    return dr1, -(x2 + dr1 * g12)


@njit(**SERIAL, inline="always")
def _undo_two(q1p, q2p, acc1, acc2, r1, dr1, r2, dr2, v, dv, p):
    """Element p of one column's steps i and i-1 (``_undo_one`` with q_i, then with
    q_{i-1}), v and dv stored once; dq_i's term goes to acc1, dq_{i-1}'s to acc2."""
    vp = v[p] + r1 * q1p
    dvp = dv[p]
    acc1 = (acc1 - r1 * dvp) + dr1 * vp
    dvp = dvp + dr1 * q1p
    vp = vp + r2 * q2p
    acc2 = (acc2 - r2 * dvp) + dr2 * vp
    v[p] = vp
    dv[p] = dvp + dr2 * q2p
    return acc1, acc2


# No fastmath, as in _undo_projection_group.
@njit(**SERIAL)
def _undo_two_steps_group(q1, q2, dq1, dq2, r1, dr1, r2, dr2, v0, v1, v2, v3,
                          dv0, dv1, dv2, dv3):
    """Steps i and i-1 of GROUP = 4 columns in one pass (q1, dq1 = q_i, dq_i; q2, dq2 =
    q_{i-1}, dq_{i-1}; tuples r1, dr1 = R_ij, dR_ij and r2, dr2 = R_{i-1,j}, dR_{i-1,j}
    per column), each dq receiving the columns' terms in the order given."""
    for p in range(q1.shape[0]):
        q1p = q1[p]
        q2p = q2[p]
        a1 = dq1[p]
        a2 = dq2[p]
        a1, a2 = _undo_two(q1p, q2p, a1, a2, r1[0], dr1[0], r2[0], dr2[0], v0, dv0, p)
        a1, a2 = _undo_two(q1p, q2p, a1, a2, r1[1], dr1[1], r2[1], dr2[1], v1, dv1, p)
        a1, a2 = _undo_two(q1p, q2p, a1, a2, r1[2], dr1[2], r2[2], dr2[2], v2, dv2, p)
        a1, a2 = _undo_two(q1p, q2p, a1, a2, r1[3], dr1[3], r2[3], dr2[3], v3, dv3, p)
        dq1[p] = a1
        dq2[p] = a2


@njit(**SERIAL_REASSOC)
def _neighbour_dots(Qt):
    """g[i] = q_{i-1}.q_i (g[0] unused)."""
    g = np.zeros(Qt.shape[0], Qt.dtype)
    for i in range(1, Qt.shape[0]):
        g[i] = _dot_no_fma(Qt[i - 1], Qt[i])
    return g


@njit(**SERIAL_REASSOC)
def _sweep_group_below(Qt, dQw, R, cols, V, Dv, gram):
    """Steps i = cols[-1]-1..0 of the GROUP columns ``cols`` (descending), together, two
    at a time (``_undo_two_steps_group``), the last one alone if their number is odd.
    V[g] and Dv[g] (tuples of rows) hold v and dv of the g-th column."""
    a, b, c, d = cols[0], cols[1], cols[2], cols[3]
    i = d - 1
    while i >= 1:
        q1, q2 = Qt[i], Qt[i - 1]
        e0 = _two_step_dr(Dv[0], q1, q2, gram[i])
        e1 = _two_step_dr(Dv[1], q1, q2, gram[i])
        e2 = _two_step_dr(Dv[2], q1, q2, gram[i])
        e3 = _two_step_dr(Dv[3], q1, q2, gram[i])
        _undo_two_steps_group(q1, q2, dQw[i], dQw[i - 1],
                              (R[i, a], R[i, b], R[i, c], R[i, d]),
                              (e0[0], e1[0], e2[0], e3[0]),
                              (R[i - 1, a], R[i - 1, b], R[i - 1, c], R[i - 1, d]),
                              (e0[1], e1[1], e2[1], e3[1]),
                              V[0], V[1], V[2], V[3], Dv[0], Dv[1], Dv[2], Dv[3])
        i -= 2
    if i == 0:
        q = Qt[0]
        r = (R[0, a], R[0, b], R[0, c], R[0, d])
        dr = (-_dot_no_fma(Dv[0], q), -_dot_no_fma(Dv[1], q), -_dot_no_fma(Dv[2], q),
              -_dot_no_fma(Dv[3], q))
        _undo_projection_group(q, dQw[0], r, dr, V[0], V[1], V[2], V[3],
                               Dv[0], Dv[1], Dv[2], Dv[3])


# Padding of the rows of mgs_sweep_blocked's workspace: with n a multiple of 1024 the
# group's 2 * GROUP rows would be whole pages apart, and a load from one row right after
# a store to another at the same page offset stalls on a false dependency (4K aliasing).
_ROW_PAD = 16


@njit(**SERIAL)
def _padded_rows(work, count, n):
    """``count`` contiguous rows of length n, _ROW_PAD apart, in the flat buffer ``work``
    (1-D slices of a 1-D array, so Numba still sees them contiguous)."""
    w = n + _ROW_PAD
    return [work[r * w: r * w + n] for r in range(count)]


@njit(**SERIAL_REASSOC)
def _sweep_blocked_into(Qt, R, dQw, dBt):
    """``mgs_sweep`` (to rounding), with the kept columns in groups of GROUP, last first.

    In a group j_1 > ... > j_G, each column in turn opens and takes its steps down to
    i = j_G (so dq_i of a column inside the group has every later column's contribution,
    in the reference order, before that column opens); then all G columns take each step
    i < j_G together, two by two (see the module doc), adding to dq_i in the order
    j_1..j_G as the reference does. A last group of fewer than GROUP columns takes those
    steps one column at a time. The group's v and dv live in a padded workspace; dv goes
    to dB when the group is done.
    ``dQw`` is overwritten, as in ``mgs_sweep``; dB.T goes to dBt (zeros on entry)."""
    n = Qt.shape[1]
    rows = _padded_rows(np.empty(2 * GROUP * (n + _ROW_PAD), Qt.dtype), 2 * GROUP, n)
    V = (rows[0], rows[1], rows[2], rows[3])    # v_j of the group's columns, in order
    Dv = (rows[4], rows[5], rows[6], rows[7])   # dv_j likewise
    kept = _kept_columns(R)
    gram = _neighbour_dots(Qt)
    for g0 in range(0, kept.shape[0], GROUP):
        cols = kept[g0: g0 + GROUP]
        last = cols[-1]
        for g in range(cols.shape[0]):
            j = cols[g]
            _open_column(dQw[j], Qt[j], R[j, j], Dv[g], V[g])
            for i in range(j - 1, last - 1, -1):
                _sweep_step(Qt, dQw, R, i, j, V[g], Dv[g])
        if cols.shape[0] == GROUP:
            _sweep_group_below(Qt, dQw, R, cols, V, Dv, gram)
        else:
            for g in range(cols.shape[0]):
                for i in range(last - 1, -1, -1):
                    _sweep_step(Qt, dQw, R, i, cols[g], V[g], Dv[g])
        for g in range(cols.shape[0]):
            copy_into(dBt[cols[g]], Dv[g])


@njit(**SERIAL)
def mgs_sweep_blocked(Qt, R, dQw):
    """dB.T by ``_sweep_blocked_into``; ``dQw`` is overwritten."""
    dBt = np.zeros(Qt.shape, Qt.dtype)
    _sweep_blocked_into(Qt, R, dQw, dBt)
    return dBt


@njit(**PARALLEL)
def mgs_sweep_beside_product(Qt, R, dQw, a, b):
    """(``mgs_sweep_blocked(Qt, R, dQw)``, ``a @ b``) with the product on a second thread
    while the sweep runs: in ono_encode's backward, dL/du = g Q^T does not wait for dL/dB.
    Each job is serial, so the bits do not depend on the thread count."""
    dBt = np.zeros(Qt.shape, Qt.dtype)
    out, a_flat, a_row, b_flat, b_row = padded_operands(a, b)
    for job in prange(2):
        if job == 0:
            _sweep_blocked_into(Qt, R, dQw, dBt)
        else:
            offset_gemm(a_flat, a_row, b_flat, b_row, a.shape[1], out)
    return dBt, out[: a.shape[0], : b.shape[1]]
