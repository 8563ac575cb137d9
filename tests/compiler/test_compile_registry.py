"""Every registered op through ``nb.compile``: a step that runs the op on its first
registered sample, a weighted sum of its outputs, ``nb.grad`` with ``create_graph`` and
a backward through that gradient (a second derivative), traced and then run again as a
program, gives bitwise the values, first and second derivatives of the eager step. And
the op in a step program (a step with a product), where an op with no primitive form
is a host call: eager's bits again."""

import numpy as np
import pytest

import nbgrad as nb
from nbgrad.compiler.step_program import StepProgram
from nbgrad.function import REGISTRY
from nbgrad.testing.gradcheck import sample_rng

OPS = sorted(name for name, fn in REGISTRY.items() if fn.__module__.startswith("nbgrad."))


def _inputs(sample):
    return [nb.tensor(np.asarray(x, np.float64), requires_grad=True)
            if isinstance(x, np.ndarray) and x.dtype.kind == "f" else x
            for x in sample.inputs]


def _step(op, params, weights):
    """Outputs, and the gradient of sum(w * out) with respect to the differentiable
    inputs, itself differentiated (sum of the gradients, backward) where the op has a
    vjp."""
    def step(*xs):
        out = op.apply(*xs, **params)
        outs = out if isinstance(out, tuple) else (out,)
        floats = [o for o in outs if o.dtype in (nb.float32, nb.float64) and o.requires_grad]
        wanted = [x for x in xs if isinstance(x, nb.Tensor) and x.requires_grad]
        if not floats or not wanted:
            return outs
        loss = sum((o * w).sum() for o, w in zip(floats, weights))
        second = op.has_vjp()
        grads = nb.grad(loss, wanted, create_graph=second, retain_graph=True)
        if second:
            total = sum(g.sum() for g in grads if g is not None and g.requires_grad)
            if isinstance(total, nb.Tensor):
                total.backward()
        return outs + tuple(g for g in grads if g is not None)
    return step


def _run(step, sample, seed):
    xs = _inputs(sample)
    nb.manual_seed(seed)
    outs = step(*xs)
    leaf_grads = [x.grad for x in xs if isinstance(x, nb.Tensor) and x.requires_grad]
    return [o.numpy() for o in outs], [None if g is None else g.numpy() for g in leaf_grads]


def _same(a, b, what):
    assert (a is None) == (b is None), what
    if a is not None:
        np.testing.assert_array_equal(a, b, err_msg=what)


def _first_sample(name, rng):
    """(op, its first registered sample, its eager output, a weight per output)."""
    op = REGISTRY[name]
    sample = next(iter(op.samples(sample_rng(name))))
    eager_out = op.apply(*_inputs(sample), **sample.params)
    outs = eager_out if isinstance(eager_out, tuple) else (eager_out,)
    return op, sample, eager_out, [rng.standard_normal(o.shape) for o in outs]


@pytest.mark.parametrize("name", OPS)
def test_registered_op_compiled_equals_eager(name):
    op, sample, _, weights = _first_sample(name, np.random.default_rng(7))
    step = _step(op, sample.params, weights)
    expected = _run(step, sample, seed=3)
    compiled = nb.compile(step)
    _run(compiled, sample, seed=3)          # the traced call (eager underneath)
    got = _run(compiled, sample, seed=3)    # the program
    (variant,) = compiled.variants.values()
    assert variant.program is not None, f"{name}: graph break {variant.breaks}"
    for k, (a, b) in enumerate(zip(expected[0], got[0])):
        _same(a, b, f"{name}: output {k}")
    for k, (a, b) in enumerate(zip(expected[1], got[1])):
        _same(a, b, f"{name}: second-order leaf gradient {k}")


def _host_step(op, params, weights):
    """The op's outputs and a backward of sum(w * out) plus a product's sum: the
    product makes it a step program, in which an op with no primitive form runs as a
    host call (its forward, then its backward on the same Context)."""
    def step(product, *xs):
        out = op.apply(*xs, **params)
        outs = out if isinstance(out, tuple) else (out,)
        floats = [o for o in outs if o.dtype == nb.float64 and o.requires_grad]
        loss = (product @ product).sum()
        for o, w in zip(floats, weights):
            loss = loss + (o * w).sum()
        loss.backward()
        return outs + (loss,)
    return step


def _host_eligible(sample, eager_out) -> bool:
    """Whether the step of ``_host_step`` lowers to a step program: one float64 output
    and every positional input a tensor, an array or None."""
    return (not isinstance(eager_out, tuple) and eager_out.dtype == nb.float64
            and all(x is None or isinstance(x, np.ndarray) for x in sample.inputs))


@pytest.mark.parametrize("name", OPS)
def test_registered_op_in_a_step_program_equals_eager(name):
    rng = np.random.default_rng(8)
    op, sample, eager_out, weights = _first_sample(name, rng)
    product = rng.standard_normal((2, 2))
    step = _host_step(op, sample.params, weights)

    def run(fn):
        xs = _inputs(sample)
        p = nb.tensor(product.copy(), requires_grad=True)
        nb.manual_seed(3)
        got = fn(p, *xs)
        grads = [x.grad for x in [p, *xs] if isinstance(x, nb.Tensor) and x.requires_grad]
        return [o.numpy() for o in got], [None if g is None else g.numpy() for g in grads]

    expected = run(step)
    compiled = nb.compile(step)
    run(compiled)
    got = run(compiled)
    (variant,) = compiled.variants.values()
    program = variant.program
    if _host_eligible(sample, eager_out):
        assert isinstance(program, StepProgram), f"{name}: not a step program"
    # a host call runs eager's own kernels: eager's bits. An op with a primitive form
    # (mse_loss: sub, square, mean) has its gradient from the primitives' rules, within
    # the step programs' bound (docs/compile.md, "Bits")
    exact = not isinstance(program, StepProgram) or f"{op.__name__}.forward(" in program.text
    for k, (a, b) in enumerate(zip(expected[0] + expected[1], got[0] + got[1])):
        if exact or a is None or b is None:
            _same(a, b, f"{name}: value {k}")
        else:
            np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12, err_msg=f"{name}: {k}")
