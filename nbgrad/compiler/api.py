"""``nb.compile``: trace a function once per kind of arguments, then run it as a program
of nbgrad calls with its point-wise chains fused (docs/compile.md)."""

from __future__ import annotations

import functools
import os
import sys
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..autograd import grad_mode, tracing
from ..ops.conv import Conv2d
from ..tensor import Tensor
from . import breaks, gradient, row_epilogue, step_program
from .fusion import find_regions, fused_function
from .patterns import fold_activation, fold_linear
from .trace import (
    Plain,
    apply_in_mode,
    reads_of,
    rebuild,
    slots_of,
    trace,
)

#: the variants (argument kinds) one compiled function keeps; the oldest goes first
MAX_VARIANTS = 8


@dataclass
class FusedNode:
    """A fused region's Function applied to the region's inputs."""
    fn: type
    inputs: list
    outputs: list
    grad_enabled: bool

    def run(self, values: list, args: list) -> None:
        out = apply_in_mode(self.fn, [r.get(values, args) for r in self.inputs], {},
                            self.grad_enabled)
        for k, o in zip(self.outputs, out if len(self.outputs) > 1 else (out,)):
            values[k] = o

    def describe(self) -> str:
        return self.fn.op_name


@dataclass
class Program:
    nodes: list
    n_slots: int
    result: Any            # the function's result with Refs in place of its tensors
    frees: list            # per node: the slots nothing reads after it

    def run(self, args: list) -> Any:
        values: list = [None] * self.n_slots
        for node, frees in zip(self.nodes, self.frees):
            node.run(values, args)
            for k in frees:
                values[k] = None
        return rebuild(self.result, values, args)


@dataclass
class Variant:
    program: Any   # a Program or StepProgram; with a graph break, the breaks.Prefix of the
                   # calls before it, or None if it came before any (the call runs eagerly)
    breaks: list   # (what, line) of each graph break the trace met


class Compiled:
    """The callable ``nb.compile(fn)`` returns (see ``compile``)."""

    def __init__(self, fn: Callable, fullgraph: bool, dynamic: bool | None = None) -> None:
        self.fn = fn
        self.fullgraph = fullgraph
        self.dynamic = bool(dynamic)
        self.name = getattr(fn, "__qualname__", type(fn).__name__)
        self.variants: OrderedDict = OrderedDict()
        self.traces = 0
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        leaves: list = []
        statics: list = []
        args = _tensors_in(args, leaves, statics)
        kwargs = _tensors_in(kwargs, leaves, statics)
        key = (tuple(_kind(x) for x in leaves), tuple(statics), grad_mode.state.enabled,
               tracing.mode_epoch)
        variant = self.variants.get(key)
        if variant is None:
            return self._trace(key, leaves, args, kwargs)
        if variant.breaks:
            if variant.program is None:
                return self.fn(*args, **kwargs)
            return breaks.replay(self.name, variant.program, self.fn, leaves, args, kwargs)
        return variant.program.run(leaves)

    def _trace(self, key: tuple, leaves: list, args: tuple, kwargs: dict) -> Any:
        if self.traces:
            _notice(f"nb.compile({self.name}): tracing again for new argument shapes, dtypes "
                    f"or modes (variant {len(self.variants) + 1}, at most {MAX_VARIANTS} kept"
                    + ("; dynamic shapes: its loops are the ones compiled before)"
                       if self.dynamic and any(_unshaped(key) == _unshaped(k)
                                               for k in self.variants) else ")"))
        self.traces += 1
        result, recorded, recorder = trace(self.fn, leaves, args, kwargs, self.fullgraph,
                                           self.name)
        refs = _refs_in(result, recorder)
        if recorded.breaks:
            what, line = recorded.breaks[0]
            _notice(f"nb.compile({self.name}): graph break: {what} at {line}; the "
                    f"{recorded.split} calls before it run compiled, the rest eagerly")
            program = _prefix(recorded, refs, leaves, self.dynamic) if recorded.split else None
        else:
            program = _lowered(recorded, refs, leaves, self.dynamic)
        self.variants[key] = Variant(program, recorded.breaks)
        if len(self.variants) > MAX_VARIANTS:
            self.variants.popitem(last=False)
        if os.environ.get("NBGRAD_COMPILE_DEBUG") == "1":
            print(self.explain(), file=sys.stderr)
        return result

    def explain(self) -> str:
        """The traced programs: every node, and the generated loop nests of each fused
        region (forward, and each backward built so far)."""
        lines = [f"nb.compile({self.name}): {len(self.variants)} variant(s)"]
        for n, variant in enumerate(self.variants.values(), 1):
            program = variant.program
            if variant.breaks:
                what, line = variant.breaks[0]
                if program is None:
                    lines.append(f"variant {n}: eager (graph break: {what} at {line})")
                    continue
                lines.append(f"variant {n}: compiled up to a graph break ({what} at {line}), "
                             "eager from there; before it:")
                program = program.program
            else:
                lines.append(f"variant {n}:")
            lines += _described(program)
        return "\n".join(lines)

    def reset(self) -> None:
        """Forget every traced variant: the next call traces again."""
        self.variants.clear()


