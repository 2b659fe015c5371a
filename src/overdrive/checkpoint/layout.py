"""Where checkpoints live: automatic names, the completion marker, newest lookup, rotation."""

from __future__ import annotations

import glob
import re
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path

from overdrive.checkpoint.errors import CheckpointError

MANIFEST = "overdrive_checkpoint.json"
"""Written last, by the main process, once every rank has written its files: the marker."""

CHECKPOINTS_DIR = "checkpoints"
_NUMBERED = re.compile(r"^checkpoint_(\d+)$")


def checkpoints_root(project_dir: str | Path) -> Path:
    """``{project_dir}/checkpoints``: the home of automatically named checkpoints."""
    return Path(project_dir) / CHECKPOINTS_DIR


def automatic_root(project_dir: str | None, automatic_checkpoint_naming: bool | None) -> Path:
    """Where automatically named checkpoints go; refused when a save names no directory and
    automatic naming is off."""
    if not (automatic_checkpoint_naming and project_dir):
        raise CheckpointError(
            "save_state() got no directory, and automatic checkpoint naming is off\n"
            "  fix: pass a directory, save_state('path/to/ckpt'), or set "
            "ProjectConfiguration(project_dir=..., automatic_checkpoint_naming=True)"
        )
    return checkpoints_root(project_dir)


def checkpoint_name(index: int) -> str:
    return f"checkpoint_{index}"


def index_of(path: Path) -> int | None:
    """``n`` for a ``checkpoint_<n>`` directory, else None."""
    match = _NUMBERED.match(Path(path).name)
    return int(match.group(1)) if match else None


def new_token() -> str:
    """A name part no other save (of this job or another) uses."""
    return secrets.token_hex(4)


def temp_dir_for(final: Path, token: str) -> Path:
    """The hidden sibling one save writes into before renaming it into place; ``token``
    makes it this save's own, so concurrent jobs never write into each other's."""
    return final.parent / f".{final.name}.{token}.partial"


def old_dir_for(final: Path, token: str) -> Path:
    """Where the checkpoint a save replaces waits, hidden, until the new one is in place."""
    return final.parent / f".{final.name}.{token}.old"


def old_dirs_for(final: Path) -> list[Path]:
    """Every such waiting checkpoint of ``final`` (``.<name>.old`` from older versions too)."""
    parent, name = final.parent, final.name
    if not parent.is_dir():
        return []
    found = [p for p in parent.iterdir() if p.name == f".{name}.old"]
    found += [p for p in parent.glob(f".{glob.escape(name)}.*.old") if p.is_dir()]
    return sorted(found)


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


def rotate(
    root: Path,
    total_limit: int | None,
    keep: Path,
    before_retire: Callable[[Path], None] | None = None,
) -> list[Path]:
    """Remove the oldest complete checkpoints (by number) so at most ``total_limit`` remain;
    ``before_retire(path)`` runs before each is removed."""
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
        if before_retire is not None:
            before_retire(path)
        if retire(path):
            removed.append(path)
        excess -= 1
    return removed


def retire(path: Path) -> bool:
    """Remove a checkpoint: first renamed away (one atomic step, so no reader ever sees it
    half deleted, and of two jobs rotating the same directory only one removes it), then
    deleted. False if it was already gone."""
    hidden = path.parent / f".{path.name}.{new_token()}.deleting"
    try:
        path.rename(hidden)
    except FileNotFoundError:
        return False
    shutil.rmtree(hidden, ignore_errors=True)
    return True
