"""``python -m nbgrad demo``: what nbgrad is for, in about a minute.

A graph neural operator (the ``gno-regression`` example: lift, two ``nn.GNO`` layers,
projection) learns ``[sin x, cos x]`` on a 20-point chain graph, in float64 as the
example does (so the example, run next, compiles nothing). Then every
op the model's training step ran is gradchecked (backward against central differences)
through its registered samples, and a plot of prediction vs truth is saved. Both parts
run the same float64 kernels, so the check compiles next to nothing;
``python -m nbgrad check`` adds second derivatives and every other op.
"""

from __future__ import annotations

import time

from .examples import gno_regression
from .examples._common import metric_table
from .ops.loss import mse_loss
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


def _training_ops(history: dict) -> list[str]:
    model, data = history["model"], history["data"]
    loss = mse_loss(model(data["s"], data["graph"]), data["y"])
    return ops_in_graph(loss)


def _check_table(names: list[str]) -> tuple[str, bool]:
    rows, passed = [], True
    for name in names:
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
    history = gno_regression.train(epochs, show_progress=show_progress)
    trained = time.perf_counter() - start
    print(metric_table([("epochs", epochs), ("final MSE", history["mse"]),
                        ("seconds (compiling included)", round(trained, 1))]))
    names = _training_ops(history)
    print(f"\ngradcheck of the {len(names)} ops the training step ran:")
    table, passed = _check_table(names)
    print(table)
    gno_regression.plot(history, plot_path)
    print(f"\ndone in {time.perf_counter() - start:.0f} s; next: `python -m nbgrad.examples` "
          f"lists the examples, `python -m nbgrad check` gradchecks every op")
    return 0 if passed else 1
