"""One checkpoint, another layout: a tiny Llama's save_state under pipeline or tensor
parallelism resumes under DDP and in one plain process (no launcher) to the uninterrupted
run's losses and weights (``pp_ckpt.py``; FSDP <-> DDP and one process: test_fsdp_checkpoint).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.distributed.test_pipeline_parallel import (
    CKPT_SCRIPT,
    _assert_continues,
    _assert_same_weights,
    _ckpt,
)
from tests.helpers.dist import SCRIPTS, assert_ok, result_rows, run_launch, run_python

pytest.importorskip("transformers")


def _ddp(directory: Path, *args: str) -> dict:
    """``pp_ckpt.py`` under plain DDP on two processes (a global batch of 4: 2 each)."""
    result = run_launch(
        CKPT_SCRIPT, nprocs=2, args=["--dir", str(directory), "--batch", "2", *args], timeout=420
    )
    assert_ok(result)
    (row,) = result_rows(result.stdout)
    assert row["strategy"] == "ddp"
    return row


def _plain(directory: Path, *args: str) -> tuple[dict, str]:
    """``pp_ckpt.py`` in one plain ``python`` process (no launcher, no process group)."""
    result = run_python(SCRIPTS / CKPT_SCRIPT, "--dir", str(directory), *args, timeout=420)
    assert_ok(result)
    (row,) = result_rows(result.stdout)
    assert row["strategy"] == "single"
    return row, result.stderr


@pytest.mark.distributed
def test_pp2_checkpoint_resumes_in_one_plain_process_and_under_ddp(tmp_path: Path) -> None:
    whole = _ckpt(tmp_path, 2, "--tag", "pp_final", "--save", "at5", "--save_at", "5")
    assert whole["strategy"] == "pipeline_parallel"
    resume = ("--resume", "at5", "--start", "5")
    plain, stderr = _plain(tmp_path, "--tag", "plain", *resume)
    assert "saved by 2 process(es) and is resumed by 1" in stderr
    _assert_continues(plain, whole, 5)
    _assert_continues(_ddp(tmp_path, "--tag", "ddp", *resume), whole, 5)
    _assert_same_weights(tmp_path, "plain", "ddp")


@pytest.mark.distributed
def test_tp2_checkpoint_resumes_under_ddp_and_a_ddp_one_in_one_plain_process(
    tmp_path: Path,
) -> None:
    """TP=2 -> DDP (2) -> one plain process: each continues to the uninterrupted losses; the
    last one's weights are the uninterrupted TP run's."""
    whole = _ckpt(tmp_path, 2, "--tp", "2", "--tag", "tp_final", "--save", "tp4", "--save_at", "4")
    assert whole["strategy"] == "tensor_parallel"
    ddp = _ddp(
        tmp_path,
        "--tag",
        "ddp",
        "--resume",
        "tp4",
        "--start",
        "4",
        *("--save", "ddp7", "--save_at", "7"),
    )
    _assert_continues(ddp, whole, 4)
    plain, _ = _plain(tmp_path, "--tag", "plain", "--resume", "ddp7", "--start", "7")
    _assert_continues(plain, whole, 7)
    _assert_same_weights(tmp_path, "ddp", "plain", final="tp_final")
