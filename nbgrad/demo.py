"""``python -m nbgrad demo``: what nbgrad is for, in about a minute.

A graph neural operator (the ``gno-regression`` example: lift, two ``nn.GNO`` layers,
projection) learns ``[sin x, cos x]`` on a 20-point chain graph, in float64 as the
example does (so the example, run next, compiles nothing). Then every
op the model's training step ran is gradchecked (backward against central differences)
through its registered samples, and a plot of prediction vs truth is saved. The
samples' shapes select kernels the training did not need; the compile helper
(runtime/compile_ahead.py) is handed the check at the first step and compiles them while
the training goes on. ``python -m nbgrad check`` adds second derivatives and every
other op.
"""

from __future__ import annotations

import time

from .examples import gno_regression
from .examples._common import metric_table
from .runtime.compile_ahead import compile_hook
from .tensor import Tensor
from .testing import check_registered


def ops_in_graph(root: Tensor) -> list[str]:
    """The registered ops recorded in the graph that ends at ``root``, sorted."""
    names, seen, stack = set(), set(), [root.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        names.add(node.name)
        stack.extend(t.grad_fn for t in node.inputs if isinstance(t, Tensor))
    return sorted(names)


def _check_table(names: list[str], tickets: dict[str, int]) -> tuple[str, bool]:
    rows, passed = [], True
    for name in names:
        compile_hook.join(tickets.get(name, 0))  # the helper may be on this very check
        report = check_registered(name)
        passed &= report.passed
        rows.append((name, f"{report.samples} samples, max rel err "
                           f"{report.max_rel_error:.1e}, {'pass' if report.passed else 'FAIL'}"))
    return metric_table(rows), passed


def main(epochs: int = 600, plot_path: str = "nbgrad-demo.png",
         show_progress: bool = True) -> int:
    start = time.perf_counter()
    print("nbgrad demo: a graph neural operator learns [sin x, cos x] on a 20-point chain "
          "(float64, Adam)")
    names: list[str] = []
    tickets: dict[str, int] = {}  # op -> the helper's ticket for its check

    def check_ahead(loss: Tensor) -> None:
        names.extend(ops_in_graph(loss))
        if compile_hook.compiles.started:  # a cold cache: the check will compile too
            tickets.update(compile_hook.submit_checks(names))

    history = gno_regression.train(epochs, show_progress=show_progress,
                                   on_first_loss=check_ahead)
    trained = time.perf_counter() - start
    print(metric_table([("epochs", epochs), ("final MSE", history["mse"]),
                        ("seconds (compiling included)", round(trained, 1))]))
    print(f"\ngradcheck of the {len(names)} ops the training step ran:")
    table, passed = _check_table(names, tickets)
    print(table)
    gno_regression.plot(history, plot_path)
    print(f"\ndone in {time.perf_counter() - start:.0f} s; next: `python -m nbgrad.examples` "
          f"lists the examples, `python -m nbgrad check` gradchecks every op")
    return 0 if passed else 1
