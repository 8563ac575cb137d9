"""Tracing a function into a program of nbgrad calls, and running the program again.

While ``Recorder`` is ``autograd.tracing.recorder``, the function runs eagerly as always,
and every call it makes into the op table is also written down as a ``Node``: an op's
``apply`` (``OpNode``), ``backward`` and ``grad`` (``BackwardNode``, ``GradNode``), an
optimiser's or a module's ``step`` / ``zero_grad`` (``CallNode``). Each argument of a
node is a ``Ref`` to where its value comes from on a later call:

    Arg(i)     the i-th tensor argument of the call
    Slot(k)    the k-th value the program made (an op's output, a gradient of nb.grad)
    Live(t)    a tensor from outside the call (a parameter, a buffer, a constant made
               by the function such as a lifted number): read when the node runs
    GradOf(r)  the ``.grad`` of the tensor ``r`` refers to, read when the node runs
    Const(v)   anything else (an array, a number, a shape), as it was

What a replay could not repeat -- a value read into Python, an in-place write outside an
op, a random draw outside an op, a gradient set by hand, ``detach``/``.data``/``astype``
-- is a graph break: the calls before the first one are the program (``breaks.py``
runs them compiled and the rest of the function eagerly); with ``fullgraph=True`` it is
an error naming the line (``Break``).
"""

from __future__ import annotations

import sys
import threading
import traceback
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..autograd import engine, grad_mode, tracing
from ..tensor import Tensor

# -- references ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Arg:
    index: int

    def get(self, values: list, args: list) -> Any:
        return args[self.index]


@dataclass(frozen=True)
class Slot:
    index: int

    def get(self, values: list, args: list) -> Any:
        return values[self.index]


@dataclass(frozen=True, eq=False)
class Live:
    tensor: Tensor

    def get(self, values: list, args: list) -> Any:
        return self.tensor


@dataclass(frozen=True)
class GradOf:
    owner: Any

    def get(self, values: list, args: list) -> Any:
        return self.owner.get(values, args).grad


@dataclass(frozen=True, eq=False)
class Const:
    value: Any

    def get(self, values: list, args: list) -> Any:
        return self.value


@dataclass(frozen=True, eq=False)
class Plain:
    """A part of a function's result that is not a tensor, returned as it was."""
    value: Any


def slots_of(ref: Any) -> list[int]:
    """The slots a Ref, or a list, tuple or dict of them, reads."""
    if isinstance(ref, Slot):
        return [ref.index]
    if isinstance(ref, GradOf):
        return slots_of(ref.owner)
    if isinstance(ref, (list, tuple)):
        return [k for r in ref for k in slots_of(r)]
    if isinstance(ref, dict):
        return [k for r in ref.values() for k in slots_of(r)]
    return []


def reads_of(node: Any) -> list:
    """The refs a recorded node reads."""
    if isinstance(node, OpNode):
        return list(node.inputs)
    if isinstance(node, BackwardNode):
        return [node.root, node.grad]
    if isinstance(node, GradNode):
        return [node.outputs, node.inputs, node.grad_outputs]
    if isinstance(node, CallNode):
        return []
    raise TypeError(node)


def rebuild(spec: Any, values: list, args: list) -> Any:
    """A function's result from its recorded form: each Ref's value, each Plain's value."""
    if isinstance(spec, Plain):
        return spec.value
    if isinstance(spec, (list, tuple)):
        items = [rebuild(v, values, args) for v in spec]
        return type(spec)(items) if isinstance(spec, list) else tuple(items)
    if isinstance(spec, dict):
        return {k: rebuild(v, values, args) for k, v in spec.items()}
    return spec.get(values, args)


# -- nodes -------------------------------------------------------------------------------------


@dataclass
class OpNode:
    """``fn.apply(*inputs, **params)`` with gradients recorded or not (``grad_enabled``);
    its outputs go to ``outputs`` (slot numbers; ``several``: a tuple of them)."""
    fn: type
    inputs: tuple
    params: dict
    grad_enabled: bool
    outputs: tuple
    several: bool
    line: str = ""
    input_meta: tuple = ()   # per input: (shape, dtype, needs a gradient), or None
    out_meta: tuple = ()     # (shape, dtype) of the one output

    def run(self, values: list, args: list) -> None:
        inputs = [None if r is None else r.get(values, args) for r in self.inputs]
        out = apply_in_mode(self.fn, inputs, self.params, self.grad_enabled)
        if self.several:
            for k, o in zip(self.outputs, out):
                values[k] = o
        else:
            values[self.outputs[0]] = out

    def describe(self) -> str:
        return self.fn.op_name or self.fn.__name__


