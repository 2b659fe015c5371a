"""diffusers' training scripts (its repository's ``examples/``), in an ignored cache.

They are not in its distributions on PyPI (neither the wheel nor the sdist holds
``examples/``), so they come from its repository by a sparse, blob-less clone at ``REF``
into ``.ecosystem/src``; only the four scripts the ecosystem runs are kept, and nothing of
theirs is ever committed here. ``ECOSYSTEM_DIFFUSERS_REPO`` points the clone at a mirror (a
local repository works) and ``ECOSYSTEM_DIFFUSERS_REF`` at another tag, branch or commit
where the pinned tag is not there; ``SOURCE.json`` records what was used, and the docs
table says it. A cache at another ref is used as it is (with a note) until ``--force``.

TRL's scripts and its ``accelerate_configs`` need no fetch: the pinned wheel ships both
(``trl/scripts/*.py``; ``trl/accelerate_configs/*.yaml``, byte for byte the repository's
``examples/accelerate_configs/{multi_gpu,fsdp1,fsdp2}.yaml`` and ``deepspeed_zero{1,2,3}.yaml``).

    python -m tests.ecosystem.fetch [--force]
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

VERSION = "0.42.1"  # the pinned diffusers (the Makefile's ECOSYSTEM_DEPS)
REF = os.environ.get("ECOSYSTEM_DIFFUSERS_REF", f"v{VERSION}")
REPOSITORY = os.environ.get(
    "ECOSYSTEM_DIFFUSERS_REPO", "https://github.com/huggingface/diffusers.git"
)
CACHE = Path(__file__).resolve().parents[2] / ".ecosystem"
SCRIPTS = (
    "examples/unconditional_image_generation/train_unconditional.py",
    "examples/text_to_image/train_text_to_image.py",
    "examples/text_to_image/train_text_to_image_lora.py",
    "examples/dreambooth/train_dreambooth_lora.py",
)


_NOTED: list[str] = []  # the note on a cache at another ref is printed once


def source_folder(cache: Path = CACHE) -> Path:
    """The folder that holds ``examples/`` once fetched."""
    return cache / "src"


def _git(*args: str, cwd: Path | None = None) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def _clone_flags(repository: str) -> list[str]:
    """Blob-less over the network; a local repository is cloned whole (its objects are
    linked, and a local upload-pack may refuse the filter)."""
    return [] if Path(repository).exists() else ["--filter=blob:none"]


def recorded(cache: Path = CACHE) -> dict[str, str] | None:
    """What the cache holds (repository, ref, commit), or None when it holds nothing."""
    record = source_folder(cache) / "SOURCE.json"
    return json.loads(record.read_text()) if record.is_file() else None


def fetch(cache: Path = CACHE, force: bool = False, ref: str = REF) -> Path:
    """The folder holding the scripts at ``ref`` (cloned if absent or at another ref)."""
    target = source_folder(cache)
    have = recorded(cache)
    if have and not force and all((target / s).is_file() for s in SCRIPTS):
        if have["ref"] != ref and not _NOTED:
            _NOTED.append(have["ref"])
            print(
                f"note: diffusers' scripts in {target} are at {have['ref']}, not {ref}; "
                "`python -m tests.ecosystem.fetch --force` fetches the pinned tag",
                file=sys.stderr,
            )
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        clone = Path(tmp) / "diffusers"
        try:
            _git("clone", *_clone_flags(REPOSITORY), "--no-checkout", REPOSITORY, str(clone))
            _git(
                "sparse-checkout", "set", *sorted({str(Path(s).parent) for s in SCRIPTS}), cwd=clone
            )
            _git("checkout", "--quiet", ref, cwd=clone)
            commit = _git("rev-parse", "HEAD", cwd=clone)
        except subprocess.CalledProcessError as exc:
            raise SystemExit(
                f"error: could not clone {REPOSITORY} at {ref}: {exc.stderr.strip()[-500:]}\n"
                "  fix: run this where GitHub is reachable, or set ECOSYSTEM_DIFFUSERS_REPO to a "
                "mirror (and ECOSYSTEM_DIFFUSERS_REF to a ref it holds)"
            ) from exc
        if target.exists():
            shutil.rmtree(target)
        for script in SCRIPTS:
            (target / script).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(clone / script, target / script)
    info = {"repository": REPOSITORY, "ref": ref, "commit": commit, "how": "sparse git clone"}
    (target / "SOURCE.json").write_text(json.dumps(info, indent=1) + "\n")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="fetch again over the cache")
    args = parser.parse_args(argv)
    print(fetch(force=args.force))
    return 0


if __name__ == "__main__":
    sys.exit(main())
