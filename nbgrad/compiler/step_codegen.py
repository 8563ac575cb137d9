"""A step graph (``step_graph.py``) written as one Numba function.

Every value of the graph lives in one preallocated array, the *arena*, at an offset
fixed when the program is built; the function takes the arena and the step's input
arrays (flat, C order), runs each equation as a loop nest over static shapes, and
returns nothing: the step's results and gradients are read from the arena after it.
One call from Python instead of one per op, a graph node per op and an engine pass per
``backward`` / ``grad``: for a small step (an MLP of 32 wide at 64 points, its second
derivatives included) those fixed costs are nearly all of eager's time.

Element values come from the functions the fused regions call (``rules.py``, eager's
formulas and floating-point flags); products run the GEMM of ``kernels/matmul.py``
through ``product_into`` with the plan eager's ``product`` would choose (same tiles,
every output one FMA chain over k ascending), so a product's bits are eager's; full sums
and means, cross-entropy and the optimiser's updates call eager's kernels too. A
broadcast operand's gradient adds its rows in order, and gradients accumulate in the
order the graph's reverse sweep meets them: these may differ from eager's order in the
last bits.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numba import config, njit

from ..kernels import broadcast_sum
from ..kernels import loss as loss_kernels
from ..kernels import matmul as matmul_kernels
from ..kernels.activation import (
    ACTIVATIONS,
    BIAS_ALONG_COLUMNS,
    BIAS_ALONG_ROWS,
    NO_ACTIVATION,
    NO_BIAS,
)
from ..kernels.strided_apply import COPY
from ..runtime.jit import CHUNK, PARALLEL_MIN, SERIAL
from ..runtime.threads import get_num_threads
from . import rules
from .step_graph import ELEMENTWISE, Eqn, Var, mean_scale

#: arena offsets are multiples of this many elements (64 bytes in float32: a cache line)
ALIGN = 16

_ONE_BATCH = np.zeros(1, np.int64)


@njit(**SERIAL)
def product_into(x, x_t, y, y_t, out, bias, bias_along, activation, M, N, K, parallel,
                 row_parts, col_parts, slots, depth_bytes, span, pack_t):
    """out = op(x) @ op(y) for flat C-order x, y, out (``kernels/matmul.py``'s product
    of one batch, with a plan worked out beforehand; M, N, K > 0), then ``bias`` added
    along out's columns or rows (``bias_along``) and the ``activation`` applied: the
    product's epilogue (``with_epilogues``)."""
    matmul_kernels._product(x, _ONE_BATCH, x_t, y, _ONE_BATCH, y_t, out, M, N, K,
                            row_parts, col_parts, parallel, slots, bias, bias_along,
                            activation, depth_bytes, span, pack_t)


@njit(**SERIAL)
def thin_product_into(x, x_t, y, y_t, out, M, N, K):
    """``product_into`` where the plan is a thin product (a side of a few rows, as
    eager's ``product`` runs it), without an epilogue: a program calls
    ``apply_epilogue`` after it where it has one. Apart from the GEMM's call, each of
    the two compiles only what its programs use."""
    matmul_kernels._thin_product(x, _ONE_BATCH, x_t, y, _ONE_BATCH, y_t, out, M, N, K)


def with_epilogues(eqns: list[Eqn], kept: set[int], dtype: np.dtype) -> list[Eqn]:
    """``eqns`` with each parallel product whose value only a bias add reads -- ``mm``
    then ``add(., b)`` with b of shape [N] -- and the relu, tanh or sigmoid only reading
    that, as one ``mm`` of three operands (the bias) and the activation's code as a third
    parameter: the GEMM adds the bias and applies the activation as it stores the
    product (eager's expressions and flags, so eager's bits), on every thread. A
    serial product keeps them in the program's loops, where they fuse with the ops
    around them (the epilogue measured no faster there). ``kept``: values read after
    the program (never folded away)."""
    readers: dict[int, int] = {}
    for eqn in eqns:
        for v in eqn.ins:
            if isinstance(v, Var):
                readers[v.index] = readers.get(v.index, 0) + 1
    folded, p = [], 0
    while p < len(eqns):
        run = _epilogue_run(eqns, p, readers, kept, dtype)
        if run:
            mm, add, *act = run
            code = ACTIVATIONS[act[0].prim] if act else NO_ACTIVATION
            folded.append(Eqn("mm", (*mm.ins, add.ins[1]), (*mm.params, code), run[-1].out))
        else:
            folded.append(eqns[p])
        p += max(len(run), 1)
    return folded


