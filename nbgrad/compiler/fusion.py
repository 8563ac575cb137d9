"""Fusing a run of point-wise ops into one generated Numba loop nest, forward and backward.

A *region* is a run of consecutive ``OpNode``s of the trace whose ops are in
``compiler/rules.py``, over one shape and one float dtype, every operand of that shape,
a single value that needs no gradient (a lifted number), or broadcast over the region
as one contiguous run of its dimensions (``Broadcast``), all recorded with gradients on
or all with them off. Its *inputs* are the values it reads that it does not
make; its *outputs* are the values it makes that anything after it reads (a later op,
``backward``, ``grad``, the function's result). Everything else lives in registers.

The region becomes one ``Function`` (``fused_function``):

- forward: one pass over the elements computing every op in order, writing the outputs;
  it saves its inputs only.
- backward: one pass that recomputes the region's values from the saved inputs, then
  runs the ops' gradient rules in reverse order, adding each operand's contributions in
  the order the engine would (later consumers first, operand 0 before operand 1), and
  writes one gradient per input that needs one. A value saved by an eager op (tanh's
  output) is recomputed instead of stored: a few flops per element against a pass
  over memory.
- vjp (``create_graph``): the region's ops again as nbgrad ops, differentiated by
  ``nb.grad``: second derivatives through a fused region are those of the eager ops.

So the values and the gradients are bitwise those of eager execution wherever the
engine would add a value's gradient contributions in the same order. The differences: an
input that is also read after the region, whose outside contributions eager interleaves
with the region's by creation order, where here the region's are summed first; and a
broadcast operand's gradient, the sum over its repeated rows (``row_loop``), added per
task in element order and then in task order, where eager's ``sum_to`` has its own order.

The generated module is written to the kernel cache directory under a name taken from its
source, so Numba's disk cache serves a second process (``explain()`` prints it).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..autograd import engine, grad_mode
from ..function import Function
from ..runtime.cache import GENERATED_PREFIX, install_stamp, kernel_cache_dir
from ..runtime.jit import CHUNK, PARALLEL_MIN
from . import rules
from .trace import OpNode, Slot

# -- finding regions ---------------------------------------------------------------------------


@dataclass
class Region:
    nodes: list            # the OpNodes, in order
    shape: tuple
    dtype: np.dtype
    grad_enabled: bool
    inputs: list           # refs read from outside, in first-use order
    reads: list            # per input: FULL, SCALAR or a Broadcast (how it is read)
    outputs: list          # slot numbers made here and read after the region
    in_shapes: list        # per input: its shape
    period: int = 0        # with a Broadcast input: the length of the rows it repeats over

    def describe(self) -> str:
        ops = ", ".join(node.describe() for node in self.nodes)
        return f"{len(self.nodes)} ops over {self.shape} {self.dtype}: {ops}"

    def makes(self, ref: Any) -> bool:
        """Whether ``ref`` is a value one of the region's ops makes."""
        return isinstance(ref, Slot) and any(ref.index in n.outputs for n in self.nodes)


# How a region reads an input: an array of the region's size (FULL), one value that
# needs no gradient, read once before the loop (SCALAR), or a Broadcast.
FULL_READ, SCALAR = "full", "scalar"


@dataclass(frozen=True)
class Broadcast:
    """An operand repeated over the region, which the loop sees as rows of ``period``
    elements: ``along`` a row, element t of every row reads the operand's element t (a
    bias [C] over [N, C]: period C); or one value per row r, the operand's element
    r % size ([N, 1] over [N, C]: period C; [C, 1, 1] over [B, C, H, W]: period H*W).
    ``period`` 0: a single value that needs a gradient, which fits any period."""
    period: int
    along: bool
    size: int


def read_of(in_shape: tuple, shape: tuple, needs_grad: bool) -> Any:
    """How a region over ``shape`` reads an operand of ``in_shape``; None when its
    dimensions do not broadcast as one contiguous run (not fused)."""
    size, n = int(np.prod(in_shape)), int(np.prod(shape))
    if len(in_shape) > len(shape):
        return None
    padded = (1,) * (len(shape) - len(in_shape)) + tuple(in_shape)
    if any(t not in (1, s) for t, s in zip(padded, shape)):
        return None
    if size == n:
        return FULL_READ
    if size == 1:
        return Broadcast(0, False, 1) if needs_grad else SCALAR
    kept = [d for d, t in enumerate(padded) if t != 1]
    if any(padded[d] == 1 and shape[d] != 1 for d in range(kept[0], kept[-1] + 1)):
        return None
    period = int(np.prod(shape[kept[-1] + 1:]))
    return Broadcast(size, True, size) if period == 1 else Broadcast(period, False, size)


