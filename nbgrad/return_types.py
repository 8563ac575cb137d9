"""Named-tuple results of the ops that return values with their indices (PyTorch's
``torch.return_types``): ``r = x.max(dim=1)`` gives ``r.values`` and ``r.indices``, and
still unpacks as ``values, indices = x.max(dim=1)``."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from .tensor import Tensor


class _ValuesIndices(NamedTuple):
    values: Tensor
    indices: Tensor


def _repr(self: _ValuesIndices) -> str:
    return (f"nbgrad.return_types.{type(self).__name__}(\nvalues={self.values!r},\n"
            f"indices={self.indices!r})")


class max(_ValuesIndices):  # torch.return_types.max
    """``max(x, dim)``: the maxima along ``dim`` and the index of each (the first)."""

    __slots__ = ()
    __repr__ = _repr


class min(_ValuesIndices):  # torch.return_types.min
    """``min(x, dim)``: the minima along ``dim`` and the index of each (the first)."""

    __slots__ = ()
    __repr__ = _repr


class sort(_ValuesIndices):  # torch.return_types.sort
    """``sort(x, dim)``: the values in order along ``dim`` and the index each came from."""

    __slots__ = ()
    __repr__ = _repr


class topk(_ValuesIndices):  # torch.return_types.topk
    """``topk(x, k, dim)``: the k largest (or smallest) values along ``dim`` and their
    indices."""

    __slots__ = ()
    __repr__ = _repr


class linalg_svd(NamedTuple):  # torch.return_types.linalg_svd
    """``linalg.svd(A)``: A = U diag(S) Vh, the singular values S in descending order."""

    U: Tensor
    S: Tensor
    Vh: Tensor

    def __repr__(self) -> str:
        return (f"nbgrad.return_types.linalg_svd(\nU={self.U!r},\nS={self.S!r},\n"
                f"Vh={self.Vh!r})")


__all__ = ["linalg_svd", "max", "min", "sort", "topk"]
