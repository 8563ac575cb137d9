"""The layers of nbgrad, read from the import statements of its files (top-level and
deferred ones alike; docs/architecture.md draws them): no module imports a module of a
higher layer, and there is no import cycle. Importing a submodule first cannot show a
loop (Python runs the package's ``__init__`` before it), hence a reading of the source."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "nbgrad"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in ROOT.rglob("*.py")}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The nbgrad modules that ``name`` imports: for ``from X import y``, the submodule
    ``X.y`` when it is one, else ``X``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in known else target)
    return {m for m in found if m in known and m != name}


def _import_graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, path, known) for name, path in modules.items()}


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


# Lowest first; a module may import its own layer and the ones below. The key is the
# module's path below ``nbgrad`` up to the first name listed here ("ops" for
# nbgrad/ops/conv.py; "" for the package's __init__).
LAYERS = [
    ("runtime", {"runtime"}),
    ("kernels", {"kernels"}),
    ("core", {"dtypes", "device", "cuda", "rng", "tensor", "function", "autograd",
              "return_types", "graph", "world"}),
    ("ops", {"ops"}),
    ("library", {"functional", "nn", "optim", "data", "utils", "datasets", "serialization",
                 "distributed", "testing", "linalg"}),
    ("tools", {"compiling", "compiler"}),
    ("package", {""}),
    ("programs", {"examples", "demo", "__main__"}),
]


def layer_of(module: str) -> int:
    first = module.split(".")[1] if "." in module else ""
    for index, (_, names) in enumerate(LAYERS):
        if first in names:
            return index
    raise LookupError(f"{module}: in no layer of LAYERS (tests/test_architecture.py)")


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return [f"{m} ({LAYERS[layer_of(m)][0]}) imports {t} ({LAYERS[layer_of(t)][0]})"
            for m in sorted(graph) for t in sorted(graph[m]) if layer_of(t) > layer_of(m)]


def test_the_cycle_finder_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert _find_cycle(graph) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None


def test_relative_imports_resolve_to_modules():
    graph = _import_graph()
    assert "nbgrad.tensor" in graph["nbgrad.function"]
    assert "nbgrad.kernels.broadcast_sum" in graph["nbgrad.autograd.engine"]


def test_no_import_cycle_among_nbgrad_modules():
    cycle = _find_cycle(_import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_layer_check_finds_a_planted_upward_import():
    graph = {"nbgrad.kernels.conv": {"nbgrad.ops.conv"}, "nbgrad.ops.conv": set()}
    assert upward_imports(graph) == [
        "nbgrad.kernels.conv (kernels) imports nbgrad.ops.conv (ops)"]
    with pytest.raises(LookupError, match="nbgrad.newcomer"):
        layer_of("nbgrad.newcomer")


def test_every_module_has_a_layer_and_imports_only_its_own_and_lower_ones():
    assert upward_imports(_import_graph()) == []


def test_the_architecture_page_names_every_layer():
    page = (ROOT.parent / "docs" / "architecture.md").read_text()
    for name, members in LAYERS:
        assert f"**{name}**" in page
        for member in members - {""}:
            assert f"`{member}" in page, f"docs/architecture.md does not place {member}"
