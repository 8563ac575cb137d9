"""gram_schmidt (MGS + its reverse sweep), ono_encode, ono_decode."""

import re

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads
from hypothesis import given
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.kernels import gemm
from nbgrad.kernels import gram_schmidt as K
from nbgrad.ops import gram_schmidt as gs_ops
from nbgrad.testing import gradcheck

# -- independent references (plain NumPy, float64) ------------------------------------------


def mgs_numpy(B):
    """Textbook modified Gram-Schmidt on full-rank B: (Q, R)."""
    n, k = B.shape
    Q = np.array(B, dtype=np.float64)
    R = np.zeros((k, k))
    for j in range(k):
        for i in range(j):
            R[i, j] = Q[:, i] @ Q[:, j]
            Q[:, j] -= R[i, j] * Q[:, i]
        R[j, j] = np.linalg.norm(Q[:, j])
        Q[:, j] /= R[j, j]
    return Q, R


def qr_adjoint(Q, R, dQ):
    """Closed-form QR adjoint (docs/derivations.md): dB = [dQ + Q copyltu(-dQ^T Q)] R^{-T}."""
    M = -dQ.T @ Q
    M = np.tril(M) + np.tril(M, -1).T
    return np.linalg.solve(R, (dQ + Q @ M).T).T


def ill_conditioned(rng, n, k, cond):
    U, _ = np.linalg.qr(rng.standard_normal((n, k)))
    V, _ = np.linalg.qr(rng.standard_normal((k, k)))
    return (U * np.logspace(0, -np.log10(cond), k)) @ V.T


def orthogonality_error(Q):
    Q = np.asarray(Q, dtype=np.float64)
    return np.abs(Q.T @ Q - np.eye(Q.shape[1])).max()


def q_and_grad(B, dQ, reorthogonalize=False):
    """Q and dL/dB for L = <Q, dQ>, through the public op."""
    Bt = nb.tensor(B, requires_grad=True)
    Q = nb.gram_schmidt(Bt, reorthogonalize=reorthogonalize)
    Q.backward(dQ)
    return Q.numpy(), Bt.grad.numpy()


# -- forward ----------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(5, 3), (8, 8), (40, 7), (1, 1), (6, 1)])
def test_forward_matches_numpy_mgs(rng, shape):
    B = rng.standard_normal(shape)
    Q = nb.gram_schmidt(B).numpy()
    Q_ref, _ = mgs_numpy(B)
    np.testing.assert_allclose(Q, Q_ref, atol=1e-12)


def test_kernel_R_reconstructs_B(rng):
    B = rng.standard_normal((30, 6))
    Qt = np.array(B.T, order="C")
    R = K.mgs(Qt, 1e-12)
    np.testing.assert_allclose(Qt.T @ R, B, atol=1e-12)
    assert np.all(np.diag(R) > 0) and np.allclose(R, np.triu(R))


def test_orthonormal_float32_well_conditioned(rng):
    B = rng.standard_normal((1024, 64)).astype(np.float32)
    Q = nb.gram_schmidt(B)
    assert Q.dtype == np.float32
    assert orthogonality_error(Q.numpy()) < 1e-5


def test_reorthogonalize_restores_orthogonality_float32(rng):
    B = ill_conditioned(rng, 256, 24, 1e6).astype(np.float32)
    assert np.linalg.cond(B.astype(np.float64)) > 5e5
    once = orthogonality_error(nb.gram_schmidt(B).numpy())
    twice = orthogonality_error(nb.gram_schmidt(B, reorthogonalize=True).numpy())
    assert twice < 1e-5
    assert once > 1e-4          # plain MGS loses orthogonality ~ eps * cond
    assert once > 100 * twice


def test_matches_torch_qr_up_to_signs(rng):
    torch = pytest.importorskip("torch")
    B = rng.standard_normal((50, 9))
    Qt, _ = torch.linalg.qr(torch.tensor(B))
    signs = np.sign(np.diag(Qt.numpy().T @ nb.gram_schmidt(B).numpy()))
    np.testing.assert_allclose(nb.gram_schmidt(B).numpy() * signs, Qt.numpy(), atol=1e-12)


# -- backward ---------------------------------------------------------------------------------


