"""Scans along a dim: cumsum, cumprod and diff.

* cumsum: y_i = x_0 + ... + x_i (``torch.cumsum``); backward: the reverse cumsum of g
  (g_i + ... + g_{n-1}), the same registered op with ``reverse=True``, so every order of
  derivative is a cumsum.
* cumprod: y_i = x_0 * ... * x_i; backward: sum_{j >= i} g_j prod_{k <= j, k != i} x_k,
  in O(n) per line and exact where x has zeros (``kernels/scan.py``). Its vjp is
  PyTorch's: the reverse cumsum of g * y, divided by x, when x has no zero, else the
  O(n^2) form (a cumprod of x with x_i replaced by 1, for each i).
* diff: x[1:] - x[:-1] along ``dim``, n times, after joining ``prepend``/``append``: a
  composition of slicing and subtraction.

The scans run in ``kernels/scan.py`` on x seen as ``[A, N, B]`` (the dim in the middle,
no transpose), each line in order from its first element: the same bits at any thread
count. As in PyTorch, float32 lines accumulate in float64 and each y_i is rounded once;
integer and bool inputs give int64 (exact, wrapping on overflow).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import to_numpy
from ..function import Function, Sample, register
from ..kernels import scan as scan_kernels
from ..runtime.jit import for_work
from ..tensor import Tensor, lift
from ._args import is_int, one_dim
from .compare import ne
from .convert import convert
from .select import where
from .shape import concat, getitem, reshape, transpose, unsqueeze


def _scan(x: np.ndarray, dim: int, product: bool, reverse: bool) -> np.ndarray:
    """The inclusive scan of ``x`` along ``dim`` (sum, or product), from the end with
    ``reverse``, in x's dtype (float64 accumulation for floats; int64 for integers)."""
    zero = np.float64(0) if x.dtype.kind == "f" else np.int64(0)
    x3 = np.ascontiguousarray(x).reshape(scan_kernels.three_d(x.shape or (1,), dim))
    out = np.empty(x3.shape, x.dtype if x.dtype.kind == "f" else np.int64)
    for_work(scan_kernels.scan, x.size)(x3, out, zero, product, reverse)
    return out.reshape(x.shape)


def _scan_samples(rng):
    for shape, dim, reverse in [((5,), 0, False), ((3, 4), 1, False), ((3, 4), 0, True),
                                ((2, 3, 4), 1, False), ((2, 3, 4), -1, True),
                                ((), 0, False), ((4, 1), 1, True)]:
        yield Sample(np.asarray(rng.standard_normal(shape)), dim=dim % max(len(shape), 1),
                     reverse=reverse, label=f"{shape} dim={dim} reverse={reverse}")


@register("cumsum", samples=_scan_samples)
class Cumsum(Function):
    """y = cumsum(x) along ``dim`` (non-negative), from the end with ``reverse``."""

    @staticmethod
    def forward(ctx, x, dim, reverse=False):
        return _scan(x, dim, False, reverse)

    @staticmethod
    def backward(ctx, g):
        return _scan(g, ctx.params["dim"], False, not ctx.params["reverse"])

    @staticmethod
    def vjp(ctx, g):
        return Cumsum.apply(g, dim=ctx.params["dim"], reverse=not ctx.params["reverse"])


def _cumprod_samples(rng):
    for shape, dim in [((5,), 0), ((3, 4), 1), ((3, 4), 0), ((2, 3, 4), 1), ((), 0)]:
        x = rng.uniform(0.5, 1.5, shape) * rng.choice([-1.0, 1.0], shape)
        yield Sample(np.asarray(x), dim=dim, label=f"{shape} dim={dim}")
    x = rng.uniform(0.5, 1.5, (3, 5))
    x[0, 2] = 0.0  # one zero
    x[1, 1] = x[1, 3] = 0.0  # two zeros
    x[2, 0] = 0.0  # a zero first
    yield Sample(x, dim=1, label="zeros along dim")
    yield Sample(np.ascontiguousarray(x.T), dim=0, label="zeros along dim 0")
    yield Sample(np.array([0.0, 1.3, -0.7]), dim=0, label="zero first, 1-D")
    yield Sample(np.array([1.2, 0.8, 0.0]), dim=0, label="zero last, 1-D")


@register("cumprod", samples=_cumprod_samples)
class Cumprod(Function):
    """y = cumprod(x) along ``dim`` (non-negative)."""

    @staticmethod
    def forward(ctx, x, dim):
        y = _scan(x, dim, True, False)
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        shape = scan_kernels.three_d(x.shape or (1,), ctx.params["dim"])
        gx = np.empty(shape, g.dtype)
        for_work(scan_kernels.cumprod_backward, x.size)(
            np.ascontiguousarray(x).reshape(shape), np.ascontiguousarray(y).reshape(shape),
            np.ascontiguousarray(g, dtype=x.dtype).reshape(shape), gx)
        return gx.reshape(x.shape)

    @staticmethod
    def vjp(ctx, g):
        x, y = ctx.inputs[0], ctx.output(ctx.saved_tensors[1])
        dim = ctx.params["dim"]
        if x.ndim == 0:
            return g
        if not (x._data == 0).any():
            return Cumsum.apply(g * y, dim=dim, reverse=True) / x
        # with zeros: grad_i = sum_{j >= i} g_j C[i, j], C[i] = cumprod of x with x_i := 1
        n = x.shape[dim]
        xl, gl = transpose(x, dim, -1), transpose(g, dim, -1)  # [..., n]
        ones = np.ones((), x._data.dtype)
        c = Cumprod.apply(where(np.eye(n, dtype=bool), ones, unsqueeze(xl, -2)), dim=xl.ndim)
        upper = np.triu(np.ones((n, n), x._data.dtype))  # [i, j]: j >= i
        return transpose((c * unsqueeze(gl, -2) * upper).sum(-1), dim, -1)


