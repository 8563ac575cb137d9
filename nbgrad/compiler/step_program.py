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
from ..autograd.engine import fit_gradient, gradient_count_error
from ..function import Context
from ..kernels.broadcast_sum import sum_to_shape
from ..tensor import Tensor
from . import step_codegen, step_optim
from .fusion import load_generated
from .step_graph import LOWER, Graph, NoForm, Var, gradients, host_op, live_equations
from .trace import (
    Arg,
    BackwardNode,
    CallNode,
    Const,
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
    leaf_grads: list        # (input position, place (``_where``)) of each gradient to store
    exported: dict          # slot -> place of the result's values
    result: Any
    n_slots: int
    steps: list             # the generated functions and host calls, in order
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
            call = _Call(self.arena, tensors, self._flat_inputs(tensors),
                         update.arguments() if update else ())
            for step in self.steps:
                step.run(call)
            block = self.arena[self.outputs_start:].copy()
        if update:
            update.finish()
        for position, place in self.leaf_grads:
            leaf = tensors[position]
            g = self._output(block, call.host, place)
            if leaf.grad is not None:
                with np.errstate(all="ignore"):
                    g = leaf.grad._data + g
            leaf.grad = Tensor._wrap(g, None, 0)
        values: list = [None] * self.n_slots
        for slot, place in self.exported.items():
            values[slot] = Tensor._wrap(self._output(block, call.host, place), None, 0)
        for node in self.after:
            node.run(values, args)
        return rebuild(self.result, values, args)

    def _output(self, block: np.ndarray, host: dict, place: tuple) -> np.ndarray:
        """A value the program left at ``place``: a view of the copy ``block`` of the
        arena's outputs, or a host call's array (a copy where it views another array)."""
        if place[0] == "host":
            a = host[place[1]]
            return a.copy() if isinstance(a.base, np.ndarray) or not a.flags.writeable else a
        _, offset, size, shape = place
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


def lower(recorded: Any, result: Any, args: list, fallback: Any,
          nodes: list) -> StepProgram | None:
    """The step program of a recorded trace (its ``nodes``, rewritten as
    ``patterns.py`` does), or None when some call can be neither a primitive nor a host
    call; ``fallback`` is the recorded program, which runs when an assumption fails."""
    nodes = _zero_grad_first(nodes)
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


def _zero_grad_first(nodes: list) -> list:
    """``nodes`` with each ``zero_grad`` that follows the forward pass (``loss = ...;
    opt.zero_grad(); loss.backward()``, a common order) moved before the ops of it: it
    only clears parameters' ``.grad``, and an op that reads a ``.grad`` has no form in
    a step program (``_Builder._value``). A backward, a ``grad`` or another call stays
    before it."""
    out: list = []
    for node in nodes:
        start = len(out)
        if isinstance(node, CallNode) and node.method.__name__ == "zero_grad":
            while start and isinstance(out[start - 1], OpNode):
                start -= 1
        out.insert(start, node)
    return out


def _worth_a_program(eqns: list) -> bool:
    """A step with products and the ops around them. A step without a product is a
    point-wise chain, which the fused regions already run as one loop, or one of host
    calls with the chains between them, which the recorded program runs as well: the
    fused regions' kernels keep what a backward needs from their forward (gelu's
    derivative), where a step program computes it again."""
    return 0 < len(eqns) <= MAX_EQUATIONS and any(e.prim == "mm" for e in eqns)


@dataclass
class _Call:
    """What one call of a step program works on: the arena, the inputs (tensors and
    their flat arrays), the optimiser's arguments, and the host calls' arrays and
    Contexts (by value index)."""
    arena: np.ndarray
    tensors: list
    flat: list
    update: tuple
    host: dict = field(default_factory=dict)
    contexts: dict = field(default_factory=dict)

    def array(self, place: tuple) -> np.ndarray | None:
        """The array at ``place`` (``_where``), shaped."""
        kind = place[0]
        if kind == "host":
            a = self.host[place[1]]
            return a if a.shape == place[2] else a.reshape(place[2])
        if kind == "input":
            return self.tensors[place[1]]._data
        if kind == "arena":
            return self.arena[place[1]:place[1] + place[2]].reshape(place[3])
        return None

    def kept(self, index: int, a: np.ndarray) -> None:
        """Keep a host call's array ``a`` as value ``index``; a view of the arena is
        copied, since a later function may write that slice."""
        self.host[index] = a.copy() if a.base is self.arena else a


@dataclass
class _Generated:
    """A generated function: it takes the arena, the inputs, the host arrays ``reads``
    (flat) and, the last one, the optimiser's arguments (``update``)."""
    kernel: Any
    reads: list
    update: bool

    def run(self, call: _Call) -> None:
        host = [np.ascontiguousarray(call.host[k]).reshape(-1) for k in self.reads]
        self.kernel(call.arena, *call.flat, *host, *(call.update if self.update else ()))


@dataclass
class _HostForward:
    """An op's forward on a Context of its own (``step_graph.host_op``)."""
    fn: type
    params: dict
    needs: tuple
    ins: list     # places of its inputs (``_where``)
    out: int

    def run(self, call: _Call) -> None:
        arrays = [call.array(place) for place in self.ins]
        ctx = Context(self.fn, (), self.needs, arrays, self.params)
        call.kept(self.out, self.fn.forward(ctx, *arrays, **self.params))
        call.contexts[self.out] = ctx


@dataclass
class _HostBackward:
    """That op's backward on the same Context: the gradient of each input that needs
    one, brought to the input's shape and dtype as the engine does (``fit_gradient``); one the
    backward gives as None is zeros (the step graph has a value for each)."""
    fn: type
    forward_out: int
    g: tuple              # place of the output's gradient
    grads: list           # (input position, value index) of each gradient it makes

    def run(self, call: _Call) -> None:
        ctx = call.contexts[self.forward_out]
        grads = self.fn.backward(ctx, call.array(self.g))
        if not isinstance(grads, tuple):
            grads = (grads,)
        if len(grads) != len(ctx.input_arrays):
            raise gradient_count_error(ctx, grads)
        for position, index in self.grads:
            g, like = grads[position], ctx.input_arrays[position]
            if g is None:
                g = np.zeros(like.shape, like.dtype)
            elif type(g) is not np.ndarray or g.shape != like.shape or g.dtype != like.dtype:
                g = fit_gradient(ctx, position, g, like, False)
            call.kept(index, g)


def _where(v: Any, where: Any, position: dict) -> tuple:
    """Where a host call finds value ``v`` at run time (``_Call.array``), and where the
    program leaves a value read after it (``StepProgram._output``)."""
    if v is None:
        return ("none",)
    if v.index in position:
        return ("input", position[v.index])
    index = step_codegen.resolved(v.index, where)
    if index in where.host:
        return ("host", index, v.shape)
    offset, size = where.offsets[index]
    return ("arena", offset, size, v.shape)


@dataclass
class _HostSum:
    """A ``sum_to`` by the engine's ``sum_to_shape`` (``step_codegen.is_host``)."""
    a: tuple
    out: int
    shape: tuple

    def run(self, call: _Call) -> None:
        call.kept(self.out, sum_to_shape(call.array(self.a), self.shape))


def _host_call(eqn: Any, where: Any, position: dict) -> Any:
    if eqn.prim == "sum_to":
        return _HostSum(_where(eqn.ins[0], where, position), eqn.out.index, eqn.out.shape)
    if eqn.prim == "host":
        fn, params, needs = eqn.params
        return _HostForward(fn, params, needs, [_where(v, where, position) for v in eqn.ins],
                            eqn.out.index)
    forward = eqn.params[0]
    needs = forward.params[2]
    made = iter(eqn.also)
    return _HostBackward(forward.params[0], forward.out.index,
                         _where(eqn.ins[0], where, position),
                         [(k, next(made).index) for k, need in enumerate(needs) if need])


def _build(before: list, after: list, builder: Any, eqns: list, exported: dict,
           outputs: list, result: Any, n_slots: int, replaced: list, fallback: Any,
           update: Any) -> StepProgram:
    graph = builder.graph
    eqns = step_codegen.with_epilogues(eqns, {v.index for v in outputs}, graph.dtype)
    where = step_codegen.layout(eqns, builder.input_vars, graph.dtype, outputs)
    tail = ((update.n_arguments, update.lines(0, lambda v: step_codegen.name_of(v, where)),
             [g.index for _, g in builder.leaf_grads if g.index in where.host])
            if update else (0, [], []))
    parts = step_codegen.parts(eqns, where, graph.dtype, "step_program",
                               {v.index for v in outputs}, *tail)
    generated = [part for part in parts if part.host is None]
    module = load_generated(_module_source(generated))
    position = {v.index: j for j, v in enumerate(builder.input_vars)}
    steps = [_host_call(part.host, where, position) if part.host is not None
             else _Generated(getattr(module, part.name), part.reads,
                             bool(update) and part is generated[-1]) for part in parts]
    in_arena = [where.offsets[v.index][0] for v in outputs if v.index in where.offsets]
    return StepProgram(
        before, after, builder.input_refs, builder.expected,
        [(position[v.index], value) for v, value in graph.guards],
        [(position[v.index], c) for v, c in graph.classes],
        [(position[leaf.index], _where(g, where, position))
         for leaf, g in builder.leaf_grads],
        {slot: _where(v, where, position) for slot, v in exported.items()},
        result, n_slots, steps, np.zeros(max(where.size, 1), graph.dtype),
        "\n".join(_part_text(part, where) for part in parts), replaced, fallback,
        min(in_arena, default=where.size), update)


def _part_text(part: Any, where: Any) -> str:
    if part.host is None:
        return part.text
    eqn = part.host
    ins = ", ".join("None" if v is None else step_codegen.name_of(v, where) for v in eqn.ins)
    outs = ", ".join(step_codegen.name_of(v, where) for v in eqn.also or (eqn.out,))
    if eqn.prim == "sum_to":
        return f"# host call: {outs} = sum_to_shape({ins}, {eqn.out.shape})\n"
    what = (f"{eqn.params[0].__name__}.forward" if eqn.prim == "host"
            else f"{eqn.params[0].params[0].__name__}.backward")
    return f"# host call: {outs} = {what}({ins})\n"


def _module_source(generated: list) -> str:
    text = "\n\n".join(part.text for part in generated)
    compile_lines = "".join(
        f"{part.name} = njit(cache=True, error_model='numpy', "
        f"parallel={'prange(' in part.text})({part.name})\n" for part in generated)
    return ('"""A training step written as generated functions by nb.compile '
            '(nbgrad/compiler/step_codegen.py). Generated."""\n'
            "import numpy as np\nfrom numba import njit, prange\n\n"
            "from nbgrad.compiler import rules as R\n"
            "from nbgrad.compiler.step_codegen import cross_entropy_grad, cross_entropy_loss, "
            "product_into, thin_product_into\n"
            "from nbgrad.kernels.activation import apply_epilogue\n"
            "from nbgrad.compiler.step_optim import adam_update, sgd_update\n"
            "from nbgrad.kernels.broadcast_sum_loops import reduce_flat, rows_sum\n"
            "from nbgrad.runtime.jit import plain\n\n\n"
            + text + "\n\n" + compile_lines)


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
        if node.several or not node.out_meta:
            raise NoForm
        shape, dtype = node.out_meta
        graph = self._graph(dtype)
        ins = [None if ref is None else self._value(ref) for ref in node.inputs]
        lowering = LOWER.get(node.fn.op_name)
        if lowering is not None and node.fn.op_name != "cross_entropy" and any(
                v is not None and v.dtype is not None for v in ins):
            lowering = None
        graph.recording = node.grad_enabled
        try:
            out = lowering and lowering(graph, ins, node.params, tuple(shape))
            if out is None:
                out = host_op(graph, node, ins, tuple(shape))
        finally:
            graph.recording = True
        if out.shape != tuple(shape):
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
        elif isinstance(ref, Const) and isinstance(ref.value, np.ndarray):
            # an array handed to an op as it is (cross_entropy's class indices): read at
            # each call through a tensor that holds it
            key, t = id(ref.value), Tensor._wrap(ref.value, None, 0)
            ref = Live(t)
        else:
            raise NoForm
        v = self.by_input.get(key)
        if v is None:
            if self.graph is None or t._node is not None:
                raise NoForm
            other = None if t._data.dtype == self.graph.dtype else t._data.dtype
            if other is not None and t._requires_grad:
                raise NoForm
            v = self.graph.new_var(t._data.shape, t._requires_grad, other)
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
