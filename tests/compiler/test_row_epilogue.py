"""A fused region followed by a softmax or log_softmax over its last axis
(nbgrad/compiler/row_epilogue.py): one row loop whose epilogue is the eager kernel's row
function, so the output and the full-size inputs' gradients are eager's bits (second
derivatives too), for any row length, the serial and the parallel loop, with broadcast
operands along or per row; where the pattern does not hold, the ops run as before."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.compiler.api import FusedNode

OPS = {"softmax": nb.softmax, "log_softmax": nb.log_softmax}


def _program(compiled):
    (variant,) = compiled.variants.values()
    return [node.describe() for node in variant.program.nodes]


def _runs(step, arrays, calls=2):
    """(compiled, eager) results: the output and every leaf's gradient."""
    compiled = nb.compile(step)
    results = []
    for fn in [compiled] * calls + [step]:
        leaves = [nb.tensor(a, requires_grad=True) for a in arrays[:-1]]
        out = fn(*leaves, nb.tensor(arrays[-1]))
        results.append([out.numpy()] + [t.grad.numpy() for t in leaves])
    return results[-2], results[-1], compiled


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,bias", [((64, 64), (64,)), ((7, 5, 33), (5, 1)),
                                        ((3000, 64), (64,)), ((1, 10), ())])
def test_region_then_softmax_is_one_loop_with_eager_bits(op, dtype, shape, bias):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(dtype) for s in (shape, bias, shape)]

    def step(x, b, g):
        y = OPS[op](nb.tanh(x * 0.5) + b, dim=-1)
        (y * g).sum().backward()
        return y

    ours, eager, compiled = _runs(step, arrays)
    assert _program(compiled)[0] == f"fused[mul, tanh, add, {op}]"
    np.testing.assert_array_equal(ours[0], eager[0])
    np.testing.assert_array_equal(ours[1], eager[1])
    # the bias's gradient sums a row's terms, which nearly cancel for a softmax
    scale = np.abs(arrays[2]).sum() * np.finfo(dtype).eps * 8
    np.testing.assert_allclose(ours[2], eager[2], rtol=0, atol=scale)


def test_a_softmax_over_another_axis_or_an_output_read_again_is_not_fused():
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal((6, 5)), rng.standard_normal((6, 5))]

    def other_axis(x, g):
        y = nb.softmax(x * 2.0, dim=0)
        (y * g).sum().backward()
        return y

    def read_again(x, g):
        h = x * 2.0
        y = nb.softmax(h, dim=-1) + h
        (y * g).sum().backward()
        return y

    for step in (other_axis, read_again):
        ours, eager, compiled = _runs(step, arrays)
        assert not any("softmax]" in op for op in _program(compiled))
        for a, b in zip(ours, eager):
            np.testing.assert_array_equal(a, b)


def test_second_derivatives_through_the_fused_softmax_are_eagers():
    rng = np.random.default_rng(2)
    x0, g0 = rng.standard_normal((4, 9)), rng.standard_normal((4, 9))

    def step(x, g):
        y = nb.log_softmax(nb.sigmoid(x) * 3.0, dim=-1)
        (d,) = nb.grad((y * g).sum(), x, create_graph=True)
        (d * d).sum().backward()
        return y

    ours, eager, compiled = _runs(step, [x0, g0])
    assert any(op.endswith("log_softmax]") for op in _program(compiled))
    for a, b in zip(ours, eager):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-15)


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 40), cols=st.integers(1, 70), op=st.sampled_from(sorted(OPS)),
       dtype=st.sampled_from([np.float32, np.float64]), seed=st.integers(0, 2**16))
def test_random_shapes_give_eager_bits(rows, cols, op, dtype, seed):
    rng = np.random.default_rng(seed)
    arrays = [(rng.standard_normal((rows, cols)) * 3).astype(dtype),
              rng.standard_normal((rows, cols)).astype(dtype)]

    def step(x, g):
        y = OPS[op](nb.exp(x * 0.25) - x, dim=1)
        (y * g).sum().backward()
        return y

    ours, eager, _ = _runs(step, arrays)
    for a, b in zip(ours, eager):
        np.testing.assert_array_equal(a, b)


def test_the_fused_node_reports_its_ops():
    compiled = nb.compile(lambda x: nb.softmax(x * 2.0, dim=-1))
    compiled(np.ones((3, 4)))
    (variant,) = compiled.variants.values()
    (node,) = variant.program.nodes
    assert isinstance(node, FusedNode) and "S.softmax_row" in node.fn.source


def test_the_fused_softmax_does_not_depend_on_the_thread_count():
    import numba

    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in ((3000, 64), (64,),
                                                                  (3000, 64))]

    def step(x, b, g):
        y = nb.softmax(nb.tanh(x * 0.5) + b, dim=-1)
        (y * g).sum().backward()
        return y

    threads = numba.get_num_threads()
    results = []
    try:
        for n in (1, threads):
            numba.set_num_threads(n)
            results.append(_runs(step, arrays)[0])
    finally:
        numba.set_num_threads(threads)
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows,classes", [(64, 10), (3000, 64), (1, 3)])
def test_region_then_cross_entropy_is_one_loop_with_eager_bits(reduction, dtype, rows,
                                                                classes):
    rng = np.random.default_rng(4)
    arrays = [rng.standard_normal((rows, classes)).astype(dtype),
              rng.standard_normal(classes).astype(dtype), rng.integers(0, classes, rows)]

    def step(x, b, t):
        loss = nb.nn.functional.cross_entropy(x * 0.5 + b, t, reduction=reduction)
        (loss.sum() if reduction == "none" else loss).backward()
        return loss

    ours, eager, compiled = _runs(step, arrays)
    assert _program(compiled)[0] == "fused[mul, add, cross_entropy]"
    np.testing.assert_array_equal(ours[0], eager[0])   # the loss
    np.testing.assert_array_equal(ours[1], eager[1])   # the logits' source's gradient
    np.testing.assert_allclose(ours[2], eager[2], rtol=1e-5 if dtype == np.float32 else 1e-12,
                               atol=1e-6 if dtype == np.float32 else 1e-14)


def test_a_fused_cross_entropy_checks_each_calls_targets():
    compiled = nb.compile(lambda x, t: nb.nn.functional.cross_entropy(x * 2.0, t))
    x = nb.tensor(np.ones((3, 4)), requires_grad=True)
    compiled(x, nb.tensor(np.array([0, 1, 3])))
    assert "cross_entropy]" in _program(compiled)[0]
    with pytest.raises(ValueError, match=r"target\[1\] = 4 is out of range for C = 4"):
        compiled(x, nb.tensor(np.array([0, 4, 3])))


def test_second_derivatives_through_a_fused_cross_entropy_are_eagers():
    """The vjp runs the region and cross_entropy as nbgrad ops, the targets included."""
    rng = np.random.default_rng(6)
    arrays = [rng.standard_normal((5, 4)), rng.integers(0, 4, 5)]

    def step(x, t):
        loss = nb.nn.functional.cross_entropy(x * 0.5, t)
        (d,) = nb.grad(loss, x, create_graph=True)
        (d * d).sum().backward()
        return loss

    ours, eager, compiled = _runs(step, arrays)
    assert _program(compiled)[0] == "fused[mul, cross_entropy]"
    for a, b in zip(ours, eager):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-15)
