"""Random tensors beyond ``randn``/``rand``: ``randint``, ``randperm``, ``normal``,
``bernoulli``, the ``*_like`` draws, and the in-place ``Tensor.normal_``/
``Tensor.uniform_`` (installed here).

Every draw takes ``generator=`` (an ``nb.Generator``, which the draw advances); without
it, the numbers come from the default generator that ``nb.manual_seed`` seeds (see
``nbgrad/rng.py``). Arguments are checked before anything is drawn, so a refused call
leaves the generator where it was. The streams are NumPy's PCG64, not PyTorch's: a seed
repeats nbgrad's numbers, not torch's (docs/pytorch.md#random-numbers).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import dtypes, rng
from ..device import check_device, check_layout
from ..tensor import FLOAT_DTYPES, Tensor, rand, randn
from . import _args, inplace

_INT_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
_NUMBER_DTYPES = _INT_DTYPES + FLOAT_DTYPES


def randint(low: int | None = None, high: int | None = None,
            size: Sequence[int] | None = None, *, generator: Any = None,
            dtype: Any = np.int64, requires_grad: bool = False, device: Any = None) -> Tensor:
    """Integers drawn uniformly from ``low <= v < high`` (``high`` excluded), of shape
    ``size`` (a tuple): ``randint(high, size)`` or ``randint(low, high, size)``, as in
    PyTorch. ``dtype`` int64 (the default), int32, float32 or float64; the values do not
    depend on it. ``generator`` as for ``nb.randn``."""
    check_device(device, "randint")
    low, high, size = _randint_bounds("randint", low, high, size)
    shape = _size("randint", size)
    dtype = _number_dtype("randint", dtype, _NUMBER_DTYPES)
    _check_range("randint", low, high, dtype)
    _check_grad("randint", dtype, requires_grad)
    values = rng.resolve(generator, "randint").integers(low, high, shape, dtype=np.int64)
    return _tensor(values.astype(dtype, copy=False), requires_grad)


def randperm(n: int, *, generator: Any = None, dtype: Any = np.int64,
             requires_grad: bool = False, device: Any = None) -> Tensor:
    """A random permutation of ``0 .. n - 1`` (int64 unless ``dtype`` says otherwise);
    ``generator`` as for ``nb.randn``."""
    check_device(device, "randperm")
    n = _count("randperm", "n", n)
    dtype = _number_dtype("randperm", dtype, _NUMBER_DTYPES)
    if n:
        _check_range("randperm", 0, n, dtype)
    _check_grad("randperm", dtype, requires_grad)
    order = rng.resolve(generator, "randperm").permutation(n)
    return _tensor(order.astype(dtype, copy=False), requires_grad)


def randn_like(input: Any, *, generator: Any = None, dtype: Any = None,
               requires_grad: bool = False, device: Any = None) -> Tensor:
    """``randn`` of ``input``'s shape and (unless ``dtype`` is given) dtype."""
    return _float_draw_like("randn_like", randn, input, generator, dtype, requires_grad,
                            device)


def rand_like(input: Any, *, generator: Any = None, dtype: Any = None,
              requires_grad: bool = False, device: Any = None) -> Tensor:
    """``rand`` of ``input``'s shape and (unless ``dtype`` is given) dtype."""
    return _float_draw_like("rand_like", rand, input, generator, dtype, requires_grad,
                            device)


def _float_draw_like(op: str, draw: Any, input: Any, generator: Any, dtype: Any,
                     requires_grad: bool, device: Any) -> Tensor:
    """``draw`` (randn or rand) of ``input``'s shape and (unless ``dtype`` is given) dtype,
    float32 or float64."""
    check_device(device, op)
    shape, dtype = _like(op, input, dtype, FLOAT_DTYPES)
    return draw(shape, generator=rng.resolve(generator, op), dtype=dtype,
                requires_grad=requires_grad)


def randint_like(input: Any, low: int | None = None, high: int | None = None, *,
                 generator: Any = None, dtype: Any = None,
                 requires_grad: bool = False, device: Any = None) -> Tensor:
    """``randint`` of ``input``'s shape and (unless ``dtype`` is given) dtype:
    ``randint_like(x, high)`` or ``randint_like(x, low, high)``."""
    check_device(device, "randint_like")
    shape, dtype = _like("randint_like", input, dtype, _NUMBER_DTYPES)
    if high is None:
        low, high = 0, low
    low = 0 if low is None else low
    if high is None:
        raise TypeError("randint_like: missing the argument high")
    source = rng.resolve(generator, "randint_like")
    return randint(low, high, shape, generator=source, dtype=dtype,
                   requires_grad=requires_grad)


