"""Hugging Face Accelerate's own unit tests, as its source distribution on PyPI ships them.

Its repository has no tag for the pinned version; the sdist of exactly that version does
carry ``tests/``, so that is the copy used (downloaded once into ``.conformance/``).
"""

from __future__ import annotations

import io
import os
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
    add_data_files(root)
    return root


# The data folders the sdist leaves out, taken from a clone or mirror of Hugging Face
# Accelerate's repository named by CONFORMANCE_DATA_REPO (a git directory), at the commit
# just after its 1.15.0 version bump (the one tests/examples/fetch.py uses).
DATA_FOLDERS = ("tests/test_configs", "tests/test_samples")
DATA_COMMIT = "16cb6eb80dd9aa8b4df1a63ef57863e455d53b83"


def add_data_files(root: Path) -> bool:
    """Put the test data folders under ``root`` from CONFORMANCE_DATA_REPO, if it is set."""
    repo = os.environ.get("CONFORMANCE_DATA_REPO")
    if not repo or (root / DATA_FOLDERS[0]).is_dir():
        return (root / DATA_FOLDERS[0]).is_dir()
    archive = subprocess.run(
        ["git", "--git-dir", repo, "archive", DATA_COMMIT, *DATA_FOLDERS],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(root, filter="data")
    return True
