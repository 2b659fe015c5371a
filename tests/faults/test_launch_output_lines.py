"""Fault: several ranks print at once into a pipe; every line must arrive whole, once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers.dist import run_launch

pytestmark = pytest.mark.distributed

SCRIPTS = Path(__file__).parent / "scripts"
RANKS, LINES = 3, 300
WORDS = " ".join(f"w{k}" for k in range(12))
LINE = re.compile(rf"^(\[rank (\d+)\] )?rank=(\d+) line=(\d+) {WORDS} end$")


def _parse(text: str, *, prefixed: bool) -> list[tuple[int, int]]:
    """(rank, line number) of every line; fails on any line that is not whole or mislabelled."""
    found = []
    for line in text.splitlines():
        if line.startswith("overdrive"):  # the launcher's own banner and notes
            continue
        match = LINE.match(line)
        assert match, f"broken line: {line!r}"
        assert (match.group(1) is not None) == prefixed, line
        if prefixed:
            assert match.group(2) == match.group(3), line  # the prefix names the printing rank
        found.append((int(match.group(3)), int(match.group(4))))
    return found


def _check_all_lines(stdout: str, stderr: str, *, prefixed: bool) -> None:
    out = _parse(stdout, prefixed=prefixed)
    err = _parse(stderr, prefixed=prefixed)
    assert all(i % 3 != 0 for _, i in out) and all(i % 3 == 0 for _, i in err)
    both = sorted(out + err)
    assert both == [(r, i) for r in range(RANKS) for i in range(LINES)]


@pytest.mark.parametrize("prefixed", [True, False], ids=["rank-prefix", "no-prefix"])
def test_unbuffered_ranks_printing_at_once_give_whole_lines(prefixed: bool) -> None:
    done = run_launch(
        SCRIPTS / "launch_many_lines.py",
        nprocs=RANKS,
        args=[str(LINES)],
        env={"PYTHONUNBUFFERED": "1"},
        timeout=120,
        rank_prefix=prefixed,  # the default for several processes; else --no_rank_prefix
    )
    assert done.returncode == 0, done.stderr[-3000:]
    _check_all_lines(done.stdout, done.stderr, prefixed=prefixed)


def test_tee_writes_one_whole_log_per_rank(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    done = run_launch(
        SCRIPTS / "launch_many_lines.py",
        nprocs=RANKS,
        args=[str(LINES)],
        launch_args=["--log_dir", str(logs)],
        env={"PYTHONUNBUFFERED": "1"},
        timeout=120,
        rank_prefix=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    _check_all_lines(done.stdout, done.stderr, prefixed=True)  # the console still gets them
    for rank in range(RANKS):
        text = (logs / f"rank_{rank}.log").read_text()
        assert sorted(_parse(text, prefixed=False)) == [(rank, i) for i in range(LINES)]
