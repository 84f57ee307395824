"""The project's own modules (compiler/, dse/) import one way: no import cycle, and no module
imports another module's underscore names.

Imports are read with `ast`, so function-level imports (which hide a cycle from Python at load
time) count as much as top-level ones.
"""
from __future__ import annotations

import ast
import graphlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("compiler", "dse")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module `name` refers to: itself, or its nearest enclosing package."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, str, int]]:
    """(imported module, imported name or "", line) for every import anywhere in the file."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, "", node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                # `from dse.models import zoo` imports the module dse.models.zoo, not a name of dse.models
                sub = f"{base}.{alias.name}"
                if sub in modules:
                    found.append((sub, "", node.lineno))
                else:
                    found.append((base, alias.name, node.lineno))
    return [(target, name, line) for target, name, line in found if resolve(target, modules)]


def import_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports."""
    modules = project_modules()
    graph: dict[str, set[str]] = {module: set() for module in modules}
    for module, path in modules.items():
        for target, _, _ in imports_of(module, path, modules):
            target = resolve(target, modules)
            # a module importing its own package's __init__ (or itself) is not a dependency cycle
            if target != module and not module.startswith(target + "."):
                graph[module].add(target)
    return graph


def test_the_import_graph_is_read() -> None:
    graph = import_graph()
    # known edges: the check must see both top-level and function-level imports
    assert "dse.spec" in graph["dse.evaluate"]
    assert "dse.sweep" in graph["dse.cli"]  # imported inside a function
    assert "compiler.frontend" in graph["compiler"]


def test_no_import_cycle() -> None:
    try:
        graphlib.TopologicalSorter(import_graph()).prepare()
    except graphlib.CycleError as error:
        cycle = error.args[1]  # [a, b, ..., a], each importing the one before it in the list
        raise AssertionError("import cycle among the project's modules: " + " <- ".join(cycle)) from None


def test_no_module_imports_another_modules_underscore_names() -> None:
    modules = project_modules()
    offences = [f"{path.relative_to(ROOT)}:{line} imports {name} from {target}"
                for module, path in modules.items()
                for target, name, line in imports_of(module, path, modules)
                if name.startswith("_") and not name.startswith("__") and resolve(target, modules) != module]
    assert not offences, "\n".join(offences)
