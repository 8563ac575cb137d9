"""Datasets and batching with ``torch.utils.data``'s names and semantics: ``Dataset``,
``TensorDataset``, ``Subset``, ``random_split``, ``DataLoader`` (with worker processes and
``get_worker_info``), ``default_collate`` and the samplers ``SequentialSampler``,
``RandomSampler`` and ``DistributedSampler``."""

from .collate import default_collate
from .dataloader import DataLoader
from .dataset import Dataset, Subset, TensorDataset, random_split
from .sampler import DistributedSampler, RandomSampler, SequentialSampler
from .workers import WorkerInfo, get_worker_info

__all__ = ["DataLoader", "Dataset", "DistributedSampler", "RandomSampler",
           "SequentialSampler", "Subset", "TensorDataset", "WorkerInfo", "default_collate",
           "get_worker_info", "random_split"]
