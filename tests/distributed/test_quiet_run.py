"""A run that works under `overdrive launch` (issue 41): nothing from overdrive at the default
level, and progress bars drawn with ``\\r`` reach a file as their last state, one line each."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.helpers.dist import REPO, clean_env, launch_command

pytestmark = pytest.mark.distributed


def test_a_clean_run_prints_nothing_from_overdrive_and_bars_keep_their_last_state(
    tmp_path: Path,
) -> None:
    out_file, err_file, logs = tmp_path / "out.txt", tmp_path / "err.txt", tmp_path / "logs"
    command = launch_command(
        "quiet_run.py", nprocs=2, rank_prefix=True, launch_args=["--log_dir", str(logs)]
    )
    with out_file.open("wb") as out, err_file.open("wb") as err:
        done = subprocess.run(
            command, env=clean_env(), cwd=REPO, stdout=out, stderr=err, timeout=180
        )
    stdout, stderr = out_file.read_text(), err_file.read_text()
    assert done.returncode == 0, stderr[-3000:]
    assert "overdrive" not in stderr, stderr  # no banner, settings, scheduler note, port note
    assert "\r" not in stdout and "\r" not in stderr
    for rank in (0, 1):
        own = [line for line in stdout.splitlines() if line.startswith(f"[rank {rank}] ")]
        assert own == [
            f"[rank {rank}] training 200/200 " + "#" * 20,
            f"[rank {rank}] done",
            f"[rank {rank}] tail 10/10",  # the stream ended on a redraw: its last state stays
        ]
        assert f"[rank {rank}] saving 50/50" in stderr.splitlines()
        log = (logs / f"rank_{rank}.log").read_text()
        assert "\r" not in log and "training 200/200" in log and "training 199/200" not in log
    assert len(stdout) < 300  # 200 redraws of a 40-character bar were 9 KB on one line
