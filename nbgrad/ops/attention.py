"""Scaled dot-product attention (PyTorch's F.scaled_dot_product_attention).

    out = softmax(q k^T scale + mask) v          (dropout on the softmax when training)

q [..., L, E], k [..., S, E], v [..., S, Ev] with broadcast batch dims. The forward and
backward are the fused kernels of kernels/attention.py (FlashAttention: blocks of queries
against blocks of keys with an online softmax; only the output and the per-row
logsumexp are saved, no [L, S] buffer). The ``vjp`` writes the backward with nbgrad ops
on the full [L, S] matrices (the math path), so the op is twice differentiable.

Masks: a bool ``attn_mask`` (True = attend) or a float one added to the scores, either
broadcastable to [..., L, S]; ``is_causal`` masks key j > query i (upper-left aligned,
as PyTorch). A row with every key masked gives zeros, as PyTorch's CPU kernel does. The
mask is not differentiated. Dropout keeps each attention weight with probability
1 - dropout_p from a hash of a seed drawn from nbgrad's default generator, so backward
regenerates the same mask.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import rng
from ..function import Function, Sample, register
from ..kernels import attention as kernels
from ..runtime.jit import PARALLEL_WORK_MIN, for_work
from ..tensor import Tensor, lift
from . import _args
from .matmul import matmul
from .reduce import sum as reduce_sum
from .select import where

OP = "scaled_dot_product_attention"


def _samples(rng_):
    def t(*shape):
        return rng_.standard_normal(shape)

    yield Sample(t(2, 3, 4), t(2, 5, 4), t(2, 5, 3), scale=0.5, label="L != S, Ev != E")
    yield Sample(t(1, 2, 4, 3), t(1, 2, 4, 3), t(1, 2, 4, 3), causal=True, scale=0.6,
                 label="causal")
    mask = np.where(rng_.random((3, 4)) < 0.3, -np.inf, rng_.standard_normal((3, 4)))
    mask[:, 0] = 0.0
    mask[2] = -np.inf
    yield Sample(t(2, 3, 2), t(2, 4, 2), t(2, 4, 3), mask=mask, scale=0.7,
                 label="float mask, one row fully masked")
    yield Sample(t(2, 3, 2), t(2, 5, 2), t(2, 5, 2), scale=0.7, dropout_p=0.3, seed=11,
                 label="dropout (fixed seed)")


def _flat(a: np.ndarray, shape: tuple) -> np.ndarray:
    """``a`` broadcast to ``shape``, flat, C-contiguous and writeable (the GEMM of the
    kernels takes writeable arrays; the kernels never write into it)."""
    if a.shape != shape:
        a = np.broadcast_to(a, shape)
    a = np.ascontiguousarray(a)
    return (a if a.flags.writeable else a.copy()).reshape(-1)


@register(OP, samples=_samples)
class ScaledDotProductAttention(Function):
    @staticmethod
    def forward(ctx, q, k, v, mask=None, causal=False, scale=1.0, dropout_p=0.0, seed=0):
        dtype = q.dtype
        batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
        n_b = math.prod(batch)
        n_l, e = q.shape[-2:]
        n_s, ev = v.shape[-2:]
        qf = _flat(q, batch + q.shape[-2:])
        kf = _flat(k, batch + k.shape[-2:])
        vf = _flat(v, batch + v.shape[-2:])
        m3 = _mask3(mask, batch, n_b, n_l, n_s, dtype)
        out = np.empty(batch + (n_l, ev), dtype)
        lse = np.empty(n_b * n_l, dtype)
        work = n_b * n_l * n_s * (e + ev)
        for_work(kernels.flash_forward, work, PARALLEL_WORK_MIN)(
            qf, kf, vf, m3, mask is not None, causal, dtype.type(scale), dropout_p, seed,
            out.reshape(-1), lse, n_b, n_l, n_s, e, ev)
        ctx.save_for_backward(qf, kf, vf, out, lse, m3)
        ctx.shapes = (batch, n_b, n_l, n_s, e, ev)
        return out

    @staticmethod
    def backward(ctx, g):
        qf, kf, vf, out, lse, m3 = ctx.saved_tensors
        batch, n_b, n_l, n_s, e, ev = ctx.shapes
        p = ctx.params
        dtype = qf.dtype
        do = _flat(np.asarray(g, dtype), out.shape)
        dq = np.empty(batch + (n_l, e), dtype)
        dk = np.empty(batch + (n_s, e), dtype)
        dv = np.empty(batch + (n_s, ev), dtype)
        work = n_b * n_l * n_s * (e + ev)
        kernel = kernels.flash_backward if n_b > 1 and work >= PARALLEL_WORK_MIN \
            else kernels.flash_backward.serial
        kernel(qf, kf, vf, out.reshape(-1), do, lse, m3, p.get("mask") is not None,
               p.get("causal", False), dtype.type(p.get("scale", 1.0)),
               p.get("dropout_p", 0.0), p.get("seed", 0), dq.reshape(-1), dk.reshape(-1),
               dv.reshape(-1), n_b, n_l, n_s, e, ev)
        return tuple(gr if need else None for gr, need in zip((dq, dk, dv),
                                                               ctx.needs_input_grad))

    @staticmethod
    def vjp(ctx, g):
        q, k, v = (lift(x) for x in ctx.inputs)
        p = ctx.params
        scale = p.get("scale", 1.0)
        batch, n_b, n_l, n_s, _, _ = ctx.shapes
        dtype = q.dtype
        add = _additive(p.get("mask"), p.get("causal", False), n_l, n_s, dtype)
        kt = k.transpose(-2, -1)
        s = matmul(q, kt) * scale
        if add is not None:
            dead = np.all(add == -np.inf, axis=-1, keepdims=True)  # rows with no key
            s = where(dead, np.zeros((), dtype), s + add)
        probs = _softmax_last(s)
        if add is not None:
            probs = where(dead, np.zeros((), dtype), probs)
        z = None
        if p.get("dropout_p", 0.0) > 0:
            z = np.empty((n_b, n_l, n_s), dtype)
            kernels.dropout_keep.serial(p["seed"], p["dropout_p"], z)
            z = z.reshape(batch + (n_l, n_s))
        dropped = probs if z is None else probs * z
        dv = matmul(dropped.transpose(-2, -1), g)
        dp = matmul(g, v.transpose(-2, -1))
        if z is not None:
            dp = dp * z
        ds = probs * (dp - reduce_sum(dp * probs, -1, keepdim=True)) * scale
        dq = matmul(ds, k)
        dk = matmul(ds.transpose(-2, -1), q)
        return tuple(gr if need else None for gr, need in zip((dq, dk, dv),
                                                               ctx.needs_input_grad))


def _softmax_last(s: Tensor) -> Tensor:
    from .activation import softmax
    return softmax(s, -1)


def _additive(mask: np.ndarray | None, causal: bool, n_l: int, n_s: int,
              dtype: np.dtype) -> np.ndarray | None:
    """The mask as one additive array (causal as -inf above the diagonal), or None."""
    if causal:
        return np.where(np.tril(np.ones((n_l, n_s), bool)), 0, -np.inf).astype(dtype)
    return mask


def _mask3(mask: np.ndarray | None, batch: tuple, n_b: int, n_l: int, n_s: int,
           dtype: np.dtype) -> np.ndarray:
    """The additive mask as [n_b, n_l, n_s] (a broadcast view where it can be), or a
    1-element placeholder."""
    if mask is None:
        return np.zeros((1, 1, 1), dtype)
    full = np.broadcast_to(np.asarray(mask, dtype), batch + (n_l, n_s))
    return full.reshape(n_b, n_l, n_s)


def _shape_error(msg: str, q: Tensor, k: Tensor, v: Tensor) -> ValueError:
    return ValueError(f"{OP}: {msg} (query {tuple(q.shape)}, key {tuple(k.shape)}, "
                      f"value {tuple(v.shape)})")


def scaled_dot_product_attention(query: Any, key: Any, value: Any, attn_mask: Any = None,
                                 dropout_p: float = 0.0, is_causal: bool = False,
                                 scale: float | None = None,
                                 enable_gqa: bool = False) -> Tensor:
    """softmax(query key^T scale + attn_mask) value, with query [..., L, E], key
    [..., S, E], value [..., S, Ev]: ``torch.nn.functional.scaled_dot_product_attention``.

    attn_mask: bool (True = attend) or float (added to the scores), broadcastable to
    [..., L, S]; is_causal: key j > query i masked (not with attn_mask); scale: default
    1 / sqrt(E); dropout_p: dropout on the attention weights (nbgrad's default
    generator); enable_gqa: key/value heads (dim -3) shared by groups of query heads."""
    q = _args.float_input(OP, query, "query")
    k = _args.float_input(OP, key, "key")
    v = _args.float_input(OP, value, "value")
    _args.float_operands(OP, query=q, key=k, value=v)
    if min(q.ndim, k.ndim, v.ndim) < 2:
        raise _shape_error("query, key and value must be at least 2-D", q, k, v)
    if q.shape[-1] != k.shape[-1]:
        raise _shape_error(f"query's last dim {q.shape[-1]} != key's {k.shape[-1]}", q, k, v)
    if k.shape[-2] != v.shape[-2]:
        raise _shape_error(f"key has {k.shape[-2]} positions (dim -2) but value has "
                           f"{v.shape[-2]}", q, k, v)
    if enable_gqa and q.ndim >= 3 and k.ndim >= 3 and q.shape[-3] != k.shape[-3]:
        k, v = _grouped(q, k, v)
    try:
        batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ValueError:
        raise _shape_error("batch dims do not broadcast", q, k, v) from None
    dropout_p = _args.real(OP, "dropout_p", dropout_p)
    if not 0 <= dropout_p < 1:
        raise ValueError(f"{OP}: dropout_p must be in [0, 1), got {dropout_p}")
    n_l, n_s = q.shape[-2], k.shape[-2]
    mask = None
    if attn_mask is not None:
        if is_causal:
            raise ValueError(f"{OP}: attn_mask and is_causal cannot both be set "
                             f"(attn_mask {tuple(np.shape(attn_mask))})")
        mask = _mask_array(attn_mask, batch, n_l, n_s, q.dtype)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else _args.real(OP, "scale", scale)
    seed = 0
    if dropout_p > 0:
        seed = int(rng.resolve(None, OP).integers(0, 2 ** 63))
    return ScaledDotProductAttention.apply(q, k, v, mask=mask, causal=bool(is_causal),
                                           scale=scale, dropout_p=dropout_p, seed=seed)


def _mask_array(attn_mask: Any, batch: tuple, n_l: int, n_s: int,
                dtype: np.dtype) -> np.ndarray:
    m = attn_mask._data if isinstance(attn_mask, Tensor) else np.asarray(attn_mask)
    target = batch + (n_l, n_s)
    try:
        fits = m.ndim <= len(target) and np.broadcast_shapes(m.shape, target) == target
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"{OP}: attn_mask of shape {m.shape} does not broadcast to the "
                         f"attention shape {target} ([..., L, S])")
    if m.dtype == bool:
        return np.where(m, 0, -np.inf).astype(dtype)
    if m.dtype.kind != "f":
        raise TypeError(f"{OP}: attn_mask must be bool or float, got {m.dtype}")
    return m.astype(dtype, copy=False)


def _grouped(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """key and value with each head repeated for its group of query heads (GQA)."""
    hq, hk, hv = q.shape[-3], k.shape[-3], v.shape[-3]
    if hq % hk or hq % hv:
        raise _shape_error(f"enable_gqa: query heads {hq} must be a multiple of key heads "
                           f"{hk} and value heads {hv}", q, k, v)

    def repeat(x: Tensor, groups: int) -> Tensor:
        shape = tuple(x.shape)
        x = x.unsqueeze(-3).expand(*shape[:-2], groups, *shape[-2:])
        return x.reshape(*shape[:-3], shape[-3] * groups, *shape[-2:])

    return repeat(k, hq // hk), repeat(v, hq // hv)


__all__ = ["scaled_dot_product_attention"]
