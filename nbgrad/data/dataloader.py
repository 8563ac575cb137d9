"""DataLoader: batches of a map-style dataset in a reproducible order, made in the main
process or in worker processes (``workers.py``)."""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from .. import rng
from . import workers
from .collate import gather_function
from .dataset import Dataset, check_generator, check_seed


class DataLoader:
    """Batches of ``dataset``: ``batch_size`` items each, combined by ``collate_fn``
    (``default_collate`` when None); ``drop_last`` drops a last incomplete batch
    (``torch.utils.data.DataLoader``'s signature; ``seed=`` is nbgrad's own).

    Order: the items in index order, or with ``shuffle=True`` a permutation per epoch,
    fixed when the epoch's iterator is made (``iter(loader)``, as in PyTorch):

    * by default, drawn from the default generator, so ``nb.manual_seed(s)`` fixes every
      epoch's order (PyTorch's behaviour); restore ``nb.get_rng_state()`` to resume;
    * with ``generator=`` (an ``nb.Generator`` or a ``numpy.random.Generator``), drawn
      from it, advancing it and not the default generator;
    * with ``seed=``, epoch ``e``'s permutation comes from
      ``numpy.random.default_rng(seed)`` advanced ``e`` jumps (``PCG64.jumped(e)``), so
      epoch ``e`` has the same order in every run whatever else is drawn. Each
      ``iter(loader)`` starts the next epoch (0, 1, 2, ...); ``set_epoch(e)`` makes the
      next iteration epoch ``e``, so a resumed run continues the exact order.

    ``sampler=`` (an iterable of dataset indices with a length, such as
    ``DistributedSampler``) gives the order instead; it excludes ``shuffle``, ``seed`` and
    ``generator``, and its own ``set_epoch`` (if any) picks its epoch, as in PyTorch.
    ``batch_sampler=`` (an iterable of lists of indices with a length) gives whole
    batches; it excludes ``batch_size``, ``shuffle``, ``sampler``, ``drop_last`` and
    ``seed``, and ``len(loader)`` is its length.

    Each ``iter(loader)`` also fixes a base seed for the workers (an int in [0, 2**63)):
    a hash of the state of the order's generator (the epoch's own with ``seed=``, else
    ``generator`` or the default generator) after the order is drawn, and of the
    epoch count. PyTorch draws it from the generator; nbgrad draws nothing, so every
    generator advances exactly as with ``num_workers=0`` and as before workers existed,
    while a manual seed still fixes the workers' seeds and each epoch gets new ones.

    ``num_workers=k > 0`` loads the batches in ``k`` worker processes
    (``nbgrad/data/workers.py``): batch ``i`` of an epoch is made by worker ``i % k``
    and the batches come back in order, the same batches as with ``num_workers=0``.
    ``collate_fn`` runs in the workers; tensors cross as NumPy arrays.
    ``multiprocessing_context`` is a start method name or a ``multiprocessing``
    context; the default is ``'fork'`` where it exists (Linux, as PyTorch), else the
    platform's default. Under ``'fork'`` a worker must not run a *parallel* nbgrad
    kernel (an op on ``>= 2**17`` elements): Numba's GNU OpenMP layer terminates a forked
    process that does, and the loader then raises a RuntimeError saying so; indexing
    and collating are safe. For datasets that run large nbgrad ops per item, pass
    ``multiprocessing_context='spawn'`` (or ``'forkserver'``; the dataset, collate_fn and
    worker_init_fn must then pickle). ``prefetch_factor`` (default 2) batches per worker
    are requested ahead; ``persistent_workers=True`` keeps the workers between epochs;
    ``worker_init_fn(worker_id)`` runs first in each worker, after its seeding (see
    ``workers.seed_worker``); ``timeout > 0`` raises a RuntimeError when a batch takes
    longer than ``timeout`` seconds. ``pin_memory`` is accepted and does nothing
    (there is no GPU to pin memory for).

    For a ``TensorDataset`` (or a ``Subset`` of one) with the default ``collate_fn``,
    a batch is one fancy index of each whole tensor by the batch's indices, with the
    same result as collating the items one by one.
    """

    def __init__(self, dataset: Dataset, batch_size: int | None = 1, shuffle: bool = False,
                 sampler: Iterable[int] | None = None,
                 batch_sampler: Iterable[Sequence[int]] | None = None,
                 num_workers: int = 0,
                 collate_fn: Callable[[list[Any]], Any] | None = None,
                 pin_memory: bool = False, drop_last: bool = False, timeout: float = 0,
                 worker_init_fn: Callable[[int], None] | None = None,
                 multiprocessing_context: Any = None, generator: Any = None, *,
                 prefetch_factor: int | None = None, persistent_workers: bool = False,
                 seed: int | None = None):
        _check_dataset(dataset)
        self.batch_sampler = _check_batch_sampler(batch_sampler, batch_size, shuffle,
                                                  sampler, drop_last, seed)
        self.sampler = _check_sampler(sampler, shuffle, seed, generator)
        self.dataset = dataset
        self.batch_size = None if batch_sampler is not None else _check_batch_size(batch_size)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.generator = check_generator("DataLoader", generator, seed)
        self.seed = check_seed("DataLoader", seed)
        if collate_fn is not None and not callable(collate_fn):
            raise TypeError(f"DataLoader: collate_fn must be callable or None, got "
                            f"{type(collate_fn).__name__}")
        self.collate_fn = collate_fn
        self.num_workers = workers.check_num_workers(num_workers)
        self.timeout = workers.check_timeout(timeout)
        self.prefetch_factor = workers.check_prefetch_factor(prefetch_factor,
                                                             self.num_workers)
        self.persistent_workers = workers.check_persistent(persistent_workers,
                                                           self.num_workers)
        if worker_init_fn is not None and not callable(worker_init_fn):
            raise TypeError(f"DataLoader: worker_init_fn must be callable or None, got "
                            f"{type(worker_init_fn).__name__}")
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = workers.check_context(multiprocessing_context,
                                                             self.num_workers)
        self.pin_memory = bool(pin_memory)  # a no-op: all memory is host memory
        self._epoch = 0
        self._iterator: workers.WorkerIterator | None = None
        if len(self) == 0:
            raise ValueError(f"DataLoader: an epoch would have no batches (a dataset of "
                             f"{len(dataset)} items, batch_size={self.batch_size}, "
                             f"drop_last={self.drop_last})")

    def __len__(self) -> int:
        """The number of batches per epoch (``torch.utils.data.DataLoader``'s len)."""
        if self.batch_sampler is not None:
            return len(self.batch_sampler)
        items = len(self.dataset) if self.sampler is None else len(self.sampler)
        if self.drop_last:
            return items // self.batch_size
        return -(-items // self.batch_size)

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration epoch ``epoch`` (its order depends on the seed and
        ``epoch`` only). Not available with ``sampler=`` (set the sampler's epoch), nor on
        a shuffling loader without ``seed=``, whose generator's state is the order: save
        and restore that state (``nb.get_rng_state()`` or ``generator.get_state()``) to
        resume such a loader."""
        if self.sampler is not None or self.batch_sampler is not None:
            raise RuntimeError("DataLoader.set_epoch: this loader's order comes from "
                               "sampler=; call the sampler's set_epoch instead")
        if self.shuffle and self.seed is None:
            source = ("generator=; save and restore its state" if self.generator is not None
                      else "the default generator; save and restore nb.get_rng_state()")
            raise RuntimeError(f"DataLoader.set_epoch: this loader draws its orders from "
                               f"{source} to resume it, or construct it with seed=")
        if isinstance(epoch, bool) or not isinstance(epoch, int | np.integer):
            raise TypeError(f"DataLoader.set_epoch: epoch must be an int, got "
                            f"{type(epoch).__name__}")
        if epoch < 0:
            raise ValueError(f"DataLoader.set_epoch: epoch must be >= 0, got {epoch}")
        self._epoch = int(epoch)

    def __iter__(self) -> Iterator[Any]:
        batches, base_seed = self._epoch_plan()
        self._epoch += 1
        if self.num_workers == 0:
            gather = gather_function(self.dataset, self.collate_fn)
            return (gather(indices) for indices in batches)
        iterator = self._iterator
        if iterator is not None and iterator.alive():
            iterator.reset(batches)  # persistent workers: the next epoch, same processes
            return iterator
        iterator = workers.WorkerIterator(self, batches, base_seed)
        if self.persistent_workers:
            self._iterator = iterator
        return iterator

    def _epoch_plan(self) -> tuple[Iterator[np.ndarray], int]:
        """This epoch's batches of dataset indices, and its base seed (from the order's
        source after the order is drawn, without drawing)."""
        if self.seed is not None:
            source = np.random.Generator(np.random.PCG64(self.seed).jumped(self._epoch))
        else:
            source = rng.resolve(self.generator, "DataLoader")
        if self.batch_sampler is not None:
            batches = (np.asarray(b, dtype=np.int64).reshape(-1)
                       for b in iter(self.batch_sampler))
        else:
            order = self._epoch_order(source)
            stop = len(self) * self.batch_size if self.drop_last else len(order)
            batches = _slices(order, self.batch_size, stop)
        return batches, _base_seed(source, self._epoch)

    def _epoch_order(self, source: np.random.Generator) -> np.ndarray:
        """The dataset indices in this epoch's order."""
        if self.sampler is not None:
            return np.fromiter(self.sampler, np.int64)
        items = len(self.dataset)
        if not self.shuffle:
            return np.arange(items)
        return source.permutation(items)



def _base_seed(source: np.random.Generator, epoch: int) -> int:
    """An int in [0, 2**63) from ``source``'s state and ``epoch``, drawing nothing."""
    state = pickle.dumps(source.bit_generator.state, protocol=4) + epoch.to_bytes(8, "little")
    return int.from_bytes(hashlib.sha256(state).digest()[:8], "little") >> 1


def _slices(order: np.ndarray, batch_size: int, stop: int) -> Iterator[np.ndarray]:
    """The batches of ``order[:stop]`` (a function, so persistent workers' iterator
    holds no reference back to the loader)."""
    for start in range(0, stop, batch_size):
        yield order[start:start + batch_size]


def _check_dataset(dataset: Any) -> None:
    if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
        raise TypeError(f"DataLoader: dataset must have __len__ and __getitem__ (a map-style "
                        f"Dataset), got {type(dataset).__name__}")


def _check_sampler(sampler: Any, shuffle: bool, seed: Any, generator: Any) -> Any:
    if sampler is None:
        return None
    if not (hasattr(sampler, "__iter__") and hasattr(sampler, "__len__")):
        raise TypeError(f"DataLoader: sampler must be an iterable of indices with a length, "
                        f"got {type(sampler).__name__}")
    if shuffle or seed is not None or generator is not None:
        raise ValueError("DataLoader: sampler is mutually exclusive with shuffle, seed and "
                         "generator (the sampler gives the order)")
    return sampler


def _check_batch_size(batch_size: Any) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int | np.integer):
        raise TypeError(f"DataLoader: batch_size must be an int, got "
                        f"{type(batch_size).__name__} {batch_size!r}")
    if batch_size < 1:
        raise ValueError(f"DataLoader: batch_size must be >= 1, got {batch_size}")
    return int(batch_size)



def _check_batch_sampler(batch_sampler: Any, batch_size: Any, shuffle: bool, sampler: Any,
                         drop_last: bool, seed: Any) -> Any:
    if batch_sampler is None:
        return None
    if not (hasattr(batch_sampler, "__iter__") and hasattr(batch_sampler, "__len__")):
        raise TypeError(f"DataLoader: batch_sampler must be an iterable of index lists with "
                        f"a length, got {type(batch_sampler).__name__}")
    if batch_size != 1 or shuffle or sampler is not None or drop_last or seed is not None:
        raise ValueError("DataLoader: batch_sampler option is mutually exclusive with "
                         "batch_size, shuffle, sampler, drop_last and seed")
    return batch_sampler
