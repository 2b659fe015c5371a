"""overdrive's exact resume on two processes sees the uninterrupted run's batches, and a skip
by hand after it is refused (scripts/manual_resume.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.dist import free_port, run_launch

pytestmark = [pytest.mark.distributed]


def test_an_exact_resume_matches_the_uninterrupted_run_and_refuses_a_second_skip(
    tmp_path: Path,
) -> None:
    result = run_launch(
        "manual_resume.py",
        args=["--out", str(tmp_path)],
        launch_args=["--main_process_port", str(free_port())],
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for rank in (0, 1):
        seen = json.loads((tmp_path / f"seen-{rank}.json").read_text())
        assert len(seen["full"]) == 12
        assert seen["by_hand"] == "exact_resume"
        assert seen["auto"] == seen["full"][6:]
