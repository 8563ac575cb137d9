"""``nbgrad.utils.data``: ``nbgrad.data`` under PyTorch's path (``torch.utils.data``), so
that ``from torch.utils.data import DataLoader`` ports by its import line alone."""

from . import data  # noqa: F401  (nb.utils.data after import nbgrad, as torch.utils.data)
