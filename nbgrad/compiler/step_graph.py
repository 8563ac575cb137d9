"""A traced step as one graph of primitive array operations, its gradients included.

``nb.compile`` records a step as calls into nbgrad (``trace.py``); ``backward`` and
``nb.grad`` are single calls that run the engine. Here the step is rebuilt as a list
of equations ``out = prim(ins)`` over arrays of static shapes, and each ``backward`` /
``grad`` is differentiated symbolically into more equations of the same primitives, as
JAX's ``vjp`` does: the gradient rules below are themselves written with the
primitives, so a gradient taken with ``create_graph=True`` can be differentiated again
(the PINN's u'' and the loss's gradient through it). ``step_codegen.py`` then writes the
whole graph as one Numba function.

Primitives (every array C-contiguous, shapes static):

    add sub mul div     element-wise with NumPy broadcasting; an operand may be a number
    neg tanh exp log sigmoid relu silu gelu square
                        element-wise
    step                1 where x > 0, else 0 (relu's slope)
    grad                an eager kernel's gradient formula (params: its name in rules.py)
                        at (g, operands..., value)
    fill                an array of one value            (params: shape, value)
    broadcast, sum_to   to a shape, and its adjoint: the sum over the broadcast axes
    sum, mean           of all elements, to shape ()
    transpose           of a 2-D array
    reshape             the same elements in C order, another shape
    cross_entropy       of [N, C] logits and N int64 classes, its mean or sum (params:
                        the reduction), eager's fused kernel and float64 sum
    cross_entropy_grad  its gradient (g, logits, classes), eager's backward kernel
    mm                  op(a) @ op(b), op a transpose where ``params`` (ta, tb) say
    host                an op with no primitive form (a convolution, a pooling), run by
                        its own ``forward`` on a Context of its own (params: the op,
                        its parameters, which inputs need a gradient)
    host_grad           that op's ``backward`` on the same Context: the gradients of the
                        inputs that need one (``also``); without ``create_graph`` only

A trace converts when every op it records has a rule in ``LOWER`` or runs as a host
call: a single-output op of the step's dtype that writes none of its inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import rules

ELEMENTWISE = ("add", "sub", "mul", "div", "neg", "tanh", "exp", "log", "sigmoid", "relu",
               "silu", "gelu", "square", "step", "grad")


class NoForm(Exception):
    """A recorded call the step graph cannot express."""


@dataclass(eq=False)
class Var:
    """An array of the graph: ``tracked`` when it needs a gradient (eager's
    ``requires_grad``: made with gradients recorded from a value that needs one)."""
    index: int
    shape: tuple
    tracked: bool
    dtype: np.dtype | None = None   # an input of another dtype than the graph's (class
                                    # indices, a mask): read by host calls and
                                    # cross_entropy only

    @property
    def integer(self) -> bool:
        return self.dtype == np.int64

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


@dataclass(eq=False)
class Eqn:
    prim: str
    ins: tuple          # Vars, or numbers for element-wise operands (None: a host op's
                        # input it was given as None)
    params: tuple
    out: Var
    also: tuple = ()    # a host_grad's gradients (its ``out`` is a token of no elements)

    @property
    def outs(self) -> tuple:
        return (self.out, *self.also)


@dataclass
class Graph:
    """Equations in the order they run, over one float dtype."""
    dtype: np.dtype
    eqns: list = field(default_factory=list)
    n_vars: int = 0
    recording: bool = True    # outputs of new equations may be tracked (grad mode)
    guards: list = field(default_factory=list)   # (input Var, the value it must hold)
    classes: list = field(default_factory=list)  # (int input Var, C): each in [0, C)

    def new_var(self, shape: tuple, tracked: bool, dtype: np.dtype | None = None) -> Var:
        self.n_vars += 1
        return Var(self.n_vars - 1, tuple(shape), tracked, dtype)

    def emit(self, prim: str, ins: tuple, shape: tuple, params: tuple = ()) -> Var:
        tracked = self.recording and any(isinstance(v, Var) and v.tracked for v in ins)
        out = self.new_var(shape, tracked)
        self.eqns.append(Eqn(prim, ins, params, out))
        return out

    # element-wise
    def elementwise(self, prim: str, *ins: Any) -> Var:
        shape = np.broadcast_shapes(*(v.shape for v in ins if isinstance(v, Var)))
        return self.emit(prim, ins, shape)

    def add(self, a: Any, b: Any) -> Var:
        return self.elementwise("add", a, b)

    def sub(self, a: Any, b: Any) -> Var:
        return self.elementwise("sub", a, b)

    def mul(self, a: Any, b: Any) -> Var:
        return self.elementwise("mul", a, b)

    def div(self, a: Any, b: Any) -> Var:
        return self.elementwise("div", a, b)

    def neg(self, a: Var) -> Var:
        return self.elementwise("neg", a)

    # shapes and reductions
    def fill(self, shape: tuple, value: float) -> Var:
        return self.emit("fill", (), shape, (tuple(shape), float(value)))

    def broadcast(self, a: Var, shape: tuple) -> Var:
        return a if a.shape == tuple(shape) else self.emit("broadcast", (a,), tuple(shape))

    def sum_to(self, a: Var, shape: tuple) -> Var:
        return a if a.shape == tuple(shape) else self.emit("sum_to", (a,), tuple(shape))

    def reshape(self, a: Var, shape: tuple) -> Var:
        return a if a.shape == tuple(shape) else self.emit("reshape", (a,), tuple(shape))

    def transpose(self, a: Var) -> Var:
        return self.emit("transpose", (a,), a.shape[::-1])

    def mm(self, a: Var, b: Var, ta: bool = False, tb: bool = False) -> Var:
        """op(a) @ op(b); a transposed operand made by ``transpose`` is read in place."""
        a, ta = self._untransposed(a, ta)
        b, tb = self._untransposed(b, tb)
        m = a.shape[1] if ta else a.shape[0]
        n = b.shape[0] if tb else b.shape[1]
        return self.emit("mm", (a, b), (m, n), (ta, tb))

    def _untransposed(self, v: Var, flag: bool) -> tuple[Var, bool]:
        made = self.producer(v)
        if made is not None and made.prim == "transpose":
            return made.ins[0], not flag
        return v, flag

    def producer(self, v: Var) -> Eqn | None:
        for eqn in reversed(self.eqns):
            if eqn.out is v:
                return eqn
        return None


# -- gradient rules ------------------------------------------------------------------------------
# rule(graph, eqn, g) -> the gradient of each input (None for a number), built with the
# graph's primitives so that it can be differentiated again.


def _summed(graph: Graph, eqn: Eqn, grads: list) -> list:
    return [graph.sum_to(g, v.shape) if isinstance(v, Var) and g is not None else None
            for v, g in zip(eqn.ins, grads)]


def _add_rule(graph: Graph, eqn: Eqn, g: Var) -> list:
    return _summed(graph, eqn, [g, g])


def _sub_rule(graph: Graph, eqn: Eqn, g: Var) -> list:
    right = graph.neg(g) if isinstance(eqn.ins[1], Var) else None
    return _summed(graph, eqn, [g, right])


def _mul_rule(graph: Graph, eqn: Eqn, g: Var) -> list:
    a, b = eqn.ins
    return _summed(graph, eqn, [graph.mul(g, b) if isinstance(a, Var) else None,
                                graph.mul(g, a) if isinstance(b, Var) else None])


def _div_rule(graph: Graph, eqn: Eqn, g: Var) -> list:
    a, b = eqn.ins
    da = graph.div(g, b) if isinstance(a, Var) else None
    db = graph.neg(graph.div(graph.mul(g, a), graph.mul(b, b))) if isinstance(b, Var) else None
    return _summed(graph, eqn, [da, db])


def _mm_rule(graph: Graph, eqn: Eqn, g: Var) -> list:
    """C = op(A) op(B): d op(A) = G op(B)^T, d op(B) = op(A)^T G, transposed back where
    the operand was read transposed."""
    a, b = eqn.ins
    ta, tb = eqn.params
    da = graph.mm(b, g, tb, True) if ta else graph.mm(g, b, False, not tb)
    db = graph.mm(g, a, True, ta) if tb else graph.mm(a, g, not ta, False)
    return [da, db]


def _silu_rule(graph: Graph, eqn: Eqn, g: Var) -> list:
    """d(x s(x))/dx = s (1 + x (1 - s)), s the sigmoid of x."""
    x = eqn.ins[0]
    s = graph.elementwise("sigmoid", x)
    return [graph.mul(g, graph.mul(s, graph.add(1.0, graph.mul(x, graph.sub(1.0, s)))))]


def _cross_entropy_rule(graph: Graph, eqn: Eqn, g: Var) -> list:
    """Eager's backward kernel; with create_graph eager differentiates softmax, which
    has no primitive here."""
    if graph.recording:
        raise NoForm("cross_entropy differentiated with create_graph")
    logits, classes = eqn.ins
    return [graph.emit("cross_entropy_grad", (g, logits, classes), logits.shape,
                       eqn.params), None]


def _host_rule(graph: Graph, eqn: Eqn, g: Var) -> list:
    """The op's own backward, on the Context its forward filled (``host_grad``)."""
    if graph.recording:
        raise NoForm(f"{eqn.params[0].op_name} differentiated with create_graph")
    needs = eqn.params[2]
    grads = [graph.new_var(v.shape, False) if need else None
             for v, need in zip(eqn.ins, needs)]
    # it reads the forward's inputs too: its Context may hold them (the arena keeps them)
    reads = tuple(v for v in eqn.ins if isinstance(v, Var))
    graph.eqns.append(Eqn("host_grad", (g, eqn.out, *reads), (eqn,),
                          graph.new_var((0,), False), tuple(v for v in grads if v)))
    return grads


