"""Command line: ``python -m nbgrad demo`` trains a small graph neural operator and
gradchecks the ops it used; ``check`` gradchecks every registered op through its samples,
first and second derivatives; ``warmup`` compiles kernels ahead of time; ``ops`` lists
the registry; ``info`` prints the host (CPU, vector width, caches), Numba's target, the
GEMM's tile and block sizes chosen for it and the timings they were chosen by
(``--search`` times them again)."""

from __future__ import annotations

import argparse
import sys
import time

from . import REGISTRY
from .compiling import check_op, default_jobs, map_in_workers, warmup, workers_for
from .testing import saved_by


def _list_ops(saves: bool) -> int:
    width = max((len(name) for name in REGISTRY), default=2)
    print(f"{'op':<{width}}  d2  " + ("saves for backward" if saves else "class"))
    for name in sorted(REGISTRY):
        op = REGISTRY[name]
        doc = (op.__doc__ or "").strip().splitlines()
        if saves:  # runs the op on its first sample: compiles its kernels
            detail = ", ".join(saved_by(name)) or "-"
        else:
            detail = f"{op.__module__}.{op.__qualname__}" + (f"  {doc[0]}" if doc else "")
        print(f"{name:<{width}}  {'yes' if op.has_vjp() else 'no ':<3} {detail}")
    without = sorted(n for n, op in REGISTRY.items() if not op.has_vjp())
    print(f"{len(REGISTRY)} registered ops; d2 = twice differentiable (create_graph=True)"
          + (f"; without second derivatives: {', '.join(without)}" if without else ""))
    return 0


def _unknown(names: list[str]) -> bool:
    unknown = [n for n in names if n not in REGISTRY]
    if unknown:
        print(f"unknown op(s): {', '.join(unknown)}; see `python -m nbgrad ops`",
              file=sys.stderr)
    return bool(unknown)


def _check(names: list[str], jobs: int) -> int:
    if _unknown(names):
        return 2
    names = names or sorted(REGISTRY)
    width = max((len(n) for n in names), default=2)
    start = time.perf_counter()
    print(f"{'op':<{width}}  samples  max abs err  max rel err  grad   gradgrad   time")
    failed = []
    reports = map_in_workers(check_op, names, workers_for(names, jobs), None)
    for name, first, second, seconds in reports:
        print(f"{name:<{width}}  {first.samples:>7}  {first.max_abs_error:>11.2e}  "
              f"{first.max_rel_error:>11.2e}  {_verdict(first):<6} {_verdict(second):<8} "
              f"{seconds:>6.1f}s", flush=True)
        failed += [(label, r) for label, r in (("grad", first), ("gradgrad", second))
                   if not r.passed]
    for label, r in failed:
        print(f"\n{r.op} failed ({label}):")
        for line in r.failures:
            print(f"  {line}")
    bad_ops = {r.op for _, r in failed}
    print(f"\n{len(names) - len(bad_ops)} passed, {len(bad_ops)} failed "
          f"(first and second derivatives, float64 central differences, eps=1e-6, "
          f"atol=1e-5, rtol=1e-3) in {time.perf_counter() - start:.0f} s")
    return 1 if failed else 0


def _verdict(report) -> str:
    return "pass" if report.passed else "FAIL"


def _warmup(ops: str, dtypes: list[str], jobs: int) -> int:
    names = [n for n in ops.split(",") if n] if ops else sorted(REGISTRY)
    if _unknown(names):
        return 2
    start = time.perf_counter()
    times = warmup(names, dtypes, jobs)
    slowest = ", ".join(f"{n} {s:.0f} s" for n, s in sorted(times, key=lambda t: -t[1])[:5])
    print(f"compiled the kernels of {len(names)} ops for {', '.join(dtypes)} in "
          f"{time.perf_counter() - start:.0f} s with {jobs} worker(s); slowest: {slowest}")
    return 0


def _info(search_again: bool) -> int:
    from numba.core.registry import cpu_target

    from .kernels import tiles
    from .runtime import host

    facts = host.facts()
    _, cpu_name, features = cpu_target.target_context.codegen().magic_tuple()
    caches = ", ".join(f"{name} {size >> 10} KiB" for name, size in sorted(facts.caches.items()))
    print(f"cpu          {facts.cpu_model}")
    print(f"vectors      {facts.vector_bytes * 8}-bit ({facts.vector_bytes} bytes)")
    print(f"caches       {caches} per instance (from {facts.caches_from})")
    wide = "-prefer-256-bit" in features.split(",")
    print(f"numba target {cpu_name}" + (", full-width vectors (-prefer-256-bit)" if wide else ""))
    nr = tiles.TILE_VECTORS * facts.vector_bytes // 4
    print(f"gemm tile    {tiles.TILE_ROWS} x {tiles.TILE_VECTORS} vectors "
          f"({tiles.TILE_ROWS} x {nr} float32, {tiles.TILE_ROWS} x {nr // 2} float64): "
          f"{tiles.TILE_REASON}")
    _print_blocking(search_again)
    return 0


