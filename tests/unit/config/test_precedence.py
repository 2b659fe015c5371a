"""Precedence code > launch flag > environment > config file > default, for every setting."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from overdrive.config import load_settings, schema
from overdrive.config.settings import HANDOVER_VARIABLE

from .conftest import env_text, resolve_layers, write_yaml
from .test_roundtrip import CONTEXT, _nest

ALL = schema.SETTINGS


def _distinct(setting: schema.Setting) -> list[Any]:
    """Sample values that all differ from each other and from the default."""
    values = [v for v in setting.kind.samples() if v != setting.default]
    assert len(values) >= 1, setting.key
    return values


LAYERS = ("file", "env", "flag", "code")


def _resolve_with(setting: schema.Setting, present: dict[str, Any], tmp_path: Path):
    file_data = _nest({**CONTEXT.get(setting.key, {})})
    if "file" in present:
        file_data = _nest({**CONTEXT.get(setting.key, {}), setting.key: present["file"]})
    path = write_yaml(tmp_path / "cfg.yaml", file_data)
    env = {setting.env[0]: env_text(present["env"])} if "env" in present else {}
    flags = {setting.key: present["flag"]} if "flag" in present else {}
    code = {setting.key: present["code"]} if "code" in present else {}
    return resolve_layers(file=path, env=env, flags=flags, code=code)


@pytest.mark.parametrize("setting", ALL, ids=lambda s: s.key)
def test_precedence_matrix(setting: schema.Setting, tmp_path: Path) -> None:
    """Every subset of sources: the highest one present wins and is named as the source."""
    values = _distinct(setting)
    layers = [layer for layer in LAYERS if layer != "env" or setting.env]
    for mask in range(1 << len(layers)):
        chosen = [layer for i, layer in enumerate(layers) if mask >> i & 1]
        # Neighbouring layers get different values, so the winner is visible.
        present = {layer: values[i % len(values)] for i, layer in enumerate(chosen)}
        settings = _resolve_with(setting, present, tmp_path)
        if not chosen:
            assert settings[setting.key] == setting.default
            assert settings.source(setting.key).kind == "default"
            continue
        winner = chosen[-1]
        assert settings[setting.key] == present[winner], (setting.key, chosen)
        assert settings.source(setting.key).kind == winner, (setting.key, chosen)


def test_documented_precedence_example(tmp_path: Path) -> None:
    """Code over environment over file, as in Hugging Face Accelerate: file bf16, env fp16,
    code fp8 -> fp8; without code -> fp16."""
    path = write_yaml(tmp_path / "cfg.yaml", {"mixed_precision": "bf16"})
    env = {"ACCELERATE_MIXED_PRECISION": "fp16"}
    assert (
        resolve_layers(file=path, env=env, code={"mixed_precision": "fp8"})["mixed_precision"]
        == "fp8"
    )
    assert resolve_layers(file=path, env=env)["mixed_precision"] == "fp16"
    assert resolve_layers(file=path)["mixed_precision"] == "bf16"


def test_provenance_strings_name_each_source(tmp_path: Path) -> None:
    path = write_yaml(tmp_path / "cfg.yaml", {"num_machines": 1, "mixed_precision": "bf16"})
    settings = resolve_layers(
        file=path,
        env={"ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "8"},
        flags={"num_processes": 2},
        code={"use_cpu": True},
    )
    assert str(settings.source("mixed_precision")) == f"file {path}:2"
    assert str(settings.source("gradient_accumulation_steps")) == (
        "env ACCELERATE_GRADIENT_ACCUMULATION_STEPS"
    )
    assert str(settings.source("num_processes")) == "flag --num_processes"
    assert str(settings.source("use_cpu")) == "code Accelerator(use_cpu=...)"
    assert str(settings.source("rdzv_backend")) == "default"


def test_default_file_location_follows_xdg(tmp_path: Path) -> None:
    path = tmp_path / "cache" / "overdrive" / "default_config.yaml"
    path.parent.mkdir(parents=True)
    path.write_text("mixed_precision: bf16\n")
    settings = load_settings(environ={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert settings["mixed_precision"] == "bf16"
    home = load_settings(environ={"HOME": str(tmp_path / "home")})
    assert home["mixed_precision"] == "no"  # no file there: defaults, silently fine
    (tmp_path / "home" / ".cache" / "overdrive").mkdir(parents=True)
    (tmp_path / "home" / ".cache" / "overdrive" / "default_config.yaml").write_text(
        "mixed_precision: fp16\n"
    )
    assert load_settings(environ={"HOME": str(tmp_path / "home")})["mixed_precision"] == "fp16"


def test_handover_keeps_sources_and_code_still_wins(tmp_path: Path) -> None:
    """A worker reuses the launcher's resolution; code arguments still override it."""
    path = write_yaml(tmp_path / "cfg.yaml", {"mixed_precision": "bf16", "debug": True})
    launcher = load_settings(
        config_file=path,
        flags={"num_processes": 2},
        environ={"ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "3"},
    )
    environ = {HANDOVER_VARIABLE: launcher.to_json(), "ACCELERATE_MIXED_PRECISION": "fp16"}
    worker = load_settings(code={"mixed_precision": "no"}, environ=environ)
    assert worker["mixed_precision"] == "no"
    assert worker.source("mixed_precision").kind == "code"
    assert worker["debug"] is True and str(worker.source("debug")) == f"file {path}:2"
    assert str(worker.source("num_processes")) == "flag --num_processes"
    assert worker["gradient_accumulation_steps"] == 3


def test_plugins_become_code_values() -> None:
    from overdrive import DataLoaderConfiguration, DeepSpeedPlugin, FullyShardedDataParallelPlugin

    ds = DeepSpeedPlugin(zero_stage=3, offload_param_device="cpu")
    settings = resolve_layers(code=ds.to_settings())
    assert settings["distributed_type"] == "DEEPSPEED"
    assert settings["deepspeed_config.offload_param_device"] == "cpu"
    fsdp = FullyShardedDataParallelPlugin(cpu_offload=True, auto_wrap_policy="TRANSFORMER_LAYER")
    settings = resolve_layers(code=fsdp.to_settings())
    assert settings["fsdp_config.fsdp_offload_params"] is True
    assert settings["fsdp_config.fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    settings = resolve_layers(code=DataLoaderConfiguration(split_batches=True).to_settings())
    assert settings["split_batches"] is True and settings["even_batches"] is True


# Hugging Face Accelerate's ACCELERATE_* variables (docs, Reference > Utilities, Environment
# Variables): (text, setting, value it resolves to).
ACCELERATE_VARIABLES = {
    "ACCELERATE_MIXED_PRECISION": ("bf16", "mixed_precision", "bf16"),
    "ACCELERATE_GRADIENT_ACCUMULATION_STEPS": ("4", "gradient_accumulation_steps", 4),
    "ACCELERATE_USE_CPU": ("yes", "use_cpu", True),
    "ACCELERATE_USE_DEEPSPEED": ("true", "use_deepspeed", True),
    "ACCELERATE_USE_FSDP": ("1", "use_fsdp", True),
    "ACCELERATE_USE_MEGATRON_LM": ("true", "use_megatron_lm", True),
    "ACCELERATE_NUM_PROCESSES": ("8", "num_processes", 8),
    "ACCELERATE_GPU_IDS": ("0,2", "gpu_ids", "0,2"),
    "ACCELERATE_DEEPSPEED_ZERO_STAGE": ("3", "deepspeed_config.zero_stage", 3),
    "ACCELERATE_FSDP_SHARDING_STRATEGY": (
        "SHARD_GRAD_OP",
        "fsdp_config.fsdp_sharding_strategy",
        "SHARD_GRAD_OP",
    ),
    "ACCELERATE_LOG_WITH": ("tensorboard,wandb", "log_with", ["tensorboard", "wandb"]),
    "ACCELERATE_PROJECT_DIR": ("/tmp/run", "project_dir", "/tmp/run"),
    "ACCELERATE_NUM_MACHINES": ("2", "num_machines", 2),
    "ACCELERATE_MACHINE_RANK": ("1", "machine_rank", 1),
    "ACCELERATE_MAIN_PROCESS_IP": ("10.0.0.1", "main_process_ip", "10.0.0.1"),
    "ACCELERATE_MAIN_PROCESS_PORT": ("29555", "main_process_port", 29555),
    "ACCELERATE_RDZV_BACKEND": ("c10d", "rdzv_backend", "c10d"),
}
# What the cross-field rules need beside one variable (a second machine needs an address).
_MACHINES = {"ACCELERATE_NUM_MACHINES": "2", "ACCELERATE_MAIN_PROCESS_IP": "10.0.0.1"}


@pytest.mark.parametrize("name", sorted(ACCELERATE_VARIABLES))
def test_every_documented_variable_sets_its_setting(name: str) -> None:
    text, key, expected = ACCELERATE_VARIABLES[name]
    env = {name: text}
    if key in ("machine_rank", "num_machines"):
        env = {**_MACHINES, **env}
    settings = resolve_layers(env=env)
    assert schema.canonical_key(key) == key and name in schema.get(key).env
    assert settings[key] == expected
    assert str(settings.source(key)) == f"env {name}"
