"""nb.compile of the physics-informed and neural-operator training steps the compiled
benchmarks time (W21, W22): a few compiled steps give eager's losses and parameters, in
one traced variant without a graph break -- the PINN's u'' through two
``nb.grad(..., create_graph=True)`` as one step program, the FNO's spectral
convolutions, domain padding and fused bias-add-gelu regions. Both to rounding: the
PINN's sums run in another order, and the FNO's bias gradients are the fused regions'
broadcast sums, whose order is not eager's."""

import numpy as np

import nbgrad as nb
from nbgrad.examples import darcy_fno

F32 = np.float32


def _assert_same_steps(make, inputs, steps=3, rtol=0.0):
    """``make()`` -> (parameters, step); the eager and the compiled step, each on its own
    copy, give the same loss each step and the same parameters after them (bit for bit,
    or to ``rtol``)."""
    eager_params, eager_step = make()
    compiled_params, compiled_step = make()
    compiled_step = nb.compile(compiled_step, fullgraph=True)
    for _ in range(steps):
        eager_loss, compiled_loss = eager_step(*inputs), compiled_step(*inputs)
        np.testing.assert_allclose(compiled_loss.numpy(), eager_loss.numpy(), rtol=rtol,
                                   atol=0)
    for p, q in zip(eager_params, compiled_params):
        np.testing.assert_allclose(q.numpy(), p.numpy(), rtol=rtol, atol=rtol)
    (variant,) = compiled_step.variants.values()
    assert variant.program is not None and not variant.breaks
    return compiled_step


def _pinn_step(x, source, boundary):
    """notebooks/pinn_poisson.ipynb: -u'' = f by a tanh MLP, u'' by two create_graph
    grads, plus the boundary values' square; Adam."""
    rng = np.random.default_rng(0)
    params = []
    for fan_in, fan_out in [(1, 16), (16, 16), (16, 1)]:
        params += [nb.tensor((rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in))
                             .astype(F32), requires_grad=True),
                   nb.tensor(np.zeros(fan_out, F32), requires_grad=True)]
    optimizer = nb.optim.Adam(params, lr=1e-2)

    def mlp(h):
        for w, b in zip(params[:-2:2], params[1:-2:2]):
            h = nb.tanh(h @ w + b)
        return h @ params[-2] + params[-1]

    def step(x, source, boundary):
        optimizer.zero_grad()
        (u_x,) = nb.grad(mlp(x).sum(), x, create_graph=True)
        (u_xx,) = nb.grad(u_x.sum(), x, create_graph=True)
        loss = ((u_xx + source) ** 2).mean() + (mlp(boundary) ** 2).mean()
        loss.backward()
        optimizer.step()
        return loss

    return params, step


def test_pinn_step_with_second_derivatives_compiled_equals_eager():
    x_np = np.linspace(0.0, 1.0, 32, dtype=F32)[:, None]
    x = nb.tensor(x_np, requires_grad=True)
    source = nb.tensor((np.pi ** 2 * np.sin(np.pi * x_np)).astype(F32))
    boundary = nb.tensor(np.array([[0.0], [1.0]], F32))
    compiled = _assert_same_steps(lambda: _pinn_step(x, source, boundary),
                                  (x, source, boundary), rtol=2e-6)
    assert "grad (create_graph)" in compiled.explain()
    assert "step program" in compiled.explain()


def _fno_step():
    """darcy-fno's model, smaller (hidden 8, modes (8, 6)), relative L2, Adam with weight
    decay as the example trains it."""
    nb.manual_seed(0)
    model = darcy_fno.build_model(hidden_channels=8, n_modes=(8, 6), n_layers=2)
    optimizer = nb.optim.Adam(model.parameters(), lr=3e-3, weight_decay=1e-4)

    def step(x, y):
        optimizer.zero_grad()
        loss = darcy_fno.relative_l2_loss(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    return list(model.parameters()), step


def test_darcy_fno_step_compiled_equals_eager():
    rng = np.random.default_rng(1)
    x = nb.tensor(rng.standard_normal((4, 3, 12, 12)).astype(F32))
    y = nb.tensor(rng.standard_normal((4, 1, 12, 12)).astype(F32))
    compiled = _assert_same_steps(_fno_step, (x, y), rtol=1e-5)
    assert "spectral_conv2d" in compiled.explain()
