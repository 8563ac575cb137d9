"""A function with a graph break: compiled up to its first break, eager from there on.

A trace that met a graph break (``trace.py``) recorded the calls before it, the
*prefix*: they are a program like a whole function's, fused and lowered the same way
(``api._program``, ``step_program.lower``). The Python between those calls, and
everything from the break on, cannot be replayed: the break may be an ``if`` on a
value. So a later call runs the function itself again, with a ``Replay`` where the
tracing recorder sits (``autograd/tracing.py``):

- at the first call the function makes into nbgrad, the whole prefix runs compiled;
- each call of the prefix is then answered from what the program made: an op's output,
  ``grad``'s gradients; ``backward`` and an optimiser's ``step`` are already done. Each
  is checked first to be the call the trace recorded (the same op or method, on the
  same tensors): a function whose path before the break depends on something other
  than its arguments' kinds is an error, never a second, different computation;
- after the prefix's last call every call runs eagerly, as does the break itself.

What the program hands back: the values something besides the recorder still held at
the break during the trace (a variable of the function, a module's attribute, a graph
node; ``Recorder._held_slots``), every value that is not a float op output, and what
the calls after the break read. A float value nothing held there was only passed from
op to op before the break, so it may stay in a fused loop's registers; its tensor is a
read-only NaN array of its shape and dtype, which the checks above make sure only
those ops receive.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..autograd import tracing
from ..tensor import Tensor
from .trace import (
    Arg,
    BackwardNode,
    CallNode,
    GradNode,
    GradOf,
    OpNode,
    Slot,
    Trace,
    run_recorded,
)


@dataclass
class Prefix:
    """The calls before the first break (``nodes``, as traced), their ``program`` and
    the refs of the values it hands back (``kept``)."""
    nodes: list
    program: Any
    kept: list
    n_slots: int
    unread: list = field(init=False)   # per slot: the placeholder of a value not kept

    def __post_init__(self) -> None:
        kept = {ref.index for ref in self.kept}
        self.unread = [None] * self.n_slots
        for node in self.nodes:
            if isinstance(node, OpNode) and not node.several and node.outputs[0] not in kept:
                self.unread[node.outputs[0]] = _unread(*node.out_meta)


def prefix_of(recorded: Trace, read_later: set[int]) -> tuple[Trace, list]:
    """The calls before the first break as a trace of their own, and the refs of the
    values its program must hand back (see the module docstring); ``read_later``: the
    slots the calls after the break and the function's result read."""
    nodes = recorded.nodes[:recorded.split]
    kept = set(recorded.held) | read_later
    for node in nodes:
        if isinstance(node, OpNode) and not _float_output(node):
            kept.update(node.outputs)
        elif isinstance(node, GradNode):
            kept.update(node.results)
    made = {k for node in nodes for k in _made(node)}
    return (Trace(nodes, recorded.n_slots, []),
            [Slot(k) for k in sorted(kept & made)])


def _made(node: Any) -> tuple:
    if isinstance(node, OpNode):
        return node.outputs
    if isinstance(node, GradNode):
        return node.results
    return ()


def _float_output(node: OpNode) -> bool:
    return (not node.several and bool(node.out_meta)
            and np.issubdtype(node.out_meta[1], np.inexact))


