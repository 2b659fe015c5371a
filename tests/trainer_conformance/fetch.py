"""transformers' own Trainer tests (its repository's ``tests/trainer``), in an ignored cache.

The suite is not in transformers' distributions on PyPI, so it comes from the repository, at
the tag of the pinned version, by a sparse clone: only ``tests/trainer`` and
``tests/fixtures`` (the sample texts some tests read) are checked out, and ``tests/*.py``
beside them (the package's ``__init__`` and the shared mixins). They are copied into
``.trainer-conformance/src/tests/``; nothing of theirs is ever committed here.

    python -m tests.trainer_conformance.fetch [--force]

A host without GitHub (this project's CI reaches only package registries) seeds the same
folder by hand, file by file, and records where each file came from in
``.trainer-conformance/src/SOURCE.json``; see docs/trainer.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

VERSION = "5.24.0"  # the transformers the virtualenv installs
TAG = f"v{VERSION}"
REPOSITORY = os.environ.get(
    "TRAINER_CONFORMANCE_REPO", "https://github.com/huggingface/transformers.git"
)
SPARSE = ("tests/trainer", "tests/fixtures")


def source_folder(cache: Path) -> Path:
    """The folder that holds ``tests/trainer`` once fetched."""
    return cache / "src"


def is_fetched(cache: Path) -> bool:
    """Whether the cache already holds the suite (fetched or seeded)."""
    return (source_folder(cache) / "tests" / "trainer" / "trainer_test_utils.py").is_file()


def _git(*args: str, cwd: Path | None = None) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def fetch(cache: Path, force: bool = False) -> Path:
    """The folder holding ``tests/trainer`` of transformers at ``TAG`` (cloned if absent)."""
    target = source_folder(cache)
    if is_fetched(cache) and not force:
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        clone = Path(tmp) / "transformers"
        try:
            _clone(clone)
        except subprocess.CalledProcessError as exc:
            raise SystemExit(
                f"error: could not clone {REPOSITORY} at {TAG}: {exc.stderr.strip()[-500:]}\n"
                "  fix: run this where GitHub is reachable (or set TRAINER_CONFORMANCE_REPO to a "
                f"mirror), or seed {target} by hand as docs/trainer.md describes"
            ) from exc
        commit = _git("rev-parse", "HEAD", cwd=clone)
        if target.exists():
            shutil.rmtree(target)
        tests = target / "tests"
        tests.mkdir(parents=True)
        for path in (clone / "tests").glob("*.py"):  # the package and its shared mixins
            shutil.copy2(path, tests / path.name)
        for folder in SPARSE:
            shutil.copytree(clone / folder, target / folder)
    record = {"repository": REPOSITORY, "tag": TAG, "commit": commit, "how": "sparse git clone"}
    (target / "SOURCE.json").write_text(json.dumps(record, indent=1) + "\n")
    return target


def _clone(clone: Path) -> None:
    """A blob-less, depth-1 sparse clone of ``TAG`` with only ``SPARSE`` checked out."""
    _git(
        "clone",
        "--depth",
        "1",
        "--branch",
        TAG,
        "--filter=blob:none",
        "--sparse",
        REPOSITORY,
        str(clone),
    )
    _git("sparse-checkout", "set", *SPARSE, cwd=clone)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="fetch again over the cache")
    parser.add_argument("--cache", type=Path, default=Path(".trainer-conformance"))
    args = parser.parse_args(argv)
    print(fetch(args.cache, force=args.force))
    return 0


if __name__ == "__main__":
    sys.exit(main())