def _epilogue_run(eqns: list[Eqn], p: int, readers: dict, kept: set[int],
                  dtype: np.dtype) -> list[Eqn]:
    """The product at ``p``, its bias add and activation (if any), or [] (see
    ``with_epilogues``)."""
    def only_read_by_next(eqn: Eqn) -> bool:
        return readers.get(eqn.out.index) == 1 and eqn.out.index not in kept

    mm = eqns[p]
    if mm.prim != "mm" or len(mm.ins) != 2 or mm.out.size == 0 or p + 1 == len(eqns):
        return []
    a, _ = mm.ins
    add = eqns[p + 1]
    if add.prim != "add" or min(a.shape) == 0 or not only_read_by_next(mm):
        return []
    first, bias = add.ins
    if (first != mm.out or not isinstance(bias, Var) or bias.shape != mm.out.shape[1:]
            or not _mm_plan(mm, dtype)[6]):   # parallel
        return []
    if p + 2 < len(eqns):
        act = eqns[p + 2]
        if act.prim in ACTIVATIONS and act.ins == (add.out,) and only_read_by_next(add):
            return [mm, add, act]
    return [mm, add]


# the serial forms of eager's kernels, as globals jitted code can call
_ce_forward = loss_kernels.cross_entropy_forward.serial
_ce_backward = loss_kernels.cross_entropy_backward.serial
_block_sum = loss_kernels.block_sum.serial


