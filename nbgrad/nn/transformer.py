"""Attention layers with ``torch.nn``'s constructor arguments, parameter names and shapes,
initialisation and forward semantics: MultiheadAttention, TransformerEncoderLayer,
TransformerEncoder. A torch state dict (its tensors as NumPy arrays) loads into them
with ``load_state_dict``.

MultiheadAttention follows ``torch.nn.functional.multi_head_attention_forward``: project
q, k, v (one [3E, E] ``in_proj_weight``, or ``q/k/v_proj_weight`` when kdim or vdim
differ from E), split E into heads, attend, concatenate the heads and apply ``out_proj``.
With ``need_weights=True`` the attention weights are computed by the math path
(softmax(q k^T / sqrt(d) + mask)) and returned (averaged over heads by default); with
``need_weights=False`` the heads go through the fused ``scaled_dot_product_attention``.
Masks follow MultiheadAttention's convention: a bool ``attn_mask`` or
``key_padding_mask`` is True where attention is *not* allowed; float masks are added.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..ops.activation import gelu, relu, softmax
from ..ops.attention import scaled_dot_product_attention
from ..ops.layout import bmm
from ..ops.matmul import linear
from ..ops.norm import dropout
from ..ops.reduce import mean
from ..tensor import Tensor, lift
from . import init
from .containers import ModuleList
from .layers import Linear, _float_dtype, _positive
from .module import Module
from .normalization import Dropout, LayerNorm
from .parameter import Parameter

_MHA = "MultiheadAttention"


def _mask_array(name: str, mask: Any, dtype: np.dtype) -> np.ndarray:
    """A bool (True = masked) or float mask as an additive float array (-inf, 0)."""
    m = mask.numpy() if isinstance(mask, Tensor) else np.asarray(mask)
    if m.dtype == bool:
        return np.where(m, -np.inf, 0).astype(dtype)
    if m.dtype.kind != "f":
        raise TypeError(f"{_MHA}: {name} must be bool or float, got {m.dtype}")
    return m.astype(dtype, copy=False)


class MultiheadAttention(Module):
    """Multi-head attention: ``torch.nn.MultiheadAttention``.

    forward(query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
    average_attn_weights=True, is_causal=False) -> (output, weights or None); inputs
    [L, N, E] ([N, L, E] with batch_first) or unbatched [L, E]."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0,
                 bias: bool = True, add_bias_kv: bool = False, add_zero_attn: bool = False,
                 kdim: int | None = None, vdim: int | None = None, batch_first: bool = False,
                 dtype: Any = None) -> None:
        super().__init__()
        _positive(_MHA, embed_dim=embed_dim, num_heads=num_heads)
        if embed_dim % num_heads:
            raise ValueError(f"{_MHA}: embed_dim {embed_dim} must be divisible by "
                             f"num_heads {num_heads}")
        if add_bias_kv or add_zero_attn:
            raise ValueError(f"{_MHA}: add_bias_kv and add_zero_attn are not supported "
                             f"(got add_bias_kv={add_bias_kv}, add_zero_attn={add_zero_attn})")
        if not 0 <= dropout < 1:
            raise ValueError(f"{_MHA}: dropout must be in [0, 1), got {dropout}")
        dt = _float_dtype(_MHA, dtype)
        self.embed_dim = embed_dim
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        _positive(_MHA, kdim=self.kdim, vdim=self.vdim)
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads, self.dropout, self.batch_first = num_heads, dropout, batch_first
        self.head_dim = embed_dim // num_heads
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(np.empty((3 * embed_dim, embed_dim), dt))
            for name in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
                self.register_parameter(name, None)
        else:
            self.q_proj_weight = Parameter(np.empty((embed_dim, embed_dim), dt))
            self.k_proj_weight = Parameter(np.empty((embed_dim, self.kdim), dt))
            self.v_proj_weight = Parameter(np.empty((embed_dim, self.vdim), dt))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(np.zeros(3 * embed_dim, dt))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, dtype=dt)
        self.bias_k = self.bias_v = None
        self.add_zero_attn = False
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        """PyTorch's: xavier_uniform_ projections, zero biases (out_proj's weight keeps
        Linear's initialisation)."""
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                init.xavier_uniform_(w)
        if self.in_proj_bias is not None:
            init.zeros_(self.in_proj_bias)
            init.zeros_(self.out_proj.bias)

    def _projections(self, query: Tensor, key: Tensor, value: Tensor) -> tuple:
        e = self.embed_dim
        b = self.in_proj_bias
        bq, bk, bv = (None, None, None) if b is None else (b[:e], b[e:2 * e], b[2 * e:])
        if self._qkv_same_embed_dim:
            w = self.in_proj_weight
            wq, wk, wv = w[:e], w[e:2 * e], w[2 * e:]
        else:
            wq, wk, wv = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
        return linear(query, wq, bq), linear(key, wk, bk), linear(value, wv, bv)

    def _check(self, query: Tensor, key: Tensor, value: Tensor) -> bool:
        """Whether the inputs are batched (3-D); ValueError naming the shapes otherwise."""
        shapes = f"(query {tuple(query.shape)}, key {tuple(key.shape)}, " \
                 f"value {tuple(value.shape)})"
        batched = query.ndim == 3
        if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
            raise ValueError(f"{_MHA}: query, key and value must all be 3-D (batched) or "
                             f"2-D (unbatched) {shapes}")
        if (query.shape[-1] != self.embed_dim or key.shape[-1] != self.kdim
                or value.shape[-1] != self.vdim):
            raise ValueError(f"{_MHA}: last dims must be embed_dim {self.embed_dim}, kdim "
                             f"{self.kdim}, vdim {self.vdim} {shapes}")
        if key.shape[:-1] != value.shape[:-1]:
            raise ValueError(f"{_MHA}: key and value must have the same leading dims "
                             f"{shapes}")
        seq = 1 if batched and self.batch_first else 0
        if batched and query.shape[1 - seq] != key.shape[1 - seq]:
            raise ValueError(f"{_MHA}: query and key must have the same batch size {shapes}")
        return batched

    def _merged_mask(self, attn_mask: Any, key_padding_mask: Any, n: int, n_l: int,
                     n_s: int, dtype: np.dtype) -> np.ndarray | None:
        """attn_mask and key_padding_mask as one additive array broadcastable to
        [N, H, L, S], or None."""
        h = self.num_heads
        merged = None
        if attn_mask is not None:
            m = _mask_array("attn_mask", attn_mask, dtype)
            if m.shape == (n_l, n_s):
                merged = m
            elif m.shape == (n * h, n_l, n_s):
                merged = m.reshape(n, h, n_l, n_s)
            else:
                raise ValueError(f"{_MHA}: attn_mask must have shape {(n_l, n_s)} or "
                                 f"{(n * h, n_l, n_s)}, got {m.shape}")
        if key_padding_mask is not None:
            m = _mask_array("key_padding_mask", key_padding_mask, dtype)
            if m.shape != (n, n_s) and not (n == 1 and m.shape == (n_s,)):
                raise ValueError(f"{_MHA}: key_padding_mask must have shape {(n, n_s)}, "
                                 f"got {m.shape}")
            m = m.reshape(n, 1, 1, n_s)
            merged = m if merged is None else merged + m
        return merged

    def forward(self, query: Any, key: Any, value: Any, key_padding_mask: Any = None,
                need_weights: bool = True, attn_mask: Any = None,
                average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple[Tensor, Tensor | None]:
        query, key, value = lift(query), lift(key), lift(value)
        batched = self._check(query, key, value)
        if is_causal and attn_mask is None:
            raise ValueError(f"{_MHA}: need attn_mask if specifying the is_causal hint")
        if not batched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        elif self.batch_first:
            query, key, value = (x.transpose(0, 1) for x in (query, key, value))
        n_l, n, e = query.shape
        n_s = key.shape[0]
        h, hd = self.num_heads, self.head_dim
        mask = self._merged_mask(attn_mask, key_padding_mask, n, n_l, n_s, query.dtype)
        p = self.dropout if self.training else 0.0
        q, k, v = self._projections(query, key, value)
        # [L, N, E] -> [N, H, L, hd]
        q, k, v = (x.reshape(x.shape[0], n, h, hd).permute(1, 2, 0, 3) for x in (q, k, v))
        weights = None
        if need_weights:
            scores = bmm((q * (1 / math.sqrt(hd))).reshape(n * h, n_l, hd),
                         k.reshape(n * h, n_s, hd).transpose(1, 2)).reshape(n, h, n_l, n_s)
            if mask is not None:
                scores = scores + mask
            attn = softmax(scores, -1)
            if p > 0:
                attn = dropout(attn, p)
            out = bmm(attn.reshape(n * h, n_l, n_s), v.reshape(n * h, n_s, hd))
            out = out.reshape(n, h, n_l, hd)
            weights = mean(attn, 1) if average_attn_weights else attn
            if not batched:
                weights = weights.squeeze(0)
        else:
            out = scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        out = linear(out.permute(2, 0, 1, 3).reshape(n_l, n, e), self.out_proj.weight,
                     self.out_proj.bias)
        if not batched:
            out = out.squeeze(1)
        elif self.batch_first:
            out = out.transpose(0, 1)
        return out, weights

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}"


