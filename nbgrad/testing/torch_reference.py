"""PyTorch references of nbgrad's neural-operator models, computed from the same weights:
the oracle of the tests and the peer of the benchmarks; needs torch, imported by the caller.

Every function takes the ``torch`` module as its first argument (nbgrad never imports
torch) and a dict ``p`` of tensors named as ``model.named_parameters()`` names them
(``torch_parameters`` builds it); ``pre`` is the name prefix of the layer read. The math
is neuraloperator's: FNO, its FNOBlocks and SpectralConv, U-NO and its resampling. GINO
and FNOGNO are in ``nbgrad.testing.torch_reference_gino``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["torch_parameters", "conv1x1", "channel_mlp", "skip", "norm", "factorized_dense",
           "spectral_conv", "resample", "grid_embedding", "fno_block", "fno_forward",
           "uno_forward"]


def torch_parameters(torch: Any, model: Any, dtype: Any = None,
                     requires_grad: bool = True) -> dict[str, Any]:
    """Leaf tensors copied from ``model.named_parameters()``, under the same names;
    ``dtype`` (a torch dtype) converts them, None keeps the parameter's dtype."""
    out = {}
    for name, q in model.named_parameters():
        t = torch.tensor(np.array(q.numpy()))
        if dtype is not None:
            t = t.to(dtype)
        out[name] = t.requires_grad_(requires_grad)
    return out


def conv1x1(torch: Any, x: Any, w: Any, b: Any = None) -> Any:
    """y[b, o, ...] = sum_i w[o, i] x[b, i, ...] (+ b[o]): a 1x1 Conv1d over the
    flattened grid of x [B, C, *grid]."""
    size = list(x.shape)
    y = torch.nn.functional.conv1d(x.reshape(size[0], size[1], -1), w, b)
    return y.reshape([size[0], w.shape[0]] + size[2:])


def channel_mlp(torch: Any, x: Any, p: dict, pre: str) -> Any:
    """ChannelMLP: the 1x1 convolutions ``pre + 'fcs.{k}'`` (as many as p holds), gelu
    between them."""
    n_layers = 0
    while f"{pre}fcs.{n_layers}.weight" in p:
        n_layers += 1
    for k in range(n_layers):
        x = conv1x1(torch, x, p[f"{pre}fcs.{k}.weight"], p.get(f"{pre}fcs.{k}.bias"))
        if k < n_layers - 1:
            x = torch.nn.functional.gelu(x)
    return x


def skip(torch: Any, x: Any, p: dict, pre: str, kind: str, kernel: int = 1) -> Any:
    """neuraloperator's skip_connection: x (identity), w * x (soft-gating), a 1x1
    convolution without bias (linear) or, ``kernel`` > 1, a 'same'-padded convolution."""
    if kind == "identity":
        return x
    if kind == "soft-gating":
        return p[pre + "weight"] * x
    if kernel > 1:
        conv = getattr(torch.nn.functional, f"conv{x.ndim - 2}d")
        return conv(x, p[pre + "weight"], padding="same")
    return conv1x1(torch, x, p[pre + "conv.weight"])


def norm(torch: Any, x: Any, p: dict, pre: str, kind: str, groups: int = 1,
         layer: Any = None) -> Any:
    """Group, instance (no affine), batch norm (batch statistics) or AdaIN (``layer``'s
    embedding through its MLP Linear -> gelu -> Linear: per-channel weight and bias of a
    group norm of one channel a group), eps 1e-5."""
    F = torch.nn.functional
    if kind == "ada_in":
        e = torch.tensor(layer.embedding.numpy(), dtype=x.dtype)
        h = F.gelu(F.linear(e, p[pre + "mlp.0.weight"], p[pre + "mlp.0.bias"]))
        affine = F.linear(h, p[pre + "mlp.2.weight"], p[pre + "mlp.2.bias"])
        c = x.shape[1]
        return F.group_norm(x, c, affine[:c], affine[c:], eps=layer.eps)
    if kind == "group_norm":
        return F.group_norm(x, groups, p[pre + "weight"], p[pre + "bias"], eps=1e-5)
    if kind == "instance_norm":
        return F.instance_norm(x, eps=1e-5)
    return F.batch_norm(x, None, None, p[pre + "weight"], p[pre + "bias"], training=True)


