"""Config files Hugging Face Accelerate writes (and libraries ship) load: every key its
wizard writes is known; keys for what overdrive does not do are named as unable to take
effect, with their source; its default config file is read where overdrive has none."""

from __future__ import annotations

from pathlib import Path

import pytest

from overdrive.config import load_settings
from overdrive.config.inert import no_effect_notes

from .conftest import resolve_layers, write_yaml

# The top-level keys of Accelerate's ClusterConfig as its wizard writes them, with the values
# a GPU machine's file holds, and the sections it writes for FSDP1.
WIZARD_FILE = {
    "compute_environment": "LOCAL_MACHINE",
    "debug": False,
    "distributed_type": "FSDP",
    "downcast_bf16": "no",
    "enable_cpu_affinity": False,
    "fsdp_config": {
        "fsdp_activation_checkpointing": False,
        "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "fsdp_backward_prefetch": "BACKWARD_PRE",
        "fsdp_cpu_ram_efficient_loading": True,
        "fsdp_forward_prefetch": False,
        "fsdp_offload_params": False,
        "fsdp_reshard_after_forward": "SHARD_GRAD_OP",
        "fsdp_state_dict_type": "FULL_STATE_DICT",
        "fsdp_sync_module_states": True,
        "fsdp_use_orig_params": True,
        "fsdp_version": 1,
    },
    "dynamo_config": {"dynamo_backend": "NO", "dynamo_use_regional_compilation": False},
    "mpirun_config": {},
    "machine_rank": 0,
    "main_training_function": "main",
    "mixed_precision": "bf16",
    "num_machines": 1,
    "num_processes": 8,
    "rdzv_backend": "static",
    "same_network": True,
    "tpu_env": [],
    "tpu_use_cluster": False,
    "tpu_use_sudo": False,
    "use_cpu": False,
}


def test_a_wizard_written_fsdp1_file_loads_with_its_strategy(tmp_path: Path) -> None:
    settings = resolve_layers(file=write_yaml(tmp_path / "cfg.yaml", WIZARD_FILE))
    assert settings["fsdp_config.fsdp_sharding_strategy"] == "SHARD_GRAD_OP"
    assert settings["fsdp_config.fsdp_reshard_after_forward"] is False
    strategy_from = str(settings.source("fsdp_config.fsdp_sharding_strategy"))
    assert strategy_from.startswith(f"file {tmp_path / 'cfg.yaml'}:")
    assert no_effect_notes(settings) == []  # every Accelerate-only key at its default


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"tpu_env": ["XLA_USE_BF16=1"]}, "`tpu_env`"),
        ({"enable_cpu_affinity": True}, "`enable_cpu_affinity`"),
        ({"parallelism_config": {"parallelism_config_sp_size": 2}}, "sequence parallelism"),
        ({"deepspeed_config": {"seq_parallel_communication_data_type": "bf16"}}, "sequence"),
    ],
)
def test_keys_for_what_overdrive_does_not_do_are_named(
    tmp_path: Path, extra: dict[str, object], named: str
) -> None:
    settings = resolve_layers(file=write_yaml(tmp_path / "cfg.yaml", {**WIZARD_FILE, **extra}))
    notes = no_effect_notes(settings)
    assert len(notes) == 1 and named in notes[0] and "cannot take effect" in notes[0]
    assert str(tmp_path / "cfg.yaml") in notes[0]


def test_two_strategies_that_disagree_are_refused(tmp_path: Path) -> None:
    from overdrive.errors import ConfigError

    data = {
        "fsdp_config": {
            "fsdp_reshard_after_forward": "NO_SHARD",
            "fsdp_sharding_strategy": "FULL_SHARD",
        }
    }
    with pytest.raises(ConfigError, match="name two sharding strategies"):
        resolve_layers(file=write_yaml(tmp_path / "cfg.yaml", data))


def test_accelerates_default_config_is_read_where_overdrive_has_none(tmp_path: Path) -> None:
    environ = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "HF_HOME": str(tmp_path / "hf")}
    (tmp_path / "hf" / "accelerate").mkdir(parents=True)
    (tmp_path / "cache" / "overdrive").mkdir(parents=True)
    theirs = write_yaml(
        tmp_path / "hf" / "accelerate" / "default_config.yaml", {"mixed_precision": "bf16"}
    )
    settings = load_settings(environ=environ)
    assert settings["mixed_precision"] == "bf16"
    assert str(settings.source("mixed_precision")) == f"file {theirs}:1"
    ours = write_yaml(
        tmp_path / "cache" / "overdrive" / "default_config.yaml", {"mixed_precision": "no"}
    )
    settings = load_settings(environ=environ)
    assert settings["mixed_precision"] == "no" and str(ours) in str(
        settings.source("mixed_precision")
    )
