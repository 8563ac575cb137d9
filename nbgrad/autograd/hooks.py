"""Gradient hooks: ``t.register_hook(fn)`` has the engine call ``fn(grad)`` when the
gradient of ``t`` has been summed over all of ``t``'s consumers, before it flows on (into
``t``'s node, or into ``t.grad`` for a leaf). A tensor returned by ``fn`` replaces the
gradient; ``None`` keeps it (PyTorch's semantics).

A leaf's hooks are kept by the leaf; a non-leaf's by its node, under its output index, so
that the engine, which sees nodes rather than tensors, finds them. ``any_registered`` lets
the engine skip all of this until the first hook exists.

``leaf.register_post_accumulate_grad_hook(fn)`` has ``backward`` call ``fn(leaf)`` right
after this pass's gradient has been added to ``leaf.grad`` — during the pass, as soon as
every node that feeds the leaf has run (the engine's ``run_backward``), not at its end.
``nb.grad`` accumulates nothing and calls none of them (PyTorch's semantics). Their own
flag, ``any_post_registered``, keeps the engine's search for such leaves off until then.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from weakref import ref

import numpy as np

any_registered = False
any_post_registered = False


class WeakIdKeyDictionary:
    """A dict whose keys are held weakly and told apart by identity (PyTorch's
    ``WeakIdKeyDictionary``). ``weakref.WeakKeyDictionary`` compares keys with ``==``,
    which on tensors is element-wise, so its lookups would ask for the truth of a bool
    tensor; here an entry is found by ``id(key)``, checked to be that very object, and
    dropped when the key is collected."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[ref, Any]] = {}

    def get(self, key: Any, default: Any = None) -> Any:
        entry = self._entries.get(id(key))
        return default if entry is None or entry[0]() is not key else entry[1]

    def setdefault(self, key: Any, default: Any) -> Any:
        entry = self._entries.get(id(key))
        if entry is not None and entry[0]() is key:
            return entry[1]
        self._entries[id(key)] = (ref(key, self._forget(id(key))), default)
        return default

    def __len__(self) -> int:
        return len(self._entries)

    def _forget(self, key_id: int) -> Callable[[ref], None]:
        """The weakref callback that drops the entry of the collected key (not a newer
        entry under the same id)."""
        def forget(dead: ref) -> None:
            entry = self._entries.get(key_id)
            if entry is not None and entry[0] is dead:
                del self._entries[key_id]
        return forget


_leaf_hooks = WeakIdKeyDictionary()  # leaf tensor -> [fn, ...]
_post_hooks = WeakIdKeyDictionary()  # leaf tensor -> [fn, ...]
_retained = WeakIdKeyDictionary()  # non-leaf tensor -> True, after t.retain_grad()


def retain(t: Any) -> None:
    """Have the gradients of non-leaf ``t`` accumulate into ``t.grad`` as a leaf's do: a
    hook that adds each gradient it sees (detached, copied) and passes it on unchanged.
    The hook holds ``t`` weakly, so that the node that keeps it does not keep ``t``."""
    if _retained.get(t):
        return
    target = ref(t)

    def keep(grad: Any) -> None:
        owner = target()
        if owner is not None:
            g = np.array(grad._data, copy=True)
            total = g if owner._grad is None else owner._grad._data + g
            owner._grad = type(grad)._wrap(total, None, 0)

    register(t, keep)
    _retained.setdefault(t, True)


def retains(t: Any) -> bool:
    return bool(_retained.get(t))


class RemovableHandle:
    """What ``register_hook`` and ``register_post_accumulate_grad_hook`` return:
    ``handle.remove()`` unregisters the hook."""

    def __init__(self, hooks: list, fn: Callable) -> None:
        self._hooks = hooks
        self._fn = fn

    def remove(self) -> None:
        if self._fn in self._hooks:
            self._hooks.remove(self._fn)


def _check(t: Any, fn: Callable, caller: str, signature: str) -> None:
    if not callable(fn):
        raise TypeError(f"{caller}: expected a callable {signature}, got "
                        f"{type(fn).__name__}")
    if not t.requires_grad:
        raise RuntimeError(f"{caller}: cannot register a hook on a tensor that does not "
                           "require grad")


