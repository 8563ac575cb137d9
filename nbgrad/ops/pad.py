"""pad: ``torch.nn.functional.pad`` with its four modes, constraints and errors.

``pad`` lists (left, right) pairs from the last dim backwards: ``(1, 2)`` pads the last
dim by 1 before and 2 after, ``(1, 2, 0, 3)`` also the second last by 0 and 3. Each
padded dim of the output reads, at output position j, the input position p(j), with
i = j - left:

    constant    p = i if 0 <= i < n, else none: the fill ``value`` (negative pads crop)
    reflect     p = |i|, then 2(n-1) - p past the end: mirrored about the end entries,
                which are not repeated (pads must be < n)
    replicate   p = clamp(i, 0, n-1)
    circular    p wraps around the part of the dim that negative pads keep (each pad at
                most the size of that part)

The map of each dim is independent of the others (corners of a 2-D pad read
p_h(j_h), p_w(j_w)), so padding is one gather per padded dim, with a 0-stride index
(``ops/indexing.py: Gather``, -1 for the fill). Its backward adds g back into the
positions read (a reflected or replicated entry gets the sum of its copies). It is
twice differentiable because gather is. Derivations:
docs/derivations.md#selection-and-indexing-along-a-dim.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..tensor import Tensor, lift
from ._args import is_int
from .indexing import Gather, index_along

_MODES = ("constant", "reflect", "replicate", "circular")


def _positions(mode: str, n: int, left: int, right: int) -> np.ndarray:
    """The input position each of the n + left + right output positions of a dim reads
    (-1: the fill value), for pads already checked against ``mode``'s constraints."""
    j = np.arange(n + left + right, dtype=np.int64)
    i = j - left
    if mode == "constant":
        return np.where((i >= 0) & (i < n), i, -1)
    if mode == "reflect":
        i = np.abs(i)
        return np.where(i >= n, 2 * (n - 1) - i, i)
    if mode == "replicate":
        return np.clip(i, 0, n - 1)
    start = max(-left, 0)  # circular: the kept part starts here and has `kept` entries
    kept = n - start - max(-right, 0)
    return start + (j - max(left, 0)) % kept


def _pairs(pad: Any, shape: tuple) -> list[tuple[int, int, int]]:
    """``pad`` as (dim, left, right) triples, the last dim first."""
    if not isinstance(pad, Sequence) or not all(is_int(p) for p in pad):
        raise TypeError(f"pad: pad must be a tuple of ints, got {pad!r}")
    if len(pad) % 2:
        raise ValueError(f"pad: pad must have an even length ((left, right) pairs from the "
                         f"last dim backwards), got {tuple(pad)}")
    if len(pad) > 2 * len(shape):
        raise ValueError(f"pad: pad {tuple(pad)} pads {len(pad) // 2} dims but x of shape "
                         f"{shape} has {len(shape)}")
    return [(len(shape) - 1 - k, int(pad[2 * k]), int(pad[2 * k + 1]))
            for k in range(len(pad) // 2)]


def _check_layout(mode: str, shape: tuple, n_padded: int) -> None:
    """PyTorch's layouts for the modes other than constant: the last 1, 2 or 3 dims padded,
    of an input with one or two more dims ((C, ...) or (N, C, ...)); for reflect and
    replicate every dim but the batch dim non-empty."""
    if not 1 <= n_padded <= 3 or len(shape) not in (n_padded + 1, n_padded + 2):
        raise NotImplementedError(
            f"pad: mode {mode!r} pads the last 1, 2 or 3 dims of a (C, ...) or (N, C, ...) "
            f"input: a pad of length {2 * n_padded} needs a {n_padded + 1}-D or "
            f"{n_padded + 2}-D input, got shape {shape}")
    batch = len(shape) == n_padded + 2
    if mode != "circular" and 0 in shape[batch:]:
        raise ValueError(f"pad: mode {mode!r} needs non-empty dims (but the batch dim), got "
                         f"shape {shape}")


def _check_pads(mode: str, shape: tuple, dim: int, left: int, right: int) -> None:
    """ValueError unless (left, right) fits dim ``dim`` of ``shape`` in ``mode``."""
    n = shape[dim]
    size = n + left + right
    where = f"padding ({left}, {right}) of dim {dim} of x of shape {shape}"
    if size < (1 if mode in ("reflect", "replicate") else 0):
        raise ValueError(f"pad: {where} leaves {size} entries")
    if mode == "reflect" and max(left, right) >= n:
        raise ValueError(f"pad: reflect {where}: each pad must be less than the size {n}")
    kept = n - max(-left, 0) - max(-right, 0)  # what circular wraps around
    if mode == "circular" and max(left, right) > kept:
        raise ValueError(f"pad: circular {where}: a pad may be at most the {kept} entries "
                         "that the negative pads keep (it would wrap around more than once)")


def pad(x: Any, pad: Sequence[int], mode: str = "constant", value: float | None = None
        ) -> Tensor:
    """``x`` padded (``torch.nn.functional.pad``): ``pad`` gives (left, right) pairs from
    the last dim backwards. ``mode``:

    * ``"constant"``: fill ``value`` (default 0); negative pads crop; any number of dims.
    * ``"reflect"``: mirror about the edge entries; pads less than the size.
    * ``"replicate"``: repeat the edge entries.
    * ``"circular"``: wrap around; pads at most the size, less any negative pads.

    The last three pad the last 1-3 dims of a (C, ...) or (N, C, ...) input, as in
    PyTorch. Backward: g summed back into the entries each output position read."""
    x = lift(x)
    pairs = _pairs(pad, x.shape)
    if mode not in _MODES:
        raise ValueError(f"pad: mode must be one of {', '.join(_MODES)}, got {mode!r}")
    if mode != "constant" and value not in (None, 0):
        raise ValueError(f"pad: mode {mode!r} takes no value (got value={value!r})")
    if mode != "constant":
        _check_layout(mode, x.shape, len(pairs))
    for dim, left, right in pairs:
        _check_pads(mode, x.shape, dim, left, right)
    y = x
    for dim, left, right in pairs:
        if left or right:
            positions = _positions(mode, x.shape[dim], left, right)
            y = Gather.apply(y, dim=dim, index=index_along(positions, dim, y.shape),
                             fill=0 if value is None else value)
    return y


__all__ = ["pad"]
