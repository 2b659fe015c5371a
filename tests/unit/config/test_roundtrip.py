"""Every setting round-trips from a config file to the resolved settings, with its line."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from overdrive.config import schema, sources
from overdrive.config.resolve import resolve

from .conftest import resolve_layers, write_yaml

# A full YAML config file as `accelerate config` writes one, as a user would keep it.
FULL_EXAMPLE = """\
compute_environment: LOCAL_MACHINE
distributed_type: MULTI_GPU
num_processes: 4
num_machines: 1
machine_rank: 0
main_process_ip: null
main_process_port: null
mixed_precision: fp16
gradient_accumulation_steps: 4
use_cpu: false
debug: false
downcast_bf16: 'no'
gpu_ids: all
rdzv_backend: static
fsdp_config:
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_backward_prefetch: BACKWARD_PRE
  fsdp_cpu_ram_efficient_loading: true
  fsdp_offload_params: false
  fsdp_sharding_strategy: FULL_SHARD
  fsdp_state_dict_type: SHARDED_STATE_DICT
  fsdp_sync_module_states: true
  fsdp_transformer_layer_cls_to_wrap: BertLayer
deepspeed_config:
  deepspeed_config_file: ds_config.json
  zero_stage: 2
  offload_optimizer_device: cpu
  offload_param_device: none
  gradient_accumulation_steps: 4
  gradient_clipping: 1.0
log_with: tensorboard
project_dir: ./outputs
logging_dir: ./outputs/logs
"""


def test_full_example_resolves_with_file_lines(tmp_path: Path) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text(FULL_EXAMPLE)
    settings = resolve_layers(file=path)
    expected = {
        "distributed_type": "MULTI_GPU",
        "num_processes": 4,
        "mixed_precision": "fp16",
        "gradient_accumulation_steps": 4,
        "downcast_bf16": False,
        "gpu_ids": "all",
        "fsdp_config.fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "fsdp_config.fsdp_state_dict_type": "SHARDED_STATE_DICT",
        "fsdp_config.fsdp_transformer_layer_cls_to_wrap": ["BertLayer"],
        "fsdp_config.fsdp_cpu_ram_efficient_loading": True,
        "deepspeed_config.zero_stage": 2,
        "deepspeed_config.offload_optimizer_device": "cpu",
        "deepspeed_config.gradient_clipping": 1.0,
        "deepspeed_config.deepspeed_config_file": "ds_config.json",
        "log_with": ["tensorboard"],
        "project_dir": "./outputs",
        "logging_dir": "./outputs/logs",
    }
    for key, value in expected.items():
        assert settings[key] == value, key
    lines = FULL_EXAMPLE.splitlines()
    assert (
        str(settings.source("mixed_precision"))
        == f"file {path}:{lines.index('mixed_precision: fp16') + 1}"
    )
    assert str(settings.source("deepspeed_config.zero_stage")) == (
        f"file {path}:{lines.index('  zero_stage: 2') + 1}"
    )
    # null means "not set here": the default stays, and says so.
    assert settings["main_process_port"] is None
    assert settings.source("main_process_port").kind == "default"


# Values some settings need from others so the cross-field rules accept a sample.
CONTEXT = {
    "machine_rank": {"num_machines": 4, "main_process_ip": "10.0.0.1"},
    "num_machines": {"main_process_ip": "10.0.0.1"},
    "deepspeed_config.offload_param_device": {"deepspeed_config": {"zero_stage": 3}},
}


def _nest(flat: dict) -> dict:
    out: dict = {}
    for key, value in flat.items():
        if "." in key:
            section, name = key.split(".", 1)
            out.setdefault(section, {})[name] = value
        elif isinstance(value, dict) and key in schema.SECTIONS:
            out.setdefault(key, {}).update(value)
        else:
            out[key] = value
    return out


@pytest.mark.parametrize("setting", schema.SETTINGS, ids=lambda s: s.key)
def test_every_setting_round_trips_through_a_file(setting: schema.Setting, tmp_path: Path) -> None:
    for sample in setting.kind.samples():
        data = _nest({**CONTEXT.get(setting.key, {}), setting.key: sample})
        path = write_yaml(tmp_path / "cfg.yaml", data)
        settings = resolve_layers(file=path)
        assert settings[setting.key] == sample
        source = settings.source(setting.key)
        assert source.kind == "file" and source.detail.startswith(f"{path}:")
        line_no = int(source.detail.rsplit(":", 1)[1])
        line = path.read_text().splitlines()[line_no - 1]
        assert line.strip().startswith(setting.name + ":")


@pytest.mark.parametrize("setting", schema.SETTINGS, ids=lambda s: s.key)
def test_every_setting_round_trips_through_json(setting: schema.Setting, tmp_path: Path) -> None:
    import json

    sample = setting.kind.samples()[-1]
    data = _nest({**CONTEXT.get(setting.key, {}), setting.key: sample})
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(data, indent=2))
    settings = resolve_layers(file=path)
    assert settings[setting.key] == sample
    assert settings.source(setting.key).detail.startswith(f"{path}:")


def test_json_chosen_by_content_when_extension_says_nothing(tmp_path: Path) -> None:
    path = tmp_path / "config.conf"
    path.write_text('{\n  "mixed_precision": "bf16",\n  "num_processes": 2\n}\n')
    settings = resolve_layers(file=path)
    assert settings["mixed_precision"] == "bf16"
    assert str(settings.source("num_processes")) == f"file {path}:3"


def test_file_values_survive_the_wizard_writer(tmp_path: Path) -> None:
    """What `overdrive config` writes (yaml.safe_dump) reads back to the same settings."""
    settings = resolve_layers(file=_write_full_example(tmp_path))
    dumped = yaml.safe_dump(settings.to_file_dict(), sort_keys=False)
    again = resolve(file=sources.parse_config_text(dumped, tmp_path / "again.yaml"))
    for key in settings:
        assert again[key] == settings[key], key


def _write_full_example(tmp_path: Path) -> Path:
    path = tmp_path / "example.yaml"
    path.write_text(FULL_EXAMPLE)
    return path
