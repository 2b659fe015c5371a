"""House rules of the source tree, checked on every `make test`: no source file over 600 lines,
and no import circle, counting every import the way ``farm-studio look`` does: inside
functions and under ``if TYPE_CHECKING:`` too (deferring an import hides a circle from the
interpreter, not from the reader)."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Collection
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
MAX_LINES = 600


def _modules() -> dict[str, Path]:
    found = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _imported_targets(tree: ast.Module, package: str, modules: Collection[str]) -> set[str]:
    """Dotted names a module imports anywhere: at import time, inside functions and under
    ``if TYPE_CHECKING:`` alike (a circle tied by a deferred import is still a circle).

    ``from pkg import name`` imports the submodule ``pkg.name`` when there is one, else a
    name that ``pkg`` itself defines: then ``pkg`` (its ``__init__``) is the dependency."""
    targets: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                targets.add(sub if sub in modules else base)
    return targets


def import_graph() -> dict[str, set[str]]:
    """Module -> the overdrive modules it imports, wherever in the file."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for target in _imported_targets(ast.parse(path.read_text()), package, modules):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                edges.add(target)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def test_no_source_file_is_over_600_lines() -> None:
    long = {
        str(p.relative_to(SRC)): n
        for p in SRC.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"split these files (over {MAX_LINES} lines): {long}"


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_the_cycle_check_counts_deferred_imports_and_names_from_a_package_init() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "from overdrive.config import schema\n"
        "if TYPE_CHECKING:\n    from overdrive.state import PartialState\n"
        "def f():\n    import overdrive.accelerator\n"
        "    from overdrive.tracking import AVAILABLE\n"
    )
    modules = _modules()
    targets = _imported_targets(tree, "overdrive.config", modules)
    # a submodule by its name; a name an __init__ defines, as that package
    assert {"overdrive.config.schema", "overdrive.state", "overdrive.tracking"} <= targets
    assert "overdrive.config" not in targets
    assert "overdrive.accelerator" in targets
    assert "overdrive.config.load" in import_graph()["overdrive.config"]


# Modules that a package's __init__ reaches back into: imported first and alone, each must
# load (a parent package initialising midway through its own child is the circle the graph
# above leaves out, since it does not count `from pkg.sub import x` as importing `pkg`).
FIRST_IMPORTS = (
    "overdrive.plugins",
    "overdrive.parallel_handlers",
    "overdrive.utils.constants",
    "overdrive.utils.dataclasses",
    "overdrive.state",
    "overdrive.process_state",
    "overdrive.strategies.choice",
    "overdrive.parallel.layout",
)


@pytest.mark.parametrize("module", FIRST_IMPORTS)
def test_module_imports_first_and_alone(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