def normal(mean: Any = 0.0, std: Any = 1.0, size: Sequence[int] | None = None, *,
           generator: Any = None, dtype: Any = None, layout: Any = None,
           requires_grad: bool = False, device: Any = None) -> Tensor:
    """Samples of N(mean, std^2) (``torch.normal``): ``mean`` and ``std`` tensors (or one
    of them a number) broadcast against each other and give the shape, or two numbers
    with ``size``. Drawn as ``mean + std * randn`` from one generator; the result is a
    new tensor outside the graph (PyTorch gives mean and std zero gradient)."""
    check_device(device, "normal")
    check_layout(layout, "normal")
    numbers = [not isinstance(v, Tensor | np.ndarray) for v in (mean, std)]
    if all(numbers) == (size is None):
        raise TypeError("normal: give mean and std as tensors (or one of them a number), or "
                        "both as numbers with size")
    m, s = _values("normal", "mean", mean), _values("normal", "std", std)
    if not np.all(s >= 0):
        raise ValueError(f"normal: std must be >= 0 everywhere, got a std of shape {s.shape} "
                         f"with minimum {s.min()}")
    try:
        shape = _size("normal", size) if size is not None else np.broadcast_shapes(m.shape,
                                                                                   s.shape)
    except ValueError:
        raise ValueError(f"normal: mean of shape {m.shape} and std of shape {s.shape} do not "
                         "broadcast") from None
    floats = [v.dtype for v in (m, s) if v.dtype in FLOAT_DTYPES and v.ndim]
    dtype = _number_dtype("normal", dtype if dtype is not None else
                          floats[0] if floats else dtypes.get_default_dtype(), FLOAT_DTYPES)
    _check_grad("normal", dtype, requires_grad)
    values = rng.resolve(generator, "normal").standard_normal(shape)
    return _tensor((m + s * values).astype(dtype), requires_grad)


def bernoulli(input: Any, p: float | None = None, *, generator: Any = None) -> Tensor:
    """1 with probability ``input`` (or ``p`` for every element), else 0, in ``input``'s
    shape and dtype (``torch.bernoulli``): ``rand < probability``; outside the graph."""
    if not isinstance(input, Tensor | np.ndarray):
        raise TypeError(f"bernoulli: input must be a Tensor, got {type(input).__name__}")
    probability = _values("bernoulli", "input", input)
    if probability.dtype not in FLOAT_DTYPES:
        raise TypeError(f"bernoulli: input must be float32 or float64, got "
                        f"{probability.dtype}")
    if p is not None:
        probability = np.full(probability.shape, _args.real("bernoulli", "p", p))
    if not np.all((probability >= 0) & (probability <= 1)):
        raise ValueError("bernoulli: every probability must be in [0, 1] (input of shape "
                         f"{probability.shape})")
    draws = rng.resolve(generator, "bernoulli").random(probability.shape)
    return _tensor((draws < probability).astype(input.dtype), False)


def normal_(self: Tensor, mean: float = 0.0, std: float = 1.0, *,
            generator: Any = None) -> Tensor:
    """Fill ``self`` in place with samples of N(mean, std^2): ``mean + std * randn``
    (the numbers of ``randn`` from the same generator state). In place under the usual
    rules: a tensor that requires grad only inside ``nb.no_grad()``."""
    mean = _args.real("normal_", "mean", mean)
    std = _args.real("normal_", "std", std)
    if not std >= 0:
        raise ValueError(f"normal_: std must be >= 0, got {std}")
    _check_float_target("normal_", self)
    values = rng.resolve(generator, "normal_").standard_normal(self.shape)
    return inplace.assign("normal_", self, (Ellipsis,), mean + std * values)


def uniform_(self: Tensor, from_: float = 0.0, to: float = 1.0, *,
             generator: Any = None) -> Tensor:
    """Fill ``self`` in place with samples of the uniform distribution on [from_, to)
    (PyTorch's ``from``, a Python keyword; positional calls port unchanged). In place
    under the rules of every in-place op (a leaf that requires grad only inside
    ``nb.no_grad()``; on a tensor in the graph, recorded: no gradient to the old value)."""
    low = _args.real("uniform_", "from_", from_)
    high = _args.real("uniform_", "to", to)
    if not low <= high:
        raise ValueError(f"uniform_: expects from_ <= to, got from_={low}, to={high}")
    _check_float_target("uniform_", self)
    values = rng.resolve(generator, "uniform_").random(self.shape)
    return inplace.assign("uniform_", self, (Ellipsis,), low + (high - low) * values)


