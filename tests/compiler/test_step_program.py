"""Step programs (nbgrad/compiler/step_program.py): a traced step whose ops all have a
primitive form runs as one generated function, forward, gradients and second
derivatives included. Each is checked against eager: float64 to 1e-12 (the sums run in
another order), the gradients of point-wise chains of one shape bit for bit; and every
assumption the program makes, when broken, hands the call back to the recorded one."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.compiler.step_program import StepProgram

F64 = np.float64


def _program(compiled):
    (variant,) = compiled.variants.values()
    return variant.program


def _mlp(rng, sizes, dtype):
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        params += [nb.tensor((rng.standard_normal((fan_out, fan_in)) / np.sqrt(fan_in))
                             .astype(dtype), requires_grad=True),
                   nb.tensor(rng.standard_normal(fan_out).astype(dtype) * 0.1,
                             requires_grad=True)]
    return params


def _forward(params, h):
    for w, b in zip(params[:-2:2], params[1:-2:2]):
        h = nb.tanh(h @ w.T + b)
    return h @ params[-2].T + params[-1]


def _train(params, optimizer):
    def step(x, y):
        optimizer.zero_grad()
        loss = ((_forward(params, x) - y) ** 2).mean()
        loss.backward()
        optimizer.step()
        return loss
    return step


def _pair(make):
    """(eager params, eager step), (compiled params, compiled step) from one seed."""
    eager, compiled = make(), make()
    return eager, (compiled[0], nb.compile(compiled[1], fullgraph=True))


def _assert_close_runs(pairs, inputs, steps, rtol):
    (pe, se), (pc, sc) = pairs
    for _ in range(steps):
        np.testing.assert_allclose(sc(*inputs).numpy(), se(*inputs).numpy(), rtol=rtol)
    for p, q in zip(pe, pc):
        np.testing.assert_allclose(q.numpy(), p.numpy(), rtol=rtol, atol=rtol)
    return sc


@settings(max_examples=8, deadline=None)
@given(st.lists(st.integers(1, 9), min_size=2, max_size=4), st.integers(1, 12),
       st.sampled_from(["SGD", "Adam"]), st.sampled_from([np.float32, np.float64]))
def test_mlp_training_step_is_one_program_and_matches_eager(sizes, rows, name, dtype):
    rng = np.random.default_rng(len(sizes) * 100 + rows)
    x = nb.tensor(rng.standard_normal((rows, sizes[0])).astype(dtype))
    y = nb.tensor(rng.standard_normal((rows, sizes[-1])).astype(dtype))

    def make():
        params = _mlp(np.random.default_rng(7), sizes, dtype)
        return params, _train(params, getattr(nb.optim, name)(params, lr=0.05))

    rtol = 1e-12 if dtype == np.float64 else 2e-5
    compiled = _assert_close_runs(_pair(make), (x, y), 3, rtol)
    assert isinstance(_program(compiled), StepProgram)


def _pinn(dtype):
    rng = np.random.default_rng(3)
    params = []
    for fan_in, fan_out in [(1, 8), (8, 8), (8, 1)]:
        params += [nb.tensor(rng.standard_normal((fan_in, fan_out)).astype(dtype),
                             requires_grad=True),
                   nb.tensor(rng.standard_normal(fan_out).astype(dtype), requires_grad=True)]
    optimizer = nb.optim.Adam(params, lr=1e-2)

    def u(h):
        for w, b in zip(params[:-2:2], params[1:-2:2]):
            h = nb.tanh(h @ w + b)
        return h @ params[-2] + params[-1]

    def step(x, f):
        optimizer.zero_grad()
        (u_x,) = nb.grad(u(x).sum(), x, create_graph=True)
        (u_xx,) = nb.grad(u_x.sum(), x, create_graph=True)
        loss = ((u_xx + f) ** 2).mean() + (u(x * 0.0) ** 2).mean()
        loss.backward()
        optimizer.step()
        return loss, u_xx

    return params, step


def test_second_derivatives_in_a_step_program_match_eager():
    x = nb.tensor(np.linspace(0, 1, 17)[:, None], requires_grad=True)
    f = nb.tensor(np.sin(np.linspace(0, 3, 17))[:, None])
    (pe, se), (pc, sc) = _pair(lambda: _pinn(F64))
    for _ in range(3):
        (le, ue), (lc, uc) = se(x, f), sc(x, f)
        np.testing.assert_allclose(lc.numpy(), le.numpy(), rtol=1e-12)
        np.testing.assert_allclose(uc.numpy(), ue.numpy(), rtol=1e-12, atol=1e-12)
    for p, q in zip(pe, pc):
        np.testing.assert_allclose(q.numpy(), p.numpy(), rtol=1e-12, atol=1e-12)
    assert isinstance(_program(sc), StepProgram)
    assert "product_into" in sc.explain() and "R.tanh_value" in sc.explain()
    assert uc.grad_fn is None and not uc.requires_grad   # the backward has been done


UNARY = {"tanh": nb.tanh, "exp": lambda h: nb.exp(h * 0.25), "neg": lambda h: -h,
         "square": lambda h: h ** 2}
BINARY = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b,
          "mul": lambda a, b: a * b, "div": lambda a, b: a / (b * b + 1.0)}


@st.composite
def chains(draw):
    ops = draw(st.lists(st.sampled_from(sorted(UNARY) + sorted(BINARY)), min_size=1,
                        max_size=8))
    broadcast = draw(st.lists(st.booleans(), min_size=len(ops), max_size=len(ops)))
    return ops, broadcast, draw(st.integers(1, 6)), draw(st.integers(1, 7))


@settings(max_examples=20, deadline=None)
@given(chains())
def test_random_chains_with_bias_operands_give_eager_gradients(chain):
    """Point-wise chains over [rows, cols] with [cols] operands, after a product: the
    gradient of the full-shape leaf bit for bit (eager's kernel formulas in the same
    order, eager's GEMM), the rest to rounding (a [cols] operand's gradient is a sum over
    the rows)."""
    ops, broadcast, rows, cols = chain
    rng = np.random.default_rng(len(ops) * 31 + rows * 7 + cols)
    data = rng.standard_normal((rows, cols))
    biases = [rng.standard_normal(cols) for _ in ops]
    mix = nb.tensor(rng.standard_normal((cols, cols)))

    def run(compiled):
        x = nb.tensor(data.copy(), requires_grad=True)
        bs = [nb.tensor(b.copy(), requires_grad=True) for b in biases]

        def step(x):
            h = x @ mix                     # a product: what makes a step program
            for op, wide, b in zip(ops, broadcast, bs):
                other = b if wide else x
                h = UNARY[op](h) if op in UNARY else BINARY[op](h, other)
            loss = (h * h).sum()
            loss.backward()
            return loss

        fn = nb.compile(step, fullgraph=True) if compiled else step
        fn(x)
        x.grad = None
        for b in bs:
            b.grad = None
        loss = fn(x)
        return loss, x, bs, fn

    (le, xe, be, _), (lc, xc, bc, fn) = run(False), run(True)
    assert isinstance(_program(fn), StepProgram)
    np.testing.assert_allclose(lc.numpy(), le.numpy(), rtol=1e-12)
    if not any(broadcast):
        np.testing.assert_array_equal(xc.grad.numpy(), xe.grad.numpy())
    np.testing.assert_allclose(xc.grad.numpy(), xe.grad.numpy(), rtol=1e-11, atol=1e-11)
    for p, q in zip(be, bc):
        assert (p.grad is None) == (q.grad is None)
        if p.grad is not None:
            np.testing.assert_allclose(q.grad.numpy(), p.grad.numpy(), rtol=1e-11, atol=1e-11)


def _sgd_mlp():
    params = _mlp(np.random.default_rng(1), [3, 5, 2], F64)
    return params, _train(params, nb.optim.SGD(params, lr=0.1))


def test_a_hook_on_a_parameter_runs_the_recorded_program():
    rng = np.random.default_rng(2)
    x, y = nb.tensor(rng.standard_normal((4, 3))), nb.tensor(rng.standard_normal((4, 2)))
    (pe, se), (pc, sc) = _pair(_sgd_mlp)
    sc(x, y), se(x, y)
    seen = []
    for p in (pe[0], pc[0]):
        p.register_hook(lambda g, seen=seen: seen.append(g.shape) or g * 2)
    _assert_close_runs(((pe, se), (pc, sc)), (x, y), 2, 1e-12)
    assert len(seen) == 4   # each hook ran at each step, compiled or not


def test_inputs_are_read_at_each_call_and_a_changed_leaf_falls_back():
    rng = np.random.default_rng(3)
    x, y = nb.tensor(rng.standard_normal((4, 3))), nb.tensor(rng.standard_normal((4, 2)))
    (pe, se), (pc, sc) = _pair(_sgd_mlp)
    _assert_close_runs(((pe, se), (pc, sc)), (x, y), 2, 1e-12)
    x._data[:] = rng.standard_normal((4, 3))        # new data in the same array
    _assert_close_runs(((pe, se), (pc, sc)), (x, y), 2, 1e-12)
    for p in (pe[1], pc[1]):
        p.requires_grad_(False)                     # a bias frozen: no gradient for it
    _assert_close_runs(((pe, se), (pc, sc)), (x, y), 2, 1e-12)
    assert pc[1].grad is None


def test_an_exponent_other_than_two_falls_back():
    e = nb.tensor(np.array(2.0))
    x = nb.tensor(np.array([[0.5, -1.5], [2.0, 0.25]]), requires_grad=True)

    def step(x):
        loss = ((x @ x) ** e).sum()
        loss.backward()
        return loss

    fn = nb.compile(step, fullgraph=True)
    fn(x)
    assert isinstance(_program(fn), StepProgram)
    e._data[...] = 3.0
    x.grad = None
    a = x.numpy()
    np.testing.assert_allclose(fn(x).numpy(), np.sum((a @ a) ** 3))
    g = 3 * (a @ a) ** 2
    np.testing.assert_allclose(x.grad.numpy(), g @ a.T + a.T @ g)


def test_a_step_without_products_stays_with_the_fused_regions():
    x = nb.tensor(np.linspace(-1, 1, 12), requires_grad=True)

    def step(x):
        loss = (nb.tanh(x) * x).sum()
        loss.backward()
        return loss

    fn = nb.compile(step)
    fn(x)
    assert not isinstance(_program(fn), StepProgram)


def test_a_step_program_loads_from_the_disk_cache_in_a_second_process(tmp_path):
    """Its products call the GEMM's C function by symbol: a process that loads the
    program from the cache must provide that symbol first (runtime/cache.py)."""
    script = textwrap.dedent("""
        import numpy as np, nbgrad as nb
        from nbgrad.compiler import fusion
        w = nb.tensor(np.linspace(-1, 1, 12).reshape(3, 4).astype(np.float32),
                      requires_grad=True)
        def step(x):
            loss = nb.tanh(x @ w).mean()
            loss.backward()
            return loss
        fn = nb.compile(step)
        x = nb.tensor(np.ones((5, 3), np.float32))
        for _ in range(2):
            w.grad = None
            loss = fn(x)
        hits = sum(sum(f.stats.cache_hits.values()) for m in fusion._modules.values()
                   for f in vars(m).values() if hasattr(f, "stats"))
        print(hits, loss.item(), float(w.grad.numpy().sum()))
    """)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                           text=True, check=True).stdout.split() for _ in range(2)]
    assert runs[0][0] == "0" and int(runs[1][0]) > 0
    assert runs[0][1:] == runs[1][1:]


def test_a_forward_without_backward_keeps_its_graph():
    w = nb.tensor(np.eye(2), requires_grad=True)
    fn = nb.compile(lambda x: nb.tanh(x @ w))
    out = fn(nb.tensor(np.ones((3, 2))))
    assert not isinstance(_program(fn), StepProgram)
    out.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), np.full((2, 2), 3 * (1 - np.tanh(1.0) ** 2)))


def _sequential_step(dtype):
    nb.manual_seed(0)
    model = nb.nn.Sequential(nb.nn.Linear(3, 8), nb.nn.ReLU(), nb.nn.Linear(8, 8),
                             nb.nn.Sigmoid(), nb.nn.Linear(8, 8), nb.nn.SiLU(),
                             nb.nn.Linear(8, 2), nb.nn.GELU()).to(dtype)
    optimizer = nb.optim.Adam(model.parameters(), lr=1e-2)

    def step(x, y):
        optimizer.zero_grad()
        h = model(x).reshape(10).view(5, 2)
        loss = nb.nn.functional.mse_loss(h, y) + nb.log(nb.exp(h).sum()) + h.flatten().mean()
        loss.backward()
        optimizer.step()
        return loss

    return list(model.parameters()), step


def test_modules_and_losses_of_an_ordinary_model_become_one_program():
    rng = np.random.default_rng(4)
    for dtype, rtol in ((np.float64, 1e-12), (np.float32, 2e-5)):
        x = nb.tensor(rng.standard_normal((5, 3)).astype(dtype))
        y = nb.tensor(rng.standard_normal((5, 2)).astype(dtype))
        compiled = _assert_close_runs(_pair(lambda dtype=dtype: _sequential_step(dtype)),
                                      (x, y), 3, rtol)
        program = _program(compiled)
        assert isinstance(program, StepProgram)
        assert "linear" in program.recorded and "mse_loss" in program.recorded


SECOND_ORDER = {"tanh": nb.tanh, "exp": nb.exp, "log": lambda h: nb.log(h * h + 1.0),
                "sigmoid": nb.sigmoid, "relu": nb.relu, "silu": nb.nn.functional.silu,
                "square": lambda h: h ** 2, "div": lambda h: 1.0 / (h * h + 1.0)}


def test_second_derivatives_of_each_point_wise_op_match_eager():
    """d/dw of (du/dx)^2 for u = op(x w): each op's create_graph rule, differentiated."""
    data = np.random.default_rng(5).standard_normal((6, 1))
    for name, op in SECOND_ORDER.items():
        def step(x, w, op=op):
            (du,) = nb.grad(op(x @ w).sum(), x, create_graph=True)
            loss = (du * du).sum()
            loss.backward()
            return loss

        losses, grads = [], []
        for fn in (step, nb.compile(step, fullgraph=True)):
            x = nb.tensor(data, requires_grad=True)
            w = nb.tensor(np.array([[0.7, -1.3, 0.4]]), requires_grad=True)
            losses.append(fn(x, w).numpy())
            grads.append(w.grad.numpy())
        assert isinstance(_program(fn), StepProgram), name
        np.testing.assert_allclose(losses[1], losses[0], rtol=1e-12, err_msg=name)
        np.testing.assert_allclose(grads[1], grads[0], rtol=1e-11, atol=1e-12, err_msg=name)


