"""The launcher plans a one-machine launch without importing torch, whatever the backend."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.dist import REPO, clean_env

PLAN_AND_REPORT = """
import sys
from overdrive.config import load_settings
from overdrive.launch import direct
from overdrive.preflight.launch import plan_launch
flags = dict(use_cpu=True, num_processes=2, **{flags})
plan = plan_launch(load_settings(flags=flags), "train.py", [])
print(direct.applies(plan), "torch" in sys.modules)
"""


@pytest.mark.parametrize(
    "flags",
    [
        {},
        {"mixed_precision": "fp16"},
        {"distributed_type": "FSDP", "fsdp_config.fsdp_version": 2, "mixed_precision": "fp16"},
        {"distributed_type": "FSDP", "fsdp_config.fsdp_state_dict_type": "SHARDED_STATE_DICT"},
        {
            "distributed_type": "DEEPSPEED",
            "deepspeed_config.zero_stage": 3,
            "mixed_precision": "bf16",
        },
    ],
    ids=["ddp", "fp16", "fsdp2-fp16", "fsdp1-sharded", "zero3-bf16"],
)
def test_planning_a_launch_imports_no_torch(flags: dict) -> None:
    code = PLAN_AND_REPORT.replace("{flags}", repr(flags))
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=clean_env({"DS_ACCELERATOR": "cpu"}),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False"]  # runs without the agent, torch never loaded


def test_the_simulating_launcher_imports_no_torch() -> None:
    """``overdrive launch --simulate`` adds up the ranks' reports (the whole checkpoint
    included) in the launcher; only the simulated ranks' own processes load torch."""
    code = "import sys, overdrive.simulate.launch; print('torch' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], env=clean_env(), cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False"]


COUNT_GPUS = """
import sys
from overdrive.config import load_settings
from overdrive.launch import cluster
cluster.GPU_DRIVER_PATHS = ({paths},)
print(cluster.gpu_count(load_settings(flags=dict(num_processes=2))), "torch" in sys.modules)
"""


@pytest.mark.parametrize("driver", [False, True], ids=["no-driver", "driver"])
def test_a_launch_without_cpu_imports_torch_only_where_a_gpu_driver_is(
    driver: bool, tmp_path: Path
) -> None:
    """Without ``--cpu`` the launcher counts GPUs. With no driver's device file it answers 0
    without importing torch; where one exists, torch counts (0 on this machine)."""
    device = tmp_path / "nvidiactl"
    if driver:
        device.touch()
    code = COUNT_GPUS.replace("{paths}", repr(str(device)))
    env = clean_env()
    del env["CUDA_VISIBLE_DEVICES"]  # an empty value says "no GPU" before any probe
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", str(driver)]
