"""FullyShardedDataParallelPlugin as Hugging Face Accelerate's scripts use it: torch enum
values and ``set_auto_wrap_policy(model)``."""

from __future__ import annotations

import pytest
from torch import nn
from torch.distributed.fsdp import BackwardPrefetch, ShardingStrategy, StateDictType

from overdrive import FullyShardedDataParallelPlugin
from overdrive.errors import ConfigError


def test_torch_enum_values_become_the_setting_names() -> None:
    plugin = FullyShardedDataParallelPlugin(
        sharding_strategy=ShardingStrategy.SHARD_GRAD_OP,
        state_dict_type=StateDictType.SHARDED_STATE_DICT,
        backward_prefetch=BackwardPrefetch.BACKWARD_POST,
    )
    settings = plugin.to_settings()
    assert settings["fsdp_config.fsdp_sharding_strategy"] == "SHARD_GRAD_OP"
    assert settings["fsdp_config.fsdp_state_dict_type"] == "SHARDED_STATE_DICT"
    assert settings["fsdp_config.fsdp_backward_prefetch"] == "BACKWARD_POST"


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)


class Net(nn.Module):
    _no_split_modules = ["Block"]

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.Sequential(Block(), Block())


def test_set_auto_wrap_policy_takes_the_models_no_split_modules() -> None:
    plugin = FullyShardedDataParallelPlugin(auto_wrap_policy="TRANSFORMER_BASED_WRAP")
    plugin.set_auto_wrap_policy(Net())
    assert plugin.transformer_cls_names_to_wrap == ["Block"]
    size = FullyShardedDataParallelPlugin(auto_wrap_policy="SIZE_BASED_WRAP", min_num_params=7)
    size.set_auto_wrap_policy(Net())  # nothing to fill: the size is the policy
    assert size.transformer_cls_names_to_wrap is None and size.min_num_params == 7


def test_set_auto_wrap_policy_refuses_a_layer_the_model_lacks() -> None:
    plugin = FullyShardedDataParallelPlugin(
        auto_wrap_policy="TRANSFORMER_BASED_WRAP", transformer_cls_names_to_wrap=["Decoder"]
    )
    with pytest.raises(ConfigError) as info:
        plugin.set_auto_wrap_policy(Net())
    assert "Decoder" in str(info.value) and "fsdp_transformer_layer_cls_to_wrap" in str(info.value)
    assert "Block" in str(info.value)