@pytest.mark.parametrize("reorthogonalize", [False, True])
@pytest.mark.parametrize("shape", [(6, 4), (12, 12), (200, 9)])
def test_sweep_matches_closed_form_adjoint(rng, shape, reorthogonalize):
    # QR with positive diagonal is unique, so one or two MGS passes are the same function
    # of B and both backward paths must equal the closed-form adjoint with R = Q^T B.
    B = rng.standard_normal(shape)
    dQ = rng.standard_normal(shape)
    Q, dB = q_and_grad(B, dQ, reorthogonalize)
    np.testing.assert_allclose(dB, qr_adjoint(Q, Q.T @ B, dQ), rtol=1e-9, atol=1e-10)


def test_gradcheck_gram_schmidt():
    rng = np.random.default_rng(3)
    for shape in [(5, 3), (4, 4), (9, 1)]:
        for reorth in (False, True):
            gradcheck(lambda b, r=reorth: nb.gram_schmidt(b, reorthogonalize=r),
                      [rng.standard_normal(shape)])


def test_gradcheck_ono_every_argument(rng):
    B = rng.standard_normal((7, 3))
    gradcheck(nb.ono_encode, [rng.standard_normal((4, 7)), B])
    gradcheck(nb.ono_decode, [rng.standard_normal((4, 3)), B])
    gradcheck(lambda u, b: nb.ono_encode(u, b, reorthogonalize=True),
              [rng.standard_normal((2, 7)), B])
    gradcheck(nb.ono_encode, [rng.standard_normal(7), B])  # unbatched field


@given(n=st.integers(1, 9), extra=st.integers(0, 4), re=st.booleans(),
       seed=st.integers(0, 2**31))
def test_property_gradcheck_and_orthogonality(n, extra, re, seed):
    k = max(1, n - extra)
    rng = np.random.default_rng(seed)
    B = rng.standard_normal((n, k)) + 2.0 * np.eye(n, k)   # keep it well conditioned
    Q = nb.gram_schmidt(B, reorthogonalize=re).numpy()
    np.testing.assert_allclose(Q, mgs_numpy(B)[0], atol=1e-10)
    # one MGS sweep loses orthogonality in proportion to cond(B) eps (seed 2582, n = 4:
    # cond 1.3e4, error 1.55e-12); the second sweep brings it to about eps
    eps = np.finfo(np.float64).eps
    bound = 1e-12 if re else max(1e-12, 10 * np.linalg.cond(B) * eps)
    assert orthogonality_error(Q) < bound
    gradcheck(lambda b: nb.gram_schmidt(b, reorthogonalize=re), [B])


def test_ono_forward_and_grads_against_numpy(rng):
    u, x = rng.standard_normal((5, 20)), rng.standard_normal((5, 6))
    B = rng.standard_normal((20, 6))
    Q, R = mgs_numpy(B)
    gy = rng.standard_normal((5, 6))
    ut, Bt = nb.tensor(u, requires_grad=True), nb.tensor(B, requires_grad=True)
    y = nb.ono_encode(ut, Bt)
    np.testing.assert_allclose(y.numpy(), u @ Q, atol=1e-12)
    y.backward(gy)
    np.testing.assert_allclose(ut.grad.numpy(), gy @ Q.T, atol=1e-12)
    np.testing.assert_allclose(Bt.grad.numpy(), qr_adjoint(Q, R, u.T @ gy), atol=1e-10)
    gz = rng.standard_normal((5, 20))
    xt, Bt = nb.tensor(x, requires_grad=True), nb.tensor(B, requires_grad=True)
    z = nb.ono_decode(xt, Bt)
    np.testing.assert_allclose(z.numpy(), x @ Q.T, atol=1e-12)
    z.backward(gz)
    np.testing.assert_allclose(xt.grad.numpy(), gz @ Q, atol=1e-12)
    np.testing.assert_allclose(Bt.grad.numpy(), qr_adjoint(Q, R, gz.T @ x), atol=1e-10)