@dataclass
class BackwardNode:
    root: Any
    grad: Any
    retain_graph: bool | None
    create_graph: bool

    def run(self, values: list, args: list) -> None:
        grad = None if self.grad is None else self.grad.get(values, args)
        engine.backward(self.root.get(values, args), grad, self.retain_graph,
                        self.create_graph)

    def describe(self) -> str:
        return "backward"


@dataclass
class GradNode:
    outputs: Any
    inputs: Any
    grad_outputs: Any
    retain_graph: bool | None
    create_graph: bool
    results: tuple
    single_output: bool = field(default=False)

    def run(self, values: list, args: list) -> None:
        found = engine.grad(_get(self.outputs, values, args), _get(self.inputs, values, args),
                            _get(self.grad_outputs, values, args), self.retain_graph,
                            self.create_graph)
        for k, g in zip(self.results, found):
            values[k] = g

    def describe(self) -> str:
        return "grad" + (" (create_graph)" if self.create_graph else "")


@dataclass
class CallNode:
    """A bound method called again as it was (an optimiser's ``step``)."""
    method: Any
    args: tuple

    def run(self, values: list, args: list) -> None:
        self.method(*self.args)

    def describe(self) -> str:
        owner = type(self.method.__self__).__name__
        return f"{owner}.{self.method.__name__}"


def apply_in_mode(fn: type, inputs: list, params: dict, grad_enabled: bool) -> Any:
    """``fn.apply(*inputs, **params)`` with gradients recorded or not, as traced."""
    if grad_mode.state.enabled == grad_enabled:
        return fn.apply(*inputs, **params)
    with grad_mode.set_grad_enabled(grad_enabled):
        return fn.apply(*inputs, **params)


def _get(refs: Any, values: list, args: list) -> Any:
    """A Ref's value, or a list of them (None stays None)."""
    if refs is None:
        return None
    if isinstance(refs, list):
        return [None if r is None else r.get(values, args) for r in refs]
    return refs.get(values, args)


# -- the recorder ------------------------------------------------------------------------------


class Break(Exception):
    """A graph break met with ``fullgraph=True``."""


@dataclass
class Trace:
    nodes: list
    n_slots: int
    breaks: list   # (what, line) of every graph break met
    split: int = 0           # the calls before the first break
    held: frozenset = frozenset()   # slots a reference outside the recorder held there


