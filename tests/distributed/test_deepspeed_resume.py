"""Exact resume under DeepSpeed through overdrive's own checkpoint format.

Launches of scripts/ds_resume.py (see its docstring) share one directory: an uninterrupted
ZeRO-2 run saves mid-epoch; a new launch resumes and ends with the same parameters; the same
checkpoint resumes under ZeRO-3, and on one process; a crafted pickle is never executed.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from safetensors.torch import load_file

from tests.helpers.deepspeed import DS_ENV
from tests.helpers.dist import assert_ok, result_rows, run_launch

pytest.importorskip("deepspeed")
pytestmark = [pytest.mark.distributed, pytest.mark.deepspeed]

SCRIPT = "ds_resume.py"
FLAGS = ["--use_deepspeed", "--gradient_accumulation_steps", "2", "--gradient_clipping", "0.05"]


def _launch(out: Path, phase: str, stage: int, nprocs: int = 2) -> list[dict[str, Any]]:
    result: subprocess.CompletedProcess[str] = run_launch(
        SCRIPT,
        env=DS_ENV,
        nprocs=nprocs,
        launch_args=[*FLAGS, "--zero_stage", str(stage)],
        args=["--out", str(out), "--phase", phase],
    )
    assert_ok(result)
    rows = result_rows(result.stdout)
    assert len(rows) == nprocs
    return rows


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ds_resume")
    rows = _launch(out, "full", stage=2)
    assert all(row["inside_refused"] for row in rows)  # a save inside a window is refused
    return out


def _params(path: Path) -> dict[str, Any]:
    return load_file(str(path))


def test_resume_in_a_new_launch_ends_with_the_same_parameters(full: Path) -> None:
    rows = _launch(full, "resume", stage=2)
    assert all(row["refused"] and not row["pickle_ran"] for row in rows)
    want, got = _params(full / "full.safetensors"), _params(full / "resume.safetensors")
    assert want.keys() == got.keys()
    assert all((want[k] == got[k]).all() for k in want), "ZeRO-2 resume is not exact"


def test_a_zero2_checkpoint_resumes_under_zero3(full: Path, tmp_path: Path) -> None:
    out = tmp_path / "z3"
    out.mkdir()
    for name in ("mid", "full.safetensors"):
        (out / name).symlink_to(full / name)
    _launch(out, "resume", stage=3)
    want, got = _params(full / "full.safetensors"), _params(out / "resume.safetensors")
    # Another stage sums partitions in another order: equal to float32 rounding.
    assert all((want[k] - got[k]).abs().max() < 1e-6 for k in want)


def test_one_process_resumes_a_checkpoint_two_processes_saved(full: Path) -> None:
    (row,) = _launch(full, "one", stage=3, nprocs=1)
    assert row["model_equal"] and row["masters_equal"] and row["state_equal"], row
    assert row["steps"] == [3.0]  # three optimizer steps in epoch 0 (windows 2, 2, 1)
    # StepLR(step_size=2) after 3 optimizer steps of 2 processes: 6 advances (once per
    # process per step, the described system's default), restored as saved
    assert row["lr"] == 1e-2 * 0.5**3