#: torch.compile's modes, accepted so that a call ports unchanged (nbgrad compiles one way)
MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def compile(fn: Callable | None = None, *, fullgraph: bool = False,
            dynamic: bool | None = None, backend: Any = "inductor", mode: str | None = None,
            options: dict | None = None, disable: bool = False) -> Any:
    """Compile ``fn`` (PyTorch's ``torch.compile`` name and calling convention; also a
    decorator, with or without arguments).

    The first call with a kind of arguments (each tensor's shape, dtype and
    ``requires_grad``, every other argument's value, grad mode and the modules' training
    modes) runs ``fn`` eagerly and records the nbgrad calls it makes -- ops, ``backward``,
    ``nb.grad``, an optimiser's ``step`` and ``zero_grad`` -- as a program; runs of
    point-wise ops become one generated loop nest each, forward and backward
    (``explain()`` prints them). Later calls of that kind run the program. NumPy array
    arguments reach ``fn`` as tensors.

    A value read into Python (``item()``, ``bool(t)``, ``numpy()``), an in-place write
    outside an op, a random draw outside an op, a gradient set by hand or ``detach()``
    inside ``fn`` is a graph break: ``fn`` then runs compiled up to its first break and
    eagerly from there (a notice says so once), or, with ``fullgraph=True``, it is an
    error naming the line.
    ``dynamic``: a new shape traces again (a Python run of ``fn``); with ``dynamic=True``
    the program is the recorded calls with their point-wise runs fused, whose loops take
    their sizes at run time, so another shape compiles nothing new. ``None`` or ``False``
    specialise every shape: a small step becomes one step program, compiled for its sizes
    (not PyTorch's automatic switch to dynamic shapes at the first new shape: a step
    program's steps can be 30 times faster than the recorded calls').
    ``backend``, ``mode`` (one of torch.compile's) and ``options`` are accepted so that a
    ``torch.compile`` call ports as it is, and change nothing: nbgrad compiles one way.
    ``disable=True`` returns ``fn`` itself, as torch.compile does.
    """
    if mode not in MODES:
        raise ValueError(f"nb.compile: mode must be one of {MODES}, got {mode!r}")
    if options is not None and not isinstance(options, dict):
        raise TypeError(f"nb.compile: options must be a dict, got {type(options).__name__}")
    if fn is None:
        return functools.partial(compile, fullgraph=fullgraph, dynamic=dynamic,
                                 backend=backend, mode=mode, options=options, disable=disable)
    if not callable(fn):
        raise TypeError(f"nb.compile: fn must be callable, got {type(fn).__name__}")
    return fn if disable else Compiled(fn, fullgraph, dynamic)


def _described(program: Any) -> list[str]:
    """A program's steps, then the source of its generated loops."""
    if isinstance(program, step_program.StepProgram):
        return (["  a step program:"] + [f"  {line}" for line in program.describe()]
                + ["", program.text])
    lines = [f"  {len(program.nodes)} steps:"]
    lines += [f"  {node.describe()}" for node in program.nodes]
    for node in program.nodes:
        if isinstance(node, FusedNode):
            lines += ["", node.fn.source] + node.fn.backward_sources
        elif isinstance(node, gradient.GradientNode):
            lines += [""] + node.sources()
    return lines


# -- building the program ----------------------------------------------------------------------


