"""A fused region whose only use is a backward pass, run as one loop that computes the
gradients directly (``nb.compile``'s forward-into-backward fusion).

The pattern: a region (``fusion.py``) with one output, then either

- ``loss = out.sum()`` (or ``out.mean()``) and ``loss.backward()`` (the loss read by
  nothing else but, perhaps, the function's result), or
- ``out.backward(g)``,

where every region input that needs a gradient is a leaf (a parameter, an argument made
with ``requires_grad=True``). Eager runs the region's forward (a pass writing ``out``),
the sum (a pass reading it), the engine, and the region's backward (a pass recomputing
the values and writing the leaves' gradients). Here one pass reads the inputs, computes
the values, adds up the loss, and writes the gradients -- what XLA's fused gradient
does. The gradient of ``sum`` is 1 for every element (of ``mean``, 1 / n in the dtype),
the seed eager's backward hands the region, so the leaves' gradients are eager's bits;
they are added into ``.grad`` as the engine adds them. The loss is the sum of per-chunk
partial sums (each chunk's in 16 lanes, ``LANES`` below; the partials by NumPy's sum
over their fixed count): deterministic and independent of the thread count, but not
eager's summation order, so it may differ from eager's loss in the last bits (as a
relative error, at most about ``n * eps`` for n elements; tests check it against a
float64 sum). A broadcast leaf's gradient is the region's sum over its repeated rows, as
in a fused backward (``fusion.summed_row_loop``).

A hook on one of the leaves, or anomaly detection, changes what backward does, so with
either the original steps run instead. (The region's own values are made by the program
at each call, so no hook can be on them.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..autograd import hooks
from ..autograd.anomaly import state as anomaly
from ..tensor import Tensor
from .fusion import (
    Region,
    _flat,
    _forward_values,
    _header,
    _loads,
    _Names,
    _run,
    adjoints,
    chunk_loop,
    grad_argument,
    grad_layout,
    gradient_buffers,
    gradient_parameters,
    load_kernel,
    loop_tasks,
    reused,
    row_arguments,
    row_count,
    seed_of,
    summed_row_loop,
)
from .trace import Arg, BackwardNode, Live, OpNode, Slot, reads_of, slots_of


@dataclass
class GradientNode:
    """The region, its sum or mean (``summed``; the loss goes to ``loss_slot``) and the
    backward, as one generated loop; ``fallback`` are the steps it replaces."""
    region: Region
    summed: bool
    scale: float               # 1 for a sum, 1 / n for a mean
    loss_slot: int | None
    grad: Any                  # the backward's gradient ref (not summed)
    leaves: list[int]          # region inputs that need a gradient
    fallback: list
    output: int = 0            # the region's output the sum or backward takes
    returned: tuple = ()       # its outputs the function's result also holds
    kernels: dict = field(default_factory=dict)   # gradient layout -> (loops, source)
    buffers: dict = field(default_factory=dict)   # the gradients' arrays (fusion.reused)

    def run(self, values: list, args: list) -> None:
        inputs = [r.get(values, args) for r in self.region.inputs]
        if anomaly.enabled or any(hooks.has_hooks(inputs[j]) for j in self.leaves):
            for node in self.fallback:
                node.run(values, args)
            return
        arrays = [_flat(x._data if isinstance(x, Tensor) else np.asarray(x)) for x in inputs]
        shape, dtype = self.region.shape, self.region.dtype
        n = int(np.prod(shape))
        extra, layout = [], None
        if not self.summed:
            g = np.asarray(_data(self.grad.get(values, args)), dtype)
            layout = grad_layout(g)
            extra = [grad_argument(g)]
        partials = np.zeros(loop_tasks(n, self.region.period), dtype)
        sums, grads = gradient_buffers(self.region, self.leaves, self.buffers, n)
        out = [reused(self.buffers, ("out", k), shape, dtype) for k in self.returned]
        with np.errstate(all="ignore"):
            _run(self._loops(layout), n, *row_arguments(self.region, n), *arrays,
                 *extra, partials, *[o.reshape(-1) for o in out], *sums,
                 *[g.reshape(-1) for g in grads])
            for j, g in zip(self.leaves, grads):
                _accumulate(inputs[j], g)
        for k, o in zip(self.returned, out):   # no graph: the backward is done
            values[k] = Tensor._wrap(o, None, 0)
        if self.summed and self.loss_slot is not None:
            loss = partials.sum() if self.scale == 1 else partials.sum() * dtype.type(self.scale)
            values[self.loss_slot] = Tensor._wrap(np.asarray(loss, dtype), None, 0)

    def _loops(self, layout: str | None) -> tuple:
        if layout not in self.kernels:
            name = "region_gradient"
            source, written = gradient_source(self.region, name, self.summed, layout,
                                              self.leaves, self.scale, self.output,
                                              self.returned)
            assert written == self.leaves, (written, self.leaves)
            parallel, serial, module_source = load_kernel(source, name)
            self.kernels[layout] = ((parallel, serial), module_source)
        return self.kernels[layout][0]

    def sources(self) -> list[str]:
        return [source for _, source in self.kernels.values()]

    def describe(self) -> str:
        what = ("backward" if not self.summed
                else "sum, backward" if self.scale == 1 else "mean, backward")
        return f"gradient[{', '.join(n.describe() for n in self.region.nodes)}; {what}]"


def _data(x: Any) -> Any:
    return x._data if isinstance(x, Tensor) else x


def _accumulate(leaf: Tensor, g: np.ndarray) -> None:
    """``leaf.grad += g`` as the engine stores a leaf's gradient."""
    leaf.grad = Tensor._wrap(g if leaf.grad is None else leaf.grad._data + g, None, 0)


