"""The runner's time limit counts only the time a test file's process is running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.trainer_conformance import run

STOPS_ITSELF = "import os, signal; os.kill(os.getpid(), signal.SIGSTOP)"


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads process states from /proc")
def test_a_stopped_process_reads_as_stopped() -> None:
    proc = subprocess.Popen([sys.executable, "-c", STOPS_ITSELF])
    try:
        os.waitpid(proc.pid, os.WUNTRACED)  # returns once it has stopped
        assert run._stopped(proc.pid)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.wait()
    assert not run._stopped(os.getpid())


def test_a_running_process_past_its_limit_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run, "POLL_S", 0.05)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert run.wait_running(proc, limit=0.1) is False
    finally:
        proc.kill()
        proc.wait()
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    assert run.wait_running(done, limit=60) is True
