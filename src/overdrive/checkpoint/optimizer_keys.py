"""An optimizer's state keyed by parameter index or by parameter name, either way round.

A plain optimizer's ``state_dict()`` keys its state and groups by position (0, 1, ...);
FSDP, tensor and pipeline parallelism key them by the parameters' names in the user's module
(``layer.weight``), which is what lets their checkpoints reshard. Loading a checkpoint saved
under one kind of strategy into the other converts between the two through the names of the
optimizer's own parameters, in the order its groups hold them; the hyper-parameters of each
group come from the checkpoint, as ``Optimizer.load_state_dict`` takes them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, TypedDict

from torch import nn

from overdrive.checkpoint.errors import CheckpointError
from overdrive.checkpoint.records import StateDict

if TYPE_CHECKING:
    import torch

# Wrappers that put a level into parameter names without changing the user's module.
_WRAPPER_LEVELS = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")


class DeepSpeedStep(TypedDict):
    """A parameter group's step count in DeepSpeed's optimizer state; ``tensor``: it was a
    tensor in the torch optimizer's state."""

    value: float
    tensor: bool


def clean_name(name: str) -> str:
    """``name`` without the levels FSDP1, activation checkpointing and compile add."""
    for level in _WRAPPER_LEVELS:
        name = name.replace(level, "")
    return name


def parameter_names(
    optimizer: torch.optim.Optimizer,
    models: Iterable[nn.Module],
    known: Mapping[int, str] | None = None,
) -> list[list[str]] | None:
    """The names (in the user's module) of ``optimizer``'s parameters, one list per group;
    None when a parameter belongs to none of ``models``. ``known``: id(parameter) -> name,
    where a strategy knows better than the module (a pipeline stage's renumbered layers)."""
    by_id = {id(p): clean_name(name) for model in models for name, p in model.named_parameters()}
    by_id.update(known or {})
    groups = [[by_id.get(id(p)) for p in group["params"]] for group in optimizer.param_groups]
    if any(name is None for group in groups for name in group):
        return None
    return [[name for name in group if name is not None] for group in groups]


def keyed_by_name(state: StateDict) -> bool:
    """Whether a saved optimizer state names its parameters (FSDP's form) or numbers them."""
    params = [p for group in state.get("param_groups", []) for p in group.get("params", [])]
    return any(isinstance(p, str) for p in [*params, *state.get("state", {})])


def convert(state: StateDict, names: list[list[str]], *, to_names: bool, what: str) -> StateDict:
    """``state`` keyed the way this run's strategy loads it (``to_names``), given the names of
    this run's optimizer's parameters group by group; unchanged when it already is.

    By index, the saved groups' parameters pair with this run's in order (as
    ``Optimizer.load_state_dict`` pairs them); by name, each name finds its own parameter.
    """
    if keyed_by_name(state) == to_names:
        return state
    groups = state.get("param_groups", [])
    sizes = [len(g.get("params", [])) for g in groups]
    if sizes != [len(g) for g in names]:
        raise CheckpointError(
            f"load_state: {what} was saved with parameter groups of {sizes} parameters, but "
            f"this run's optimizer has groups of {[len(g) for g in names]}\n  fix: build the "
            "optimizer with the same parameter groups, over the same parameters, as the run "
            "that saved it"
        )
    rename: dict[int | str, int | str] = {}  # saved key -> this run's
    for group, mine in zip(groups, names, strict=True):
        if to_names:
            rename.update(zip(group["params"], mine, strict=True))
        else:
            _require_names(group["params"], mine, what)
    if not to_names:
        rename = {name: i for i, name in enumerate(n for group in names for n in group)}
    return {
        "state": {rename[key]: value for key, value in state.get("state", {}).items()},
        "param_groups": [
            {**group, "params": [rename[p] for p in (mine if not to_names else group["params"])]}
            for group, mine in zip(groups, names, strict=True)
        ],
    }


def _require_names(saved: Sequence[object], mine: list[str], what: str) -> None:
    missing = [n for n in mine if n not in set(saved)]
    if missing:
        extra = [str(n) for n in saved if n not in set(mine)]
        more = f" (and {len(missing) - 3} more)" if len(missing) > 3 else ""
        instead = f"; that group names {', '.join(extra[:3])} instead" if extra else ""
        raise CheckpointError(
            f"load_state: {what} holds no state for {', '.join(missing[:3])}{more} in the "
            f"parameter group that holds it here{instead}\n  fix: build the model with the "
            "parameter names, and the optimizer with the groups, of the run that saved it"
        )


def from_deepspeed(state: StateDict, names: list[list[str]], *, what: str) -> StateDict:
    """DeepSpeed's optimizer state (fp32 masters, per-name moments, one step count per group)
    as a torch optimizer's, keyed by name; the masters are the model's weights (loaded with
    the model) and the engine's counters have no meaning elsewhere."""
    import torch

    groups, steps = state.get("param_groups", []), state.get("steps", [])
    if len(groups) != len(names):
        raise CheckpointError(
            f"load_state: {what} was saved by DeepSpeed with {len(groups)} parameter groups, "
            f"but this run's optimizer has {len(names)}\n  fix: build the optimizer with the "
            "parameter groups of the run that saved it"
        )
    saved = state.get("state", {})
    _require_names(list(saved), [n for group in names for n in group], what)
    by_name: StateDict = {"state": {}, "param_groups": []}
    for index, (hyper, mine) in enumerate(zip(groups, names, strict=True)):
        step = steps[index] if index < len(steps) else None
        for name in mine:
            entries = dict(saved[name])
            if entries and step is not None:
                value = step["value"]
                entries["step"] = torch.tensor(float(value)) if step["tensor"] else value
            if entries:
                by_name["state"][name] = entries
        by_name["param_groups"].append({**hyper, "params": list(mine)})
    return by_name


def to_deepspeed(state: StateDict, masters: Mapping[str, torch.Tensor], *, what: str) -> StateDict:
    """A torch optimizer's state keyed by name (FSDP, TP, PP) as DeepSpeed's loader takes it:
    the fp32 masters are the saved model's weights, one step count per group."""
    import torch

    groups, saved = state.get("param_groups", []), state.get("state", {})
    steps: list[DeepSpeedStep | None] = []
    for group in groups:
        counted = [saved[n]["step"] for n in group.get("params", []) if "step" in saved.get(n, {})]
        if not counted:
            steps.append(None)
            continue
        step = counted[0]
        tensor = isinstance(step, torch.Tensor)
        steps.append({"value": float(step.item()) if tensor else step, "tensor": tensor})
    names = [n for group in groups for n in group.get("params", [])]
    missing = [n for n in names if n not in masters]
    if missing:
        raise CheckpointError(
            f"load_state: {what} names {', '.join(missing[:3])}, which the saved model does "
            "not hold\n  fix: load a checkpoint whose model and optimizer were saved together"
        )
    return {
        "masters": {n: masters[n].float() for n in names},
        "state": {n: {k: v for k, v in saved.get(n, {}).items() if k != "step"} for n in names},
        "steps": steps,
        "param_groups": [{k: v for k, v in g.items() if k != "params"} for g in groups],
        "engine": {},
    }
