"""Datasets and batching with ``torch.utils.data``'s names and semantics: ``Dataset``,
``TensorDataset``, ``Subset``, ``random_split``, ``DataLoader`` and ``default_collate``."""

from .dataloader import DataLoader, default_collate
from .dataset import Dataset, Subset, TensorDataset, random_split

__all__ = ["DataLoader", "Dataset", "Subset", "TensorDataset", "default_collate",
           "random_split"]
