"""Fused regions with broadcast operands (nbgrad/compiler/fusion.py: ``Broadcast``,
``row_loop``): values and the full-size operands' gradients are eager's bits; a broadcast
operand's gradient is its sum over the repeated rows, added per task and then in task
order, so it matches eager's to rounding and does not depend on the thread count."""

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.compiler.api import FusedNode
from nbgrad.compiler.fusion import Broadcast, read_of
from nbgrad.compiler.gradient import GradientNode


def _regions(compiled):
    (variant,) = compiled.variants.values()
    return [n.fn.region for n in variant.program.nodes if isinstance(n, FusedNode)]


def _step(x, w, b, g):
    h = nb.tanh(x * w + b) * x
    out = h * h + 0.5
    out.backward(g)
    return out * 1.0   # out read again: the region's own backward runs


def _run(fn, arrays):
    leaves = [nb.tensor(a, requires_grad=True) for a in arrays[:3]]
    out = fn(*leaves, nb.tensor(arrays[3]))
    return out.numpy(), [t.grad.numpy() for t in leaves]


def _compare(shape, operand, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s).astype(dtype) for s in (shape, operand, operand, shape)]
    compiled = nb.compile(_step)
    _run(compiled, arrays)
    out, grads = _run(compiled, arrays)
    eager_out, eager_grads = _run(_step, arrays)
    np.testing.assert_array_equal(out, eager_out)
    np.testing.assert_array_equal(grads[0], eager_grads[0])
    tolerance = 1e-12 if dtype == np.float64 else 2e-5
    for ours, theirs in zip(grads[1:], eager_grads[1:]):
        assert ours.shape == theirs.shape
        np.testing.assert_allclose(ours, theirs, rtol=tolerance, atol=tolerance)
    return compiled, arrays, grads


PATTERNS = [((8, 5), (5,)),              # a bias: along each row
            ((8, 5), (8, 1)),            # one value per row
            ((8, 5), (1, 5)),            # leading ones
            ((4, 3, 6, 6), (3, 1, 1)),   # per channel, rows of H*W
            ((4, 3, 6, 6), (6, 6)),      # one image's worth, along
            ((4, 3, 6, 6), (1,)),        # a single value that needs a gradient
            ((3, 7), ()),                # a 0-d one
            ((512, 300), (300,)),        # the parallel loop (>= 131,072 elements)
            ((300, 512), (300, 1))]


@pytest.mark.parametrize("shape,operand", PATTERNS)
def test_broadcast_operands_fuse_with_eager_values_and_gradients(shape, operand):
    compiled, _, _ = _compare(shape, operand)
    (region,) = _regions(compiled)
    assert len(region.nodes) == 6 and region.period
    assert sum(isinstance(read, Broadcast) for read in region.reads) == 2


def test_float32_broadcast_gradients_against_a_float64_sum():
    compiled, arrays, grads = _compare((256, 640), (640,), np.float32, seed=5)
    x, w, b, g = (a.astype(np.float64) for a in arrays)
    z = np.tanh(x * w + b)
    h = z * x
    d_h = g * 2 * h
    d_pre = d_h * x * (1 - z * z)
    np.testing.assert_allclose(grads[1], (d_pre * x).sum(0), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(grads[2], d_pre.sum(0), rtol=1e-4, atol=1e-3)


def test_broadcast_gradients_do_not_depend_on_the_thread_count():
    threads = numba.get_num_threads()
    results = []
    try:
        for n in (1, threads):
            numba.set_num_threads(n)
            results.append(_compare((600, 300), (600, 1), np.float32, seed=2)[2])
    finally:
        numba.set_num_threads(threads)
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


def test_operands_needing_different_row_lengths_split_the_region():
    rng = np.random.default_rng(3)
    x = nb.tensor(rng.standard_normal((2, 3, 4)), requires_grad=True)
    a = nb.tensor(rng.standard_normal(4), requires_grad=True)        # rows of 4
    d = nb.tensor(rng.standard_normal((3, 4)), requires_grad=True)   # rows of 12

    def step(x, a, d):
        y = nb.exp(x * a) + d
        y.sum().backward()
        return y

    compiled = nb.compile(step)
    compiled(x, a, d)
    grads = []
    for fn in (compiled, step):
        for t in (x, a, d):
            t.grad = None
        out = fn(x, a, d).numpy()
        grads.append([out] + [t.grad.numpy() for t in (x, a, d)])
    for ours, theirs in zip(*grads):
        np.testing.assert_allclose(ours, theirs, rtol=1e-13)
    assert [r.period for r in _regions(compiled)] == [4]   # exp(x * a); the add alone


def test_read_of_names_each_pattern():
    assert read_of((5,), (8, 5), True) == Broadcast(5, True, 5)
    assert read_of((8, 1), (8, 5), True) == Broadcast(5, False, 8)
    assert read_of((3, 1, 1), (2, 3, 4, 4), False) == Broadcast(16, False, 3)
    assert read_of((1,), (8, 5), False) == "scalar"
    assert read_of((1, 8, 5), (8, 5), True) is None      # more dims than the region
    assert read_of((2, 1, 4), (2, 3, 4), True) is None     # not one contiguous run
    assert read_of((8, 5), (8, 5), True) == "full"


@settings(max_examples=30, deadline=None)
@given(shape=st.lists(st.integers(1, 7), min_size=1, max_size=4),
       mask=st.lists(st.booleans(), min_size=4, max_size=4),
       seed=st.integers(0, 2**16))
def test_random_broadcasts_match_eager(shape, mask, seed):
    """Any operand shape: fused when it is one contiguous run of the region's dims,
    eager where it is not; the answers are eager's either way."""
    operand = tuple(s if keep else 1 for s, keep in zip(shape, mask))
    _compare(tuple(shape), operand, seed=seed)


@pytest.mark.parametrize("operand", [(300,), (200, 1), ()])
@pytest.mark.parametrize("reduce", ["sum", "mean", "backward"])
def test_a_broadcast_region_fused_into_its_backward(operand, reduce):
    """The region, its sum or mean and the backward as one loop (gradient.py), the
    broadcast operands' gradients as its epilogue."""
    rng = np.random.default_rng(6)
    arrays = [rng.standard_normal(s) for s in ((200, 300), operand, operand, (200, 300))]

    def step(x, w, b, g):
        h = nb.tanh(x * w + b) * x
        if reduce == "backward":
            h.backward(g)
            return None
        loss = h.sum() if reduce == "sum" else h.mean()
        loss.backward()
        return loss

    compiled = nb.compile(step)
    results = []
    for fn in (compiled, compiled, step):
        leaves = [nb.tensor(a, requires_grad=True) for a in arrays[:3]]
        loss = fn(*leaves, nb.tensor(arrays[3]))
        results.append((loss, [t.grad.numpy() for t in leaves]))
    (_, _), (loss, grads), (eager_loss, eager_grads) = results
    (variant,) = compiled.variants.values()
    (node,) = [n for n in variant.program.nodes if isinstance(n, GradientNode)]
    assert node.region.period
    np.testing.assert_array_equal(grads[0], eager_grads[0])
    for ours, theirs in zip(grads[1:], eager_grads[1:]):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)
    if loss is not None:
        assert loss.item() == pytest.approx(eager_loss.item(), rel=1e-12)
