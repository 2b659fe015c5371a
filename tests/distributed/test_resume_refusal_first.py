"""A 2-process mid-epoch checkpoint resumed on 1 process (issue 41): the refusal (global
batch 16 vs 8) comes first and alone, before any part is loaded or any note is said."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.dist import REPO, SCRIPTS, assert_ok, clean_env, run_launch

pytestmark = pytest.mark.distributed


def test_a_position_this_run_cannot_continue_is_refused_before_anything_loads(
    tmp_path: Path,
) -> None:
    checkpoint = tmp_path / "ckpt"
    assert_ok(run_launch("resume_other_world.py", nprocs=2, args=["save", str(checkpoint)]))
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / "resume_other_world.py"), "load", str(checkpoint)],
        env=clean_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert_ok(done)
    assert (
        "REFUSED ConfigError: the checkpoint stopped after 2 batches of 16 samples (2 "
        "processes) but this run's global batch is 8 samples (1 processes)" in done.stdout
    ), done.stdout
    assert "UNCHANGED True" in done.stdout  # nothing was loaded into the model
    assert "reshard" not in done.stderr and "resumed by 1" not in done.stderr, done.stderr