@pytest.mark.parametrize("beside_max_ratio", [gs_ops._BESIDE_MAX_RATIO, 0])
@pytest.mark.parametrize("op", ["ono_encode", "ono_decode"])
def test_ono_gradients_of_one_input_equal_those_of_both(rng, monkeypatch, op,
                                                         beside_max_ratio):
    # Backward runs the dL/du product beside the sweep when both are wanted (or after it,
    # when it is much longer), alone otherwise: the same bits in every case.
    monkeypatch.setattr(gs_ops, "_BESIDE_MAX_RATIO", beside_max_ratio)
    B = rng.standard_normal((30, 5)).astype(np.float32)
    a = rng.standard_normal((4, 30 if op == "ono_encode" else 5)).astype(np.float32)

    def grads(wants_a, wants_B):
        at, Bt = nb.tensor(a, requires_grad=wants_a), nb.tensor(B, requires_grad=wants_B)
        y = getattr(nb, op)(at, Bt)
        y.backward(np.ones(y.shape, np.float32))
        return at.grad, Bt.grad

    both = grads(True, True)
    assert_same_bits(grads(True, False)[0].numpy(), both[0].numpy())
    assert_same_bits(grads(False, True)[1].numpy(), both[1].numpy())


def test_ono_mixed_dtypes_promote_like_matmul(rng):
    u = nb.tensor(rng.standard_normal((3, 9)).astype(np.float32), requires_grad=True)
    B = nb.tensor(rng.standard_normal((9, 4)), requires_grad=True)
    y = nb.ono_encode(u, B)
    assert y.dtype == np.float64
    y.backward(np.ones(y.shape))
    assert u.grad.dtype == np.float32 and B.grad.dtype == np.float64
    np.testing.assert_allclose(y.numpy(), u.numpy() @ mgs_numpy(B.numpy())[0], atol=1e-6)


@pytest.mark.parametrize("op", ["ono_encode", "ono_decode"])
def test_one_sweep_per_backward_whatever_the_batch(rng, monkeypatch, op):
    calls = []
    sweep = gs_ops._sweep
    monkeypatch.setattr(gs_ops, "_sweep", lambda *a: calls.append(1) or sweep(*a))
    B = nb.tensor(rng.standard_normal((16, 4)), requires_grad=True)
    width = 16 if op == "ono_encode" else 4
    u = nb.tensor(rng.standard_normal((64, width)), requires_grad=True)
    y = getattr(nb, op)(u, B)
    y.backward(np.ones(y.shape))
    assert len(calls) == 1


def test_broadcast_upstream_gradient(rng):
    # A 0-stride or transposed upstream view (as sum().backward() or a transpose hand
    # over) gives the same result as the contiguous array.
    B = rng.standard_normal((7, 3))
    _, dB = q_and_grad(B, np.ones((7, 3)))
    _, dB_view = q_and_grad(B, np.broadcast_to(np.ones(3), (7, 3)))
    np.testing.assert_array_equal(dB_view, dB)
    G = rng.standard_normal((3, 7))
    np.testing.assert_array_equal(q_and_grad(B, G.T)[1], q_and_grad(B, G.T.copy())[1])


def test_inputs_and_upstream_gradient_not_modified(rng):
    # The kernels work in place on copies: B and g must come back untouched, whatever
    # their layout (B.T and g.T of C arrays are what the kernels' work arrays look like).
    for B in (rng.standard_normal((9, 4)), rng.standard_normal((4, 9)).T):
        g = rng.standard_normal((4, 9)).T
        Bt = nb.Tensor._wrap(B, None, 0).requires_grad_()    # the op sees B itself
        B0, g0 = B.copy(), g.copy()
        nb.gram_schmidt(Bt, reorthogonalize=True).backward(g)
        np.testing.assert_array_equal(B, B0)
        np.testing.assert_array_equal(g, g0)


def test_float32_gradient_close_to_float64(rng):
    B = rng.standard_normal((64, 8))
    dQ = rng.standard_normal((64, 8))
    _, d64 = q_and_grad(B, dQ)
    Q32, d32 = q_and_grad(B.astype(np.float32), dQ.astype(np.float32))
    assert Q32.dtype == d32.dtype == np.float32
    np.testing.assert_allclose(d32, d64, rtol=1e-3, atol=1e-4)