# The loss's partial sums run over LANES independent accumulators (element l of each block
# of LANES adds into lane l) as the values are made, which LLVM turns into vector adds
# without reordering anything; the lanes are then added in order, then the tail's values.
LANES = 16


def gradient_source(region: Region, name: str, summed: bool, layout: str | None,
                    leaves: list[int], scale: float, k: int, returned: tuple = ()) -> str:
    """The one loop: values, the leaves' gradients from the seed of output ``k`` (``scale``
    for a sum or a mean -- 1, or 1 / n in the dtype, the gradient eager's mean hands
    every element -- else the backward's gradient in ``layout``), for a sum or mean each
    chunk's partial sum of output k, added in LANES lanes, and the outputs ``returned``
    (``out<m>``)."""
    names = _Names(region)
    needed = tuple(j in leaves for j in range(len(region.inputs)))
    seed, load = ("one" if scale == 1 else "scale", None) if summed else seed_of(0, layout)
    body, written = adjoints(region, {k: seed}, needed)
    body += [f"out{m}[i] = v{slot}" for m, slot in enumerate(returned)]
    before, loads = _loads(region, names)
    params = (row_count(region) + [f"in{j}" for j in range(len(region.inputs))]
              + ([] if summed else ["g0"]) + ["partials"]
              + [f"out{m}" for m in range(len(returned))]
              + gradient_parameters(region, written))
    first = f"gin{written[0]}"
    lines = _header(region) + [f"def {name}({', '.join(params)}):",
                               f"    one = {first}.dtype.type(1)"] + before
    if summed and scale != 1:
        lines.append(f"    scale = {first}.dtype.type({scale!r})")
    lines += [load] if load else []
    values = loads + _forward_values(region, names) + body
    if region.period:
        loop = _row_gradient_loop(region, values, written, summed, k)
        return "\n".join(lines + loop) + "\n", written
    if not summed:
        return "\n".join(lines + chunk_loop(values, first)) + "\n", written
    loops = [f"lanes = np.zeros({LANES}, {first}.dtype)",
             f"full = (stop - start) // {LANES} * {LANES}",
             f"for b in range(0, full, {LANES}):",
             f"    for lane in range({LANES}):",
             "        t = b + lane",
             "        BODY",
             f"        lanes[lane] += v{k}",
             "partial = one - one",
             f"for lane in range({LANES}):",
             "    partial += lanes[lane]",
             "for t in range(full, stop - start):",
             "    BODY",
             f"    partial += v{k}",
             "partials[c] = partial"]
    return "\n".join(lines + chunk_loop(values, first, loops)) + "\n", written


def _row_gradient_loop(region: Region, values: list[str], written: list[int], summed: bool,
                       k: int) -> list[str]:
    """The loop of a region with broadcast inputs (``fusion.summed_row_loop``); for a sum
    or mean, each task's partial sum of the output adds each row's values in order."""
    if not summed:
        return summed_row_loop(region, values, written)
    return summed_row_loop(
        region, values + [f"row_values[t] = v{k}"], written,
        chunk_setup=["partials[c] = one - one",
                     "row_values = np.empty(period, partials.dtype)"],
        row_end=["for t in range(period):", "    partials[c] += row_values[t]"])


