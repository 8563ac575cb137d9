"""What every example shares: the training loop (``fit``, under a progress bar), the
command line (``command_line``), the metric table printed at the end, the relative L2
error, the figure saved next to the run (``save_plot``), and what a run
under ``mpiexec`` with ``--distributed`` needs: one shard of the data per rank, and
progress, printing, figures and checkpoints on rank 0 only."""

from __future__ import annotations

import argparse
import importlib.util
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

import nbgrad as nb
from nbgrad import distributed
from nbgrad.data import DataLoader, Dataset, DistributedSampler


def is_main_process() -> bool:
    """True but on the ranks other than 0 of an ``nbgrad.distributed`` job: only the main
    process shows progress, prints, saves figures and writes checkpoints."""
    return not distributed.is_initialized() or distributed.rank() == 0


def init_distributed(enabled: bool) -> int:
    """The number of ranks: the MPI job's (``nbgrad.distributed.init``) when ``enabled``,
    else 1."""
    if not enabled:
        return 1
    distributed.init()
    return distributed.world_size()


def mean_over_ranks(value: float) -> float:
    """``value`` averaged over the ranks of an initialised job (itself otherwise)."""
    if not distributed.is_initialized():
        return value
    total = np.array([value], np.float64)
    distributed.all_reduce(total, distributed.ReduceOp.AVG)
    return float(total[0])


def training_loader(dataset: Dataset, batch_size: int, seed: int, ranks: int) -> DataLoader:
    """Shuffled batches of ``batch_size`` items in all: on one rank a seeded loader; on
    ``ranks`` ranks each rank's ``batch_size / ranks`` items of its ``DistributedSampler``
    shard, so that the ranks' mean gradient is the gradient of the whole batch."""
    if ranks == 1:
        return DataLoader(dataset, batch_size=batch_size, shuffle=True, seed=seed)
    if batch_size % ranks:
        raise ValueError(f"--batch-size {batch_size} (the global batch) must be a multiple "
                         f"of the {ranks} ranks")
    return DataLoader(dataset, batch_size=batch_size // ranks,
                      sampler=DistributedSampler(dataset, seed=seed))


def start_epoch(loader: DataLoader, epoch: int) -> DataLoader:
    """``loader`` set to epoch ``epoch``'s order (through its sampler, if it has one)."""
    if loader.sampler is not None:
        loader.sampler.set_epoch(epoch)
    else:
        loader.set_epoch(epoch)
    return loader


def save_checkpoint(state: dict, path: str) -> None:
    """``nb.save`` of ``state`` and, as ``"rng_state"``, the default generator's state
    (``nb.get_rng_state()``), on the main process; every rank returns once the file is
    complete, so any rank may read it next. The generator's state makes a resumed run
    draw the numbers (dropout masks, unseeded shuffles) the uninterrupted one would."""
    if is_main_process():
        nb.save({**state, "rng_state": nb.get_rng_state()}, path)
    if distributed.is_initialized():
        distributed.barrier()


def read_checkpoint(path: str) -> dict:
    """The checkpoint ``save_checkpoint`` wrote to ``path``, with the default generator
    set back to the state saved in it (checkpoints written without one leave it as is)."""
    state = nb.load(path)
    if "rng_state" in state:
        nb.set_rng_state(state["rng_state"])
    return state


def progress(total: int, enabled: bool, unit: str = "step") -> Any:
    """A tqdm bar (the ``examples`` extra), or None without tqdm, when disabled or off the
    main process. It reads "compiling" until ``advance`` reports the first step done."""
    if not (enabled and is_main_process()):
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit=unit, leave=False, desc="compiling")


def advance(bar: Any, **postfix: str) -> None:
    """One step done on ``bar`` (nothing if None), ``postfix`` shown after it. The first
    step of a run compiles the kernels it uses (tens of seconds on an empty cache, then
    milliseconds a step), so the bar's clock starts when it is done: neither the elapsed
    time, nor the rate, nor the time left includes the compile."""
    if bar is None:
        return
    if bar.n == 0:
        _start_clock_after_first_step(bar)
    else:
        bar.update(1)
    bar.set_postfix(postfix)


def _start_clock_after_first_step(bar: Any) -> None:
    """``bar`` at one step done, its clock and rate estimate started now; ``initial`` 1
    takes the first step out of tqdm's rate, (n - initial) / elapsed."""
    bar.reset()
    bar.n = bar.initial = bar.last_print_n = 1
    bar.set_description_str("", refresh=False)


def train_epoch(model: Any, loader: Iterable, optimizer: Any, loss_fn: Callable,
                scheduler: Any = None, bar: Any = None,
                loss_format: str = ".4f") -> list[float]:
    """One pass over ``loader`` (batches of inputs and targets) minimising
    ``loss_fn(model(x), y)``, the scheduler (if any) stepped after every step and the
    bar advanced; the loss of every step. Every example trains through this loop."""
    model.train()
    losses = []
    for x, y in loader:
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        losses.append(loss.item())
        advance(bar, loss=f"{losses[-1]:{loss_format}}")
    return losses