def _period_of(node: OpNode) -> int | None:
    """The row length the node's broadcast operands need (0: any), None if they
    disagree or one cannot be fused."""
    shape = node.out_meta[0]
    periods = set()
    for in_shape, _, needs_grad in node.input_meta:
        read = read_of(in_shape, shape, needs_grad)
        if read is None:
            return None
        if isinstance(read, Broadcast) and read.period:
            if needs_grad and not _partials_fit(read, shape):
                return None
            periods.add(read.period)
    return periods.pop() if len(periods) == 1 else (None if periods else 0)


def _partials_fit(read: Broadcast, shape: tuple) -> bool:
    """Whether the per-task partial sums of the operand's gradient (``loop_tasks``) take
    no more memory than the region's gradients do."""
    n = int(np.prod(shape))
    return loop_tasks(n, read.period) * read.size <= max(n, CHUNK)


def loop_tasks(n: int, period: int) -> int:
    """The parallel tasks of a generated loop over n elements: whole rows of ``period``
    elements, about CHUNK per task (``row_loop``), or chunks of CHUNK when ``period`` is
    0 (``chunk_loop``). The split depends on the shape alone, so the bits do not depend
    on the thread count."""
    if not period:
        return max(1, -(-n // CHUNK))
    per_task = max(1, CHUNK // period)
    return max(1, -(-(n // period) // per_task))


def _fusible(node: Any) -> bool:
    if not isinstance(node, OpNode) or node.several or node.fn.op_name not in rules.RULES:
        return False
    rule = rules.RULES[node.fn.op_name]
    if not rule.fuses(node.params) or rule.arity != len(node.inputs):
        return False
    shape, dtype = node.out_meta
    if dtype.kind != "f" or any(meta is None or meta[1] != dtype for meta in node.input_meta):
        return False
    return _period_of(node) is not None


def _same_kind(node: OpNode, first: OpNode) -> bool:
    return node.out_meta == first.out_meta and node.grad_enabled == first.grad_enabled


def find_regions(nodes: list, read_later: dict) -> list[tuple[int, int, Region]]:
    """``(start, stop, region)`` for every run ``nodes[start:stop]`` of fusible ops (one
    op alone is a region too: its forward may fuse into a backward); ``read_later[k]`` is
    the index of the last node reading slot k (or len(nodes) for the function's result)."""
    found = []
    i = 0
    while i < len(nodes):
        if not _fusible(nodes[i]):
            i += 1
            continue
        period = _period_of(nodes[i])
        j = i + 1
        while j < len(nodes) and _fusible(nodes[j]) and _same_kind(nodes[j], nodes[i]):
            this = _period_of(nodes[j])
            if period and this and this != period:
                break
            period = period or this
            j += 1
        found.append((i, j, _region(nodes[i:j], j, read_later, period)))
        i = j
    return found


def _region(nodes: list, stop: int, read_later: dict, period: int) -> Region:
    shape, dtype = nodes[0].out_meta
    outputs = [k for node in nodes for k in node.outputs if read_later.get(k, -1) >= stop]
    region = Region(list(nodes), shape, dtype, nodes[0].grad_enabled, [], [], outputs, [])
    for node in nodes:
        for ref, (in_shape, _, needs_grad) in zip(node.inputs, node.input_meta):
            if not region.makes(ref) and ref not in region.inputs:
                region.inputs.append(ref)
                region.reads.append(read_of(in_shape, shape, needs_grad))
                region.in_shapes.append(in_shape)
    if any(isinstance(read, Broadcast) for read in region.reads):
        region.period = period or (shape[-1] if shape else 1)
    return region


# -- generating the loop nests -----------------------------------------------------------------


class _Names:
    """The variable of every value of a region in the generated code: ``x<j>`` for input
    j, ``v<k>`` for slot k."""

    def __init__(self, region: Region) -> None:
        self.region = region

    def of(self, ref: Any) -> str:
        if self.region.makes(ref):
            return f"v{ref.index}"
        return f"x{self._input(ref)}"

    def _input(self, ref: Any) -> int:
        for j, r in enumerate(self.region.inputs):
            if r is ref or r == ref:
                return j
        raise KeyError(ref)


def _header(region: Region) -> list[str]:
    """The loop's first comment: its ops and dtype, and no sizes, which the loop takes
    at run time, so that a region of another shape is the same source, compiled once."""
    ops = ", ".join(node.describe() for node in region.nodes)
    rows = " in rows" if region.period else ""
    return [f"# {len(region.nodes)} ops over {region.dtype}{rows}: {ops}"]


#: the element loop of a chunk: ``BODY`` stands for the body, at that line's indentation
ONE_LOOP = ["for t in range(stop - start):", "    BODY"]


def chunk_loop(body: list[str], first: str, loops: list[str] = ONE_LOOP) -> list[str]:
    """The chunked loop, each chunk one parallel task running ``loops`` (the element
    loops over the chunk's local index t, with ``BODY`` where the body goes). The body
    indexes its arrays by ``[i]``; every such array is read through its chunk's slice at
    a local index (``x[start:stop]``, then ``[t]``): the form LLVM vectorises (indexing
    the whole array by ``i`` in a loop over ``range(start, stop)`` keeps it scalar)."""
    text, arrays = _local_index(body)
    inner = []
    for line in loops:
        indent = line[:len(line) - len(line.lstrip())]
        inner += ([indent + b for b in text.split("\n")] if line.strip() == "BODY"
                  else [line])
    return ([f"    n = {first}.size",
             f"    for c in prange((n + {CHUNK} - 1) // {CHUNK}):",
             f"        start, stop = c * {CHUNK}, min(n, (c + 1) * {CHUNK})"]
            + [f"        {a}_c = {a}[start:stop]" for a in arrays]
            + ["        " + line for line in inner])


def _local_index(body: list[str]) -> tuple[str, list[str]]:
    """The body with each ``a[i]`` read as ``a_c[t]``, and those arrays' names."""
    text = "\n".join(body)
    arrays = sorted(set(re.findall(r"\b(\w+)\[i\]", text)))
    for a in arrays:
        text = re.sub(rf"\b{a}\[i\]", f"{a}_c[t]", text)
    return text, arrays


def row_loop(region: Region, body: list[str], size: str, chunk_setup: list[str] = (),
             row_setup: list[str] = (), row_end: list[str] = ()) -> list[str]:
    """The loop of a region with a Broadcast input: each parallel task c takes whole rows
    of ``region.period`` elements (``loop_tasks``), runs ``chunk_setup`` once, and for each
    row r runs ``row_setup``, the body over the row's elements t (its arrays read through
    the row's slices, as in ``chunk_loop``) and ``row_end``; ``size``: the expression of
    the region's element count. The row length is the function's parameter ``period``,
    not a literal: a row function's reduction inlined with a constant trip count would be
    vectorised, and its sum ordered, differently from the eager kernel's."""
    text, arrays = _local_index(body)
    return ([f"    rows = {size} // period",
             f"    per_task = max(1, {CHUNK} // period)",
             "    for c in prange(max(1, (rows + per_task - 1) // per_task)):"]
            + [f"        {line}" for line in chunk_setup]
            + ["        for r in range(c * per_task, min(rows, (c + 1) * per_task)):",
               "            start = r * period"]
            + [f"            {a}_c = {a}[start:start + period]" for a in arrays]
            + [f"            {line}" for line in row_setup]
            + ["            for t in range(period):"]
            + [f"                {line}" for line in text.split("\n")]
            + [f"            {line}" for line in row_end])


def _loads(region: Region, names: _Names) -> tuple[list[str], list[str]]:
    """(before the loop, in the loop): the inputs as values (an input with one value per
    row is read in ``_row_loads``)."""
    before, inside = [], []
    for j, read in enumerate(region.reads):
        if read == SCALAR:
            before.append(f"x{j} = in{j}[0]")
        elif read == FULL_READ:
            inside.append(f"x{j} = in{j}[i]")
        elif read.along:
            inside.append(f"x{j} = in{j}[t]")
    return ["    " + line for line in before], inside


def _row_loads(region: Region) -> list[str]:
    return [f"x{j} = in{j}[{_row_index(read)}]" for j, read in enumerate(region.reads)
            if isinstance(read, Broadcast) and not read.along]


def _row_index(read: Broadcast) -> str:
    return "0" if read.size == 1 else f"r % {read.size}"


def _forward_values(region: Region, names: _Names) -> list[str]:
    lines = []
    signs = rules.Signs()
    for node in region.nodes:
        operands, out = [names.of(r) for r in node.inputs], f"v{node.outputs[0]}"
        value = signs.value_for(node.fn.op_name, region.dtype, operands)
        signs.note(node.fn.op_name, operands, out)
        lines.append(f"{out} = R.{value}({', '.join(operands)}, one)  # {node.describe()}")
    return lines


def forward_source(region: Region, name: str) -> str:
    names = _Names(region)
    ins = row_count(region) + [f"in{j}" for j in range(len(region.inputs))]
    outs = [f"out{m}" for m in range(len(region.outputs))]
    before, loads = _loads(region, names)
    stores = [f"out{m}[i] = v{k}" for m, k in enumerate(region.outputs)]
    lines = _header(region) + [f"def {name}({', '.join(ins + outs)}):",
                               "    one = out0.dtype.type(1)"] + before
    body = loads + _forward_values(region, names) + stores
    lines += (row_loop(region, body, "n", row_setup=_row_loads(region)) if region.period
              else chunk_loop(body, "out0"))
    return "\n".join(lines) + "\n"


def _needing_grad(region: Region, names: _Names, inputs_needed: tuple) -> set[str]:
    """The variables whose gradient is wanted: inputs that need one, and every value
    computed from them."""
    wanted = {f"x{j}" for j, needed in enumerate(inputs_needed) if needed}
    for node in region.nodes:
        if any(names.of(r) in wanted for r in node.inputs):
            wanted.add(f"v{node.outputs[0]}")
    return wanted


def adjoints(region: Region, seeds: dict[int, str], inputs_needed: tuple
             ) -> tuple[list[str], list[int]]:
    """The loop body that runs the region's gradient rules in reverse, starting from the
    gradients ``seeds`` (output slot -> expression), and stores the gradient of every
    input that needs one into ``gin<j>[i]``; also the inputs it writes."""
    names = _Names(region)
    wanted = _needing_grad(region, names, inputs_needed)
    adjoint: dict[str, str] = {}
    body = []
    for k, seed in seeds.items():
        body.append(f"d_v{k} = {seed}")
        adjoint[f"v{k}"] = f"d_v{k}"
    for node in reversed(region.nodes):
        out = f"v{node.outputs[0]}"
        if out not in adjoint:
            continue
        rule = rules.RULES[node.fn.op_name]
        operands = [names.of(r) for r in node.inputs]
        for position, operand in enumerate(operands):
            if operand not in wanted:
                continue
            term = (f"R.{rule.grad_for(position, region.dtype)}({adjoint[out]}, "
                    f"{', '.join(operands)}, {out}, one)")
            if operand in adjoint:
                body.append(f"d_{operand} = d_{operand} + {term}  # {node.describe()}")
            else:
                body.append(f"d_{operand} = {term}  # {node.describe()}")
                adjoint[operand] = f"d_{operand}"
    written = [j for j in range(len(region.inputs)) if f"x{j}" in adjoint and inputs_needed[j]]
    return body + [_store(j, region.reads[j]) for j in written], written


def _store(j: int, read: Any) -> str:
    """Input j's gradient at an element: written, added into its task's partial sums
    (along a row), or kept for the row's sum (one value per row; a sum inside the element
    loop would keep LLVM from vectorising it)."""
    if read == FULL_READ:
        return f"gin{j}[i] = d_x{j}"
    return f"gp{j}[t] += d_x{j}" if read.along else f"row{j}[t] = d_x{j}"


# How an output's gradient reaches a backward loop: not at all (None), as a full array
# (FULL), or as one value repeated (ONE: the gradient of a sum or mean, a 0-stride view),
# read once before the loop so that the loop stays a unit-stride one LLVM vectorises.
FULL, ONE = "full", "one"


def grad_layout(g: np.ndarray | None) -> str | None:
    if g is None:
        return None
    return ONE if g.size > 1 and not any(g.strides) else FULL


def grad_argument(g: np.ndarray) -> np.ndarray:
    """The array a backward loop takes for ``g`` (its layout by ``grad_layout``)."""
    return g.reshape(-1)[:1] if grad_layout(g) == ONE else _flat(g)


def seed_of(m: int, layout: str) -> tuple[str, str | None]:
    """(the expression of output m's gradient in the loop, a load before the loop)."""
    if layout == ONE:
        return f"g{m}_value", f"    g{m}_value = g{m}[0]"
    return f"g{m}[i]", None


def backward_source(region: Region, name: str, layouts: tuple,
                    inputs_needed: tuple) -> tuple[str, list[int]]:
    """The backward loop for the outputs' gradients (``layouts``: how each arrives) and
    the inputs that need one; also the inputs it writes a gradient for."""
    names = _Names(region)
    seeds, loads_before = {}, []
    for m, k in enumerate(region.outputs):
        if layouts[m] is not None:
            seeds[k], load = seed_of(m, layouts[m])
            loads_before += [load] if load else []
    body, written = adjoints(region, seeds, inputs_needed)
    before, loads = _loads(region, names)
    params = (row_count(region) + [f"in{j}" for j in range(len(region.inputs))]
              + [f"g{m}" for m in range(len(region.outputs)) if layouts[m] is not None]
              + gradient_parameters(region, written))
    first = f"gin{written[0]}" if written else "in0"
    lines = _header(region) + [f"def {name}({', '.join(params)}):",
                               f"    one = {first}.dtype.type(1)"] + before + loads_before
    values = loads + _forward_values(region, names) + body
    if not region.period:
        return "\n".join(lines + chunk_loop(values, first)) + "\n", written
    return "\n".join(lines + summed_row_loop(region, values, written)) + "\n", written


def _summed(region: Region, written: list[int]) -> list[int]:
    """The inputs among ``written`` whose gradient is a sum over repeated rows."""
    return [j for j in written if isinstance(region.reads[j], Broadcast)]


def row_count(region: Region) -> list[str]:
    """The first parameters of a row loop's function: the region's element count (its
    arrays may all be smaller: broadcast inputs, a sum's gradient) and the row length."""
    return ["n", "period"] if region.period else []


def row_arguments(region: Region, n: int) -> list[int]:
    """The values of ``row_count``'s parameters."""
    return [n, region.period] if region.period else []


def gradient_parameters(region: Region, written: list[int]) -> list[str]:
    """The gradient arrays a backward loop writes: each broadcast input's per-task
    partial sums, then every input's gradient."""
    return [f"gpart{j}" for j in _summed(region, written)] + [f"gin{j}" for j in written]


def summed_row_loop(region: Region, values: list[str], written: list[int],
                    chunk_setup: list[str] = (), row_end: list[str] = (),
                    row_setup: list[str] = ()) -> list[str]:
    """The row loop of a backward (``row_loop``) whose broadcast inputs' gradients are
    summed as its epilogue: per task in element order, then the tasks' sums in task
    order; ``chunk_setup``, ``row_setup`` and ``row_end`` add lines of the caller's own.
    The function takes the region's element count and row length first (``row_count``)."""
    summed = _summed(region, written)
    per_row = [j for j in summed if not region.reads[j].along]
    setup = [line for j in summed for line in (f"gp{j} = gpart{j}[c]", f"gp{j}[:] = 0")]
    setup += [f"row{j} = np.empty(period, gin{j}.dtype)" for j in per_row]
    ends = []
    for j in per_row:   # the row's terms, added in element order
        ends += ["total = one - one",
                 "for t in range(period):",
                 f"    total += row{j}[t]",
                 f"gp{j}[{_row_index(region.reads[j])}] += total"]
    lines = row_loop(region, values, "n", setup + list(chunk_setup),
                     _row_loads(region) + list(row_setup), ends + list(row_end))
    for j in summed:   # the tasks' partial sums, added in task order
        lines += [f"    for e in range(gin{j}.size):",
                  f"        total = gpart{j}[0, e]",
                  f"        for c in range(1, gpart{j}.shape[0]):",
                  f"            total += gpart{j}[c, e]",
                  f"        gin{j}[e] = total"]
    return lines


def gradient_buffers(region: Region, written: list[int], pool: dict,
                     n: int) -> tuple[list, list]:
    """(partial sums, gradients): the arrays ``gradient_parameters`` names, new partial
    sums and the gradients from ``pool`` (``reused``) in their inputs' shapes."""
    gins = [reused(pool, ("grad", j), region.in_shapes[j], region.dtype) for j in written]
    partials = [np.empty((loop_tasks(n, region.period), g.size), region.dtype)
                for j, g in zip(written, gins) if isinstance(region.reads[j], Broadcast)]
    return partials, gins


# -- building the kernels ----------------------------------------------------------------------

_PRESET_PARALLEL = 'cache=True, parallel=True, error_model="numpy"'


def _module_source(kernel: str, name: str, imports: str = "") -> str:
    return ('"""A region fused by nb.compile (nbgrad/compiler/fusion.py). Generated."""\n'
            "import numpy as np\nfrom numba import prange\n\n"
            "from nbgrad.compiler import rules as R\n"
            "from nbgrad.runtime.jit import njit_with_serial\n" + imports + "\n\n"
            + kernel
            + f"\n\n# the serial form is a copy named {name}_serial: Numba's disk cache keys a"
            "\n# kernel by its name, not its flags\n"
            + f"{name}_parallel = njit_with_serial({_PRESET_PARALLEL})({name})\n"
            + f"{name}_serial = {name}_parallel.serial\n")


def _generated_dir() -> Path:
    base = kernel_cache_dir(rules.add_value.py_func)
    folder = (base if base is not None else Path(tempfile.gettempdir())) / "nbgrad-compiled"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


_modules: dict[str, Any] = {}


def load_kernel(kernel_source: str, name: str, imports: str = "") -> tuple[Any, Any, str]:
    """(parallel, serial, module source) of the generated loop ``kernel_source``, whose
    module also has the lines ``imports``."""
    source = _module_source(kernel_source, name, imports)
    module = load_generated(source)
    return getattr(module, f"{name}_parallel"), getattr(module, f"{name}_serial"), source


@functools.cache
def compiler_stamp() -> str:
    """The sha256 of ``nbgrad/compiler``'s sources, whose jitted functions (the rules,
    the step programs' helpers) a generated module calls: Numba's cache of the module
    keys it by the module's own file only, so an edit of those must change its name."""
    sources = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        sources.update(path.read_bytes())
    return sources.hexdigest()


def load_generated(source: str) -> Any:
    """The module of generated ``source``, written to the kernel cache directory under a
    name taken from the source, the nbgrad build and the compiler's sources, so that
    Numba's disk cache serves its functions to the next process."""
    stamp = install_stamp() + compiler_stamp()
    digest = hashlib.sha256((stamp + source).encode()).hexdigest()[:16]
    module_name = f"{GENERATED_PREFIX}{digest}"
    module = _modules.get(module_name)
    if module is None:
        path = _generated_dir() / f"{module_name}.py"
        if not path.exists() or path.read_text() != source:
            temporary = path.with_suffix(f".{digest}.tmp")
            temporary.write_text(source)
            temporary.replace(path)
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
        _modules[module_name] = module
    return module


def _run(pair: tuple, n: int, *arrays: Any) -> None:
    parallel, serial = pair
    (parallel if n >= PARALLEL_MIN else serial)(*arrays)


def reused(pool: dict, key: Any, shape: tuple, dtype: np.dtype) -> np.ndarray:
    """An array of ``shape`` for output ``key`` of a generated loop: the one the previous
    call wrote, when nothing but ``pool`` holds it any more (its tensor, the graph that
    saved it and every view of it are gone), else a new one, kept for next time. A
    large new array costs a page fault per 4 KB page on its first write, a pass over
    memory of its own; a reused one costs nothing."""
    a = pool.get(key)
    if a is not None and sys.getrefcount(a) == 3:  # pool, ``a``, getrefcount's argument
        return a
    a = pool[key] = np.empty(shape, dtype)
    return a


def _flat(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).reshape(-1)


def fused_function(region: Region, index: int) -> type[Function]:
    """The Function of ``region`` (see the module docstring)."""
    name = f"region{index}"
    parallel, serial, source = load_kernel(forward_source(region, name + "_forward"),
                                           name + "_forward")
    forward_kernel = (parallel, serial)
    backwards = BackwardKernels(region, name + "_backward", lambda key: backward_source(
        region, name + "_backward", *key))
    buffers: dict = {}
    shape, dtype = region.shape, region.dtype
    n = int(np.prod(shape))

    def forward(ctx, *arrays):
        flat = [_flat(a) for a in arrays]
        outs = [reused(buffers, ("out", m), shape, dtype) for m in range(len(region.outputs))]
        _run(forward_kernel, n, *row_arguments(region, n), *flat,
             *[o.reshape(-1) for o in outs])
        ctx.save_for_backward(*flat)
        return tuple(outs) if len(outs) > 1 else outs[0]

    def backward(ctx, *grads):
        key = (tuple(grad_layout(g) for g in grads), ctx.needs_input_grad)
        flat_grads = [grad_argument(g) for g in grads if g is not None]
        return backwards.run(key, n, *ctx.saved_tensors, *flat_grads)

    def vjp(ctx, *grads):
        return region_vjp(region, ctx, grads)

    cls = type(f"FusedRegion{index}", (Function,), {
        "__doc__": f"A region fused by nb.compile: {region.describe()}.",
        "op_name": f"fused[{', '.join(n.describe() for n in region.nodes)}]",
        "forward": staticmethod(forward), "backward": staticmethod(backward),
        "vjp": staticmethod(vjp), "source": source, "region": region,
        "backward_sources": backwards.sources,
    })
    return cls


class BackwardKernels:
    """A region's backward kernels, one per key (the inputs that need a gradient, and
    what else the source depends on), made by ``build(key) -> (source, inputs
    written)``; their modules also have the lines ``imports``."""

    def __init__(self, region: Region, name: str, build: Any, imports: str = "") -> None:
        self.region, self.name, self.build, self.imports = region, name, build, imports
        self.kernels: dict = {}
        self.sources: list = []     # the generated modules, for explain()
        self.buffers: dict = {}     # the gradients' arrays (``reused``)

    def run(self, key: Any, n: int, *arrays: Any) -> tuple:
        """The inputs' gradients (None where not written) from the kernel's ``arrays``."""
        if key not in self.kernels:
            source, written = self.build(key)
            parallel, serial, module_source = load_kernel(source, self.name, self.imports)
            self.sources.append(module_source)
            self.kernels[key] = ((parallel, serial), written)
        kernel, written = self.kernels[key]
        partials, gins = gradient_buffers(self.region, written, self.buffers, n)
        _run(kernel, n, *row_arguments(self.region, n), *arrays, *partials,
             *[a.reshape(-1) for a in gins])
        found = dict(zip(written, gins))
        return tuple(found.get(j) for j in range(len(self.region.inputs)))


def region_vjp(region: Region, ctx: Any, grads: tuple, tail: Any = None) -> tuple:
    """The region's ops again, as nbgrad ops on ``ctx.inputs``, then the ``tail`` op on its
    output if one follows it (row_epilogue.py; its other inputs, cross_entropy's targets,
    are the inputs after the region's), and ``nb.grad`` of their outputs: the
    second-derivative path."""
    values: dict = {}
    with grad_mode.enable_grad():
        for node in region.nodes:
            args = [values[r.index] if region.makes(r) else ctx.inputs[region.inputs.index(r)]
                    for r in node.inputs]
            values[node.outputs[0]] = node.fn.apply(*args)
        if tail is not None:
            (k,) = region.outputs
            values[tail.outputs[0]] = tail.fn.apply(
                values[k], *ctx.inputs[len(region.inputs):], **tail.params)
    outs = [values[k] for k in (region.outputs if tail is None else tail.outputs)]
    pairs = [(o, g) for o, g in zip(outs, grads) if g is not None]
    wanted = [t for t, need in zip(ctx.inputs, ctx.needs_input_grad) if need]
    found = iter(engine.grad([o for o, _ in pairs], wanted, [g for _, g in pairs],
                             create_graph=True) if pairs and wanted else ())
    return tuple(next(found) if need else None for need in ctx.needs_input_grad)
