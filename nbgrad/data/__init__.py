"""Datasets and batching with ``torch.utils.data``'s names and semantics: ``Dataset``,
``TensorDataset``, ``Subset``, ``random_split``, ``DataLoader`` (with worker processes and
``get_worker_info``), ``default_collate`` and the samplers ``SequentialSampler``,
``RandomSampler`` and ``DistributedSampler``; and, for neural operators, neuraloperator's
``UnitGaussianNormalizer`` and the data processors that wrap a model with it."""

from .collate import default_collate
from .dataloader import DataLoader
from .dataset import Dataset, Subset, TensorDataset, random_split
from .sampler import DistributedSampler, RandomSampler, SequentialSampler
from .transforms import DataProcessor, DefaultDataProcessor, UnitGaussianNormalizer
from .workers import WorkerInfo, get_worker_info

__all__ = ["DataLoader", "DataProcessor", "Dataset", "DefaultDataProcessor",
           "DistributedSampler", "RandomSampler", "SequentialSampler", "Subset",
           "TensorDataset", "UnitGaussianNormalizer", "WorkerInfo", "default_collate",
           "get_worker_info", "random_split"]
