"""Host calls in step programs (nbgrad/compiler/step_program.py): an op with no primitive
form -- a convolution, a pooling, abs -- runs its own forward and backward on a Context
of its own between the generated functions. The same kernels on the same arrays as
eager's, so a step of them matches eager bit for bit; what the step graph cannot
express that way (a second derivative through such an op, an op with several outputs)
keeps the recorded program."""

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads
from hypothesis import given
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.compiler.step_codegen import _index, _merged_axes
from nbgrad.compiler.step_program import StepProgram, _Call


def _program(compiled):
    (variant,) = compiled.variants.values()
    return variant.program


def _assert_same(a, b):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b), strict=True)


def _twice(make, steps=3):
    """(eager results, compiled results, compiled fn) of ``steps`` calls of the function
    ``make()`` returns, each on its own copy of the parameters."""
    eager, leaves_e = make()
    fn, leaves_c = make()
    compiled = nb.compile(fn)
    outs_e = [_fresh(leaves_e, eager).numpy() for _ in range(steps)]
    outs_c = [_fresh(leaves_c, compiled).numpy() for _ in range(steps)]
    return (outs_e, [p.numpy() for p in leaves_e], [None if p.grad is None else
                                                     p.grad.numpy() for p in leaves_e]), \
           (outs_c, [p.numpy() for p in leaves_c], [None if p.grad is None else
                                                    p.grad.numpy() for p in leaves_c]), \
        compiled


def _fresh(leaves, fn):
    """fn() with the leaves' gradients cleared first."""
    for p in leaves:
        p.grad = None
    return fn()


def _assert_twins(eager, compiled):
    for a, b in zip(eager, compiled):
        for x, y in zip(a, b):
            if x is None or y is None:
                assert x is y
            else:
                _assert_same(x, y)


@pytest.mark.parametrize("passes", [1, 2])
def test_an_op_without_a_primitive_form_runs_as_a_host_call(passes):
    """abs as a host call, with one backward pass or two through the same Context."""
    a = np.array([[0.5, -1.5], [2.0, 0.25]])

    def make():
        x = nb.tensor(a.copy(), requires_grad=True)

        def step():
            loss = nb.abs(x @ x).sum()
            for k in range(passes):
                loss.backward(retain_graph=k + 1 < passes)
            return loss
        return step, [x]

    eager, compiled, fn = _twice(make)
    _assert_twins(eager, compiled)
    program = _program(fn)
    assert isinstance(program, StepProgram)
    assert "= Abs.forward(" in program.text and "= Abs.backward(" in program.text


