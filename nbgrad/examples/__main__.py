"""``python -m nbgrad.examples NAME [options]``: run one of the examples."""

from __future__ import annotations

import importlib
import sys

EXAMPLES = {
    "digits": "a small CNN on the bundled 8x8 handwritten digits",
    "gno-regression": "graph neural operator fit of [sin x, cos x] on a 20-point chain",
    "darcy-gno": "graph neural operator for 2-D Darcy flow, permeability -> pressure",
    "darcy-fno": "Fourier neural operator for 2-D Darcy flow, permeability -> pressure",
    "darcy-tfno": "Tucker-factorised FNO for Darcy flow as neuraloperator configures it",
    "burgers-fno": "1-D Fourier neural operator for viscous Burgers, u0 -> u(t=1)",
    "ono-heat": "orthogonal neural operator for the 1-D heat equation, u0 -> u(t=1)",
    "lno-heat": "Laplace neural operator for the 1-D heat equation, u0 -> u(t=1)",
    "lno-rollout": "Laplace neural operator time stepper for heat, rolled out",
    "gino-poisson": "geometry-informed neural operator for Poisson on point clouds, f -> u",
}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in EXAMPLES:
        print("usage: python -m nbgrad.examples NAME [options]\n\nexamples:")
        width = max(map(len, EXAMPLES))
        for name, text in EXAMPLES.items():
            print(f"  {name:{width}s}  {text}")
        print("\n`python -m nbgrad.examples NAME --help` lists the options of an example and "
              "their defaults.")
        return 0 if argv[:1] in ([], ["-h"], ["--help"]) else 2
    module = importlib.import_module(f"nbgrad.examples.{argv[0].replace('-', '_')}")
    return module.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
