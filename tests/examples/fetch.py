"""Hugging Face Accelerate's examples (its repository's ``examples/``), in an ignored cache.

They are not in its distributions on PyPI, so they come from its repository by a sparse,
blob-less clone at ``COMMIT`` into ``.examples/src`` (only ``examples/`` checked out);
nothing of theirs is ever committed here. ``EXAMPLES_REPO`` points the clone at a mirror
(a local bare repository works) where GitHub cannot be reached.

``COMMIT`` is the newest commit of its ``main`` that the mirror used here holds (version
``1.15.0.dev0``, after the ``v1.15.0dev`` bump); ``examples/`` last changed before that bump,
so the files are those of the 1.15.0 line. The release branch itself was not in the mirror.

    python -m tests.examples.fetch [--force]
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

COMMIT = "16cb6eb80dd9aa8b4df1a63ef57863e455d53b83"
REPOSITORY = os.environ.get("EXAMPLES_REPO", "https://github.com/huggingface/accelerate.git")
CACHE = Path(__file__).resolve().parents[2] / ".examples"


def source_folder(cache: Path = CACHE) -> Path:
    """The folder that holds ``examples/`` once fetched."""
    return cache / "src"


def _git(*args: str, cwd: Path | None = None) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def fetch(cache: Path = CACHE, force: bool = False) -> Path:
    """The folder holding ``examples/`` at ``COMMIT`` (cloned if absent)."""
    target = source_folder(cache)
    record = target / "SOURCE.json"
    if record.is_file() and not force and json.loads(record.read_text())["commit"] == COMMIT:
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        clone = Path(tmp) / "accelerate"
        try:
            _git("clone", "--filter=blob:none", "--no-checkout", REPOSITORY, str(clone))
            _git("sparse-checkout", "set", "examples", cwd=clone)
            _git("checkout", "--quiet", COMMIT, cwd=clone)
        except subprocess.CalledProcessError as exc:
            raise SystemExit(
                f"error: could not clone {REPOSITORY} at {COMMIT}: {exc.stderr.strip()[-500:]}\n"
                "  fix: run this where GitHub is reachable, or set EXAMPLES_REPO to a mirror"
            ) from exc
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        shutil.copytree(clone / "examples", target / "examples")
    info = {"repository": REPOSITORY, "commit": COMMIT, "how": "sparse git clone"}
    record.write_text(json.dumps(info, indent=1) + "\n")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="fetch again over the cache")
    args = parser.parse_args(argv)
    print(fetch(force=args.force))
    return 0


if __name__ == "__main__":
    sys.exit(main())
