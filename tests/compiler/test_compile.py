"""nb.compile: fused point-wise regions give eager's bits (values, gradients, second
derivatives) op by op, for random chains (hypothesis) and for the W17 chain; a training
step compiled equals eager step by step; variants, retraces, graph breaks, explain, and
the generated kernels served from the disk cache in a second process."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.compiler.api import FusedNode
from nbgrad.compiler.gradient import GradientNode
from nbgrad.compiler.rules import RULES

DTYPES = [np.float32, np.float64]
UNARY = sorted(name for name, rule in RULES.items() if rule.arity == 1)
BINARY = sorted(name for name, rule in RULES.items() if rule.arity == 2)


def _apply(name, *xs):
    return getattr(nb, name)(*xs)


def _values(rng, shape, dtype, positive=False):
    x = rng.standard_normal(shape) * 2
    return (np.abs(x) + 0.1 if positive else x).astype(dtype)


def _leaves(arrays):
    return [nb.tensor(a, requires_grad=True) for a in arrays]


def _eager_and_compiled(step, arrays, calls=2):
    """(eager, compiled) results of ``step(*leaves)``: outputs and leaf gradients, the
    compiled one from its ``calls``-th call (the first traces)."""
    def run(fn):
        leaves = _leaves(arrays)
        out = fn(*leaves)
        outs = out if isinstance(out, tuple) else (out,)
        return [o.numpy() for o in outs], [None if x.grad is None else x.grad.numpy()
                                           for x in leaves]
    compiled = nb.compile(step)
    for _ in range(calls - 1):
        run(compiled)
    return run(step), run(compiled), compiled


def _assert_bitwise(eager, compiled):
    for a, b in zip(eager[0], compiled[0]):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(eager[1], compiled[1]):
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_array_equal(a, b)


def _fused_regions(compiled):
    (variant,) = compiled.variants.values()
    return [n for n in variant.program.nodes if isinstance(n, FusedNode)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", UNARY)
@pytest.mark.parametrize("size", [37, 1 << 17])  # the serial and the parallel loop
def test_each_unary_op_fused_is_bitwise_eager(name, dtype, size):
    rng = np.random.default_rng(1)
    positive = name == "log"
    x = _values(rng, size, dtype, positive)
    w = _values(rng, size, dtype)

    def step(x):
        y = _apply(name, x * 1.25)       # a region of mul, the op, mul
        loss = (y * w).sum()
        loss.backward()
        return y * 1.0                   # y read again: the region's own backward runs

    eager, compiled, fn = _eager_and_compiled(step, [x])
    _assert_bitwise(eager, compiled)
    assert len(_fused_regions(fn)) == 1


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", BINARY)
def test_each_binary_op_fused_is_bitwise_eager(name, dtype):
    rng = np.random.default_rng(2)
    a, b = _values(rng, (5, 7), dtype), _values(rng, (5, 7), dtype, positive=True)

    def step(a, b):
        y = _apply(name, a, b)
        y = _apply(name, y, 0.5) * a      # a lifted number and a value read twice
        y.sum().backward()
        return y

    _assert_bitwise(*_eager_and_compiled(step, [a, b])[:2])


_CHAIN_OPS = UNARY + BINARY


@settings(max_examples=25, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(_CHAIN_OPS), st.integers(0, 10)),
                    min_size=2, max_size=8),
       shape=st.lists(st.integers(1, 6), min_size=1, max_size=3),
       dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**16))
def test_random_point_wise_chains_are_bitwise_eager(ops, shape, dtype, seed):
    rng = np.random.default_rng(seed)
    x, z = _values(rng, shape, dtype), _values(rng, shape, dtype)
    g = _values(rng, shape, dtype)

    def step(x, z):
        values = [x, z]
        for name, pick in ops:
            a = values[pick % len(values)]
            if name == "log":
                a = nb.exp(a)            # keep log's argument positive
            if RULES[name].arity == 1:
                values.append(_apply(name, a))
            else:
                values.append(_apply(name, a, values[(pick + 1) % len(values)]))
        (values[-1] * g).sum().backward()
        return values[-1]

    with np.errstate(all="ignore"):
        _assert_bitwise(*_eager_and_compiled(step, [x, z])[:2])


def w17(x, g):
    h = nb.tanh(1.5 * x + 0.25) * 0.5
    h = h + nb.exp(-h * h) + x
    h = nb.silu(h)
    loss = (h * h * g).sum()
    loss.backward()
    return loss


def _gradient_nodes(compiled):
    (variant,) = compiled.variants.values()
    return [n for n in variant.program.nodes if isinstance(n, GradientNode)]


@pytest.mark.parametrize("n", [1000, 1 << 18])
def test_w17_chain_is_one_gradient_loop_with_eager_gradients(n):
    # the chain, its sum and the backward become one loop: the gradient is eager's bits,
    # the loss a sum in another order (checked against float64)
    rng = np.random.default_rng(3)
    x = rng.standard_normal(n).astype(np.float32)
    g = nb.tensor(rng.standard_normal(n).astype(np.float32))
    eager, compiled, fn = _eager_and_compiled(lambda x: w17(x, g), [x])
    np.testing.assert_array_equal(eager[1][0], compiled[1][0])
    (node,) = _gradient_nodes(fn)
    assert len(node.region.nodes) == 12 and node.summed
    h = np.tanh(1.5 * x.astype(np.float64) + 0.25) * 0.5
    h = h + np.exp(-h * h) + x
    h = h / (1 + np.exp(-h))
    exact = np.sum(h * h * g.numpy())
    assert abs(compiled[0][0] - exact) <= 1e-5 * np.sum(np.abs(h * h * g.numpy()))
    text = fn.explain()
    assert "12 ops over" in text and "R.silu_grad0" in text and "lanes[lane] += v" in text


@pytest.mark.parametrize("n", [1000, 1 << 18])
def test_values_the_function_returns_are_written_by_the_gradient_loop(n):
    """The chain's h, returned with the loss, is written by the one loop that sums the
    loss and writes the gradient: h and the gradient are eager's bits, h carries no
    graph (the backward is done). An h that a later op reads keeps the fused region."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal(n).astype(np.float32)
    g = nb.tensor(rng.standard_normal(n).astype(np.float32))

    def step(x):
        h = nb.silu(nb.tanh(1.5 * x + 0.25) * 0.5)
        loss = (h * h * g).sum()
        loss.backward()
        return h, loss

    eager, compiled, fn = _eager_and_compiled(step, [x])
    np.testing.assert_array_equal(eager[0][0], compiled[0][0])
    np.testing.assert_array_equal(eager[1][0], compiled[1][0])
    assert compiled[0][1] == pytest.approx(eager[0][1], rel=1e-5)
    (node,) = _gradient_nodes(fn)
    assert len(node.returned) == 1 and "out0_c[t] = v" in fn.explain()

    def read_later(x):
        h, loss = step(x)
        return h * 2.0, loss

    eager, compiled, fn = _eager_and_compiled(read_later, [x])
    assert not _gradient_nodes(fn)
    np.testing.assert_array_equal(eager[1][0], compiled[1][0])