def adam_with_cosine(model: Any, lr: float, steps: int, eta_min: float = 0.0,
                     weight_decay: float = 0.0) -> tuple[Any, Any]:
    """Adam on ``model``'s parameters and a cosine annealing of its learning rate from
    ``lr`` to ``eta_min`` over ``steps`` scheduler steps."""
    optimizer = nb.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    return optimizer, nb.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps,
                                                              eta_min=eta_min)


def fit(model: Any, loader: DataLoader, optimizer: Any, loss_fn: Callable, epochs: int, *,
        metrics: dict[str, Callable[[], float]] | None = None,
        describe: Callable[[int, dict], str] | None = None, scheduler: Any = None,
        first_epoch: int = 0, report_every: int = 1,
        after_epoch: Callable[[int], None] | None = None, show_progress: bool = True,
        loss_format: str = ".4f") -> dict:
    """The training loop of the examples: epochs ``first_epoch`` .. ``epochs - 1`` of
    ``train_epoch`` over ``loader`` (set to each epoch's order, ``start_epoch``) under one
    progress bar. ``model`` is what is trained (a ``DistributedDataParallel`` wrapper
    too). Returns the history: per-step losses (``loss``), per-epoch mean training loss
    over the ranks (``epoch_loss``) and, under its name, each of ``metrics`` (functions of
    no argument) evaluated after every epoch. ``describe(epochs_done, history)`` is the
    line reported after the first epoch and every ``report_every``-th; ``after_epoch``
    (of the epochs done) runs last in every epoch (checkpoints)."""
    metrics = metrics or {}
    history: dict = {"loss": [], "epoch_loss": [], **{name: [] for name in metrics}}
    bar = progress((epochs - first_epoch) * len(loader), show_progress)
    for epoch in range(first_epoch, epochs):
        losses = train_epoch(model, start_epoch(loader, epoch), optimizer, loss_fn, scheduler,
                             bar, loss_format)
        history["loss"] += losses
        history["epoch_loss"].append(mean_over_ranks(float(np.mean(losses))))
        for name, metric in metrics.items():
            history[name].append(metric())
        if describe is not None and (epoch == first_epoch or (epoch + 1) % report_every == 0):
            report(bar, describe(epoch + 1, history))
        if after_epoch is not None:
            after_epoch(epoch + 1)
    if bar is not None:
        bar.close()
    return history


def predict(model: Any, inputs: np.ndarray, batch_size: int = 100) -> np.ndarray:
    """``model`` on ``inputs`` in eval mode, without a graph, ``batch_size`` at a time."""
    model.eval()
    with nb.no_grad():
        out = [model(nb.tensor(inputs[i:i + batch_size])).numpy()
               for i in range(0, len(inputs), batch_size)]
    model.train()
    return np.concatenate(out)


def report(bar: Any, line: str) -> None:
    """Print ``line`` above the bar (or plainly, without one), on the main process."""
    if not is_main_process():
        return
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
    """Save ``fig`` to ``path`` on the main process."""
    if not is_main_process():
        return
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"figure saved to {path}")


def save_plot(draw: Callable[[Any], Any], path: str) -> None:
    """The figure ``draw(plt)`` makes on ``plt`` (matplotlib.pyplot) saved to ``path``; a
    note instead of a figure without matplotlib."""
    plt = pyplot()
    if plt is None:
        print("matplotlib is not installed (pip install nbgrad[examples]): no figure")
        return
    save_figure(draw(plt), path)


def losses_axis(ax: Any, losses: Sequence[float], label: str = "training loss") -> None:
    ax.plot(losses, lw=0.8)
    ax.set(xlabel="step", ylabel=label, yscale="log")


def fit_field_map(model: Any, data: dict, loader: DataLoader, optimizer: Any, scheduler: Any,
                  loss_fn: Callable, epochs: int, show_progress: bool = True,
                  trained: Any = None) -> dict:
    """``fit`` for the examples that learn a field-to-field map (``field_example_main``):
    ``trained`` (``model`` itself by default, or its ``DistributedDataParallel``
    wrapper) trained on ``loader``, the test relative L2 of ``model`` on ``data``
    (``test_relative_l2``) evaluated and reported after every epoch; the history also
    holds the ``model`` and the ``data``."""

    def describe(epochs_done: int, history: dict) -> str:
        return (f"epoch {epochs_done:3d}/{epochs}  train rel L2 "
                f"{history['epoch_loss'][-1]:.4f}  test rel L2 "
                f"{history['test_relative_l2'][-1]:.4f}")

    def test_l2() -> float:
        return relative_l2(predict(model, data["x_test"]), data["y_test"])

    history = fit(model if trained is None else trained, loader, optimizer, loss_fn, epochs,
                  metrics={"test_relative_l2": test_l2}, describe=describe,
                  scheduler=scheduler, show_progress=show_progress)
    history.update(model=model, data=data)
    return history


