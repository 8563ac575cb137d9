"""Non-finite, extreme and empty inputs to the graph and basis operators, against
references written with PyTorch element-wise ops (products broadcast and summed: no BLAS
call, whose kernels may skip a zero and so turn 0 * inf into 0): gno_aggregate,
gno_kernel, gno (in its re-associated form), gram_schmidt, ono_encode/decode,
lno_encode/decode.

Inputs and upstream gradients come from ``special_arrays``: NaN, +-inf, +-0.0, huge and
subnormal values among ordinary ones, in shapes that may be empty. Outputs and gradients
must have the reference's NaN positions and inf positions and signs; finite values agree
to rounding, measured against the same reference run on the absolute values (the sum of
the absolute values of the terms), since the two sum in different orders.

Two limits keep "the reference's NaN positions" well defined:
* huge values are as large as the op allows without a finite product overflowing. With
  FMA (the gno and matmul kernels), a product that overflows is rounded only after it is
  added, so its sum with an infinity of the other sign is that infinity, where a sum of
  rounded products is inf - inf = NaN. Infinities themselves are drawn freely. (Huge
  values whose squares overflow go into gram_schmidt, compiled without FMA.)
* relu's inputs (edge features, U, b_u) take no huge or subnormal values: with them a
  pre-activation can be exactly 0 in one summation order and a rounding residue in
  another, and relu's mask would differ.
"""

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.ops.gram_schmidt import rank_tolerance
from nbgrad.testing.strategies_graph import random_graphs, special_arrays

torch = pytest.importorskip("torch")

SETTINGS = settings(max_examples=30, deadline=None)
dtypes = st.sampled_from([np.float32, np.float64])
graphs = random_graphs(min_nodes=0, max_nodes=5, max_edges=8)
reduces = st.sampled_from(["sum", "mean"])

# -- comparison ----------------------------------------------------------------------------


def assert_matches(got, want, scale, what, rtol, exact_nonfinite=True):
    """NaN positions, inf positions and signs as in ``want``; finite values within
    ``rtol * |scale|`` (plus subnormal rounding). With ``exact_nonfinite=False`` only the
    non-finite positions must agree (NaN or inf either way)."""
    got, want, scale = (np.asarray(a) for a in (got, want, scale))
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    checks = ((("NaN", np.isnan), ("+inf", np.isposinf), ("-inf", np.isneginf))
              if exact_nonfinite else (("non-finite", lambda a: ~np.isfinite(a)),))
    for name, test in checks:
        differ = test(got) != test(want)
        assert not differ.any(), (f"{what}: {name} positions differ at "
                                  f"{np.argwhere(differ)[:4].tolist()}: got {got[differ][:4]}, "
                                  f"want {want[differ][:4]}")
    finite = np.isfinite(want)
    with np.errstate(over="ignore", invalid="ignore"):
        bound = rtol * np.abs(scale[finite]) + 2.0 ** 20 * np.finfo(want.dtype).smallest_subnormal
        bound[~np.isfinite(bound)] = np.inf  # the terms' sizes overflowed: any finite value
        excess = np.abs(got[finite] - want[finite]) - bound
    worst = np.argmax(excess) if excess.size else 0
    assert not np.any(excess > 0), (f"{what}: {got[finite][worst]} != {want[finite][worst]} "
                                    f"(scale {scale[finite][worst]})")


def run_nbgrad(fn, arrays, upstream):
    """fn(*tensors) and the gradients of <fn, upstream> (zeros where nbgrad gives None)."""
    tensors = [nb.tensor(a, requires_grad=True) for a in arrays]
    out = fn(*tensors)
    grads = nb.grad(out, tensors, grad_outputs=nb.tensor(upstream))
    return out.numpy(), [np.zeros_like(a) if g is None else g.numpy()
                         for a, g in zip(arrays, grads)]


def run_torch(fn, arrays, upstream):
    """Like ``run_nbgrad``, with zero gradients where the output does not depend on the
    inputs (every column of a Gram-Schmidt basis dropped)."""
    tensors = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = fn(*tensors)
    grads = [None] * len(arrays)
    if out.requires_grad:
        grads = torch.autograd.grad(out, tensors, torch.tensor(upstream), allow_unused=True)
    return out.detach().numpy(), [np.zeros_like(a) if g is None else g.numpy()
                                  for a, g in zip(arrays, grads)]


def largest_finite(*arrays):
    """The largest finite |entry| of the arrays, at least 1."""
    return max([1.0] + [float(np.abs(a[np.isfinite(a)]).max(initial=0)) for a in arrays])


