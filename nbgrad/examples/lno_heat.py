"""Laplace neural operator on the 1-D heat equation: ``python -m nbgrad.examples lno-heat``.

The reference library's (athena's) LNO heat example: learn ``u0 -> u(t* = 1)`` for
``u_t = 0.01 u_xx`` on 32 grid nodes from 200 pairs (``nbgrad.datasets.heat1d``; 50 test
pairs). The network is athena's: ``nn.LNO(32 -> 32, 8 modes)`` - ReLU -
``nn.LNO(32 -> 32, 8 modes)``, each the dynamic (pole-residue) layer
``D(mu) diag(beta) E(mu) u + W u + b`` with learned poles ``mu`` and residues ``beta``.
Adam (lr 1e-2, batch 20, cosine annealing to lr / 100; athena uses plain SGD at lr 1e-3,
one sample per step, for 100 epochs) on the mean squared error; the metric is the test
MSE, athena's.
"""

from __future__ import annotations

from nbgrad import nn
from nbgrad.examples import _heat

#: the full run and the reduced one (tests, notebook)
SIZES = {"full": dict(epochs=300), "quick": dict(epochs=40)}


def build_model(grid: int = 32, hidden: int = 32, modes: int = 8) -> nn.Sequential:
    """LNO(grid -> hidden, modes) - ReLU - LNO(hidden -> grid, modes), learned poles."""
    return _heat.operator_net(lambda n_in, n_out: nn.LNO(n_in, n_out, modes), grid, hidden)


def train(epochs: int = 300, lr: float = 1e-2, batch_size: int = 20, hidden: int = 32,
          modes: int = 8, n_train: int = 200, n_test: int = 50, seed: int = 0,
          show_progress: bool = True) -> dict:
    """Train from ``nb.manual_seed(seed)`` weights (``_heat.train``)."""
    return _heat.train(lambda grid: build_model(grid, hidden, modes), epochs, lr, batch_size,
                       n_train, n_test, seed, show_progress)


def main(argv: list[str] | None = None) -> int:
    return _heat.main(argv, "lno-heat", __doc__.splitlines()[0], train, SIZES)
