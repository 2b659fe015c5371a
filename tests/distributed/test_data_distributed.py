"""Process state, collectives and sharded data on real CPU process groups (gloo).

One script (scripts/data_checks.py) runs every check on each process; these tests start it
with `overdrive launch` (2 and 3 processes), with torchrun, and with plain `python`.
"""

from __future__ import annotations

import json
import subprocess
from functools import cache

from tests.helpers.dist import SCRIPTS, assert_ok, run_launch, run_python, run_torchrun

SCRIPT = SCRIPTS / "data_checks.py"


def _order(result: subprocess.CompletedProcess[str]) -> list[list[int]]:
    lines = [line for line in result.stdout.splitlines() if line.startswith("ORDER ")]
    assert len(lines) == 1, result.stdout  # printed by the main process only
    return json.loads(lines[0][len("ORDER ") :])


@cache
def _launched(nprocs: int) -> subprocess.CompletedProcess[str]:
    return run_launch(SCRIPT, nprocs=nprocs)


def test_two_processes_under_overdrive_launch() -> None:
    result = _launched(2)
    assert_ok(result)
    assert "ALL CHECKS PASSED on 2 process(es)" in result.stdout


def test_three_processes_for_uneven_splits() -> None:
    result = _launched(3)
    assert_ok(result)
    assert "ALL CHECKS PASSED on 3 process(es)" in result.stdout


def test_torchrun_runs_the_same_script_and_shuffles_like_another_run() -> None:
    result = run_torchrun(SCRIPT)
    assert_ok(result)
    assert "ALL CHECKS PASSED on 2 process(es)" in result.stdout
    # set_seed(1234) + the seedable sampler: the same order in a separate run
    assert _order(result) == _order(_launched(2))


def test_plain_python_runs_the_same_script_as_one_process() -> None:
    result = run_python(SCRIPT)
    assert_ok(result)
    assert "ALL CHECKS PASSED on 1 process(es)" in result.stdout
