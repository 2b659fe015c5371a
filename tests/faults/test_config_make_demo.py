"""`make demo` installs only what the demo needs (issue 13, item 11).

The demo gets the package and its `demo` extra; the test tool chain (pytest, ruff, mypy,
trackers, ...) comes with `make test` alone. Each target works from a fresh clone in either
order. `make -n` prints what a target would run; `PIP=true` runs a target's install steps
with a stand-in pip, so the stamps it leaves are real.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.dist import REPO

# Import name -> distribution name, for the modules the example imports.
DISTRIBUTIONS = {"sklearn": "scikit-learn", "torch": "torch", "tqdm": "tqdm", "numpy": "numpy"}
TEST_ONLY = ("pytest", "ruff", "mypy", "hypothesis", "tensorboard", "wandb", "mlflow")
DEMO_STAMP, TEST_STAMP = ".installed-demo", ".installed-test"

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
tomllib = pytest.importorskip("tomllib")  # Python 3.11+ reads pyproject.toml itself


def _make(*args: str, venv: Path) -> list[str]:
    """Run make with a scratch virtualenv and a stand-in pip; the lines it printed."""
    done = subprocess.run(
        ["make", *args, f"VENV={venv}", "PIP=true"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def _installs(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("true install")]


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    """A scratch virtualenv as a fresh clone's first make would find it (python only)."""
    path = tmp_path / "venv"
    (path / "bin").mkdir(parents=True)
    (path / "bin" / "python").symlink_to(sys.executable)
    return path


def _extras() -> dict[str, list[str]]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras: dict[str, list[str]] = project["optional-dependencies"]
    return extras


def _names(requirements: list[str]) -> set[str]:
    return {r.split(">")[0].split("=")[0].split("[")[0].strip().lower() for r in requirements}


def test_demo_from_a_fresh_clone_installs_the_demo_extra_only(venv: Path) -> None:
    installs = _installs(_make("-n", "demo", venv=venv))
    assert any(".[demo]" in line for line in installs), installs
    assert not any("[test]" in line for line in installs), installs
    assert not any(tool in line for line in installs for tool in TEST_ONLY), installs


def test_test_after_demo_installs_the_test_tool_chain(venv: Path) -> None:
    _make(str(venv / DEMO_STAMP), venv=venv)  # the install step of `make demo`
    assert (venv / DEMO_STAMP).exists()
    assert not _installs(_make("-n", "demo", venv=venv))  # a second demo installs nothing
    installs = _installs(_make("-n", "test", venv=venv))
    assert any("[test]" in line for line in installs), installs


def test_demo_after_test_installs_nothing_more(venv: Path) -> None:
    _make(str(venv / TEST_STAMP), venv=venv)  # the install step of `make test`
    lines = _make("-n", "demo", venv=venv)
    assert any("overdrive launch" in line for line in lines), lines
    assert not _installs(lines), lines


def test_the_test_extra_holds_the_demo_extra() -> None:
    extras = _extras()
    assert _names(extras["demo"]) <= _names(extras["test"])


def test_the_demo_extra_covers_what_the_demo_imports() -> None:
    tree = ast.parse((REPO / "examples" / "digits_ddp.py").read_text())
    imported = {
        (node.module if isinstance(node, ast.ImportFrom) else alias.name).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom) and not getattr(node, "level", 0)
        for alias in node.names
        if isinstance(node, ast.Import) or node.module
    }
    third_party = imported - set(sys.stdlib_module_names) - {"overdrive", "__future__"}
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    names = _names([*project["dependencies"], *_extras()["demo"]])
    assert third_party, imported
    for module in sorted(third_party):
        assert DISTRIBUTIONS[module] in names, (module, sorted(names))
