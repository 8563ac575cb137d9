"""scaled_dot_product_attention: PyTorch oracle over shapes, masks, causal and scale
(values and gradients), the registered samples (gradcheck, gradgradcheck), dropout,
the same bits at 1 and 2 threads, bad input."""

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads
from hypothesis import given
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.ops.attention import scaled_dot_product_attention as sdpa
from nbgrad.testing.gradcheck import check_registered

torch = pytest.importorskip("torch")
F = torch.nn.functional

OP = "scaled_dot_product_attention"


def run_both(q, k, v, g, **kw):
    """(nbgrad, torch) each as (out, dq, dk, dv) arrays."""
    tkw = dict(kw)
    if isinstance(kw.get("attn_mask"), np.ndarray):
        tkw["attn_mask"] = torch.tensor(kw["attn_mask"])
    ours = [nb.tensor(a, requires_grad=True) for a in (q, k, v)]
    theirs = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
    o = sdpa(*ours, **kw)
    o.backward(nb.tensor(g))
    to = F.scaled_dot_product_attention(*theirs, **tkw)
    to.backward(torch.tensor(g))
    return ([o.numpy()] + [t.grad.numpy() for t in ours],
            [to.detach().numpy()] + [t.grad.numpy() for t in theirs])


def close(ours, theirs, dtype):
    tol = dict(rtol=1e-9, atol=1e-10) if dtype == np.float64 else dict(rtol=2e-4, atol=2e-5)
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, **tol)


@st.composite
def cases(draw):
    batch = draw(st.sampled_from([(), (2,), (2, 3), (1, 2)]))
    n_l, n_s = draw(st.integers(1, 150)), draw(st.integers(1, 150))
    e, ev = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    kind = draw(st.sampled_from(["none", "causal", "bool", "float"]))
    scale = draw(st.sampled_from([None, 0.3, 1.7]))
    dtype = draw(st.sampled_from([np.float64, np.float32]))
    return batch, n_l, n_s, e, ev, kind, scale, dtype


@given(case=cases(), seed=st.integers(0, 99))
def test_matches_torch(case, seed):
    batch, n_l, n_s, e, ev, kind, scale, dtype = case
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(batch + (n_l, e)).astype(dtype)
    k = rng.standard_normal(batch + (n_s, e)).astype(dtype)
    v = rng.standard_normal(batch + (n_s, ev)).astype(dtype)
    g = rng.standard_normal(batch + (n_l, ev)).astype(dtype)
    kw = {"scale": scale}
    if kind == "causal":
        kw["is_causal"] = True
    elif kind == "bool":
        kw["attn_mask"] = rng.random((n_l, n_s)) < 0.7
    elif kind == "float":
        kw["attn_mask"] = rng.standard_normal(batch[-1:] + (1, n_s)).astype(dtype)
    close(*run_both(q, k, v, g, **kw), dtype)


def test_large_blocks_and_broadcast_batch():
    """Several query and key blocks, batch dims broadcast between q, k and v."""
    rng = np.random.default_rng(1)
    q = rng.standard_normal((2, 3, 300, 16))
    k = rng.standard_normal((1, 3, 270, 16))
    v = rng.standard_normal((3, 270, 24))
    g = rng.standard_normal((2, 3, 300, 24))
    close(*run_both(q, k, v, g), np.float64)
    close(*run_both(q, k, v, g, is_causal=True), np.float64)


def test_fully_masked_rows_are_zero_as_torch():
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((2, 5, 4)) for _ in range(3))
    g = rng.standard_normal((2, 5, 4))
    mask = rng.random((5, 5)) < 0.5
    mask[1] = False
    mask[3] = True
    ours, theirs = run_both(q, k, v, g, attn_mask=mask)
    close(ours, theirs, np.float64)
    assert np.all(ours[0][:, 1] == 0) and np.all(ours[1][:, 1] == 0)
    fmask = np.where(mask, 0.0, -np.inf)
    close(run_both(q, k, v, g, attn_mask=fmask)[0], theirs, np.float64)


