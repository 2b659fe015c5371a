"""Issue 30: the packages whose seams are typed stay typed. Each one uses ``Any`` fewer than 15
times per 1,000 lines (real types, ``object``, protocols and TypedDicts instead), and mypy
checks it strictly (``[[tool.mypy.overrides]]`` in pyproject.toml)."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
MAX_ANY_PER_1000_LINES = 15

TYPED_PACKAGES = [
    "overdrive.bigmodel",
    "overdrive.checkpoint",
    "overdrive.data",
    "overdrive.ds",
    "overdrive.parallel",
    "overdrive.strategies",
]
STRICT_FLAGS = (
    "disallow_any_generics",
    "warn_return_any",
    "disallow_untyped_defs",
    "disallow_incomplete_defs",
)


def _is_any(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id == "Any") or (
        isinstance(node, ast.Attribute) and node.attr == "Any"
    )


def _quoted(node: ast.AST | None) -> ast.AST | None:
    """A string annotation (``"dict[str, Any]"``) parsed, so quoting hides nothing."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            return ast.parse(node.value, mode="eval")
        except SyntaxError:
            return None
    return None


def count_any(source: str) -> int:
    """Uses of the name ``Any`` in code and annotations (quoted ones included), not in
    comments, docstrings or other strings, and not the ``import`` that brings it in."""
    tree = ast.parse(source)
    count = 0
    for node in ast.walk(tree):
        count += _is_any(node)
        strings: list[ast.AST | None] = []
        if isinstance(node, ast.arg):
            strings.append(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            strings.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            strings.append(node.annotation)
            if "TypeAlias" in ast.unparse(node.annotation):
                strings.append(node.value)  # X: TypeAlias = "..."
        elif isinstance(node, ast.Call) and node.args and ast.unparse(node.func).endswith("cast"):
            strings.append(node.args[0])  # cast("...", value)
        elif isinstance(node, ast.Subscript):
            strings.append(node.slice)  # list["..."]
            if isinstance(node.slice, ast.Tuple):
                strings += node.slice.elts
        for parsed in map(_quoted, strings):
            if parsed is not None:
                count += sum(_is_any(n) for n in ast.walk(parsed))
    return count


def any_density(package: str) -> tuple[int, int]:
    """(uses of ``Any``, lines) over every module of ``package``."""
    uses = lines = 0
    for path in sorted((SRC / package.replace(".", "/")).rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        uses += count_any(text)
        lines += len(text.splitlines())
    return uses, lines


@pytest.mark.parametrize("package", TYPED_PACKAGES)
def test_any_is_rare_in_typed_packages(package: str) -> None:
    uses, lines = any_density(package)
    assert lines > 0, f"{package} has no source under {SRC}"
    per_1000 = 1000 * uses / lines
    assert per_1000 < MAX_ANY_PER_1000_LINES, (
        f"{package} uses Any {uses} times in {lines} lines ({per_1000:.1f} per 1,000, the "
        f"limit is {MAX_ANY_PER_1000_LINES}): type the new code with real types, object, "
        "a Protocol or a TypedDict"
    )


def _modules(override: dict) -> list[str]:
    module = override.get("module", [])
    return [module] if isinstance(module, str) else list(module)


def _strict_overrides(pattern: str) -> list[dict]:
    """The mypy overrides that name ``pattern`` (a package's ``pkg.*`` or a module)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+ reads pyproject.toml itself
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    overrides = config["tool"]["mypy"].get("overrides", [])
    found = [o for o in overrides if pattern in _modules(o)]
    assert found, f"pyproject.toml has no [[tool.mypy.overrides]] for {pattern}"
    missing = [flag for flag in STRICT_FLAGS if not any(o.get(flag) is True for o in found)]
    assert not missing, f"the mypy override for {pattern} lacks {missing}"
    return found


@pytest.mark.parametrize("package", TYPED_PACKAGES)
def test_typed_packages_are_checked_strictly_by_mypy(package: str) -> None:
    _strict_overrides(f"{package}.*")


def test_the_count_skips_comments_docstrings_and_imports_but_not_quoted_annotations() -> None:
    source = textwrap.dedent(
        '''
        """Any docstring that says Any."""
        from typing import Any, TypeAlias, cast
        import typing

        Tree: TypeAlias = "dict[str, Any]"  # counted: 1

        def f(x: Any, y: "list[Any]") -> "Any":  # counted: 3 (this comment's Any is not)
            """Any."""
            z: typing.Any = cast("Any", x)  # counted: 2
            return "Any"
        '''
    )
    assert count_any(source) == 6