def _scan_input(op: str, x: Any, dtype: Any) -> Tensor:
    """``x`` in the scan's dtype: ``dtype`` if given, else x's own for floats and int64
    for integers and bools (PyTorch's)."""
    x = lift(x)
    if dtype is not None:
        return convert(x, to_numpy(dtype, op), op)
    if x.dtype.kind != "f":
        return Tensor._wrap(x._data.astype(np.int64), None, 0)
    return x


def cumsum(input: Any, dim: int, *, dtype: Any = None) -> Tensor:
    """Cumulative sum along ``dim`` (``torch.cumsum``): y_i = x_0 + ... + x_i. Integer and
    bool inputs give int64; ``dtype`` converts x first. Backward: the reverse cumsum of
    g."""
    x = _scan_input("cumsum", input, dtype)
    return Cumsum.apply(x, dim=one_dim("cumsum", dim, x.shape), reverse=False)


def cumprod(input: Any, dim: int, *, dtype: Any = None) -> Tensor:
    """Cumulative product along ``dim`` (``torch.cumprod``): y_i = x_0 * ... * x_i.
    Integer and bool inputs give int64; ``dtype`` converts x first. Backward:
    sum_{j >= i} g_j prod_{k <= j, k != i} x_k (exact with zeros in x)."""
    x = _scan_input("cumprod", input, dtype)
    return Cumprod.apply(x, dim=one_dim("cumprod", dim, x.shape))


def prod(input: Any, dim: int | None = None, keepdim: bool = False, *,
         dtype: Any = None) -> Tensor:
    """Product of the elements (``torch.prod``): of all of x (``dim=None``) or along
    ``dim`` (kept as a dim of size 1 with ``keepdim``); integer and bool inputs give int64.
    The last entry of ``cumprod`` along the dim, so the gradient is cumprod's:
    prod_{k != i} x_k, exact where x has zeros, and differentiable again."""
    x = _scan_input("prod", input, dtype)
    if dim is None:
        return prod(reshape(x, -1), 0)
    d = one_dim("prod", dim, x.shape)
    if x.ndim == 0:
        return x
    if x.shape[d] == 0:
        # the empty product is 1: written as 0 * sum + 1 so the result stays in the graph
        # (gradient zero, as PyTorch's)
        return x.sum(d, keepdim=keepdim) * 0 + 1
    last = (slice(None),) * d + ((slice(-1, None),) if keepdim else (-1,))
    return getitem(Cumprod.apply(x, dim=d), last)


def diff(input: Any, n: int = 1, dim: int = -1, prepend: Any = None,
         append: Any = None) -> Tensor:
    """The n-th forward difference along ``dim`` (``torch.diff``): x[1:] - x[:-1], n
    times, of x with ``prepend`` and ``append`` joined before and after it along ``dim``
    (their shapes equal x's but along ``dim``); n = 0 returns x. Bool inputs give
    ``x[1:] != x[:-1]``.
    Differentiable through slicing and subtraction."""
    x = lift(input)
    if not is_int(n):
        raise TypeError(f"diff: n must be an int, got {n!r}")
    if n < 0:
        raise ValueError(f"diff: order n must be non-negative, got {n}")
    if x.ndim == 0:
        raise ValueError("diff: x must be at least one-dimensional, got a 0-d tensor")
    d = one_dim("diff", dim, x.shape)
    if n == 0:  # x itself, prepend and append unused (PyTorch)
        return x
    parts = []
    for name, extra in (("prepend", prepend), (None, x), ("append", append)):
        if extra is None:
            continue
        extra = lift(extra)
        if name is not None:
            if extra.ndim != x.ndim or any(a != b for e, (a, b) in
                                           enumerate(zip(extra.shape, x.shape)) if e != d):
                raise ValueError(f"diff: {name} of shape {extra.shape} must have the shape "
                                 f"of x ({x.shape}) in every dim but dim {d}")
        parts.append(extra)
    y = concat(parts, d) if len(parts) > 1 else x
    lead = (slice(None),) * d
    for _ in range(n):
        if y.shape[d] == 0:
            break
        later, earlier = getitem(y, lead + (slice(1, None),)), getitem(y, lead + (slice(0, -1),))
        y = ne(later, earlier) if y.dtype.kind == "b" else later - earlier
    return y


__all__ = ["cumsum", "cumprod", "diff", "prod"]
