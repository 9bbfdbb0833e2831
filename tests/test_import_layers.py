"""The import structure: no cycle anywhere in harness/ and variants/, and no import from a lower layer to a higher one.

Imports are read with ast (module level and inside functions alike; only `if TYPE_CHECKING:` blocks
are left out, since they never run), so a lazy import cannot hide a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers import REPO

PACKAGES = ("variants", "harness")
# Layers, lowest first: a module may import its own layer's modules and lower ones, never higher ones.
LAYERS = (
    ("variants",),
    (
        "harness.errors",
        "harness.knobs",
        "harness.error_metrics",
        "harness.cell_fields",
        "harness.schema",
        "harness.cell_rules",
        "harness.row",
        "harness.entries",
        "harness.devices",
        "harness.process_state",
        "harness.heap",
        "harness.env",
        "harness.child",
        "harness.text_files",
        "harness.safe_files",
    ),
    ("harness.models",),
    ("harness.inputs", "harness.plugins"),
    ("harness.spec",),
    ("harness.plan",),
    ("harness.measure",),
    ("harness.executors",),
    ("harness.store",),
    ("harness.report",),
    ("harness.studies",),
    ("harness.runner",),
    ("harness.commands", "harness.__main__", "harness.api"),
)
TOP_PACKAGES = {"harness": len(LAYERS) - 1}  # a package's own __init__ (not its modules): its layer


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(path: Path, name: str, modules: dict[str, Path]) -> set[str]:
    """Our modules that `name` imports: `from a.b import c` counts as a.b.c when that is a module, else a.b."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if _is_type_checking(child):
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    base = ".".join(
                        package.split(".")[: len(package.split(".")) - child.level + 1] + ([base] if base else [])
                    )
                for alias in child.names:
                    found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    out = set()
    for target in found:
        while (
            target and target not in modules
        ):  # `import harness.spec.convert as c` -> that module; a name -> its module
            target = target.rpartition(".")[0]
        if target and target != name:
            out.add(target)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, name, modules) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
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
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return out


def _layer(module: str) -> int:
    if module in TOP_PACKAGES:
        return TOP_PACKAGES[module]
    best = (-1, -1)  # (length of the matching prefix, layer)
    for rank, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best[0]:
                best = (len(prefix), rank)
    if best[1] < 0:
        raise AssertionError(f"{module} is in no layer; add it to LAYERS in {__file__}")
    return best[1]


def test_no_import_cycle_in_harness_or_variants():
    cycles = _cycles(_graph())
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_imports_only_point_down():
    upward = [f"{a} -> {b}" for a, targets in _graph().items() for b in sorted(targets) if _layer(b) > _layer(a)]
    assert not upward, "imports from a lower layer to a higher one: " + "; ".join(upward)


def test_every_module_is_in_a_layer():
    with pytest.raises(AssertionError, match="harness.newthing is in no layer"):
        _layer("harness.newthing")
    assert all(_layer(m) >= 0 for m in _graph())


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_is_over_350_lines(package):
    long = {
        str(p.relative_to(REPO)): n
        for p in (REPO / package).rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 350
    }
    assert not long, f"modules over 350 lines (split them by job): {long}"


def test_design_doc_lists_every_file_as_the_code_is():
    import importlib.util

    spec = importlib.util.spec_from_file_location("layout", REPO / "scripts" / "layout.py")
    layout = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(layout)
    design = (REPO / "docs" / "DESIGN.md").read_text(encoding="utf-8")
    assert layout.block() in design, "docs/DESIGN.md's layout is stale: run `python scripts/layout.py --write`"