@pytest.mark.parametrize("n", [999, 1 << 18])
def test_a_mean_and_its_backward_are_one_gradient_loop_with_eager_gradients(n):
    # mean's gradient, 1 / n in the dtype at every element, seeds the loop: eager's bits
    rng = np.random.default_rng(8)
    x = rng.standard_normal(n).astype(np.float32)

    def step(x):
        loss = (nb.tanh(x * 1.5) * x).mean()
        loss.backward()
        return loss

    eager, compiled, fn = _eager_and_compiled(step, [x])
    np.testing.assert_array_equal(eager[1][0], compiled[1][0])
    (node,) = _gradient_nodes(fn)
    assert node.summed and node.scale == 1.0 / n
    assert "mean, backward" in node.describe() and "scale = " in fn.explain()
    exact = np.mean(np.tanh(1.5 * x.astype(np.float64)) * x)
    assert abs(compiled[0][0] - exact) <= 1e-6 * np.mean(np.abs(x)) + 1e-7


def test_a_single_op_and_its_backward_are_one_loop():
    # y = tanh(x); y.backward(g): XLA's one pass reading x and g, writing x.grad
    rng = np.random.default_rng(6)
    g = rng.standard_normal(1 << 17).astype(np.float32)

    def step(x):
        nb.tanh(x).backward(g)
        return x.grad

    x = rng.standard_normal(1 << 17).astype(np.float32)
    eager, compiled, fn = _eager_and_compiled(step, [x])
    _assert_bitwise(eager, compiled)
    (node,) = _gradient_nodes(fn)
    assert not node.summed


