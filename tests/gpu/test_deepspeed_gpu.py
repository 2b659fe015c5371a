"""DeepSpeed ZeRO-2 and ZeRO-3 on CUDA GPUs (one process per GPU, up to 2): the same checks
as tests/distributed/test_deepspeed.py. Skipped without a GPU or without deepspeed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from tests.helpers.dist import REPO, SCRIPTS, assert_ok, clean_env, result_rows

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.deepspeed,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


@pytest.mark.parametrize("stage", [2, 3])
def test_zero_stage_on_gpus_trains_like_one_process(tmp_path: Path, stage: int) -> None:
    pytest.importorskip("deepspeed")
    nprocs = min(2, torch.cuda.device_count())
    section = {"zero_stage": stage, "gradient_accumulation_steps": 2, "gradient_clipping": 0.05}
    config = tmp_path / "cfg.yaml"
    config.write_text(
        yaml.safe_dump({"distributed_type": "DEEPSPEED", "deepspeed_config": section})
    )
    env = clean_env()
    env.pop("CUDA_VISIBLE_DEVICES", None)  # clean_env hides the GPUs
    cmd = [sys.executable, "-m", "overdrive", "launch", "--num_processes", str(nprocs),
           "--config_file", str(config), "--no_rank_prefix", str(SCRIPTS / "ds_checks.py"),
           "--out", str(tmp_path / "run")]  # fmt: skip
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert_ok(result)
    (row,) = result_rows(result.stdout)
    assert row["stage"] == stage and row["steps"] == 6 and row["lr"] == row["ref_lr"]
    assert row["max_diff"] < 1e-5 and row["saved_diff"] == 0.0 and row["norm_diff"] < 2e-5
