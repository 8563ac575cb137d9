"""Datasets and batching with ``torch.utils.data``'s names and semantics: ``Dataset``,
``TensorDataset``, ``Subset``, ``random_split``, ``DataLoader``, ``default_collate`` and
``DistributedSampler``."""

from .dataloader import DataLoader, default_collate
from .dataset import Dataset, Subset, TensorDataset, random_split
from .sampler import DistributedSampler

__all__ = ["DataLoader", "Dataset", "DistributedSampler", "Subset", "TensorDataset",
           "default_collate", "random_split"]
