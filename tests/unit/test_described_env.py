"""Hugging Face Accelerate's variables the launcher exports beside its own handover."""

from __future__ import annotations

from pathlib import Path

from overdrive.config import load_settings
from overdrive.launch.described_env import described_variables


def test_set_settings_are_exported_under_hugging_face_accelerates_names(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        "distributed_type: FSDP\nmixed_precision: bf16\n"
        "fsdp_config:\n  fsdp_cpu_ram_efficient_loading: true\n"
    )
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    settings = load_settings(config_file=config, flags={"use_cpu": True}, environ=env)
    assert described_variables(settings) == {
        "ACCELERATE_MIXED_PRECISION": "bf16",
        "ACCELERATE_USE_CPU": "true",
        "ACCELERATE_USE_FSDP": "true",
        "FSDP_CPU_RAM_EFFICIENT_LOADING": "true",
    }


def test_defaults_are_not_exported(tmp_path: Path) -> None:
    settings = load_settings(environ={"XDG_CACHE_HOME": str(tmp_path)})
    assert described_variables(settings) == {}


def test_the_opt_in_key_resolves_from_a_config_file_with_its_origin(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("as_accelerate: true\n")
    settings = load_settings(config_file=config, environ={"XDG_CACHE_HOME": str(tmp_path)})
    assert settings["as_accelerate"] is True
    assert str(config) in str(settings.source("as_accelerate"))
