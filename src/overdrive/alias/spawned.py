"""The alias in processes that ``multiprocessing`` starts by spawn (DataLoader workers with
``multiprocessing_context="spawn"``): a fresh interpreter, which imports the parent's main
script again, with its ``import accelerate``, before any code of the parent runs there.

``multiprocessing`` first sends the child a dict of preparation data and applies it only once
the whole dict is unpickled; one more entry in it, whose unpickling installs the alias, puts the
alias in place before the main script is imported again. The child passes it on to its own
spawned children the same way.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from overdrive.alias.finder import AliasFinder

KEY = "overdrive_accelerate_alias"
"""The preparation-data entry; ``multiprocessing`` ignores entries it does not know."""

_original: Callable[[str], dict[str, Any]] | None = None


class _InstallInChild:
    """Pickles as a call to :func:`install_in_child`."""

    def __reduce__(self) -> tuple[Callable[[], None], tuple[()]]:
        return install_in_child, ()


def install_in_child() -> None:
    """Put the alias finder first on ``sys.meta_path`` (the parent chose it, real package or
    not) and pass it on to this process's own spawned children."""
    if not any(isinstance(f, AliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, AliasFinder())
    hook()


def hook() -> None:
    """Add the entry to every spawned child's preparation data from now on."""
    global _original
    if _original is not None:
        return
    import multiprocessing.spawn as spawn  # deferred: only processes with the alias pay for it

    original = spawn.get_preparation_data

    def get_preparation_data(name: str) -> dict[str, Any]:
        data = original(name)
        data[KEY] = _InstallInChild()
        return data

    _original = original
    spawn.get_preparation_data = get_preparation_data


def unhook() -> None:
    """Spawned children no longer get the alias."""
    global _original
    if _original is None:
        return
    import multiprocessing.spawn as spawn  # deferred: imported already when hooked

    spawn.get_preparation_data = _original  # type: ignore[assignment]
    _original = None