def test_gqa_matches_torch():
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 4, 6, 8))
    k = rng.standard_normal((2, 2, 7, 8))
    v = rng.standard_normal((2, 2, 7, 5))
    g = rng.standard_normal((2, 4, 6, 5))
    close(*run_both(q, k, v, g, enable_gqa=True), np.float64)


def test_unbatched_2d():
    rng = np.random.default_rng(4)
    q, k, v = rng.standard_normal((3, 4)), rng.standard_normal((6, 4)), rng.standard_normal((6, 2))
    close(*run_both(q, k, v, rng.standard_normal((3, 2))), np.float64)


@pytest.mark.parametrize("second_order", [False, True])
def test_registered_samples_gradcheck(second_order):
    report = check_registered(OP, second_order=second_order)
    assert not report.failures, report.failures


def test_second_derivative_matches_torch():
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((2, 4, 3)) for _ in range(3))
    mask = rng.random((4, 4)) < 0.7
    mask[:, 0] = True
    ours = [nb.tensor(a, requires_grad=True) for a in (q, k, v)]
    theirs = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
    o = sdpa(*ours, attn_mask=mask)
    gq, = nb.autograd.grad((o * o).sum(), [ours[0]], create_graph=True)
    (gq * gq).sum().backward()
    to = F.scaled_dot_product_attention(*theirs, attn_mask=torch.tensor(mask))
    tq, = torch.autograd.grad((to * to).sum(), [theirs[0]], create_graph=True)
    (tq * tq).sum().backward()
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-8, atol=1e-10)


def test_dropout_zero_is_exact_and_dropout_statistics():
    rng = np.random.default_rng(6)
    q, k, v = (nb.tensor(rng.standard_normal((2, 64, 8))) for _ in range(3))
    assert_same_bits(sdpa(q, k, v, dropout_p=0.0).numpy(), sdpa(q, k, v).numpy())
    # with v = identity rows, out = the dropped attention weights themselves
    n = 256
    q = nb.tensor(np.zeros((4, n, 2)))
    k = nb.tensor(np.zeros((4, n, 2)))
    v = nb.tensor(np.eye(n)[None].repeat(4, 0))
    p = 0.3
    nb.manual_seed(0)
    w = sdpa(q, k, v, dropout_p=p).numpy()
    kept = w != 0
    assert abs(kept.mean() - (1 - p)) < 0.01
    np.testing.assert_allclose(w[kept], 1 / n / (1 - p))
    nb.manual_seed(0)
    assert_same_bits(sdpa(q, k, v, dropout_p=p).numpy(), w)  # seeded: the same mask
    assert not np.array_equal(sdpa(q, k, v, dropout_p=p).numpy(), w)  # next draw differs


def test_dropout_gradient_uses_the_forward_mask():
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((2, 40, 3)) for _ in range(3))
    ts = [nb.tensor(a, requires_grad=True) for a in (q, k, v)]
    nb.manual_seed(3)
    out = sdpa(*ts, dropout_p=0.4)
    out.sum().backward()
    # the dropped weights, recovered with v = identity under the same seed
    nb.manual_seed(3)
    eye = np.eye(40)[None].repeat(2, 0)
    w = sdpa(nb.tensor(q), nb.tensor(k), nb.tensor(eye), dropout_p=0.4).numpy()
    np.testing.assert_allclose(out.numpy(), w @ v, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ts[2].grad.numpy(), w.transpose(0, 2, 1) @ np.ones((2, 40, 3)),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n_l, n_s, kind", [(77, 77, "none"), (130, 1030, "bool"),
                                            (1024, 1024, "causal"), (300, 64, "float")])
