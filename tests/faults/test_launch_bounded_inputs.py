"""Fault: absurd inputs to `overdrive launch` are refused at once, with one message, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from overdrive.config import load_settings
from overdrive.errors import LaunchError
from overdrive.launch import plan as launch_plan
from tests.helpers.dist import REPO, clean_env

SCRIPT = Path(__file__).parent / "scripts" / "launch_many_lines.py"


def _launch(*argv: str) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "overdrive", "launch", *argv],
        env=clean_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done, time.monotonic() - start


def _refused(done: subprocess.CompletedProcess[str], seconds: float, first: str) -> None:
    assert done.returncode == 2, done.stderr
    assert seconds < 30  # no worker was started (a traceback-free refusal takes a second)
    lines = done.stderr.splitlines()
    assert lines[0].startswith(f"overdrive: error: {first}"), done.stderr
    assert [line for line in lines if line.startswith("overdrive:")] == lines[:1], done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_thousands_of_processes_on_a_small_machine_are_refused() -> None:
    cores = os.cpu_count() or 1
    done, seconds = _launch("--cpu", "--num_processes", "10000", str(SCRIPT), "1")
    _refused(done, seconds, "num_processes = 10000 (flag --num_processes)")
    assert f"{cores} CPU core" in done.stderr and "--oversubscribe" in done.stderr


def test_a_directory_or_a_device_as_the_script_says_what_it_is(tmp_path: Path) -> None:
    done, seconds = _launch("--cpu", str(tmp_path))
    _refused(done, seconds, f"script {str(tmp_path)!r} is a directory")
    done, seconds = _launch("--cpu", "/dev/zero")
    _refused(done, seconds, "script '/dev/zero' is not a regular file (a character device)")
    done, seconds = _launch("--cpu", str(tmp_path / "missing.py"))
    _refused(done, seconds, f"script {str(tmp_path / 'missing.py')!r} does not exist")


def _plan(tmp_path: Path, processes: int, cores: int, **kw: object):
    settings = load_settings(
        flags={"num_processes": processes, "use_cpu": True},
        environ={"XDG_CACHE_HOME": str(tmp_path)},
    )
    return launch_plan.build_plan(settings, "train.py", cpu_count=cores, environ={}, **kw)


def test_the_process_limit_leaves_test_runs_alone_and_can_be_forced(tmp_path: Path) -> None:
    assert launch_plan.process_limit(2) == 64 and launch_plan.process_limit(32) == 128
    plan = _plan(tmp_path, 4, cores=2)  # the suite's own runs: oversubscribed, warned, allowed
    assert plan.nproc_per_node == 4 and "4 processes on 2 CPU cores" in (plan.load_note or "")
    assert _plan(tmp_path, 2, cores=2).load_note is None
    with pytest.raises(LaunchError, match="far more than"):
        _plan(tmp_path, 65, cores=2)
    assert _plan(tmp_path, 65, cores=2, oversubscribe=True).nproc_per_node == 65
