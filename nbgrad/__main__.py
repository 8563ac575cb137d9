"""Command line: ``python -m nbgrad check`` gradchecks every registered op through its
samples; ``python -m nbgrad ops`` lists the registry."""

from __future__ import annotations

import argparse
import sys
import time

from . import REGISTRY
from .testing import check_registered


def _list_ops() -> int:
    width = max((len(name) for name in REGISTRY), default=2)
    for name in sorted(REGISTRY):
        op = REGISTRY[name]
        doc = (op.__doc__ or "").strip().splitlines()
        print(f"{name:<{width}}  {op.__module__}.{op.__qualname__}"
              + (f"  {doc[0]}" if doc else ""))
    print(f"{len(REGISTRY)} registered ops")
    return 0


def _check(names: list[str]) -> int:
    unknown = [n for n in names if n not in REGISTRY]
    if unknown:
        print(f"unknown op(s): {', '.join(unknown)}; see `python -m nbgrad ops`",
              file=sys.stderr)
        return 2
    names = names or sorted(REGISTRY)
    width = max((len(n) for n in names), default=2)
    print(f"{'op':<{width}}  samples  max abs err  max rel err  result   time")
    failed = []
    for name in names:
        start = time.perf_counter()
        r = check_registered(name)
        seconds = time.perf_counter() - start
        print(f"{name:<{width}}  {r.samples:>7}  {r.max_abs_error:>11.2e}  "
              f"{r.max_rel_error:>11.2e}  {'pass' if r.passed else 'FAIL':<6} "
              f"{seconds:>5.1f}s", flush=True)
        if not r.passed:
            failed.append(r)
    for r in failed:
        print(f"\n{r.op} failed:")
        for line in r.failures:
            print(f"  {line}")
    print(f"\n{len(names) - len(failed)} passed, {len(failed)} failed "
          f"(float64 central differences, eps=1e-6, atol=1e-5, rtol=1e-3)")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nbgrad", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="gradcheck every registered op (float64)")
    check.add_argument("ops", nargs="*", help="only these ops (default: all)")
    sub.add_parser("ops", help="list the registered ops")
    args = parser.parse_args(argv)
    if args.command == "ops":
        return _list_ops()
    return _check(args.ops)


if __name__ == "__main__":
    sys.exit(main())