def _print_blocking(search_again: bool) -> None:
    """The GEMM blocking of kernels/gemm_search.py (searching now if no run has, or
    ``search_again``), each candidate's speed, and the float32 GEMM rate of nbgrad and of
    NumPy's BLAS."""
    from .kernels import gemm_search, matmul
    from .runtime.threads import get_num_threads

    threads = get_num_threads()
    found = gemm_search.result(threads, matmul.product, matmul.guessed_blocking(),
                               again=search_again)
    chosen = found.chosen
    print(f"gemm block   {_blocking_text(chosen)} by {matmul.NC} columns ({found.source}; "
          f"guessed from the caches: {_blocking_text(found.guess)})")
    if found.speed:
        print("  timed      (speed: the mean over the timed products of the fastest time over "
              "this one's)")
    for c, speed in sorted(found.speed.items(), key=lambda item: -item[1]):
        mark = "  <- chosen" if c == chosen else ""
        print(f"  timed      {_blocking_text(c):58s} speed {speed:.3f}{mark}")
    nb_rate, blas_rate = _gemm_rates(threads)
    print(f"gemm rate    float32 {_RATE_SIZE}^3 at {threads} threads: nbgrad {nb_rate:.0f} "
          f"GFLOP/s, NumPy's BLAS {blas_rate:.0f} GFLOP/s")


def _blocking_text(c) -> str:
    a_t = "copied" if c.pack_t else "in place"
    return (f"{c.depth_bytes} bytes of k, b in place to {c.span >> 10} KiB, "
            f"a^T {a_t}")


_RATE_SIZE = 1024


def _gemm_rates(threads: int) -> tuple[float, float]:
    """GFLOP/s of nbgrad's and NumPy's float32 _RATE_SIZE^3 products, best of five each,
    alternating."""
    import numpy as np

    from .kernels.matmul import product
    from .runtime.host import best_time

    rng = np.random.default_rng(0)
    a = rng.standard_normal((_RATE_SIZE, _RATE_SIZE)).astype(np.float32)
    b = rng.standard_normal((_RATE_SIZE, _RATE_SIZE)).astype(np.float32)
    one = np.zeros(1, np.int64)
    runs = (lambda: product(a[None], b[None], one, one, False, False, threads), lambda: a @ b)
    best = [float("inf")] * 2
    for _ in range(5):
        for i, run in enumerate(runs):
            best[i] = min(best[i], best_time(run, repeats=1))
    flops = 2 * _RATE_SIZE ** 3
    return flops / best[0] / 1e9, flops / best[1] / 1e9


def _jobs(text: str) -> int:
    jobs = int(text)
    if jobs < 1:
        raise argparse.ArgumentTypeError(f"--jobs must be at least 1, got {jobs}")
    return jobs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nbgrad", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    cores = default_jobs()
    demo = sub.add_parser("demo", help="train a small graph neural operator, gradcheck the "
                                       "ops it used and plot the fit")
    demo.add_argument("--epochs", type=int, default=600)
    demo.add_argument("--plot", metavar="PNG", default="nbgrad-demo.png")
    demo.add_argument("--no-progress", action="store_true")
    check = sub.add_parser("check", help="gradcheck and gradgradcheck every registered op "
                                         "(float64)")
    check.add_argument("ops", nargs="*", help="only these ops (default: all)")
    check.add_argument("--jobs", type=_jobs, default=cores,
                       help=f"worker processes (default: one per core, {cores})")
    warm = sub.add_parser("warmup", help="compile kernels ahead of time into the disk cache")
    warm.add_argument("--ops", default="", help="comma-separated ops (default: all)")
    warm.add_argument("--dtype", action="append", choices=["float32", "float64"],
                      help="repeatable (default: both)")
    warm.add_argument("--jobs", type=_jobs, default=cores,
                      help=f"worker processes (default: one per core, {cores})")
    ops = sub.add_parser("ops", help="list the registered ops")
    ops.add_argument("--saves", action="store_true",
                     help="which inputs and outputs each op saves for its backward (what "
                          "an in-place change makes backward refuse); runs every op once")
    info = sub.add_parser("info", help="the host's CPU, vector width and caches, and the "
                                       "GEMM tile and block sizes chosen for it")
    info.add_argument("--search", action="store_true",
                      help="time the GEMM's block sizes again (best on a quiet machine) and "
                           "keep the result")
    args = parser.parse_args(argv)
    if args.command == "info":
        return _info(args.search)
    if args.command == "ops":
        return _list_ops(args.saves)
    if args.command == "warmup":
        return _warmup(args.ops, args.dtype or ["float32", "float64"], args.jobs)
    if args.command == "demo":
        from .demo import main as demo_main

        return demo_main(args.epochs, args.plot, not args.no_progress)
    return _check(args.ops, args.jobs)


if __name__ == "__main__":
    sys.exit(main())
