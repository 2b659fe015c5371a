"""Exact resume under DeepSpeed through overdrive's own checkpoint format.

Launches of scripts/ds_resume.py (see its docstring) share one directory: an uninterrupted
ZeRO-2 run saves mid-epoch; a new launch resumes and ends with the same parameters; the same
checkpoint resumes under ZeRO-3, and on one process; a crafted pickle is never executed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from safetensors.torch import load_file

from tests.helpers.deepspeed import DS_ENV
from tests.helpers.dist import REPO, SCRIPTS, assert_ok, clean_env, result_rows, run_launch

pytest.importorskip("deepspeed")
pytestmark = [pytest.mark.distributed, pytest.mark.deepspeed]

SCRIPT = "ds_resume.py"
FLAGS = ["--use_deepspeed", "--gradient_accumulation_steps", "2", "--gradient_clipping", "0.05"]


def _launch(
    out: Path, phase: str, stage: int, nprocs: int = 2, extra: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    result: subprocess.CompletedProcess[str] = run_launch(
        SCRIPT,
        env=DS_ENV,
        nprocs=nprocs,
        launch_args=[*FLAGS, "--zero_stage", str(stage)],
        args=["--out", str(out), "--phase", phase, *extra],
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


@pytest.mark.extended
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
    # process per step, Hugging Face Accelerate's default), restored as saved
    assert row["lr"] == 1e-2 * 0.5**3


# --- DeepSpeed's checkpoints under other layouts -----------------------------------------
# The same global batches (8) on every layout: only the order of summation differs, as in the
# ZeRO-3 resume above. A continuation without AdamW's moments ends about 1e-2 away.


def test_a_zero2_checkpoint_resumes_under_fsdp2(full: Path, tmp_path: Path) -> None:
    out = tmp_path / "fsdp2"
    out.mkdir()
    (out / "mid").symlink_to(full / "mid")
    fsdp = ["--use_fsdp", "--fsdp_version", "2", "--fsdp_state_dict_type", "SHARDED_STATE_DICT"]
    result = run_launch(
        SCRIPT,
        nprocs=2,
        launch_args=[*fsdp, "--gradient_accumulation_steps", "2"],
        args=["--out", str(out), "--phase", "resume"],
    )
    assert_ok(result)
    assert all(row["refused"] and not row["pickle_ran"] for row in result_rows(result.stdout))
    want, got = _params(full / "full.safetensors"), _params(out / "resume.safetensors")
    assert want.keys() == got.keys()
    assert all((want[k] - got[k]).abs().max() < 1e-6 for k in want)


def _plain_resume(out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """The resume phase in one plain ``python`` process (accumulating 2 batches, as saved)."""
    shutil.rmtree(out / "crafted", ignore_errors=True)  # a previous resume's copy
    plain = subprocess.run(
        [sys.executable, str(SCRIPTS / SCRIPT), "--out", str(out), "--phase", "resume", *extra],
        env=clean_env({"ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "2"}),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert_ok(plain)
    (row,) = result_rows(plain.stdout)
    assert row["refused"] and not row["pickle_ran"]
    return plain


def test_a_zero3_checkpoint_resumes_in_one_plain_process(tmp_path: Path) -> None:
    """The scheduler advances once per optimizer step, on two processes and on one."""
    _launch(tmp_path, "full", stage=3, extra=("--once_per_step",))
    plain = _plain_resume(tmp_path, "--once_per_step")
    assert "saved by 2 process(es) and is resumed by 1" in plain.stderr
    assert "advances once per process" not in plain.stderr
    want, got = _params(tmp_path / "full.safetensors"), _params(tmp_path / "resume.safetensors")
    assert all((want[k] - got[k]).abs().max() < 1e-6 for k in want)


def test_one_process_is_told_its_schedule_runs_at_another_speed(full: Path, tmp_path: Path) -> None:
    """By default a scheduler advances once per process per step: resumed on one process, a
    two-process run's schedule runs half as fast, and load_state says so."""
    (tmp_path / "mid").symlink_to(full / "mid")
    plain = _plain_resume(tmp_path)
    assert "now advances 1 time(s) per step where 2 processes" in plain.stderr
    want, got = _params(full / "full.safetensors"), _params(tmp_path / "resume.safetensors")
    assert any((want[k] - got[k]).abs().max() > 1e-4 for k in want)  # a real difference


@pytest.mark.parametrize("stage", [pytest.param(1, marks=pytest.mark.extended), 2])
def test_save_state_with_two_parameter_groups_saves_the_second_groups_state(
    stage: int, tmp_path: Path
) -> None:
    """ZeRO 1/2 link parameters to their optimizer state after the first group's first step,
    so the second group's (the biases without weight decay) must be linked again to be read:
    save_state failed with "exp_avg not found in optimizer state fragment" (issue 20, the
    Hugging Face Accelerate's deepspeed_with_config_support example)."""
    result = run_launch(
        "ds_param_groups.py",
        env=DS_ENV,
        nprocs=1,
        launch_args=["--use_deepspeed", "--zero_stage", str(stage)],
        args=["--out", str(tmp_path / "ckpt")],
    )
    assert_ok(result)
    (row,) = result_rows(result.stdout)
    for bias in ("0.bias", "2.bias"):
        assert row["state"][f"state/{bias}/exp_avg"] > 0
        assert row["state"][f"state/{bias}/exp_avg_sq"] > 0
