"""A manual resume on two processes sees the uninterrupted run's batches (scripts/manual_resume.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.dist import free_port, run_launch

pytestmark = [pytest.mark.distributed]


def test_manual_and_automatic_resume_match_the_uninterrupted_run(tmp_path: Path) -> None:
    result = run_launch(
        "manual_resume.py",
        args=["--out", str(tmp_path)],
        launch_args=["--main_process_port", str(free_port())],
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for rank in (0, 1):
        seen = json.loads((tmp_path / f"seen-{rank}.json").read_text())
        assert len(seen["full"]) == 12
        assert seen["by_hand"] == seen["full"][6:]
        assert seen["auto"] == seen["full"][6:]
