"""A fused region whose output feeds a softmax or log_softmax over its last axis, run as
one row loop with the row's normalisation as the region's epilogue.

Eager runs the region (a pass writing its output), then the softmax kernel (a pass
reading it, one writing y). Here each row's region values go to a row buffer and the
eager kernel's own row function (``kernels/softmax.py``: ``softmax_row``,
``log_softmax_row``: the row max, the shifted exponentials and their sum, in the
kernel's order and flags) writes y's row: y is eager's bits, with one pass fewer.

Backward, per row: the region's values again, y again (the same row function, so the
same bits: nothing but the region's inputs is saved), the eager row backward
(``softmax_backward_row``: y (g - sum(g y)); ``log_softmax_backward_row``:
g - e^y sum(g)), then the region's gradient rules seeded with that row's gradient, as a
fused backward runs them (``fusion.adjoints``). The inputs' gradients are eager's bits,
a broadcast operand's a sum over rows as in ``fusion.summed_row_loop``. The loop is
``fusion.row_loop`` with the softmax's rows as its rows, so a broadcast operand must
repeat over those rows (a bias along them, a value per row). The vjp runs the region's
ops and the softmax as nbgrad ops: second derivatives are eager's.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..function import Function
from .fusion import (
    Region,
    _flat,
    _forward_values,
    _header,
    _loads,
    _local_index,
    _Names,
    _row_loads,
    _run,
    adjoints,
    gradient_buffers,
    gradient_parameters,
    load_kernel,
    region_vjp,
    reused,
    row_arguments,
    row_count,
    row_loop,
    summed_row_loop,
)
from .trace import OpNode, Slot

#: op -> (the row function of its forward, of its backward) in kernels/softmax.py
ROW_OPS = {"softmax": ("softmax_row", "softmax_backward_row"),
           "log_softmax": ("log_softmax_row", "log_softmax_backward_row")}
IMPORTS = "from nbgrad.kernels import softmax as S\n"


def match(nodes: list, stop: int, region: Region, last_read: dict) -> OpNode | None:
    """The softmax or log_softmax right after the region (``nodes[stop]``) when it takes
    the region's one output along the last axis, nothing else reads that output, and
    the region's broadcast operands repeat over its rows; else None."""
    tail = nodes[stop] if stop < len(nodes) else None
    if not (isinstance(tail, OpNode) and tail.fn.op_name in ROW_OPS and region.shape
            and len(region.outputs) == 1 and tail.grad_enabled == region.grad_enabled):
        return None
    (k,) = region.outputs
    last_axis = len(region.shape) - 1
    if (tail.inputs != (Slot(k),) or last_read.get(k) != stop
            or tail.params.get("axis", -1) % len(region.shape) != last_axis):
        return None
    return tail if region.period in (0, region.shape[-1]) else None


def fused_function(region: Region, tail: OpNode, index: int) -> type[Function]:
    """The Function of the region and its softmax (the module docstring)."""
    region = dataclasses.replace(region, period=region.shape[-1])
    forward_row, backward_row = ROW_OPS[tail.fn.op_name]
    name = f"region{index}_{tail.fn.op_name}"
    parallel, serial, source = load_kernel(_forward_source(region, name + "_forward",
                                                           forward_row),
                                           name + "_forward", IMPORTS)
    backward_kernels: dict = {}
    buffers: dict = {}
    backward_sources: list = []
    shape, dtype = region.shape, region.dtype
    n = int(np.prod(shape))

    def forward(ctx, *arrays):
        flat = [_flat(a) for a in arrays]
        out = reused(buffers, "out", shape, dtype)
        _run((parallel, serial), n, *row_arguments(region, n), *flat, out.reshape(-1))
        ctx.save_for_backward(*flat)
        return out

    def backward(ctx, g):
        needed = ctx.needs_input_grad
        if needed not in backward_kernels:
            src, written = _backward_source(region, name + "_backward", forward_row,
                                            backward_row, needed)
            parallel_b, serial_b, module_source = load_kernel(src, name + "_backward",
                                                              IMPORTS)
            backward_sources.append(module_source)
            backward_kernels[needed] = ((parallel_b, serial_b), written)
        kernel, written = backward_kernels[needed]
        partials, gins = gradient_buffers(region, written, buffers, n)
        _run(kernel, n, *row_arguments(region, n), *ctx.saved_tensors,
             _flat(np.broadcast_to(g, shape)), *partials,
             *[a.reshape(-1) for a in gins])
        found = dict(zip(written, gins))
        return tuple(found.get(j) for j in range(len(region.inputs)))

    def vjp(ctx, g):
        return region_vjp(region, ctx, (g,), tail)

    ops = ", ".join(node.describe() for node in region.nodes + [tail])
    return type(f"FusedRows{index}", (Function,), {
        "__doc__": f"A region fused by nb.compile with its {tail.fn.op_name}: {ops}.",
        "op_name": f"fused[{ops}]",
        "forward": staticmethod(forward), "backward": staticmethod(backward),
        "vjp": staticmethod(vjp), "source": source, "region": region,
        "backward_sources": backward_sources,
    })


def _row_values(region: Region, names: _Names) -> tuple[list[str], list[str]]:
    """(before the loop, the element loop's body): the region's values, the softmax's
    input stored into the row buffer ``xrow``."""
    before, loads = _loads(region, names)
    (k,) = region.outputs
    return before, loads + _forward_values(region, names) + [f"xrow[t] = v{k}"]


def _forward_source(region: Region, name: str, row_fn: str) -> str:
    names = _Names(region)
    before, body = _row_values(region, names)
    params = row_count(region) + [f"in{j}" for j in range(len(region.inputs))] + ["out0"]
    lines = _header(region) + [f"# then {row_fn} of each row",
                               f"def {name}({', '.join(params)}):",
                               "    one = out0.dtype.type(1)"] + before
    lines += row_loop(region, body, "n", chunk_setup=["xrow = np.empty(period, out0.dtype)"],
                      row_setup=_row_loads(region),
                      row_end=[f"S.{row_fn}(xrow, out0[start:start + period])"])
    return "\n".join(lines) + "\n"


def _backward_source(region: Region, name: str, row_fn: str, grad_fn: str,
                     inputs_needed: tuple) -> tuple[str, list[int]]:
    names = _Names(region)
    before, first_pass = _row_values(region, names)
    _, loads = _loads(region, names)
    body, written = adjoints(region, {region.outputs[0]: "drow[t]"}, inputs_needed)
    params = (row_count(region) + [f"in{j}" for j in range(len(region.inputs))] + ["g0"]
              + gradient_parameters(region, written))
    first = f"gin{written[0]}" if written else "g0"
    lines = _header(region) + [f"# then {row_fn}'s gradient, {grad_fn}, for each row",
                               f"def {name}({', '.join(params)}):",
                               f"    one = {first}.dtype.type(1)"] + before
    text, _ = _local_index(first_pass)
    row_setup = (["for t in range(period):"] + [f"    {line}" for line in text.split("\n")]
                 + [f"S.{row_fn}(xrow, yrow)",
                    f"S.{grad_fn}(g0[start:start + period], yrow, drow)"])
    lines += summed_row_loop(
        region, loads + _forward_values(region, names) + body, written,
        chunk_setup=[f"{b} = np.empty(period, g0.dtype)" for b in ("xrow", "yrow", "drow")],
        row_setup=row_setup)
    return "\n".join(lines) + "\n", written
