"""nb.compile's rewrites (nbgrad/compiler/patterns.py): ``h @ W.T + b`` folded into one
``linear`` node, and a linear layer's relu, tanh or sigmoid into a ``linear_activation``
node (the GEMM's epilogue), a conv layer's into a ``conv2d_activation`` node (on each
kernel family), give eager's losses, gradients and parameters bit for bit,
in both dtypes, for a loss whose gradient arrives as a full array (mean of squares) or
as one value repeated (a plain sum), over several optimiser steps; no fold where an
intermediate is read again, or in a program with create_graph. The steps compile with
``dynamic=True``, which keeps the recorded program these folds rewrite (a step with a
product would otherwise be a step program, within its own bound of eager)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbgrad as nb


def _mlp(sizes, dtype, seed):
    rng = np.random.default_rng(seed)
    ws = [nb.tensor((rng.standard_normal((o, i)) * 0.5).astype(dtype), requires_grad=True)
          for i, o in zip(sizes, sizes[1:])]
    bs = [nb.tensor(rng.standard_normal(o).astype(dtype), requires_grad=True)
          for o in sizes[1:]]
    return ws, bs


def _step_fn(ws, bs, opt, loss_kind, activation=nb.tanh):
    def step(x, t):
        h = x
        for w, b in zip(ws[:-1], bs[:-1]):
            h = activation(h @ w.T + b)
        out = h @ ws[-1].T + bs[-1]
        loss = ((out - t) ** 2).mean() if loss_kind == "mean" else (out * t).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    return step


def _program_ops(compiled):
    (variant,) = compiled.variants.values()
    return [node.describe() for node in variant.program.nodes]


@settings(max_examples=10, deadline=None)
@given(sizes=st.lists(st.integers(1, 9), min_size=3, max_size=5),
       rows=st.integers(1, 40), dtype=st.sampled_from([np.float32, np.float64]),
       loss_kind=st.sampled_from(["mean", "sum"]),
       activation=st.sampled_from([nb.tanh, nb.relu, nb.sigmoid]), seed=st.integers(0, 2**16))
def test_linear_layers_folded_give_eager_bits(sizes, rows, dtype, loss_kind, activation, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, sizes[0])).astype(dtype)
    t = rng.standard_normal((rows, sizes[-1])).astype(dtype)
    runs = []
    for compiled in (False, True):
        ws, bs = _mlp(sizes, dtype, seed)
        opt = nb.optim.SGD(ws + bs, lr=0.05, momentum=0.9)
        step = _step_fn(ws, bs, opt, loss_kind, activation)
        run = nb.compile(step, dynamic=True) if compiled else step
        losses = [run(nb.tensor(x), nb.tensor(t)).numpy() for _ in range(3)]
        runs.append((losses, [p.numpy() for p in ws + bs],
                     [p.grad.numpy() for p in ws + bs]))
        if compiled:
            ops = _program_ops(run)
            assert ops.count("linear_activation") == len(sizes) - 2
            assert ops.count("linear") == 1
            assert "permute" not in ops and "matmul" not in ops
    for eager, compiled in zip(*runs):
        for a, b in zip(eager, compiled):
            np.testing.assert_array_equal(a, b)


def _ops_of(step, x):
    """The program nb.compile makes of ``step(x)`` (traced, then run once more)."""
    compiled = nb.compile(step, dynamic=True)
    compiled(x)
    compiled(x)
    return _program_ops(compiled)


def test_no_fold_where_the_product_is_read_again():
    (w,), (b,) = _mlp([4, 3], np.float64, 1)

    def step(x):
        y = x @ w.T
        z = y + b
        (z * y).sum().backward()
        return z

    ops = _ops_of(step, nb.tensor(np.ones((5, 4))))
    assert "linear" not in ops and "matmul" in ops


def test_no_fold_in_a_program_with_create_graph():
    (w,), (b,) = _mlp([3, 1], np.float64, 2)

    def step(x):
        u = nb.tanh(x @ w.T + b)
        (du,) = nb.grad(u.sum(), [x], create_graph=True)
        du.sum().backward()
        return du

    assert "linear" not in _ops_of(step, nb.tensor(np.ones((4, 3)), requires_grad=True))


def _eager_and_compiled(x, t, sizes, dtype, seed, lr, activation=nb.tanh, steps=3):
    """Losses, then parameters and gradients, of ``steps`` SGD steps of the MLP run
    eagerly and compiled; and the compiled step."""
    runs = []
    for compiled in (False, True):
        ws, bs = _mlp(sizes, dtype, seed)
        opt = nb.optim.SGD(ws + bs, lr=lr)
        step = _step_fn(ws, bs, opt, "mean", activation)
        run = nb.compile(step, dynamic=True) if compiled else step
        runs.append([run(nb.tensor(x), nb.tensor(t)).numpy() for _ in range(steps)]
                    + [p.numpy() for p in ws + bs] + [p.grad.numpy() for p in ws + bs])
    return runs, run


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_parallel_sizes_folded_give_eager_bits(dtype):
    # rows and widths past the kernels' parallel thresholds (W16's shapes)
    rng = np.random.default_rng(3)
    x = rng.random((256, 2)).astype(dtype)
    t = rng.standard_normal((256, 1)).astype(dtype)
    (eager, compiled), _ = _eager_and_compiled(x, t, [2, 64, 64, 64, 1], dtype, 3, 0.05)
    for a, b in zip(eager, compiled):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("activation", [nb.tanh, nb.relu, nb.sigmoid])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_activation_in_the_gemm_epilogue_gives_eager_bits(activation, dtype):
    # a parallel product ([512, 96] @ [96, 200]), one K deeper than a packed block (700),
    # and a one-column layer (computed as its transpose: the bias runs along tile rows)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((512, 96)).astype(dtype)
    t = rng.standard_normal((512, 1)).astype(dtype)
    (eager, compiled), run = _eager_and_compiled(x, t, [96, 200, 700, 1, 1], dtype, 5, 0.01,
                                                 activation, steps=2)
    assert _program_ops(run).count("linear_activation") == 3
    for a, b in zip(eager, compiled):
        np.testing.assert_array_equal(a, b)


def test_no_activation_fold_where_the_layer_output_is_read_again():
    (w,), (b,) = _mlp([4, 3], np.float64, 1)

    def step(x):
        z = nb.linear(x, w, b)
        h = nb.relu(z)
        (h * z).sum().backward()
        return h

    ops = _ops_of(step, nb.tensor(np.ones((5, 4))))
    assert "linear_activation" not in ops and "linear" in ops


@pytest.mark.parametrize("activation", [nb.tanh, nb.relu, nb.sigmoid])
def test_a_batched_layer_with_its_activation_folds_and_gives_eager_bits(activation):
    # nn.Linear on [batch, tokens, features] (linear of a 3-D input), x needing a gradient
    rng = np.random.default_rng(9)
    x_np = rng.standard_normal((3, 70, 24)).astype(np.float32)
    g_np = rng.standard_normal((3, 70, 40)).astype(np.float32)
    def step_of(layer):
        def step(x):
            y = activation(layer(x))
            y.backward(nb.tensor(g_np))
            return y
        return step

    runs = []
    for compiled in (False, True):
        nb.manual_seed(0)
        layer = nb.nn.Linear(24, 40)
        step = step_of(layer)
        run = nb.compile(step, dynamic=True) if compiled else step
        x = nb.tensor(x_np, requires_grad=True)
        y = run(x)
        runs.append([y.numpy(), x.grad.numpy(), layer.weight.grad.numpy(),
                     layer.bias.grad.numpy()])
        if compiled:
            assert "linear_activation" in _program_ops(run)
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)


# (x shape, w shape, conv2d keywords): layers the plan sends to different kernel families
_CONV_LAYERS = {
    "cols": ((64, 1, 8, 8), (16, 1, 3, 3), {"padding": 1}),
    "pointwise": ((2, 64, 16, 16), (32, 64, 1, 1), {}),
    "direct": ((2, 2, 9, 9), (3, 2, 3, 3), {"stride": 2}),
    "s1": ((2, 6, 20, 20), (6, 1, 3, 3), {"padding": 1, "groups": 6}),
    "gemm": ((2, 32, 20, 20), (16, 32, 3, 3), {"padding": 1}),
    "unbatched": ((3, 8, 8), (4, 3, 3, 3), {"padding": 1}),
}


@pytest.mark.parametrize("activation", [nb.tanh, nb.relu, nb.sigmoid])
@pytest.mark.parametrize("layer", sorted(_CONV_LAYERS))
def test_a_conv_layer_with_its_activation_folds_and_gives_eager_bits(layer, activation):
    """The unbatched layer has no bias."""
    x_shape, w_shape, params = _CONV_LAYERS[layer]
    rng = np.random.default_rng(len(layer))
    x_np = rng.standard_normal(x_shape).astype(np.float32)
    w_np = (rng.standard_normal(w_shape) * 0.3).astype(np.float32)
    b_np = rng.standard_normal(w_shape[0]).astype(np.float32)

    def leaves():
        x, w, b = (nb.tensor(a, requires_grad=True) for a in (x_np, w_np, b_np))
        return x, w, (None if layer == "unbatched" else b)

    def step(x, w, b):
        y = activation(nb.conv2d(x, w, b, **params))
        (y * y).sum().backward()
        return y

    runs = []
    for compiled in (False, True):
        run = nb.compile(step, dynamic=True) if compiled else step
        for _ in range(1 + compiled):      # a compiled function's first call traces
            x, w, b = leaves()
            y = run(x, w, b)
        runs.append([y.numpy(), x.grad.numpy(), w.grad.numpy()]
                    + ([] if b is None else [b.grad.numpy()]))
        if compiled:
            assert "conv2d_activation" in _program_ops(run)
    for a, b in zip(*runs, strict=True):
        np.testing.assert_array_equal(a, b)
    if layer != "unbatched":
        assert nb.conv2d(*leaves(), **params).grad_fn.plan.forward.family == layer
