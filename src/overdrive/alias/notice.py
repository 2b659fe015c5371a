"""Say which engine ``import accelerate`` gets, when (and only if) something imports it.

A script that never imports ``accelerate`` (a plain overdrive loop) hears nothing about it;
a transformers Trainer script hears it once, at its first ``import accelerate``.
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Sequence
from types import ModuleType

from overdrive.alias.finder import target_name

LINE_VARIABLE = "OVERDRIVE_ENGINE_LINE"
"""Set by ``overdrive launch`` for its workers: the engine line rank 0 says at that import."""


class EngineNotice(importlib.abc.MetaPathFinder):
    """A finder that finds nothing: at the first ``accelerate`` name it writes ``line`` to
    standard error, once. (It stays on ``sys.meta_path``: taking itself off while the import
    system walks that list would skip the finder after it, the alias.)"""

    def __init__(self, line: str) -> None:
        self.line: str | None = line

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> None:
        if self.line is not None and target_name(fullname) is not None:
            line, self.line = self.line, None
            sys.stderr.write(f"overdrive: {line}\n")
            sys.stderr.flush()
        return None


def announce(line: str) -> None:
    """Write ``line`` at the first import of ``accelerate`` in this process (at once if one
    already happened)."""
    withdraw()
    if "accelerate" in sys.modules:
        sys.stderr.write(f"overdrive: {line}\n")
        return
    sys.meta_path.insert(0, EngineNotice(line))


def withdraw() -> None:
    """Remove a pending notice (nothing is said)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, EngineNotice)]
