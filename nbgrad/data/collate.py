"""Batches from items: ``default_collate`` (PyTorch's rules for stacking items into
batch tensors) and ``gather_function``, which the loader and its workers both use to turn
batch indices into a batch."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..ops.shape import stack
from ..tensor import Tensor, tensor
from .dataset import Dataset, Subset, TensorDataset


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


def gather_function(dataset: Dataset, collate_fn: Callable | None
                    ) -> Callable[[np.ndarray], Any]:
    """Batch indices -> batch: one fancy index per tensor for a TensorDataset (or
    Subsets of one) with the default collate, else the items collated."""
    if collate_fn is None:
        fast = _tensor_gather(dataset)
        if fast is not None:
            return fast
    collate = collate_fn or default_collate
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
