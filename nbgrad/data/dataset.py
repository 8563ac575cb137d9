"""Datasets: the map-style ``Dataset`` protocol, ``TensorDataset``, ``Subset`` and
``random_split`` (``torch.utils.data``'s names and semantics)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import rng
from ..tensor import Tensor, tensor


class Dataset:
    """A map-style dataset: ``len(ds)`` items, ``ds[i]`` for ``0 <= i < len(ds)``.

    Subclasses implement ``__len__`` and ``__getitem__``; a ``DataLoader`` batches the
    items with its ``collate_fn``.
    """

    def __len__(self) -> int:
        raise NotImplementedError(f"{type(self).__name__} does not implement __len__")

    def __getitem__(self, index: int) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement __getitem__")


class TensorDataset(Dataset):
    """Item ``i`` is the tuple ``(t[i] for t in tensors)``: rows of tensors that share
    their first dimension (inputs, targets, ...).

    NumPy arrays are accepted and converted as ``nb.tensor`` does (a copy; float arrays
    keep their dtype, integer arrays become int64).
    """

    def __init__(self, *tensors: Tensor | np.ndarray):
        if not tensors:
            raise ValueError("TensorDataset: needs at least one tensor")
        self.tensors: tuple[Tensor, ...] = tuple(
            _as_tensor(t, i) for i, t in enumerate(tensors))
        shapes = [t.shape for t in self.tensors]
        if any(len(s) == 0 for s in shapes) or len({s[0] for s in shapes}) != 1:
            raise ValueError("TensorDataset: all tensors must have the same size in the "
                             f"first dimension; got shapes {', '.join(map(str, shapes))}")

    def __len__(self) -> int:
        return self.tensors[0].shape[0]

    def __getitem__(self, index: Any) -> tuple[Tensor, ...]:
        return tuple(t[index] for t in self.tensors)


def _as_tensor(value: Any, position: int) -> Tensor:
    if isinstance(value, Tensor):
        return value
    if isinstance(value, np.ndarray):
        return tensor(value)
    raise TypeError(f"TensorDataset: argument {position} is a {type(value).__name__}; "
                    "pass Tensors or numpy arrays")


class Subset(Dataset):
    """The items of ``dataset`` at ``indices``, in that order: ``subset[i]`` is
    ``dataset[indices[i]]``. ``indices`` are kept as a 1-D int64 array."""

    def __init__(self, dataset: Dataset, indices: Sequence[int] | np.ndarray):
        self.dataset = dataset
        self.indices = _index_array(indices, len(dataset))

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, list):
            return self.dataset[[self.indices[i] for i in index]]
        return self.dataset[self.indices[index]]


def _index_array(indices: Any, size: int) -> np.ndarray:
    """``indices`` as a 1-D int64 array, each in ``-size .. size - 1``."""
    array = np.asarray(indices)
    if array.size == 0:
        array = array.astype(np.int64)
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise TypeError(f"Subset: indices must be a 1-D sequence of ints, got {array.dtype} "
                        f"of shape {array.shape}")
    out_of_range = (array < -size) | (array >= size)
    if out_of_range.any():
        raise IndexError(f"Subset: index {array[out_of_range][0]} is out of range for a "
                         f"dataset of {size} items")
    return array.astype(np.int64, copy=False)


def random_split(dataset: Dataset, lengths: Sequence[int | float], seed: int | None = None,
                 *, generator: Any = None) -> list[Subset]:
    """``dataset`` split into non-overlapping random ``Subset``s of the given lengths.

    ``lengths`` are item counts summing to ``len(dataset)``, or fractions summing to 1:
    each split then gets ``floor(fraction * len(dataset))`` items and the remainder is
    handed out one item at a time from the first split on (as in PyTorch). The order is
    one permutation of ``len(dataset)`` drawn from ``generator`` (an ``nb.Generator`` or a
    ``numpy.random.Generator``, advanced by the draw), or from
    ``numpy.random.default_rng(seed)``, or, given neither, from the default generator
    that ``nb.manual_seed`` seeds, as PyTorch's default. So a seed gives the same split
    in every run.
    """
    counts = _split_counts(lengths, len(dataset))
    order = _rng("random_split", seed, generator).permutation(len(dataset))
    bounds = np.cumsum([0] + counts)
    return [Subset(dataset, order[start:stop]) for start, stop in zip(bounds, bounds[1:])]


def _split_counts(lengths: Sequence[int | float], size: int) -> list[int]:
    """Item counts from ``random_split``'s ``lengths`` (counts or fractions)."""
    lengths = list(lengths)
    if not lengths:
        raise ValueError("random_split: lengths is empty")
    for i, length in enumerate(lengths):
        if isinstance(length, bool | np.bool_) or not isinstance(
                length, int | float | np.integer | np.floating):
            raise TypeError(f"random_split: lengths[{i}] is {length!r}; lengths must be "
                            "ints (counts) or floats (fractions)")
        if length < 0:
            raise ValueError(f"random_split: lengths[{i}] is negative ({length})")
    if all(isinstance(length, int | np.integer) for length in lengths):
        counts = [int(length) for length in lengths]
        if sum(counts) != size:
            raise ValueError(f"random_split: the lengths {counts} sum to {sum(counts)}, but "
                             f"the dataset has {size} items")
        return counts
    return _counts_from_fractions([float(length) for length in lengths], size)


def _counts_from_fractions(fractions: list[float], size: int) -> list[int]:
    if not math.isclose(sum(fractions), 1.0) or max(fractions) > 1.0:
        raise ValueError(f"random_split: the fractions {fractions} must each lie in [0, 1] "
                         f"and sum to 1 (they sum to {sum(fractions)})")
    counts = [math.floor(size * f) for f in fractions]
    for i in range(size - sum(counts)):
        counts[i % len(counts)] += 1
    for i, count in enumerate(counts):
        if count == 0:
            warnings.warn(f"random_split: split {i} is empty ({fractions[i]} of {size} "
                          "items)", stacklevel=3)
    return counts


def _rng(caller: str, seed: Any, generator: Any) -> np.random.Generator:
    """The NumPy generator that ``generator`` or ``seed`` (not both) stands for; the
    default generator's given neither."""
    generator = check_generator(caller, generator, seed)
    seed = check_seed(caller, seed)
    if seed is not None:
        return np.random.default_rng(seed)
    return rng.resolve(generator, caller)


def check_generator(caller: str, generator: Any, seed: Any) -> Any:
    """``generator`` if it is an ``nb.Generator`` or a numpy Generator (or None); an
    error naming ``caller`` if it is something else or comes together with a ``seed``."""
    if generator is None:
        return None
    if seed is not None:
        raise ValueError(f"{caller}: pass seed or generator, not both")
    if not isinstance(generator, np.random.Generator | rng.Generator):
        raise TypeError(f"{caller}: generator must be a numpy.random.Generator or an "
                        f"nb.Generator, got {type(generator).__name__}")
    return generator


def check_seed(caller: str, seed: Any) -> int | None:
    """``seed`` as an int >= 0 (or None); TypeError/ValueError naming ``caller``."""
    if seed is None:
        return None
    if isinstance(seed, bool | np.bool_) or not isinstance(seed, int | np.integer):
        kinds = {np.random.Generator: "a numpy Generator", rng.Generator: "an nb.Generator"}
        kind = kinds.get(type(seed))
        hint = f"; pass {kind} as generator=" if kind else ""
        raise TypeError(f"{caller}: seed must be an int or None, got "
                        f"{type(seed).__name__}{hint}")
    if seed < 0:
        raise ValueError(f"{caller}: seed must be >= 0, got {seed}")
    return int(seed)
