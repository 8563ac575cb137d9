"""Run the benchmark suites and print one ratio table: ``python -m benchmarks [suite ...]``.
``python -m benchmarks compile [workload ...]`` measures compile latency instead
(bench_compile.py: fresh processes, empty kernel cache; minutes).
``python -m benchmarks compiled [workload ...]`` times nb.compile against nbgrad eager,
PyTorch eager, torch.compile and JAX jit (bench_compiled.py; its own table).
``python -m benchmarks limits`` only measures and prints this host's limits (limits.py:
GEMM peaks and memory bandwidth; a few seconds), which a full run measures first and
uses for the table's "of bound" column.

Each suite is a module ``benchmarks/bench_<name>.py`` with ``run(torch) -> list[Row]``
(``torch`` is None where PyTorch is not installed). ``--torch-first`` imports PyTorch
before nbgrad: users import them in either order, and each runtime's thread pool starts
when it is imported. ``--jax first|after`` imports JAX before or right after nbgrad and
runs a compiled JAX step before each of nbgrad's timed blocks, so that nbgrad's times
can be compared with a run without JAX.
"""

from __future__ import annotations

import argparse
import importlib
import sys

SUITES = ["core", "activation", "norm", "conv", "gno", "spectral", "bases", "hvp", "train",
          "surface", "resample", "attention", "fno", "operators",
          "optim",
          "examples",
          "distributed",
          ]


def main() -> None:
    if sys.argv[1:2] == ["compile"]:
        from .bench_compile import main as compile_main

        compile_main(sys.argv[2:])
        return
    if sys.argv[1:2] == ["compiled"]:
        from .bench_compiled import main as compiled_main

        compiled_main(sys.argv[2:])
        return
    if sys.argv[1:2] == ["limits"]:
        _limits_main()
        return
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("suites", nargs="*", choices=SUITES + [[]], default=[],
                        help="suites to run (default: all)")
    parser.add_argument("--torch-first", action="store_true",
                        help="import PyTorch before nbgrad (default: nbgrad first)")
    parser.add_argument("--jax", choices=["first", "after"],
                        help="import JAX before nbgrad or after it, and run a JAX step "
                             "before each of nbgrad's timed blocks")
    args = parser.parse_args()
    jax = _import_jax() if args.jax == "first" else None
    if args.torch_first:
        importlib.import_module("torch")
    import numba

    import nbgrad  # noqa: F401  (starts nbgrad's kernel thread pool)

    from .harness import THREADS, jax_step, print_table, torch_or_none, use_neighbour
    from .limits import format_limits, measure_limits

    if args.jax == "after":
        jax = _import_jax()
    numba.set_num_threads(THREADS)
    torch = torch_or_none()
    order = "PyTorch first" if args.torch_first else "nbgrad first"
    print(f"threads: {THREADS} (nbgrad and PyTorch); PyTorch: "
          f"{torch.__version__ if torch else 'not installed (nbgrad times only)'}; "
          f"import order: {order}")
    if jax is not None:
        use_neighbour(jax_step(jax))
        print(f"JAX {jax.__version__} imported {'before' if args.jax == 'first' else 'after'} "
              "nbgrad; a JAX step runs before each of nbgrad's timed blocks")
    limits = measure_limits(THREADS)
    print(format_limits(limits))
    rows = []
    for name in args.suites or SUITES:
        module = importlib.import_module(f"benchmarks.bench_{name}")
        rows.extend(module.run(torch))
    print()
    print_table(rows, limits)


def _limits_main() -> None:
    import numba

    from .harness import THREADS
    from .limits import format_limits, measure_limits

    numba.set_num_threads(THREADS)
    print(f"threads: {THREADS}")
    print(format_limits(measure_limits(THREADS)))


def _import_jax():
    try:
        return importlib.import_module("jax")
    except ImportError:
        sys.exit("python -m benchmarks: --jax needs JAX (pip install jax)")


if __name__ == "__main__":
    main()