# -- rank deficiency ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["zero", "duplicate", "combination"])
def test_dependent_column_is_dropped(rng, dtype, kind):
    # Small integers, so the dependency is exact in float32 too.
    B = rng.integers(-4, 5, (6, 4)).astype(dtype) + 9 * np.eye(6, 4, dtype=dtype)
    if kind == "zero":
        B[:, 2] = 0
    elif kind == "duplicate":
        B[:, 2] = B[:, 0]
    else:
        B[:, 2] = B[:, 0] - 2 * B[:, 1]
    dQ = rng.standard_normal((6, 4)).astype(dtype)
    for reorth in (False, True):
        Q, dB = q_and_grad(B, dQ, reorth)
        assert np.isfinite(Q).all() and np.isfinite(dB).all()
        assert not Q[:, 2].any() and not dB[:, 2].any()
        # The other columns are exactly what B without column 2 gives.
        keep = [0, 1, 3]
        Q_kept, dB_kept = q_and_grad(B[:, keep], dQ[:, keep], reorth)
        np.testing.assert_array_equal(Q[:, keep], Q_kept)
        np.testing.assert_array_equal(dB[:, keep], dB_kept)


@given(n=st.integers(2, 8), extra=st.integers(0, 3), f32=st.booleans(), re=st.booleans(),
       seed=st.integers(0, 2**31))
def test_property_rank_deficient_stays_finite(n, extra, f32, re, seed):
    # Column j an exact integer combination of earlier ones. Whether it is dropped depends
    # on the rounding residue (a combination with heavy cancellation can leave more than
    # the threshold), but Q and dB are finite and every column is zero or unit length.
    rng = np.random.default_rng(seed)
    k = max(2, n - extra)
    dtype = np.float32 if f32 else np.float64
    B = rng.integers(-4, 5, (n, k)).astype(dtype)
    j = int(rng.integers(1, k))
    B[:, j] = B[:, :j] @ rng.integers(-2, 3, j).astype(dtype)
    Q, dB = q_and_grad(B, rng.standard_normal((n, k)).astype(dtype), re)
    assert np.isfinite(Q).all() and np.isfinite(dB).all()
    norms = np.linalg.norm(Q.astype(np.float64), axis=0)
    assert np.all((norms == 0) | (np.abs(norms - 1) < 1e-5))


def test_rank_deficient_gradcheck_of_kept_columns(rng):
    # With column 1 held at zero, the kept columns 0 and 2 are a smooth function of
    # themselves: gradcheck them (placed and picked with constant 0/1 matrices).
    place = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])     # [2, 3]: kept -> B
    gradcheck(lambda b02: nb.gram_schmidt(b02 @ place) @ place.T,
              [rng.standard_normal((5, 2))])


def test_tiny_but_independent_column_is_kept(rng):
    B = rng.standard_normal((8, 3))
    scaled = B * np.array([1.0, 1e-30, 1.0])
    np.testing.assert_allclose(nb.gram_schmidt(scaled).numpy(), nb.gram_schmidt(B).numpy(),
                               atol=1e-12)


def test_nan_propagates_instead_of_dropping_the_column(rng):
    B = rng.standard_normal((6, 3))
    B[2, 1] = np.nan
    Q, dB = q_and_grad(B, np.ones((6, 3)))
    assert np.isfinite(Q[:, 0]).all()
    assert np.isnan(Q[:, 1]).all() and np.isnan(Q[:, 2]).all()
    assert np.isnan(dB).any()


@pytest.mark.parametrize("column", [0, 1])
def test_inf_column_propagates_instead_of_being_dropped(rng, column):
    # R_jj = |b_j| = inf passes the relative test R_jj <= tol |b_j|, but a column with an
    # infinite norm is kept: q_j = v_j / R_jj is NaN where v_j is inf, and so are all
    # the later columns
    B = rng.standard_normal((6, 3))
    B[2, column] = np.inf
    Q, dB = q_and_grad(B, np.ones((6, 3)))
    assert np.isfinite(Q[:, :column]).all()
    assert np.isnan(Q[2, column]) and np.isnan(Q[:, column + 1:]).all()
    assert np.isnan(dB[:, column]).any()


# Powers of two whose squares overflow or underflow (the last ones give subnormal columns).
EXTREME_SCALES = {np.float64: [2.0 ** 600, 2.0 ** -600, 2.0 ** -1070],
                  np.float32: [2.0 ** 100, 2.0 ** -100, 2.0 ** -140]}


