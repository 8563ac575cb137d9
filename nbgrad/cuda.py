"""``nb.cuda``: what PyTorch scripts ask of ``torch.cuda`` before choosing a device.

nbgrad runs on the CPU, so ``device = 'cuda' if nb.cuda.is_available() else 'cpu'``
picks the CPU, and seeding the (absent) GPU generators does nothing.
"""

from __future__ import annotations


def is_available() -> bool:
    """False: nbgrad has no GPU backend."""
    return False


def device_count() -> int:
    """0: nbgrad has no GPU backend."""
    return 0


def manual_seed(seed: int) -> None:
    """Nothing to seed (``torch.cuda.manual_seed``); ``nb.manual_seed`` seeds nbgrad."""


def manual_seed_all(seed: int) -> None:
    """Nothing to seed (``torch.cuda.manual_seed_all``); ``nb.manual_seed`` seeds nbgrad."""