@njit(**SERIAL)
def cross_entropy_loss(x, classes, out, mean):
    """out[0]: eager's fused cross-entropy of x [N, C] (flat) and the N classes, its
    float64 sum in fixed blocks, divided by N for the mean (``ops/_loss_reduction``)."""
    n = classes.size
    rows, _, _ = _ce_forward(x.reshape((n, x.size // n)), classes)
    total = _block_sum(rows, None)
    out[0] = total / n if mean else total


@njit(**SERIAL)
def cross_entropy_grad(g, x, classes, out, mean):
    """out = g (softmax(x) - onehot(classes)) row by row (/ N for the mean), eager's
    backward kernel with the row scale eager works out in float64."""
    n = classes.size
    x2 = x.reshape((n, x.size // n))
    _, shift, log_sum = _ce_forward(x2, classes)
    rows = np.full(n, g[0] * (1.0 / n if mean else 1.0), x.dtype)
    _ce_backward(rows, x2, classes, shift, log_sum, out.reshape(x2.shape))


@dataclass
class Layout:
    """Where each value of the generated functions lives: an input argument (``in<j>``),
    a slice of the arena (offset, size), or the array a host call made (``h<index>``,
    an argument of the functions that read it)."""
    inputs: dict          # var index -> argument position
    offsets: dict         # var index -> (offset, size) in the arena
    size: int
    dtype: np.dtype
    host: frozenset = frozenset()   # indices of the values host calls make
    alias: dict = field(default_factory=dict)   # a reshape's value -> the value whose
                                                # elements it is, in place


def layout(eqns: list[Eqn], inputs: list[Var], dtype: np.dtype, outputs: list[Var]) -> Layout:
    """Where each value an equation makes lives. A value's slice of the arena is free
    again after the last loop nest (``_groups``) that reads it, for values made by later
    ones: the arena holds at once only what is live (W26's 34 MB instead of 50). The
    ``outputs`` (read after the call) come last, one after the other, so that one copy
    takes them all."""
    offsets, end = {}, 0
    free: list[tuple[int, int]] = []       # (offset, aligned size) of free slices
    host = frozenset(v.index for eqn in eqns if is_host(eqn) for v in eqn.outs)
    last = {v.index for v in outputs}
    alias = _aliases(eqns, last, {v.index for v in inputs})
    for made, done in _lifetimes(eqns, dtype, alias):
        for v in made:
            if v.index in last or v.index in host or v.index in alias:
                continue
            need = _aligned(v.size)
            fits = [k for k, (_, size) in enumerate(free) if size >= need]
            if fits:
                start, size = free.pop(min(fits, key=lambda k: free[k][1]))
                if size > need:
                    free.append((start + need, size - need))
            else:
                start, end = end, end + need
            offsets[v.index] = (start, max(v.size, 1))
        free += [(offsets[k][0], _aligned(offsets[k][1])) for k in done
                 if k in offsets and k not in last]
    for v in {v.index: v for v in outputs if v.index not in host}.values():
        offsets[v.index] = (end, max(v.size, 1))
        end += _aligned(v.size)
    return Layout({v.index: j for j, v in enumerate(inputs)}, offsets, end, np.dtype(dtype),
                  host, alias)


def _aliases(eqns: list[Eqn], outputs: set[int], inputs: set[int]) -> dict[int, int]:
    """reshape's value -> the value it reshapes (followed to the first), for each
    reshape whose elements can stay where they are: the same elements in the same (C)
    order. Not for a value read after the call (``outputs`` are stored apart) nor one of
    an input (the inputs' arrays are the caller's)."""
    alias: dict[int, int] = {}
    for eqn in eqns:
        if eqn.prim == "reshape" and eqn.out.index not in outputs:
            root = alias.get(eqn.ins[0].index, eqn.ins[0].index)
            if root not in inputs:
                alias[eqn.out.index] = root
    return alias


def resolved(index: int, where: Layout) -> int:
    """The value whose elements value ``index`` is (itself unless a reshape's)."""
    return where.alias.get(index, index)


def is_host(eqn: Eqn) -> bool:
    """Whether ``eqn`` runs in Python between the generated functions: ``host`` and
    ``host_grad`` (an op's own forward or backward), and a large ``sum_to`` over axes
    other than the leading ones (the engine's ``sum_to_shape``: eager's parallel
    kernels, where a loop nest would run on one thread)."""
    return eqn.prim in ("host", "host_grad") or (
        eqn.prim == "sum_to" and not _over_leading_axes(eqn)
        and eqn.ins[0].size >= PARALLEL_MIN)


def _over_leading_axes(eqn: Eqn) -> bool:
    """Whether a ``sum_to`` sums rows of its target's shape (a bias's gradient)."""
    shape, target = eqn.ins[0].shape, eqn.out.shape
    lead = len(shape) - len(target)
    return bool(lead > 0 and target and target[-1] > 1 and shape[lead:] == target
                and eqn.out.size)


def _aligned(size: int) -> int:
    """Elements of the arena a value of ``size`` elements takes (at least one, rounded up
    to ALIGN)."""
    return -(-max(size, 1) // ALIGN) * ALIGN


def _lifetimes(eqns: list[Eqn], dtype: np.dtype,
               alias: dict[int, int]) -> list[tuple[list[Var], list[int]]]:
    """Per loop nest (``_groups``): the values it makes, and the indices of the values
    last read by it (or made by it and never read); a read of a reshape's value in
    place (``alias``) is a read of the value it reshapes."""
    groups = _groups(eqns)
    made = [[v for k in group for v in (eqns[k].out, *_scratch(eqns[k], dtype))]
            for group in groups]
    last_group = {v.index: g for g, vs in enumerate(made) for v in vs}
    for g, group in enumerate(groups):
        for k in group:
            for v in eqns[k].ins:
                index = alias.get(v.index, v.index) if isinstance(v, Var) else None
                if index in last_group:
                    last_group[index] = max(last_group[index], g)
    done: list[list[int]] = [[] for _ in groups]
    for index, g in last_group.items():
        done[g].append(index)
    return list(zip(made, done))


def _scratch(eqn: Eqn, dtype: np.dtype) -> tuple:
    """A product computed as its transpose writes a scratch value first."""
    if eqn.prim == "mm" and eqn.out.size and _mm_plan(eqn, dtype)[0]:
        return (Var(-eqn.out.index - 1, eqn.out.shape[::-1], False),)
    return ()


@dataclass
class Part:
    """A stretch of the step: a generated function ``name`` (its source ``text``; the
    host values it reads, ``reads``, are its arguments after the inputs), or a host call
    (``host``: the equation, ``name`` and ``text`` empty)."""
    name: str
    text: str
    reads: list
    host: Eqn | None = None


def parts(eqns: list[Eqn], where: Layout, dtype: np.dtype, name: str, exported: set[int],
          n_extra: int = 0, tail: list[str] = (), tail_reads: list[int] = ()) -> list[Part]:
    """The step as generated functions ``name_0``, ``name_1``, ... each running the
    equations between two host calls, and the host calls; the last function runs the
    lines ``tail`` (which read the ``n_extra`` arguments u<j> and the host values
    ``tail_reads``), after the equations if the step ends with generated ones."""
    readers: dict[int, set[int]] = {}
    for position, eqn in enumerate(eqns):
        for v in eqn.ins:
            if isinstance(v, Var):
                readers.setdefault(v.index, set()).add(position)
    out: list[Part] = []
    run: list[int] = []

    def close(last: bool) -> None:
        if run or (last and tail):
            fn = f"{name}_{len([p for p in out if p.host is None])}"
            reads = sorted({resolved(v.index, where) for k in run for v in eqns[k].ins
                            if isinstance(v, Var) and resolved(v.index, where) in where.host}
                           | (set(tail_reads) if last else set()))
            text = _function(eqns, run, readers, where, dtype, fn, exported, reads,
                             n_extra if last else 0, tail if last else ())
            out.append(Part(fn, text, reads))
        run.clear()

    for k, eqn in enumerate(eqns):
        if is_host(eqn):
            close(False)
            out.append(Part("", "", [], eqn))
        else:
            run.append(k)
    close(True)
    return out


def _function(eqns: list[Eqn], run: list[int], readers: dict, where: Layout,
              dtype: np.dtype, name: str, exported: set[int], reads: list[int],
              n_extra: int, tail: list[str]) -> str:
    """The Python source of ``name(arena, in0, in1, ..., h<index>..., u0, u1, ...)``
    running the equations at positions ``run``, then the lines ``tail``; the values
    ``exported`` (var indices) and those read later are left in the arena."""
    dt = np.dtype(dtype).name
    args = ", ".join(["arena"] + [f"in{j}" for j in range(len(where.inputs))]
                     + [f"h{index}" for index in reads] + [f"u{j}" for j in range(n_extra)])
    lines: list[str] = []
    for group in _groups([eqns[k] for k in run]):
        group = [run[k] for k in group]
        if len(group) == 1 and not _pointwise(eqns[group[0]]):
            lines.append(f"    # {_describe(eqns[group[0]])}")
            lines += ["    " + line for line in _emit(eqns[group[0]], where)]
            continue
        members = [eqns[k] for k in group]
        stored = {eqn.out.index for eqn in members if eqn.out.index in exported
                  or not readers.get(eqn.out.index, set()) <= set(group)}
        lines += [f"    # {_describe(eqn)}" for eqn in members]
        lines += ["    " + line for line in _loop(members, stored, where, dt)]
    if tail:
        lines.append("    # the optimiser's step")
        lines += ["    " + line for line in tail]
    used = set(re.findall(r"\b[vs]\d+\b", "\n".join(lines)))
    slices = [f"    {_name(index, where)} = arena[{offset}:{offset + size}]"
              for index, (offset, size) in where.offsets.items()
              if _name(index, where) in used]
    return "\n".join([f"def {name}({args}):", f"    one = np.{dt}(1)", *slices, *lines]) + "\n"


def _pointwise(eqn: Eqn) -> bool:
    return eqn.prim in ELEMENTWISE or eqn.prim in ("broadcast", "fill")


def _groups(eqns: list[Eqn]) -> list[list[int]]:
    """Runs of consecutive point-wise equations of one shape (one loop nest each), and
    every other equation on its own."""
    groups: list[list[int]] = []
    for k, eqn in enumerate(eqns):
        last = eqns[groups[-1][-1]] if groups else None
        if (last is not None and _pointwise(eqn) and _pointwise(last)
                and last.out.shape == eqn.out.shape):
            groups[-1].append(k)
        else:
            groups.append([k])
    return groups


def _loop(members: list[Eqn], stored: set[int], where: Layout, dt: str) -> list[str]:
    """One loop nest computing every member at each element: a value made in the loop is
    a local of the body; the ones read after it (``stored``) are also written out."""
    shape = members[0].out.shape
    made = {eqn.out.index for eqn in members}
    outside = [v for eqn in members for v in eqn.ins
               if isinstance(v, Var) and v.index not in made]
    flat = all(v.shape == shape or v.size == 1 for v in outside)
    here = "i" if flat else "k"
    signs = rules.Signs()
    loops, own = shape, {}
    if not flat:
        loops, shapes = _merged_axes(shape, [v.shape for v in outside])
        own = {v.index: s for v, s in zip(outside, shapes)}

    def operand(v: Any) -> str:
        if not isinstance(v, Var):
            text = f"np.{dt}({float(v)!r})"
            signs.constant(text, float(v))
            return text
        if v.index in made:
            return f"t{v.index}"
        if v.size == 1:
            return f"{_name(v.index, where)}[0]"
        at = here if v.shape == shape else _index(own[v.index], loops)
        return f"{_name(v.index, where)}[{at}]"

    body = [] if flat else [f"k = {_index(loops, loops)}"]
    for eqn in members:
        ops, out = [operand(v) for v in eqn.ins], f"t{eqn.out.index}"
        body.append(f"{out} = {_value(eqn, ops, dt, signs)}")
        signs.note(eqn.prim, ops, out)
        if eqn.out.index in stored:
            body.append(f"{_name(eqn.out.index, where)}[{here}] = t{eqn.out.index}")
    n = max(math.prod(shape), 1)
    if flat and n >= PARALLEL_MIN:
        # chunks of CHUNK elements, one task each (as the eager kernels split them)
        return ([f"for c in prange({-(-n // CHUNK)}):",
                 f"    for i in range(c * {CHUNK}, min({n}, (c + 1) * {CHUNK})):"]
                + ["        " + b for b in body])
    if flat:
        return [f"for i in range({n}):"] + ["    " + b for b in body]
    return _nest(loops, body, parallel=n >= PARALLEL_MIN)


def _merged_axes(shape: tuple, shapes: list[tuple]) -> tuple[tuple, list[tuple]]:
    """The loops over ``shape`` for operands of ``shapes`` (each broadcast against it):
    axes of length 1 dropped, and adjacent axes merged where each operand is broadcast
    along both or along neither. The same elements in the same order, in fewer loops
    with a longer innermost one (a bias of [C, 1, 1] over [N, C, H, W]: N, C, H * W)."""
    padded = [(1,) * (len(shape) - len(s)) + tuple(s) for s in shapes]
    loops: list[int] = []
    merged: list[list[int]] = [[] for _ in shapes]
    last = None
    for d, n in enumerate(shape):
        if n == 1:
            continue
        pattern = tuple(p[d] != 1 for p in padded)
        if pattern == last:
            loops[-1] *= n
            for m, p in zip(merged, padded):
                m[-1] *= p[d]
        else:
            loops.append(n)
            for m, p in zip(merged, padded):
                m.append(p[d])
            last = pattern
    return tuple(loops), [tuple(m) for m in merged]


def _value(eqn: Eqn, ops: list[str], dt: str, signs: rules.Signs) -> str:
    if eqn.prim in rules.RULES:
        return f"R.{signs.value_for(eqn.prim, dt, ops)}({', '.join(ops)}, one)"
    if eqn.prim == "step":
        return f"one if {ops[0]} > 0 else one - one"
    if eqn.prim == "fill":
        return f"np.{dt}({eqn.params[1]!r})"
    if eqn.prim == "broadcast":
        return ops[0]
    if eqn.prim == "square":
        return f"R.mul_value({ops[0]}, {ops[0]}, one)"
    return f"R.{eqn.params[0]}({', '.join(ops)}, one)"   # grad


def name_of(v: Var, where: Layout) -> str:
    """The name of value ``v`` in the generated function."""
    return _name(v.index, where)


def _name(index: int, where: Layout) -> str:
    index = resolved(index, where)
    if index in where.inputs:
        return f"in{where.inputs[index]}"
    if index in where.host:
        return f"h{index}"
    return f"v{index}" if index >= 0 else f"s{-index - 1}"


def _describe(eqn: Eqn) -> str:
    ins = ", ".join(f"v{v.index}{list(v.shape)}" if isinstance(v, Var) else repr(v)
                    for v in eqn.ins)
    params = f" {eqn.params}" if eqn.params else ""
    return f"v{eqn.out.index}{list(eqn.out.shape)} = {eqn.prim}({ins}){params}"


def _emit(eqn: Eqn, where: Layout) -> list[str]:
    """The loops of an equation that is not point-wise."""
    out = _name(eqn.out.index, where)
    dt = np.dtype(where.dtype).name
    a = _name(eqn.ins[0].index, where)
    if eqn.prim in ("sum", "mean"):
        # eager's full reduction (kernels/broadcast_sum_loops.py), so eager's bits
        if eqn.ins[0].size == 0:
            return [f"{out}[0] = {'np.nan' if eqn.prim == 'mean' else 0}"]
        scale = mean_scale(eqn.ins[0]) if eqn.prim == "mean" else 1.0
        return [f"reduce_flat(plain({COPY}), {a}, {a}, np.{dt}({scale!r}), {out})"]
    if eqn.prim == "sum_to":
        return _sum_to(eqn, out, a)
    if eqn.prim in ("cross_entropy", "cross_entropy_grad"):
        mean = f"plain({eqn.params[0] == 'mean'})"
        ins = ", ".join(_name(v.index, where) for v in eqn.ins)
        helper = "cross_entropy_loss" if eqn.prim == "cross_entropy" else eqn.prim
        return [f"{helper}({ins}, {out}, {mean})"]
    if eqn.prim == "reshape":
        if eqn.out.index in where.alias:
            return ["pass   # the same elements, where they are"]
        return [f"for i in range({eqn.out.size}):", f"    {out}[i] = {a}[i]"]
    if eqn.prim == "transpose":
        return _transposed(a, out, *eqn.ins[0].shape)
    if eqn.prim == "mm":
        return _product(eqn, where, dt)
    raise NotImplementedError(eqn.prim)


def _sum_to(eqn: Eqn, out: str, a: str) -> list[str]:
    """out = a summed to out's shape. Over leading dims (a bias's gradient): eager's
    kernel in eager's chunks of rows (kernels/broadcast_sum.py: ``sum_to_shape``), so
    eager's bits; otherwise (a small sum: ``is_host`` runs the large ones) a loop nest,
    each element over a's elements in C order."""
    shape, target = eqn.ins[0].shape, eqn.out.shape
    if _over_leading_axes(eqn):
        n = eqn.out.size
        rows = eqn.ins[0].size // n
        chunks, per_chunk = broadcast_sum.bias_rows_plan(rows, n)
        constants = ", ".join(f"plain({c})" for c in (rows, n, n, chunks, per_chunk))
        return [f"rows_sum(plain({COPY}), {a}, {a}, {out}, {constants}, one)"]
    return ([f"{out}[:] = 0"]
            + _nest(shape, [f"{out}[{_index(target, shape)}] += {a}[{_index(shape, shape)}]"]))


def _nest(shape: tuple, body: list[str], parallel: bool = False) -> list[str]:
    """Loops over ``shape`` with indices i0, i1, ... around the lines of ``body``; the
    outer one a ``prange`` when ``parallel``."""
    lines = [" " * 4 * d + f"for i{d} in {'prange' if parallel and d == 0 else 'range'}({n}):"
             for d, n in enumerate(shape)]
    return lines + [" " * 4 * len(shape) + line for line in body]


def _index(own: tuple, full: tuple) -> str:
    """The flat C-order index into an array of shape ``own`` broadcast against ``full``,
    at loop indices i0, i1, ... over ``full``."""
    terms, stride = [], 1
    lead = len(full) - len(own)
    for d in range(len(own) - 1, -1, -1):
        if own[d] != 1:
            terms.append(f"i{d + lead}" if stride == 1 else f"i{d + lead} * {stride}")
        stride *= own[d]
    return " + ".join(reversed(terms)) or "0"


def _mm_plan(eqn: Eqn, dtype) -> tuple:
    """(swapped, M, N, K, x_t, y_t, parallel, thin, row parts, column parts, depth bytes,
    span, pack_t): ``kernels/matmul.py``'s ``product`` plan for this product."""
    a, b = eqn.ins[:2]
    ta, tb = eqn.params[:2]
    m, n = eqn.out.shape
    k = a.shape[0] if ta else a.shape[1]
    nr = matmul_kernels.panel_cols(np.empty(0, dtype))
    threads = get_num_threads()
    swapped, parallel, thin, rows, cols = matmul_kernels._plan(1, m, n, k, ta, tb, nr,
                                                                threads, None)
    if swapped:
        m, n, ta, tb = n, m, not tb, not ta
    blocking = matmul_kernels._blocking(m * n * k, threads, None, None, None)
    return (swapped, m, n, k, ta, tb, parallel, thin, rows, cols) + tuple(blocking)


def _product(eqn: Eqn, where: Layout, dt: str) -> list[str]:
    a, b = (_name(v.index, where) for v in eqn.ins[:2])
    out = _name(eqn.out.index, where)
    if eqn.out.size == 0:
        return ["pass"]
    swapped, m, n, k, ta, tb, parallel, thin, rows, cols, depth, span, pack_t = _mm_plan(
        eqn, np.dtype(dt))
    if k == 0:
        return [f"{out}[:] = 0"]   # (with_epilogues folds no product with k = 0)
    if swapped:
        a, b, target = b, a, _name(-eqn.out.index - 1, where)
    else:
        target = out
    has_bias = len(eqn.ins) == 3
    bias = _name(eqn.ins[2].index, where) if has_bias else f"{target}[:0]"
    along = NO_BIAS if not has_bias else BIAS_ALONG_ROWS if swapped else BIAS_ALONG_COLUMNS
    activation = eqn.params[2] if len(eqn.params) == 3 else 0
    # constants through ``plain``: typed as literals, each call's values would compile
    # product_into (and the GEMM under it) once more
    if thin:
        sizes = ", ".join(f"plain({c})" for c in (m, n, k))
        call = [f"thin_product_into({a}, plain({ta}), {b}, plain({tb}), {target}, {sizes})"]
        if along != NO_BIAS or activation:
            call.append(f"apply_epilogue({target}, plain({m}), plain({n}), {bias}, "
                        f"plain({along}), plain({activation}))")
    else:
        constants = ", ".join(f"plain({c})" for c in (
            along, activation, m, n, k, parallel, rows, cols, config.NUMBA_NUM_THREADS,
            depth, span, pack_t))
        call = [f"product_into({a}, plain({ta}), {b}, plain({tb}), {target}, {bias}, "
                f"{constants})"]
    return call + (_transposed(target, out, m, n) if swapped else [])


def _transposed(src: str, dst: str, rows: int, cols: int) -> list[str]:
    """dst [cols, rows] = the transpose of src [rows, cols] (both flat, C order)."""
    return [f"for i in range({cols}):", f"    for j in range({rows}):",
            f"        {dst}[i * {rows} + j] = {src}[j * {cols} + i]"]
