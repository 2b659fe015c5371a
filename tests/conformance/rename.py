"""The mechanical rename that ports Hugging Face Accelerate's unit tests to overdrive.

Three things change, nothing else: import statements (``import accelerate``, ``from
accelerate.x import y``), string literals that name one of its modules or its logger
(``mock.patch("accelerate.utils.x")``, ``assertLogs("accelerate")``), and its command name
where a test runs the CLI (``["accelerate", "launch", ...]``, ``"accelerate launch ..."``).
A test that needs more than this to pass is listed in docs/migrating.md, never edited.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

_IMPORT = re.compile(r"^(\s*(?:from|import)\s+)accelerate(?=[\s.,]|$)", re.MULTILINE)
# "accelerate" or "accelerate.x.y" as a whole string literal's start: a module path or logger.
_MODULE_STRING = re.compile(r"""(?<=["'])accelerate(?=["'.])""")
# The command name at the start of a command line held in one string.
_COMMAND = re.compile(
    r"""(?<=["'])accelerate(?= (?:launch|config|env|test|estimate-memory|merge-weights|tpu-config|to-fsdp2)\b)"""
)


def rename(source: str) -> str:
    """``source`` with Hugging Face Accelerate's imports, module strings and command renamed."""
    source = _IMPORT.sub(r"\1overdrive", source)
    source = _MODULE_STRING.sub("overdrive", source)
    return _COMMAND.sub("overdrive", source)


def port_tree(source: Path, target: Path) -> None:
    """``source`` copied to ``target`` (replaced) with every .py file renamed."""
    if target.exists():
        shutil.rmtree(target)
    for path in source.rglob("*"):
        out = target / path.relative_to(source)
        if path.is_dir():
            out.mkdir(parents=True, exist_ok=True)
            continue
        out.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".py":
            out.write_text(rename(path.read_text()))
        else:
            shutil.copy2(path, out)
