"""The parallel layout: degrees from the settings, refusals before any worker starts."""

from __future__ import annotations

import pytest

from overdrive.config import load_settings
from overdrive.errors import ConfigError
from overdrive.parallel import ParallelLayout, layout_from_settings


def _settings(**code: object):
    return load_settings(code={"distributed_type": "FSDP", **code}, environ={})


def test_full_shard_shards_over_every_process() -> None:
    layout = layout_from_settings(_settings(), 4)
    assert (layout.dp_replicate, layout.dp_shard, layout.dp_size) == (1, 4, 4)
    assert layout.mesh_dims() == (("dp_shard",), (4,))


def test_no_shard_replicates_on_a_two_dimensional_mesh() -> None:
    settings = _settings(**{"fsdp_config.fsdp_sharding_strategy": "NO_SHARD"})
    layout = layout_from_settings(settings, 3)
    assert layout.mesh_dims() == (("dp_replicate", "dp_shard"), (3, 1))


def test_hybrid_takes_the_shard_group_size() -> None:
    settings = _settings(
        **{
            "fsdp_config.fsdp_sharding_strategy": "HYBRID_SHARD",
            "parallelism_config.parallelism_config_dp_shard_size": 2,
        }
    )
    layout = layout_from_settings(settings, 6)
    assert (layout.dp_replicate, layout.dp_shard) == (3, 2)
    assert [layout.dp_rank(r) for r in range(6)] == list(range(6))
    assert layout.coordinates(3) == {"pp": 0, "dp_replicate": 1, "dp_shard": 1, "cp": 0, "tp": 0}


def test_hybrid_on_one_machine_without_a_group_size_is_refused() -> None:
    settings = _settings(**{"fsdp_config.fsdp_sharding_strategy": "HYBRID_SHARD"})
    with pytest.raises(ConfigError) as info:
        layout_from_settings(settings, 4)
    text = str(info.value)
    assert "HYBRID_SHARD" in text and "num_machines is 1" in text
    assert "parallelism_config_dp_shard_size" in text


def test_hybrid_defaults_to_one_replica_per_machine() -> None:
    settings = _settings(
        **{
            "fsdp_config.fsdp_sharding_strategy": "HYBRID_SHARD",
            "num_machines": 2,
            "main_process_ip": "10.0.0.1",
        }
    )
    assert layout_from_settings(settings, 8) == ParallelLayout(dp_replicate=2, dp_shard=4)


def test_a_group_size_that_does_not_divide_the_world_is_refused() -> None:
    settings = _settings(
        **{
            "fsdp_config.fsdp_sharding_strategy": "HYBRID_SHARD",
            "parallelism_config.parallelism_config_dp_shard_size": 4,
        }
    )
    with pytest.raises(ConfigError, match="does not fit 6 processes"):
        layout_from_settings(settings, 6)


def test_describe_names_the_dimensions_above_one() -> None:
    assert ParallelLayout(dp_replicate=2, dp_shard=2).describe() == "dp_replicate=2 x dp_shard=2"
    assert ParallelLayout().describe() == "one process"