@pytest.mark.parametrize("reorthogonalize", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_columns_of_huge_or_subnormal_entries(rng, dtype, reorthogonalize):
    # Scaling column j by a power of two c_j leaves Q unchanged, bit for bit, and divides
    # dL/db_j by c_j, also where |b_j|^2 would overflow or underflow.
    B = rng.standard_normal((7, 4)).astype(dtype)
    B[:, 3] = rng.integers(-15, 16, 7)  # small integers: exact even as subnormals
    dQ = rng.standard_normal((7, 4)).astype(dtype)
    c = np.array([1.0, *EXTREME_SCALES[dtype]], dtype=dtype)
    Q, dB = q_and_grad(B, dQ, reorthogonalize)
    Qc, dBc = q_and_grad(B * c, dQ, reorthogonalize)
    assert_same_bits(Qc, Q)
    # (the subnormal column's gradient, ~1 / |b_3|, is beyond the float range)
    assert_same_bits((dBc * c)[:, :3], dB[:, :3])
    passes = gs_ops._passes(B * c, reorthogonalize)
    recomputed = gs_ops._mgs_passes(nb.tensor(B * c), passes).numpy()
    np.testing.assert_allclose(recomputed, Q, rtol=0, atol=1e-6 if dtype == np.float32
                               else 1e-12)


def test_nearly_dependent_stays_finite(rng):
    B = rng.standard_normal((10, 4)).astype(np.float32)
    B[:, 3] = B[:, 0] + 1e-6 * rng.standard_normal(10).astype(np.float32)
    Q, dB = q_and_grad(B, np.ones((10, 4), np.float32))
    assert np.isfinite(Q).all() and np.isfinite(dB).all()


# -- parallel forms and determinism ----------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k", [1, 8, 9, 20])
def test_mgs_panels_bitwise_equal_reference_at_1_and_2_threads(rng, dtype, k):
    # One panel, a whole panel, a panel and one column, panels with a dropped column.
    n = 90
    Bt = rng.standard_normal((k, n)).astype(dtype)
    if k > 10:
        Bt[10] = Bt[2] + Bt[9]
    tol = dtype(gs_ops.rank_tolerance(dtype, k))
    Qt = Bt.copy()
    R = K.mgs(Qt, tol)
    assert k <= 10 or R[10, 10] == 0
    for threads in (1, 2):
        Qp = Bt.copy()
        assert_same_bits(at_threads(threads, K.mgs_panels, Qp, tol), R)
        assert_same_bits(Qp, Qt)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k", [1, 4, 7, 9, 16])
def test_blocked_sweep_matches_reference(rng, dtype, k):
    # Groups of GROUP = 4 kept columns (an even and an odd number of steps below them) and
    # a short last group; a dropped column shifts the groups (they are formed from the
    # kept columns only). Only dR_{i-1,j} of a step pair is rounded differently.
    n = 130
    Bt = rng.standard_normal((k, n)).astype(dtype)
    if k > 5:
        Bt[5] = Bt[1] - 2 * Bt[3]
    Qt = Bt.copy()
    R = K.mgs(Qt, dtype(gs_ops.rank_tolerance(dtype, k)))
    assert k <= 5 or R[5, 5] == 0
    dQt = rng.standard_normal((k, n)).astype(dtype)
    ref = K.mgs_sweep(Qt, R, dQt.copy())
    blocked = K.mgs_sweep_blocked(Qt, R, dQt.copy())
    assert k <= 5 or not blocked[5].any()
    tol = 1e-5 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(blocked, ref, rtol=0, atol=tol * np.abs(ref).max())


def test_blocked_sweep_at_w7_size_close_to_float64_reference(rng):
    B = rng.standard_normal((1024, 64))
    dQt = rng.standard_normal((64, 1024))
    Qt64 = B.T.copy()
    R64 = K.mgs(Qt64, 1e-12)
    ref = K.mgs_sweep(Qt64, R64, dQt.copy())
    Qt = B.T.astype(np.float32)
    R = K.mgs(Qt, np.float32(1e-6))
    ref32 = K.mgs_sweep(Qt, R, dQt.astype(np.float32))
    blocked = K.mgs_sweep_blocked(Qt, R, dQt.astype(np.float32))
    # As close to the float64 sweep as the float32 reference loop is.
    err_ref = np.abs(ref32 - ref).max()
    assert np.abs(blocked - ref).max() < 2 * err_ref


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sweep_beside_product_bitwise_at_1_and_2_threads(rng, dtype):
    n, k, S = 200, 10, 13
    Bt = rng.standard_normal((k, n)).astype(dtype)
    Qt = Bt.copy()
    R = K.mgs(Qt, dtype(gs_ops.rank_tolerance(dtype, k)))
    dQt = rng.standard_normal((k, n)).astype(dtype)
    g = rng.standard_normal((S, k)).astype(dtype)
    dBt = K.mgs_sweep_blocked(Qt, R, dQt.copy())
    for threads in (1, 2):
        sweep, product = at_threads(threads, K.mgs_sweep_beside_product, Qt, R, dQt.copy(),
                                    g, Qt)
        assert_same_bits(sweep, dBt)
        assert_same_bits(product, gemm.matmul(g, Qt))


@pytest.mark.parametrize("op", ["ono_encode", "ono_decode"])
def test_op_bitwise_at_1_and_2_threads(rng, op):
    B = rng.standard_normal((300, 16)).astype(np.float32)
    a = rng.standard_normal((20, 300 if op == "ono_encode" else 16)).astype(np.float32)

    def run():
        at, Bt = nb.tensor(a, requires_grad=True), nb.tensor(B, requires_grad=True)
        y = getattr(nb, op)(at, Bt, reorthogonalize=True)
        y.backward(np.cos(np.arange(y.numel(), dtype=np.float32)).reshape(y.shape))
        return y.numpy(), at.grad.numpy(), Bt.grad.numpy()

    for x, y in zip(at_threads(1, run), at_threads(2, run)):
        assert_same_bits(x, y)


# -- products of ono_encode / ono_decode (kernels/gemm.py) -------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(256, 1024, 64), (256, 64, 1024), (64, 256, 1024),
                                   (7, 5, 3), (13, 17, 130), (1, 1, 1), (0, 3, 4),
                                   (5, 0, 70), (6, 4, 0)])
