"""A whole traced step run as one generated function (``nb.compile``'s step programs).

When every call a trace recorded between an optimiser's ``zero_grad`` and ``step`` is an
op with a primitive form (``step_graph.LOWER``), a ``grad`` without ``grad_outputs``,
or a ``backward`` of a loss without ``create_graph``, the step becomes one graph --
forward, gradients, second derivatives -- and one Numba function (``step_codegen``).
An SGD, Adam or AdamW ``step`` right after becomes the function's last part
(``step_optim``); other calls stay as they are, around it. A call of the program then:

1. checks what the graph assumed: the inputs' shapes, dtypes and ``requires_grad``, the
   values it took as constants (an exponent of 2), class indices in range, no hook on a
   leaf, no anomaly detection, the optimiser as traced; otherwise the recorded program
   (``fallback``) runs;
2. runs the calls before the graph (``zero_grad``), the function, and adds each leaf's
   gradient into its ``.grad`` as the engine does;
3. runs the calls after it and returns the function's result, whose tensors hold
   copies of the arena's values and carry no graph (the backward has been done, as in
   a fused gradient region).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..autograd import hooks
from ..autograd.anomaly import state as anomaly
from ..tensor import Tensor
from . import step_codegen, step_optim
from .fusion import load_generated
from .step_graph import LOWER, Graph, NoForm, Var, gradients, live_equations
from .trace import (
    Arg,
    BackwardNode,
    CallNode,
    GradNode,
    Live,
    OpNode,
    Slot,
    rebuild,
    slots_of,
)

#: the largest graph written as one function: Numba's compile time grows with its length
#: (some 6 s for the 470 lines of W21's PINN step)
MAX_EQUATIONS = 1000


@dataclass
class StepProgram:
    before: list            # CallNodes run before the function
    after: list             # and after it
    inputs: list            # Refs of the function's inputs, in argument order
    expected: list          # per input: (shape, dtype, requires_grad)
    guards: list            # (input position, value it must hold)
    classes: list           # (input position, C): class indices, each in [0, C)
    leaf_grads: list        # (input position, (offset, size)) of each gradient to store
    exported: dict          # slot -> (offset, size, shape) of the result's values
    result: Any
    n_slots: int
    kernel: Any
    arena: np.ndarray
    text: str
    recorded: list          # what the function replaces: the recorded calls' names
    fallback: Any           # the recorded program (api.Program)
    outputs_start: int      # where the values read after the call begin in the arena
    update: Any             # the optimiser's step inside the function (step_optim), or None
    lock: Any = field(default_factory=threading.Lock)   # one call at a time: one arena
    _flat: tuple = ([], [])

    @property
    def nodes(self) -> list:
        return self.fallback.nodes

    def run(self, args: list) -> Any:
        tensors = [ref.get(None, args) for ref in self.inputs]
        update = self.update
        if not self._assumptions_hold(tensors) or (update and not update.holds()):
            return self.fallback.run(args)
        for node in self.before:
            node.run([], args)
        with self.lock:
            self.kernel(self.arena, *self._flat_inputs(tensors),
                        *(update.arguments() if update else ()))
            block = self.arena[self.outputs_start:].copy()
        if update:
            update.finish()
        for position, (offset, size) in self.leaf_grads:
            leaf = tensors[position]
            g = self._output(block, offset, size, leaf._data.shape)
            if leaf.grad is not None:
                with np.errstate(all="ignore"):
                    g = leaf.grad._data + g
            leaf.grad = Tensor._wrap(g, None, 0)
        values: list = [None] * self.n_slots
        for slot, (offset, size, shape) in self.exported.items():
            values[slot] = Tensor._wrap(self._output(block, offset, size, shape), None, 0)
        for node in self.after:
            node.run(values, args)
        return rebuild(self.result, values, args)

    def _output(self, block: np.ndarray, offset: int, size: int, shape: tuple) -> np.ndarray:
        start = offset - self.outputs_start
        return block[start:start + size].reshape(shape)

    def _flat_inputs(self, tensors: list) -> list:
        """The inputs' arrays flat, as the function takes them: the views of the previous
        call while every tensor holds the same C-contiguous array (parameters do, step
        after step); a strided array is copied at every call, since its values may
        have changed in place."""
        held, flat = self._flat
        if len(held) == len(tensors) and all(t._data is a for t, a in zip(tensors, held)):
            return flat
        arrays = [t._data for t in tensors]
        flat = [np.ascontiguousarray(a).reshape(-1) for a in arrays]
        if all(a.flags.c_contiguous for a in arrays):
            self._flat = (arrays, flat)
        return flat

    def _assumptions_hold(self, tensors: list) -> bool:
        if anomaly.enabled:
            return False
        for t, (shape, dtype, requires_grad) in zip(tensors, self.expected):
            if (t._data.shape != shape or t._data.dtype != dtype
                    or t._requires_grad != requires_grad or t._node is not None
                    or (requires_grad and hooks.has_hooks(t))):
                return False
        return (all(tensors[j]._data.reshape(-1)[0] == value for j, value in self.guards)
                and all(_all_classes(tensors[j]._data, c) for j, c in self.classes))

    def describe(self) -> list[str]:
        return ([node.describe() for node in self.before]
                + [f"step program ({len(self.text.splitlines())} lines, below) of: "
                   + ", ".join(self.recorded)
                   + (f", {type(self.update.optimizer).__name__}.step" if self.update else "")]
                + [node.describe() for node in self.after])


def lower(recorded: Any, result: Any, args: list, fallback: Any) -> StepProgram | None:
    """The step program of a recorded trace, or None when some call has no primitive
    form; ``fallback`` is the recorded program, which runs when an assumption fails."""
    nodes = recorded.nodes
    calls = [i for i, node in enumerate(nodes) if isinstance(node, CallNode)]
    body = [i for i, node in enumerate(nodes) if not isinstance(node, CallNode)]
    if not body or any(body[0] < i < body[-1] for i in calls):
        return None
    builder = _Builder(args)
    try:
        for node in nodes[body[0]:body[-1] + 1]:
            builder.add(node)
    except NoForm:
        return None
    exported = {}
    for slot in set(slots_of(result)):
        var = builder.env.get(slot)
        if (var is None or var in builder.input_vars
                or (var.tracked and not builder.backward_done)):
            return None
        exported[slot] = var
    outputs = list(exported.values()) + [g for _, g in builder.leaf_grads]
    eqns = live_equations(builder.graph, outputs)
    if not _worth_a_program(eqns):
        return None
    if any(g in builder.input_vars for _, g in builder.leaf_grads):
        return None
    before, after = nodes[:body[0]], nodes[body[-1] + 1:]
    update = after and step_optim.lower(before, after[0], builder.leaf_grads,
                                        builder.leaves_by_tensor())
    return _build(before, after[1:] if update else after, builder, eqns, exported, outputs,
                  result, recorded.n_slots,
                  [n.describe() for n in nodes[body[0]:body[-1] + 1]], fallback,
                  update or None)


def _worth_a_program(eqns: list) -> bool:
    """A step with products and the ops around them. A step without a product is a
    point-wise chain, which the fused regions already run as one loop."""
    return 0 < len(eqns) <= MAX_EQUATIONS and any(e.prim == "mm" for e in eqns)


def _build(before: list, after: list, builder: Any, eqns: list, exported: dict,
           outputs: list, result: Any, n_slots: int, replaced: list, fallback: Any,
           update: Any) -> StepProgram:
    graph = builder.graph
    eqns = step_codegen.with_epilogues(eqns, {v.index for v in outputs}, graph.dtype)
    where = step_codegen.layout(eqns, builder.input_vars, graph.dtype, outputs)
    name = "step_program"
    tail = ((update.n_arguments, update.lines(0, lambda v: step_codegen.name_of(v, where)))
            if update else (0, []))
    text = step_codegen.source(eqns, where, graph.dtype, name, {v.index for v in outputs},
                               *tail)
    module = load_generated(_module_source(text, name))
    arena = np.zeros(max(where.size, 1), graph.dtype)
    place = where.offsets
    position = {v.index: j for j, v in enumerate(builder.input_vars)}
    return StepProgram(
        before, after, builder.input_refs, builder.expected,
        [(position[v.index], value) for v, value in graph.guards],
        [(position[v.index], c) for v, c in graph.classes],
        [(position[leaf.index], place[g.index]) for leaf, g in builder.leaf_grads],
        {slot: place[v.index] + (v.shape,) for slot, v in exported.items()},
        result, n_slots, getattr(module, name), arena, text, replaced, fallback,
        min(place[v.index][0] for v in outputs), update)


def _module_source(text: str, name: str) -> str:
    return ('"""A training step written as one function by nb.compile '
            '(nbgrad/compiler/step_codegen.py). Generated."""\n'
            "import numpy as np\nfrom numba import njit, prange\n\n"
            "from nbgrad.compiler import rules as R\n"
            "from nbgrad.compiler.step_codegen import cross_entropy_grad, cross_entropy_loss, "
            "product_into\n"
            "from nbgrad.compiler.step_optim import adam_update, sgd_update\n"
            "from nbgrad.kernels.broadcast_sum_loops import reduce_flat, rows_sum\n"
            "from nbgrad.runtime.jit import plain\n\n\n"
            + text + f"\n\n{name} = njit(cache=True, error_model='numpy', "
            f"parallel={'prange(' in text})({name})\n")