@pytest.mark.parametrize("dtype", DTYPES)
def test_gelu_and_its_backward_are_one_loop_and_its_tanh_form_stays_eager(dtype):
    # W2: float32 gelu saves its derivative in eager; the loop recomputes it, same bits
    rng = np.random.default_rng(8)
    g = rng.standard_normal(1 << 17).astype(dtype)

    def exact(x):
        nb.gelu(x).backward(g)
        return x.grad

    def tanh_form(x):
        nb.gelu(x, approximate="tanh").backward(g)
        return x.grad

    x = (rng.standard_normal(1 << 17) * 3).astype(dtype)
    eager, compiled, fn = _eager_and_compiled(exact, [x])
    _assert_bitwise(eager, compiled)
    (node,) = _gradient_nodes(fn)
    node._loops("full")  # generated (as a replay does where no hook is registered)
    assert "R.gelu_grad0_" + np.dtype(dtype).name in "".join(node.sources())
    eager, compiled, fn = _eager_and_compiled(tanh_form, [x])
    _assert_bitwise(eager, compiled)
    assert not _gradient_nodes(fn) and not _fused_regions(fn)


def test_gradient_loop_accumulates_and_steps_aside_for_hooks():
    rng = np.random.default_rng(7)
    w = rng.standard_normal((4, 5))

    def step(x):
        loss = (nb.exp(x * 0.5) * w).sum()
        loss.backward()
        return loss

    compiled = nb.compile(step)
    x_eager = nb.tensor(rng.standard_normal((4, 5)), requires_grad=True)
    x_compiled = nb.tensor(x_eager.numpy().copy(), requires_grad=True)
    for _ in range(3):  # .grad accumulates over the calls, as eager's
        step(x_eager)
        compiled(x_compiled)
    np.testing.assert_array_equal(x_eager.grad.numpy(), x_compiled.grad.numpy())
    (node,) = _gradient_nodes(compiled)
    ran_steps = []
    node.fallback = [_Noting(n, ran_steps) for n in node.fallback]
    elsewhere = nb.tensor(np.ones(2), requires_grad=True)
    elsewhere.register_hook(lambda g: g)
    compiled(x_compiled)   # a hook on another tensor: still the one loop
    assert ran_steps == []
    seen = []
    handle = x_compiled.register_hook(lambda g: seen.append(g.shape))
    compiled(x_compiled)   # a hook on the leaf: the steps run as traced, it sees the gradient
    handle.remove()
    assert seen == [(4, 5)] and len(ran_steps) == len(node.fallback)


class _Noting:
    """A program node that notes in ``ran`` that it ran."""

    def __init__(self, node, ran):
        self.node, self.ran = node, ran

    def run(self, values, args):
        self.ran.append(self.node)
        self.node.run(values, args)


def test_second_derivative_through_a_fused_region():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 4))

    def step(x):
        y = nb.tanh(x * 2.0) * x
        (gx,) = nb.grad(y.sum(), [x], create_graph=True)
        (gx * gx).sum().backward()
        return gx

    eager, compiled, fn = _eager_and_compiled(step, [x])
    _assert_bitwise(eager, compiled)
    assert _fused_regions(fn)


