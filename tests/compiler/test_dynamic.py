"""nb.compile's ``dynamic``: a generated loop takes its sizes at run time, so another
shape traces the function again but compiles nothing new; ``dynamic=False`` builds a step
program per shape, as does ``None``."""

import numpy as np
import pytest

import nbgrad as nb
from nbgrad.compiler import fusion
from nbgrad.compiler.step_program import StepProgram


def _chain(x, w):
    h = nb.tanh(x * 1.5 + w) * x
    (h * h).sum().backward()
    return h


@pytest.mark.parametrize("shapes", [[(10_000,), (30_000,), (200_000,)],
                                    [(300, 40), (1000, 40), (4000, 40)]])
def test_new_shapes_compile_nothing_new(shapes):
    """A full-size chain and one with a bias along each row of 40; the last shape takes
    the parallel loop. (A sum's gradient of fewer than 4,096 elements arrives as an
    array rather than one repeated value: another loop, not another shape.)"""
    compiled = nb.compile(_chain, dynamic=True)
    rng = np.random.default_rng(0)
    modules = None
    for shape in shapes:
        x = rng.standard_normal(shape)
        w = rng.standard_normal(shape[-1:] if len(shape) > 1 else shape)
        results = []
        for fn in (compiled, compiled, _chain):
            leaves = [nb.tensor(a, requires_grad=True) for a in (x, w)]
            results.append([fn(*leaves).numpy()] + [t.grad.numpy() for t in leaves])
        for ours, theirs in zip(results[1], results[2]):
            np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(results[1][1], results[2][1])   # x's: eager's bits
        if modules is None:
            modules = set(fusion._modules)
        assert set(fusion._modules) == modules
    assert len(compiled.variants) == len(shapes)


def _mlp_step(dynamic):
    rng = np.random.default_rng(1)
    w1 = nb.tensor(rng.standard_normal((16, 3)), requires_grad=True)
    w2 = nb.tensor(rng.standard_normal((1, 16)), requires_grad=True)
    opt = nb.optim.SGD([w1, w2], lr=0.01)

    def step(x):
        opt.zero_grad()
        loss = (nb.tanh(x @ w1.T) @ w2.T).pow(2).mean()
        loss.backward()
        opt.step()
        return loss

    return nb.compile(step, dynamic=dynamic)


def _kinds(compiled):
    return [isinstance(v.program, StepProgram) for v in compiled.variants.values()]


@pytest.mark.parametrize("dynamic,kinds", [(False, [True, True, True]),
                                           (None, [True, True, True]),
                                           (True, [False, False, False])])
def test_step_programs_by_dynamic(dynamic, kinds, capsys):
    compiled = _mlp_step(dynamic)
    for rows in (32, 32, 48, 64):
        compiled(nb.tensor(np.ones((rows, 3))))
    assert _kinds(compiled) == kinds
    err = capsys.readouterr().err
    assert ("dynamic shapes" in err) == bool(dynamic)