def _cnn(seed, batch, dtype, stride, padding, groups, momentum, nonfinite=False):
    """A conv-relu-pool-conv-relu-pool-linear-cross-entropy training step with SGD."""
    rng = np.random.default_rng(seed)
    c1, c2 = 2 * groups, 4 * groups
    x = rng.standard_normal((batch, groups, 9, 9)).astype(dtype)
    side = (9 + 2 * padding - 3) // stride + 1
    for _ in range(2):          # two pools of 2 in ceil mode
        side = -(-side // 2)
    shapes = {"w1": (c1, 1, 3, 3), "b1": (c1,), "w2": (c2, c1 // groups, 3, 3),
              "b2": (c2,), "head": (3, c2 * side * side)}
    values = {k: (rng.standard_normal(s) * 0.5).astype(dtype) for k, s in shapes.items()}
    if nonfinite:
        values["w2"][0, 0, 1, 1] = np.inf
    labels = rng.integers(0, 3, batch)

    def make():
        p = {k: nb.tensor(v.copy(), requires_grad=True) for k, v in values.items()}
        opt = nb.optim.SGD(list(p.values()), lr=0.05, momentum=momentum)
        images, classes = nb.tensor(x), nb.tensor(labels)

        def step():
            opt.zero_grad()
            h = nb.relu(nb.conv2d(images, p["w1"], p["b1"], stride=stride, padding=padding,
                                  groups=groups))
            h = nb.max_pool2d(h, 2, ceil_mode=True)
            h = nb.relu(nb.conv2d(h, p["w2"], p["b2"], padding=1, groups=groups))
            h = nb.max_pool2d(h, 2, ceil_mode=True).flatten(1)
            loss = nb.cross_entropy(h @ p["head"].T, classes)
            loss.backward()
            opt.step()
            return loss
        return step, p

    return make


@given(seed=st.integers(0, 2**16), batch=st.integers(1, 5),
       dtype=st.sampled_from([np.float32, np.float64]), stride=st.integers(1, 2),
       padding=st.integers(0, 1), groups=st.integers(1, 2),
       momentum=st.sampled_from([0.0, 0.9]))
def test_a_cnn_step_with_host_calls_gives_eager_bits(seed, batch, dtype, stride, padding,
                                                     groups, momentum):
    make = _cnn(seed, batch, dtype, stride, padding, groups, momentum)

    def run(compile_it):
        step, p = make()
        fn = nb.compile(step) if compile_it else step
        losses = [fn().numpy() for _ in range(3)]
        return fn, losses, {k: v.numpy() for k, v in p.items()}, \
            {k: v.grad.numpy() for k, v in p.items()}

    _, losses_e, params_e, grads_e = run(False)
    fn, losses_c, params_c, grads_c = run(True)
    assert isinstance(_program(fn), StepProgram)
    assert "Conv2dActivation.backward(" in _program(fn).text   # relu in the conv kernels
    _assert_same(np.array(losses_e), np.array(losses_c))
    for k in params_e:
        _assert_same(params_e[k], params_c[k])
        _assert_same(grads_e[k], grads_c[k])


def test_a_conv_weight_with_an_inf_takes_eagers_exact_kernels_in_a_host_call():
    make = _cnn(3, 4, np.float32, 1, 1, 1, 0.0, nonfinite=True)
    outs = []
    for compile_it in (False, True):
        step, p = make()
        fn = nb.compile(step) if compile_it else step
        fn()
        outs.append({k: v.grad.numpy() for k, v in p.items()})
    assert np.isnan(outs[0]["w1"]).any()   # the inf reached the gradients
    for k in outs[0]:
        _assert_same(outs[0][k], outs[1][k])


def test_a_host_array_that_views_the_arena_is_copied_and_others_are_kept():
    arena = np.arange(8.0)
    call = _Call(arena, [], [], ())
    own = np.ones(2)
    call.kept(0, arena[2:6].reshape(2, 2))
    call.kept(1, own)
    assert not np.shares_memory(call.host[0], arena)
    _assert_same(call.host[0], np.array([[2.0, 3.0], [4.0, 5.0]]))
    assert call.host[1] is own


def test_views_of_the_arena_through_host_calls_match_eager():
    """permute over three axes has no primitive form and returns a view of its input,
    which a generated function made in the arena, and its backward a view of its
    gradient, in the arena too; later values take freed slices of the same size."""
    rng = np.random.default_rng(0)
    a, w = rng.standard_normal((6, 4)), rng.standard_normal((4, 4))

    def make():
        x, weight = nb.tensor(a.copy(), requires_grad=True), nb.tensor(w.copy(),
                                                                         requires_grad=True)

        def step():
            h = nb.tanh(x @ weight).reshape(2, 3, 4).permute(2, 0, 1)
            later = nb.sigmoid(x @ weight) * 3.0 - 1.0
            loss = (h * h).sum() + (later.reshape(4, 2, 3) * h).sum()
            loss.backward()
            return loss
        return step, [x, weight]

    eager, compiled, fn = _twice(make)
    _assert_twins(eager, compiled)
    assert "Permute.forward(" in _program(fn).text


def test_a_gradient_of_a_broadcast_shape_is_summed_as_the_engine_sums_it():
    rng = np.random.default_rng(1)
    a, w, b = rng.standard_normal((5, 3)), rng.standard_normal((3, 3)), rng.standard_normal(3)

    def make():
        x, weight, bound = (nb.tensor(v.copy(), requires_grad=True) for v in (a, w, b))

        def step():
            loss = nb.maximum(x @ weight, bound).sum()
            loss.backward()
            return loss
        return step, [x, weight, bound]

    eager, compiled, fn = _twice(make)
    _assert_twins(eager, compiled)
    assert isinstance(_program(fn), StepProgram)


@pytest.mark.parametrize("kind", ["second derivative", "several outputs"])
def test_what_host_calls_cannot_express_keeps_the_recorded_program(kind):
    a = np.array([[0.5, -1.5, 1.0], [2.0, 0.25, -0.5]])

    def make():
        x = nb.tensor(a.copy(), requires_grad=True)
        w = nb.tensor(a.T.copy(), requires_grad=True)

        def step():
            h = x @ w
            if kind == "second derivative":
                (g,) = nb.grad(nb.abs(h).sum(), [w], create_graph=True)
                loss = (g * g).sum()
            else:
                values, _ = nb.sort(h, dim=1)
                loss = (values * values).sum()
            loss.backward()
            return loss
        return step, [x, w]

    eager, compiled, fn = _twice(make)
    _assert_twins(eager, compiled)
    assert not isinstance(_program(fn), StepProgram)


@st.composite
def broadcasts(draw):
    """A shape of 1-4 axes and 1-3 operand shapes broadcast against it."""
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=4)))
    operands = []
    for _ in range(draw(st.integers(1, 3))):
        drop = draw(st.integers(0, len(shape)))
        kept = [n if draw(st.booleans()) else 1 for n in shape[drop:]]
        operands.append(tuple(kept))
    return shape, operands


