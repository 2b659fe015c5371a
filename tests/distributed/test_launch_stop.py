"""How a one-machine launch stops its workers: a second signal ends them at once, and a rank
that handles the stop signal and exits 0 still counts among the stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.dist import REPO, SCRIPTS, clean_env

pytestmark = pytest.mark.distributed

WORKER = str(SCRIPTS / "launch_stop_worker.py")


def _start(grace: float, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(SCRIPTS / "launch_stop_driver.py"), str(grace), WORKER, *args],
        env=clean_env(),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(*paths: Path, launcher: subprocess.Popen[str]) -> None:
    """Until every path exists (the workers reached that point), or the launcher ended."""
    deadline = time.monotonic() + 120
    while not all(p.exists() for p in paths):
        assert launcher.poll() is None, launcher.communicate()
        assert time.monotonic() < deadline, f"never appeared: {paths}"
        time.sleep(0.02)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_second_signal_during_the_stop_kills_the_workers_at_once(tmp_path: Path) -> None:
    # An hour of grace: only the second signal can end workers that ignore the first.
    launcher = _start(3600, "stubborn", str(tmp_path))
    try:
        _wait_for(tmp_path / "ready0", tmp_path / "ready1", launcher=launcher)
        launcher.send_signal(signal.SIGTERM)
        _wait_for(tmp_path / "term0", tmp_path / "term1", launcher=launcher)
        assert launcher.poll() is None  # the workers outlived the first signal
        launcher.send_signal(signal.SIGTERM)
        out, err = launcher.communicate(timeout=60)
    finally:
        launcher.kill()
    assert launcher.returncode == 128 + signal.SIGTERM, err
    assert "overdrive: stopped by SIGTERM; all workers on this machine ended." in err
    pids = [int((tmp_path / f"ready{r}").read_text()) for r in (0, 1)]
    assert all(_gone(pid) for pid in pids)
    assert "Traceback" not in err


def test_a_rank_that_exits_0_on_the_stop_signal_counts_as_stopped(tmp_path: Path) -> None:
    launcher = _start(5, "exit0", str(tmp_path))
    out, err = launcher.communicate(timeout=120)
    assert launcher.returncode == 1, err
    assert (tmp_path / "term0").read_text() == "SIGTERM\n"  # it did get the stop signal
    head = next(line for line in err.splitlines() if line.startswith("overdrive: rank 1 "))
    assert head.endswith("; the other 1 process(es) on this machine were stopped."), err
    assert "overdrive:   rank 0: exit code 0 (stopped by the launcher)" in err, err