def _is_leaf(ref: Any, args: list) -> bool:
    if isinstance(ref, Arg):
        return args[ref.index]._node is None
    return isinstance(ref, Live) and ref.tensor._node is None


def match(nodes: list, start: int, stop: int, region: Region, last_read: dict,
          args: list) -> tuple[int, GradientNode] | None:
    """``(end, node)`` when ``nodes[stop:end]`` is the sum and backward, or the backward,
    of one of the region's outputs in the pattern above, the others read by nothing but
    the function's result; else None."""
    after = nodes[stop:stop + 2]
    k = _reduced_output(after[0], region) if after else None
    leaves = _leaves(region, k)
    if (k is None or not region.grad_enabled or not leaves
            or not all(_is_leaf(region.inputs[j], args) for j in leaves)
            or not all(_only_returned(nodes, o, stop + (o == k), last_read)
                       for o in region.outputs)):
        return None
    returned = tuple(o for o in region.outputs if last_read[o] == len(nodes))
    scale = _full_reduction(after[0], k, region)
    if (len(after) == 2 and scale is not None
            and _backward_of(after[1], after[0].outputs[0], with_grad=False)
            and last_read.get(after[0].outputs[0], -1) in (stop + 1, len(nodes))):
        loss = after[0].outputs[0]
        keep = loss if last_read[loss] == len(nodes) else None
        return stop + 2, _build(region, True, scale, keep, None, leaves,
                                nodes[start:stop + 2], k, returned)
    if _backward_of(after[0], k, with_grad=True):
        return stop + 1, _build(region, False, 1.0, None, after[0].grad, leaves,
                                nodes[start:stop + 1], k, returned)
    return None


def _reduced_output(node: Any, region: Region) -> int | None:
    """The region's output that ``node`` (a sum, a mean or a backward) takes, if any."""
    ref = (node.inputs[0] if isinstance(node, OpNode) and len(node.inputs) == 1
           else node.root if isinstance(node, BackwardNode) else None)
    return ref.index if isinstance(ref, Slot) and ref.index in region.outputs else None


def _only_returned(nodes: list, k: int, after: int, last_read: dict) -> bool:
    """Whether slot k is read by nothing from ``nodes[after]`` on but, perhaps, the
    function's result (the node before ``after`` may read it)."""
    if last_read.get(k, -1) < after:
        return True
    return (last_read[k] == len(nodes)
            and not any(k in slots_of(ref) for node in nodes[after:] for ref in reads_of(node)))


def _leaves(region: Region, k: int | None) -> list[int]:
    """The region inputs that need a gradient (by the trace's metadata) and that output
    k is computed from (another output's inputs get no gradient from its backward)."""
    reached = {Slot(k)}
    for node in reversed(region.nodes):
        if Slot(node.outputs[0]) in reached:
            reached.update(node.inputs)
    return sorted({region.inputs.index(ref) for node in region.nodes
                   for ref, meta in zip(node.inputs, node.input_meta)
                   if meta[2] and not region.makes(ref) and ref in reached})


def _full_reduction(node: Any, k: int, region: Region) -> float | None:
    """1 when ``node`` sums all of slot k, 1 / n when it is their mean, else None."""
    if not (isinstance(node, OpNode) and node.fn.op_name in ("sum", "mean")
            and node.inputs == (Slot(k),) and node.params == {"axis": None, "keepdims": False}
            and node.grad_enabled):
        return None
    n = int(np.prod(region.shape))
    return 1.0 if node.fn.op_name == "sum" else (1.0 / n if n else None)


def _backward_of(node: Any, k: int, with_grad: bool) -> bool:
    return (isinstance(node, BackwardNode) and node.root == Slot(k) and not node.create_graph
            and (node.grad is not None) == with_grad)


def _build(region: Region, summed: bool, scale: float, loss_slot: int | None, grad: Any,
           leaves: list[int], fallback: list, output: int, returned: tuple) -> GradientNode:
    node = GradientNode(region, summed, scale, loss_slot, grad, leaves, fallback, output,
                        returned)
    if summed:
        node._loops(None)  # generated now: explain() shows it before the first replay
    return node
