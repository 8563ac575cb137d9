"""Second derivatives by recomputation: a ``vjp`` that re-runs an op's forward as a
composition of differentiable ops on ``ctx.inputs`` and differentiates it with
``grad(..., create_graph=True)`` (used by ``gno``, ``gram_schmidt``, ``ono_encode`` and
``ono_decode``).

The recomputed graph hangs off the op's inputs, which may be outputs of earlier ops. A
plain ``grad`` of it would not stop at them: the engine walks every node it can reach,
so it would call the vjp of every node upstream of the op, once per such vjp call
(quadratic in the depth of a network). ``recompute_vjp`` puts a ``_Cut`` (the identity)
between each input and the recomputation, asks ``grad`` for the gradients at the cuts,
and keeps the cuts closed (passing no gradient on) while that ``grad`` runs. Afterwards
a cut is the identity in every respect, so the returned gradients are differentiable in
the op's inputs, to any order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..autograd.engine import grad
from ..function import Context, Function
from ..tensor import Tensor


class _Cut(Function):
    """The identity; its vjp passes nothing on while ``recompute_vjp``'s ``grad`` runs."""

    @staticmethod
    def forward(ctx, x):
        ctx.open = False
        return x

    @staticmethod
    def backward(ctx, g):
        return g

    @staticmethod
    def vjp(ctx, g):
        return g if ctx.open else None


def recompute_vjp(ctx: Context, composition: Callable[..., Any], grads: tuple) -> tuple:
    """The input gradients of the node ``ctx`` for its output gradients ``grads``, as
    differentiable tensors: ``composition(*inputs)`` recomputes the op's output(s) from
    its positional inputs with differentiable ops. Inputs that need no gradient enter it
    detached (constants); the result has None for them."""
    needs = ctx.needs_input_grad
    cuts = []
    inputs = []
    for x, need in zip(ctx.inputs, needs):
        if need:
            cuts.append(_Cut.apply(x))
            inputs.append(cuts[-1])
        else:
            inputs.append(x.detach() if isinstance(x, Tensor) else x)
    if not cuts:
        return (None,) * len(needs)
    outs = composition(*inputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    pairs = [(o, g) for o, g in zip(outs, grads) if g is not None and o.requires_grad]
    if not pairs:
        return (None,) * len(needs)
    try:
        found = grad([o for o, _ in pairs], cuts, grad_outputs=[g for _, g in pairs],
                     create_graph=True)
    finally:
        for c in cuts:
            c._node.open = True
    found = iter(found)
    return tuple(next(found) if need else None for need in needs)