def mean_scale(v: Var) -> float:
    """1 / n for a mean of n elements (NaN for none, as eager's mean)."""
    return 1.0 / v.size if v.size else float("nan")


RULES: dict[str, Callable] = {
    "add": _add_rule,
    "sub": _sub_rule,
    "mul": _mul_rule,
    "div": _div_rule,
    "neg": lambda graph, eqn, g: [graph.neg(g)],
    "tanh": lambda graph, eqn, g: [graph.mul(g, graph.sub(1.0, graph.mul(eqn.out, eqn.out)))],
    "exp": lambda graph, eqn, g: [graph.mul(g, eqn.out)],
    "log": lambda graph, eqn, g: [graph.div(g, eqn.ins[0])],
    "sigmoid": lambda graph, eqn, g: [graph.mul(g, graph.mul(eqn.out, graph.sub(1.0, eqn.out)))],
    "relu": lambda graph, eqn, g: [graph.mul(g, graph.elementwise("step", eqn.ins[0]))],
    "silu": _silu_rule,
    "step": lambda graph, eqn, g: [None],
    "reshape": lambda graph, eqn, g: [graph.reshape(g, eqn.ins[0].shape)],
    "square": lambda graph, eqn, g: [graph.mul(g, graph.add(eqn.ins[0], eqn.ins[0]))],
    "fill": lambda graph, eqn, g: [],
    "grad": lambda graph, eqn, g: [None] * len(eqn.ins),   # made untracked: never reached
    "broadcast": lambda graph, eqn, g: [graph.sum_to(g, eqn.ins[0].shape)],
    "sum_to": lambda graph, eqn, g: [graph.broadcast(g, eqn.ins[0].shape)],
    "sum": lambda graph, eqn, g: [graph.broadcast(g, eqn.ins[0].shape)],
    "mean": lambda graph, eqn, g: [graph.broadcast(graph.mul(g, mean_scale(eqn.ins[0])),
                                                   eqn.ins[0].shape)],
    "transpose": lambda graph, eqn, g: [graph.transpose(g)],
    "cross_entropy": _cross_entropy_rule,
    "mm": _mm_rule,
    "host": _host_rule,
}


