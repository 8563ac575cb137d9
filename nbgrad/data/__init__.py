"""Datasets and batching with ``torch.utils.data``'s names and semantics: ``Dataset``,
``TensorDataset``, ``Subset``, ``random_split``, ``DataLoader``, ``default_collate`` and
the samplers ``SequentialSampler``, ``RandomSampler`` and ``DistributedSampler``."""

from .dataloader import DataLoader, default_collate
from .dataset import Dataset, Subset, TensorDataset, random_split
from .sampler import DistributedSampler, RandomSampler, SequentialSampler

__all__ = ["DataLoader", "Dataset", "DistributedSampler", "RandomSampler",
           "SequentialSampler", "Subset", "TensorDataset", "default_collate", "random_split"]
