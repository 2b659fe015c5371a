"""Atomic checkpoint directories: write into a private hidden temp dir, then mark and rename.

A reader only ever sees a checkpoint directory that every rank finished: until the main
process renames the temp dir into place, the checkpoint has a hidden name that no lookup
matches, and the completion marker is written just before the rename.

Several jobs may save into one directory at once. Each save writes into its own temp dir
(a random token in its name), which the main process holds an exclusive ``flock`` on while
the save runs: a later save removes only temp dirs whose lock it can take, i.e. whose
writer has died (the kernel drops the lock of a killed process). An automatically named
checkpoint is claimed by the final rename itself, which never replaces an existing
checkpoint: if another job took the number first, the next free one is used.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import time
from pathlib import Path

from overdrive.checkpoint import layout
from overdrive.checkpoint.errors import CheckpointError
from overdrive.checkpoint.layout import MANIFEST, is_complete
from overdrive.checkpoint.records import Manifest
from overdrive.checkpoint.serialization import write_json, writing

try:
    import fcntl
except ImportError:  # not on POSIX: no locks, so other saves' temp dirs are never removed
    fcntl = None  # type: ignore[assignment]

_TAKEN = (errno.EEXIST, errno.ENOTEMPTY)
_STALE_NEW_S = 600  # a ".new" dir is locked within microseconds of its creation


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


def _lock(path: Path, *, wait: bool) -> int | None:
    """An fd holding an exclusive flock on directory ``path``; None if it is held elsewhere
    (or locks are not supported here)."""
    if fcntl is None:
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except OSError:
        os.close(fd)
        return None
    return fd


class Staging:
    """One save's temp dir, locked by this process until ``release`` (or ``remove``)."""

    def __init__(self, path: Path, fd: int | None) -> None:
        self.path = path
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def remove(self) -> None:
        """Delete the temp dir and whatever was written into it."""
        shutil.rmtree(self.path, ignore_errors=True)
        self.release()


def clear_stale(parent: Path, prefix: str) -> None:
    """Remove temp dirs starting with ``prefix`` left by saves that died (their lock is
    free), and leftovers of interrupted deletions. A live save's temp dir is kept."""
    if not parent.is_dir():
        return
    for entry in parent.iterdir():
        name = entry.name
        if not name.startswith(prefix) or not entry.is_dir():
            continue
        if name.endswith(".deleting"):
            shutil.rmtree(entry, ignore_errors=True)
            continue
        stale_new = name.endswith(".new") and time.time() - _mtime(entry) > _STALE_NEW_S
        if not (name.endswith(".partial") or stale_new):
            continue
        try:
            fd = _lock(entry, wait=False)
        except FileNotFoundError:  # removed meanwhile by another save
            continue
        if fd is None:
            continue  # a live save holds it (or it cannot be told): leave it
        try:
            shutil.rmtree(entry, ignore_errors=True)
        finally:
            os.close(fd)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return time.time()


def stage(final: Path, *, automatic: bool) -> Staging:
    """A fresh, empty, locked temp dir beside ``final`` (stale ones of dead saves removed)."""
    if not automatic:
        check_target(final)
    return stage_beside(final, ".checkpoint_" if automatic else f".{final.name}.")


def stage_beside(final: Path, stale: str, *, make_parent: bool = True) -> Staging:
    """A fresh, empty, locked ``.<name>.<token>.partial`` dir beside ``final``; the temp
    dirs starting with ``stale`` whose writer died are removed first."""
    parent = final.parent
    with writing(parent, "save_state"):
        if make_parent:
            parent.mkdir(parents=True, exist_ok=True)
        clear_stale(parent, stale)
        token = layout.new_token()
        # Created under a name no cleanup removes, locked, then given its .partial name:
        # a temp dir is never visible unlocked while its save is alive.
        fresh = parent / f".{final.name}.{token}.new"
        fresh.mkdir()
        fd = _lock(fresh, wait=True)
        temp = layout.temp_dir_for(final, token)
        fresh.rename(temp)
    return Staging(temp, fd)


def _fsync_tree(root: Path) -> None:
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            path = os.path.join(dirpath, name)
            with writing(Path(path), "save_state"):
                fd = os.open(path, os.O_RDONLY)
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


def _claim(temp: Path, final: Path, manifest: Manifest) -> Path:
    """Rename ``temp`` to ``final``, or to the next free number if another job's checkpoint
    took that name: a rename never replaces a non-empty directory."""
    for _ in range(1000):
        try:
            temp.rename(final)
            return final
        except OSError as exc:
            if exc.errno not in _TAKEN:
                raise
        index = layout.index_of(final)
        assert index is not None
        final = final.parent / layout.checkpoint_name(layout.next_index(final.parent, index + 1))
        manifest = {**manifest, "name": final.name}
        write_json(temp / MANIFEST, manifest, what="save_state")
    raise CheckpointError(f"save_state: found no free checkpoint number in {final.parent}")


def _swap(temp: Path, final: Path) -> Path:
    """Put ``temp`` in place of ``final``, moving the checkpoint there aside first and
    deleting it only once the new one is in place."""
    token = layout.new_token()
    for _ in range(100):
        if final.exists():
            with contextlib.suppress(FileNotFoundError):  # another save moved it first
                final.rename(layout.old_dir_for(final, token))
        try:
            temp.rename(final)
            break
        except OSError as exc:
            if exc.errno not in _TAKEN:  # else another save put its own there meanwhile
                raise
    else:
        raise CheckpointError(f"save_state: could not replace {final}: other saves keep at it")
    for old in layout.old_dirs_for(final):
        shutil.rmtree(old, ignore_errors=True)
    return final


def commit(staging: Staging, final: Path, manifest: Manifest, *, replace: bool) -> Path:
    """Write the completion marker into the temp dir and rename it into place; returns
    where it went. ``replace``: an existing checkpoint at ``final`` is replaced (explicit
    directories); otherwise ``final`` is an automatic name, never taken from another save."""
    temp = staging.path
    write_json(temp / MANIFEST, manifest, what="save_state")
    _fsync_tree(temp)
    with writing(final, "save_state"):
        final = _swap(temp, final) if replace else _claim(temp, final, manifest)
    _fsync_dir(final.parent)
    return final