OPTIMIZERS = [("SGD", {"lr": 0.1}), ("SGD", {"lr": 0.1, "momentum": 0.9, "dampening": 0.1}),
              ("SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
              ("Adam", {"lr": 0.01}), ("Adam", {"lr": 0.01, "amsgrad": True, "maximize": True}),
              ("AdamW", {"lr": 0.01, "weight_decay": 0.1})]


def test_the_optimiser_step_inside_the_program_keeps_eager_state():
    """The update runs in the generated function; parameters, state, step counts and
    version counters follow eager's, a new learning rate is read at each call, and a
    change of the state's layout (amsgrad or momentum switched) hands back to eager."""
    rng = np.random.default_rng(6)
    x, y = nb.tensor(rng.standard_normal((6, 3))), nb.tensor(rng.standard_normal((6, 2)))
    for name, options in OPTIMIZERS:
        runs = []
        for compiled in (False, True):
            params = _mlp(np.random.default_rng(8), [3, 4, 2], F64)
            optimizer = getattr(nb.optim, name)(params, **options)
            step = _train(params, optimizer)
            runs.append((params, optimizer, nb.compile(step) if compiled else step))
        for k in range(6):
            if k == 2:
                for _, optimizer, _ in runs:
                    optimizer.param_groups[0]["lr"] *= 0.5
            if k == 4:   # the state's layout changes: the recorded program runs
                for _, optimizer, _ in runs:
                    group = optimizer.param_groups[0]
                    if "amsgrad" in group:
                        group["amsgrad"] = not group["amsgrad"]
                    else:
                        group["momentum"] = 0.5 if group["momentum"] == 0 else 0.0
                        group["nesterov"] = False
            losses = [fn(x, y).numpy() for _, _, fn in runs]
            np.testing.assert_allclose(losses[1], losses[0], rtol=1e-12, err_msg=name)
            if k == 0:
                program = _program(runs[1][2])
                assert isinstance(program, StepProgram) and program.update is not None, name
        (pe, oe, _), (pc, oc, _) = runs
        for p, q in zip(pe, pc):
            np.testing.assert_allclose(q.numpy(), p.numpy(), rtol=1e-12, atol=1e-14)
            assert p._version == q._version
            state_e, state_c = oe.state.get(p, {}), oc.state.get(q, {})
            assert state_e.keys() == state_c.keys(), name
            for key in state_e:
                np.testing.assert_allclose(state_c[key], state_e[key], rtol=1e-12,
                                           atol=1e-14, err_msg=f"{name} {key}")


def _classifier(dtype):
    nb.manual_seed(0)
    model = nb.nn.Sequential(nb.nn.Linear(4, 16), nb.nn.ReLU(), nb.nn.Linear(16, 3)).to(dtype)
    optimizer = nb.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(x, y):
        optimizer.zero_grad()
        loss = nb.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    return list(model.parameters()), step


def test_a_classifier_step_with_cross_entropy_is_eagers_bits():
    """cross_entropy through eager's fused kernels and float64 sum: the losses and the
    parameters of an MLP classifier bit for bit, batch after batch; a label that is no
    class hands the call to the recorded op, which names it."""
    rng = np.random.default_rng(7)
    for dtype in (np.float32, np.float64):
        (pe, se), (pc, sc) = _pair(lambda dtype=dtype: _classifier(dtype))
        for _ in range(4):
            x = nb.tensor(rng.standard_normal((8, 4)).astype(dtype))
            y = nb.tensor(rng.integers(0, 3, 8))
            np.testing.assert_array_equal(sc(x, y).numpy(), se(x, y).numpy())
        for p, q in zip(pe, pc):
            np.testing.assert_array_equal(q.numpy(), p.numpy())
        assert isinstance(_program(sc), StepProgram)
        with pytest.raises(ValueError, match=r"target\[3\] = 3 is out of range for C = 3"):
            sc(x, nb.tensor(np.array([0, 1, 2, 3, 0, 1, 2, 0])))


def test_a_step_program_gives_the_same_bits_on_one_thread_and_two():
    """At these sizes products and point-wise loops run in parallel: products split
    their outputs by the shapes alone, point-wise loops compute each element in one
    task, the rest runs in one thread, so the thread count changes no bit; and the
    step stays eager's to rounding."""
    rng = np.random.default_rng(11)
    x = nb.tensor(rng.standard_normal((2048, 64)).astype(np.float32))
    y = nb.tensor(rng.standard_normal((2048, 64)).astype(np.float32))
    results = []
    for threads in (2, 1):
        params = _mlp(np.random.default_rng(3), [64, 64, 64], np.float32)
        step = nb.compile(_train(params, nb.optim.SGD(params, lr=0.1)))
        previous = nb.get_num_threads()
        nb.set_num_threads(min(threads, previous))
        try:
            losses = [step(x, y).numpy() for _ in range(3)]
        finally:
            nb.set_num_threads(previous)
        assert isinstance(_program(step), StepProgram)
        results.append((losses, [p.numpy().copy() for p in params]))
    (l2, p2), (l1, p1) = results
    for a, b in zip(l2 + p2, l1 + p1):
        np.testing.assert_array_equal(a, b)
    assert "prange(" in _program(step).text
    params = _mlp(np.random.default_rng(3), [64, 64, 64], np.float32)
    eager = _train(params, nb.optim.SGD(params, lr=0.1))
    losses = [eager(x, y).numpy() for _ in range(3)]
    np.testing.assert_allclose(l1, losses, rtol=2e-6)
    for a, b in zip(p1, params):
        np.testing.assert_allclose(a, b.numpy(), rtol=2e-5, atol=1e-6)


def test_a_strided_input_changed_in_place_is_read_again():
    w = nb.tensor(np.eye(3), requires_grad=True)
    base = np.arange(12.0).reshape(3, 4)
    x = nb.from_numpy(base)[:, :3]      # a strided view: the program flattens a copy

    def step(x):
        loss = (x @ w).sum()
        loss.backward()
        return loss

    fn = nb.compile(step)
    for k in range(3):
        base += k                         # the same array, new values
        w.grad = None
        assert fn(x).item() == base[:, :3].sum()
    assert isinstance(_program(fn), StepProgram)


def test_two_backward_passes_before_the_step_add_their_gradients():
    rng = np.random.default_rng(12)
    x, y = nb.tensor(rng.standard_normal((6, 3))), nb.tensor(rng.standard_normal((6, 2)))

    def make():
        params = _mlp(np.random.default_rng(1), [3, 5, 2], F64)
        optimizer = nb.optim.SGD(params, lr=0.1)

        def step(x, y):
            optimizer.zero_grad()
            out = _forward(params, x)
            loss = ((out - y) ** 2).mean()
            loss.backward(retain_graph=True)
            (out * out).sum().backward()
            optimizer.step()
            return loss

        return params, step

    compiled = _assert_close_runs(_pair(make), (x, y), 3, 1e-12)
    assert isinstance(_program(compiled), StepProgram)


@pytest.mark.parametrize("activation", ["tanh", "relu", "sigmoid"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bias_and_activation_run_in_the_products_epilogue(activation, dtype):
    """A parallel product's bias add and relu, tanh or sigmoid run in its epilogue (no
    loop of their own in the program): the layers' outputs are eager's bits (two terms
    per sum, a wider layer, a one-column layer computed as its transpose, so with the
    bias along the tiles' rows), the gradients eager's to rounding."""
    act = getattr(nb, activation)
    rng = np.random.default_rng(11)
    x = nb.tensor(rng.standard_normal((8192, 2)).astype(dtype))
    y = nb.tensor(rng.standard_normal((8192, 1)).astype(dtype))

    def make():
        params = _mlp(np.random.default_rng(5), [2, 96, 160, 1], dtype)
        optimizer = nb.optim.SGD(params, lr=0.01)

        def step(x, y):
            optimizer.zero_grad()
            h = x
            for w, b in zip(params[:-2:2], params[1:-2:2]):
                h = act(h @ w.T + b)
            out = nb.sigmoid(h @ params[-2].T + params[-1])
            ((out - y) ** 2).mean().backward()
            optimizer.step()
            return h, out
        return params, step

    (pe, se), (pc, sc) = _pair(make)
    for _ in range(2):
        for e, c in zip(se(x, y), sc(x, y)):
            np.testing.assert_array_equal(c.numpy(), e.numpy())
    for p, q in zip(pe, pc):
        np.testing.assert_allclose(q.numpy(), p.numpy(), rtol=1e-5 if dtype == np.float32
                                   else 1e-12, atol=1e-7)
    program = _program(sc)
    assert isinstance(program, StepProgram)
    assert f"R.{activation}_value" not in program.text and "R.sigmoid_value" not in program.text
    assert program.text.count("product_into(") == 3 + 5   # forward, and two per backward


@pytest.mark.parametrize("optimizer", ["SGD", "Adam"])
def test_zero_grad_after_the_forward_pass_still_makes_one_program(optimizer):
    """``loss = ...; opt.zero_grad(); loss.backward(); opt.step()``: the zero_grad only
    clears the parameters' gradients, so the program runs it first and the whole step,
    update included, is one step program with eager's results."""
    rng = np.random.default_rng(3)
    x = nb.tensor(rng.standard_normal((32, 3)))
    y = nb.tensor(rng.standard_normal((32, 1)))

    def make():
        params = _mlp(np.random.default_rng(4), [3, 16, 1], F64)
        opt = getattr(nb.optim, optimizer)(params, lr=0.01)

        def step(x, y):
            h = nb.tanh(x @ params[0].T + params[1])
            loss = ((h @ params[2].T + params[3] - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss
        return params, step

    compiled = _assert_close_runs(_pair(make), (x, y), 3, 1e-12)
    program = _program(compiled)
    assert isinstance(program, StepProgram)
    assert program.update is not None and "_update(" in program.text


def test_a_step_whose_op_reads_a_gradient_before_zero_grad_keeps_the_recorded_order():
    """An op before the zero_grad reads a parameter's ``.grad`` (set before each call):
    no step program (an op that reads a ``.grad`` has no form there), and the recorded
    program, in the traced order, gives eager's results."""
    rng = np.random.default_rng(5)
    x = nb.tensor(rng.standard_normal((8, 2)))
    w0 = rng.standard_normal((2, 2))

    def make():
        (w,) = params = [nb.tensor(w0.copy(), requires_grad=True)]
        opt = nb.optim.SGD(params, lr=0.1)

        def step(x):
            loss = (x @ w).sum() + (w.grad * w).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss
        return params, step

    (pe, se), (pc, sc) = _pair(make)
    for k in range(3):
        for p in pe + pc:
            p.grad = nb.tensor(np.full((2, 2), 0.5 + k))
        np.testing.assert_array_equal(sc(x).numpy(), se(x).numpy())
    for p, q in zip(pe, pc):
        np.testing.assert_array_equal(q.numpy(), p.numpy())
    assert not isinstance(_program(sc), StepProgram)
