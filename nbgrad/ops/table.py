"""The op table: one ``pointwise(...)`` (unary) or ``broadcasting(...)`` (binary) call per
op (the style of HIPS autograd's ``defvjp``, JAX's ``defjvp`` and PyTorch's
``derivatives.yaml``).

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

    forward(x_flat, *kernel_args, *params, out)     out: a new array of x's shape and dtype
    backward(g_flat, saved_flat, *kernel_args, *params, out)

``derivative(x, y, **params)`` is f'(x) as a Tensor (x the input, y the output when the op
saves its output, else None); the op's ``vjp`` is ``g * derivative(...)``. Where f' is
piecewise constant (relu's kinks) it is a constant mask: a zero second derivative. Ops
whose kernels take an op code and any dtype (neg, exp, log, sqrt, abs) give whole-array
forms instead (``on_arrays=True``).

Binary broadcasting ops (add, sub, mul, div, pow) are ``broadcasting(...)`` entries: the
forward on the two arrays, what it saves, the gradient rule of each operand and its
``vjp`` (written with nbgrad ops, for second derivatives)::

    Mul = broadcasting("mul", forward=..., saves="inputs",
                       grads=(lambda g, a, b: binary.grad(MUL, g, b, a),
                              lambda g, a, b: binary.grad(MUL, g, a, b)),
                       vjps=(lambda g, a, b: g * b, lambda g, a, b: g * a),
                       samples=_pair_samples)

A gradient may have the broadcast output's shape: the engine sums it to the operand's.
Ops that do not fit (dtype-dependent kernels, row kernels) stay hand-written Functions.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from ..function import Function, Sample, register
from ..kernels import buffers
from ..runtime.jit import for_work
from ..tensor import Tensor
from . import _args


def flat(a: np.ndarray) -> np.ndarray:
    """A flat C-contiguous view (or copy, for strided and broadcast arrays) of ``a``."""
    return np.ascontiguousarray(a).reshape(-1)


def into(kernel: Callable, shape: tuple, dtype: Any, *args: Any) -> np.ndarray:
    """A new array of ``shape``, filled by the flat element-wise ``kernel(*args, out)`` (its
    serial or parallel form by size; a large one from kernels/buffers.py's pool)."""
    out = buffers.empty(shape, dtype)
    for_work(kernel, out.size)(*args, out.reshape(-1))
    return out


def pointwise(name: str, *, forward: Callable, backward: Callable, saves: str,
              samples: Callable[[np.random.Generator], Iterable[Sample]], doc: str,
              derivative: Callable[..., Tensor] | None = None,
              vjp: Callable[..., Tensor] | None = None,
              params: Mapping[str, float] | None = None,
              check: Callable[..., None] | None = None,
              on_arrays: bool = False, kernel_args: tuple = (),
              cls_name: str | None = None) -> Callable[..., Tensor]:
    """Make, register and return the point-wise op ``name`` (see the module docstring).

    ``params``: parameter names with their defaults, in the kernels' argument order; each
    must be a real number (TypeError naming the op and the parameter) and reaches the
    kernels as a float. ``check(**params)`` may raise for values the op does not accept.
    ``vjp(g, x, y)``, in place of ``derivative``: the vjp itself, for a backward that is
    not g times a derivative (log's g / x). ``on_arrays``: ``forward(x)`` and
    ``backward(g, *saved)`` take and return whole arrays (ops without parameters that
    pick their kernels themselves); only these may save "nothing". ``kernel_args``:
    constants the kernels take after the arrays, ahead of the parameters (sin and cos
    share their kernels: ``cosine``).
    ``cls_name``: the Function subclass's name (default: ``name`` in CamelCase)."""
    if saves not in ("input", "output", "nothing") or (saves == "nothing" and not on_arrays):
        raise ValueError(f"pointwise({name!r}): saves must be 'input' or 'output' (or "
                         f"'nothing' with on_arrays), got {saves!r}")
    if (derivative is None) == (vjp is None):
        raise ValueError(f"pointwise({name!r}): give one of derivative and vjp")
    names = tuple(params or ())
    defaults = tuple(float(v) for v in (params or {}).values())
    saves_output = saves == "output"

    def forward_fn(ctx, x, **kw):
        if tuple(kw) != names:  # not every parameter in order (the public function's call)
            unknown = kw.keys() - set(names)
            if unknown:
                raise TypeError(f"{name}: unknown parameter(s) {sorted(unknown)}")
            ctx.params = {n: kw.get(n, d) for n, d in zip(names, defaults)}
        y = into(forward, x.shape, x.dtype, flat(x), *kernel_args, *ctx.params.values())
        ctx.save_for_backward(y if saves_output else x)
        return y

    def backward_fn(ctx, g):
        (s,) = ctx.saved_tensors
        return into(backward, s.shape, s.dtype, flat(g), flat(s), *kernel_args,
                    *ctx.params.values())

    def vjp_fn(ctx, g):
        x = ctx.inputs[0]
        y = ctx.output(ctx.saved_tensors[0]) if saves_output else None
        if vjp is not None:
            return vjp(g, x, y)
        return g * derivative(x, y, **ctx.params)

    if on_arrays:
        forward_fn, backward_fn = _array_forms(forward, backward, saves)

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


def _array_forms(forward: Callable, backward: Callable, saves: str) -> tuple:
    """forward and backward of a ``pointwise(..., on_arrays=True)`` entry."""
    def forward_fn(ctx, x):
        y = forward(x)
        if saves != "nothing":
            ctx.save_for_backward(y if saves == "output" else x)
        return y

    def backward_fn(ctx, g):
        return backward(g, *ctx.saved_tensors)

    return forward_fn, backward_fn


_SAVES = ("nothing", "inputs", "inputs and output")


def broadcasting(name: str, *, forward: Callable[..., np.ndarray], saves: str,
                 grads: tuple[Callable[..., np.ndarray], Callable[..., np.ndarray]],
                 vjps: tuple[Callable[..., Tensor], Callable[..., Tensor]],
                 samples: Callable[[np.random.Generator], Iterable[Sample]],
                 both: Callable[..., tuple | None] | None = None,
                 params: bool = False, cls_name: str | None = None) -> type[Function]:
    """Make and register the binary op ``name``; returns its ``Function`` subclass.

    ``forward(a, b)``: the output array; with ``params``, ``forward(a, b, **params)``
    takes the keyword arguments of ``apply`` (such an op saves nothing). ``saves``:
    "nothing", "inputs" (a, b) or "inputs and output" (a, b, out). ``grads``: the rule of
    each operand, ``rule(g, *saved)`` (when nothing is saved, the arrays forward
    received: for their shapes), called only for an operand that needs a gradient.
    ``both(g, *saved)``: both gradients in one pass, or None where it does not apply
    (then ``grads``), tried when both operands need one. ``vjps``: each operand's rule
    ``vjp(g, a, b)`` on Tensors (``ctx.inputs``)."""
    if saves not in _SAVES or (params and saves != "nothing"):
        raise ValueError(f"broadcasting({name!r}): saves must be one of {_SAVES} ('nothing' "
                         f"for an op with params), got {saves!r}")
    grad_a, grad_b = grads
    vjp_a, vjp_b = vjps
    saves_nothing = saves == "nothing"
    forward_fn = _with_params(forward) if params else _BINARY_FORWARDS[saves](forward)
    backward_fn = _passing_on if grads == (upstream, upstream) else None

    def rule_per_operand(ctx, g):
        saved = ctx.input_arrays if saves_nothing else ctx.saved_tensors
        need_a, need_b = ctx.needs_input_grad
        if need_a and need_b and both is not None:
            fused = both(g, *saved)
            if fused is not None:
                return fused
        return (grad_a(g, *saved) if need_a else None,
                grad_b(g, *saved) if need_b else None)

    def vjp_fn(ctx, g):
        a, b = ctx.inputs
        need_a, need_b = ctx.needs_input_grad
        return vjp_a(g, a, b) if need_a else None, vjp_b(g, a, b) if need_b else None

    cls = type(cls_name or name.capitalize(), (Function,), {
        "__doc__": f"{name}: a broadcasting op made by ``ops.table.broadcasting``.",
        "__module__": sys._getframe(1).f_globals.get("__name__", __name__),
        "forward": staticmethod(forward_fn),
        "backward": staticmethod(backward_fn or rule_per_operand),
        "vjp": staticmethod(vjp_fn),
    })
    return register(name, samples=samples)(cls)


def upstream(g: Any, *saved: Any) -> Any:
    """The rule of an operand whose gradient is the output's (add's, sub's of a): g as it
    is, which the engine sums over the operand's broadcast axes."""
    return g


def _passing_on(ctx, g):
    """The backward of an op both of whose rules are ``upstream``: no rule to call."""
    return g, g


def _saving_nothing(forward: Callable) -> Callable:
    def forward_fn(ctx, a, b):
        return forward(a, b)
    return forward_fn


def _saving_inputs(forward: Callable) -> Callable:
    def forward_fn(ctx, a, b):
        ctx.save_for_backward(a, b)
        return forward(a, b)
    return forward_fn


def _saving_inputs_and_output(forward: Callable) -> Callable:
    def forward_fn(ctx, a, b):
        out = forward(a, b)
        ctx.save_for_backward(a, b, out)
        return out
    return forward_fn


def _with_params(forward: Callable) -> Callable:
    def forward_fn(ctx, a, b, **params):
        return forward(a, b, **params)
    return forward_fn


_BINARY_FORWARDS = {"nothing": _saving_nothing, "inputs": _saving_inputs,
                    "inputs and output": _saving_inputs_and_output}


def _signature(names: tuple, defaults: Iterable[Any]) -> inspect.Signature:
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    return inspect.Signature(
        [inspect.Parameter("x", kind)]
        + [inspect.Parameter(n, kind, default=d, annotation="float")
           for n, d in zip(names, defaults)],
        return_annotation="Tensor")
