"""Where this host's copy of the suite came from, file by file (it reaches no GitHub).

The files were read from a stored index of public GitHub repositories and written, unchanged,
into ``.trainer-conformance/src/tests/trainer/`` (ignored, never committed). The index keeps
several versions of each file without dates, and names the commit of only some of them; the
version used is the one closest to the v5.24.0 release that could be told apart, judged by
the names the installed transformers 5.24.0 has (see docs/trainer.md). ``fetch.py`` replaces
all of this with the tag itself wherever GitHub is reachable.
"""

from __future__ import annotations

import json
from pathlib import Path

# file under tests/trainer -> (the commit the index names for that version, or the index's
# id for a version it names no commit for; its length in characters, as checked on disk)
FILES: dict[str, tuple[str, int]] = {
    "trainer_test_utils.py": ("commit fef6f3591b8998bd9ddd80b793b25e0c861ca3c7", 22482),
    "test_trainer.py": ("index id 6551267792 (the index names no commit)", 53244),
    "test_trainer_accelerator.py": ("commit 0d7e95d96b4e187c651e2b2406ed98ed40d74963", 11698),
    "test_trainer_checkpointing.py": ("commit abee4b14abf32637fe72990d0c409eaba189b31a", 91272),
    "test_trainer_data.py": ("commit 003432ac431659ea2564483634f35e4a2ee4c391", 37608),
    "test_trainer_evaluation.py": ("commit d7f1740350ba292a268a0f4531dff14aca025403", 22227),
    "test_training_args.py": ("commit 86bc798c82d7f0d0558edcf64d43da957d19ad30", 13956),
    "test_loss_reduction.py": ("commit 0b28e7f48825b3d9c293352cbb3d585c30492b1d", 3948),
}


def write_record(source: Path) -> Path:
    """``source/SOURCE.json``: how the seeded cache was made, and from which versions."""
    record = {
        "how": "seeded by hand from a stored index of GitHub files (no GitHub on this host)",
        "repository": "huggingface/transformers",
        "files": {name: version for name, (version, _) in FILES.items()},
    }
    path = source / "SOURCE.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def check(source: Path) -> list[str]:
    """The seeded files that are missing or not of the recorded length."""
    wrong = []
    for name, (_, length) in FILES.items():
        path = source / "tests" / "trainer" / name
        if not path.is_file() or len(path.read_text(encoding="utf-8")) != length:
            wrong.append(name)
    return wrong
