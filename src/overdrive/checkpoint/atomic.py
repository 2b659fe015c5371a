"""Atomic checkpoint directories: write into a hidden temp dir, then mark and rename.

A reader only ever sees a checkpoint directory that every rank finished: until the main
process renames the temp dir into place, the checkpoint has a hidden name that no lookup
matches, and the completion marker is written just before the rename.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from overdrive.checkpoint.errors import CheckpointError
from overdrive.checkpoint.layout import MANIFEST, is_complete, old_dir_for, temp_dir_for
from overdrive.checkpoint.serialization import write_json


def check_target(final: Path) -> None:
    """Refuse to replace a directory that holds something other than a checkpoint."""
    if final.exists() and not final.is_dir():
        raise CheckpointError(
            f"save_state: {final} exists and is not a directory\n  fix: choose another path"
        )
    if final.is_dir() and not is_complete(final) and any(final.iterdir()):
        raise CheckpointError(
            f"save_state: {final} already holds files that are not an overdrive checkpoint; "
            "saving would replace them\n  fix: save into a new or empty directory"
        )


def prepare_temp(final: Path) -> Path:
    """A fresh, empty temp dir beside ``final`` (a stale one from a killed save is removed)."""
    check_target(final)
    temp = temp_dir_for(final)
    if temp.exists():
        shutil.rmtree(temp)
    temp.mkdir(parents=True)
    return temp


def _fsync_tree(root: Path) -> None:
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(dirpath))


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # some platforms cannot open directories
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def commit(temp: Path, final: Path, manifest: dict[str, Any]) -> Path:
    """Write the completion marker into ``temp`` and rename it to ``final`` (replacing an
    older checkpoint of the same name only after the new one is whole on disk)."""
    write_json(temp / MANIFEST, manifest)
    _fsync_tree(temp)
    old = old_dir_for(final)
    if old.exists():
        shutil.rmtree(old)
    if final.exists():
        final.rename(old)
    temp.rename(final)
    _fsync_dir(final.parent)
    if old.exists():
        shutil.rmtree(old)
    return final