class Recorder:
    """Writes down the calls of one traced run (see the module docstring)."""

    def __init__(self, args: list, fullgraph: bool, name: str) -> None:
        self.thread = threading.get_ident()
        self.depth = 0     # > 0 inside an op's apply: its inner calls are its own business
        self.paused = 0    # > 0 inside backward / grad / step: the replay repeats them whole
        self.fullgraph, self.name = fullgraph, name
        self.nodes: list = []
        self.breaks: list = []
        self.split, self.held = 0, frozenset()
        self.refs: dict[int, Any] = {}
        self.data_refs: dict[int, Any] = {}   # id(tensor._data) -> that tensor's ref
        self.alive: list = []   # every tensor given a ref, so that no id is reused
        self.n_slots = 0
        for i, a in enumerate(args):
            if isinstance(a, Tensor):
                self._bind(a, Arg(i))

    # the hooks the core calls (autograd/tracing.py)
    def recording(self) -> bool:
        return self.depth == 0 and self.paused == 0 and threading.get_ident() == self.thread

    def apply(self, fn: type, inputs: tuple, params: dict) -> Any:
        refs = tuple(self._ref(x) for x in inputs)
        grad_enabled = grad_mode.state.enabled
        self.depth += 1
        try:
            out = fn.apply(*inputs, **params)
        finally:
            self.depth -= 1
        several = isinstance(out, tuple)
        outs = out if several else (out,)
        slots = tuple(self._new_slot(o) for o in outs)
        meta = tuple(_meta(x, grad_enabled) for x in inputs)
        out_meta = () if several else (out._data.shape, out._data.dtype)
        self.nodes.append(OpNode(fn, refs, dict(params), grad_enabled, slots, several,
                                 _user_line(), meta, out_meta))
        return out

    def backward(self, t: Tensor, grad: Any, retain_graph: Any, create_graph: bool) -> None:
        node = BackwardNode(self._ref(t), None if grad is None else self._ref(grad),
                            retain_graph, create_graph)
        with self._paused():
            engine.backward(t, grad, retain_graph, create_graph)
        self.nodes.append(node)

    def grad(self, outputs: Any, inputs: Any, grad_outputs: Any, retain_graph: Any,
             create_graph: bool) -> tuple:
        refs = [self._refs(v) for v in (outputs, inputs, grad_outputs)]
        with self._paused():
            found = engine.grad(outputs, inputs, grad_outputs, retain_graph, create_graph)
        slots = tuple(self._new_slot(g) if g is not None else self._none_slot() for g in found)
        self.nodes.append(GradNode(*refs, retain_graph, create_graph, slots))
        return found

    def call(self, method: Any, *args: Any) -> Any:
        with self._paused():
            result = method(*args)
        self.nodes.append(CallNode(method, args))
        return result

    def event(self, what: str, tensor: Tensor | None) -> None:
        """Something a replay could not repeat happened in the traced function."""
        if not self.recording():
            return
        line = _user_line()
        if self.fullgraph:
            raise Break(f"nb.compile({self.name}, fullgraph=True): {what} at {line} ends "
                        f"the graph; compile the part before it, or move it out of the "
                        f"function")
        if not self.breaks:
            self.split, self.held = len(self.nodes), self._held_slots()
        self.breaks.append((what, line))

    def result(self) -> Trace:
        return Trace(self.nodes, self.n_slots, self.breaks, self.split, self.held)

    def _held_slots(self) -> frozenset:
        """The slots whose tensors something besides the recorder holds: a variable of the
        function, a module's attribute, a graph node that saved it. A value nothing else
        holds at the first break can be read after it by nothing but this recorder."""
        own = 3   # the list ``alive``, the loop variable, getrefcount's argument
        held = set()
        for t in self.alive:
            ref = self.refs.get(id(t))
            if isinstance(ref, Slot) and sys.getrefcount(t) > own:
                held.add(ref.index)
        return frozenset(held)

    # references
    def _ref(self, x: Any) -> Any:
        if x is None:
            return None
        if not isinstance(x, Tensor):
            # an op handed a tensor's array (cross_entropy its targets'): the tensor's ref,
            # so that a later call reads that call's values, not this one's
            owner = self.data_refs.get(id(x)) if isinstance(x, np.ndarray) else None
            return owner if owner is not None else Const(x)
        ref = self.refs.get(id(x))
        if ref is None:
            owner = self._grad_owner(x)
            ref = GradOf(owner) if owner is not None else Live(x)
            self._bind(x, ref)
        return ref

    def _refs(self, v: Any) -> Any:
        if isinstance(v, (list, tuple)):
            return [self._ref(x) for x in v]
        return self._ref(v)

    def _grad_owner(self, t: Tensor) -> Any:
        """The ref of the tensor whose ``.grad`` is ``t``, if any."""
        for held in self.alive:
            if held._grad is t:
                return self.refs[id(held)]
        return None

    def _bind(self, t: Tensor, ref: Any) -> None:
        self.refs[id(t)] = ref
        self.data_refs.setdefault(id(t._data), ref)
        self.alive.append(t)

    def _new_slot(self, t: Any) -> int:
        k = self._none_slot()
        if isinstance(t, Tensor):
            self._bind(t, Slot(k))
        return k

    def _none_slot(self) -> int:
        self.n_slots += 1
        return self.n_slots - 1

    def _paused(self) -> Any:
        recorder = self

        class Paused:
            def __enter__(self) -> None:
                recorder.paused += 1

            def __exit__(self, *exc: Any) -> None:
                recorder.paused -= 1
        return Paused()


def trace(fn: Any, args: list, call_args: tuple, call_kwargs: dict, fullgraph: bool,
          name: str) -> tuple[Any, Trace, Recorder]:
    """Run ``fn(*call_args, **call_kwargs)`` eagerly while recording it; ``args`` are the
    call's tensors in the order ``Arg`` numbers them. Returns (result, trace, recorder)."""
    if tracing.recorder is not None:
        raise RuntimeError(f"nb.compile({name}): called while another function is being "
                           "traced; compile the outer function only")
    recorder = Recorder(args, fullgraph, name)
    result = run_recorded(recorder, fn, call_args, call_kwargs)
    return result, recorder.result(), recorder


def run_recorded(recorder: Any, fn: Any, args: tuple, kwargs: dict) -> Any:
    """``fn(*args, **kwargs)`` with ``recorder`` handed the core's calls."""
    tracing.recorder = recorder
    try:
        return fn(*args, **kwargs)
    finally:
        tracing.recorder = None


def _user_line() -> str:
    """``file:line`` of the innermost frame outside nbgrad's own modules."""
    for frame in reversed(traceback.extract_stack(limit=40)):
        if "/nbgrad/" not in frame.filename.replace("\\", "/"):
            return f"{frame.filename}:{frame.lineno}"
    return "?"


def _meta(x: Any, grad_enabled: bool) -> tuple | None:
    """(shape, dtype, needs a gradient) of an op's input, None for a non-array."""
    if isinstance(x, Tensor):
        return x._data.shape, x._data.dtype, grad_enabled and x._requires_grad
    if isinstance(x, np.ndarray):
        return x.shape, x.dtype, False
    return None