def compare(nb_fn, torch_fn, arrays, upstream, what, sweep_scales=None):
    """nb_fn against torch_fn: the output and the gradient of every array.

    Multilinear ops sum the reference's terms in another order: finite values agree to
    rounding of the sum of the terms' absolute values, the reference run on |inputs|.

    ``sweep_scales`` (forward, gradient): for gram_schmidt and ONO, whose backward is its
    own sweep, equal to autograd of the loop in exact arithmetic but not operation for
    operation, the sizes the finite values agree relative to (their rank decisions are
    far from the threshold, see ``well_separated``), and a gradient's non-finite entries
    agree but may be NaN in one and inf in the other."""
    out, grads = run_nbgrad(nb_fn, arrays, upstream)
    ref, ref_grads = run_torch(torch_fn, arrays, upstream)
    eps = float(np.finfo(ref.dtype).eps)
    if sweep_scales is None:
        rtol = 256 * eps
        with np.errstate(all="ignore"):
            scale, scale_grads = run_torch(torch_fn, [np.abs(a) for a in arrays],
                                           np.abs(upstream))
    else:
        rtol = (1e10 if ref.dtype == np.float64 else 1e5) * eps
        scale = np.full(ref.shape, sweep_scales[0])
        scale_grads = [np.full(r.shape, sweep_scales[1]) for r in ref_grads]
    assert_matches(out, ref, scale, f"{what} forward", rtol)
    for k, (g, r, s) in enumerate(zip(grads, ref_grads, scale_grads)):
        assert_matches(g, r, s, f"{what} gradient of input {k}", rtol, sweep_scales is None)


# -- references ------------------------------------------------------------------------------


