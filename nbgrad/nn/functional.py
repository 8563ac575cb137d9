"""``torch.nn.functional``'s names for nbgrad's ops: ``import nbgrad.nn.functional as F``.

Each name is defined once. Where an op of ``nbgrad.ops`` already takes PyTorch's
arguments (names and order after the input tensor), the F name is that op itself
(``F.gelu is nb.gelu``). Where PyTorch's F signature differs (``inplace=``, ``weight=`` /
``bias=`` for the convolutions, ``softmax``'s implicit dim), the F name is a thin adapter
written here and only here, with PyTorch's parameter names and defaults, that calls the
op. The few F-only functions PyTorch has no op for (``hardtanh``, ``relu6``,
``logsigmoid``, ``softmin``, ``normalize``, ``one_hot``) are compositions of ops.

``inplace=True`` works as in PyTorch: the input tensor is overwritten with the result and
returned (through ``nbgrad.ops.inplace``, so autograd records it as PyTorch does: a leaf
that requires grad is refused, a node that saved the old value refuses its backward).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from ..ops import (
    _args,
    activation,
    activation_extra,
    attention,
    conv,
    elementwise,
    indexing,
    linalg,
    loss,
    matmul,
    norm,
    pool,
    reduce,
    resample,
    select,
)
from ..ops import group_norm as _group_norm
from ..ops import pad as _pad
from ..ops.inplace import _in_place
from ..tensor import Tensor, lift

# -- the ops themselves (PyTorch's signature already) ------------------------------------------
tanh = activation.tanh
sigmoid = activation.sigmoid
gelu = activation.gelu
softplus = activation.softplus
linear = matmul.linear
max_pool1d = pool.max_pool1d
max_pool2d = pool.max_pool2d
avg_pool1d = pool.avg_pool1d
avg_pool2d = pool.avg_pool2d
batch_norm = norm.batch_norm
layer_norm = norm.layer_norm
pad = _pad.pad
embedding = indexing.embedding
cross_entropy = loss.cross_entropy
nll_loss = loss.nll_loss
binary_cross_entropy_with_logits = loss.binary_cross_entropy_with_logits
mse_loss = loss.mse_loss
l1_loss = loss.l1_loss
smooth_l1_loss = loss.smooth_l1_loss
huber_loss = loss.huber_loss
binary_cross_entropy = loss.binary_cross_entropy
kl_div = loss.kl_div
poisson_nll_loss = loss.poisson_nll_loss
gaussian_nll_loss = loss.gaussian_nll_loss
margin_ranking_loss = loss.margin_ranking_loss
hinge_embedding_loss = loss.hinge_embedding_loss
soft_margin_loss = loss.soft_margin_loss
multilabel_soft_margin_loss = loss.multilabel_soft_margin_loss
cosine_embedding_loss = loss.cosine_embedding_loss
triplet_margin_loss = loss.triplet_margin_loss
softsign = activation_extra.softsign
tanhshrink = activation_extra.tanhshrink
glu = activation_extra.glu
interpolate = resample.interpolate
upsample = resample.upsample
upsample_nearest = resample.upsample_nearest
upsample_bilinear = resample.upsample_bilinear
adaptive_avg_pool1d = resample.adaptive_avg_pool1d
adaptive_avg_pool2d = resample.adaptive_avg_pool2d
adaptive_avg_pool3d = resample.adaptive_avg_pool3d
adaptive_max_pool1d = resample.adaptive_max_pool1d
adaptive_max_pool2d = resample.adaptive_max_pool2d
pixel_shuffle = resample.pixel_shuffle
pixel_unshuffle = resample.pixel_unshuffle
group_norm = _group_norm.group_norm
instance_norm = _group_norm.instance_norm
cosine_similarity = linalg.cosine_similarity
pairwise_distance = linalg.pairwise_distance
scaled_dot_product_attention = attention.scaled_dot_product_attention


# -- activations with inplace= -----------------------------------------------------------------
def _maybe_in_place(op: str, input: Any, inplace: bool,
                    compute: Callable[[Tensor], Tensor]) -> Tensor:
    """``compute(input)``; with ``inplace``, written into ``input`` and ``input`` returned."""
    if not inplace:
        return compute(input)
    if not isinstance(input, Tensor):
        raise TypeError(f"{op}: inplace=True needs a Tensor input, got {type(input).__name__}")
    return _in_place(f"{op}_", input, compute)


def relu(input: Any, inplace: bool = False) -> Tensor:
    """max(x, 0) (``torch.nn.functional.relu``); gradient 0 at x = 0."""
    return _maybe_in_place("relu", input, inplace, activation.relu)


def leaky_relu(input: Any, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    """x where x > 0, negative_slope x elsewhere (``torch.nn.functional.leaky_relu``)."""
    return _maybe_in_place("leaky_relu", input, inplace,
                           lambda x: activation.leaky_relu(x, negative_slope))


def elu(input: Any, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """x where x > 0, alpha (e^x - 1) elsewhere (``torch.nn.functional.elu``)."""
    return _maybe_in_place("elu", input, inplace, lambda x: activation.elu(x, alpha))


def silu(input: Any, inplace: bool = False) -> Tensor:
    """x sigmoid(x) (``torch.nn.functional.silu``)."""
    return _maybe_in_place("silu", input, inplace, activation.silu)


def hardswish(input: Any, inplace: bool = False) -> Tensor:
    """x relu6(x + 3) / 6 (``torch.nn.functional.hardswish``)."""
    return _maybe_in_place("hardswish", input, inplace, activation_extra.hardswish)


def hardsigmoid(input: Any, inplace: bool = False) -> Tensor:
    """relu6(x + 3) / 6 (``torch.nn.functional.hardsigmoid``)."""
    return _maybe_in_place("hardsigmoid", input, inplace, activation_extra.hardsigmoid)


def mish(input: Any, inplace: bool = False) -> Tensor:
    """x tanh(softplus(x)) (``torch.nn.functional.mish``)."""
    return _maybe_in_place("mish", input, inplace, activation_extra.mish)


def selu(input: Any, inplace: bool = False) -> Tensor:
    """scale elu(x, alpha) with PyTorch's constants (``torch.nn.functional.selu``)."""
    return _maybe_in_place("selu", input, inplace, activation_extra.selu)


