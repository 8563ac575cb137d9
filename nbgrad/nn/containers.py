"""Containers: Sequential, ModuleList, ModuleDict (``torch.nn``'s)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from .module import Module


def _check_module(owner: str, value: Any) -> Module:
    if not isinstance(value, Module):
        raise TypeError(f"{owner}: expected a Module, got {type(value).__name__}")
    return value


class _IndexedModules(Module):
    """Submodules named "0", "1", ... in order, with list-style access."""

    def _index(self, idx: int) -> str:
        n = len(self._modules)
        if not isinstance(idx, int):
            raise TypeError(f"{type(self).__name__}: indices must be integers or slices, "
                            f"got {type(idx).__name__}")
        if not -n <= idx < n:
            raise IndexError(f"{type(self).__name__}: index {idx} is out of range for "
                             f"{n} modules")
        return list(self._modules)[idx % n]

    def _renumber(self, modules: list[Module]) -> None:
        self._modules.clear()
        for i, m in enumerate(modules):
            self.add_module(str(i), m)

    def __getitem__(self, idx: int | slice) -> Any:
        if isinstance(idx, slice):
            return self._slice(idx)
        return self._modules[self._index(idx)]

    def _slice(self, idx: slice) -> _IndexedModules:
        raise NotImplementedError

    def __setitem__(self, idx: int, module: Module) -> None:
        self.add_module(self._index(idx), _check_module(type(self).__name__, module))

    def __delitem__(self, idx: int | slice) -> None:
        keys = list(self._modules)[idx] if isinstance(idx, slice) else [self._index(idx)]
        for key in keys:
            del self._modules[key]
        self._renumber(list(self._modules.values()))

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def append(self, module: Module) -> _IndexedModules:
        self.add_module(str(len(self)), _check_module(type(self).__name__, module))
        return self

    def extend(self, modules: Iterable[Module]) -> _IndexedModules:
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module: Module) -> None:
        modules = list(self._modules.values())
        modules.insert(index, _check_module(type(self).__name__, module))
        self._renumber(modules)


class Sequential(_IndexedModules):
    """Modules applied in order: ``Sequential(a, b)(x) == b(a(x))``. Also takes one
    dict of name -> module, whose names it keeps."""

    def __init__(self, *modules: Module | Mapping[str, Module]) -> None:
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], Mapping):
            for name, m in modules[0].items():
                self.add_module(name, _check_module("Sequential", m))
        else:
            for i, m in enumerate(modules):
                self.add_module(str(i), _check_module("Sequential", m))

    def _slice(self, idx: slice) -> Sequential:
        return Sequential(dict(list(self._modules.items())[idx]))

    def forward(self, x: Any) -> Any:
        for m in self._modules.values():
            x = m(x)
        return x


class ModuleList(_IndexedModules):
    """A list of modules whose parameters the owner registers; it has no forward."""

    def __init__(self, modules: Iterable[Module] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def _slice(self, idx: slice) -> ModuleList:
        return ModuleList(list(self._modules.values())[idx])


class ModuleDict(Module):
    """A dict of modules (insertion order) whose parameters the owner registers."""

    def __init__(self, modules: Mapping[str, Module] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, _check_module("ModuleDict", module))

    def __delitem__(self, key: str) -> None:
        del self._modules[key]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __contains__(self, key: str) -> bool:
        return key in self._modules

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()

    def update(self, modules: Mapping[str, Module]) -> None:
        for key, m in modules.items():
            self[key] = m
