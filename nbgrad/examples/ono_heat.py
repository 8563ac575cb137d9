"""Orthogonal neural operator on the 1-D heat equation: ``python -m nbgrad.examples ono-heat``.

The reference library's (athena's) ONO heat example: learn ``u0 -> u(t* = 1)`` for
``u_t = 0.01 u_xx`` on 32 grid nodes from 200 pairs (``nbgrad.datasets.heat1d``; 50 test
pairs). The network is athena's: ``nn.ONO(32 -> 32, k = 8)`` - ReLU -
``nn.ONO(32 -> 32, k = 8)``, each layer ``W (Q R Q^T u + u) + b`` with ``Q`` the
Gram-Schmidt orthonormalisation of a learned basis. Adam (lr 2e-2, batch 20, cosine
annealing to lr / 100; athena uses plain SGD at lr 1e-3, one sample per step, for 100
epochs) on the mean squared error; the metric is the test MSE, athena's.
"""

from __future__ import annotations

from nbgrad import nn
from nbgrad.examples import _heat

#: the full run and the reduced one (tests, notebook)
SIZES = {"full": dict(epochs=200), "quick": dict(epochs=25)}


def build_model(grid: int = 32, hidden: int = 32, k: int = 8) -> nn.Sequential:
    """ONO(grid -> hidden, k) - ReLU - ONO(hidden -> grid, k)."""
    return _heat.operator_net(lambda n_in, n_out: nn.ONO(n_in, n_out, k), grid, hidden)


def train(epochs: int = 200, lr: float = 2e-2, batch_size: int = 20, hidden: int = 32,
          k: int = 8, n_train: int = 200, n_test: int = 50, seed: int = 0,
          show_progress: bool = True) -> dict:
    """Train from ``nb.manual_seed(seed)`` weights (``_heat.train``)."""
    return _heat.train(lambda grid: build_model(grid, hidden, k), epochs, lr, batch_size,
                       n_train, n_test, seed, show_progress)


def main(argv: list[str] | None = None) -> int:
    return _heat.main(argv, "ono-heat", __doc__.splitlines()[0], train, SIZES)