def test_bases_matmul_against_numpy_and_bitwise_at_1_and_2_threads(rng, dtype, shape):
    # Rows and columns that are and are not whole micro-tiles (gemm.MR, gemm.NR), an empty
    # product, and a zero inner dimension.
    M, Kd, P = shape
    a = rng.standard_normal((M, Kd)).astype(dtype)
    b = rng.standard_normal((Kd, P)).astype(dtype)
    one = at_threads(1, gemm.matmul, a, b)
    assert one.shape == (M, P) and one.dtype == dtype
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(one, a.astype(np.float64) @ b, rtol=tol, atol=tol * Kd)
    assert_same_bits(at_threads(2, gemm.matmul, a, b), one)
    assert_same_bits(gemm.matmul.serial(a, b), one)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(64, 1024), (65, 100), (256, 64), (7, 45), (0, 3), (3, 0),
                                   (1, 1)])
def test_bases_transpose(rng, shape, dtype):
    # Both forms: row by row (up to SHORT = 64 rows) and block by block.
    x = rng.standard_normal(shape).astype(dtype)
    xt = gemm.transpose(x)
    assert xt.flags.c_contiguous
    np.testing.assert_array_equal(xt, x.T)


# -- PyTorch oracle: autograd through the same MGS math ----------------------------------------


def torch_mgs(torch, B):
    cols = []
    for j in range(B.shape[1]):
        v = B[:, j]
        for q in cols:
            v = v - (q @ v) * q
        cols.append(v / torch.linalg.norm(v))
    return torch.stack(cols, dim=1)


