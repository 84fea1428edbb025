"""The layers of ARCHITECTURE.md, read from the code: every import (module
level and inside functions; `if TYPE_CHECKING:` blocks aside) must point down
the flow, nothing but the CLI imports the CLI, and no modules import each
other in a circle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "gpuaudit"

# Layer of a module: the first prefix that matches (longest prefixes first).
LAYER_OF = {
    "gpuaudit.__main__": "cli",
    "gpuaudit.cli": "cli",
    "gpuaudit.pipelines": "pipelines",
    "gpuaudit.output": "output",
    "gpuaudit.report": "report",
    "gpuaudit.remediate": "remediate",
    "gpuaudit.engine": "engine",
    "gpuaudit.facts": "facts",
    "gpuaudit.sources": "sources",
    "gpuaudit.model": "model",
    "gpuaudit.kube": "ground",
    "gpuaudit": "ground",  # the package itself and its leaf modules: gpus, files, schemas, ...
}

# What each layer may import (itself included).
ALLOWED = {
    "ground": {"ground"},
    "model": {"ground", "model"},
    "sources": {"ground", "model", "sources"},
    "facts": {"ground", "model", "facts"},
    "engine": {"ground", "model", "facts", "engine"},
    "remediate": {"ground", "model", "facts", "engine", "remediate"},
    "report": {"ground", "model", "facts", "engine", "report"},
    "output": {"ground", "model", "output"},
    "pipelines": {"ground", "model", "sources", "facts", "engine", "remediate", "report", "output", "pipelines"},
    "cli": {"ground", "model", "sources", "facts", "engine", "remediate", "report", "output", "pipelines", "cli"},
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer(module: str) -> str:
    for prefix in sorted(LAYER_OF, key=len, reverse=True):
        if module == prefix or module.startswith(prefix + "."):
            return LAYER_OF[prefix]
    raise AssertionError(f"{module} is in no layer")


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(module: str) -> set[str]:
    """The gpuaudit modules ``module`` imports, wherever in the file."""
    path = MODULES[module]
    is_package = path.name == "__init__.py"
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking_only(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("gpuaudit"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            if target.startswith("gpuaudit"):
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    found.add(sub if sub in MODULES else target)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    found.discard(module)
    return found


GRAPH = {m: imports_of(m) for m in MODULES}


def test_every_module_is_in_a_layer_and_every_import_names_a_module() -> None:
    for module, targets in GRAPH.items():
        layer(module)
        for target in targets:
            assert target in MODULES, f"{module} imports {target}, which is no module of gpuaudit"


def against_layers(graph: dict[str, set[str]]) -> list[str]:
    """Every import that points where its layer may not look."""
    return sorted(
        f"{m} ({layer(m)}) -> {t} ({layer(t)})"
        for m, targets in graph.items()
        for t in targets
        if layer(t) not in ALLOWED[layer(m)]
    )


def cli_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import of the CLI from outside it."""
    return sorted(f"{m} -> {t}" for m, ts in graph.items() for t in ts if layer(t) == "cli" and layer(m) != "cli")


def test_imports_follow_the_layers() -> None:
    against = against_layers(GRAPH)
    assert not against, "imports against the layers:\n" + "\n".join(against)


def test_nothing_outside_the_cli_imports_it() -> None:
    assert not cli_imports(GRAPH)


def test_no_import_cycles() -> None:
    cycles = find_cycles(GRAPH)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return cycles


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ],
)
def test_the_cycle_finder_finds_cycles(graph: dict[str, set[str]], expected: list[list[str]]) -> None:
    assert find_cycles(graph) == expected


def test_the_checkers_catch_wrong_arrows() -> None:
    """The checks themselves, on imports the real tree must never have."""
    graph = {
        "gpuaudit.model.findings": {"gpuaudit.engine.rules"},  # the model reaching up
        "gpuaudit.facts.cluster": {"gpuaudit.sources.telemetry"},  # sideways into the sources
        "gpuaudit.output.text": {"gpuaudit.cli.options", "gpuaudit.model"},  # into the CLI
        "gpuaudit.pipelines.check": {"gpuaudit.sources.inputs", "gpuaudit.kube.pointers"},  # allowed
        "gpuaudit.cli.check": {"gpuaudit.cli.options"},  # within the CLI: allowed
    }
    assert against_layers(graph) == [
        "gpuaudit.facts.cluster (facts) -> gpuaudit.sources.telemetry (sources)",
        "gpuaudit.model.findings (model) -> gpuaudit.engine.rules (engine)",
        "gpuaudit.output.text (output) -> gpuaudit.cli.options (cli)",
    ]
    assert cli_imports(graph) == ["gpuaudit.output.text -> gpuaudit.cli.options"]
    assert layer("gpuaudit.files") == layer("gpuaudit.kube.pointers") == "ground"