class Relu(torch.autograd.Function):
    """relu as the fused GNO defines it (docs/derivations.md#graph-neural-operator): NaN
    propagates forward, and the backward mask [y > 0] is 0 at a NaN (torch.relu's and
    nb.relu's backward let g through there)."""

    @staticmethod
    def forward(ctx, x):
        y = torch.relu(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return torch.where(y > 0, g, torch.zeros_like(g))


def matvec(A, x):
    """sum_i A[..., i] x[..., i] by broadcasting: every product, no BLAS."""
    return (A * x).sum(-1)


def csr_indices(graph):
    return [torch.tensor(np.array(a)) for a in (graph.row, graph.col, graph.edge_id)]


def mean_divisor(graph, dtype):
    return torch.as_tensor(np.maximum(graph.degree, 1), dtype=dtype)[:, None]


def aggregate_ref(graph, reduce):
    """m_i = sum_{p in row i} K[edge_id p] @ h[col p] with index_add."""
    row, col, eid = csr_indices(graph)

    def ref(h, K):
        msg = matvec(K[eid], h[col][:, None, :])
        m = torch.zeros(graph.num_nodes, K.shape[1], dtype=h.dtype).index_add(0, row, msg)
        return m / mean_divisor(graph, h.dtype) if reduce == "mean" else m
    return ref


def kernel_ref(f_out, f_in):
    """kappa_e = V relu(U x_e + b_u) + b_v."""
    def ref(x, U, b_u, V, b_v):
        hidden = Relu.apply(matvec(U, x[:, None, :]) + b_u)
        return (matvec(V, hidden[:, None, :]) + b_v).reshape(-1, f_out, f_in)
    return ref


def gno_ref(graph, reduce):
    """gno in the association it computes (kernels/gno.py): m_i = sum_{f,k} V3[o, f, k]
    W_i[f, k] + sum_f B_v[o, f] Hs_i[f], with W_i = sum_p h_j hidden_e^T and Hs_i =
    sum_p h_j over row i; rows without entries give 0. A batch h[B, N, F_in] shares one
    hidden layer, computed once (as the kernels and a PyTorch model that builds each
    edge's kernel once per batch do), so its gradient is summed over the batch before it
    meets U: with U = inf, an example whose gradient there is 0 makes no NaN."""
    row, col, eid = csr_indices(graph)
    has_entries = torch.as_tensor(graph.degree > 0)[:, None]

    def ref(h, x, U, b_u, V, b_v):
        f_in, hidden_size = h.shape[-1], U.shape[0]
        f_out = V.shape[0] // f_in
        hidden = Relu.apply(matvec(U, x[eid][:, None, :]) + b_u)
        hj = h[..., col, :]
        batch = h.shape[:-2]
        W = torch.zeros(*batch, graph.num_nodes, f_in, hidden_size, dtype=h.dtype).index_add(
            len(batch), row, hj[..., None] * hidden[:, None, :])
        Hs = torch.zeros(*batch, graph.num_nodes, f_in, dtype=h.dtype).index_add(
            len(batch), row, hj)
        V3 = V.reshape(f_out, f_in, hidden_size)
        m = ((V3 * W[..., None, :, :]).sum((-1, -2))
             + matvec(b_v.reshape(f_out, f_in), Hs[..., None, :]))
        m = torch.where(has_entries, m, torch.zeros_like(m))
        return m / mean_divisor(graph, h.dtype) if reduce == "mean" else m
    return ref


def times_power_of_two(b, e):
    """b * 2^e, in two factors (2^e alone may overflow b's dtype)."""
    for part in (e // 2, e - e // 2):
        b = b * torch.tensor(2.0 ** part, dtype=b.dtype)
    return b


def mgs_ref(B, passes, diagonal):
    """gram_schmidt as documented (ops/gram_schmidt.py): each column scaled by the power of
    two that brings its largest finite entry into [0.5, 1), then modified Gram-Schmidt,
    dropping column j (q_j = 0) when R_jj <= tol |b_j| with |b_j| finite. Appends
    (R_jj / |b_j|, R_jj of the unscaled column) of every column to ``diagonal``."""
    tol = rank_tolerance(B.detach().numpy().dtype, B.shape[1])
    for _ in range(passes):
        cols = []
        for j in range(B.shape[1]):
            b = B[:, j]
            top = b.detach().abs()
            top = float(top[torch.isfinite(top)].max()) if torch.isfinite(top).any() else 0.0
            exponent = math.frexp(top)[1]
            v = times_power_of_two(b, -exponent)
            norm_b = (v * v).sum().sqrt()
            for q in cols:
                v = v - (q * v).sum() * q
            r = (v * v).sum().sqrt()
            r_value, norm_value = r.item(), norm_b.item()
            diagonal.append((r_value / norm_value if norm_value > 0 else 0.0,
                             math.ldexp(r_value, exponent)))
            if bool(r <= tol * norm_b) and bool(torch.isfinite(norm_b)):
                cols.append(torch.zeros_like(v))
            else:
                cols.append(v / r)
        B = torch.stack(cols, 1) if cols else B
    return B


def well_separated(diagonal, dtype):
    """Every rank decision far from the threshold and every kept column well conditioned,
    so nbgrad and the reference, which round differently, decide alike and agree."""
    tol = rank_tolerance(dtype, 1)
    kept = 1e-5 if dtype == np.float64 else 1e-2
    return all(not (tol / 8 < ratio < kept) for ratio, _ in diagonal)


def sweep_scales(diagonal, width, upstream, operand=()):
    """(forward, gradient) sizes for ``compare``: Q's entries are at most 1, so a product
    with Q is at most the operand's largest entry times the width; a gradient through
    the sweep, at most the upstream's (times the operand's) over the smallest kept R_jj."""
    kept = [r for ratio, r in diagonal if ratio > 0 and math.isfinite(r)]
    smallest = min([1.0] + kept)
    forward = largest_finite(*operand) * (1 + width)
    return forward, forward * largest_finite(upstream) / smallest


def basis_grid(n, dtype):
    t = torch.arange(n, dtype=dtype)
    return t / (n - 1) if n > 1 else t


def laplace_ref(mu, n):
    return torch.exp(-(mu[:, None] * basis_grid(n, mu.dtype)))


# -- the graph neural operator -----------------------------------------------------------


@SETTINGS
@given(graphs, st.integers(0, 3), st.integers(0, 3), reduces, dtypes, st.data())
def test_gno_aggregate_nonfinite(graph, f_in, f_out, reduce, dtype, data):
    h = data.draw(special_arrays((graph.num_nodes, f_in), dtype))
    K = data.draw(special_arrays((graph.num_edge_ids, f_out, f_in), dtype))
    g = data.draw(special_arrays((graph.num_nodes, f_out), dtype))
    compare(lambda h, K: nb.gno_aggregate(h, K, graph, reduce=reduce),
            aggregate_ref(graph, reduce), [h, K], g, f"gno_aggregate {reduce}")


@SETTINGS
@given(st.integers(0, 5), st.integers(0, 3), st.integers(0, 3), st.integers(1, 2),
       st.integers(0, 2), dtypes, st.data())
def test_gno_kernel_nonfinite(E, d, hidden, f_out, f_in, dtype, data):
    f_in += 1
    relu_inputs = [data.draw(special_arrays(shape, dtype, extremes=False))
                   for shape in [(E, d), (hidden, d), (hidden,)]]
    arrays = relu_inputs + [data.draw(special_arrays(shape, dtype))
                            for shape in [(f_out * f_in, hidden), (f_out * f_in,)]]
    g = data.draw(special_arrays((E, f_out, f_in), dtype))
    compare(lambda *a: nb.gno_kernel(*a, f_out, f_in), kernel_ref(f_out, f_in), arrays, g,
            "gno_kernel")


@SETTINGS
@given(graphs, st.integers(0, 2), st.integers(0, 3), st.integers(0, 2), st.integers(1, 2),
       reduces, dtypes, st.data())
def test_gno_nonfinite(graph, d, hidden, f_out, f_in, reduce, dtype, data):
    h = data.draw(special_arrays((graph.num_nodes, f_in), dtype))
    relu_inputs = [data.draw(special_arrays(shape, dtype, extremes=False))
                   for shape in [(graph.num_edge_ids, d), (hidden, d), (hidden,)]]
    V, b_v = (data.draw(special_arrays(shape, dtype))
              for shape in [(f_out * f_in, hidden), (f_out * f_in,)])
    arrays = [h, *relu_inputs, V, b_v]
    g = data.draw(special_arrays((graph.num_nodes, f_out), dtype))
    compare(lambda *a: nb.gno(*a, graph, reduce=reduce), gno_ref(graph, reduce), arrays, g,
            f"gno {reduce}")


@SETTINGS
@given(graphs, st.integers(2, 3), st.integers(0, 2), st.integers(0, 3), st.integers(0, 2),
       st.integers(1, 2), reduces, dtypes, st.data())
def test_batched_gno_nonfinite(graph, batch, d, hidden, f_out, f_in, reduce, dtype, data):
    """A batch h[B, N, F_in] on the shared graph (kernels/gno.py: the batched path, b_v
    summed with V as one more hidden unit) against the reference on the batch."""
    h = data.draw(special_arrays((batch, graph.num_nodes, f_in), dtype))
    relu_inputs = [data.draw(special_arrays(shape, dtype, extremes=False))
                   for shape in [(graph.num_edge_ids, d), (hidden, d), (hidden,)]]
    V, b_v = (data.draw(special_arrays(shape, dtype))
              for shape in [(f_out * f_in, hidden), (f_out * f_in,)])
    arrays = [h, *relu_inputs, V, b_v]
    g = data.draw(special_arrays((batch, graph.num_nodes, f_out), dtype))
    compare(lambda *a: nb.gno(*a, graph, reduce=reduce), gno_ref(graph, reduce), arrays, g,
            f"batched gno {reduce}")


# -- Gram-Schmidt and the orthogonal neural operator ---------------------------------------


def basis_shapes():
    return st.integers(0, 4).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n)))