def _activation(act: str | Callable) -> Callable:
    if act == "relu":
        return relu
    if act == "gelu":
        return gelu
    if callable(act):
        return act
    raise ValueError(f"TransformerEncoderLayer: activation should be relu/gelu or a "
                     f"callable, not {act!r}")


class TransformerEncoderLayer(Module):
    """Self-attention and a feed-forward block, each with a residual connection and a
    LayerNorm (after, or before with ``norm_first``): ``torch.nn.TransformerEncoderLayer``."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation: str | Callable = "relu",
                 layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, dtype: Any = None) -> None:
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first, dtype=dtype)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.activation = _activation(activation)

    def _sa_block(self, x: Tensor, attn_mask: Any, key_padding_mask: Any,
                  is_causal: bool) -> Tensor:
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                           need_weights=False, is_causal=is_causal)[0]
        return self.dropout1(x)

    def _ff_block(self, x: Tensor) -> Tensor:
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, src: Any, src_mask: Any = None, src_key_padding_mask: Any = None,
                is_causal: bool = False) -> Tensor:
        x = lift(src)
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._ff_block(self.norm2(x))
        x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._ff_block(x))


class TransformerEncoder(Module):
    """``num_layers`` deep copies of ``encoder_layer`` applied in turn, then ``norm`` if
    given: ``torch.nn.TransformerEncoder``."""

    def __init__(self, encoder_layer: TransformerEncoderLayer, num_layers: int,
                 norm: Module | None = None, enable_nested_tensor: bool = True,
                 mask_check: bool = True) -> None:
        super().__init__()
        _positive("TransformerEncoder", num_layers=num_layers)
        self.layers = ModuleList([copy.deepcopy(encoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, src: Any, mask: Any = None, src_key_padding_mask: Any = None,
                is_causal: bool | None = None) -> Tensor:
        out = lift(src)
        for layer in self.layers:
            out = layer(out, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                        is_causal=bool(is_causal))
        return out if self.norm is None else self.norm(out)


__all__ = ["MultiheadAttention", "TransformerEncoder", "TransformerEncoderLayer"]
