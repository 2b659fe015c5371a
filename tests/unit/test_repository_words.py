"""The repository speaks only of the project: no citations of documents a reader does not
have (numbered specification files), no words about how the work was organised or how
machines were obtained. Facts about Hugging Face Accelerate cite its documentation by page
and section. Random seeds (``set_seed``, ``seed=0``, ``SeedableRandomSampler``) are fine."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Each pattern is matched case-insensitively against one line at a time.
WORDS = [
    r"seeds?[ _-]?0\d\d",  # "seed 000", "Seed 001's", "seed001_loop.py", "test_seed_000"
    r"\b00[0-3]_[0-9a-f]{16}",  # the numbered specification files' names
    r"\bthe seeds\b",  # the specification documents as a whole
    r"\bseeds'",  # "the seeds' examples"
    r"\bseed's\b",  # "the seed's full example"
    r"\bthe seed (says|writes|documents|example|spells)",
    r"\bseed (documents?|files?|examples?|spellings?|tables?|FSDP)\b",
    r"(?<!scope=[\"'])\bsessions?\b",  # pytest's scope="session" is pytest's word
    r"\blent\b",
    r"\bnot drawn\b",
    r"\bthis task\b",
    r"\bdevice tool\b",
    r"\bdevice `status`",
    r"described[ _]systems?",  # also in test names
]
PATTERN = re.compile("|".join(f"(?:{word})" for word in WORDS), re.IGNORECASE)
# Words that are only out of place in the README, where a first-time reader starts.
README_PATTERN = re.compile(r"\bfaces:", re.IGNORECASE)
SKIP_SUFFIXES = {".png", ".jpg", ".gz", ".whl", ".pt", ".bin", ".safetensors", ".pyc"}


def _tracked_files() -> list[Path]:
    """Files git tracks (untracked ones that are not ignored too); every file when git
    is absent or this is not a checkout."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        found = []
        for folder, dirs, files in os.walk(ROOT):
            dirs[:] = [d for d in dirs if not d.startswith(".") or d == ".ci"]
            found += [Path(folder, name) for name in files]
        return found
    return [ROOT / name for name in out.decode().split("\0") if name]


def _offending_lines() -> list[str]:
    me = Path(__file__).resolve()
    hits = []
    for path in _tracked_files():
        if path.resolve() == me or path.suffix in SKIP_SUFFIXES or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        relative = path.relative_to(ROOT).as_posix()
        readme = relative == "README.md"
        lines = text.splitlines()
        for number, line in enumerate(lines, 1):
            # A phrase wrapped onto the next line is found too (comment markers dropped).
            nxt = lines[number].strip().lstrip("#*/ ") if number < len(lines) else ""
            if PATTERN.search(line) or (readme and README_PATTERN.search(line)):
                hits.append(f"{relative}:{number}: {line.strip()[:120]}")
            elif PATTERN.search(f"{line.rstrip()} {nxt}") and not PATTERN.search(nxt):
                hits.append(f"{relative}:{number}-{number + 1}: {line.strip()[:120]}")
    return hits


def test_no_file_speaks_of_specification_numbers_sessions_or_lent_machines() -> None:
    hits = _offending_lines()
    assert not hits, "words from outside the project:\n" + "\n".join(hits)


def test_the_pattern_leaves_random_seeds_alone() -> None:
    for line in [
        "set_seed(42)",
        "Accelerator(seed=0)",
        "use_seedable_sampler: true",
        "SeedableRandomSampler(range(3), seed=1)",
        "@pytest.fixture(scope='session')",
        '@pytest.fixture(scope="session")',
        "with the same seed and batches",
        "every process draws one seed from torch's RNG",
        "the order is drawn again from the saved generator",
    ]:
        assert not PATTERN.search(line), line
    for line in [
        "as seed 000 writes it",
        "Seed 001's loop",
        "seed002_fsdp2.yaml",
        "def test_seed_000_defaults",
        "a lent GPU",
        "test_what_the_described_system_passes",
    ]:
        assert PATTERN.search(line), line