@pytest.mark.parametrize("reorthogonalize", [False, True])
def test_torch_autograd_through_mgs(rng, reorthogonalize):
    torch = pytest.importorskip("torch")
    B = rng.standard_normal((30, 6))
    u = rng.standard_normal((4, 30))
    g = rng.standard_normal((4, 6))
    Btorch = torch.tensor(B, requires_grad=True)
    Q = torch_mgs(torch, Btorch)
    if reorthogonalize:
        Q = torch_mgs(torch, Q)
    y = torch.tensor(u) @ Q
    y.backward(torch.tensor(g))
    Bt = nb.tensor(B, requires_grad=True)
    ours = nb.ono_encode(u, Bt, reorthogonalize=reorthogonalize)
    ours.backward(g)
    np.testing.assert_allclose(ours.numpy(), y.detach().numpy(), atol=1e-12)
    np.testing.assert_allclose(Bt.grad.numpy(), Btorch.grad.numpy(), atol=1e-10)


# -- second derivatives: the vjps recompute MGS with differentiable ops ----------------------


@pytest.mark.parametrize("shape", [(9, 4), (5, 5), (20, 11), (6, 1)])
@pytest.mark.parametrize("reorthogonalize", [False, True])
@pytest.mark.parametrize("dependent", [False, True])
def test_differentiable_mgs_gives_the_kernel_q(rng, shape, reorthogonalize, dependent):
    B = rng.standard_normal(shape)
    if dependent and shape[1] > 2:
        B[:, 2] = B[:, 0] - 2 * B[:, 1]
    passes = gs_ops._passes(B, reorthogonalize)
    Q = gs_ops._mgs_passes(nb.tensor(B), passes).numpy()
    np.testing.assert_allclose(Q, passes[-1][0].T, rtol=0, atol=1e-12)


def torch_second_derivative(torch, u, B, g, w, reorthogonalize, decode=False):
    """d/d(u, B) of <d<u @ Q(B), g>/dB, w> with Q = torch_mgs (twice if reorthogonalized;
    Q.T for decode)."""
    ut, Bt = torch.tensor(u, requires_grad=True), torch.tensor(B, requires_grad=True)
    Q = torch_mgs(torch, Bt)
    if reorthogonalize:
        Q = torch_mgs(torch, Q)
    y = ut @ (Q.T if decode else Q)
    (dB,) = torch.autograd.grad(y, Bt, torch.tensor(g), create_graph=True)
    return [a.numpy() for a in torch.autograd.grad((dB * torch.tensor(w)).sum(), (ut, Bt))]


def nb_second_derivative(op, u, B, g, w, reorthogonalize):
    ut, Bt = nb.tensor(u, requires_grad=True), nb.tensor(B, requires_grad=True)
    (dB,) = nb.grad(op(ut, Bt, reorthogonalize), Bt, grad_outputs=g, create_graph=True)
    return [a.numpy() for a in nb.grad((dB * w).sum(), [ut, Bt])]


@pytest.mark.parametrize("reorthogonalize", [False, True])
def test_torch_second_derivative_through_mgs(rng, reorthogonalize):
    torch = pytest.importorskip("torch")
    B = rng.standard_normal((12, 4))
    u = rng.standard_normal((3, 12))
    g = rng.standard_normal((3, 4))
    w = rng.standard_normal((12, 4))
    want = torch_second_derivative(torch, u, B, g, w, reorthogonalize)
    got = nb_second_derivative(nb.ono_encode, u, B, g, w, reorthogonalize)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9)
    x, gx = rng.standard_normal((3, 4)), rng.standard_normal((3, 12))
    want_decode = torch_second_derivative(torch, x, B, gx, w, reorthogonalize, decode=True)
    got = nb_second_derivative(nb.ono_decode, x, B, gx, w, reorthogonalize)
    for a, b in zip(got, want_decode):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9)
    # gram_schmidt alone: <u @ Q, g> = <Q, u^T g>
    Bt = nb.tensor(B, requires_grad=True)
    (dB,) = nb.grad(nb.gram_schmidt(Bt, reorthogonalize), Bt, grad_outputs=u.T @ g,
                    create_graph=True)
    (d2,) = nb.grad((dB * w).sum(), Bt)
    np.testing.assert_allclose(d2.numpy(), want[1], rtol=1e-9, atol=1e-9)


