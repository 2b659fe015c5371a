"""`overdrive test`: the bundled sanity check runs through the launch path with the user's config."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.dist import REPO, assert_ok, clean_env

pytestmark = pytest.mark.distributed


def test_overdrive_test_uses_the_config_file_and_launch_flags(tmp_path: Path) -> None:
    config = tmp_path / "cfg.yaml"
    config.write_text(
        "distributed_type: MULTI_CPU\nuse_cpu: true\nnum_processes: 3\nmixed_precision: fp16\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "overdrive", "test", "--config-file", str(config),
         "--num_processes", "2", "--verbose"],
        env=clean_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )  # fmt: skip
    assert_ok(done)
    ok = [line for line in done.stdout.splitlines() if line.startswith("OK: ")]
    assert len(ok) == 1, done.stdout  # printed by rank 0 only
    assert ok[0].startswith(
        "OK: 2 process(es) on cpu, backend gloo, MULTI_CPU, mixed precision fp16"
    )
    assert done.stderr.rstrip().endswith("overdrive test: passed")
    assert f"file {config}" in done.stderr  # the banner names where the settings came from
