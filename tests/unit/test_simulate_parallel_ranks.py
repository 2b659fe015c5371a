"""Simulated ranks run at once, one per core: two ranks that can only finish together (each
opens one end of a named pipe, which blocks until the other end is open) both finish, their
lines relayed behind their ranks as the real launch relays them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from overdrive.simulate.launch import parallel_ranks

SCRIPT = """
import os, signal
signal.alarm(120)  # alone, the open below would wait for ever
pipe = os.environ["RENDEZVOUS"]
mode = os.O_WRONLY if os.environ["RANK"] == "0" else os.O_RDONLY
os.close(os.open(pipe, mode))
print("rank", os.environ["RANK"], "met the other")
"""


def test_as_many_ranks_at_once_as_cores() -> None:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert parallel_ranks(1) == 1
    assert parallel_ranks(10_000) == cores
    assert parallel_ranks(2) == min(2, cores or 1)


@pytest.mark.skipif(parallel_ranks(2) < 2, reason="one core: the ranks run one at a time")
def test_two_simulated_ranks_run_at_the_same_time(tmp_path: Path) -> None:
    pipe = tmp_path / "rendezvous"
    os.mkfifo(pipe)
    script = tmp_path / "meet.py"
    script.write_text(SCRIPT)
    report = tmp_path / "report.json"
    launch = [sys.executable, "-m", "overdrive.cli.main", "launch", "--simulate", "--cpu"]
    launch += ["--num_processes", "2", "--simulate_json", str(report), str(script)]
    env = {**os.environ, "RENDEZVOUS": str(pipe)}
    result = subprocess.run(launch, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    # relayed as the real launch relays its ranks: whole lines, each behind its rank
    assert "[rank 0] rank 0 met the other\n" in result.stdout
    assert "[rank 1] rank 1 met the other\n" in result.stdout
    ranks = json.loads(report.read_text())["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    # a script that took fewer optimizer steps than asked says so
    for rank in ranks:
        assert rank["finished"] == "script ended after 0 of the 2 optimizer step(s) asked"
