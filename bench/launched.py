"""Shared by the benchmarks: run a worker under ``overdrive launch`` and read its result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any


def launch_result(nprocs: int, launch_flags: Sequence[str], worker: Sequence[str]) -> Any:
    """``overdrive launch --cpu`` of ``worker`` (script and arguments) on ``nprocs`` processes;
    the JSON of its last ``RESULT`` line. Exits with the output when the run fails."""
    cmd = [sys.executable, "-m", "overdrive", "launch", "--cpu", "-q", "--no_rank_prefix"]
    cmd += ["--num_processes", str(nprocs), *launch_flags, *worker]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "OVERDRIVE_"))}
    env.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    if done.returncode or not lines:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}")
    return json.loads(lines[-1][len("RESULT ") :])
