"""The signs a generated loop body knows of its values (compiler/rules.py: Signs), and
their one use: exp of a value known to be <= 0 calls exp_nonpositive, which must give
exp's bits. A claim the values contradict would be a wrong exp (no overflow edge), so
the property test evaluates random chains on values with zeros of both signs, infinities
and NaNs and checks every claim."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.compiler.rules import Signs
from nbgrad.compiler.step_program import StepProgram

_UNARY = {"neg": np.negative, "exp": np.exp, "tanh": np.tanh,
          "sigmoid": lambda a: 1 / (1 + np.exp(-a)),
          "relu": lambda a: np.where(a < 0, 0.0, a), "square": np.square}
_BINARY = {"mul": np.multiply, "add": np.add, "sub": np.subtract}
_SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-300, -1e-300, 1e300, -1e300, 3.0, -2.5]


@st.composite
def _programs(draw):
    """A chain of ops over two inputs: (op, operand indices) per step; a binary op's
    operands are drawn among the values so far, often the same one or a negation."""
    steps = []
    for k in range(draw(st.integers(1, 12))):
        op = draw(st.sampled_from(sorted(_UNARY) + sorted(_BINARY)))
        pick = st.integers(0, k + 1)
        steps.append((op, [draw(pick) for _ in range(1 if op in _UNARY else 2)]))
    return steps


@settings(max_examples=300, deadline=None)
@given(_programs(), st.lists(st.sampled_from(_SPECIAL) | st.floats(-50, 50),
                             min_size=2, max_size=2), st.integers(0, 2**32 - 1))
def test_every_sign_claimed_holds_on_the_values(program, firsts, seed):
    rng = np.random.default_rng(seed)
    values = [np.concatenate([[first], _SPECIAL, rng.standard_normal(64) * 10])
              for first in firsts]
    texts = ["x0", "x1"]
    signs = Signs()
    with np.errstate(all="ignore"):
        for k, (op, picks) in enumerate(program):
            fn = _UNARY.get(op) or _BINARY[op]
            out = fn(*[values[j] for j in picks])
            signs.note(op, [texts[j] for j in picks], f"v{k}")
            values.append(out)
            texts.append(f"v{k}")
            claim = signs.sign(f"v{k}")
            known = out[~np.isnan(out)]
            if claim == 1:
                assert (known >= 0).all(), (program, k)
            if claim == -1:
                assert (known <= 0).all(), (program, k)


def test_the_patterns_of_a_gaussian_are_known_nonpositive():
    signs = Signs()
    signs.note("neg", ["h"], "a")
    signs.note("mul", ["a", "h"], "b")                  # -h * h
    signs.note("mul", ["h", "h"], "c")                  # h * h
    signs.note("neg", ["c"], "d")                       # -(h * h)
    signs.constant("half", 0.5)
    signs.note("mul", ["half", "d"], "e")               # 0.5 * -(h * h)
    signs.note("mul", ["h", "a"], "f")
    assert [signs.sign(t) for t in "bcdef"] == [-1, 1, -1, -1, -1]
    assert signs.value_for("exp", np.dtype(np.float32), ["e"]) == "exp_nonpositive_value"
    signs.note("add", ["h", "b"], "g")                  # sign of h unknown
    signs.note("sub", ["c", "b"], "k")                  # >= 0 minus <= 0
    assert (signs.sign("g"), signs.sign("k")) == (0, 1)
    assert signs.value_for("exp", np.dtype(np.float32), ["g"]) == "exp_value"


def _gaussian_grad(x, w):
    h = nb.tanh(x * w)
    loss = (nb.exp(-h * h) * x + nb.exp(-x * x)).sum()   # one fused region
    loss.backward()
    return x.grad


def test_a_fused_gaussian_calls_exp_nonpositive_and_gives_eagers_bits():
    """Its arguments run from 0 to far below exp's underflow (subnormal and zero
    results), with an infinity and a NaN among them."""
    rng = np.random.default_rng(3)
    data = np.concatenate([rng.standard_normal(4096) * 15, [0.0, -0.0, np.inf, -np.inf,
                                                             np.nan, 13.2, 14.0]])
    for dtype in (np.float32, np.float64):
        w = nb.tensor(np.array(0.75, dtype))
        compiled = nb.compile(_gaussian_grad)
        grads = []
        for fn in (_gaussian_grad, compiled, compiled):
            x = nb.tensor(data.astype(dtype), requires_grad=True)
            grads.append(fn(x, w).numpy())
        np.testing.assert_array_equal(grads[1], grads[0])
        np.testing.assert_array_equal(grads[2], grads[0])
        source = compiled.explain()
        assert "R.exp_nonpositive_value(" in source and "R.exp_value(" not in source


def test_a_step_program_calls_exp_nonpositive_and_matches_eager():
    """To 1e-12: a step program's sums run in another order than eager's."""
    rng = np.random.default_rng(4)
    x = nb.tensor(rng.standard_normal((64, 8)) * 6)
    w0 = rng.standard_normal((8, 8))

    def make():
        w = nb.tensor(w0.copy(), requires_grad=True)
        optimizer = nb.optim.SGD([w], lr=0.1)

        def step(x):
            optimizer.zero_grad()
            h = x @ w
            loss = nb.exp(-h * h).sum()
            loss.backward()
            optimizer.step()
            return loss
        return w, step

    (we, se), (wc, sc) = make(), make()
    sc = nb.compile(sc, fullgraph=True)
    for _ in range(2):
        np.testing.assert_allclose(sc(x).numpy(), se(x).numpy(), rtol=1e-12)
    np.testing.assert_allclose(wc.numpy(), we.numpy(), rtol=1e-12)
    (variant,) = sc.variants.values()
    assert isinstance(variant.program, StepProgram)
    assert "R.exp_nonpositive_value(" in variant.program.text


def test_exp_of_a_value_known_nonnegative_keeps_exps_overflow():
    data = np.array([0.0, 1.5, -3.0, 9.0, 9.5, -20.0, np.inf, np.nan], np.float32)

    def grad(x):
        nb.exp(x * x).sum().backward()
        return x.grad

    compiled = nb.compile(grad)
    grads = [fn(nb.tensor(data, requires_grad=True)).numpy()
             for fn in (grad, compiled, compiled)]
    np.testing.assert_array_equal(grads[2], grads[0])
    assert np.isinf(grads[0][4:7]).all()
    assert "R.exp_nonpositive_value(" not in compiled.explain()
