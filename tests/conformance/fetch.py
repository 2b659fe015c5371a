"""Hugging Face Accelerate's own unit tests, as its source distribution on PyPI ships them.

Its repository has no tag for the pinned version; the sdist of exactly that version does
carry ``tests/``, so that is the copy used (downloaded once into ``.conformance/``).
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

VERSION = "1.15.0"  # the Makefile's COMPAT_VERSION


def fetch(cache: Path) -> Path:
    """The folder holding ``tests/*.py`` of the pinned version (downloaded if absent)."""
    root = cache / f"accelerate-{VERSION}"
    if (root / "tests").is_dir():
        return root
    cache.mkdir(parents=True, exist_ok=True)
    archive = cache / f"accelerate-{VERSION}.tar.gz"
    if not archive.is_file():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"accelerate=={VERSION}",
                "-d",
                str(cache),
            ],
            check=True,
        )
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(f"{root.name}/tests/")]
        tar.extractall(cache, members=members, filter="data")
    return root
