"""DataLoader: batches of a map-style dataset in a reproducible order, and
``default_collate``, which stacks items into batch tensors."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from .. import rng
from ..ops.shape import stack
from ..tensor import Tensor, tensor
from .dataset import Dataset, Subset, TensorDataset, check_generator, check_seed


def default_collate(batch: Sequence[Any]) -> Any:
    """The items of ``batch`` combined into batch tensors (``torch.utils.data``'s rules).

    Tensors are stacked along a new first axis; numpy arrays and numpy scalars are
    stacked and converted as ``nb.tensor`` does; Python floats give a float64 tensor,
    ints an int64 tensor, bools a bool tensor; strings and bytes stay a list. Dicts give
    a dict of batches, one per key; tuples give a tuple of batches (PyTorch gives a list
    here), lists a list, namedtuples the same namedtuple type.
    """
    if len(batch) == 0:
        raise ValueError("default_collate: the batch is empty")
    first = batch[0]
    if isinstance(first, Tensor):
        return _stack_tensors(batch)
    if isinstance(first, str | bytes):
        return list(batch)
    if isinstance(first, np.ndarray | np.generic) and first.dtype.kind in "biuf":
        return tensor(np.stack(batch))
    if isinstance(first, bool | int):
        return tensor(list(batch))
    if isinstance(first, float):
        return tensor(list(batch), dtype=np.float64)
    if isinstance(first, Mapping):
        return {key: default_collate([item[key] for item in batch]) for key in first}
    if isinstance(first, Sequence):
        return _collate_sequences(batch)
    raise TypeError(f"default_collate: cannot batch items of type {type(first).__name__}; "
                    "items must be tensors, numeric numpy arrays or scalars, numbers, "
                    "strings, dicts or sequences of these (pass a collate_fn for others)")


def _stack_tensors(batch: Sequence[Tensor]) -> Tensor:
    shapes = {t.shape for t in batch}
    if len(shapes) > 1:
        raise ValueError(f"default_collate: the tensors of a batch must have one shape, got "
                         f"{sorted(shapes)} (pass a collate_fn to batch ragged items)")
    return stack(batch)


def _collate_sequences(batch: Sequence[Sequence[Any]]) -> Any:
    """Sequences of equal length, collated position by position."""
    first = batch[0]
    if any(len(item) != len(first) for item in batch):
        raise ValueError(f"default_collate: the sequences of a batch must have one length, "
                         f"got lengths {sorted({len(item) for item in batch})}")
    columns = [default_collate(column) for column in zip(*batch)]
    if isinstance(first, tuple) and hasattr(first, "_fields"):
        return type(first)(*columns)
    return tuple(columns) if isinstance(first, tuple) else columns


class DataLoader:
    """Batches of ``dataset``: ``batch_size`` items each, combined by ``collate_fn``
    (``default_collate`` when None); ``drop_last`` drops a last incomplete batch.

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

    For a ``TensorDataset`` (or a ``Subset`` of one) with the default ``collate_fn``,
    a batch is one fancy index of each whole tensor by the batch's indices, with the
    same result as collating the items one by one.
    """

    def __init__(self, dataset: Dataset, batch_size: int = 1, shuffle: bool = False, *,
                 drop_last: bool = False, seed: int | None = None,
                 generator: Any = None,
                 sampler: Iterable[int] | None = None,
                 collate_fn: Callable[[list[Any]], Any] | None = None):
        _check_dataset(dataset)
        self.sampler = _check_sampler(sampler, shuffle, seed, generator)
        self.dataset = dataset
        self.batch_size = _check_batch_size(batch_size)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.generator = check_generator("DataLoader", generator, seed)
        self.seed = check_seed("DataLoader", seed)
        if collate_fn is not None and not callable(collate_fn):
            raise TypeError(f"DataLoader: collate_fn must be callable or None, got "
                            f"{type(collate_fn).__name__}")
        self.collate_fn = collate_fn
        self._epoch = 0
        if len(self) == 0:
            raise ValueError(f"DataLoader: an epoch would have no batches (a dataset of "
                             f"{len(dataset)} items, batch_size={self.batch_size}, "
                             f"drop_last={self.drop_last})")

    def __len__(self) -> int:
        """The number of batches per epoch (``torch.utils.data.DataLoader``'s len)."""
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
        if self.sampler is not None:
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
        order = self._epoch_order()
        self._epoch += 1
        return self._batches(order)

    def _epoch_order(self) -> np.ndarray:
        """The dataset indices in this epoch's order."""
        if self.sampler is not None:
            return np.fromiter(self.sampler, np.int64)
        items = len(self.dataset)
        if not self.shuffle:
            return np.arange(items)
        if self.seed is None:
            return rng.resolve(self.generator, "DataLoader").permutation(items)
        bits = np.random.PCG64(self.seed).jumped(self._epoch)
        return np.random.Generator(bits).permutation(items)

    def _batches(self, order: np.ndarray) -> Iterator[Any]:
        stop = len(self) * self.batch_size if self.drop_last else len(order)
        gather = self._gather_function()
        for start in range(0, stop, self.batch_size):
            yield gather(order[start:start + self.batch_size])

    def _gather_function(self) -> Callable[[np.ndarray], Any]:
        """Batch indices -> batch: one fancy index per tensor for a TensorDataset (or
        Subsets of one) with the default collate, else the items collated."""
        if self.collate_fn is None:
            fast = _tensor_gather(self.dataset)
            if fast is not None:
                return fast
        collate = self.collate_fn or default_collate
        dataset = self.dataset
        return lambda indices: collate([dataset[int(i)] for i in indices])


def _tensor_gather(dataset: Dataset) -> Callable[[np.ndarray], tuple[Tensor, ...]] | None:
    """For a TensorDataset under zero or more Subsets: a function from batch indices to
    the batch, the tensors indexed at the composed positions; None for other datasets."""
    positions = None  # positions[i] is the TensorDataset row of item i (None: row i)
    while isinstance(dataset, Subset) and type(dataset).__getitem__ is Subset.__getitem__:
        positions = dataset.indices if positions is None else dataset.indices[positions]
        dataset = dataset.dataset
    if not (isinstance(dataset, TensorDataset)
            and type(dataset).__getitem__ is TensorDataset.__getitem__):
        return None
    tensors = dataset.tensors
    if positions is None:
        return lambda indices: tuple(_rows(t, indices) for t in tensors)
    return lambda indices: tuple(_rows(t, positions[indices]) for t in tensors)


def _rows(t: Tensor, indices: np.ndarray) -> Tensor:
    """t[indices] (valid rows, from the sampler): through the getitem op when t requires
    grad, else a plain NumPy gather, which records nothing and skips the op's checks
    (docs/benchmarks.md#the-python-layer)."""
    if t.requires_grad:
        return t[indices]
    return Tensor._wrap(t._data[indices], None, 0)


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

