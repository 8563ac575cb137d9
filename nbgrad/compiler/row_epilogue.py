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

A ``cross_entropy`` of [N, C] logits and class indices (the fused eager op) after a
region goes the same way: per row, the region's values, the eager kernel's row terms
(``log_softmax_terms_row``: the row max m and log-sum l) and the row's loss
l - (x_t - m); the per-row losses are reduced as the op reduces them (``reduced``: a
float64 sum in fixed blocks). Backward, per row: the values and terms again, the eager
row gradient g_r (softmax(x_r) - onehot(t_r)) (``kernels/loss.py``:
``cross_entropy_grad_row``), then the region's rules. The loss and the gradients are
eager's bits. The row functions are compiled once with the eager kernel's flags and
called, not inlined: inlined, their float32 exp would take the generated loop's flags.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..function import Function
from ..ops._loss_reduction import reduced
from ..ops.loss_classification import check_classes, cross_entropy_rows
from .fusion import (
    BackwardKernels,
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
IMPORTS = "from nbgrad.kernels import loss as L, softmax as S\n"
CROSS_ENTROPY = "cross_entropy"


def match(nodes: list, stop: int, region: Region, last_read: dict) -> OpNode | None:
    """The softmax or log_softmax (along the last axis) or cross_entropy (of [N, C]
    logits) right after the region (``nodes[stop]``) when it takes the region's one
    output, nothing else reads that output, and the region's broadcast operands repeat
    over its rows; else None."""
    tail = nodes[stop] if stop < len(nodes) else None
    if not (isinstance(tail, OpNode) and region.shape and len(region.outputs) == 1
            and tail.grad_enabled == region.grad_enabled
            and region.period in (0, region.shape[-1])):
        return None
    (k,) = region.outputs
    if tail.inputs[:1] != (Slot(k),) or last_read.get(k) != stop:
        return None
    if tail.fn.op_name == CROSS_ENTROPY:
        return tail if len(region.shape) == 2 else None
    last_axis = len(region.shape) - 1
    return tail if (tail.fn.op_name in ROW_OPS and len(tail.inputs) == 1
                    and tail.params.get("axis", -1) % len(region.shape) == last_axis) else None


def fused_function(region: Region, tail: OpNode, index: int) -> type[Function]:
    """The Function of the region and its softmax (the module docstring)."""
    region = dataclasses.replace(region, period=region.shape[-1])
    if tail.fn.op_name == CROSS_ENTROPY:
        return _cross_entropy_function(region, tail, index)
    forward_row, backward_row = ROW_OPS[tail.fn.op_name]
    name = f"region{index}_{tail.fn.op_name}"
    parallel, serial, source = load_kernel(_forward_source(region, name + "_forward",
                                                           forward_row),
                                           name + "_forward", IMPORTS)
    backwards = BackwardKernels(region, name + "_backward", lambda needed: _backward_source(
        region, name + "_backward", forward_row, backward_row, needed), IMPORTS)
    shape, dtype = region.shape, region.dtype
    n = int(np.prod(shape))
    buffers: dict = {}

    def forward(ctx, *arrays):
        flat = [_flat(a) for a in arrays]
        out = reused(buffers, "out", shape, dtype)
        _run((parallel, serial), n, *row_arguments(region, n), *flat, out.reshape(-1))
        ctx.save_for_backward(*flat)
        return out

    def backward(ctx, g):
        return backwards.run(ctx.needs_input_grad, n, *ctx.saved_tensors,
                             _flat(np.broadcast_to(g, shape)))

    return _function_class(region, tail, index, forward, backward, source, backwards)


def _function_class(region: Region, tail: OpNode, index: int, forward: Any, backward: Any,
                    source: str, backwards: BackwardKernels) -> type[Function]:
    ops = ", ".join(node.describe() for node in region.nodes + [tail])

    def vjp(ctx, *grads):
        return region_vjp(region, ctx, grads[:1], tail)

    return type(f"FusedRows{index}", (Function,), {
        "__doc__": f"A region fused by nb.compile with its {tail.fn.op_name}: {ops}.",
        "op_name": f"fused[{ops}]",
        "forward": staticmethod(forward), "backward": staticmethod(backward),
        "vjp": staticmethod(vjp), "source": source, "region": region,
        "backward_sources": backwards.sources,
    })


def _cross_entropy_function(region: Region, tail: OpNode, index: int) -> type[Function]:
    """The Function of the region and its cross_entropy (the module docstring); its
    inputs are the region's, then the targets."""
    name = f"region{index}_cross_entropy"
    parallel, serial, source = load_kernel(_cross_entropy_forward(region, name + "_forward"),
                                           name + "_forward", IMPORTS)
    backwards = BackwardKernels(region, name + "_backward", lambda needed: (
        _cross_entropy_backward(region, name + "_backward", needed)), IMPORTS)
    shape, dtype = region.shape, region.dtype
    n, reduction = int(np.prod(shape)), tail.params.get("reduction", "mean")

    def forward(ctx, *arrays):
        flat = [_flat(a) for a in arrays[:-1]]
        target = np.ascontiguousarray(arrays[-1], dtype=np.int64)
        check_classes(target, shape)
        loss = np.empty(shape[0], dtype)
        _run((parallel, serial), n, *row_arguments(region, n), *flat, target, loss)
        ctx.save_for_backward(*flat, target)
        return reduced(loss, reduction, loss.size, dtype)

    def backward(ctx, g):
        rows = cross_entropy_rows(g, reduction, shape[0], dtype)
        return backwards.run(ctx.needs_input_grad[:-1], n, *ctx.saved_tensors,
                             rows) + (None,)

    return _function_class(region, tail, index, forward, backward, source, backwards)


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
    row_terms = [f"S.{row_fn}(xrow, yrow)",
                 f"S.{grad_fn}(g0[start:start + period], yrow, drow)"]
    return _row_backward(region, name, inputs_needed, ["g0"], row_terms,
                         f"{row_fn}'s gradient, {grad_fn}", ["yrow"])


def _row_backward(region: Region, name: str, inputs_needed: tuple, extra: list[str],
                  row_terms: list[str], what: str, buffers: list[str] = ()
                  ) -> tuple[str, list[int]]:
    """The backward row loop: per row, the region's values into ``xrow``, then
    ``row_terms`` (which leave the row's gradient of the region's output in ``drow``),
    then the region's rules from it. ``extra``: the parameters after the region's
    inputs; ``buffers``: row buffers besides xrow and drow."""
    names = _Names(region)
    before, first_pass = _row_values(region, names)
    _, loads = _loads(region, names)
    body, written = adjoints(region, {region.outputs[0]: "drow[t]"}, inputs_needed)
    params = (row_count(region) + [f"in{j}" for j in range(len(region.inputs))] + extra
              + gradient_parameters(region, written))
    lines = _header(region) + [f"# then {what}, for each row",
                               f"def {name}({', '.join(params)}):",
                               "    one = in0.dtype.type(1)"] + before
    text, _ = _local_index(first_pass)
    row_setup = (["for t in range(period):"] + [f"    {line}" for line in text.split("\n")]
                 + row_terms)
    rows = ["xrow", "drow"] + list(buffers)
    lines += summed_row_loop(
        region, loads + _forward_values(region, names) + body, written,
        chunk_setup=[f"{b} = np.empty(period, in0.dtype)" for b in rows],
        row_setup=row_setup)
    return "\n".join(lines) + "\n", written


def _cross_entropy_forward(region: Region, name: str) -> str:
    names = _Names(region)
    before, body = _row_values(region, names)
    params = (row_count(region) + [f"in{j}" for j in range(len(region.inputs))]
              + ["target", "loss"])
    lines = _header(region) + ["# then each row's cross-entropy",
                               f"def {name}({', '.join(params)}):",
                               "    one = loss.dtype.type(1)"] + before
    lines += row_loop(region, body, "n",
                      chunk_setup=[f"{b} = np.empty(period, loss.dtype)"
                                   for b in ("xrow", "scratch")],
                      row_setup=_row_loads(region),
                      row_end=["m, log_sum = S.log_softmax_terms_row(xrow, scratch)",
                               "loss[r] = log_sum - (xrow[target[r]] - m)"])
    return "\n".join(lines) + "\n"


def _cross_entropy_backward(region: Region, name: str,
                            inputs_needed: tuple) -> tuple[str, list[int]]:
    row_terms = ["m, log_sum = S.log_softmax_terms_row(xrow, drow)",
                 "L.cross_entropy_grad_row(rows_g[r], xrow, m, log_sum, target[r], drow)"]
    return _row_backward(region, name, inputs_needed, ["target", "rows_g"], row_terms,
                         "cross-entropy's gradient")
