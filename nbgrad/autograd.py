"""The backward engine: topological order over graph nodes, gradient accumulation,
``no_grad`` and ``grad``.

A graph node is the ``Context`` of one op call (see ``function.py``). Tensors made by an
op point at their node (``t._node``) and at which of its outputs they are (``t._index``);
a node points back at its input Tensors. Backward visits nodes outputs-first, so every
node has received the gradients of all its consumers before it runs.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from . import tensor as _tensor

_GRAD_ENABLED = [True]


def grad_enabled() -> bool:
    return _GRAD_ENABLED[0]


class no_grad:
    """Context manager (and decorator) in which ops record no graph."""

    def __enter__(self) -> None:
        self._previous = _GRAD_ENABLED[0]
        _GRAD_ENABLED[0] = False

    def __exit__(self, *exc) -> None:
        _GRAD_ENABLED[0] = self._previous

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with no_grad():
                return fn(*args, **kwargs)
        return wrapper


def _freed_graph_error(node) -> RuntimeError:
    return RuntimeError(
        f"backward: the graph through {node.name} was already freed by an earlier "
        "backward; pass retain_graph=True to the first backward to go through it twice")


def _topological_nodes(roots) -> list:
    """Nodes reachable from ``roots``, each before every node it consumes (iterative DFS,
    so a chain of any depth works)."""
    order = []
    visited = set()
    stack = [(node, False) for node in roots]
    while stack:
        node, children_done = stack.pop()
        if children_done:
            order.append(node)
            continue
        if node in visited:
            continue
        if node.released:
            raise _freed_graph_error(node)
        visited.add(node)
        stack.append((node, True))
        for t in node.inputs:
            if isinstance(t, _tensor.Tensor) and t._node is not None and t._node not in visited:
                stack.append((t._node, False))
    order.reverse()
    return order


def _check_grad(node, position: int, grad, target) -> np.ndarray:
    if not isinstance(grad, np.ndarray):
        grad = np.asarray(grad, dtype=target.dtype)
    if grad.shape != target.shape:
        raise RuntimeError(
            f"{node.name}.backward returned a gradient of shape {grad.shape} for input "
            f"{position}, whose shape is {target.shape}")
    if grad.dtype != target.dtype:
        raise RuntimeError(
            f"{node.name}.backward returned a {grad.dtype} gradient for input {position}, "
            f"which is {target.dtype}")
    return grad


def _run(roots: Sequence, root_grads: Sequence[np.ndarray], retain_graph: bool,
         wanted: Sequence | None = None) -> dict:
    """Propagate ``root_grads`` from ``roots`` to every leaf that requires grad.

    Returns ``{id(leaf): (leaf, grad)}`` for the leaves reached; when ``wanted`` is given,
    also the gradients of those (possibly non-leaf) tensors under ``("wanted", i)``.
    """
    node_grads: dict = {}
    leaf_grads: dict = {}

    def accumulate(t, g):
        node = t._node
        if node is None:
            key = id(t)
            if key in leaf_grads:
                leaf_grads[key] = (t, leaf_grads[key][1] + g)
            else:
                leaf_grads[key] = (t, g)
            return
        slots = node_grads.get(node)
        if slots is None:
            slots = node_grads[node] = [None] * (len(node.output_meta) if node.output_meta else 1)
        i = t._index
        slots[i] = g if slots[i] is None else slots[i] + g

    for t, g in zip(roots, root_grads):
        accumulate(t, g)

    wanted_nodes = {}
    if wanted is not None:
        for i, t in enumerate(wanted):
            if t._node is not None:
                wanted_nodes.setdefault(t._node, []).append((i, t._index))
    captured: dict = {}

    for node in _topological_nodes([t._node for t in roots if t._node is not None]):
        grads = node_grads.pop(node, None)
        if grads is None:
            continue
        if node.released:
            raise _freed_graph_error(node)
        for i, out_index in wanted_nodes.get(node, ()):
            captured[("wanted", i)] = grads[out_index]
        if node.output_meta is not None:
            grads = [np.zeros(shape, dtype) if g is None else g
                     for g, (shape, dtype) in zip(grads, node.output_meta)]
        in_grads = node.fn.backward(node, *grads)
        if not isinstance(in_grads, tuple):
            in_grads = (in_grads,)
        if len(in_grads) != len(node.inputs):
            raise RuntimeError(f"{node.name}.backward returned {len(in_grads)} gradients for "
                               f"{len(node.inputs)} inputs")
        for position, (t, g, need) in enumerate(
                zip(node.inputs, in_grads, node.needs_input_grad)):
            if need and g is not None:
                accumulate(t, _check_grad(node, position, g, t.data))
        if not retain_graph:
            node.release()
    leaf_grads.update(captured)
    return leaf_grads


def _root_grad(t, grad, caller: str) -> np.ndarray:
    if grad is None:
        if t.data.size != 1:
            raise RuntimeError(
                f"{caller}: grad can be implicitly created only for scalar outputs; this "
                f"output has shape {t.shape}, so pass grad= of that shape")
        return np.ones(t.shape, dtype=t.dtype)
    g = np.asarray(grad.data if isinstance(grad, _tensor.Tensor) else grad, dtype=t.dtype)
    if g.shape != t.shape:
        raise ValueError(f"{caller}: grad has shape {g.shape} but the output has shape "
                         f"{t.shape}")
    return g


def _owned(g: np.ndarray, handed_out: set) -> np.ndarray:
    """A gradient array a leaf may keep: not a view of another array (arrays that Numba
    returns carry a non-array base, its memory owner, and are kept), not read-only, not
    shared with another leaf."""
    if isinstance(g.base, np.ndarray) or not g.flags.writeable or id(g) in handed_out:
        g = g.copy()
    handed_out.add(id(g))
    return g


def backward(t, grad=None, retain_graph: bool = False) -> None:
    """Accumulate d(t)/d(leaf) (times ``grad``) into ``leaf.grad`` for every leaf that
    requires grad."""
    if not t._requires_grad:
        raise RuntimeError("backward: this tensor does not require grad and has no grad_fn "
                           "(did you create it under no_grad, or forget requires_grad=True?)")
    root_grad = _root_grad(t, grad, "backward")
    handed_out = {id(root_grad)}  # the caller's array: a leaf gets a copy, never it
    for leaf, g in _run([t], [root_grad], retain_graph).values():
        g = _owned(g, handed_out)
        if leaf.grad is None:
            leaf.grad = _tensor.Tensor._wrap(g, None, 0)
        else:
            leaf.grad = _tensor.Tensor._wrap(leaf.grad.data + g, None, 0)


def grad(outputs, inputs, grad_outputs=None, retain_graph: bool = False) -> tuple:
    """Gradients of ``outputs`` w.r.t. ``inputs``, returned rather than accumulated into
    ``.grad``. An input the outputs do not depend on gets ``None``."""
    outputs = [outputs] if isinstance(outputs, _tensor.Tensor) else list(outputs)
    inputs = [inputs] if isinstance(inputs, _tensor.Tensor) else list(inputs)
    if grad_outputs is None:
        grad_outputs = [None] * len(outputs)
    elif isinstance(grad_outputs, _tensor.Tensor | np.ndarray):
        grad_outputs = [grad_outputs]
    if len(grad_outputs) != len(outputs):
        raise ValueError(f"grad: {len(outputs)} outputs but {len(grad_outputs)} grad_outputs")
    for i, t in enumerate(inputs):
        if not t._requires_grad:
            raise RuntimeError(f"grad: input {i} (shape {t.shape}) does not require grad")
    for t in outputs:
        if not t._requires_grad:
            raise RuntimeError(f"grad: an output (shape {t.shape}) does not require grad")
    roots_grads = [_root_grad(t, g, "grad") for t, g in zip(outputs, grad_outputs)]
    found = _run(outputs, roots_grads, retain_graph, wanted=inputs)
    result = []
    for i, t in enumerate(inputs):
        g = found.get(("wanted", i)) if t._node is not None else found.get(id(t), (None, None))[1]
        result.append(None if g is None else _tensor.Tensor._wrap(np.array(g), None, 0))
    return tuple(result)
