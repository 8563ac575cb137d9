"""``python -m nbgrad.examples NAME [options]``: run one of the examples."""

from __future__ import annotations

import importlib
import sys

EXAMPLES = {"digits": "a small CNN on the bundled 8x8 handwritten digits"}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in EXAMPLES:
        print("usage: python -m nbgrad.examples NAME [options]\n\nexamples:")
        for name, text in EXAMPLES.items():
            print(f"  {name:10s} {text}")
        return 0 if argv[:1] in ([], ["-h"], ["--help"]) else 2
    module = importlib.import_module(f"nbgrad.examples.{argv[0]}")
    return module.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
