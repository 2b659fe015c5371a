"""Fault: a rank leaves without a traceback; the report must blame it, not the peer it stranded."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.dist import run_launch

pytestmark = pytest.mark.distributed

SCRIPTS = Path(__file__).parent / "scripts"


def _status_rows(stderr: str) -> dict[int, str]:
    """``{rank: status}`` from the report's exit-status block."""
    lines = stderr.splitlines()
    start = lines.index("overdrive: exit status of every rank on this machine:")
    rows = {}
    for line in lines[start + 1 :]:
        if not line.startswith("overdrive:   rank "):
            break
        rank, status = line[len("overdrive:   rank ") :].split(": ", 1)
        rows[int(rank)] = status
    return rows


def test_a_rank_that_exits_without_a_traceback_is_the_one_blamed() -> None:
    done = run_launch(SCRIPTS / "launch_exit_silently.py", nprocs=2, timeout=120)
    assert done.returncode == 3, done.stderr  # the first failure's own exit code
    assert "UNREACHABLE" not in done.stdout
    report = [line for line in done.stderr.splitlines() if line.startswith("overdrive: rank ")]
    assert report and report[0].startswith("overdrive: rank 1 failed (exit code 3, pid "), report
    assert not any(line.startswith("overdrive: rank 0 failed") for line in report), report
    statuses = _status_rows(done.stderr)
    assert sorted(statuses) == [0, 1], done.stderr
    assert statuses[1].startswith("exit code 3"), statuses
    # rank 0 either raised when its peer vanished or was stopped: never the cause either way.
    assert "first to fail" not in statuses[0] and "first to fail" in statuses[1], statuses