def test_dropped_column_has_zero_second_derivative(rng):
    B = rng.integers(-4, 5, (7, 4)).astype(np.float64) + 9 * np.eye(7, 4)
    B[:, 2] = B[:, 0] - 2 * B[:, 1]
    u, g, w = rng.standard_normal((2, 7)), rng.standard_normal((2, 4)), rng.standard_normal((7, 4))
    keep = [0, 1, 3]
    for reorth in (False, True):
        du, dB = nb_second_derivative(nb.ono_encode, u, B, g, w, reorth)
        assert np.isfinite(du).all() and np.isfinite(dB).all() and not dB[:, 2].any()
        du_kept, dB_kept = nb_second_derivative(nb.ono_encode, u, B[:, keep], g[:, keep],
                                                w[:, keep], reorth)
        np.testing.assert_allclose(du, du_kept, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(dB[:, keep], dB_kept, rtol=1e-12, atol=1e-12)


def test_torch_qr_gradient_up_to_signs(rng):
    torch = pytest.importorskip("torch")
    B = rng.standard_normal((40, 5))
    G = rng.standard_normal((40, 5))
    Btorch = torch.tensor(B, requires_grad=True)
    Qtorch, _ = torch.linalg.qr(Btorch)
    (Qtorch * torch.tensor(G)).sum().backward()
    signs = np.sign(np.diag(Qtorch.detach().numpy().T @ nb.gram_schmidt(B).numpy()))
    # Q_torch = Q D, so <Q_torch, G> = <Q, G D>.
    _, dB = q_and_grad(B, G * signs)
    np.testing.assert_allclose(dB, Btorch.grad.numpy(), atol=1e-10)


# -- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(5,), (2, 3, 4), ()])
def test_not_2d_raises(shape):
    with pytest.raises(ValueError, match=r"gram_schmidt: B must be 2-D \[n, k\], got shape "
                       + re.escape(str(shape))):
        nb.gram_schmidt(np.ones(shape))


def test_more_columns_than_rows_raises():
    with pytest.raises(ValueError, match=r"gram_schmidt: B has shape \(3, 5\).*n >= k"):
        nb.gram_schmidt(np.ones((3, 5)))


def test_integer_basis_raises():
    with pytest.raises(TypeError, match="gram_schmidt: B must be float32 or float64, got"):
        nb.gram_schmidt(np.ones((3, 2), dtype=np.int64))


def test_ono_shape_mismatch_raises():
    B = np.ones((6, 3))
    with pytest.raises(ValueError, match=r"ono_encode: u has shape \(2, 5\) but B has shape "
                                         r"\(6, 3\).*n = 6"):
        nb.ono_encode(np.ones((2, 5)), B)
    with pytest.raises(ValueError, match=r"ono_decode: x has shape \(2, 6\) but B has shape "
                                         r"\(6, 3\).*k = 3"):
        nb.ono_decode(np.ones((2, 6)), B)
    with pytest.raises(ValueError, match=r"ono_encode: B must be 2-D"):
        nb.ono_encode(np.ones((2, 6)), np.ones(6))


@pytest.mark.parametrize("shape", [(5, 0), (0, 0)])
def test_empty_basis(shape):
    Q, dB = q_and_grad(np.ones(shape), np.ones(shape))
    assert Q.shape == dB.shape == shape


@pytest.mark.parametrize("create_graph", [False, True])
@pytest.mark.parametrize("batch, B_shape", [((0,), (5, 3)), ((0, 2), (5, 3)), ((2, 0), (5, 3)),
                                            ((2,), (5, 0)), ((2,), (0, 0)), ((0,), (0, 0))])
@pytest.mark.parametrize("op", ["ono_encode", "ono_decode"])
def test_ono_empty_operands(rng, op, batch, B_shape, create_graph):
    # like einsum('...n,nk->...k', u, Q): an empty result and zero gradients
    n, k = B_shape
    decode = op == "ono_decode"
    a = nb.tensor(rng.standard_normal(batch + (k if decode else n,)), requires_grad=True)
    B = nb.tensor(rng.standard_normal(B_shape), requires_grad=True)
    y = getattr(nb, op)(a, B)
    assert y.shape == batch + (n if decode else k,)
    np.testing.assert_array_equal(y.numpy(), 0)
    da, dB = nb.grad(y.sum(), [a, B], create_graph=create_graph)
    assert da.shape == a.shape and dB.shape == B_shape
    np.testing.assert_array_equal(da.numpy(), 0)
    np.testing.assert_array_equal(dB.numpy(), 0)
