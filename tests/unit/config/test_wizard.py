"""`overdrive config` driven through standard input: the written file resolves to the answers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from overdrive.config import load_settings


def _run_wizard(
    tmp_path: Path, answers: list[str], *flags: str
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """The wizard on this machine with no GPU visible."""
    target = tmp_path / "written.yaml"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    result = subprocess.run(
        [sys.executable, "-m", "overdrive", "config", "--config_file", str(target), *flags],
        input="\n".join(answers) + "\n",
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    return target, result


def _resolved(path: Path):
    return load_settings(config_file=path, environ={})


def test_single_cpu_flow(tmp_path: Path) -> None:
    answers = [
        "",  # compute environment: this machine
        "No distributed training",
        "n",  # torch.compile
        "no",  # mixed precision
    ]
    path, result = _run_wizard(tmp_path, answers)
    assert result.returncode == 0, result.stderr
    settings = _resolved(path)
    assert settings["distributed_type"] == "NO"
    assert settings["use_cpu"] is True
    assert settings["num_processes"] == 1
    assert settings["mixed_precision"] == "no"
    assert settings.source("use_cpu").detail.startswith(str(path))


def test_multi_gpu_fsdp_flow(tmp_path: Path) -> None:
    answers = [
        "1",  # compute environment (by number)
        "multi-GPU",
        "1",  # machines
        "n",  # debug checks
        "n",  # DeepSpeed
        "y",  # FSDP
        "2",  # FSDP version
        "y",  # reshard after forward
        "n",  # offload params
        "TRANSFORMER_BASED_WRAP",
        "LlamaDecoderLayer",
        "SHARDED_STATE_DICT",
        "y",  # cpu ram efficient loading
        "n",  # activation checkpointing
        "4",  # processes
        "0,1,2,3",  # gpu ids
        "n",  # torch.compile
        "bf16",
    ]
    path, result = _run_wizard(tmp_path, answers)
    assert result.returncode == 0, result.stderr
    settings = _resolved(path)
    assert settings["distributed_type"] == "FSDP"
    assert settings["num_processes"] == 4
    assert settings["gpu_ids"] == "0,1,2,3"
    assert settings["mixed_precision"] == "bf16"
    fsdp = settings.section("fsdp_config")
    assert fsdp["fsdp_version"] == 2
    assert fsdp["fsdp_reshard_after_forward"] is True
    assert fsdp["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    assert fsdp["fsdp_transformer_layer_cls_to_wrap"] == ["LlamaDecoderLayer"]
    assert fsdp["fsdp_state_dict_type"] == "SHARDED_STATE_DICT"
    assert fsdp["fsdp_cpu_ram_efficient_loading"] is True
    assert fsdp["fsdp_offload_params"] is False


def test_deepspeed_zero3_cpu_offload_flow(tmp_path: Path) -> None:
    answers = [
        "",  # compute environment
        "multi-GPU",
        "",  # machines: 1
        "",  # debug: no
        "yes",  # DeepSpeed
        "3",  # ZeRO stage
        "cpu",  # optimizer offload
        "cpu",  # parameter offload
        "y",  # zero3_init_flag
        "n",  # 16-bit save
        "2",  # gradient accumulation
        "1.0",  # clipping
        "8",  # processes
        "all",  # gpu ids
        "y",  # torch.compile
        "inductor",
        "n",  # customise compile
        "bf16",
    ]
    path, result = _run_wizard(tmp_path, answers)
    assert result.returncode == 0, result.stderr
    settings = _resolved(path)
    assert settings["distributed_type"] == "DEEPSPEED"
    assert settings["num_processes"] == 8
    ds = settings.section("deepspeed_config")
    assert ds["zero_stage"] == 3
    assert ds["offload_optimizer_device"] == "cpu"
    assert ds["offload_param_device"] == "cpu"
    assert ds["zero3_init_flag"] is True
    assert ds["gradient_clipping"] == 1.0
    assert settings["gradient_accumulation_steps"] == 2  # DeepSpeed's value becomes the global one
    assert settings["dynamo_config.dynamo_backend"] == "inductor"
    assert settings["mixed_precision"] == "bf16"


def test_multi_machine_flow(tmp_path: Path) -> None:
    answers = [
        "",
        "multi-CPU",
        "2",
        "1",
        "10.1.2.3",
        "29555",
        "c10d",
        "y",
        "n",  # debug checks (no GPU here: no DeepSpeed, FSDP or Megatron-LM questions)
        "4",
        "n",
        "no",
    ]
    path, result = _run_wizard(tmp_path, answers)
    assert result.returncode == 0, result.stderr
    settings = _resolved(path)
    assert (settings["num_machines"], settings["machine_rank"]) == (2, 1)
    assert settings["main_process_ip"] == "10.1.2.3"
    assert settings["main_process_port"] == 29555
    assert settings["rdzv_backend"] == "c10d"
    assert settings["distributed_type"] == "MULTI_CPU"
    assert settings["num_processes"] == 4


GPU_ONLY = ("DeepSpeed", "FSDP", "Megatron", "GPU(s)", "fp8")


def test_a_cpu_machine_is_not_asked_about_gpu_only_backends(tmp_path: Path) -> None:
    answers = [
        "",  # compute environment
        "multi-CPU",
        "",  # machines: 1
        "n",  # debug checks
        "2",  # processes
        "n",  # torch.compile
        "bf16",
    ]
    path, result = _run_wizard(tmp_path, answers)
    assert result.returncode == 0, result.stderr
    questions = result.stdout.split("Which type of machine", 1)[1]
    assert [word for word in GPU_ONLY if word in questions] == []
    assert "--gpu_questions" in result.stdout  # the user is told how to get them
    settings = _resolved(path)
    assert settings["distributed_type"] == "MULTI_CPU" and settings["use_cpu"] is True
    assert (settings["num_processes"], settings["mixed_precision"]) == (2, "bf16")


def test_gpu_questions_are_asked_on_a_cpu_machine_when_asked_for(tmp_path: Path) -> None:
    answers = ["", "multi-CPU", "", "n", "n", "y", "1", "FULL_SHARD", "n", "NO_WRAP"]
    answers += ["BACKWARD_PRE", "n", "y", "FULL_STATE_DICT", "n", "n", "2", "n", "no"]
    path, result = _run_wizard(tmp_path, answers, "--gpu_questions")
    assert result.returncode == 0, result.stderr
    assert "Do you want to use DeepSpeed?" in result.stdout
    assert "--gpu_questions" not in result.stdout
    settings = _resolved(path)
    assert settings["distributed_type"] == "FSDP"
    assert settings.section("fsdp_config")["fsdp_sharding_strategy"] == "FULL_SHARD"


def test_choosing_multi_gpu_on_a_cpu_machine_configures_another_machine(tmp_path: Path) -> None:
    answers = ["", "multi-GPU", "", "n", "n", "n", "n", "8", "all", "n", "fp8"]
    path, result = _run_wizard(tmp_path, answers)
    assert result.returncode == 0, result.stderr
    assert "Do you want to use DeepSpeed?" in result.stdout
    settings = _resolved(path)
    assert (settings["distributed_type"], settings["num_processes"]) == ("MULTI_GPU", 8)
    assert settings["mixed_precision"] == "fp8"


@pytest.mark.parametrize(
    ("answers", "expected"),
    [
        (["", "quantum computer"], "not an answer to 'Which type of machine"),
        (["", "multi-CPU"], "standard input ended"),
        (["", "multi-CPU", "two"], "whole number"),
    ],
)
def test_bad_answers_fail_cleanly(tmp_path: Path, answers: list[str], expected: str) -> None:
    path, result = _run_wizard(tmp_path, answers)
    assert result.returncode == 2
    assert expected in result.stderr
    assert "Traceback" not in result.stderr
    assert not path.exists()
