"""Dump Hugging Face Accelerate's public surface as JSON: every module of the installed
package, its public names and their call signatures.

    PYTHONPATH=.compat/site python -m tests.surface.dump OUT.json

Run under the pinned Accelerate (the test-only folder ``make compat`` installs), never under
overdrive. A module's public names follow PEP 8: the names it defines at top level (functions,
classes, assignments) without a leading underscore; a package's ``__init__`` also re-exports
what it imports from its own package. Imported names elsewhere are implementation detail.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import sys
from pathlib import Path
from typing import Any

PACKAGE = "accelerate"
SCRIPTS = "accelerate.test_utils.scripts."


def _defined_names(source: str, is_package: bool) -> list[str]:
    names: list[str] = []

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.append(node.name)
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    names.extend(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.append(node.target.id)
            elif isinstance(node, ast.ImportFrom) and is_package:
                if node.level or (node.module or "").startswith(PACKAGE):
                    names.extend(a.asname or a.name for a in node.names)
            elif isinstance(node, ast.If):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                visit(node.orelse)
                visit(node.finalbody)
                for handler in node.handlers:
                    visit(handler.body)

    visit(ast.parse(source).body)
    return sorted({n for n in names if not n.startswith("_")})


def parameters(value: Any) -> list[list[Any]] | None:
    """``[name, kind, has_default]`` for each parameter of a callable, or None."""
    if not callable(value):
        return None
    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):
        return None
    return [
        [p.name, p.kind.name, p.default is not inspect.Parameter.empty]
        for p in signature.parameters.values()
    ]


def _kind(value: Any) -> str:
    if inspect.isclass(value):
        return "class"
    if callable(value):
        return "function"
    return "value"


def module_names(root: Path) -> list[tuple[str, Path, bool]]:
    """Every module under the package folder ``root``: (dotted name, file, is_package)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        if any(p.startswith("_") for p in parts):
            continue
        found.append((".".join(parts), path, is_package))
    return found


def dump() -> dict[str, Any]:
    """The surface: ``{module: {"error": str | None, "names": {name: {...}}}}``."""
    package = importlib.import_module(PACKAGE)
    root = Path(package.__file__).parent
    surface: dict[str, Any] = {}
    for dotted, path, is_package in module_names(root):
        entry: dict[str, Any] = {"error": None, "names": {}}
        surface[dotted] = entry
        try:
            module = importlib.import_module(dotted)
        except Exception as exc:  # an optional dependency it lacks here: the names still count
            entry["error"] = f"{type(exc).__name__}: {exc}"[:200]
            module = None
        if dotted.startswith(SCRIPTS):  # scripts run by path: the module counts, not its names
            continue
        for name in _defined_names(path.read_text(), is_package):
            value = getattr(module, name, None) if module is not None else None
            entry["names"][name] = {"kind": _kind(value), "params": parameters(value)}
            if module is not None and not hasattr(module, name):
                # defined under a condition this environment does not meet (an optional
                # package): absent from Accelerate here too
                entry["names"][name]["absent_here"] = True
    return surface


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(json.dumps(dump(), indent=1, sort_keys=True))