def _kernel_rule(graph: Graph, eqn: Eqn, g: Var) -> list:
    """Without ``create_graph`` eager runs an op's backward kernel, not its vjp: each
    operand's gradient by that kernel's formula (``rules.py``), so the bits are eager's."""
    rule = rules.RULES[eqn.prim]
    # a gradient from the output alone gets the output in the operand's place, so that
    # the operand need not be kept (nor computed: step_codegen.with_epilogues)
    operands = (eqn.out,) if rule.from_output else eqn.ins
    grads = []
    for k, v in enumerate(eqn.ins):
        if isinstance(v, Var) and v.tracked:
            name = rule.grad_for(k, graph.dtype)
            if name == "pass_grad":   # the gradient itself (add's, sub's first operand)
                grads.append(g)
            else:
                grads.append(graph.emit("grad", (g, *operands, eqn.out), eqn.out.shape,
                                        (name,)))
        else:
            grads.append(None)
    return _summed(graph, eqn, grads)


def _rule(prim: str, create_graph: bool) -> Callable:
    if not create_graph and prim in rules.RULES:
        return _kernel_rule
    if prim not in RULES:   # gelu: no vjp written with the primitives
        raise NoForm(f"{prim} differentiated with create_graph")
    return RULES[prim]



def gradients(graph: Graph, roots: list[Var], seeds: list[Var | None], wanted: list[Var],
              create_graph: bool) -> list[Var | None]:
    """d(sum of roots . seeds)/d(wanted), as new equations (tracked if ``create_graph``);
    a seed None is ones. A wanted value the roots do not depend on gets None. The rules
    are the ops' vjps with ``create_graph``, their backward kernels' formulas without."""
    known = len(graph.eqns)
    graph.recording = create_graph
    try:
        grads: dict[int, Var] = {}
        for root, seed in zip(roots, seeds):
            _accumulate(graph, grads, root, seed if seed is not None
                        else graph.fill(root.shape, 1.0))
        keep = {v.index for v in wanted}
        for eqn in reversed(graph.eqns[:known]):
            g = grads.get(eqn.out.index) if eqn.out.tracked else None
            if g is None:
                continue
            if eqn.out.index not in keep:
                del grads[eqn.out.index]
            for v, gv in zip(eqn.ins, _rule(eqn.prim, create_graph)(graph, eqn, g)):
                if isinstance(v, Var) and v.tracked and gv is not None:
                    _accumulate(graph, grads, v, gv)
    finally:
        graph.recording = True
    return [grads.get(v.index) for v in wanted]


