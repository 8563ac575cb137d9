"""The rest of PyTorch's point-wise math, as entries of the op table (ops/table.py):
log1p, expm1, reciprocal, rsqrt; the roundings floor, ceil, trunc, round, frac and sign;
fmod, remainder and floor_divide (``%`` and ``//``); clamp_min and clamp_max.

log1p and expm1 evaluate libm in float64 and round float32 once, so they stay accurate
near 0 where log(1 + x) and exp(x) - 1 cancel. Integer inputs follow PyTorch: the
roundings and sign keep them (a copy), the others compute in the default float dtype."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..dtypes import default_numpy
from ..function import Sample
from ..kernels import elementwise as elementwise_kernels
from ..kernels import strided_apply
from ..runtime.jit import for_work
from ..tensor import Tensor, lift
from . import _args, binary
from .elementwise import (
    _operands,
    _positive_samples,
    _rounded_quotient,
    _rounded_samples,
    _smooth_samples,
    div,
)
from .table import broadcasting, pointwise, upstream
from .table import flat as _flat


# -- log1p expm1 reciprocal rsqrt, rounding, sign, frac: point-wise table entries ---------------
def _log1p_samples(rng):
    for s in _smooth_samples(rng):
        yield Sample(np.asarray(0.7 * np.tanh(s.inputs[0])), label=s.label)  # in (-0.7, 0.7)


def _away_from_zero_samples(rng):
    for shape in [(), (5,), (3, 4), (2, 3, 2)]:
        yield Sample(np.asarray(rng.uniform(0.4, 2.5, shape) * rng.choice([-1.0, 1.0], shape)),
                     label=str(shape))


def _near_integer_free(rng, offset: float):
    """Values k + offset + u, u in [-0.4, 0.4] (k an integer in [-3, 3]): at least 0.1 from
    every integer + offset + 1/2, so finite differences never cross a jump of
    floor/ceil/trunc/frac (offset 0.5) or of round (offset 0)."""
    for shape in [(), (5,), (3, 4), (2, 3, 2)]:
        k = rng.integers(-3, 4, shape)
        yield np.asarray(k + offset + rng.uniform(-0.4, 0.4, shape)), str(shape)


def _step_samples(rng):
    for x, label in _near_integer_free(rng, 0.5):
        yield Sample(x, label=label)


def _round_samples(rng):
    for x, label in _near_integer_free(rng, 0.0):
        yield Sample(x, decimals=0.0, label=label)
    for x, label in _near_integer_free(rng, 0.0):
        yield Sample(np.asarray(x / 100), decimals=2.0, label=f"{label} decimals=2")
        yield Sample(np.asarray(x * 10), decimals=-1.0, label=f"{label} decimals=-1")


def _zero_vjp(g: Tensor, x: Tensor, y: Tensor | None) -> Tensor:
    """The vjp of a piecewise-constant op: zeros (PyTorch's zeros_like(grad))."""
    return lift(np.zeros(g.shape, g.dtype))


def _math_entry(name: str, op: int, saves: str, vjp: Callable, samples: Callable,
                doc: str) -> Callable[..., Tensor]:
    """The point-wise table entry of ``name``: ``kernels/elementwise.py``'s op-coded
    ``math_forward``/``math_backward`` with the op code ``op``."""
    return pointwise(name, forward=elementwise_kernels.math_forward,
                     backward=elementwise_kernels.math_backward, kernel_args=(op,),
                     saves=saves, vjp=vjp, samples=samples, doc=doc)


K = elementwise_kernels  # the op codes, for the entries below
_log1p = _math_entry("log1p", K.LOG1P, "input", lambda g, x, y: g / (x + 1), _log1p_samples,
                     "log(1 + x), accurate near 0; derivative 1 / (1 + x).")
_expm1 = _math_entry("expm1", K.EXPM1, "output", lambda g, x, y: g * (y + 1), _smooth_samples,
                     "e^x - 1, accurate near 0; derivative e^x = expm1(x) + 1.")
_reciprocal = _math_entry("reciprocal", K.RECIPROCAL, "output", lambda g, x, y: -g * (y * y),
                          _away_from_zero_samples, "1 / x; derivative -1/x^2 = -y^2.")
_rsqrt = _math_entry("rsqrt", K.RSQRT, "output", lambda g, x, y: -0.5 * g * (y * y * y),
                     _positive_samples, "1 / sqrt(x); derivative -x^(-3/2) / 2 = -y^3 / 2.")
_floor = _math_entry("floor", K.FLOOR, "input", _zero_vjp, _step_samples,
                     "The largest integer <= x; gradient 0.")
_ceil = _math_entry("ceil", K.CEIL, "input", _zero_vjp, _step_samples,
                    "The smallest integer >= x; gradient 0.")
_trunc = _math_entry("trunc", K.TRUNC, "input", _zero_vjp, _step_samples,
                     "x rounded toward zero; gradient 0.")
_frac = _math_entry("frac", K.FRAC, "input", lambda g, x, y: g, _step_samples,
                    "x - trunc(x); gradient 1.")
_sign = _math_entry("sign", K.SIGN, "input", _zero_vjp, _away_from_zero_samples,
                    "-1, 0 or 1 by the sign of x; gradient 0.")
_round = pointwise(
    "round", forward=K.round_forward, backward=K.round_backward, params={"decimals": 0.0},
    saves="input", vjp=_zero_vjp, samples=_round_samples,
    doc="x rounded half to even at ``decimals`` places; gradient 0.")
del K


def _in_default_float(x: Tensor) -> Tensor:
    """An integer or bool ``x`` (never requiring grad) converted to the default float
    dtype first, as PyTorch's type promotion does (so 1 / 3 is float32's 1 / 3)."""
    return lift(x._data.astype(default_numpy()))


def _integer_kept(name: str, x: Tensor) -> Tensor:
    """A copy of the integer ``x`` (floor, ceil, round and trunc of an integer are the
    integer, in its dtype); a bool ``x`` is a TypeError, as in PyTorch."""
    if x.dtype.kind == "b":
        raise TypeError(f"{name}: not supported for a bool tensor (shape {x.shape}), as in "
                        "PyTorch")
    return Tensor._wrap(x._data.copy(), None, 0)


def log1p(x: Any) -> Tensor:
    """log(1 + x), accurate for small x (``torch.log1p``; libm's log1p in float64, float32
    rounded from it); grad = g / (1 + x). log1p(-1) = -inf, below -1 NaN. An integer or
    bool input gives the default float dtype."""
    x = lift(x)
    return _log1p(_in_default_float(x) if x.dtype.kind in "biu" else x)


def expm1(x: Any) -> Tensor:
    """e^x - 1, accurate for small x (``torch.expm1``; libm's expm1 in float64, float32
    rounded from it); grad = g (expm1(x) + 1), from the saved output. An integer or bool
    input gives the default float dtype."""
    x = lift(x)
    return _expm1(_in_default_float(x) if x.dtype.kind in "biu" else x)


def reciprocal(x: Any) -> Tensor:
    """1 / x (``torch.reciprocal``; 1 / 0 = inf); grad = -g y^2, from the saved output. An
    integer or bool input gives the default float dtype."""
    x = lift(x)
    return _reciprocal(_in_default_float(x) if x.dtype.kind in "biu" else x)


def rsqrt(x: Any) -> Tensor:
    """1 / sqrt(x) (``torch.rsqrt``: a square root and a division; rsqrt(0) = inf, of a
    negative NaN); grad = -g y^3 / 2, from the saved output. An integer or bool input
    gives the default float dtype."""
    x = lift(x)
    return _rsqrt(_in_default_float(x) if x.dtype.kind in "biu" else x)


def floor(x: Any) -> Tensor:
    """The largest integer <= x (``torch.floor``); gradient 0. An integer input is returned
    as it is (a copy, same dtype); a bool input is a TypeError, as in PyTorch."""
    x = lift(x)
    return _integer_kept("floor", x) if x.dtype.kind in "biu" else _floor(x)


def ceil(x: Any) -> Tensor:
    """The smallest integer >= x (``torch.ceil``); gradient 0. Integer and bool inputs as
    ``floor``."""
    x = lift(x)
    return _integer_kept("ceil", x) if x.dtype.kind in "biu" else _ceil(x)


def trunc(x: Any) -> Tensor:
    """x rounded toward zero (``torch.trunc``, ``torch.fix``); gradient 0. Integer and
    bool inputs as ``floor``."""
    x = lift(x)
    return _integer_kept("trunc", x) if x.dtype.kind in "biu" else _trunc(x)


def round(x: Any, *, decimals: int = 0) -> Tensor:
    """x rounded to the nearest integer, halves to even (``torch.round``: 0.5 -> 0,
    1.5 -> 2); with ``decimals`` d, rint(x 10^d) / 10^d (d < 0: rint(x / 10^-d) 10^-d),
    in x's dtype as PyTorch. Gradient 0. An integer input is returned as it is (decimals
    must then be 0, as in PyTorch); a bool input is a TypeError."""
    if not _args.is_int(decimals):
        raise TypeError(f"round: decimals must be an int, got {decimals!r}")
    x = lift(x)
    if x.dtype.kind in "biu":
        if decimals != 0:
            raise TypeError(f"round: decimals={decimals} is not supported for an integer "
                            f"tensor ({x.dtype}, shape {x.shape}), as in PyTorch")
        return _integer_kept("round", x)
    return _round(x, decimals=float(decimals))


def frac(x: Any) -> Tensor:
    """x - trunc(x), with x's sign (``torch.frac``; frac(+-inf) = NaN); grad = g. Float
    inputs only, as in PyTorch."""
    x = lift(x)
    if x.dtype.kind in "biu":
        raise TypeError(f"frac: x must be float32 or float64, got {x.dtype} (shape "
                        f"{x.shape}), as in PyTorch")
    return _frac(x)


def sign(x: Any) -> Tensor:
    """-1, 0 or 1 by the sign of x (``torch.sign``; sign(0) = sign(-0) = sign(NaN) = 0);
    gradient 0. An integer input keeps its dtype; a bool input is returned as it is (a
    copy), as in PyTorch."""
    x = lift(x)
    if x.dtype.kind in "biu":
        data = x._data.copy() if x.dtype.kind == "b" else np.asarray(np.sign(x._data))
        return Tensor._wrap(data, None, 0)
    return _sign(x)


for _public, _entry in ((log1p, _log1p), (expm1, _expm1), (reciprocal, _reciprocal),
                        (rsqrt, _rsqrt), (floor, _floor), (ceil, _ceil), (trunc, _trunc),
                        (round, _round), (frac, _frac), (sign, _sign)):
    _public.function = _entry.function


# -- fmod, remainder: broadcasting table entries --------------------------------------------
def _mod_forward(name: str, floored: bool) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """The forward of fmod (``floored`` False) or remainder over the broadcast shape, in
    the promoted dtype: floats by ``kernels/elementwise.py: remainder_forward`` (a zero
    divisor gives NaN), integers by NumPy (exact; a zero divisor is a ZeroDivisionError,
    two bools a TypeError, as in PyTorch)."""
    def forward(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        shape = strided_apply.broadcast_shapes(name, a.shape, b.shape)
        dt = _args.promoted_dtype(a.dtype, b.dtype)
        if dt.kind != "f":
            if dt.kind == "b":
                raise TypeError(f"{name}: not supported for two bool operands (shapes "
                                f"{a.shape}, {b.shape}), as in PyTorch")
            if b.size and not b.all():
                raise ZeroDivisionError(f"{name}: integer division by zero (b of shape "
                                        f"{b.shape} holds a 0)")
            ufunc = np.remainder if floored else np.fmod
            return np.asarray(np.broadcast_to(ufunc(a, b), shape)).astype(dt, copy=False)
        out = np.empty(shape, dt)
        for_work(elementwise_kernels.remainder_forward, out.size)(
            _flat(np.broadcast_to(a.astype(dt, copy=False), shape)),
            _flat(np.broadcast_to(b.astype(dt, copy=False), shape)), floored, out.reshape(-1))
        return out
    return forward


def _mod_grad_b(mode: str) -> Callable[..., np.ndarray]:
    """d/db of a - b q(a, b), q the rounded quotient (piecewise constant): -q, times g
    and summed over b's broadcast axes (PyTorch's -grad * a.div(b, rounding_mode=mode))."""
    def grad_b(g: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        q = _rounded_quotient(a, b, mode)
        return binary.grad(strided_apply.MUL, g, q.astype(g.dtype, copy=False), b, -1.0)
    return grad_b


def _mod_samples(rng):
    """Quotients a / b at least 0.1 from an integer (the remainder jumps there); signs of
    both operands mixed, either side broadcast."""
    for s in _rounded_samples(rng):
        if s.params["mode"] == "trunc":
            yield Sample(*s.inputs, label=s.label.replace(" trunc", ""))


Fmod = broadcasting(
    "fmod", forward=_mod_forward("fmod", False), saves="inputs",
    grads=(upstream, _mod_grad_b("trunc")),
    vjps=(upstream, lambda g, a, b: -g * div(a, b, rounding_mode="trunc")),
    samples=_mod_samples)

Remainder = broadcasting(
    "remainder", forward=_mod_forward("remainder", True), saves="inputs",
    grads=(upstream, _mod_grad_b("floor")),
    vjps=(upstream, lambda g, a, b: -g * div(a, b, rounding_mode="floor")),
    samples=_mod_samples)


def fmod(a: Any, b: Any) -> Tensor:
    """C's fmod: a - trunc(a / b) b, exact, with the sign of a (``torch.fmod``), with
    NumPy broadcasting; grad_a = g, grad_b = -g trunc(a / b). A float zero divisor gives
    NaN; an integer one is a ZeroDivisionError (PyTorch's RuntimeError)."""
    return Fmod.apply(*_operands(a, b))


def remainder(a: Any, b: Any) -> Tensor:
    """Python's modulus a - floor(a / b) b, with the sign of b (``torch.remainder``,
    ``a % b``): fmod(a, b), plus b where that is non-zero and its sign differs from b's.
    grad_a = g, grad_b = -g floor(a / b). Zero divisors as ``fmod``."""
    return Remainder.apply(*_operands(a, b))


def floor_divide(a: Any, b: Any) -> Tensor:
    """floor(a / b) (``torch.floor_divide``, ``a // b``): ``div(a, b,
    rounding_mode='floor')``."""
    return div(a, b, rounding_mode="floor")


# -- clamp_min, clamp_max ---------------------------------------------------------------------
# clamp itself is ops/activation.py's (which imports this module): reached through the
# Tensor method that nbgrad/ops/__init__.py installs, so there is one clamp.
def clamp_min(x: Any, min: Any) -> Tensor:
    """max(x, min) (``torch.clamp_min``): ``clamp(x, min=min)``; ``min`` a number or a
    tensor broadcasting with x."""
    return lift(x).clamp(min=min)


def clamp_max(x: Any, max: Any) -> Tensor:
    """min(x, max) (``torch.clamp_max``): ``clamp(x, max=max)``; ``max`` a number or a
    tensor broadcasting with x."""
    return lift(x).clamp(max=max)


__all__ = ["log1p", "expm1", "reciprocal", "rsqrt", "floor", "ceil", "trunc", "round", "frac",
           "sign", "fmod", "remainder", "floor_divide", "clamp_min", "clamp_max"]
