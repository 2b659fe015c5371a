"""House rules of the source tree, checked on every `make test`: no source file over 600 lines;
no import circle, counting every import inside functions and under ``if TYPE_CHECKING:`` too
(deferring an import hides a circle from the interpreter, not from the reader), and counting
the package ``__init__``s an import runs (``import overdrive.a.b.c`` runs ``overdrive/a``'s
and ``overdrive/a/b``'s first); and every module imports first and alone."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Collection
from pathlib import Path

from tests.unit.test_faces_and_engine import COMPOSITION_ROOTS, is_face

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


def packages_run_first(importer: str, target: str, packages: Collection[str]) -> set[str]:
    """The package ``__init__``s that importing ``target`` runs before it, below the root.

    A package that holds ``importer`` is left out: its ``__init__`` has run (or is running)
    before ``importer`` itself. So is the root ``overdrive``, which every module is under: a
    module that needs a name the root defines says so (``from overdrive import X``), and the
    face rule keeps engine modules from it."""
    parts = target.split(".")
    return {
        package
        for package in (".".join(parts[:end]) for end in range(2, len(parts)))
        if package in packages and not importer.startswith(package + ".")
    }


def import_graph() -> dict[str, set[str]]:
    """Module -> the overdrive modules it imports, wherever in the file, and the package
    ``__init__``s those imports run first."""
    modules = _modules()
    packages = {name for name, path in modules.items() if path.name == "__init__.py"}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for target in _imported_targets(ast.parse(path.read_text()), package, modules):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            edges.add(target)
            edges |= packages_run_first(name, target, packages)
        graph[name] = edges - {"", name}
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


def rooms_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The engine's rooms: each package at the top of ``overdrive`` (the engine has no module
    there), with an arrow where some module of one imports one of the other. Faces and the
    composition roots are left out: they mirror Hugging Face Accelerate's modules, which
    import each other."""

    def room(module: str) -> str:
        return module.split(".")[1] if "." in module else ""

    rooms: dict[str, set[str]] = {}
    for module, targets in graph.items():
        name = room(module)
        if is_face(name) or name in COMPOSITION_ROOTS:
            continue
        arrows = rooms.setdefault(name, set())
        arrows.update(room(t) for t in targets if room(t) != name)
    return {name: arrows & rooms.keys() for name, arrows in rooms.items()}


def test_no_circle_between_the_engines_packages() -> None:
    assert cycles(rooms_graph(import_graph())) == []


def test_an_import_runs_the_init_of_each_package_above_it() -> None:
    packages = {"overdrive", "overdrive.a", "overdrive.a.b"}
    # overdrive.x imports overdrive.a.b.c: overdrive/a and overdrive/a/b run first
    assert packages_run_first("overdrive.x", "overdrive.a.b.c", packages) == {
        "overdrive.a",
        "overdrive.a.b",
    }
    # from inside overdrive.a, only the __init__ of overdrive.a.b is still to run
    assert packages_run_first("overdrive.a.y", "overdrive.a.b.c", packages) == {"overdrive.a.b"}
    # strategies/base.py imports overdrive.parallel.chain, which runs overdrive/parallel first
    assert "overdrive.parallel" in import_graph()["overdrive.strategies.base"]
    # rooms: a package is one, whichever of its modules an arrow starts or ends at
    rooms = rooms_graph({"overdrive.a.x": {"overdrive.b"}, "overdrive.b": {"overdrive.a.y"}})
    assert rooms == {"a": {"b"}, "b": {"a"}} and cycles(rooms) == [["a", "b"]]


# Modules whose import needs a package an extra installs (``pip install overdrive[...]``):
# alone, each imports or fails only for want of that package.
EXTRAS = ("deepspeed", "transformers", "tensorboard", "wandb", "mlflow", "torchao")
# ``python -m overdrive`` runs the CLI: importing it is running it.
NOT_IMPORTED = ("overdrive.__main__",)

# An interpreter imports each of its modules as the first overdrive module it loads: every
# ``overdrive*`` entry leaves ``sys.modules`` before the next import (torch stays loaded, so
# each import costs only overdrive's own modules). A line for each module that fails.
FIRST_AND_ALONE = """
import importlib, sys, traceback
import torch  # noqa: F401
names = sys.argv[1:]
for name in names:
    for loaded in [m for m in sys.modules if m == "overdrive" or m.startswith("overdrive.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as error:
        print(f"{name}\tmissing\t{error.name}")
    except BaseException as error:
        last = traceback.format_exception_only(type(error), error)[-1].strip()
        print(f"{name}\tfailed\t{last}")
"""


def _importable_names() -> list[str]:
    return sorted(n for n in _modules() if n.startswith("overdrive") and n not in NOT_IMPORTED)


def first_import_failures(names: list[str]) -> list[str]:
    """The modules of ``names`` that do not import first and alone (a missing extra excused).

    The names are split between one interpreter per CPU (at most 4), run side by side: each
    import is still the first of overdrive's in its interpreter."""
    parts = max(1, min(4, os.cpu_count() or 1, len(names)))
    chunks = [names[i * len(names) // parts : (i + 1) * len(names) // parts] for i in range(parts)]
    running = [
        subprocess.Popen(
            [sys.executable, "-c", FIRST_AND_ALONE, *chunk],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=SRC,
        )
        for chunk in chunks
    ]
    lines = []
    for child in running:
        out, err = child.communicate(timeout=600)
        assert child.returncode == 0, err[-2000:]
        lines += out.splitlines()
    failures = []
    for line in lines:
        name, kind, what = line.split("\t", 2)
        if kind == "missing" and what.split(".")[0] in EXTRAS:
            continue
        failures.append(f"{name}: {what}")
    return failures


def test_every_module_imports_first_and_alone() -> None:
    names = _importable_names()
    assert len(names) > 250 and "overdrive.parallel.megatron_options" in names
    assert first_import_failures(names) == []
