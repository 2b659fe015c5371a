"""Where checkpoints live: automatic names, the completion marker, newest lookup, rotation."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

MANIFEST = "overdrive_checkpoint.json"
"""Written last, by the main process, once every rank has written its files: the marker."""

CHECKPOINTS_DIR = "checkpoints"
_NUMBERED = re.compile(r"^checkpoint_(\d+)$")


def checkpoints_root(project_dir: str | Path) -> Path:
    """``{project_dir}/checkpoints``: the home of automatically named checkpoints."""
    return Path(project_dir) / CHECKPOINTS_DIR


def checkpoint_name(index: int) -> str:
    return f"checkpoint_{index}"


def temp_dir_for(final: Path) -> Path:
    """The hidden sibling a checkpoint is written into before it is renamed into place."""
    return final.parent / f".{final.name}.partial"


def old_dir_for(final: Path) -> Path:
    """Where the checkpoint a save replaces waits, hidden, until the new one is in place."""
    return final.parent / f".{final.name}.old"


def is_complete(path: Path) -> bool:
    return (Path(path) / MANIFEST).is_file()


def numbered(root: Path) -> list[tuple[int, Path]]:
    """Every ``checkpoint_<n>`` directory under ``root`` (complete or not), by number."""
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _NUMBERED.match(child.name)
        if match and child.is_dir():
            found.append((int(match.group(1)), child))
    return sorted(found)


def newest_complete(root: Path) -> Path | None:
    """The highest-numbered checkpoint that carries the completion marker."""
    complete = [path for _, path in numbered(root) if is_complete(path)]
    return complete[-1] if complete else None


def next_index(root: Path, iteration: int = 0) -> int:
    """One past the highest existing number (never reusing a name), at least ``iteration``."""
    existing = numbered(root)
    return max(iteration, existing[-1][0] + 1 if existing else 0)


def rotate(root: Path, total_limit: int | None, keep: Path) -> list[Path]:
    """Remove the oldest complete checkpoints (by number) so at most ``total_limit`` remain."""
    if total_limit is None:
        return []
    complete = [path for _, path in numbered(root) if is_complete(path)]
    excess = len(complete) - total_limit
    removed = []
    for path in complete:
        if excess <= 0:
            break
        if path.resolve() == keep.resolve():
            continue
        shutil.rmtree(path)
        removed.append(path)
        excess -= 1
    return removed
