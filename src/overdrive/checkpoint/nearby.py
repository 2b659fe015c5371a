"""The checkpoints near a path that does not exist, for ``load_state``'s error message."""

from __future__ import annotations

import os
from pathlib import Path

from overdrive.checkpoint import layout

SHOWN = 8
"""Checkpoints listed by name; more are counted."""


def nearby_checkpoints(path: Path, project_dir: str | Path | None) -> list[Path]:
    """Complete checkpoints beside ``path`` and in ``project_dir`` (and its ``checkpoints``
    folder), as absolute paths, oldest save first."""
    folders = [path.parent]
    if project_dir:
        folders += [Path(project_dir), layout.checkpoints_root(project_dir)]
    found: dict[Path, float] = {}
    for folder in folders:
        try:
            children = [c for c in folder.iterdir() if not c.name.startswith(".")]
        except OSError:
            continue
        for child in (Path(os.path.abspath(c)) for c in children):
            if child not in found and child.is_dir() and layout.is_complete(child):
                try:
                    found[child] = (child / layout.MANIFEST).stat().st_mtime
                except OSError:
                    continue
    return sorted(found, key=lambda p: (found[p], layout.index_of(p) or 0, str(p)))


def missing_fix(path: Path, project_dir: str | Path | None) -> str:
    """The fix for a ``load_state`` path that does not exist: the checkpoints that do, the
    newest named."""
    found = nearby_checkpoints(path, project_dir)
    if not found:
        where = f"{path.parent}" + (f" or {project_dir}" if project_dir else "")
        return f"pass the directory save_state() returned (no complete checkpoint is in {where})"
    newest = found[-1]
    listed = ", ".join(str(p) for p in found[-SHOWN:])
    more = f" (and {len(found) - SHOWN} older)" if len(found) > SHOWN else ""
    return (
        f"load_state({str(newest)!r}) loads the newest; the complete checkpoints there are "
        f"{listed}{more}"
    )
