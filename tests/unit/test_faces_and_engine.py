"""Faces and engine: modules at Hugging Face Accelerate's dotted paths hold its public names
and adapt them; the engine packages never import them (at import time or inside a
function), so the arrows run one way, face -> engine."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "overdrive"
FACE_PACKAGES = ("utils", "commands", "test_utils", "compat")
FACE_MODULES = (
    "hooks",
    "big_modeling",
    "inference",
    "checkpointing",
    "launchers",
    "memory_utils",
    "state",
)
ENGINE_PACKAGES = (
    "alias",
    "bigmodel",
    "checkpoint",
    "config",
    "data",
    "ds",
    "launch",
    "memory_estimate",
    "parallel",
    "precision",
    "quantize",
    "strategies",
    "tracking",
)


def is_face(dotted: str) -> bool:
    """Whether ``overdrive.<dotted>`` is a face."""
    first = dotted.split(".")[0]
    return first in FACE_PACKAGES or dotted in FACE_MODULES


def imported(path: Path) -> set[str]:
    """Every overdrive module ``path`` imports, anywhere in the file, as ``a.b`` under
    ``overdrive``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "overdrive":
                found.update(alias.name for alias in node.names)
            elif node.module.startswith("overdrive."):
                found.add(node.module.removeprefix("overdrive."))
        elif isinstance(node, ast.Import):
            found.update(
                a.name.removeprefix("overdrive.")
                for a in node.names
                if a.name.startswith("overdrive.")
            )
    return found


def test_engine_packages_import_no_face() -> None:
    crossings = []
    for package in ENGINE_PACKAGES:
        for path in sorted((SRC / package).rglob("*.py")):
            for target in sorted(imported(path)):
                if is_face(target):
                    crossings.append(f"{path.relative_to(SRC)} imports overdrive.{target}")
    assert crossings == []


def test_the_rule_sees_a_crossing(tmp_path: Path) -> None:
    module = tmp_path / "engine.py"
    module.write_text("def f():\n    from overdrive.utils.operations import send_to_device\n")
    assert any(is_face(t) for t in imported(module))