# -- argument checks -----------------------------------------------------------------------------
def _randint_bounds(op: str, low: Any, high: Any, size: Any) -> tuple[Any, Any, Any]:
    """(low, high, size) of PyTorch's two forms: ``(high, size)`` and ``(low, high, size)``."""
    if size is None and high is not None and not _args.is_int(high):
        low, high, size = None, low, high  # randint(high, size)
    if high is None:
        low, high = None, low
    if size is None:
        raise TypeError(f"{op}: missing the argument size (a tuple of ints)")
    if high is None:
        raise TypeError(f"{op}: missing the argument high")
    low = 0 if low is None else low
    for name, value in (("low", low), ("high", high)):
        if not _args.is_int(value):
            raise TypeError(f"{op}: {name} must be an int, got {type(value).__name__}")
    if not low < high:
        raise ValueError(f"{op}: expects low < high (high is excluded), got low={low}, "
                         f"high={high}")
    return int(low), int(high), size


def _size(op: str, size: Any) -> tuple[int, ...]:
    if not isinstance(size, tuple | list) or not all(_args.is_int(s) and s >= 0 for s in size):
        raise TypeError(f"{op}: size must be a tuple of non-negative ints, got {size!r}")
    return tuple(int(s) for s in size)


def _count(op: str, name: str, value: Any) -> int:
    if not _args.is_int(value):
        raise TypeError(f"{op}: {name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{op}: {name} must be >= 0, got {value}")
    return int(value)


def _number_dtype(op: str, dtype: Any, allowed: tuple[np.dtype, ...]) -> np.dtype:
    dt = dtypes.to_numpy(dtype, op)
    if dt not in allowed:
        raise TypeError(f"{op}: dtype must be one of {', '.join(map(str, allowed))}, got {dt}")
    return dt


def _check_range(op: str, low: int, high: int, dtype: np.dtype) -> None:
    """``low .. high - 1`` must be representable in an integer ``dtype``."""
    if dtype.kind not in "iu":
        return
    info = np.iinfo(dtype)
    if low < info.min or high - 1 > info.max:
        raise ValueError(f"{op}: the values {low} .. {high - 1} do not fit {dtype} "
                         f"(range {info.min} to {info.max})")


def _values(op: str, name: str, value: Any) -> np.ndarray:
    """A tensor's or array's values, or a real number as a 0-d array."""
    if isinstance(value, Tensor):
        return value.detach().numpy()
    if isinstance(value, np.ndarray):
        return value
    return np.asarray(_args.real(op, name, value))


def _check_grad(op: str, dtype: np.dtype, requires_grad: bool) -> None:
    if requires_grad and dtype not in FLOAT_DTYPES:
        raise TypeError(f"{op}: only float32/float64 tensors can require gradients, got "
                        f"dtype {dtype}")


def _like(op: str, input: Any, dtype: Any,
          allowed: tuple[np.dtype, ...]) -> tuple[tuple[int, ...], np.dtype]:
    """The shape and dtype a ``*_like`` draw makes: ``input``'s, or the given dtype."""
    if not isinstance(input, Tensor | np.ndarray):
        raise TypeError(f"{op}: input must be a Tensor, got {type(input).__name__}")
    return input.shape, _number_dtype(op, input.dtype if dtype is None else dtype, allowed)


def _check_float_target(op: str, t: Tensor) -> None:
    """An in-place fill takes a float tensor (and writes it under the rules of every
    in-place op, ``ops/inplace.py``: recorded on a tensor in the graph)."""
    if not isinstance(t, Tensor):
        raise TypeError(f"{op}: expected a Tensor, got {type(t).__name__}")
    if t.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{op}: needs a float32 or float64 tensor, got {np.dtype(t.dtype)}")
    inplace.check_target(op, t)


def _tensor(values: np.ndarray, requires_grad: bool) -> Tensor:
    t = Tensor._wrap(values, None, 0)
    t.requires_grad = requires_grad
    return t


Tensor.normal_ = normal_
Tensor.uniform_ = uniform_

__all__ = ["bernoulli", "normal", "rand_like", "randint", "randint_like", "randn_like",
           "randperm"]