def register(t: Any, fn: Callable) -> RemovableHandle:
    """Register ``fn`` as a gradient hook of tensor ``t``."""
    global any_registered
    _check(t, fn, "register_hook", "grad -> grad or None")
    if t._node is None:
        hooks = _leaf_hooks.setdefault(t, [])
    else:
        by_output = t._node.__dict__.setdefault("output_hooks", {})
        hooks = by_output.setdefault(t._index, [])
    hooks.append(fn)
    any_registered = True
    return RemovableHandle(hooks, fn)


def _run(hooks: list, g: Any, create_graph: bool, like: Any) -> Any:
    """``g`` after each hook in turn; a hook sees a Tensor and may return a replacement of
    the same shape."""
    wrap = type(like)._wrap
    for fn in list(hooks):
        result = fn(g if create_graph else wrap(g, None, 0))
        if result is None:
            continue
        shape = g.shape
        if not hasattr(result, "_node"):
            raise TypeError(f"register_hook: hook {fn!r} returned {type(result).__name__}; "
                            "a hook returns a Tensor or None")
        if result.shape != shape:
            raise RuntimeError(f"register_hook: hook {fn!r} changed the gradient's shape "
                               f"from {shape} to {result.shape}")
        # a copy: the caller keeps the tensor it returned, which must not become a
        # leaf's .grad that zero_grad or clip_grad_norm_ then rewrite
        g = result if create_graph else np.array(result._data, dtype=g.dtype)
    return g


def run_output_hooks(node: Any, grads: list, create_graph: bool, like: Any) -> list:
    """The node's output gradients after the hooks of its output tensors."""
    by_output = node.__dict__.get("output_hooks")
    if by_output:
        for i, hooks in by_output.items():
            if hooks and grads[i] is not None:
                grads[i] = _run(hooks, grads[i], create_graph, like)
    return grads


def run_leaf_hooks(leaf_grads: dict, create_graph: bool, like: Any) -> None:
    """Each leaf's summed gradient after the leaf's hooks, in place in ``leaf_grads``."""
    for leaf, g in leaf_grads.items():
        leaf_grads[leaf] = run_leaf_hook(leaf, g, create_graph, like)


def run_leaf_hook(leaf: Any, g: Any, create_graph: bool, like: Any) -> Any:
    """The summed gradient ``g`` of ``leaf`` after the leaf's hooks."""
    hooks = _leaf_hooks.get(leaf)
    return _run(hooks, g, create_graph, like) if hooks else g


def register_post_accumulate(t: Any, fn: Callable) -> RemovableHandle:
    """Register ``fn`` as a post-accumulate-grad hook of the leaf ``t``."""
    global any_post_registered
    caller = "register_post_accumulate_grad_hook"
    _check(t, fn, caller, "tensor -> None")
    if t._node is not None:
        raise RuntimeError(f"{caller}: post accumulate grad hooks cannot be registered on "
                           "non-leaf tensors (hook the leaf, or use register_hook)")
    hooks = _post_hooks.setdefault(t, [])
    hooks.append(fn)
    any_post_registered = True
    return RemovableHandle(hooks, fn)


def has_post_hooks(leaf: Any) -> bool:
    return bool(_post_hooks.get(leaf))


def has_hooks(leaf: Any) -> bool:
    """Whether the leaf tensor ``leaf`` has a gradient hook or a post-accumulate hook."""
    return bool(_leaf_hooks.get(leaf)) or has_post_hooks(leaf)


def run_post_hooks(leaf: Any) -> None:
    """Call the post-accumulate hooks of ``leaf``, whose ``.grad`` now holds this pass's
    gradient."""
    for fn in list(_post_hooks.get(leaf, ())):
        result = fn(leaf)
        if result is not None:
            raise RuntimeError(f"register_post_accumulate_grad_hook: hook {fn!r} returned "
                               f"{type(result).__name__}; a post accumulate grad hook "
                               "returns None")