def _accumulate(graph: Graph, grads: dict, v: Var, g: Var) -> None:
    seen = grads.get(v.index)
    grads[v.index] = g if seen is None else graph.add(seen, g)


def live_equations(graph: Graph, outputs: list[Var]) -> list[Eqn]:
    """The equations the outputs need, in order (dead gradient branches dropped)."""
    needed = {v.index for v in outputs}
    kept = []
    for eqn in reversed(graph.eqns):
        if any(v.index in needed for v in eqn.outs):
            kept.append(eqn)
            needed.update(v.index for v in eqn.ins if isinstance(v, Var))
    return kept[::-1]


# -- recorded ops to primitives --------------------------------------------------------------------
# lower(graph, inputs, params, out_shape) -> Var, or None when this call has no primitive form.


def host_op(graph: Graph, node: Any, ins: list, shape: tuple) -> Var:
    """``node``'s op as a host call: its forward on the inputs' arrays, its backward in
    the gradient sweep (``_host_rule``). Not for an op that writes an input
    (``inplace``); its output has the graph's dtype (``_Builder._graph`` checked)."""
    if node.params.get("inplace"):
        raise NoForm(f"{node.describe()} as a host call")
    needs = tuple(bool(node.grad_enabled and isinstance(v, Var) and v.tracked) for v in ins)
    return graph.emit("host", tuple(ins), shape, (node.fn, node.params, needs))


