"""The element-wise tests' shared cases: the binary ops with their NumPy references, the
reference sum over broadcast axes, and operands away from each op's poles."""

import numpy as np

import nbgrad as nb

# name -> (function, NumPy forward, d/da, d/db) with the partials as NumPy expressions
BINARY = {
    "add": (nb.add, np.add, lambda a, b: np.ones_like(a * b), lambda a, b: np.ones_like(a * b)),
    "sub": (nb.sub, np.subtract, lambda a, b: np.ones_like(a * b),
            lambda a, b: -np.ones_like(a * b)),
    "mul": (nb.mul, np.multiply, lambda a, b: b + 0 * a, lambda a, b: a + 0 * b),
    "div": (nb.div, np.divide, lambda a, b: 1 / b + 0 * a, lambda a, b: -a / b**2),
    "pow": (nb.pow, np.power, lambda a, b: b * a ** (b - 1), lambda a, b: a**b * np.log(a)),
}


def unbroadcast(full: np.ndarray, shape: tuple) -> np.ndarray:
    """Reference: sum ``full`` over the axes broadcast to reach it from ``shape``."""
    lead = full.ndim - len(shape)
    out = full.sum(axis=tuple(range(lead))) if lead else full
    axes = tuple(d for d, n in enumerate(shape) if n == 1 and out.shape[d] != 1)
    return out.sum(axis=axes, keepdims=True).reshape(shape) if axes else out.reshape(shape)


def operands(name, rng, sa, sb):
    a = np.asarray(rng.standard_normal(sa))
    b = np.asarray(rng.standard_normal(sb))
    if name == "div":
        b = np.where(np.abs(b) < 0.3, 0.7, b)
    if name == "pow":
        a = np.asarray(0.5 + rng.random(sa))
    return a, b