def test_training_steps_compiled_equal_eager():
    def model_and_optimizer():
        nb.manual_seed(0)
        model = nb.nn.Sequential(nb.nn.Linear(2, 16), nb.nn.Tanh(), nb.nn.Linear(16, 1))
        return model, nb.optim.Adam(model.parameters(), lr=1e-2)

    def step_of(model, optimizer):
        def step(x, y):
            optimizer.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            optimizer.step()
            return loss
        return step

    rng = np.random.default_rng(5)
    batches = [(rng.standard_normal((8, 2)).astype(np.float32),
                rng.standard_normal((8, 1)).astype(np.float32)) for _ in range(4)]
    eager_model, eager_opt = model_and_optimizer()
    compiled_model, compiled_opt = model_and_optimizer()
    eager_step = step_of(eager_model, eager_opt)
    compiled_step = nb.compile(step_of(compiled_model, compiled_opt))
    for x, y in batches:
        assert eager_step(x, y).item() == compiled_step(x, y).item()
    for p, q in zip(eager_model.parameters(), compiled_model.parameters()):
        np.testing.assert_array_equal(p.numpy(), q.numpy())
    assert len(compiled_step.variants) == 1


def test_a_new_shape_traces_again_with_a_notice(capsys):
    fn = nb.compile(lambda x: nb.tanh(x) * 2.0)
    fn(np.ones(3, np.float32))
    fn(np.ones(3, np.float32))
    assert capsys.readouterr().err == ""
    out = fn(np.ones(5, np.float32))
    assert out.shape == (5,)
    assert "tracing again" in capsys.readouterr().err
    assert len(fn.variants) == 2


def test_a_change_of_module_mode_traces_again():
    nb.manual_seed(0)
    model = nb.nn.Sequential(nb.nn.Linear(3, 3), nb.nn.Dropout(0.5))
    fn = nb.compile(model)
    x = np.ones((4, 3), np.float32)
    fn(x)
    model.eval()
    np.testing.assert_array_equal(fn(x).numpy(), model(x).numpy())
    assert len(fn.variants) == 2


def test_item_inside_is_a_graph_break(capsys):
    def step(x):
        y = nb.exp(x)
        if y.sum().item() > 0:   # Python control flow on a value
            return y * 2.0
        return y

    fn = nb.compile(step)
    x = nb.tensor(np.ones(3))
    fn(x)
    assert "graph break: item()" in capsys.readouterr().err
    np.testing.assert_array_equal(fn(x).numpy(), step(x).numpy())
    assert "compiled up to a graph break" in fn.explain()


def test_fullgraph_names_the_line():
    def step(x):
        return nb.exp(x).detach()

    with pytest.raises(Exception, match=r"fullgraph=True\): detach\(\) at .*test_compile.py"):
        nb.compile(step, fullgraph=True)(np.ones(2))


def test_random_draw_inside_is_a_graph_break():
    fn = nb.compile(lambda x: x + nb.randn(3))
    fn(np.zeros(3, np.float32))
    (variant,) = fn.variants.values()
    assert variant.program is None and "random draw" in variant.breaks[0][0]


def test_decorator_forms_and_bad_arguments():
    @nb.compile
    def f(x):
        return x * 2.0

    @nb.compile(fullgraph=True)
    def g(x):
        return x * 3.0

    assert f(np.ones(2)).tolist() == [2.0, 2.0]
    assert g(np.ones(2)).tolist() == [3.0, 3.0]
    assert len(f.variants) == 1
    f.reset()
    assert not f.variants and f(np.ones(2)).tolist() == [2.0, 2.0]
    with pytest.raises(TypeError, match="must be callable"):
        nb.compile(3)
    # torch.compile's other arguments port unchanged
    h = nb.compile(lambda x: x * 2.0, mode="max-autotune", backend="inductor", options={})
    assert h(np.ones(2)).tolist() == [2.0, 2.0] and isinstance(h, nb.compiler.Compiled)
    plain = lambda x: x  # noqa: E731
    assert nb.compile(plain, disable=True) is plain
    with pytest.raises(ValueError, match="mode must be one of"):
        nb.compile(plain, mode="fast")


