"""Samplers, the orders a ``DataLoader(sampler=...)`` reads a dataset in:
``SequentialSampler``, ``RandomSampler``, and ``DistributedSampler``, with which each rank
of a data-parallel job reads its own shard (``torch.utils.data``'s names and semantics)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from .. import rng
from ..world import job
from .dataset import check_generator, check_seed


class SequentialSampler:
    """The indices ``0 .. len(data_source) - 1`` in order."""

    def __init__(self, data_source: Any) -> None:
        self.data_source = data_source

    def __len__(self) -> int:
        return len(self.data_source)

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))


class RandomSampler:
    """Random indices of ``data_source``: a permutation (``num_samples`` beyond
    ``len(data_source)`` take further permutations, as in PyTorch) or, with
    ``replacement``, ``num_samples`` independent draws.

    The order is drawn when the iterator is made (``iter(sampler)``), from ``generator``
    (an ``nb.Generator`` or ``numpy.random.Generator``, advanced by the draw) or, without
    one, from the default generator that ``nb.manual_seed`` seeds. A ``DataLoader(...,
    shuffle=True)`` without ``seed=`` draws the same order as this sampler without
    replacement from the same generator state.
    """

    def __init__(self, data_source: Any, replacement: bool = False,
                 num_samples: int | None = None, generator: Any = None) -> None:
        if not isinstance(replacement, bool):
            raise TypeError(f"RandomSampler: replacement must be a bool, got "
                            f"{type(replacement).__name__}")
        if num_samples is not None and (isinstance(num_samples, bool) or not isinstance(
                num_samples, int | np.integer) or num_samples <= 0):
            raise ValueError(f"RandomSampler: num_samples must be a positive int, got "
                             f"{num_samples!r}")
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = None if num_samples is None else int(num_samples)
        self.generator = check_generator("RandomSampler", generator, None)

    @property
    def num_samples(self) -> int:
        """``num_samples``, or the dataset's length (read each time, as in PyTorch)."""
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self) -> Iterator[int]:
        return iter(self._order().tolist())

    def _order(self) -> np.ndarray:
        items, count = len(self.data_source), self.num_samples
        if count == 0:
            return np.zeros(0, np.int64)
        if items == 0:
            raise ValueError(f"RandomSampler: cannot draw {count} samples from an empty "
                             "data_source")
        source = rng.resolve(self.generator, "RandomSampler")
        if self.replacement:
            return source.integers(0, items, count, dtype=np.int64)
        rounds = [source.permutation(items) for _ in range(-(-count // items))]
        return np.concatenate(rounds)[:count]


class DistributedSampler:
    """The indices of rank ``rank``'s shard of ``dataset`` out of ``num_replicas``.

    Each epoch all ranks draw one permutation of ``range(len(dataset))`` from ``seed`` and
    the epoch (``numpy.random.PCG64(seed).jumped(epoch)``, the order ``DataLoader(...,
    shuffle=True, seed=seed)`` has in that epoch), or take index order with
    ``shuffle=False``; rank ``r`` takes positions ``r, r + num_replicas, r +
    2 num_replicas, ...`` of it. So ``batch_size`` items on each of ``num_replicas`` ranks
    are, step for step, the same items as one loader's batches of ``num_replicas *
    batch_size``. When ``len(dataset)`` is not a multiple of ``num_replicas``, the order
    is padded with its own first indices (``drop_last=False``) or cut
    (``drop_last=True``) so every rank has ``len(self)`` indices.

    ``num_replicas`` and ``rank`` default to the job's world size and rank, which
    ``nbgrad.distributed.init()`` records (``nbgrad/world.py``).
    Call ``set_epoch(epoch)`` before each epoch, as in PyTorch: otherwise every epoch has
    epoch 0's order.
    """

    def __init__(self, dataset: Any, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False) -> None:
        num_replicas, rank = _replicas_and_rank(num_replicas, rank)
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.shuffle = bool(shuffle)
        if seed is None:
            raise TypeError("DistributedSampler: seed must be an int shared by all ranks, "
                            "got None")
        self.seed = check_seed("DistributedSampler", seed)
        self.drop_last = bool(drop_last)
        self.epoch = 0
        items = len(dataset)
        if self.drop_last:
            self.num_samples = items // num_replicas
        else:
            self.num_samples = -(-items // num_replicas)
        self.total_size = self.num_samples * num_replicas

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Make the following iterations use epoch ``epoch``'s order."""
        if isinstance(epoch, bool) or not isinstance(epoch, int | np.integer) or epoch < 0:
            raise ValueError(f"DistributedSampler.set_epoch: epoch must be an int >= 0, got "
                             f"{epoch!r}")
        self.epoch = int(epoch)

    def __iter__(self) -> Iterator[int]:
        items = len(self.dataset)
        if self.shuffle:
            bits = np.random.PCG64(self.seed).jumped(self.epoch)
            order = np.random.Generator(bits).permutation(items)
        else:
            order = np.arange(items)
        if self.total_size > items:
            order = np.resize(order, self.total_size)  # repeats the order from its start
        shard = order[self.rank:self.total_size:self.num_replicas]
        return iter(shard.tolist())


def _replicas_and_rank(num_replicas: int | None, rank: int | None) -> tuple[int, int]:
    if num_replicas is None or rank is None:
        if job.size is None:
            raise RuntimeError("DistributedSampler: pass num_replicas and rank, or call "
                               "nbgrad.distributed.init() first")
        num_replicas = job.size if num_replicas is None else num_replicas
        rank = job.rank if rank is None else rank
    for name, value in (("num_replicas", num_replicas), ("rank", rank)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise TypeError(f"DistributedSampler: {name} must be an int, got "
                            f"{type(value).__name__}")
    if num_replicas < 1 or not 0 <= rank < num_replicas:
        raise ValueError(f"DistributedSampler: need num_replicas >= 1 and 0 <= rank < "
                         f"num_replicas, got num_replicas={num_replicas}, rank={rank}")
    return int(num_replicas), int(rank)
