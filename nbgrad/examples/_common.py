"""What every example shares: a progress bar, the metric table printed at the end, the
relative L2 error, and the prediction-vs-truth figure saved next to the run."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np


def progress(total: int, enabled: bool, unit: str = "step") -> Any:
    """A tqdm bar (the ``examples`` extra), or None without tqdm or when disabled."""
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit=unit, leave=False)


def report(bar: Any, line: str) -> None:
    """Print ``line`` above the bar (or plainly, without one)."""
    if bar is not None:
        bar.write(line)
    else:
        print(line, flush=True)


def relative_l2(prediction: np.ndarray, truth: np.ndarray) -> float:
    """mean over samples of ||prediction - truth|| / ||truth|| (the FNO papers' metric;
    the first axis is the sample axis)."""
    diff = (prediction - truth).reshape(len(truth), -1)
    scale = truth.reshape(len(truth), -1)
    return float(np.mean(np.linalg.norm(diff, axis=1) / np.linalg.norm(scale, axis=1)))


def metric_table(rows: Iterable[tuple[str, Any]]) -> str:
    """A two-column plain-text table of (metric, value)."""
    rows = [(name, f"{value:.4g}" if isinstance(value, float) else str(value))
            for name, value in rows]
    width = max(len(name) for name, _ in rows)
    value_width = max(len(value) for _, value in rows)
    rule = "-" * (width + value_width + 3)
    return "\n".join([rule, *(f"{name:<{width}} | {value:>{value_width}}"
                              for name, value in rows), rule])


def pyplot() -> Any:
    """matplotlib.pyplot, or None without matplotlib. The backend is matplotlib's choice
    (inline in Jupyter; Agg, files only, where there is no display)."""
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def save_figure(fig: Any, path: str) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"figure saved to {path}")


def losses_axis(ax: Any, losses: Sequence[float], label: str = "training loss") -> None:
    ax.plot(losses, lw=0.8)
    ax.set(xlabel="step", ylabel=label, yscale="log")


def field_example_main(argv: list[str] | None, name: str, doc: str, train: Callable,
                       plot: Callable, sizes: dict, batch_size: int, lr: float) -> int:
    """The command line of the examples that learn a field-to-field map with a relative L2
    loss (darcy-gno, darcy-fno, burgers-fno): ``train(**sizes[...], batch_size, lr, seed,
    show_progress)`` returns the history that the metric table and ``plot`` read."""
    parser = argparse.ArgumentParser(prog=f"python -m nbgrad.examples {name}",
                                     description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a reduced size (tests)")
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=batch_size)
    parser.add_argument("--lr", type=float, default=lr)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--plot", metavar="PNG", default=f"{name}.png",
                        help="where to save prediction vs truth")
    args = parser.parse_args(argv)
    size = dict(sizes["quick" if args.quick else "full"])
    if args.epochs is not None:
        size["epochs"] = args.epochs
    start = time.perf_counter()
    history = train(**size, batch_size=args.batch_size, lr=args.lr, seed=args.seed,
                    show_progress=not args.no_progress)
    print(metric_table([("epochs", size["epochs"]),
                        ("train samples", size["n_train"]),
                        ("final training relative L2", history["epoch_loss"][-1]),
                        ("test relative L2", history["test_relative_l2"][-1]),
                        ("seconds", round(time.perf_counter() - start, 1))]))
    plot(history, args.plot)
    return 0
