"""The conformance suite's port: imports renamed, nothing else (tests/compat/port.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.compat.port import port_all, rename_imports
from tests.compat.runner import main_calls


def test_port_renames_imports_only() -> None:
    source = (
        "import accelerate\nfrom accelerate.utils import gather  # accelerate\n"
        "import accelerate.state as s\nx = 'accelerate'\n    from accelerate import A\n"
        "import accelerated\n"
    )
    assert rename_imports(source) == (
        "import overdrive\nfrom overdrive.utils import gather  # accelerate\n"
        "import overdrive.state as s\nx = 'accelerate'\n    from overdrive import A\n"
        "import accelerated\n"
    )


def test_port_says_how_to_install_the_scripts(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="pip install --no-deps --target"):
        port_all(tmp_path / "site", tmp_path / "out")


def test_runner_counts_the_functions_main_calls() -> None:
    source = (
        "def helper(): pass\ndef test_a(x): helper()\ndef test_b(): pass\n"
        "def main():\n    test_a(1)\n    for i in range(2):\n        test_b()\n    print(1)\n"
    )
    assert main_calls(source) == ["test_a", "test_b"]
    script = "def setup(): pass\nif __name__ == '__main__':\n    setup()\n"
    assert main_calls(script) == ["setup"]
