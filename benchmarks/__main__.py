"""Run the benchmark suites and print one ratio table: ``python -m benchmarks [suite ...]``.

Each suite is a module ``benchmarks/bench_<name>.py`` with ``run(torch) -> list[Row]``
(``torch`` is None where PyTorch is not installed).
"""

from __future__ import annotations

import argparse
import importlib

import numba

# nbgrad first: its kernel thread pool must start before PyTorch loads its own libgomp
# (see nbgrad/threads.py); imported for that side effect.
import nbgrad  # noqa: F401

from .harness import THREADS, print_table, torch_or_none

SUITES = ["core", "activation", "conv", "gno", "bases", "hvp"]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("suites", nargs="*", choices=SUITES + [[]], default=[],
                        help="suites to run (default: all)")
    args = parser.parse_args()
    numba.set_num_threads(THREADS)
    torch = torch_or_none()
    print(f"threads: {THREADS} (nbgrad and PyTorch); PyTorch: "
          f"{torch.__version__ if torch else 'not installed (nbgrad times only)'}")
    rows = []
    for name in args.suites or SUITES:
        module = importlib.import_module(f"benchmarks.bench_{name}")
        rows.extend(module.run(torch))
    print()
    print_table(rows)


if __name__ == "__main__":
    main()
