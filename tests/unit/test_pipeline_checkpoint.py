"""A pipeline stage's optimizer state by parameter name, in one process (no pipeline group):
the tree ``save_state`` writes and its load into a stage, as FSDP's sharded form has it."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from overdrive.checkpoint import CheckpointError
from overdrive.checkpoint.pipeline_stage import (
    load_stage_optimizer,
    load_whole_optimizer,
    stage_model_state,
    stage_optimizer_state,
    whole_model_state,
    whole_optimizer_state,
)
from overdrive.checkpoint.shards import LocalShard


def _stage() -> tuple[nn.Sequential, torch.optim.Optimizer, dict[int, str]]:
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    groups: list[dict[str, Any]] = [
        {"params": [module[0].weight, module[0].bias]},
        {"params": [module[1].weight, module[1].bias], "lr": 0.5},
    ]
    opt = torch.optim.AdamW(groups, lr=0.1)
    names = {id(p): f"model.layers.{n}" for n, p in module.named_parameters()}
    return module, opt, names


def _plain(tree: Any) -> Any:
    """What loading a written tree gives back: each box's tensor."""
    if isinstance(tree, LocalShard):
        return tree.data.clone()
    if isinstance(tree, dict):
        return {k: _plain(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_plain(v) for v in tree]
    return tree


def test_the_model_tree_holds_whole_boxes_under_the_unsplit_names() -> None:
    module, _, _ = _stage()
    names = {"0.weight": "model.embed.weight", "1.bias": "lm_head.bias"}
    tree = stage_model_state(module, names, None, write=False)
    assert sorted(tree) == ["lm_head.bias", "model.embed.weight"]
    box = tree["model.embed.weight"]
    assert not box.write and box.global_shape == (4, 3)
    assert torch.equal(box.data, module.state_dict()["0.weight"]) and box.offsets == (0, 0)


def test_optimizer_state_round_trips_by_name_with_hyper_parameters_and_step() -> None:
    module, opt, names = _stage()
    module(torch.randn(5, 3)).sum().backward()
    opt.step()
    tree = stage_optimizer_state(opt, names, None, write=True)
    assert sorted(tree["state"]) == sorted(names.values())
    assert [g["params"] for g in tree["param_groups"]] == [
        ["model.layers.0.weight", "model.layers.0.bias"],
        ["model.layers.1.weight", "model.layers.1.bias"],
    ]
    step = tree["state"]["model.layers.1.bias"]["step"]
    assert isinstance(step, LocalShard) and step.global_shape == () and float(step.data) == 1.0

    saved = _plain(tree)
    saved["param_groups"][1]["lr"] = 0.25  # a scheduler moved it before the save
    _, fresh, fresh_names = _stage()
    load_stage_optimizer(fresh, fresh_names, saved)
    assert [g["lr"] for g in fresh.param_groups] == [0.1, 0.25]
    for p, q in zip(
        [p for g in opt.param_groups for p in g["params"]],
        [p for g in fresh.param_groups for p in g["params"]],
        strict=True,
    ):
        for key in ("step", "exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(fresh.state[q][key], opt.state[p][key])


def test_a_saved_state_that_groups_parameters_otherwise_is_refused_by_name() -> None:
    module, opt, names = _stage()
    saved = _plain(stage_optimizer_state(opt, names, None, write=True))
    regrouped = dict(saved, param_groups=[{"lr": 0.1, "params": ["model.layers.0.weight"]}])
    regrouped["param_groups"].append({"lr": 0.1, "params": ["model.layers.0.bias"]})
    _, fresh, fresh_names = _stage()
    with pytest.raises(CheckpointError, match="'model.layers.0.bias'.*different groups"):
        load_stage_optimizer(fresh, fresh_names, regrouped)
    missing = dict(saved, state={k: v for k, v in saved["state"].items() if "1.bias" not in k})
    with pytest.raises(CheckpointError, match="no entry for parameter 'model.layers.1.bias'"):
        load_stage_optimizer(fresh, fresh_names, missing)


def test_the_whole_model_and_optimizer_states_are_plain_tensors_by_name_and_load_back() -> None:
    """The unsharded form (``save_model``, FULL_STATE_DICT files): plain CPU tensors under
    the unsplit names; the optimizer's groups by position with their hyper-parameters."""
    module, opt, names = _stage()
    module(torch.randn(5, 3)).sum().backward()
    opt.step()
    weights = whole_model_state(module, {"1.weight": "lm_head.weight"}, None)
    assert list(weights) == ["lm_head.weight"]
    assert not isinstance(weights["lm_head.weight"], LocalShard)
    assert torch.equal(weights["lm_head.weight"], module[1].weight.detach())

    whole = whole_optimizer_state(opt, names, None)
    assert sorted(whole["state"]) == sorted(names.values())
    assert [g["lr"] for g in whole["param_groups"]] == [0.1, 0.5]
    whole["param_groups"][0]["lr"] = 0.05
    _, fresh, fresh_names = _stage()
    load_whole_optimizer(fresh, fresh_names, whole)
    assert [g["lr"] for g in fresh.param_groups] == [0.05, 0.5]
    mine = [p for g in opt.param_groups for p in g["params"]]
    theirs = [p for g in fresh.param_groups for p in g["params"]]
    for p, q in zip(mine, theirs, strict=True):
        torch.testing.assert_close(fresh.state[q]["exp_avg"], opt.state[p]["exp_avg"])

    whole["param_groups"] = whole["param_groups"][:1]
    with pytest.raises(CheckpointError, match="1 parameter groups, this one 2"):
        load_whole_optimizer(fresh, fresh_names, whole)