class Replay:
    """Stands where the tracing recorder does while a function with a graph break runs
    again: it runs the compiled prefix at the first call into nbgrad and answers the
    prefix's calls from it (the module docstring)."""

    def __init__(self, name: str, prefix: Prefix, args: list) -> None:
        self.name, self.prefix, self.nodes, self.args = name, prefix, prefix.nodes, args
        self.thread = threading.get_ident()
        self.served: list | None = None   # per slot: the tensor the function receives
        self.next = 0                     # the prefix call expected next
        self.running = False              # the program's own calls pass through

    # the hooks the core calls, as on trace.Recorder
    def recording(self) -> bool:
        return (self.next < len(self.nodes) and not self.running
                and threading.get_ident() == self.thread)

    def apply(self, fn: type, inputs: tuple, params: dict) -> Any:
        node = self._expect(OpNode, fn.op_name or fn.__name__,
                            lambda n: n.fn is fn and self._same(n.inputs, inputs))
        out = tuple(self.served[k] for k in node.outputs)
        return out if node.several else out[0]

    def backward(self, t: Tensor, grad: Any, retain_graph: Any, create_graph: bool) -> None:
        self._expect(BackwardNode, "backward",
                     lambda n: self._same((n.root, n.grad), (t, grad)))

    def grad(self, outputs: Any, inputs: Any, grad_outputs: Any, retain_graph: Any,
             create_graph: bool) -> tuple:
        node = self._expect(GradNode, "grad", lambda n: (
            self._same(_listed(n.outputs), _listed(outputs))
            and self._same(_listed(n.inputs), _listed(inputs))))
        return tuple(self.served[k] for k in node.results)

    def call(self, method: Any, *args: Any) -> None:
        self._expect(CallNode, method.__name__, lambda n: n.method == method)

    def event(self, what: str, tensor: Tensor | None) -> None:
        if self.recording():
            raise RuntimeError(f"nb.compile({self.name}): {what} before the traced graph "
                               f"break ({self.next} of {len(self.nodes)} calls made); "
                               "the function's path does not depend on its arguments' "
                               "kinds alone")

    # checking the calls
    def _expect(self, kind: type, what: str, matches: Any) -> Any:
        """The next traced call, which must be of ``kind`` and match the one made."""
        if self.served is None:
            self._run_prefix()
        node = self.nodes[self.next]
        if not isinstance(node, kind) or not matches(node):
            raise RuntimeError(
                f"nb.compile({self.name}): call {self.next + 1} before the graph break was "
                f"{node.describe()} when traced and is {what} now (or on other tensors); "
                "the compiled part has run. The function's path before its first graph "
                "break must depend on its arguments' kinds alone")
        self.next += 1
        return node

    def _run_prefix(self) -> None:
        self.running = True
        try:
            values = self.prefix.program.run(self.args)
        finally:
            self.running = False
        self.served = list(self.prefix.unread)
        for ref, value in zip(self.prefix.kept, values):
            self.served[ref.index] = value

    def _same(self, refs: Any, given: Any) -> bool:
        """Each input is what the traced call's ref names: the argument, the value served
        for a slot, the gradient of the same tensor (a lifted constant and other values
        from outside are the program's, as in a whole-function replay)."""
        for ref, x in zip(refs, given):
            if isinstance(ref, (Arg, Slot, GradOf)):
                expected = (self.served[ref.index] if isinstance(ref, Slot)
                            else ref.get(self.served, self.args))
                if x is not expected and not (isinstance(x, np.ndarray)
                                              and isinstance(expected, Tensor)
                                              and x is expected._data):
                    return False
        return True

    def finish(self) -> None:
        if self.next < len(self.nodes):
            raise RuntimeError(f"nb.compile({self.name}): the function returned after "
                               f"{self.next} of the {len(self.nodes)} calls traced before "
                               "its graph break, which the compiled part has run")


def replay(name: str, prefix: Prefix, fn: Any, leaves: list, args: tuple,
           kwargs: dict) -> Any:
    """``fn(*args, **kwargs)`` with its calls before the first graph break answered by
    the compiled ``prefix``, and eagerly from there."""
    if tracing.recorder is not None:   # inside another trace or replay: run eagerly
        return fn(*args, **kwargs)
    state = Replay(name, prefix, leaves)
    result = run_recorded(state, fn, args, kwargs)
    state.finish()
    return result


def _unread(shape: tuple, dtype: np.dtype) -> Tensor:
    return Tensor._wrap(np.broadcast_to(np.array(np.nan, dtype), shape), None, 0)


def _listed(v: Any) -> list:
    return list(v) if isinstance(v, (list, tuple)) else [v]
