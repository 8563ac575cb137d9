"""Command line: ``python -m nbgrad check`` gradchecks every registered op through its
samples, first and second derivatives; ``python -m nbgrad ops`` lists the registry."""

from __future__ import annotations

import argparse
import sys
import time

from . import REGISTRY
from .testing import check_registered


def _list_ops() -> int:
    width = max((len(name) for name in REGISTRY), default=2)
    print(f"{'op':<{width}}  d2  class")
    for name in sorted(REGISTRY):
        op = REGISTRY[name]
        doc = (op.__doc__ or "").strip().splitlines()
        print(f"{name:<{width}}  {'yes' if op.has_vjp() else 'no ':<3} "
              f"{op.__module__}.{op.__qualname__}" + (f"  {doc[0]}" if doc else ""))
    without = sorted(n for n, op in REGISTRY.items() if not op.has_vjp())
    print(f"{len(REGISTRY)} registered ops; d2 = twice differentiable (create_graph=True)"
          + (f"; without second derivatives: {', '.join(without)}" if without else ""))
    return 0


def _check(names: list[str]) -> int:
    unknown = [n for n in names if n not in REGISTRY]
    if unknown:
        print(f"unknown op(s): {', '.join(unknown)}; see `python -m nbgrad ops`",
              file=sys.stderr)
        return 2
    names = names or sorted(REGISTRY)
    width = max((len(n) for n in names), default=2)
    print(f"{'op':<{width}}  samples  max abs err  max rel err  grad   gradgrad   time")
    failed = []
    for name in names:
        start = time.perf_counter()
        first = check_registered(name)
        second = check_registered(name, second_order=True)
        seconds = time.perf_counter() - start
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
          f"atol=1e-5, rtol=1e-3)")
    return 1 if failed else 0


def _verdict(report) -> str:
    return "pass" if report.passed else "FAIL"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nbgrad", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="gradcheck and gradgradcheck every registered op "
                                         "(float64)")
    check.add_argument("ops", nargs="*", help="only these ops (default: all)")
    sub.add_parser("ops", help="list the registered ops")
    args = parser.parse_args(argv)
    if args.command == "ops":
        return _list_ops()
    return _check(args.ops)


if __name__ == "__main__":
    sys.exit(main())
