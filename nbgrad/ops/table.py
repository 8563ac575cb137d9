"""The point-wise op table: one ``pointwise(...)`` call per op (the style of HIPS autograd's
``defvjp``, JAX's ``defjvp`` and PyTorch's ``derivatives.yaml``).

A line names the op's forward and backward kernels, what the forward saves for the backward
(its input or its output), the derivative written with nbgrad ops (for second derivatives),
the parameters with their defaults, the gradcheck samples and the docstring::

    tanh = pointwise("tanh", forward=K.tanh_forward, backward=K.tanh_backward,
                     saves="output", derivative=lambda x, y: 1 - y * y,
                     samples=_smooth_samples, doc="...")

and ``pointwise`` makes the registered ``Function`` subclass and returns the public function
(float-input check, parameter checks). ``nbgrad/ops/__init__.py`` installs the Tensor method
of the same name from it.

The kernels stay explicit module-level loop nests (Numba's disk cache does not work for
kernels made in closures); the class made here only calls them, with the same arrays as a
hand-written class would:

    forward(x_flat, *params, out)             out: a new array of x's shape and dtype
    backward(g_flat, saved_flat, *params, out)

``derivative(x, y, **params)`` is f'(x) as a Tensor (x the input, y the output when the op
saves its output, else None); the op's ``vjp`` is ``g * derivative(...)``. Where f' is
piecewise constant (relu's kinks) it is a constant mask: a zero second derivative.
Ops that do not fit (several inputs, dtype-dependent kernels, row kernels) stay hand-written
Functions.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from ..function import Function, Sample, register
from ..runtime.jit import for_work
from ..tensor import Tensor
from . import _args


def flat(a: np.ndarray) -> np.ndarray:
    """A flat C-contiguous view (or copy, for strided and broadcast arrays) of ``a``."""
    return np.ascontiguousarray(a).reshape(-1)


def into(kernel: Callable, shape: tuple, dtype: Any, *args: Any) -> np.ndarray:
    """A new NumPy array of ``shape``, filled by the flat element-wise ``kernel(*args, out)``
    (its serial or parallel form by size; NumPy-owned, so the engine keeps a gradient
    returned this way without copying it)."""
    out = np.empty(shape, dtype)
    for_work(kernel, out.size)(*args, out.reshape(-1))
    return out


def pointwise(name: str, *, forward: Callable, backward: Callable, saves: str,
              derivative: Callable[..., Tensor],
              samples: Callable[[np.random.Generator], Iterable[Sample]], doc: str,
              params: Mapping[str, float] | None = None,
              check: Callable[..., None] | None = None,
              cls_name: str | None = None) -> Callable[..., Tensor]:
    """Make, register and return the point-wise op ``name`` (see the module docstring).

    ``params``: parameter names with their defaults, in the kernels' argument order; each
    must be a real number (TypeError naming the op and the parameter) and reaches the
    kernels as a float. ``check(**params)`` may raise for values the op does not accept.
    ``cls_name``: the Function subclass's name (default: ``name`` in CamelCase)."""
    if saves not in ("input", "output"):
        raise ValueError(f"pointwise({name!r}): saves must be 'input' or 'output', "
                         f"got {saves!r}")
    names = tuple(params or ())
    defaults = tuple(float(v) for v in (params or {}).values())
    saves_output = saves == "output"

    def forward_fn(ctx, x, **kw):
        if len(kw) > 0:
            unknown = kw.keys() - set(names)
            if unknown:
                raise TypeError(f"{name}: unknown parameter(s) {sorted(unknown)}")
            ctx.args = tuple(kw.get(n, d) for n, d in zip(names, defaults))
        else:
            ctx.args = defaults
        y = into(forward, x.shape, x.dtype, flat(x), *ctx.args)
        ctx.save_for_backward(y if saves_output else x)
        return y

    def backward_fn(ctx, g):
        (s,) = ctx.saved_tensors
        return into(backward, s.shape, s.dtype, flat(g), flat(s), *ctx.args)

    def vjp_fn(ctx, g):
        x = ctx.inputs[0]
        y = ctx.output(ctx.saved_tensors[0]) if saves_output else None
        return g * derivative(x, y, **dict(zip(names, ctx.args)))

    module = sys._getframe(1).f_globals.get("__name__", __name__)
    cls_name = cls_name or "".join(part.capitalize() for part in name.split("_"))
    cls = type(cls_name, (Function,), {
        "__doc__": f"{name}: a point-wise op made by ``ops.table.pointwise``.",
        "__module__": module,
        "forward": staticmethod(forward_fn),
        "backward": staticmethod(backward_fn),
        "vjp": staticmethod(vjp_fn),
    })
    register(name, samples=samples)(cls)
    n_params = len(names)
    signature = _signature(names, (params or {}).values())

    def public(x, *args, **kwargs) -> Tensor:
        if len(args) > n_params:
            raise TypeError(f"{name}() takes {1 + n_params} positional argument(s) but "
                            f"{1 + len(args)} were given")
        given = signature.bind(x, *args, **kwargs).arguments if args or kwargs else {}
        x = _args.float_input(name, x)
        if not n_params:
            return cls.apply(x)
        values = {n: _args.real(name, n, given.get(n, d)) for n, d in zip(names, defaults)}
        if check is not None:
            check(**values)
        return cls.apply(x, **values)

    public.__name__ = public.__qualname__ = name
    public.__module__ = module
    public.__doc__ = doc
    public.__signature__ = signature
    public.function = cls
    return public


def _signature(names: tuple, defaults: Iterable[Any]) -> inspect.Signature:
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    return inspect.Signature(
        [inspect.Parameter("x", kind)]
        + [inspect.Parameter(n, kind, default=d, annotation="float")
           for n, d in zip(names, defaults)],
        return_annotation="Tensor")