def test_generated_kernels_come_from_the_disk_cache_in_a_second_process(tmp_path):
    script = textwrap.dedent("""
        import numpy as np, nbgrad as nb
        from nbgrad.compiler import fusion
        def step(x):
            y = nb.tanh(x * 1.5) * x
            y.sum().backward()
            return y
        fn = nb.compile(step)
        for _ in range(2):
            fn(nb.tensor(np.ones(10), requires_grad=True))
        hits = sum(sum(f.stats.cache_hits.values()) for m in fusion._modules.values()
                   for f in vars(m).values() if hasattr(f, "stats"))
        print(hits)
    """)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                           text=True, check=True) for _ in range(2)]
    first, second = (int(r.stdout.split()[-1]) for r in runs)
    assert first == 0 and second > 0


def test_an_edit_of_the_compilers_sources_renames_the_generated_module(monkeypatch):
    """Numba's cache keys a generated module by its own file, not by the rules it calls:
    the module's name carries the compiler's sources, so an edited rule is compiled
    again instead of an old one loaded."""
    from nbgrad.compiler import fusion

    source = "def twice(a):\n    return a * 2\n"
    before = fusion.load_generated(fusion._module_source(source, "twice", ""))
    monkeypatch.setattr(fusion, "compiler_stamp", lambda: "an edited rules.py")
    after = fusion.load_generated(fusion._module_source(source, "twice", ""))
    assert before.__name__ != after.__name__
    assert before.twice_parallel(np.ones(2)).tolist() == after.twice_serial(np.ones(2)).tolist()


def test_the_serial_and_parallel_loops_are_cached_apart():
    """Numba's disk cache keys a kernel by its function's name, not its flags: the serial
    form of a generated loop is a copy under a name of its own, so that a process never
    loads the serial loop where it asked for the parallel one (W17 ran at half speed)."""
    from nbgrad.compiler.fusion import load_kernel

    source = "def fill_ones(a):\n    for i in prange(a.size):\n        a[i] = 1\n"
    parallel, serial, _ = load_kernel(source, "fill_ones")
    assert parallel.py_func.__name__ == "fill_ones"
    assert serial.py_func.__name__ == "fill_ones_serial"
    assert parallel.targetoptions.get("parallel") and not serial.targetoptions.get("parallel")
    a = np.zeros(5)
    serial(a)
    assert a.tolist() == [1.0] * 5


def test_an_op_handed_a_tensors_array_reads_each_calls_values():
    """cross_entropy hands its op the targets' array: the replay reads the new batch's
    labels, not the traced ones, and a label out of range is an error, not a read past
    the logits' row."""
    rng = np.random.default_rng(9)
    w = nb.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    x = nb.tensor(rng.standard_normal((5, 3)))

    def step(x, y):
        return nb.cross_entropy(x @ w, y)

    fn = nb.compile(step)
    for _ in range(3):
        y = nb.tensor(rng.integers(0, 4, 5))
        assert fn(x, y).item() == step(x, y).item()
    with pytest.raises(ValueError, match=r"cross_entropy: target\[2\] = 4 is out of range"):
        fn(x, nb.tensor(np.array([0, 1, 4, 2, 3])))

    def nll(x, y):    # nll_loss hands its op the targets' array
        return nb.nn.functional.nll_loss(nb.log_softmax(x @ w, 1), y)

    fn = nb.compile(nll)
    for _ in range(3):
        y = nb.tensor(rng.integers(0, 4, 5))
        assert fn(x, y).item() == nll(x, y).item()


@pytest.mark.parametrize("size", [1, 37, 1 << 17])
def test_ops_that_square_the_same_value_keep_eagers_bits(size):
    """tanh of a tanh: the outer tanh squares the inner one's output, and so does the
    inner one's gradient (1 - y^2). Inlined into one loop, LLVM merges the two products,
    and a contraction left to LLVM would then round 1 - y^2 differently from eager's
    backward kernel (rules.py writes that FMA explicitly)."""
    rng = np.random.default_rng(size)
    z = _values(rng, size, np.float32)
    g = _values(rng, size, np.float32)

    def step(z):
        y = nb.tanh(nb.tanh(z))
        (y * g).sum().backward()
        return y

    _assert_bitwise(*_eager_and_compiled(step, [z])[:2])
