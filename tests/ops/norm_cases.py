"""The normalisation tests' shared helpers: one forward and backward, and the dtype-aware
comparison with a reference."""

import numpy as np

import nbgrad as nb


def run(fn, x, params, g):
    """Forward and backward of fn(x, *params) with upstream g: (y, dx, dparams...)."""
    xt = nb.tensor(x, requires_grad=True)
    pts = [None if p is None else nb.tensor(p, requires_grad=True) for p in params]
    y = fn(xt, *pts)
    y.backward(g)
    return (y.numpy(), xt.grad.numpy()) + tuple(None if p is None else p.grad.numpy()
                                                for p in pts)


def assert_close(ours, want, dtype):
    rtol, atol = (2e-5, 2e-5) if dtype == np.float32 else (1e-12, 1e-12)
    for a, b in zip(ours, want):
        if a is None:
            continue
        assert a.dtype == dtype
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)