@given(broadcasts())
def test_merged_loops_visit_each_operands_elements_as_numpy_broadcasts_them(case):
    """The generated loops over merged axes read, at the k-th element of the result,
    the element NumPy's broadcasting pairs with it, for every operand."""
    shape, operands = case
    loops, merged = _merged_axes(shape, operands)
    assert int(np.prod(loops, dtype=np.int64)) == int(np.prod(shape, dtype=np.int64))
    for own, m in zip(operands, merged):
        expected = np.broadcast_to(np.arange(int(np.prod(own))).reshape(own), shape).ravel()
        flat_index = _index(m, loops)
        got = [eval(flat_index, {}, dict(zip((f"i{d}" for d in range(len(loops))), at)))
               for at in np.ndindex(*loops)] if loops else [0]
        _assert_same(np.array(got, dtype=expected.dtype), expected)


def test_a_large_sum_over_inner_axes_runs_the_engines_sum_to_shape():
    """A per-channel scale of a [N, C, H, W] value: its gradient sums over N, H and W,
    which the step program leaves to the engine's own ``sum_to_shape`` (parallel).
    Eager's mul sums ``g * x`` as it forms it (``reduce_term``), in an order that can
    differ: float64 to 1e-12, the step programs' bound."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((64, 8, 16, 16))
    w, s = rng.standard_normal((256, 4)), rng.standard_normal((1, 8, 1, 1))

    def make():
        x = nb.tensor(a)
        weight, scale = (nb.tensor(v.copy(), requires_grad=True) for v in (w, s))

        def step():
            h = nb.tanh(x * scale).reshape(512, 256)
            loss = (h @ weight).sum()
            loss.backward()
            return loss
        return step, [weight, scale]

    eager, compiled, fn = _twice(make)
    for a_list, b_list in zip(eager, compiled):
        for x, y in zip(a_list, b_list):
            np.testing.assert_allclose(y, x, rtol=1e-12, atol=1e-12)
    text = _program(fn).text
    assert "sum_to_shape(" in text
    assert "the same elements, where they are" in text   # the reshape, in place


def test_class_indices_handed_over_as_an_array_are_read_at_each_call():
    """cross_entropy given its targets as a NumPy array: the program reads that array at
    every call, as the recorded ops do, so a change made to it between calls is seen."""
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((6, 5)), rng.standard_normal((3, 5))
    labels = rng.integers(0, 3, 6)
    results = []
    for compile_it in (False, True):
        targets = labels.copy()
        weight = nb.tensor(w.copy(), requires_grad=True)

        def step(weight=weight, targets=targets):
            loss = nb.cross_entropy(nb.tensor(x) @ weight.T, targets)
            loss.backward()
            return loss

        fn = nb.compile(step) if compile_it else step
        seen = []
        for _ in range(3):
            weight.grad = None
            seen += [fn().numpy(), weight.grad.numpy()]
            targets[:] = (targets + 1) % 3
        results.append(seen)
    for a, b in zip(*results):
        _assert_same(a, b)
    assert isinstance(_program(fn), StepProgram)


def test_a_cnn_step_program_gives_the_same_bits_on_one_thread_and_two():
    """Large enough for the parallel forms (a conv output of 262,144 values, its bias's
    gradient a large inner-axis sum): the same parameters after three steps."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((64, 4, 16, 16)).astype(np.float32)
    values = {"w": rng.standard_normal((16, 4, 3, 3)).astype(np.float32) * 0.3,
              "scale": rng.standard_normal((1, 16, 1, 1)).astype(np.float32),
              "head": rng.standard_normal((10, 16 * 8 * 8)).astype(np.float32) * 0.05}
    labels = rng.integers(0, 10, 64)

    def train():
        p = {k: nb.tensor(v.copy(), requires_grad=True) for k, v in values.items()}
        opt = nb.optim.SGD(list(p.values()), lr=0.05, momentum=0.9)

        def step(images, classes):
            opt.zero_grad()
            h = nb.relu(nb.conv2d(images, p["w"], padding=1) * p["scale"])
            h = nb.max_pool2d(h, 2).flatten(1)
            loss = nb.cross_entropy(h @ p["head"].T, classes)
            loss.backward()
            opt.step()
            return loss

        fn = nb.compile(step)
        for _ in range(3):
            fn(nb.tensor(x), nb.tensor(labels))
        assert isinstance(_program(fn), StepProgram)
        assert "sum_to_shape(" in _program(fn).text
        return [v.numpy() for v in p.values()]

    for a, b in zip(at_threads(1, train), at_threads(2, train)):
        assert_same_bits(a, b)