def field_panels(plt: Any, panels: list[tuple[np.ndarray, str]], losses: list[float]) -> Any:
    """A figure of 2-D fields on [0, 1]^2 (``(field, title)``, the field's first axis
    vertical), each with its colour bar, and the training loss on the right."""
    fig, axes = plt.subplots(1, len(panels) + 1, figsize=(16, 3.2))
    for ax, (field, title) in zip(axes, panels):
        shown = ax.imshow(field, origin="lower", extent=(0, 1, 0, 1))
        ax.set_title(title)
        fig.colorbar(shown, ax=ax, fraction=0.046)
    losses_axis(axes[-1], losses, "relative L2 (train)")
    return fig


class HelpWithDefaults(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` that shows every option's default, but for the two that say nothing:
    False (a flag, off unless given) and None (the help text says what is used then)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


def command_line(name: str, doc: str, plot_help: str = "where to save prediction vs truth",
                 epochs: int | None = None, quick: bool = True) -> argparse.ArgumentParser:
    """The parser of example ``name`` with the options every example takes: ``--quick``
    (a reduced size, unless ``quick`` is False), ``--epochs``, ``--seed``,
    ``--no-progress`` and ``--plot``. Every option's ``--help`` line shows its default
    (``HelpWithDefaults``), so an option added to it needs a help text."""
    parser = argparse.ArgumentParser(prog=f"python -m nbgrad.examples {name}",
                                     description=doc.splitlines()[0],
                                     formatter_class=HelpWithDefaults)
    if quick:
        parser.add_argument("--quick", action="store_true",
                            help="a reduced size: fewer samples and epochs (tests)")
    parser.add_argument("--epochs", type=int, default=epochs,
                        help="epochs to train" if epochs else
                        "epochs to train (default: the example's, fewer with --quick)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the initial weights and the order of the data")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--plot", metavar="PNG", default=f"{name}.png", help=plot_help)
    return parser


def check_distributed(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exit with a usage message when ``--distributed`` was asked for without mpi4py,
    rather than with a traceback from inside the training."""
    if getattr(args, "distributed", False) and not mpi_available():
        parser.error("--distributed needs mpi4py and an MPI library (pip install "
                     "nbgrad[mpi]); start the ranks with mpiexec -n N python -m "
                     "nbgrad.examples ...")


def mpi_available() -> bool:
    return importlib.util.find_spec("mpi4py") is not None


def add_distributed_options(parser: argparse.ArgumentParser, batch_size: int) -> None:
    """``--batch-size`` (the global batch) and ``--distributed``, for the examples that run
    data-parallel under ``mpiexec``."""
    parser.add_argument("--batch-size", type=int, default=batch_size,
                        help="the batch (with --distributed: over all ranks)")
    parser.add_argument("--distributed", action="store_true",
                        help="data-parallel over the ranks of mpiexec -n N (needs mpi4py)")


def field_example_main(argv: list[str] | None, name: str, doc: str, train: Callable,
                       plot: Callable, sizes: dict, batch_size: int, lr: float,
                       distributed: bool = False,
                       lr_help: str = "Adam's initial learning rate") -> int:
    """The command line of the examples that learn a field-to-field map with a relative L2
    loss (darcy-gno, darcy-fno, burgers-fno): ``train(**sizes[...], batch_size, lr, seed,
    show_progress)`` returns the history that the metric table and ``plot`` read. With
    ``distributed``, ``train`` also takes ``distributed`` and the command line
    ``--distributed`` (run under ``mpiexec``). ``lr_help``: what ``--lr`` sets."""
    parser = command_line(name, doc)
    parser.add_argument("--lr", type=float, default=lr, help=lr_help)
    if distributed:
        add_distributed_options(parser, batch_size)
    else:
        parser.add_argument("--batch-size", type=int, default=batch_size,
                            help="samples per step")
    args = parser.parse_args(argv)
    check_distributed(parser, args)
    size = dict(sizes["quick" if args.quick else "full"])
    if args.epochs is not None:
        size["epochs"] = args.epochs
    if distributed:
        size["distributed"] = args.distributed
    start = time.perf_counter()
    history = train(**size, batch_size=args.batch_size, lr=args.lr, seed=args.seed,
                    show_progress=not args.no_progress)
    if is_main_process():
        print(metric_table([("epochs", size["epochs"]),
                            ("train samples", size["n_train"]),
                            ("final training relative L2", history["epoch_loss"][-1]),
                            ("test relative L2", history["test_relative_l2"][-1]),
                            ("seconds", round(time.perf_counter() - start, 1))]))
        plot(history, args.plot)
    return 0