@SETTINGS
@given(basis_shapes(), st.booleans(), dtypes, st.data())
def test_gram_schmidt_nonfinite(shape, re, dtype, data):
    B = data.draw(special_arrays(shape, dtype, factors=1))
    g = data.draw(special_arrays(shape, dtype))
    diagonal = []
    mgs_ref(torch.tensor(B), 1 + re, diagonal)
    assume(well_separated(diagonal, dtype))
    compare(lambda B: nb.gram_schmidt(B, reorthogonalize=re),
            lambda B: mgs_ref(B, 1 + re, []), [B], g, "gram_schmidt",
            sweep_scales(diagonal, shape[0], g))


@SETTINGS
@given(basis_shapes(), st.integers(0, 3), st.booleans(), st.booleans(), dtypes, st.data())
def test_ono_nonfinite(shape, batch, decode, re, dtype, data):
    n, k = shape
    B = data.draw(special_arrays(shape, dtype, factors=1))
    a = data.draw(special_arrays((batch, k if decode else n), dtype))
    g = data.draw(special_arrays((batch, n if decode else k), dtype))
    diagonal = []
    mgs_ref(torch.tensor(B), 1 + re, diagonal)
    assume(well_separated(diagonal, dtype))

    def ref(a, B):
        Q = mgs_ref(B, 1 + re, [])
        return matvec(Q, a[:, None, :]) if decode else matvec(Q.T, a[:, None, :])

    op = nb.ono_decode if decode else nb.ono_encode
    compare(lambda a, B: op(a, B, reorthogonalize=re), ref, [a, B], g,
            "ono_decode" if decode else "ono_encode",
            sweep_scales(diagonal, n * (batch + 1), g, [a]))


# -- the Laplace neural operator ----------------------------------------------------------


@SETTINGS
@given(st.integers(0, 3), st.integers(0, 3), st.integers(0, 4), st.booleans(), dtypes,
       st.data())
def test_lno_nonfinite(batch, M, n, decode, dtype, data):
    mu = data.draw(special_arrays((M,), dtype))
    a = data.draw(special_arrays((batch, M if decode else n), dtype))
    g = data.draw(special_arrays((batch, n if decode else M), dtype))
    if decode:
        compare(lambda x, mu: nb.lno_decode(x, mu, n),
                lambda x, mu: matvec(laplace_ref(mu, n).T, x[:, None, :]), [a, mu], g,
                "lno_decode")
    else:
        compare(lambda u, mu: nb.lno_encode(u, mu),
                lambda u, mu: matvec(laplace_ref(mu, n), u[:, None, :]), [a, mu], g,
                "lno_encode")
