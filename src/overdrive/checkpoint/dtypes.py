"""Stored dtypes against the objects they are loaded into: a difference is an error.

``load_state_dict`` would cast silently (a model's ``copy_``, an optimizer's cast of its
state to the parameter's dtype, a gradient's ``.to``), so a checkpoint saved in another
precision would load as different numbers without a word.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, cast

import torch
from torch import nn

from overdrive.checkpoint.parts import Part

if TYPE_CHECKING:
    from overdrive.checkpoint.host import CheckpointHost


def _model(part: Part, state: object) -> list[str]:
    current = cast(nn.Module, part.obj).state_dict()  # a model part: the unwrapped model
    problems = []
    for key, saved in state.items() if isinstance(state, Mapping) else ():
        here = current.get(key)
        if (
            isinstance(saved, torch.Tensor)
            and isinstance(here, torch.Tensor)
            and saved.dtype != here.dtype
        ):
            problems.append(
                f"{part.label}: {key} is stored as {saved.dtype}, the model's is {here.dtype}"
            )
    return problems


def _optimizer(part: Part, state: object) -> list[str]:
    if type(part.obj).load_state_dict is not torch.optim.Optimizer.load_state_dict:
        return []  # it loads its state its own way
    opt = cast(torch.optim.Optimizer, part.obj)  # it loads as torch's optimizers do
    params = [p for group in opt.param_groups for p in group["params"]]
    saved_state = state.get("state", {}) if isinstance(state, Mapping) else {}
    problems = []
    for index, entries in saved_state.items():
        if not isinstance(index, int) or not 0 <= index < len(params):
            continue  # a layout mismatch: load_state_dict names it
        param = params[index]
        live = opt.state.get(param, {})
        for name, saved in entries.items():
            if name == "step" or not isinstance(saved, torch.Tensor):
                continue
            here = live.get(name)
            want = here.dtype if isinstance(here, torch.Tensor) else param.dtype
            if saved.is_floating_point() and saved.dtype != want:
                problems.append(
                    f"{part.label}: state {name!r} of parameter {index} is stored as "
                    f"{saved.dtype}, this optimizer's is {want}"
                )
    return problems


def dtype_problems(
    accelerator: CheckpointHost, parts: list[Part], states: Mapping[str, object], rank_state: object
) -> list[str]:
    """Every stored tensor whose dtype differs from what it would be loaded into."""
    problems: list[str] = []
    for part in parts:
        if part.kind == "model":
            problems += _model(part, states[part.stem])
        elif part.kind == "optimizer":
            problems += _optimizer(part, states[part.stem])
    grads = rank_state.get("grads", []) if isinstance(rank_state, Mapping) else []
    for i, (model, saved) in enumerate(zip(accelerator.prepared.models, grads)):
        for name, p in accelerator.unwrap_model(model).named_parameters():
            grad = saved.get(name)
            if isinstance(grad, torch.Tensor) and grad.dtype != p.dtype:
                problems.append(
                    f"model {i}: the accumulated gradient of {name} is stored as {grad.dtype}, "
                    f"the parameter is {p.dtype}"
                )
    return problems
