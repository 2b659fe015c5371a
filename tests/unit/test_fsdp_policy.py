"""FSDP settings become one policy; wrap units are chosen the same way for both versions."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from overdrive.config import load_settings
from overdrive.errors import ConfigError, OverdriveError
from overdrive.parallel.fsdp_policy import policy_from_settings
from overdrive.parallel.rebind import named_params, rebind, replacement_map
from overdrive.parallel.wrap import wrap_units


def _policy(**fsdp: object):
    code = {"distributed_type": "FSDP"}
    code.update({f"fsdp_config.fsdp_{k}": v for k, v in fsdp.items()})
    return policy_from_settings(load_settings(code=code, environ={}))


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.Linear(8, 8)
        self.mlp = nn.Linear(8, 32)


class Model(nn.Module):
    _no_split_modules = ["Layer"]

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.layers = nn.ModuleList([Layer(), Layer()])
        self.head = nn.Linear(8, 10)


def _paths(model: nn.Module, units: list[nn.Module]) -> list[str]:
    names = {id(m): n for n, m in model.named_modules()}
    return sorted(names[id(u)] for u in units)


def test_fsdp2_maps_sharding_strategy_onto_reshard_after_forward() -> None:
    assert _policy(version=2, sharding_strategy="SHARD_GRAD_OP").reshard_after_forward is False
    assert _policy(version=2).reshard_after_forward is True


def test_fsdp1_maps_reshard_after_forward_onto_the_sharding_strategy() -> None:
    assert _policy(version=1, reshard_after_forward=False).sharding_strategy == "SHARD_GRAD_OP"
    with pytest.raises(ConfigError, match="disagree"):
        _policy(version=1, sharding_strategy="FULL_SHARD", reshard_after_forward=False)


def test_fsdp1_only_settings_are_refused_under_fsdp2_when_set() -> None:
    with pytest.raises(ConfigError, match="backward_prefetch = BACKWARD_POST"):
        _policy(version=2, backward_prefetch="BACKWARD_POST")
    with pytest.raises(ConfigError, match="use_orig_params"):
        _policy(version=2, use_orig_params=False)
    assert _policy(version=1, backward_prefetch="BACKWARD_POST").backward_prefetch == (
        "BACKWARD_POST"
    )


def test_local_state_dict_is_refused_with_the_alternatives() -> None:
    with pytest.raises(ConfigError, match="SHARDED_STATE_DICT"):
        _policy(state_dict_type="LOCAL_STATE_DICT")


def test_naming_layer_classes_turns_on_layer_wrapping() -> None:
    policy = _policy(transformer_layer_cls_to_wrap=["Layer"])
    assert policy.auto_wrap_policy == "TRANSFORMER_BASED_WRAP"
    model = Model()
    units = wrap_units(model, policy.auto_wrap_policy, layer_names=list(policy.layer_names))
    assert _paths(model, units) == ["layers.0", "layers.1"]


def test_layer_wrapping_falls_back_to_no_split_modules() -> None:
    model = Model()
    assert _paths(model, wrap_units(model, "TRANSFORMER_BASED_WRAP")) == ["layers.0", "layers.1"]


def test_an_unknown_layer_class_lists_the_model_classes() -> None:
    with pytest.raises(ConfigError) as info:
        wrap_units(Model(), "TRANSFORMER_BASED_WRAP", layer_names=["Block"], source="flag")
    text = str(info.value)
    assert "Block" in text and "(flag)" in text
    assert "Embedding, Layer, Linear, Model, ModuleList" in text


def test_size_based_wrapping_wraps_bottom_up() -> None:
    model = Model()
    # mlp has 288 parameters, attn 72: only the mlps reach 200; then nothing else does.
    assert _paths(model, wrap_units(model, "SIZE_BASED_WRAP", min_num_params=200)) == [
        "layers.0.mlp",
        "layers.1.mlp",
    ]
    # at 300 no single Linear reaches it, but each Layer (360) does.
    assert _paths(model, wrap_units(model, "SIZE_BASED_WRAP", min_num_params=300)) == [
        "layers.0",
        "layers.1",
    ]


def test_a_callable_policy_is_asked_about_each_module() -> None:
    model = Model()

    def only_heads(module: nn.Module, recurse: bool, nonwrapped_numel: int) -> bool:
        return module is model.head

    assert _paths(model, wrap_units(model, only_heads)) == ["head"]
    assert wrap_units(model, "NO_WRAP") == [] and wrap_units(model, None) == []


def test_rebind_points_an_optimizer_at_replaced_parameters() -> None:
    model = nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = named_params(model)
    model.weight = nn.Parameter(model.weight.detach().clone())
    mapping = replacement_map(before, named_params(model))
    assert rebind(opt, mapping) == 1
    assert opt.param_groups[0]["params"][0] is model.weight


def test_rebind_refuses_an_optimizer_that_has_state() -> None:
    model = nn.Linear(2, 2)
    opt = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 2)).sum().backward()
    opt.step()
    before = named_params(model)
    model.weight = nn.Parameter(model.weight.detach().clone())
    with pytest.raises(OverdriveError, match="before the first"):
        rebind(opt, replacement_map(before, named_params(model)))
