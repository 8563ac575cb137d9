"""The step program's memory plan (nbgrad/compiler/step_codegen.py: ``layout``): on random
step graphs, no two values whose lifetimes overlap share arena memory (a value lives
from the loop nest that makes it through the last one that reads it), the values read
after the call lie last and together, and slices are reused."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from nbgrad.compiler.step_codegen import _groups, layout
from nbgrad.compiler.step_graph import Graph


@st.composite
def step_graphs(draw):
    """A graph over [r, c] values and their [c, r] transposes: element-wise ops of values
    of one shape (runs of them fuse into one loop nest), products, transposes, sums
    over rows; and the values read after the call."""
    r, c = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    graph = Graph(np.dtype(np.float32))
    inputs = [graph.new_var((r, c), True), graph.new_var((c, r), True)]
    values = list(inputs)
    for _ in range(draw(st.integers(1, 25))):
        a = draw(st.sampled_from(values))
        kind = draw(st.sampled_from(["unary", "binary", "mm", "transpose", "sum_to"]))
        if kind == "unary":
            out = graph.elementwise(draw(st.sampled_from(["exp", "tanh", "neg"])), a)
        elif kind == "binary":
            b = draw(st.sampled_from([v for v in values if v.shape == a.shape]))
            out = graph.elementwise(draw(st.sampled_from(["add", "mul"])), a, b)
        elif kind == "mm":
            b = draw(st.sampled_from([v for v in values if v.shape[0] == a.shape[1]]))
            out = graph.mm(a, b)
        elif kind == "transpose":
            out = graph.transpose(a)
        else:
            out = graph.sum_to(a, a.shape[1:])
        if out.shape in ((r, c), (c, r)):
            values.append(out)
    made = [eqn.out for eqn in graph.eqns]
    outputs = draw(st.lists(st.sampled_from(made), min_size=1, unique_by=lambda v: v.index))
    return graph, inputs, outputs


def _live_groups(eqns):
    """index -> (first, last) loop nest in which the value is live."""
    group_of = {k: g for g, group in enumerate(_groups(eqns)) for k in group}
    live = {}
    for k, eqn in enumerate(eqns):
        live[eqn.out.index] = (group_of[k], group_of[k])
    for k, eqn in enumerate(eqns):
        for v in eqn.ins:
            if hasattr(v, "index") and v.index in live:
                first, last = live[v.index]
                live[v.index] = (first, max(last, group_of[k]))
    return live


@settings(max_examples=200, deadline=None)
@given(step_graphs())
def test_values_live_at_once_never_share_memory(case):
    graph, inputs, outputs = case
    eqns = graph.eqns
    where = layout(eqns, inputs, graph.dtype, outputs)
    live = _live_groups(eqns)
    kept = {v.index for v in outputs}
    placed = [(k, *where.offsets[k]) for k in live if k not in kept]
    for i, (k, start, size) in enumerate(placed):
        for m, other, other_size in placed[i + 1:]:
            (a0, a1), (b0, b1) = live[k], live[m]
            if a0 <= b1 and b0 <= a1:   # live in a common loop nest
                assert start + size <= other or other + other_size <= start, (k, m)
    ends = sorted((where.offsets[k][0], where.offsets[k][0] + where.offsets[k][1])
                  for k in kept)
    first_output = ends[0][0]
    assert all(start + size <= first_output for _, start, size in placed)
    assert ends[-1][1] <= where.size


def test_a_chain_of_products_reuses_the_arena():
    graph = Graph(np.dtype(np.float32))
    x, w = graph.new_var((64, 64), True), graph.new_var((64, 64), True)
    h = x
    for _ in range(6):
        h = graph.elementwise("tanh", graph.mm(h, w))
    where = layout(graph.eqns, [x, w], graph.dtype, [h])
    # each product reads the previous tanh and each tanh its product: two values live at
    # once, besides the result
    assert where.size == 3 * 64 * 64