class _Builder:
    """Turns recorded nodes into the step graph."""

    def __init__(self, args: list) -> None:
        self.args = args
        self.graph: Graph | None = None
        self.env: dict[int, Var | None] = {}    # slot -> value
        self.by_input: dict[Any, Var] = {}      # Arg index / id(tensor) -> input value
        self.input_vars: list[Var] = []
        self.input_refs: list = []
        self.expected: list = []
        self.leaf_grads: list = []              # (leaf input Var, gradient Var)
        self.backward_done = False

    def add(self, node: Any) -> None:
        if isinstance(node, OpNode):
            self._op(node)
        elif isinstance(node, GradNode):
            self._grad(node)
        elif isinstance(node, BackwardNode):
            self._backward(node)
        else:
            raise NoForm

    def _op(self, node: OpNode) -> None:
        lowering = LOWER.get(node.fn.op_name)
        if lowering is None or node.several or not node.out_meta:
            raise NoForm
        shape, dtype = node.out_meta
        graph = self._graph(dtype)
        ins = [None if ref is None else self._value(ref) for ref in node.inputs]
        if node.fn.op_name != "cross_entropy" and any(v is not None and v.integer
                                                       for v in ins):
            raise NoForm
        graph.recording = node.grad_enabled
        try:
            out = lowering(graph, ins, node.params, tuple(shape))
        finally:
            graph.recording = True
        if out is None or out.shape != tuple(shape):
            raise NoForm
        self.env[node.outputs[0]] = out

    def _grad(self, node: GradNode) -> None:
        if node.grad_outputs is not None and any(g is not None for g in _listed(
                node.grad_outputs)):
            raise NoForm
        roots = [self._value(r) for r in _listed(node.outputs)]
        wanted = [self._value(r) for r in _listed(node.inputs)]
        if not all(v.tracked for v in roots + wanted):
            raise NoForm   # eager raises: let the recorded program say so
        found = gradients(self.graph, roots, [None] * len(roots), wanted, node.create_graph)
        self.env.update(zip(node.results, found))

    def _backward(self, node: BackwardNode) -> None:
        root = self._value(node.root)
        if node.grad is not None or node.create_graph or root.size != 1 or not root.tracked:
            raise NoForm
        leaves = [v for v in self.input_vars if v.tracked]
        found = gradients(self.graph, [root], [None], leaves, False)
        self.leaf_grads += [(v, g) for v, g in zip(leaves, found) if g is not None]
        self.backward_done = True

    def _graph(self, dtype: np.dtype) -> Graph:
        if self.graph is None:
            if np.dtype(dtype) not in (np.float32, np.float64):
                raise NoForm
            self.graph = Graph(np.dtype(dtype))
        if np.dtype(dtype) != self.graph.dtype:
            raise NoForm
        return self.graph

    def _value(self, ref: Any) -> Var:
        if isinstance(ref, Slot):
            v = self.env.get(ref.index)
            if v is None:
                raise NoForm
            return v
        if isinstance(ref, Arg):
            key, t = ("arg", ref.index), self.args[ref.index]
        elif isinstance(ref, Live):
            key, t = id(ref.tensor), ref.tensor
        else:
            raise NoForm
        v = self.by_input.get(key)
        if v is None:
            integer = t._data.dtype == np.int64
            if (self.graph is None or t._node is not None
                    or (t._data.dtype != self.graph.dtype and not integer)):
                raise NoForm
            v = self.graph.new_var(t._data.shape, t._requires_grad, integer)
            self.by_input[key] = v
            self.input_vars.append(v)
            self.input_refs.append(ref)
            self.expected.append((t._data.shape, t._data.dtype, t._requires_grad))
        return v

    def leaves_by_tensor(self) -> dict:
        """id(tensor) -> Var of every input tensor."""
        return {id(self.args[ref.index] if isinstance(ref, Arg) else ref.tensor): v
                for ref, v in zip(self.input_refs, self.input_vars)}


def _all_classes(t: np.ndarray, c: int) -> bool:
    """Whether every class index lies in [0, c) (else the recorded program runs, and
    cross_entropy says which one does not)."""
    return t.size == 0 or (int(t.min()) >= 0 and int(t.max()) < c)


def _listed(refs: Any) -> list:
    return list(refs) if isinstance(refs, (list, tuple)) else [refs]