def test_head_dim_64_float32_paths_match_torch(n_l, n_s, kind):
    """d = 64 in float32 is one register panel wide: the kernels read V, K, Q and dO in
    place rather than packed; lengths off and on the block sizes, masks, causal."""
    rng = np.random.default_rng(n_l + n_s)
    q = rng.standard_normal((1, 2, n_l, 64)).astype(np.float32)
    k, v = (rng.standard_normal((1, 2, n_s, 64)).astype(np.float32) for _ in range(2))
    g = rng.standard_normal((1, 2, n_l, 64)).astype(np.float32)
    kw = {"is_causal": True} if kind == "causal" else {}
    if kind == "bool":
        kw["attn_mask"] = rng.random((n_l, n_s)) < 0.7
        kw["attn_mask"][3] = False  # a fully masked row
    elif kind == "float":
        kw["attn_mask"] = rng.standard_normal((n_l, n_s)).astype(np.float32)
    close(*run_both(q, k, v, g, **kw), np.float32)


@pytest.mark.parametrize("kw", [{}, {"is_causal": True}, {"dropout_p": 0.2}])
def test_same_bits_at_1_and_2_threads(kw):
    rng = np.random.default_rng(8)
    arrays = [rng.standard_normal((4, 2, 200, 64)).astype(np.float32) for _ in range(3)]
    g = rng.standard_normal((4, 2, 200, 64)).astype(np.float32)

    def run():
        ts = [nb.tensor(a, requires_grad=True) for a in arrays]
        nb.manual_seed(1)
        out = sdpa(*ts, **kw)
        out.backward(nb.tensor(g))
        return [out.numpy()] + [t.grad.numpy() for t in ts]

    for a, b in zip(at_threads(1, run), at_threads(2, run)):
        assert_same_bits(a, b)


def test_inputs_not_modified():
    rng = np.random.default_rng(9)
    arrays = [rng.standard_normal((2, 5, 3)) for _ in range(3)]
    copies = [a.copy() for a in arrays]
    ts = [nb.tensor(a, requires_grad=True) for a in arrays]
    sdpa(*ts, attn_mask=np.ones((5, 5), bool)).sum().backward()
    for a, c in zip(arrays, copies):
        assert_same_bits(a, c)


@pytest.mark.parametrize("shapes, kw, words", [
    (((4,), (4,), (4,)), {}, ["at least 2-D", "(4,)"]),
    (((2, 3, 4), (2, 5, 6), (2, 5, 6)), {}, ["last dim", "(2, 3, 4)", "(2, 5, 6)"]),
    (((2, 3, 4), (2, 5, 4), (2, 6, 4)), {}, ["key has 5", "value has 6"]),
    (((2, 3, 4), (3, 5, 4), (3, 5, 4)), {}, ["batch dims", "(3, 5, 4)"]),
    (((2, 3, 4), (2, 5, 4), (2, 5, 4)), {"attn_mask": np.ones((3, 4), bool)},
     ["attn_mask", "(3, 4)", "(2, 3, 5)"]),
    (((2, 3, 4), (2, 5, 4), (2, 5, 4)), {"dropout_p": 1.0}, ["dropout_p", "[0, 1)"]),
    (((2, 3, 4), (2, 5, 4), (2, 5, 4)), {"dropout_p": -0.1}, ["dropout_p"]),
    (((2, 3, 4), (2, 5, 4), (2, 5, 4)), {"attn_mask": np.ones((3, 5), bool),
                                         "is_causal": True}, ["attn_mask", "is_causal"]),
    (((1, 4, 3, 2), (1, 3, 5, 2), (1, 3, 5, 2)), {"enable_gqa": True}, ["multiple"]),
])
def test_bad_input(shapes, kw, words):
    q, k, v = (np.zeros(s) for s in shapes)
    with pytest.raises(ValueError) as err:
        sdpa(q, k, v, **kw)
    assert OP in str(err.value)
    for w in words:
        assert w in str(err.value)


def test_bad_dtypes():
    with pytest.raises(TypeError, match="query"):
        sdpa(np.zeros((2, 3), np.int64), np.zeros((2, 3)), np.zeros((2, 3)))
    with pytest.raises(TypeError, match="share one dtype"):
        sdpa(np.zeros((2, 3), np.float32), np.zeros((2, 3)), np.zeros((2, 3)))
