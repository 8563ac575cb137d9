"""What every example shares: a progress bar, the metric table printed at the end, the
relative L2 error, and the prediction-vs-truth figure saved next to the run."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
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
