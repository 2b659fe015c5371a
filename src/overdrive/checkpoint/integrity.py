"""Checksums of checkpoint files: recorded at save time, verified before anything is loaded.

The manifest lists every file a checkpoint holds (except itself) by its path relative to
the checkpoint directory, with its size and CRC-32. A flipped bit, a truncated or a
replaced file is then an error naming the file, instead of a tensor that loads with other
numbers in it. CRC-32 (zlib) detects damage, not tampering: whoever can rewrite a file can
rewrite the manifest too. It was chosen for speed (bench/checkpoint_verify): verifying reads
each file once at 3-4 GB/s, which also brings it into the page cache for the load after it.

``record`` and ``verify`` know nothing about what the files hold, so any layout (per-rank
files, shards) is covered by listing its files.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from overdrive.checkpoint.errors import CheckpointError
from overdrive.checkpoint.layout import MANIFEST

ALGORITHM = "crc32"
_CHUNK = 8 << 20

FileRecord = dict[str, Any]
"""``{"size": bytes, "crc32": "8 hex digits"}``."""


def checksum(path: Path) -> FileRecord:
    """Size and CRC-32 of one file, read in chunks (zlib releases the GIL while hashing)."""
    crc, size = 0, 0
    buffer = bytearray(_CHUNK)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buffer):
            crc = zlib.crc32(view[:n], crc)
            size += n
    return {"size": size, ALGORITHM: f"{crc:08x}"}


def _all_files(directory: Path) -> list[str]:
    names = []
    for dirpath, _, filenames in os.walk(directory):
        for name in filenames:
            rel = (Path(dirpath) / name).relative_to(directory).as_posix()
            if rel != MANIFEST:
                names.append(rel)
    return sorted(names)


def record(directory: Path, files: Iterable[str] | None = None) -> dict[str, FileRecord]:
    """``{relative path: {"size", "crc32"}}`` for ``files`` (posix paths relative to
    ``directory``), by default every file under it except the manifest."""
    directory = Path(directory)
    names = _all_files(directory) if files is None else sorted(files)
    return {name: checksum(directory / name) for name in names}


def verify(
    directory: Path,
    files: Mapping[str, FileRecord],
    *,
    only: Callable[[str], bool] | None = None,
    labels: Mapping[str, str] | None = None,
    op: str = "load_state",
) -> None:
    """Check every recorded file (or those ``only`` selects) against its size and checksum;
    the first difference is a CheckpointError naming the file (with what ``labels`` says
    it holds) and the checkpoint."""
    directory = Path(directory)
    for name, expected in sorted(files.items()):
        if only is not None and not only(name):
            continue
        path = directory / name
        problem = None
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            problem = "is missing"
        except OSError as exc:
            problem = f"cannot be read ({exc})"
        else:
            if size != expected.get("size"):
                problem = f"has {size} bytes, but {expected.get('size')} were written"
            elif ALGORITHM not in expected:
                problem = f"has no {ALGORITHM} checksum in the manifest"
            else:
                try:
                    actual = checksum(path)[ALGORITHM]
                except OSError as exc:
                    problem = f"cannot be read ({exc})"
                else:
                    if actual != expected[ALGORITHM]:
                        problem = (
                            f"does not hold the bytes that were written (CRC-32 {actual}, "
                            f"recorded {expected[ALGORITHM]})"
                        )
        if problem:
            what = f"{labels[name]}: " if labels and name in labels else ""
            raise CheckpointError(
                f"{op}: checkpoint {directory} is damaged: {what}{path} {problem}\n"
                "  fix: load another checkpoint (an earlier one, or an intact copy of this "
                "one); nothing was restored from this one"
            )
