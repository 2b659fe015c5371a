"""An optimizer's saved state converted between index keys (a plain optimizer) and name keys
(FSDP, TP, PP): the round trip restores every moment and step on the right parameter."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from overdrive.checkpoint.errors import CheckpointError
from overdrive.checkpoint.optimizer_keys import (
    clean_name,
    convert,
    from_deepspeed,
    keyed_by_name,
    parameter_names,
    to_deepspeed,
)


def _trained() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    groups = [
        {"params": [model[2].weight, model[0].weight], "lr": 0.01},  # not in module order
        {"params": [model[0].bias, model[2].bias], "lr": 0.1, "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups)
    for _ in range(3):
        model(torch.randn(5, 3)).sum().backward()
        opt.step()
        opt.zero_grad()
    return model, opt


def _by_name(model: nn.Module, opt: torch.optim.Optimizer) -> dict:
    """The state as FSDP writes it: per parameter name, groups listing names."""
    names = parameter_names(opt, [model])
    assert names is not None
    return convert(opt.state_dict(), names, to_names=True, what="optimizer 0")


def test_index_keys_become_the_parameters_names_in_their_groups() -> None:
    model, opt = _trained()
    state = _by_name(model, opt)
    assert keyed_by_name(state) and not keyed_by_name(opt.state_dict())
    assert state["param_groups"][0]["params"] == ["2.weight", "0.weight"]
    assert state["param_groups"][1]["lr"] == 0.1 and state["param_groups"][1]["weight_decay"] == 0
    torch.testing.assert_close(
        state["state"]["0.bias"]["exp_avg"], opt.state[model[0].bias]["exp_avg"]
    )


def test_name_keys_load_into_an_optimizer_whose_groups_list_them_in_another_order() -> None:
    model, opt = _trained()
    saved = _by_name(model, opt)
    fresh = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    other = torch.optim.AdamW(
        [
            {"params": [fresh[0].weight, fresh[2].weight], "lr": 0.5},
            {"params": [fresh[2].bias, fresh[0].bias], "lr": 0.5},
        ]
    )
    names = parameter_names(other, [fresh])
    assert names == [["0.weight", "2.weight"], ["2.bias", "0.bias"]]
    other.load_state_dict(convert(saved, names, to_names=False, what="optimizer 0"))
    for name in ("0.weight", "2.weight", "0.bias", "2.bias"):
        mine = other.state[fresh.get_parameter(name)]
        theirs = opt.state[model.get_parameter(name)]
        for key in ("exp_avg", "exp_avg_sq", "step"):
            torch.testing.assert_close(mine[key], theirs[key], msg=f"{name} {key}")
    assert [g["lr"] for g in other.param_groups] == [0.01, 0.1]  # the checkpoint's


def test_regrouped_parameters_are_refused_with_the_groups_sizes() -> None:
    model, opt = _trained()
    saved = _by_name(model, opt)
    one_group = torch.optim.AdamW(model.parameters())
    names = parameter_names(one_group, [model])
    assert names is not None
    with pytest.raises(CheckpointError, match=r"groups of \[2, 2\].*groups of \[4\]"):
        convert(saved, names, to_names=False, what="optimizer 0")


def test_other_parameter_names_are_refused_by_name() -> None:
    model, opt = _trained()
    saved = _by_name(model, opt)
    renamed = nn.ModuleDict({"a": nn.Linear(3, 4), "b": nn.Linear(4, 2)})
    other = torch.optim.AdamW(
        [
            {"params": [renamed["b"].weight, renamed["a"].weight]},
            {"params": [renamed["a"].bias, renamed["b"].bias]},
        ]
    )
    names = parameter_names(other, [renamed])
    assert names is not None
    with pytest.raises(CheckpointError, match=r"no state for b\.weight, a\.weight.*2\.weight"):
        convert(saved, names, to_names=False, what="optimizer 0")


def test_a_state_already_in_the_wanted_form_is_left_as_it_is() -> None:
    model, opt = _trained()
    state = opt.state_dict()
    names = parameter_names(opt, [model])
    assert names is not None
    assert convert(state, names, to_names=False, what="optimizer 0") is state


def test_wrapper_levels_are_not_part_of_a_name() -> None:
    assert clean_name("_orig_mod.layers._fsdp_wrapped_module.0.weight") == "layers.0.weight"
    assert clean_name("block._checkpoint_wrapped_module.fc.bias") == "block.fc.bias"


def test_deepspeeds_form_round_trips_through_the_names() -> None:
    model, opt = _trained()
    by_name = _by_name(model, opt)
    masters = {k: v.detach() for k, v in model.state_dict().items()}
    ds = to_deepspeed(by_name, masters, what="optimizer 0")
    assert sorted(ds["masters"]) == sorted(masters) and ds["engine"] == {}
    assert [s["value"] for s in ds["steps"]] == [3.0, 3.0] and ds["steps"][0]["tensor"]
    assert "params" not in ds["param_groups"][0] and ds["param_groups"][1]["lr"] == 0.1
    assert "step" not in ds["state"]["0.weight"]
    names = parameter_names(opt, [model])
    assert names is not None
    back = from_deepspeed(ds, names, what="optimizer 0")
    assert back["param_groups"] == by_name["param_groups"]
    for name, entries in by_name["state"].items():
        for key, value in entries.items():
            torch.testing.assert_close(back["state"][name][key], value, msg=f"{name} {key}")


def test_deepspeeds_form_needs_the_saved_weights_of_every_named_parameter() -> None:
    model, opt = _trained()
    masters = {k: v for k, v in model.state_dict().items() if k != "2.bias"}
    with pytest.raises(CheckpointError, match=r"names 2\.bias, which the saved model"):
        to_deepspeed(_by_name(model, opt), masters, what="optimizer 0")
