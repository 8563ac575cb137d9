"""Vector and matrix norms under torch.linalg's names, and the two distances of
``torch.nn.functional`` built on them (cosine_similarity, pairwise_distance).

All are compositions of registered ops: vector_norm is the registered ``norm`` of
``ops/reduce.py`` (its kernels and PyTorch's gradient conventions: 0 for the 2-norm of a
zero vector, the inf-norm gradient shared evenly among tied entries); matrix_norm is
vector_norm for 'fro' and, for ord = 1, -1, inf, -inf, the column (or row) sums of |A|
followed by amax/amin, as PyTorch computes them (so the same tie splitting); for ord = 2,
-2 and 'nuc', amax / amin / sum of the singular values (``svdvals``, ops/svd.py), also as
PyTorch. ``nb.linalg`` exports ``__all__`` (with ``svd`` and ``svdvals``);
cosine_similarity and pairwise_distance are exported at the top level and in
``nn.functional``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..tensor import Tensor, lift
from . import _args
from .reduce import Norm, amax, amin
from .reduce import sum as reduce_sum
from .shape import broadcast_to, permute
from .svd import svd, svdvals


def _ord(op: str, ord: Any) -> float:
    if isinstance(ord, bool) or not isinstance(ord, int | float | np.integer | np.floating):
        raise TypeError(f"{op}: ord must be a real number, got {ord!r}")
    return float(ord)


def _float_tensor(op: str, x: Any, name: str, dtype: Any) -> Tensor:
    """x as a float Tensor, cast up to ``dtype`` when given (never narrowed), as PyTorch."""
    x = lift(x)
    if x.dtype.kind != "f" or x.dtype.itemsize < 4:
        raise TypeError(f"{op}: expected a float32 or float64 tensor as {name}, got {x.dtype} "
                        f"(shape {tuple(x.shape)})")
    if dtype is None:
        return x
    dt = _args.float_dtype(op, dtype)
    if dt.itemsize < x.dtype.itemsize:
        raise TypeError(f"{op}: {name} of dtype {x.dtype} cannot be converted to dtype={dt} "
                        f"without narrowing")
    return x if dt == x.dtype else x.to(dt)


def _vector_norm(op: str, x: Tensor, ord: float, dim: Any, keepdim: bool) -> Tensor:
    shape = tuple(x.shape)
    if isinstance(dim, tuple | list) and len(dim) == 0:
        dim = None  # PyTorch: an empty dim list reduces every dim
    reduced = _args.axes(op, dim, shape, "dim")
    if (ord < 0 or math.isinf(ord)) and any(shape[d] == 0 for d in reduced):
        raise ValueError(f"{op}: cannot compute the {ord:g} norm over dim {dim!r} of x of "
                         f"shape {shape}: a reduced dim is empty and the operation has no "
                         f"identity")
    return Norm.apply(x, ord=ord, axis=dim, keepdims=bool(keepdim))


def vector_norm(x: Any, ord: float = 2, dim: Any = None, keepdim: bool = False, *,
                dtype: Any = None) -> Tensor:
    """The vector ord-norm (sum |x|^ord)^(1/ord) over ``dim`` (int, tuple, or None/() for
    every dim): ord = inf is max |x|, -inf min |x|, 0 the count of non-zeros. Gradients
    as PyTorch: 0 for the 2-norm of a zero vector, the +-inf norms' gradient shared evenly
    among tied entries. ``dtype`` casts x up first. As ``torch.linalg.vector_norm``."""
    op = "linalg.vector_norm"
    ord = _ord(op, ord)
    x = _float_tensor(op, x, "x", dtype)
    return _vector_norm(op, x, ord, dim, keepdim)


def _matrix_dims(op: str, dim: Any, shape: tuple) -> tuple[int, int]:
    if (not isinstance(dim, tuple | list)
            or not all(_args.is_int(d) for d in dim)):
        raise TypeError(f"{op}: dim must be a tuple of 2 ints, got {dim!r}")
    if len(dim) != 2:
        raise ValueError(f"{op}: dim must be a 2-tuple, got {tuple(dim)!r}")
    d0, d1 = (_args.one_dim(op, d, shape) for d in dim)
    if d0 == d1:
        raise ValueError(f"{op}: dims must be different, got {tuple(dim)!r} (shape {shape})")
    return d0, d1


def matrix_norm(A: Any, ord: Any = "fro", dim: Any = (-2, -1), keepdim: bool = False, *,
                dtype: Any = None) -> Tensor:
    """The matrix norm of A over the two dims ``dim`` (batched over the others): 'fro'
    (sqrt of the sum of squares), 'nuc' (the sum of the singular values), 2 / -2 (the
    largest / smallest singular value), 1 / -1 (max / min column sum of |A|), inf / -inf
    (max / min row sum of |A|). As ``torch.linalg.matrix_norm``."""
    op = "linalg.matrix_norm"
    if isinstance(ord, str):
        if ord not in ("fro", "nuc"):
            raise ValueError(f"{op}: ord={ord!r} is not supported (use 'fro', 'nuc', 2, -2, 1, "
                             f"-1, inf or -inf)")
    else:
        ord = _ord(op, ord)
        if abs(ord) not in (1, 2, math.inf):
            raise ValueError(f"{op}: ord={ord:g} is not supported (use 'fro', 'nuc', 2, -2, "
                             f"1, -1, inf or -inf)")
    A = _float_tensor(op, A, "A", dtype)
    shape = tuple(A.shape)
    if A.ndim < 2:
        raise ValueError(f"{op}: A must have at least 2 dimensions, got shape {shape}")
    d0, d1 = _matrix_dims(op, dim, shape)
    if ord == "fro":
        return _vector_norm(op, A, 2.0, (d0, d1), keepdim)
    if ord == "nuc" or abs(ord) == 2:
        return _spectral(op, A, ord, d0, d1, keepdim)
    if math.isinf(ord):  # the row sums: the 1-norm of the transpose
        d0, d1 = d1, d0
    if shape[d1] == 0:
        if ord < 0:
            raise IndexError(f"{op}: the {ord:g} norm takes a min over dim {d1}, which is "
                             f"empty (A of shape {shape})")
        return _vector_norm(op, A, 1.0, (d0, d1), keepdim)  # zeros of the result's shape
    sums = _vector_norm(op, A, 1.0, d0, keepdim)
    if not keepdim and d0 < d1:
        d1 -= 1
    return (amax if ord > 0 else amin)(sums, d1, keepdim)


def _spectral(op: str, A: Tensor, ord: Any, d0: int, d1: int, keepdim: bool) -> Tensor:
    """'nuc', 2 or -2: the sum, amax or amin of the singular values of A's matrices over
    dims (d0, d1), as PyTorch (which moves those dims last and calls svdvals)."""
    shape = tuple(A.shape)
    if min(shape[d0], shape[d1]) == 0:
        if ord == -2:
            raise IndexError(f"{op}: the -2 norm takes a min over the singular values, of "
                             f"which A of shape {shape} has none over dims ({d0}, {d1})")
        return _vector_norm(op, A, 1.0, (d0, d1), keepdim)  # zeros of the result's shape
    rest = [d for d in range(A.ndim) if d not in (d0, d1)]
    S = svdvals(permute(A, *rest, d0, d1))
    out = reduce_sum(S, -1) if ord == "nuc" else (amax if ord > 0 else amin)(S, -1)
    if keepdim:
        out = out.reshape(tuple(1 if d in (d0, d1) else n for d, n in enumerate(shape)))
    return out


def norm(A: Any, ord: Any = None, dim: Any = None, keepdim: bool = False, *,
         dtype: Any = None) -> Tensor:
    """``torch.linalg.norm``: with ``dim`` of 2 dims, or no ``dim`` and a 2-D A, and ord
    given, the matrix norm ``matrix_norm``; otherwise the vector norm ``vector_norm``
    (ord = None is the 2-norm of A flattened, or over ``dim``). A string ord is a matrix
    norm. With ord given and no dim, A must be 1-D or 2-D."""
    op = "linalg.norm"
    shape = tuple(lift(A).shape)
    if dim is not None:
        dims = (dim,) if _args.is_int(dim) else dim
        if not isinstance(dims, tuple | list) or not all(_args.is_int(d) for d in dims):
            raise TypeError(f"{op}: dim must be an int or a tuple of ints, got {dim!r}")
        if len(dims) not in (1, 2):
            raise ValueError(f"{op}: if dim is given it must have 1 or 2 dims, got {dim!r}")
        dim = tuple(dims)
    elif ord is not None and len(shape) not in (1, 2):
        raise ValueError(f"{op}: if dim is not given but ord is, A must be 1-D or 2-D, got "
                         f"shape {shape}")
    if ord is not None and (isinstance(ord, str) or (dim is not None and len(dim) == 2)
                            or (dim is None and len(shape) == 2)):
        return matrix_norm(A, ord, (0, 1) if dim is None else dim, keepdim, dtype=dtype)
    return vector_norm(A, 2 if ord is None else ord, dim, keepdim, dtype=dtype)


# -- distances (torch.nn.functional) -----------------------------------------------------


def _common(op: str, x1: Any, x2: Any, ints: bool) -> tuple[Tensor, Tensor, tuple]:
    """x1, x2 as Tensors of their common float dtype (float32 for two integer inputs when
    ``ints``, else a TypeError), and their broadcast shape."""
    x1, x2 = lift(x1), lift(x2)
    dtype = _args.promoted_dtype(x1.dtype, x2.dtype)
    if dtype.kind != "f":
        if not ints:
            raise TypeError(f"{op}: expected the common dtype of x1 and x2 to be floating "
                            f"point, got {x1.dtype} and {x2.dtype}")
        dtype = np.dtype(np.float32)  # the default float dtype, as x1 - x2 + eps
    if dtype.itemsize < 4:
        raise TypeError(f"{op}: x1 and x2 must be float32 or float64 (or integers), got "
                        f"{x1.dtype} and {x2.dtype}")
    try:
        shape = np.broadcast_shapes(tuple(x1.shape), tuple(x2.shape))
    except ValueError:
        raise ValueError(f"{op}: x1 of shape {tuple(x1.shape)} and x2 of shape "
                         f"{tuple(x2.shape)} are not broadcastable") from None
    return (x1 if x1.dtype == dtype else x1.to(dtype),
            x2 if x2.dtype == dtype else x2.to(dtype), shape)


def cosine_similarity(x1: Any, x2: Any, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """sum(x1 / max(||x1||, eps) * x2 / max(||x2||, eps)) over ``dim``, x1 and x2
    broadcast together, norms the 2-norms over ``dim``. As PyTorch, the clamp to eps is
    outside the graph: the gradient flows through ||x|| as if unclamped.
    As ``torch.nn.functional.cosine_similarity``."""
    op = "cosine_similarity"
    x1, x2, shape = _common(op, x1, x2, ints=False)
    d = _args.one_dim(op, dim, shape)
    eps = _args.real(op, "eps", eps)
    x1 = x1 if tuple(x1.shape) == shape else broadcast_to(x1, shape)
    x2 = x2 if tuple(x2.shape) == shape else broadcast_to(x2, shape)
    axis = d if len(shape) else None

    def clamped_norm(x: Tensor) -> Tensor:
        n = Norm.apply(x, ord=2.0, axis=axis, keepdims=True)
        floor = np.maximum(n._data, np.asarray(eps, n.dtype))
        return n - n.detach() + lift(floor)  # the value max(n, eps), the gradient of n

    return reduce_sum((x1 / clamped_norm(x1)) * (x2 / clamped_norm(x2)), axis)


def pairwise_distance(x1: Any, x2: Any, p: float = 2.0, eps: float = 1e-6,
                      keepdim: bool = False) -> Tensor:
    """The p-norm of x1 - x2 + eps over the last dim (of the broadcast shape), PyTorch's
    norm conventions (p any real number, inf, -inf, 0).
    As ``torch.nn.functional.pairwise_distance``."""
    op = "pairwise_distance"
    x1, x2, shape = _common(op, x1, x2, ints=True)
    p = _args.real(op, "p", p)
    eps = _args.real(op, "eps", eps)
    diff = x1 - x2 + eps
    if (p < 0 or math.isinf(p)) and len(shape) and shape[-1] == 0:
        raise ValueError(f"{op}: cannot compute the {p:g} norm over the empty last dim of "
                         f"shape {shape}")
    return Norm.apply(diff, ord=p, axis=-1 if len(shape) else None, keepdims=bool(keepdim))


__all__ = ["matrix_norm", "norm", "svd", "svdvals", "vector_norm"]