def _binary(prim: str) -> Callable:
    def lower(graph: Graph, ins: list, params: dict, shape: tuple) -> Var | None:
        return graph.elementwise(prim, *ins) if not params else None
    return lower


def _unary(prim: str) -> Callable:
    """An op of the fusion table with the parameters it fuses with (gelu's exact form)."""
    def lower(graph: Graph, ins: list, params: dict, shape: tuple) -> Var | None:
        return graph.elementwise(prim, ins[0]) if rules.RULES[prim].fuses(params) else None
    return lower


def _lower_matmul(graph: Graph, ins: list, params: dict, shape: tuple) -> Var | None:
    a, b = ins
    return graph.mm(a, b) if not params and len(a.shape) == len(b.shape) == 2 else None


def _lower_linear(graph: Graph, ins: list, params: dict, shape: tuple) -> Var | None:
    """x @ weight^T + bias: the same product and the same bias add as eager's linear."""
    x, weight, bias = ins
    if params or len(x.shape) != 2 or len(weight.shape) != 2:
        return None
    y = graph.mm(x, weight, False, True)
    return y if bias is None else graph.add(y, bias)


def _lower_pow(graph: Graph, ins: list, params: dict, shape: tuple) -> Var | None:
    """x ** 2 (an exponent of x's dtype holding 2, eager's x * x): a square; the step
    checks at each call that the exponent still holds 2 (``Graph.guards``)."""
    base, exponent = ins
    if (params or not isinstance(exponent, Var) or exponent.size != 1 or exponent.tracked
            or graph.producer(exponent) is not None):
        return None
    graph.guards.append((exponent, 2.0))
    return graph.elementwise("square", base)


def _lower_reduction(prim: str) -> Callable:
    def lower(graph: Graph, ins: list, params: dict, shape: tuple) -> Var | None:
        if params.get("axis") is not None or params.get("keepdims") or set(params) - {
                "axis", "keepdims"}:
            return None
        return graph.emit(prim, (ins[0],), ())
    return lower


def _lower_mse(graph: Graph, ins: list, params: dict, shape: tuple) -> Var | None:
    pred, target = ins
    if pred.shape != target.shape:
        return None
    squares = graph.elementwise("square", graph.sub(pred, target))
    reduction = params.get("reduction", "mean")
    return squares if reduction == "none" else graph.emit(reduction, (squares,), ())


def _lower_cross_entropy(graph: Graph, ins: list, params: dict, shape: tuple) -> Var | None:
    logits, classes = ins
    reduction = params.get("reduction", "mean")
    if (reduction not in ("mean", "sum") or not classes.integer or len(logits.shape) != 2
            or classes.shape != logits.shape[:1]):
        return None
    graph.classes.append((classes, logits.shape[1]))
    return graph.emit("cross_entropy", (logits, classes), (), (reduction,))


def _lower_permute(graph: Graph, ins: list, params: dict, shape: tuple) -> Var | None:
    if tuple(params.get("dims", ())) != (1, 0) or len(ins[0].shape) != 2:
        return None
    return graph.transpose(ins[0])


LOWER: dict[str, Callable] = {
    "add": _binary("add"), "sub": _binary("sub"), "mul": _binary("mul"),
    "div": _binary("div"), "pow": _lower_pow,
    **{name: _unary(name) for name in ("neg", "tanh", "exp", "log", "sigmoid", "relu",
                                       "silu", "gelu")},
    "matmul": _lower_matmul, "linear": _lower_linear,
    "sum": _lower_reduction("sum"), "mean": _lower_reduction("mean"), "mse_loss": _lower_mse,
    "cross_entropy": _lower_cross_entropy,
    "permute": _lower_permute,
    "reshape": lambda graph, ins, params, shape: graph.reshape(ins[0], shape),
}
