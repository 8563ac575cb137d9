"""Derivatives of functions rather than of tensors, with PyTorch's names and semantics
(``torch.autograd.functional``): vjp, jvp, hvp, vhp, jacobian, hessian. Compositions of
ops, so the module sits above ``ops/``; ``nbgrad.autograd.functional`` is this module
under PyTorch's path.

``inputs`` is one Tensor or a tuple of Tensors, and results come back in the same form.
Every function here is built on reverse mode: ``jvp`` by the double-vjp construction,
``jvp(f, x, v) = d/du <vjp(f, x, u), v>`` (the vjp is linear in u, so its gradient in u
is J v), and ``hvp`` as the vjp of the gradient (docs/derivations.md#second-derivatives).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .autograd.engine import grad
from .autograd.grad_mode import enable_grad
from .ops.shape import stack


def _as_tuple(name: str, x: Any) -> tuple[tuple, bool]:
    """(the Tensors as a tuple, whether a single Tensor was passed)."""
    if hasattr(x, "_node"):
        return (x,), True
    if isinstance(x, tuple | list) and all(hasattr(t, "_node") for t in x):
        return tuple(x), False
    raise TypeError(f"{name}: expected a Tensor or a tuple of Tensors, got {type(x).__name__}")


def _fresh(inputs: tuple, create_graph: bool) -> tuple:
    """Inputs to differentiate at: the same tensors when the result must stay connected
    to their graph (``create_graph`` and they require grad), else detached leaves."""
    return tuple(t if create_graph and t.requires_grad else t.detach().requires_grad_()
                 for t in inputs)


def _zeros_for_none(grads: tuple, like: tuple) -> tuple:
    return tuple(type(t)._wrap(np.zeros(t.shape, t.dtype), None, 0) if g is None else g
                 for g, t in zip(grads, like))


def _check_like(name: str, v: tuple, like: tuple, what: str) -> None:
    if len(v) != len(like) or any(a.shape != b.shape for a, b in zip(v, like)):
        raise ValueError(f"{name}: v has shapes {[a.shape for a in v]} but {what} has "
                         f"shapes {[b.shape for b in like]}")


def _outputs(name: str, out: Any) -> tuple[tuple, bool]:
    return _as_tuple(f"{name} (the function's output)", out)


def _result(values: tuple, single: bool) -> Any:
    return values[0] if single else values


def _detached(values: tuple, create_graph: bool) -> tuple:
    return values if create_graph else tuple(v.detach() for v in values)


def vjp(func: Callable[..., Any], inputs: Any, v: Any = None,
        create_graph: bool = False) -> tuple[Any, Any]:
    """``(func(inputs), v^T J)``: the vector-Jacobian product at ``inputs``. ``v`` may be
    omitted when func returns one element."""
    xs, single_in = _as_tuple("vjp", inputs)
    with enable_grad():
        xs = _fresh(xs, create_graph)
        outs, single_out = _outputs("vjp", func(*xs))
        vs = [None] * len(outs) if v is None else list(_as_tuple("vjp", v)[0])
        if v is not None:
            _check_like("vjp", tuple(vs), outs, "func's output")
        grads = grad(outs, xs, grad_outputs=vs, create_graph=create_graph)
    return (_result(_detached(outs, create_graph), single_out),
            _result(_zeros_for_none(grads, xs), single_in))


def jvp(func: Callable[..., Any], inputs: Any, v: Any = None,
        create_graph: bool = False) -> tuple[Any, Any]:
    """``(func(inputs), J v)``: the Jacobian-vector product, by the double-vjp
    construction (two reverse passes)."""
    xs, single_in = _as_tuple("jvp", inputs)
    with enable_grad():
        xs = _fresh(xs, create_graph)
        vs = tuple(type(x)._wrap(np.ones(x.shape, x.dtype), None, 0) for x in xs) \
            if v is None else _as_tuple("jvp", v)[0]
        _check_like("jvp", vs, xs, "inputs")
        outs, single_out = _outputs("jvp", func(*xs))
        us = tuple(type(o)._wrap(np.zeros(o.shape, o.dtype), None, 0).requires_grad_()
                   for o in outs)
        g = _zeros_for_none(grad(outs, xs, grad_outputs=us, create_graph=True), xs)
        inner = sum((a * b).sum() for a, b in zip(g, vs))
        if not inner.requires_grad:  # J does not depend on u through any path: J v = 0
            jv = _zeros_for_none((None,) * len(us), us)
        else:
            jv = _zeros_for_none(grad(inner, us, create_graph=create_graph), us)
    return (_result(_detached(outs, create_graph), single_out),
            _result(_detached(jv, create_graph), single_out))


def _scalar_output(name: str, out: Any) -> Any:
    if not hasattr(out, "_node") or out._data.size != 1:
        raise ValueError(f"{name}: func must return a one-element Tensor, got "
                         f"{getattr(out, 'shape', type(out).__name__)}")
    return out


def vhp(func: Callable[..., Any], inputs: Any, v: Any,
        create_graph: bool = False) -> tuple[Any, Any]:
    """``(func(inputs), v^T H)`` for a scalar ``func``."""
    return _vhp("vhp", func, inputs, v, create_graph)


def _vhp(name: str, func: Callable[..., Any], inputs: Any, v: Any,
         create_graph: bool) -> tuple[Any, Any]:
    xs, single_in = _as_tuple(name, inputs)
    vs = _as_tuple(name, v)[0]
    _check_like(name, vs, xs, "inputs")
    with enable_grad():
        xs = _fresh(xs, create_graph)
        out = _scalar_output(name, func(*xs))
        g = _zeros_for_none(grad(out, xs, create_graph=True), xs)
        inner = sum((a * b).sum() for a, b in zip(g, vs))
        hv = (None,) * len(xs) if not inner.requires_grad else \
            grad(inner, xs, create_graph=create_graph)
    return (out if create_graph else out.detach(),
            _result(_detached(_zeros_for_none(hv, xs), create_graph), single_in))


def hvp(func: Callable[..., Any], inputs: Any, v: Any,
        create_graph: bool = False) -> tuple[Any, Any]:
    """``(func(inputs), H v)`` for a scalar ``func``: the Hessian is symmetric, so this is
    the vjp of the gradient (``vhp``)."""
    return _vhp("hvp", func, inputs, v, create_graph)


def jacobian(func: Callable[..., Any], inputs: Any, create_graph: bool = False) -> Any:
    """The Jacobian: for output of shape O and input of shape I, an array of shape O + I
    (one vjp per output element). Tuples of inputs/outputs give nested tuples, as in
    PyTorch: ``J[i][j]`` is d output_i / d input_j."""
    xs, single_in = _as_tuple("jacobian", inputs)
    with enable_grad():
        xs = _fresh(xs, create_graph)
        outs, single_out = _outputs("jacobian", func(*xs))
        rows = []
        for o in outs:
            per_input = [[] for _ in xs]
            for k in range(o._data.size):
                e = np.zeros(o.shape, o.dtype)
                e.reshape(-1)[k] = 1
                g = _zeros_for_none(grad(o, xs, grad_outputs=e, retain_graph=True,
                                         create_graph=create_graph), xs)
                for j, gj in enumerate(g):
                    per_input[j].append(gj)
            rows.append(tuple(_stack_rows(parts, x, o.shape, create_graph)
                              for parts, x in zip(per_input, xs)))
    if single_out:
        return rows[0][0] if single_in else rows[0]
    return tuple(r[0] for r in rows) if single_in else tuple(rows)


def _stack_rows(parts: list, x: Any, out_shape: tuple, create_graph: bool) -> Any:
    """The rows d out[k] / d x (k row-major) as one tensor of shape out_shape + x.shape."""
    if create_graph and parts:
        return stack(parts).reshape(out_shape + x.shape)
    data = np.zeros((0,) + x.shape, x.dtype) if not parts else np.stack([p._data for p in parts])
    return type(x)._wrap(data.reshape(out_shape + x.shape), None, 0)


def hessian(func: Callable[..., Any], inputs: Any, create_graph: bool = False) -> Any:
    """The Hessian of a scalar ``func``: shape I + I for one input, nested tuples
    ``H[i][j]`` for a tuple of inputs."""
    xs, single_in = _as_tuple("hessian", inputs)

    def gradient(*args):
        out = _scalar_output("hessian", func(*args))
        return _zeros_for_none(grad(out, args, create_graph=True), args)

    h = jacobian(gradient, xs, create_graph=create_graph)
    return h[0][0] if single_in else h
