"""Graph breaks (nbgrad/compiler/breaks.py): the calls before a function's first break run
compiled, the rest eagerly. Each function is checked against eager on both sides of a
branch that depends on a value; the values the function keeps across the break are the
program's; a path that changes before the break is an error, never a second answer."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.compiler import breaks, step_program
from nbgrad.compiler.api import FusedNode


def _variant(compiled):
    (variant,) = compiled.variants.values()
    return variant


def test_a_branch_on_a_value_runs_compiled_before_it_and_eagerly_after_it(capsys):
    def step(x):
        y = nb.exp(x * 0.5)
        z = nb.tanh(y * 2.0) + x
        if z.sum().item() > 0:              # the break: Python control flow on a value
            return z * 2.0
        return z - y

    fn = nb.compile(step)
    rng = np.random.default_rng(0)
    fn(nb.tensor(rng.standard_normal(50)))
    assert "the 6 calls before it run compiled" in capsys.readouterr().err
    prefix = _variant(fn).program
    assert isinstance(prefix, breaks.Prefix)
    assert any(isinstance(node, FusedNode) for node in prefix.program.nodes)
    for sign in (1, -1, 1):   # both branches, from the same variant
        x = nb.tensor(sign * (np.abs(rng.standard_normal(50)) + 3))
        np.testing.assert_array_equal(fn(x).numpy(), step(x).numpy())
    assert len(fn.variants) == 1
    assert "compiled up to a graph break (item()" in fn.explain()


def test_values_held_across_the_break_are_the_programs_not_placeholders():
    store = {}

    def step(x):
        y = nb.tanh(x * 3.0)
        store["y"] = y * 1.5        # held by a dict, read after the break
        z = nb.exp(y) * 2.0         # z: read after the break through a variable
        total = z.sum().item()
        return store["y"] + z + total

    fn = nb.compile(step)
    x = nb.tensor(np.linspace(-1, 1, 7))
    fn(x)
    compiled = fn(x)
    np.testing.assert_array_equal(compiled.numpy(), step(x).numpy())
    assert np.isfinite(store["y"].numpy()).all()


def test_a_value_nothing_holds_at_the_break_stays_in_the_fused_loop():
    def step(x):
        h = nb.tanh(x * 3.0) + 1.0   # the product x * 3.0 is dropped at once
        return h, h.sum().item()

    fn = nb.compile(step)
    x = nb.tensor(np.linspace(-1, 1, 9))
    fn(x)
    prefix = _variant(fn).program
    produced = {ref.index for ref in prefix.kept}
    mul = prefix.nodes[0]
    assert mul.outputs[0] not in produced      # x * 3.0: a register of the loop
    out, total = fn(x)
    eager_out, eager_total = step(x)
    np.testing.assert_array_equal(out.numpy(), eager_out.numpy())
    assert total == eager_total


def _model_and_optimizer(seed):
    nb.manual_seed(seed)
    model = nb.nn.Sequential(nb.nn.Linear(3, 24), nb.nn.Tanh(), nb.nn.Linear(24, 1))
    model.to(nb.float64)
    return model, nb.optim.Adam(model.parameters(), lr=1e-2)


def _batches(n=5):
    rng = np.random.default_rng(4)
    xs = [rng.standard_normal((40, 3)) for _ in range(n)]
    return [(x, np.sin(x).sum(1, keepdims=True)) for x in xs]


def test_a_training_step_returning_loss_item_is_one_step_program():
    def make():
        model, opt = _model_and_optimizer(7)

        def step(x, y):
            opt.zero_grad()
            loss = nb.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            return loss.item()
        return model, step

    eager_model, eager_step = make()
    model, step = make()
    compiled = nb.compile(step)
    for x, y in _batches():
        np.testing.assert_allclose(compiled(x, y), eager_step(x, y), rtol=1e-12)
    assert isinstance(_variant(compiled).program.program, step_program.StepProgram)
    for p, q in zip(model.parameters(), eager_model.parameters()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-11, atol=1e-13)


def test_backward_after_a_check_on_the_loss_runs_eagerly_through_the_programs_graph():
    def make():
        model, opt = _model_and_optimizer(3)

        def step(x, y):
            opt.zero_grad()
            loss = ((nb.tanh(model(x)) - y) ** 2).mean()
            if not loss.item() < 1e6:        # a guard on the value: the break
                raise FloatingPointError("diverged")
            loss.backward()
            opt.step()
            return loss
        return model, step

    eager_model, eager_step = make()
    model, step = make()
    compiled = nb.compile(step)
    for x, y in _batches():
        np.testing.assert_array_equal(compiled(x, y).numpy(), eager_step(x, y).numpy())
    for p, q in zip(model.parameters(), eager_model.parameters()):
        np.testing.assert_array_equal(p.numpy(), q.numpy())


def test_a_fused_gradient_before_the_break():
    def step(x):
        y = nb.tanh(x * 1.5) * x
        loss = y.sum()
        loss.backward()
        return loss.item()

    fn = nb.compile(step)
    data = np.random.default_rng(2).standard_normal(300)
    results = []
    for f in (fn, fn, step):
        x = nb.tensor(data, requires_grad=True)
        results.append((f(x), x.grad.numpy()))
    (_, _), (total, grad), (eager_total, eager_grad) = results
    np.testing.assert_array_equal(grad, eager_grad)
    assert total == pytest.approx(eager_total, rel=1e-13)


def test_a_path_that_changes_before_the_break_is_an_error():
    use_exp = [True]

    def step(x):
        y = nb.exp(x) if use_exp[0] else nb.tanh(x)   # not a tensor's value: no break
        return y.sum().item()

    fn = nb.compile(step)
    x = nb.tensor(np.ones(4))
    fn(x)
    use_exp[0] = False
    with pytest.raises(RuntimeError, match=r"call 1 before the graph break was exp .* tanh"):
        fn(x)


def test_returning_before_the_traced_break_is_an_error():
    early = [False]

    def step(x):
        y = nb.exp(x)
        if early[0]:
            return None
        z = y * 2.0
        return z.sum().item()

    fn = nb.compile(step)
    fn(nb.tensor(np.ones(3)))
    early[0] = True
    with pytest.raises(RuntimeError, match="returned after 1 of the 3 calls"):
        fn(nb.tensor(np.ones(3)))


def test_a_break_before_any_call_runs_eagerly_and_one_after_a_single_call_replays_it():
    def step(x):
        if x.sum().item() > 0:   # one call, sum, before the break
            return x * 2.0
        return x

    fn = nb.compile(lambda x: x + nb.randn(3))
    fn(np.zeros(3, np.float32))
    assert _variant(fn).program is None and "random draw" in _variant(fn).breaks[0][0]
    assert "eager (graph break" in fn.explain()
    compiled = nb.compile(step)
    x = nb.tensor(np.array([-1.0, -2.0]))
    compiled(x)
    np.testing.assert_array_equal(compiled(x).numpy(), step(x).numpy())


@settings(max_examples=30, deadline=None)
@given(ops=st.lists(st.sampled_from(["tanh", "exp", "sigmoid", "mul", "add", "sub"]),
                    min_size=2, max_size=7),
       at=st.integers(0, 6), keep=st.integers(0, 6), seed=st.integers(0, 2**16))
def test_random_chains_with_a_break_match_eager(ops, at, keep, seed):
    """A chain of ops with a branch on a value after op ``at``, a value kept in a dict
    across it (op ``keep``), and the chain's end after it: compiled up to the break,
    eager from there, eager's answers on both sides of the branch."""
    store = {}

    def step(x, z):
        values = [x]
        for i, name in enumerate(ops):
            v = values[-1]
            v = (getattr(nb, name)(v) if name in ("tanh", "exp", "sigmoid")
                 else getattr(nb, name)(v, z))
            values.append(nb.tanh(v))     # keep the values bounded
            if i == keep % len(ops):
                store["kept"] = values[-1]
            if i == at % len(ops) and values[-1].sum().item() > 0:
                values.append(values[-1] * 2.0)
        return values[-1] + store["kept"]

    rng = np.random.default_rng(seed)
    compiled = nb.compile(step)
    for sign in (1.0, -1.0, 1.0):
        x = nb.tensor(sign * np.abs(rng.standard_normal(6)) + 0.1 * sign)
        z = nb.tensor(rng.standard_normal(6))
        ours = compiled(x, z).numpy()
        kept = store["kept"].numpy()
        np.testing.assert_array_equal(ours, step(x, z).numpy())
        np.testing.assert_array_equal(kept, store["kept"].numpy())