def _program(recorded: Any, result: Any, args: list) -> Program:
    nodes = fold_linear(recorded.nodes, _last_reads(recorded.nodes, result))
    nodes = fold_activation(nodes, _last_reads(nodes, result))
    last_read = _last_reads(nodes, result)
    built, i = [], 0
    for start, stop, region in find_regions(nodes, last_read):
        if start < i:  # inside a span a gradient node took
            continue
        built += nodes[i:start]
        i = stop
        matched = gradient.match(nodes, start, stop, region, last_read, args)
        tail = row_epilogue.match(nodes, stop, region, last_read)
        if matched is not None:
            i, node = matched
            built.append(node)
        elif tail is not None:
            fn = row_epilogue.fused_function(region, tail, len(built))
            built.append(FusedNode(fn, region.inputs + list(tail.inputs[1:]),
                                   list(tail.outputs), region.grad_enabled))
            i = stop + 1
        elif len(region.nodes) == 1:
            built += region.nodes
        elif region.outputs:  # a region nothing reads is dropped
            fn = fused_function(region, len(built))
            built.append(FusedNode(fn, region.inputs, region.outputs, region.grad_enabled))
    built += nodes[i:]
    last_read = _last_reads(built, result)
    frees: list = [[] for _ in built]
    for k, index in last_read.items():
        if index < len(built):
            frees[index].append(k)
    return Program(built, recorded.n_slots, result, frees)


def _prefix(recorded: Any, result: Any, args: list, dynamic: bool) -> breaks.Prefix:
    """The program of the calls before a trace's first graph break (breaks.py)."""
    read_later = {k for k, index in _last_reads(recorded.nodes, result).items()
                  if index >= recorded.split}
    nodes, kept = breaks.prefix_of(recorded, read_later)
    return breaks.Prefix(nodes.nodes, _lowered(nodes, kept, args, dynamic), kept,
                         recorded.n_slots)


def _lowered(recorded: Any, result: Any, args: list, dynamic: bool) -> Any:
    """The program of a trace: a step program where one applies, unless the shapes are
    dynamic (a step program is compiled for its sizes), else the recorded calls with
    their point-wise runs fused (whose loops take their sizes at run time)."""
    program = _program(recorded, result, args)
    if dynamic:
        return program
    # a conv layer's activation folds into its kernels; a linear layer's folds into
    # the step program's own product (step_codegen.with_epilogues)
    nodes = fold_activation(recorded.nodes, _last_reads(recorded.nodes, result), (Conv2d,))
    return step_program.lower(recorded, result, args, program, nodes) or program


def _last_reads(nodes: list, result: Any) -> dict[int, int]:
    """slot -> index of the last node that reads it (len(nodes) for the result)."""
    last: dict[int, int] = {}
    for index, node in enumerate(nodes):
        for ref in _reads(node):
            for k in slots_of(ref):
                last[k] = index
    for k in slots_of(result):
        last[k] = len(nodes)
    return last


def _reads(node: Any) -> list:
    if isinstance(node, FusedNode):
        return list(node.inputs)
    if isinstance(node, gradient.GradientNode):
        return list(node.region.inputs) + [node.grad]
    return reads_of(node)


# -- arguments and results ---------------------------------------------------------------------


def _tensors_in(value: Any, leaves: list, statics: list) -> Any:
    """``value`` with NumPy arrays made tensors; every tensor appended to ``leaves``, and
    what identifies every other leaf (a number's value, an object's identity) to
    ``statics``."""
    if isinstance(value, np.ndarray):
        value = Tensor(value)
    if isinstance(value, Tensor):
        leaves.append(value)
        return value
    if isinstance(value, (list, tuple)):
        statics.append((type(value).__name__, len(value)))
        items = [_tensors_in(v, leaves, statics) for v in value]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict):
        statics.append(("dict", tuple(value)))
        return {k: _tensors_in(v, leaves, statics) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        statics.append((type(value).__name__, value))
    else:
        statics.append(("object", id(value)))
    return value


def _kind(t: Tensor) -> tuple:
    return t._data.shape, t._data.dtype.str, t._requires_grad, t._node is None


def _unshaped(key: tuple) -> tuple:
    """A variant's key without its tensors' shapes."""
    return (tuple(kind[1:] for kind in key[0]),) + key[1:]


def _refs_in(result: Any, recorder: Any) -> Any:
    """The result with each tensor replaced by its Ref."""
    if isinstance(result, Tensor):
        return recorder._ref(result)
    if isinstance(result, (list, tuple)):
        items = [_refs_in(v, recorder) for v in result]
        return type(result)(items) if isinstance(result, list) else tuple(items)
    if isinstance(result, dict):
        return {k: _refs_in(v, recorder) for k, v in result.items()}
    return Plain(result)


def _notice(message: str) -> None:
    print(message, file=sys.stderr)
