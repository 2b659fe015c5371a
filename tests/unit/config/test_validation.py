"""Each validation rule fails with one message naming the key, its source and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from overdrive.config import load_settings
from overdrive.errors import ConfigError

from .conftest import resolve_layers, write_yaml


def _error(tmp_path: Path, data: dict[str, Any] | None = None, **layers: Any) -> str:
    path = write_yaml(tmp_path / "cfg.yaml", data) if data is not None else None
    with pytest.raises(ConfigError) as info:
        resolve_layers(file=path, **layers)
    return str(info.value)


def test_unknown_key_suggests_the_right_one(tmp_path: Path) -> None:
    message = _error(tmp_path, {"num_machines": 1, "mixed_precison": "fp16"})
    assert "unknown setting `mixed_precison`" in message
    assert f"file {tmp_path / 'cfg.yaml'}:2" in message
    assert "did you mean `mixed_precision`?" in message


def test_unknown_key_inside_a_section(tmp_path: Path) -> None:
    message = _error(tmp_path, {"fsdp_config": {"fsdp_sharding_stratgy": "FULL_SHARD"}})
    assert "`fsdp_config.fsdp_sharding_stratgy`" in message
    assert "did you mean `fsdp_config.fsdp_sharding_strategy`?" in message


def test_unknown_key_from_code() -> None:
    with pytest.raises(ConfigError, match=r"did you mean `gradient_accumulation_steps`") as info:
        resolve_layers(code={"gradient_accumulation_step": 2})
    assert "code Accelerator(gradient_accumulation_step=...)" in str(info.value)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"mixed_precision": "fp12"}, "one of: no, fp16, bf16, fp8"),
        ({"num_processes": "four"}, "expected an integer"),
        ({"num_processes": 0}, "must be >= 1"),
        ({"use_cpu": "maybe"}, "expected a boolean"),
        ({"gpu_ids": "0,x"}, "GPU indices"),
        ({"main_process_port": 70000}, "must be <= 65535"),
        ({"deepspeed_config": {"zero_stage": 4}}, "must be <= 3"),
        ({"log_with": "neptune"}, "'neptune' is not one of"),
        ({"fsdp_config": {"fsdp_sharding_strategy": "HALF_SHARD"}}, "FULL_SHARD"),
        ({"deepspeed_config": {"gradient_clipping": "inf"}}, "finite number"),
    ],
)
def test_bad_values_name_the_allowed_ones(tmp_path: Path, data: dict, expected: str) -> None:
    message = _error(tmp_path, data)
    assert expected in message
    assert str(tmp_path / "cfg.yaml") in message
    assert "fix:" in message


def test_bad_env_value_names_the_variable() -> None:
    with pytest.raises(ConfigError) as info:
        resolve_layers(env={"ACCELERATE_NUM_PROCESSES": "two"})
    assert "env ACCELERATE_NUM_PROCESSES" in str(info.value)
    assert "change or unset the environment variable ACCELERATE_NUM_PROCESSES" in str(info.value)


def test_machine_rank_must_be_below_num_machines(tmp_path: Path) -> None:
    message = _error(
        tmp_path, {"num_machines": 2, "machine_rank": 2, "main_process_ip": "10.0.0.1"}
    )
    assert "`machine_rank` = 2" in message and "`num_machines` = 2" in message
    assert "from 0 to 1" in message


def test_several_machines_need_main_process_ip(tmp_path: Path) -> None:
    message = _error(tmp_path, {"num_machines": 2})
    assert "main_process_ip" in message and "cfg.yaml:1" in message


def test_param_offload_needs_zero_3(tmp_path: Path) -> None:
    message = _error(
        tmp_path, {"deepspeed_config": {"zero_stage": 2, "offload_param_device": "cpu"}}
    )
    assert "only works with ZeRO stage 3" in message
    assert "zero_stage: 3" in message


def test_two_backends_at_once_name_both_sources(tmp_path: Path) -> None:
    message = _error(tmp_path, {"distributed_type": "FSDP"}, env={"ACCELERATE_USE_DEEPSPEED": "1"})
    assert "two backends are enabled at once" in message
    assert "cfg.yaml:1" in message and "env ACCELERATE_USE_DEEPSPEED" in message


def test_backend_switch_sets_distributed_type() -> None:
    settings = resolve_layers(env={"ACCELERATE_USE_FSDP": "true"})
    assert settings["distributed_type"] == "FSDP"
    assert str(settings.source("distributed_type")) == "env ACCELERATE_USE_FSDP"


def test_gradient_accumulation_set_twice_must_agree(tmp_path: Path) -> None:
    data = {"deepspeed_config": {"gradient_accumulation_steps": 4}}
    message = _error(tmp_path, data, env={"ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "2"})
    assert "gradient accumulation is set twice and disagrees" in message
    assert "env ACCELERATE_GRADIENT_ACCUMULATION_STEPS" in message and "cfg.yaml:2" in message
    # Agreeing values, or only the DeepSpeed one, are fine; the latter becomes the global value.
    path = write_yaml(tmp_path / "ok.yaml", data)
    assert resolve_layers(file=path)["gradient_accumulation_steps"] == 4


def test_mixed_precision_and_deepspeed_section_must_agree(tmp_path: Path) -> None:
    data = {"mixed_precision": "fp16", "deepspeed_config": {"bf16": {"enabled": True}}}
    message = _error(tmp_path, data)
    assert "mixed precision is set twice and disagrees" in message


def test_fsdp2_strategy_and_reshard_must_agree(tmp_path: Path) -> None:
    data = {
        "fsdp_config": {
            "fsdp_version": 2,
            "fsdp_sharding_strategy": "FULL_SHARD",
            "fsdp_reshard_after_forward": False,
        }
    }
    assert "disagree under fsdp_version 2" in _error(tmp_path, data)


def test_use_cpu_rehearses_a_multi_gpu_file_on_cpu_processes(tmp_path: Path) -> None:
    path = write_yaml(tmp_path / "cfg.yaml", {"distributed_type": "MULTI_GPU", "num_processes": 2})
    settings = resolve_layers(file=path, code={"use_cpu": True})
    assert settings["distributed_type"] == "MULTI_CPU" and settings["num_processes"] == 2
    where = str(settings.source("distributed_type"))
    assert where.startswith(f"file {path}:1") and "rehearsed on CPU processes" in where
    assert "code Accelerator(use_cpu=...)" in where


def test_distributed_type_no_means_one_process(tmp_path: Path) -> None:
    # A file that says both (TRL ships one): one process, as Hugging Face Accelerate starts,
    # and the provenance says the count cannot take effect.
    path = write_yaml(tmp_path / "cfg.yaml", {"distributed_type": "NO", "num_processes": 8})
    settings = resolve_layers(file=path)
    assert settings["num_processes"] == 1
    assert "num_processes = 8" in str(settings.source("num_processes"))
    assert "cannot take effect" in str(settings.source("num_processes"))
    # Asked for on the command line over the file's NO: refused with the fix.
    message = _error(tmp_path, {"distributed_type": "NO"}, flags={"num_processes": 2})
    assert "means one process" in message


def test_gpu_ids_must_cover_the_processes(tmp_path: Path) -> None:
    message = _error(tmp_path, {"gpu_ids": "0,1", "num_processes": 4})
    assert "needs 4 GPUs per machine" in message and "lists 2" in message


def test_processes_must_split_evenly_over_machines(tmp_path: Path) -> None:
    data = {"num_machines": 2, "main_process_ip": "10.0.0.1", "num_processes": 3}
    assert "cannot be split evenly" in _error(tmp_path, data)


def test_alias_and_canonical_disagreeing_in_one_file(tmp_path: Path) -> None:
    data = {"fsdp_config": {"fsdp_offload_params": True, "fsdp_cpu_offload": False}}
    message = _error(tmp_path, data)
    assert "set twice with different values" in message and "keep one" in message


def test_named_config_file_that_does_not_exist_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(config_file=tmp_path / "missing.yaml", environ={})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mixed_precision: [unclosed\n", "cannot be parsed"),
        ("- a\n- b\n", "must hold a mapping"),
        ("fsdp_config: 3\n", "must be a mapping"),
        ('{"mixed_precision": ', "cannot be parsed"),
    ],
)
def test_malformed_files(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / ("cfg.json" if text.startswith("{") else "cfg.yaml")
    path.write_text(text)
    with pytest.raises(ConfigError, match=expected):
        load_settings(config_file=path, environ={})
