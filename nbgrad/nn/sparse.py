"""Embedding: a table of learned rows looked up by integer index (``torch.nn.Embedding``,
its constructor arguments, initialisation and repr)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..device import check_device
from ..ops.indexing import embedding, normalize_padding_idx
from ..tensor import Tensor, lift
from . import init
from .layers import _float_dtype, _positive
from .module import Module
from .parameter import Parameter


class Embedding(Module):
    """y = weight[index], weight [num_embeddings, embedding_dim] drawn from N(0, 1). The
    row ``padding_idx`` (negative counts from the end) starts at zero and gets no
    gradient, so it stays as it is unless written directly (``embedding``).
    ``max_norm``, ``norm_type``, ``scale_grad_by_freq`` and ``sparse`` are passed to
    ``embedding`` on every call (rows read are renormalised in place to ``max_norm``;
    gradients scaled by the inverse frequency of each index; ``sparse=True`` gives the
    same gradient, dense)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 max_norm: float | None = None, norm_type: float = 2.0,
                 scale_grad_by_freq: bool = False, sparse: bool = False,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        _positive("Embedding", num_embeddings=num_embeddings, embedding_dim=embedding_dim)
        check_device(device, "Embedding")
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq, self.sparse = bool(scale_grad_by_freq), bool(sparse)
        self.padding_idx = normalize_padding_idx("Embedding", padding_idx, num_embeddings)
        dtype = _float_dtype("Embedding", dtype)
        self.weight = Parameter(np.empty((num_embeddings, embedding_dim), dtype))
        init.normal_(self.weight)
        if self.padding_idx is not None:
            self.weight._data[self.padding_idx] = 0

    @classmethod
    def from_pretrained(cls, embeddings: Any, freeze: bool = True,
                        padding_idx: int | None = None, max_norm: float | None = None,
                        norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                        sparse: bool = False) -> Embedding:
        """An Embedding whose weight is ``embeddings`` [num_embeddings, embedding_dim]
        (a copy of an array, the tensor itself if it is one), frozen (no gradient) unless
        ``freeze=False``; the padding row keeps its values."""
        weight = lift(embeddings)
        if weight.ndim != 2:
            raise ValueError(f"Embedding.from_pretrained: embeddings must be 2-D, got shape "
                             f"{weight.shape}")
        layer = cls(*weight.shape, padding_idx=padding_idx, max_norm=max_norm,
                    norm_type=norm_type, scale_grad_by_freq=scale_grad_by_freq,
                    sparse=sparse, dtype=weight.dtype)
        layer.weight = Parameter(weight, requires_grad=not freeze)
        return layer

    def forward(self, index: Any) -> Tensor:
        return embedding(index, self.weight, self.padding_idx, self.max_norm, self.norm_type,
                         self.scale_grad_by_freq, self.sparse)

    def extra_repr(self) -> str:
        text = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            text += f", padding_idx={self.padding_idx}"
        if self.max_norm is not None:
            text += f", max_norm={self.max_norm}"
        if self.norm_type != 2:
            text += f", norm_type={self.norm_type}"
        if self.scale_grad_by_freq:
            text += f", scale_grad_by_freq={self.scale_grad_by_freq}"
        if self.sparse:
            text += ", sparse=True"
        return text
