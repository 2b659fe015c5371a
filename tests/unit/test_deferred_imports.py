"""A function-level import of an overdrive module says why it is deferred (issue 30, point 5).

An ``import overdrive...`` or ``from overdrive... import ...`` inside a function is allowed
only where it keeps a torch-free module torch-free, defers a heavy optional dependency or
breaks an import cycle, with a ``# deferred: <why>`` comment on its line or the line above;
otherwise it belongs with the module's top-level imports. A module whose comment claims it
stays torch-free is imported alone in a fresh process to show that it does.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "overdrive"

MARK = "# deferred:"


def _imports_overdrive(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.ImportFrom):
        module = node.module or ""
        return node.level > 0 or module == "overdrive" or module.startswith("overdrive.")
    return any(a.name == "overdrive" or a.name.startswith("overdrive.") for a in node.names)


def function_level_imports(source: str) -> list[tuple[int, str]]:
    """(line, comment or "") for each function-level import of an overdrive module; the
    comment is the ``# deferred:`` text on the import's line or the line above."""
    lines = source.splitlines()
    found: dict[int, str] = {}
    for func in ast.walk(ast.parse(source)):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(func):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and _imports_overdrive(node):
                near = [lines[node.lineno - 1]]
                if node.lineno >= 2:
                    near.insert(0, lines[node.lineno - 2])
                comment = next((line[line.index(MARK) :] for line in near if MARK in line), "")
                found[node.lineno] = comment
    return sorted(found.items())


def _audited_files() -> list[Path]:
    """Every module of the package."""
    return sorted(PACKAGE.rglob("*.py"))


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_every_function_level_import_says_why_it_is_deferred() -> None:
    missing = [
        f"{path.relative_to(SRC)}:{line}"
        for path in _audited_files()
        for line, comment in function_level_imports(path.read_text())
        if not comment
    ]
    assert not missing, (
        "function-level imports of overdrive modules without a '# deferred: <why>' comment "
        "(move them to the top-level imports unless they keep a torch-free module "
        f"torch-free or defer a heavy optional dependency): {missing}"
    )


def test_the_checker_flags_an_uncommented_import(tmp_path: Path) -> None:
    path = tmp_path / "sample.py"
    path.write_text(
        "import os\n"
        "\n"
        "def plain():\n"
        "    from overdrive.errors import ConfigError\n"
        "    return ConfigError\n"
        "\n"
        "def kept():\n"
        "    # deferred: keeps sample torch-free\n"
        "    from overdrive.processes.random_state import capture_rng_state\n"
        "    import overdrive.tracking  # deferred: tensorboard is optional\n"
        "    import json\n"
        "    return capture_rng_state, json\n"
    )
    found = function_level_imports(path.read_text())
    assert found == [
        (4, ""),
        (9, "# deferred: keeps sample torch-free"),
        (10, "# deferred: tensorboard is optional"),
    ]


def _claimed_torch_free() -> list[str]:
    return sorted(
        {
            _module_name(path)
            for path in _audited_files()
            for _, comment in function_level_imports(path.read_text())
            if "torch-free" in comment
        }
    )


@pytest.mark.parametrize("module", _claimed_torch_free())
def test_a_module_said_to_be_kept_torch_free_imports_without_torch(module: str) -> None:
    code = f"import sys, {module}; print('torch' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "False", f"importing {module} alone loads torch"