def _kept_weight_index(conv: Any) -> tuple:
    """The part of the weights the kept modes use: the centre of max_n_modes along the
    first d - 1 mode dims, the first bins along the last (rfft) one."""
    lead = [slice(None)] * (1 if conv.separable else 2)
    idx = [slice((mx - m) // 2, (mx - m) // 2 + m)
           for m, mx in zip(conv.n_modes[:-1], conv.max_n_modes[:-1])]
    idx.append(slice(0, conv.n_modes[-1]))
    return tuple(lead + idx)


def _centred(grid: Sequence[int], kept: Sequence[int]) -> tuple:
    """Slices of a spectrum [B, C, *grid[:-1], bins] (fftshifted on all but the last dim)
    holding ``kept`` modes centred on frequency 0, the first ``kept[-1]`` bins last."""
    idx = [slice(None), slice(None)]
    idx += [slice(n // 2 - k // 2, n // 2 - k // 2 + k) for n, k in zip(grid[:-1], kept[:-1])]
    idx.append(slice(0, kept[-1]))
    return tuple(idx)


def factorized_dense(einsum: Any, factorization: str, f: dict, order: int) -> Any:
    """The dense complex weight of ``order`` dims from its factors ``f`` (name -> complex
    array, tensorly's names), with ``einsum`` (``torch.einsum`` or ``numpy.einsum``):
    CP ``sum_R lam_R prod_j U_j[:, R]``, Tucker ``core x_1 U_0 ... x_d U_{d-1}``, TT the
    chain of cores with the end ranks dropped."""
    letters = "abcdefgh"[:order]
    if factorization == "cp":
        eq = ",".join(f"{c}R" for c in letters) + f",R->{letters}"
        return einsum(eq, *[f[f"factor{k}"] for k in range(order)], f["weights"])
    if factorization == "tucker":
        ranks = "ABCDEFGH"[:order]
        eq = ranks + "," + ",".join(f"{c}{r}" for c, r in zip(letters, ranks)) + "->" + letters
        return einsum(eq, f["core"], *[f[f"factor{k}"] for k in range(order)])
    ranks = "ABCDEFGHI"[:order + 1]
    eq = ",".join(f"{ranks[k]}{letters[k]}{ranks[k + 1]}" for k in range(order))
    eq += f"->{ranks[0]}{letters}{ranks[-1]}"
    return einsum(eq, *[f[f"factor{k}"] for k in range(order)])[0, ..., 0]


def _spectral_weight(torch: Any, p: dict, pre: str, conv: Any) -> Any:
    """The layer's complex weight: dense, or rebuilt from its factors (what the reference
    library's default ``implementation='reconstructed'`` contracts with)."""
    if pre + "weight_real" in p:
        return torch.complex(p[pre + "weight_real"], p[pre + "weight_imag"])
    names = {n[len(pre) + len("weight."):-len("_real")] for n in p
             if n.startswith(pre + "weight.") and n.endswith("_real")}
    f = {n: torch.complex(p[f"{pre}weight.{n}_real"], p[f"{pre}weight.{n}_imag"])
         for n in names}
    return factorized_dense(torch.einsum, conv.factorization, f, conv.weight.order)


def spectral_conv(torch: Any, x: Any, p: dict, pre: str, conv: Any,
                  out_grid: Sequence[int] | None = None) -> Any:
    """SpectralConv (dense weights, or factorised ones rebuilt): X = rfftn(x),
    Y_k = sum_i X_ik W_iok (separable: X_ok W_ok) on the kept modes centred on 0, the same
    frequencies placed into the spectrum of ``out_grid`` (default the input grid), the
    zero and Nyquist rfft bins made real, irfftn; fft norm ``conv.fft_norm``; plus the
    bias."""
    d = conv.order
    dims = list(range(-d, 0))
    grid = list(x.shape[2:])
    out_grid = grid if out_grid is None else list(out_grid)
    X = torch.fft.rfftn(x, norm=conv.fft_norm, dim=dims)
    if d > 1:
        X = torch.fft.fftshift(X, dim=dims[:-1])
    w = _spectral_weight(torch, p, pre, conv)[_kept_weight_index(conv)]
    kept = conv.n_modes
    letters = "xyz"[:d]
    Xk = X[_centred(grid, kept)]
    if conv.separable:
        Y = Xk * w
    else:
        Y = torch.einsum(f"bi{letters},io{letters}->bo{letters}", Xk, w)
    bins = out_grid[-1] // 2 + 1
    out = torch.zeros([x.shape[0], conv.out_channels] + out_grid[:-1] + [bins], dtype=X.dtype)
    out[_centred(out_grid, kept)] = Y
    if d > 1:
        out = torch.fft.ifftshift(out, dim=dims[:-1])
        out = torch.fft.ifftn(out, dim=dims[:-1], norm=conv.fft_norm)
    real = torch.ones(bins, dtype=x.dtype)
    real[0] = 0
    if out_grid[-1] % 2 == 0:
        real[-1] = 0
    out = torch.complex(out.real, out.imag * real)
    y = torch.fft.irfft(out, n=out_grid[-1], dim=-1, norm=conv.fft_norm)
    return y + p[pre + "bias"] if pre + "bias" in p else y


def resample(torch: Any, x: Any, out: Sequence[int]) -> Any:
    """neuraloperator's resample(x, 1.0, dims, output_shape=out): linear (1 grid dim) or
    bicubic (2) interpolation with align_corners=True; for 3 grid dims the Fourier
    resampling (the lowest frequencies of both grids kept, norm 'forward')."""
    F = torch.nn.functional
    out = list(out)
    if list(x.shape[2:]) == out:
        return x
    if x.ndim == 3:
        return F.interpolate(x, size=out, mode="linear", align_corners=True)
    if x.ndim == 4:
        return F.interpolate(x, size=out, mode="bicubic", align_corners=True)
    dims = [2, 3, 4]
    X = torch.fft.rfftn(x, norm="forward", dim=dims)
    fft_out = out[:-1] + [out[-1] // 2 + 1]
    m = [min(a, b) for a, b in zip(fft_out, X.shape[2:])]
    Y = torch.zeros(list(x.shape[:2]) + fft_out, dtype=X.dtype)
    for a in ((None, m[0] // 2), (-m[0] // 2, None)):   # -m // 2 is -ceil(m / 2)
        for b in ((None, m[1] // 2), (-m[1] // 2, None)):
            idx = (slice(None), slice(None), slice(*a), slice(*b), slice(None, m[2]))
            Y[idx] = X[idx]
    return torch.fft.irfftn(Y, s=out, norm="forward", dim=dims)


def grid_embedding(torch: Any, x: Any, bounds: Sequence[Sequence[float]] | None = None) -> Any:
    """x [B, C, *grid] with the coordinates of the regular grid appended as channels:
    a_j + (b_j - a_j) n / N_j along dim j (bounds default [0, 1])."""
    bounds = bounds if bounds is not None else [[0.0, 1.0]] * (x.ndim - 2)
    axes = [a + (b - a) * torch.arange(n, dtype=torch.float64) / n
            for n, (a, b) in zip(x.shape[2:], bounds)]
    grid = torch.stack(torch.meshgrid(*axes, indexing="ij")).to(x.dtype)
    return torch.cat([x, grid[None].expand(x.shape[0], *grid.shape)], dim=1)


def _norm_kind(blocks: Any) -> tuple[str | None, int]:
    if blocks.norm is None:
        return None, 1
    kind = {"GroupNorm": "group_norm", "_InstanceNorm": "instance_norm",
            "AdaIN": "ada_in"}.get(type(blocks.norm[0]).__name__, "batch_norm")
    return kind, getattr(blocks.norm[0], "num_groups", 1)


def fno_block(torch: Any, x: Any, p: dict, blocks: Any, i: int, pre: str = "fno_blocks.",
              out_grid: Sequence[int] | None = None) -> Any:
    """neuraloperator's FNOBlocks.forward(x, i): u = K_i(x) + W_i x (skips resampled to
    ``out_grid``), gelu unless last; u = M_i(u) + S_i x; gelu unless last; group /
    instance / batch norm after K and M (or, preactivation, gelu and norm first)."""
    gelu = torch.nn.functional.gelu
    last = i == blocks.n_layers - 1
    kind, groups = _norm_kind(blocks)
    out_grid = list(x.shape[2:]) if out_grid is None else list(out_grid)

    def nrm(v: Any, k: int) -> Any:
        return norm(torch, v, p, f"{pre}norm.{2 * i + k}.", kind, groups,
                    blocks.norm[2 * i + k])

    if blocks.preactivation:
        x = gelu(x)
        if kind:
            x = nrm(x, 0)
    sf = sm = None
    if blocks.fno_skip is not None:
        sf = resample(torch, skip(torch, x, p, f"{pre}fno_skips.{i}.", blocks.fno_skip,
                                  getattr(blocks, "conv_bias_kernel", 1)), out_grid)
    if blocks.use_channel_mlp and blocks.channel_mlp_skip is not None:
        sm = resample(torch, skip(torch, x, p, f"{pre}channel_mlp_skips.{i}.",
                                  blocks.channel_mlp_skip), out_grid)
    if blocks.stabilizer == "tanh":
        x = torch.tanh(x)
    u = spectral_conv(torch, x, p, f"{pre}convs.{i}.", blocks.convs[i], out_grid)
    if kind and not blocks.preactivation:
        u = nrm(u, 0)
    u = u + sf if sf is not None else u
    if not last:
        u = gelu(u)
    if kind and blocks.preactivation:
        u = nrm(u, 1)
    if blocks.use_channel_mlp:
        u = channel_mlp(torch, u, p, f"{pre}channel_mlp.{i}.")
        u = u + sm if sm is not None else u
    if blocks.preactivation:
        return u
    if kind:
        u = nrm(u, 1)
    return gelu(u) if not last else u


def _pad_sizes(padding: Any, grid: Sequence[int]) -> list[int]:
    """Symmetric domain padding: round(f_j N_j) points on each side of dim j."""
    f = padding.domain_padding
    f = f if isinstance(f, list) else [f] * len(grid)
    return [round(fk * n) for fk, n in zip(f, grid)]


def _pad(torch: Any, v: Any, pads: Sequence[int]) -> Any:
    return torch.nn.functional.pad(v, [q for pk in reversed(pads) for q in (pk, pk)])


def _crop(v: Any, pads: Sequence[int]) -> Any:
    return v[(Ellipsis,) + tuple(slice(c, -c) if c else slice(None) for c in pads)]


def fno_forward(torch: Any, x: Any, p: dict, model: Any) -> Any:
    """neuraloperator's FNO.forward: grid embedding, lifting channel-MLP, symmetric
    domain padding, the FNOBlocks, crop, projection channel-MLP."""
    if model.positional_embedding is not None:
        x = grid_embedding(torch, x, model.positional_embedding.grid_boundaries)
    v = channel_mlp(torch, x, p, "lifting.")
    pads = None
    if model.domain_padding is not None:
        pads = _pad_sizes(model.domain_padding, v.shape[2:])
        v = _pad(torch, v, pads)
    for i in range(model.n_layers):
        v = fno_block(torch, v, p, model.fno_blocks, i)
    if pads is not None:
        v = _crop(v, pads)
    return channel_mlp(torch, v, p, "projection.")


def _per_dim(scaling: Any, d: int) -> list[float]:
    if np.isscalar(scaling):
        return [scaling] * d
    return list(scaling) * d if len(scaling) == 1 else list(scaling)


def uno_forward(torch: Any, x: Any, p: dict, model: Any) -> Any:
    """neuraloperator's UNO.forward: grid embedding, lifting, domain padding, layer i an
    FNOBlocks of one layer mapping its grid to round(N uno_scalings[i]) (the last: to
    the end-to-end scaled grid), horizontal skips resampled and concatenated in
    channels, crop scaled end to end, projection."""
    d = model.n_dim
    if model.positional_embedding is not None:
        x = grid_embedding(torch, x)
    v = channel_mlp(torch, x, p, "lifting.")
    pads = None
    if model.domain_padding is not None:
        pads = _pad_sizes(model.domain_padding, v.shape[2:])
        v = _pad(torch, v, pads)
    e2e = [1.0] * d
    for s in model.uno_scalings:
        e2e = [a * b for a, b in zip(e2e, _per_dim(s, d))]
    final = [round(n * s) for n, s in zip(v.shape[2:], e2e)]
    saved = {}
    for i in range(model.n_layers):
        if i in model.horizontal_skips_map:
            h = resample(torch, saved[model.horizontal_skips_map[i]], v.shape[2:])
            v = torch.cat([v, h], dim=1)
        s = _per_dim(model.uno_scalings[i], d)
        last = i == model.n_layers - 1
        out = final if last else [round(n * f) for n, f in zip(v.shape[2:], s)]
        v = fno_block(torch, v, p, model.fno_blocks[i], 0, f"fno_blocks.{i}.", out)
        if i in model.horizontal_skips_map.values():
            saved[i] = skip(torch, v, p, f"horizontal_skips.{i}.", model.horizontal_skip)
    if pads is not None:
        v = _crop(v, [round(s * pk) for s, pk in zip(e2e, pads)])
    return channel_mlp(torch, v, p, "projection.")
