"""Rewrites of a traced program before fusion: a run of recorded ops replaced by one op of
the table that computes the same values and gradients, bit for bit.

``fold_linear``: ``h @ W.T + b`` -- ``permute(W, (1, 0))``, ``matmul(h, W^T)``,
``add(., b)`` with b of shape [out] -- becomes ``linear(h, W, b)``, one op instead of
three in the forward pass and one node instead of three in the backward. Linear runs the
same GEMM calls (every output an FMA chain over k in ascending order, whichever operand
is read transposed), the same broadcast add, and sums the bias gradient over the rows as
add's backward does, so the bits do not change (tests/compiler/test_patterns.py). It
folds only where the two intermediates are read by nothing else, and not in a program
that differentiates a backward pass again (``create_graph``): second derivatives go
through the ops' vjps, which the fold would change.

``fold_activation``: ``linear`` or ``conv2d`` followed by ``relu``, ``tanh`` or ``sigmoid``
of its output (read by nothing else) becomes one ``LinearActivation`` node
(ops/matmul.py), whose GEMM applies the bias and the activation as it stores the product,
or one ``Conv2dActivation`` node (ops/conv.py), whose kernels apply the activation to
each output plane as they store it: a pass over the layer's output fewer, and no array
for the value before the activation. The same expressions in the same order, so the
same bits, forward and backward (tests/compiler/test_patterns.py). Not where a backward
is differentiated again, as above.
"""

from __future__ import annotations

import functools
from typing import Any

from ..kernels.activation import ACTIVATIONS
from ..ops.conv import Conv2d, Conv2dActivation
from ..ops.matmul import Linear, LinearActivation
from .trace import BackwardNode, GradNode, OpNode, Slot


def fold_linear(nodes: list, last_read: dict[int, int]) -> list:
    """``nodes`` with every ``h @ W.T + b`` as one ``linear`` node; ``last_read[k]``: the
    index of the last node reading slot k (len(nodes) for the function's result)."""
    return _folded(nodes, last_read, _linear_at, 3)


def fold_activation(nodes: list, last_read: dict[int, int],
                    layers: tuple = (Linear, Conv2d)) -> list:
    """``nodes`` with every ``linear`` or ``conv2d`` (those of ``layers``) followed by
    ``relu``, ``tanh`` or ``sigmoid`` of it as one node of ``_WITH_ACTIVATION``
    (``last_read`` as for ``fold_linear``)."""
    return _folded(nodes, last_read, functools.partial(_activation_at, layers=layers), 2)


def _folded(nodes: list, last_read: dict[int, int], fold_at: Any, length: int) -> list:
    """``nodes`` with each run of ``length`` nodes for which ``fold_at(nodes, i,
    last_read)`` gives a node replaced by it; none in a program that differentiates a
    backward pass."""
    if any(isinstance(n, (BackwardNode, GradNode)) and n.create_graph for n in nodes):
        return nodes
    folded, i = [], 0
    while i < len(nodes):
        node = fold_at(nodes, i, last_read)
        folded.append(nodes[i] if node is None else node)
        i += 1 if node is None else length
    return folded


def _linear_at(nodes: list, i: int, last_read: dict[int, int]) -> OpNode | None:
    """The ``linear`` node for ``nodes[i:i + 3]`` if they are ``h @ W.T + b``, else None."""
    run = nodes[i:i + 3]
    if len(run) < 3 or not all(isinstance(n, OpNode) and not n.several for n in run):
        return None
    t, mm, add = run
    if ((t.fn.op_name, mm.fn.op_name, add.fn.op_name) != ("permute", "matmul", "add")
            or t.params.get("dims") != (1, 0) or mm.params or add.params
            or not t.grad_enabled == mm.grad_enabled == add.grad_enabled):
        return None
    (w_t,), (y,) = t.outputs, mm.outputs
    if mm.inputs[1] != Slot(w_t) or last_read.get(w_t) != i + 1:
        return None
    if Slot(y) not in add.inputs or last_read.get(y) != i + 2:
        return None
    b_at = 1 if add.inputs[0] == Slot(y) else 0
    h_meta, w_meta, b_meta = mm.input_meta[0], t.input_meta[0], add.input_meta[b_at]
    if not _linear_shapes(h_meta, w_meta, b_meta):
        return None
    return OpNode(Linear, (mm.inputs[0], t.inputs[0], add.inputs[b_at]), {},
                  add.grad_enabled, add.outputs, False, add.line,
                  (h_meta, w_meta, b_meta), add.out_meta)


def _linear_shapes(h: Any, w: Any, b: Any) -> bool:
    """Whether h [rows, in], W [out, in] and b [out] of one float dtype (metadata:
    (shape, dtype, needs a gradient)) make a linear layer."""
    if h is None or w is None or b is None:
        return False
    (h_shape, h_dtype, _), (w_shape, w_dtype, _), (b_shape, b_dtype, _) = h, w, b
    return (len(h_shape) == 2 and len(w_shape) == 2 and h_shape[1] == w_shape[1]
            and b_shape == (w_shape[0],) and h_dtype == w_dtype == b_dtype
            and h_dtype.kind == "f")


# a layer's op -> the op that applies its activation as it stores its output
_WITH_ACTIVATION = {Linear: LinearActivation, Conv2d: Conv2dActivation}


def _activation_at(nodes: list, i: int, last_read: dict[int, int],
                   layers: tuple) -> OpNode | None:
    """The ``_WITH_ACTIVATION`` node for ``nodes[i:i + 2]`` if they are an activation of
    the output of a layer of ``layers`` that nothing else reads, else None."""
    run = nodes[i:i + 2]
    if len(run) < 2 or not all(isinstance(n, OpNode) and not n.several for n in run):
        return None
    layer, act = run
    folded = _WITH_ACTIVATION.get(layer.fn) if layer.fn in layers else None
    if (folded is None or act.fn.op_name not in ACTIVATIONS or act.params
            or layer.grad_enabled != act.grad_enabled):
        return None
    (y,) = layer.outputs
    if act.inputs != (Slot(y),) or last_read.get(y) != i + 1:
        return None
    return OpNode(folded, layer.inputs, {**layer.params, "activation": act.fn.op_name},
                  act.grad_enabled, act.outputs, False, act.line, layer.input_meta,
                  act.out_meta)
