"""Faces and engine, told apart by the folder: a module is a face iff its dotted path is one
of Hugging Face Accelerate 1.15's top-level modules or lies under one of its packages
(``utils/``, ``commands/``, ``test_utils/``; ``tracking/`` is Accelerate's ``tracking``), or
under ``compat/``, the Accelerate semantics the faces share. Faces hold Accelerate's public
names and adapt them; engine modules (every other module, all in packages) never import them
(at import time or inside a function), so the arrows run one way, face -> engine. The
composition roots may import both: the package's ``__init__`` (its lazy table of
Accelerate's top-level names) and ``__main__``, ``accelerator`` (the engine's loop with
Accelerate's adaptation mixed into its ``Accelerator``), ``run`` (``python -m
overdrive.run``); no engine module imports them, by ``import overdrive`` or ``from overdrive
import X`` any more than by the module's own path. ``sanity_check``, the script ``overdrive
test`` launches, and ``simulate.plan_script``, the step ``overdrive plan`` simulates, are
training scripts of the house's own: like a user's, they import the ``Accelerator``, and no
module of the package imports them. The top level holds only faces, roots, engine packages
and overdrive's own two public modules (``errors``, ``version``)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "overdrive"
# Hugging Face Accelerate 1.15's package layout: the modules and packages at the top of
# ``accelerate`` (``tracking`` is one module there, a package here). A module is a face iff
# its dotted path is one of these or lies under one of them: the folder says which it is.
ACCELERATE_MODULES = (
    "accelerator",
    "big_modeling",
    "checkpointing",
    "data_loader",
    "hooks",
    "inference",
    "launchers",
    "local_sgd",
    "logging",
    "memory_utils",
    "optimizer",
    "parallelism_config",
    "scheduler",
    "state",
    "tracking",
)
ACCELERATE_PACKAGES = ("commands", "test_utils", "utils")
# Accelerate's semantics the faces share (the ``Accelerator``'s mixin, its plugin views,
# Accelerate-layout checkpoint files): no path of Accelerate's, a face by its folder.
ADAPTATION = "compat"
# the package's __init__ and ``python -m overdrive``, the Accelerator, ``python -m
# overdrive.run``, and the scripts `overdrive test` launches and `overdrive plan` simulates
COMPOSITION_ROOTS = ("", "__main__", "accelerator", "run", "sanity_check", "simulate.plan_script")
# overdrive's own public modules that stay at the top: the errors a user catches
# (``overdrive.errors.ConfigError``) and ``overdrive.version``; both import nothing.
OWN_PUBLIC = ("errors", "version")


def is_face(dotted: str) -> bool:
    """Whether ``overdrive.<dotted>`` is a face."""
    first = dotted.split(".")[0]
    return first in ACCELERATE_MODULES or first in ACCELERATE_PACKAGES or first == ADAPTATION


def _is_module(dotted: str) -> bool:
    """Whether ``overdrive.<dotted>`` is a module or package of the source tree."""
    path = SRC.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imported(path: Path) -> set[str]:
    """Every overdrive module ``path`` imports, anywhere in the file, as ``a.b`` under
    ``overdrive``; the package's ``__init__`` as ``""`` (``import overdrive``, and
    ``from overdrive import X`` where ``X`` is a name it defines, not a submodule)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "overdrive":
                found.update(a.name if _is_module(a.name) else "" for a in node.names)
            elif node.module.startswith("overdrive."):
                found.add(node.module.removeprefix("overdrive."))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "overdrive":
                    found.add("")
                elif alias.name.startswith("overdrive."):
                    found.add(alias.name.removeprefix("overdrive."))
    return found


def dotted_name(path: Path) -> str:
    """``overdrive/a/b.py`` -> ``a.b``; a package's ``__init__`` is the package's name."""
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def engine_modules() -> list[Path]:
    """Every module that is neither a face nor a composition root."""
    return [
        path
        for path in sorted(SRC.rglob("*.py"))
        if not is_face(dotted_name(path)) and dotted_name(path) not in COMPOSITION_ROOTS
    ]


def test_engine_modules_import_no_face_and_no_composition_root() -> None:
    crossings = []
    for path in engine_modules():
        for target in sorted(imported(path)):
            if is_face(target) or target in COMPOSITION_ROOTS:
                crossings.append(f"{path.relative_to(SRC)} imports overdrive.{target}".rstrip("."))
    assert crossings == []


def test_every_part_of_the_house_is_classified() -> None:
    engine = {dotted_name(p).split(".")[0] for p in engine_modules()}
    # the engine holds the packages that do the work
    assert {"checkpoint", "parallel", "strategies", "cli", "training", "arguments"} <= engine
    assert not engine & {*ACCELERATE_MODULES, *ACCELERATE_PACKAGES, ADAPTATION}


def test_the_top_level_holds_faces_roots_and_engine_packages() -> None:
    """A newcomer tells a face from the engine by its folder: every module at the top of
    ``overdrive`` is one of Accelerate's, a composition root or overdrive's own public
    module; the engine lives in packages."""
    loose = [
        path.stem
        for path in sorted(SRC.glob("*.py"))
        if path.stem != "__init__"
        and not is_face(path.stem)
        and path.stem not in COMPOSITION_ROOTS
        and path.stem not in OWN_PUBLIC
    ]
    assert loose == []
    for name in OWN_PUBLIC:  # they stay at the top because nothing they hold needs more
        assert imported(SRC / f"{name}.py") == set()


def test_the_rule_sees_a_crossing(tmp_path: Path) -> None:
    module = tmp_path / "engine.py"
    module.write_text("def f():\n    from overdrive.utils.operations import send_to_device\n")
    assert any(is_face(t) for t in imported(module))


def test_the_rule_sees_the_package_root_in_both_forms(tmp_path: Path) -> None:
    module = tmp_path / "engine.py"
    module.write_text("import overdrive\n")
    assert imported(module) == {""}
    module.write_text("from overdrive import Accelerator, errors\n")
    assert imported(module) == {"", "errors"}