def celu(input: Any, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """max(0, x) + min(0, alpha (e^(x / alpha) - 1)) (``torch.nn.functional.celu``)."""
    return _maybe_in_place("celu", input, inplace,
                           lambda x: activation_extra.celu(x, alpha))


def _hardtanh(op: str, x: Any, min_val: float, max_val: float) -> Tensor:
    x = _args.float_input(op, x, "input")
    lo, hi = _args.real(op, "min_val", min_val), _args.real(op, "max_val", max_val)
    if lo > hi:
        raise ValueError(f"{op}: min_val ({lo}) cannot be greater than max_val ({hi})")
    # the values of clamp; the gradient only strictly inside (min_val, max_val) and at NaN,
    # as PyTorch (its backward zeroes it where x <= min_val or x >= max_val)
    inside = ~((x._data <= lo) | (x._data >= hi))
    return select.where(inside, x, activation.clamp(x.detach(), lo, hi))


def hardtanh(input: Any, min_val: float = -1.0, max_val: float = 1.0,
             inplace: bool = False) -> Tensor:
    """x clamped to [min_val, max_val] (``torch.nn.functional.hardtanh``); gradient 1
    strictly inside the interval, 0 at and beyond its ends."""
    return _maybe_in_place("hardtanh", input, inplace,
                           lambda x: _hardtanh("hardtanh", x, min_val, max_val))


def relu6(input: Any, inplace: bool = False) -> Tensor:
    """min(max(x, 0), 6) (``torch.nn.functional.relu6``): ``hardtanh(x, 0, 6)``."""
    return _maybe_in_place("relu6", input, inplace,
                           lambda x: _hardtanh("relu6", x, 0.0, 6.0))


def logsigmoid(input: Any) -> Tensor:
    """log(sigmoid(x)) = -softplus(-x), computed without overflow for any x
    (``torch.nn.functional.logsigmoid``); derivative sigmoid(-x)."""
    x = _args.float_input("logsigmoid", input, "input")
    return elementwise.neg(activation.softplus(elementwise.neg(x), threshold=float("inf")))


def dropout(input: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Inverted dropout (``torch.nn.functional.dropout``): in training each element is
    zeroed with probability p and the others scaled by 1 / (1 - p); ``input`` itself
    otherwise. The mask comes from the default generator (``nb.manual_seed``)."""
    if not training:
        norm.dropout(input, p, training=False)  # checks the arguments
        return input
    return _maybe_in_place("dropout", input, inplace, lambda x: norm.dropout(x, p, training))


# -- softmax family: PyTorch's implicit dim ----------------------------------------------------
def _softmax_dim(op: str, x: Any, dim: int | None, stacklevel: int) -> int:
    """PyTorch's legacy choice when ``dim`` is None (with its warning): dim 0 for 0-, 1- and
    3-d inputs, dim 1 otherwise."""
    if dim is not None:
        return dim
    warnings.warn(f"Implicit dimension choice for {op} has been deprecated. Change the call "
                  "to include dim=X as an argument.", UserWarning, stacklevel=stacklevel)
    return 0 if np.ndim(x._data if isinstance(x, Tensor) else x) in (0, 1, 3) else 1


def softmax(input: Any, dim: int | None = None, _stacklevel: int = 3,
            dtype: Any = None) -> Tensor:
    """e^x / sum(e^x) along ``dim`` (``torch.nn.functional.softmax``); ``dim=None`` picks
    PyTorch's implicit dim with its deprecation warning."""
    return activation.softmax(input, _softmax_dim("softmax", input, dim, _stacklevel), dtype)


def log_softmax(input: Any, dim: int | None = None, _stacklevel: int = 3,
                dtype: Any = None) -> Tensor:
    """x - logsumexp(x) along ``dim`` (``torch.nn.functional.log_softmax``); ``dim=None``
    as in ``softmax``."""
    d = _softmax_dim("log_softmax", input, dim, _stacklevel)
    return activation.log_softmax(input, d, dtype)


def softmin(input: Any, dim: int | None = None, _stacklevel: int = 3,
            dtype: Any = None) -> Tensor:
    """softmax(-x) along ``dim`` (``torch.nn.functional.softmin``); ``dim=None`` as in
    ``softmax``."""
    x = _args.float_input("softmin", input, "input") if dtype is None else lift(input)
    d = _softmax_dim("softmin", x, dim, _stacklevel)
    _args.one_dim("softmin", d, x.shape)
    return activation.softmax(elementwise.neg(x), d, dtype)


# -- convolutions: weight= and bias= -----------------------------------------------------------
def conv1d(input: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1) -> Tensor:
    """1-d cross-correlation (``torch.nn.functional.conv1d``): input (N, C_in, L), weight
    (C_out, C_in / groups, K)."""
    return conv.conv1d(input, weight, bias, stride, padding, dilation, groups)


def conv2d(input: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1) -> Tensor:
    """2-d cross-correlation (``torch.nn.functional.conv2d``): input (N, C_in, H, W),
    weight (C_out, C_in / groups, kH, kW)."""
    return conv.conv2d(input, weight, bias, stride, padding, dilation, groups)


def conv_transpose2d(input: Any, weight: Any, bias: Any = None, stride: Any = 1,
                     padding: Any = 0, output_padding: Any = 0, groups: int = 1,
                     dilation: Any = 1) -> Tensor:
    """The transpose (gradient) of conv2d (``torch.nn.functional.conv_transpose2d``):
    weight (C_in, C_out / groups, kH, kW)."""
    return conv.conv_transpose2d(input, weight, bias, stride, padding, output_padding,
                                 groups, dilation)


# -- normalize, one_hot ------------------------------------------------------------------------
def normalize(input: Any, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """x / max(||x||_p, eps) along ``dim`` (``torch.nn.functional.normalize``)."""
    x = _args.float_input("normalize", input, "input")
    d = _args.one_dim("normalize", dim, x.shape)
    denom = reduce.norm(x, p, d, keepdim=True)
    return elementwise.div(x, activation.clamp(denom, min=_args.real("normalize", "eps", eps)))


def one_hot(tensor: Any, num_classes: int = -1) -> Tensor:
    """An int64 tensor of shape ``tensor.shape + (num_classes,)`` with 1 at each class
    index and 0 elsewhere (``torch.nn.functional.one_hot``); ``num_classes=-1`` takes
    max + 1. Not differentiable."""
    index = lift(tensor)._data
    if not np.issubdtype(index.dtype, np.integer):
        raise TypeError(f"one_hot: tensor must hold integer class indices, got {index.dtype} "
                        f"(shape {index.shape})")
    if not _args.is_int(num_classes):
        raise TypeError(f"one_hot: num_classes must be an int, got {num_classes!r}")
    if num_classes == -1:
        if index.size == 0:
            raise ValueError("one_hot: can not infer the number of classes from an empty "
                             f"tensor (shape {index.shape}); pass num_classes")
        num_classes = int(index.max()) + 1
    if num_classes < 0:
        raise ValueError(f"one_hot: num_classes must be -1 or non-negative, got {num_classes}")
    if index.size and index.min() < 0:
        raise ValueError(f"one_hot: class values must be non-negative, got {index.min()}")
    if index.size and index.max() >= num_classes:
        raise ValueError(f"one_hot: class values must be smaller than num_classes "
                         f"({num_classes}), got {index.max()}")
    out = np.zeros((*index.shape, num_classes), dtype=np.int64)
    np.put_along_axis(out, index[..., None].astype(np.intp), 1, axis=-1)
    return Tensor(out)


__all__ = ["adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
           "adaptive_max_pool1d", "adaptive_max_pool2d", "avg_pool1d", "avg_pool2d", "batch_norm",
           "binary_cross_entropy", "binary_cross_entropy_with_logits", "celu", "conv1d", "conv2d",
           "conv_transpose2d", "cosine_embedding_loss", "cosine_similarity", "cross_entropy",
           "dropout", "elu", "embedding", "gaussian_nll_loss", "gelu", "glu", "group_norm",
           "hardsigmoid", "hardswish", "hardtanh", "hinge_embedding_loss", "huber_loss",
           "instance_norm", "interpolate", "kl_div", "l1_loss", "layer_norm", "leaky_relu",
           "linear", "log_softmax", "logsigmoid", "margin_ranking_loss", "max_pool1d",
           "max_pool2d", "mish", "mse_loss", "multilabel_soft_margin_loss", "nll_loss",
           "normalize", "one_hot", "pad", "pairwise_distance", "pixel_shuffle", "pixel_unshuffle",
           "poisson_nll_loss", "relu", "relu6", "scaled_dot_product_attention", "selu", "sigmoid",
           "silu", "smooth_l1_loss", "soft_margin_loss", "softmax", "softmin", "softplus",
           "softsign", "tanh", "tanhshrink", "triplet_margin_loss", "upsample",
           "upsample_bilinear", "upsample_nearest"]
