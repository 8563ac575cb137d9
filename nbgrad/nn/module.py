"""Module: the base class of layers and models (``torch.nn.Module``'s interface).

Assigning a Parameter or a Module to an attribute registers it; ``parameters()`` and
``state_dict()`` walk the registered tree in registration order, naming entries by
their dotted path (``"features.0.weight"``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np

from ..autograd import no_grad, tracing
from ..autograd.hooks import RemovableHandle
from ..ops._args import float_dtype
from ..ops.convert import to_arguments
from ..tensor import FLOAT_DTYPES, Tensor
from .parameter import Parameter


class IncompatibleKeys(NamedTuple):
    missing_keys: list[str]
    unexpected_keys: list[str]


class _ForwardHook(NamedTuple):
    kind: str  # "pre" (before forward) or "post" (after it)
    fn: Callable
    with_kwargs: bool
    always_call: bool


def _call_with_hooks(module: Module, hooks: list, args: tuple, kwargs: dict) -> Any:
    """``module.forward`` between its forward pre-hooks and forward hooks (PyTorch's order
    and replacement rules)."""
    for h in [h for h in hooks if h.kind == "pre"]:
        result = h.fn(module, args, kwargs) if h.with_kwargs else h.fn(module, args)
        if result is None:
            continue
        if h.with_kwargs:
            args, kwargs = result
        else:
            args = result if isinstance(result, tuple) else (result,)
    post = [h for h in hooks if h.kind == "post"]
    try:
        output = module.forward(*args, **kwargs)
    except Exception:
        for h in post:
            if h.always_call:
                h.fn(module, args, kwargs, None) if h.with_kwargs else h.fn(module, args, None)
        raise
    for h in post:
        result = (h.fn(module, args, kwargs, output) if h.with_kwargs
                  else h.fn(module, args, output))
        if result is not None:
            output = result
    return output


class Module:
    """Base class: subclasses set parameters and submodules in ``__init__`` and define
    ``forward``; calling the module calls ``forward``."""

    training: bool

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "_persistent", set())
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "training", True)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} has no forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        hooks = self.__dict__.get("_forward_hooks")
        if not hooks:
            return self.forward(*args, **kwargs)
        return _call_with_hooks(self, hooks, args, kwargs)

    def register_forward_pre_hook(self, hook: Callable, *, prepend: bool = False,
                                  with_kwargs: bool = False) -> RemovableHandle:
        """Call ``hook(module, args)`` before each forward (``hook(module, args, kwargs)``
        with ``with_kwargs``); a non-None result replaces the arguments (a tuple, or one
        value that becomes a 1-tuple; with kwargs, an ``(args, kwargs)`` pair)."""
        return self._add_forward_hook("pre", hook, prepend, with_kwargs)

    def register_forward_hook(self, hook: Callable, *, prepend: bool = False,
                              with_kwargs: bool = False,
                              always_call: bool = False) -> RemovableHandle:
        """Call ``hook(module, args, output)`` after each forward (``hook(module, args,
        kwargs, output)`` with ``with_kwargs``); a non-None result replaces the output.
        ``always_call``: also when the forward raised."""
        return self._add_forward_hook("post", hook, prepend, with_kwargs, always_call)

    def _add_forward_hook(self, kind: str, hook: Callable, prepend: bool, with_kwargs: bool,
                          always_call: bool = False) -> RemovableHandle:
        if not callable(hook):
            raise TypeError(f"register_forward_{'pre_' if kind == 'pre' else ''}hook: "
                            f"expected a callable, got {type(hook).__name__}")
        hooks = self.__dict__.setdefault("_forward_hooks", [])
        entry = _ForwardHook(kind, hook, with_kwargs, always_call)
        if prepend:
            hooks.insert(0, entry)
        else:
            hooks.append(entry)
        return RemovableHandle(hooks, entry)

    # -- registration ------------------------------------------------------------------
    def _registries(self) -> dict:
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__}: call super().__init__() before "
                                 "assigning attributes")
        return self.__dict__

    def __setattr__(self, name: str, value: Any) -> None:
        """Parameters and Modules are registered; assigning to a registered name keeps
        its kind (a parameter slot takes a Parameter or None, a buffer a Tensor or None)."""
        if isinstance(value, Parameter | Module):
            registries = self._registries()
            self._unregister(name)
            kind = "_parameters" if isinstance(value, Parameter) else "_modules"
            registries[kind][name] = value
            return
        for registry, allowed in (("_parameters", "a Parameter"), ("_buffers", "a Tensor"),
                                  ("_modules", "a Module")):
            slot = self.__dict__.get(registry, {})
            if name in slot:
                if value is not None and not (registry == "_buffers"
                                              and isinstance(value, Tensor)):
                    raise TypeError(f"{type(self).__name__}: cannot assign "
                                    f"{type(value).__name__} to {name!r} ({allowed} or None "
                                    "expected)")
                slot[name] = value
                return
        object.__setattr__(self, name, value)

    def _unregister(self, name: str) -> None:
        for registry in ("_parameters", "_buffers", "_modules"):
            self.__dict__[registry].pop(name, None)
        self.__dict__.pop(name, None)

    def __getattr__(self, name: str) -> Any:
        d = self.__dict__
        for registry in ("_parameters", "_buffers", "_modules"):
            if name in d.get(registry, {}):
                return d[registry][name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def __delattr__(self, name: str) -> None:
        for registry in ("_parameters", "_buffers", "_modules"):
            if name in self.__dict__.get(registry, {}):
                del self.__dict__[registry][name]
                self.__dict__["_persistent"].discard(name)
                return
        object.__delattr__(self, name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"register_parameter: {name!r} must be a Parameter or None, got "
                            f"{type(param).__name__}")
        self._registries()["_parameters"][name] = param

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """A tensor that belongs to the module's state (moved by ``to``, saved by
        ``state_dict`` when persistent) but is not a parameter, e.g. running means."""
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"register_buffer: {name!r} must be a Tensor or None, got "
                            f"{type(tensor).__name__}")
        self._registries()["_buffers"][name] = tensor
        if persistent:
            self.__dict__["_persistent"].add(name)

    def add_module(self, name: str, module: Module | None) -> None:
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"add_module: {name!r} must be a Module or None, got "
                            f"{type(module).__name__}")
        self._registries()["_modules"][name] = module

    # -- traversal ---------------------------------------------------------------------
    def named_modules(self, prefix: str = "", memo: set | None = None
                      ) -> Iterator[tuple[str, Module]]:
        """Every module in the tree (this one first), each once."""
        memo = set() if memo is None else memo
        if id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, child in self._modules.items():
            if child is not None:
                yield from child.named_modules(f"{prefix}.{name}" if prefix else name, memo)

    def modules(self) -> Iterator[Module]:
        for _, m in self.named_modules():
            yield m

    def named_children(self) -> Iterator[tuple[str, Module]]:
        for name, child in self._modules.items():
            if child is not None:
                yield name, child

    def children(self) -> Iterator[Module]:
        for _, child in self.named_children():
            yield child

    def _named_members(self, registry: str, prefix: str, recurse: bool
                       ) -> Iterator[tuple[str, Tensor]]:
        seen: set = set()
        tree = self.named_modules(prefix) if recurse else [(prefix, self)]
        for path, module in tree:
            for name, t in module.__dict__[registry].items():
                if t is None or id(t) in seen:
                    continue
                seen.add(id(t))
                yield (f"{path}.{name}" if path else name), t

    def named_parameters(self, prefix: str = "", recurse: bool = True
                         ) -> Iterator[tuple[str, Parameter]]:
        """(dotted name, parameter) for every parameter, each once (shared ones too)."""
        return self._named_members("_parameters", prefix, recurse)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True
                      ) -> Iterator[tuple[str, Tensor]]:
        return self._named_members("_buffers", prefix, recurse)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def apply(self, fn: Callable[[Module], Any]) -> Module:
        """Call ``fn`` on every submodule (children first), then on this module."""
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    # -- modes and gradients -----------------------------------------------------------
    def train(self, mode: bool = True) -> Module:
        """Training mode (dropout drops, batch norm uses batch statistics) or, with
        ``mode=False``, evaluation mode; for this module and every submodule."""
        if not isinstance(mode, bool):
            raise ValueError(f"train: mode must be a bool, got {mode!r}")
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        tracing.modes_changed()
        return self

    def eval(self) -> Module:
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        for p in self.parameters():
            p.requires_grad = requires_grad
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset every parameter's gradient: to None (default) or to zeros."""
        recorder = tracing.recorder
        if recorder is not None and recorder.recording():  # nb.compile is tracing
            return recorder.call(self.zero_grad, set_to_none)
        for p in self.parameters():
            if p.grad is not None:
                if set_to_none:
                    p.grad = None
                else:
                    p.grad._data[...] = 0

    # -- state -------------------------------------------------------------------------
    def state_dict(self, prefix: str = "", keep_vars: bool = False) -> dict[str, Tensor]:
        """{``prefix`` + dotted name: tensor} for every parameter and persistent buffer,
        sharing memory with the module (``keep_vars=False`` gives detached tensors).

        As PyTorch's: a submodule or tensor reachable by several names (``self.dec =
        self.enc``, an embedding weight tied to the output layer) is listed under every
        one of them, so state dicts converted from PyTorch load strictly; ``prefix`` is
        prepended as given (``"model."``). ``named_parameters()`` still lists each once.
        """
        return {key: t if keep_vars else t.detach()
                for key, t in self._state_entries(prefix, ())}

    def _state_entries(self, prefix: str, enclosing: tuple[int, ...]
                       ) -> Iterator[tuple[str, Tensor]]:
        """(key, tensor) for this module's parameters, then its persistent buffers, then
        each child's under ``prefix + child name + "."``: every path, no memo of modules
        already seen (PyTorch's walk). ``enclosing``: ids of the modules on the path."""
        if id(self) in enclosing:
            raise ValueError(f"state_dict of {type(self).__name__}: the module at "
                             f"{prefix.rstrip('.')!r} encloses itself (a cycle of "
                             "submodules), so its state has no finite set of names")
        for name, p in self._parameters.items():
            if p is not None:
                yield prefix + name, p
        for name, b in self._buffers.items():
            if b is not None and name in self._persistent:
                yield prefix + name, b
        for name, child in self._modules.items():
            if child is not None:
                yield from child._state_entries(f"{prefix}{name}.", (*enclosing, id(self)))

    def load_state_dict(self, state_dict: dict, strict: bool = True) -> IncompatibleKeys:
        """Copy ``state_dict``'s values into the parameters and buffers in place.

        Every key and shape is checked before anything is copied: a mismatch (or, with
        ``strict``, a missing or unexpected key) raises listing them all, and the module
        is left unchanged. A tensor with several names (shared submodules, tied weights)
        is assigned once, from the last of its names in ``state_dict()`` order that the
        dict holds: where PyTorch, which copies every name in turn, ends.
        """
        own = self.state_dict(keep_vars=True)
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        values = {k: np.asarray(v._data if isinstance(v, Tensor) else v)
                  for k, v in state_dict.items() if k in own}
        misshaped = [f"{k}: checkpoint {v.shape}, model {own[k].shape}"
                     for k, v in values.items() if v.shape != own[k].shape]
        problems = []
        if strict and missing:
            problems.append(f"missing keys: {', '.join(missing)}")
        if strict and unexpected:
            problems.append(f"unexpected keys: {', '.join(unexpected)}")
        if misshaped:
            problems.append(f"mis-shaped keys: {'; '.join(misshaped)}")
        if problems:
            raise RuntimeError(f"load_state_dict of {type(self).__name__}: nothing loaded; "
                               + "; ".join(problems))
        last = {id(own[k]): k for k in own if k in values}  # per tensor: its last name
        with no_grad():
            for k in last.values():
                own[k]._data[...] = values[k]
                own[k]._version_counter().bump()
        return IncompatibleKeys(missing, unexpected)

    def to(self, *args: Any, **kwargs: Any) -> Module:
        """Cast every floating-point parameter and buffer to a dtype (float32 or
        float64), in place: ``to(dtype)``, ``to(device)``, ``to(device, dtype)``,
        ``to(tensor)`` (its dtype), keywords ``device``/``dtype``, as PyTorch's. The
        parameters stay the same objects, so an optimiser built before a cast must be
        rebuilt, as in PyTorch. The device must be the CPU."""
        dtype, _ = to_arguments("Module.to", args, kwargs)
        if dtype is None:
            return self
        dtype = float_dtype("Module.to", dtype)
        for t in list(self.parameters()) + list(self.buffers()):
            if t.dtype in FLOAT_DTYPES and t.dtype != dtype:
                t._data = t._data.astype(dtype)
                t.grad = None
        return self

    def float(self) -> Module:
        return self.to(np.float32)

    def double(self) -> Module:
        return self.to(np.float64)

    def cpu(self) -> Module:
        """``self``: modules are always on the CPU."""
        return self

    # -- repr --------------------------------------------------------------------------
    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = [f"({name}): " + _indent(repr(child)) for name, child in self._modules.items()]
        extra = self.extra_repr()
        if not lines:
            return f"{type(self).__name__}({extra})"
        body = ([extra] if extra else []) + lines
        return f"{type(self).__name__}(\n  " + "\n  ".join(body) + "\n)"

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._buffers)
                      | set(self._modules))


def _indent(text: str) -> str:
    return text.replace("\n", "\n  ")
