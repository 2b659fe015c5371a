"""The DeepSpeed engine's state as full tensors keyed by the user's parameter names.

Checkpoints go through overdrive's own format (safetensors and JSON), never DeepSpeed's
pickled checkpoint files. DeepSpeed's public fragment API (``deepspeed.utils.
safe_get_full_fp32_param``, ``safe_get_full_optimizer_state`` and their setters) assembles
each parameter's fp32 master weight and optimizer state from the ZeRO partitions of every
process, and writes each process's partition back on load. Full tensors make a checkpoint
independent of the ZeRO stage and of the number of processes (a universal checkpoint).
Every function here is collective: call it on every process.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Protocol, TypedDict, cast

import torch
from torch import nn
from torch.nn.modules.module import _IncompatibleKeys

from overdrive.ds.engine import DeepSpeedEngine

_COUNTERS = ("global_steps", "global_samples", "skipped_steps", "micro_steps")


class StepCount(TypedDict):
    """An optimizer's ``step`` entry: its number, and whether it was a tensor."""

    value: object
    tensor: bool


class OptimizerState(TypedDict):
    """What ``optimizer_state_dict`` returns and ``load_optimizer_state_dict`` reads."""

    masters: dict[str, torch.Tensor]  # full fp32 master weight per parameter name
    state: dict[str, dict[str, torch.Tensor]]  # name -> {"exp_avg": ..., ...}
    steps: list[StepCount | None]  # per parameter group
    param_groups: list[dict[str, object]]  # hyper-parameters, without "params"
    engine: dict[str, int]  # the engine's counters
    loss_scaler: dict[str, bool | int | float]


class _Zero3Optimizer(Protocol):
    """DeepSpeed's ZeRO-3 optimizer: flat fp32 partitions, each in one parameter group."""

    fp32_partitioned_groups_flat: list[torch.Tensor]
    sub_group_to_group_id: Mapping[int, int]


class _Zero3Param(Protocol):
    def partition_numel(self) -> int: ...


class _LinkedOptimizer(Protocol):
    """A ZeRO 1/2 (or bf16) optimizer that links parameters to their state fragments."""

    _hp_optimizer_states_linked: bool


def _partitioned(param: torch.Tensor) -> bool:
    """Whether DeepSpeed keeps this parameter's fp32 master in ZeRO/bf16 partitions."""
    # Every process has the attribute (None where another process holds the fragment), so
    # every process takes the same, collective, path.
    return hasattr(param, "ds_id") or hasattr(param, "_hp_mapping")


def _unique(module: nn.Module) -> dict[str, nn.Parameter]:
    """Every parameter name (tied names too) -> its parameter."""
    return dict(module.named_parameters(remove_duplicate=False))


def trainable(module: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """(first name, parameter) of each trainable parameter, in module order."""
    return [(n, p) for n, p in module.named_parameters() if p.requires_grad]


def _gathered(deepspeed: ModuleType, param: nn.Parameter) -> torch.Tensor:
    if not hasattr(param, "ds_id"):
        return param.detach().clone()
    with deepspeed.zero.GatheredParameters([param]):
        return param.detach().clone()


def model_state_dict(
    deepspeed: ModuleType, engine: DeepSpeedEngine, *, fp32_masters: bool, main: bool
) -> dict[str, torch.Tensor]:
    """The full state dict (gathered from ZeRO-3 partitions): the model's own weights, or the
    fp32 master weights of trainable parameters when ``fp32_masters``. Empty except on the
    main process when parameters are partitioned."""
    from deepspeed.utils import safe_get_full_fp32_param

    module = engine.module
    names = list(module.state_dict().keys())
    params = _unique(module)
    if not any(hasattr(p, "ds_id") for p in params.values()):
        state = module.state_dict()
        if fp32_masters:
            for name, p in params.items():
                if p.requires_grad and _partitioned(p):
                    state[name] = safe_get_full_fp32_param(p).detach().cpu()
        return state
    buffers = dict(module.named_buffers())
    done: dict[int, torch.Tensor] = {}
    out: dict[str, torch.Tensor] = {}
    for name in names:
        if name in params:
            p = params[name]
            if id(p) not in done:
                full = safe_get_full_fp32_param(p) if fp32_masters and p.requires_grad else None
                done[id(p)] = (full if full is not None else _gathered(deepspeed, p)).cpu()
            out[name] = done[id(p)]
        elif name in buffers:
            out[name] = buffers[name].detach().cpu()
    return out if main else {}


def _set_hp(param: nn.Parameter, value: torch.Tensor, key: str | None = None) -> None:
    """Write the full fp32 master (or optimizer state ``key``) into this process's partition.

    ZeRO-3 parameters go through the local setter with this process's slice of the value,
    zero-padded as ZeRO-3 partitions it: DeepSpeed's full setter cannot write the padded last
    partition of a tensor whose size the number of processes does not divide.
    """
    from deepspeed.utils import (
        safe_set_full_fp32_param,
        safe_set_full_optimizer_state,
        safe_set_local_fp32_param,
        safe_set_local_optimizer_state,
    )

    value = value.detach().to(torch.float32)
    if not hasattr(param, "ds_id"):
        if key is None:
            safe_set_full_fp32_param(param, value)
        else:
            safe_set_full_optimizer_state(param, value, key)
        return
    import torch.distributed as dist

    group = getattr(param, "ds_process_group", None)
    world = dist.get_world_size(group) if dist.is_initialized() else 1
    rank = dist.get_rank(group) if dist.is_initialized() else 0
    zero3 = cast(_Zero3Param, param)  # ZeRO-3 gave it partition_numel with its ds_id
    size = int(zero3.partition_numel())  # this process's partition, padding included
    padded = torch.zeros(size * world, dtype=torch.float32)
    padded[: value.numel()] = value.flatten().cpu()
    local = padded.narrow(0, rank * size, size)
    if key is None:
        safe_set_local_fp32_param(param, local)
    else:
        safe_set_local_optimizer_state(param, local, key)


def load_model_state_dict(
    deepspeed: ModuleType,
    engine: DeepSpeedEngine,
    state: Mapping[str, torch.Tensor],
    strict: bool = True,
) -> _IncompatibleKeys:
    """Load full weights into the (possibly partitioned) model and its fp32 masters."""
    module = engine.module
    expected = set(module.state_dict().keys())
    missing = sorted(expected - state.keys())
    unexpected = sorted(state.keys() - expected)
    if strict and (missing or unexpected):
        raise RuntimeError(
            f"state dict does not fit the model: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    params = _unique(module)
    loaded: set[int] = set()
    with torch.no_grad():
        for name, p in params.items():
            if name not in state or id(p) in loaded:
                continue
            loaded.add(id(p))
            value = state[name]
            if hasattr(p, "ds_id"):
                with deepspeed.zero.GatheredParameters([p], modifier_rank=0):
                    p.data.copy_(value.to(device=p.device, dtype=p.dtype))
            else:
                p.data.copy_(value.to(device=p.device, dtype=p.dtype))
            if p.requires_grad and _partitioned(p):
                _set_hp(p, value)
        for name, buffer in module.named_buffers():
            if name in state:
                buffer.copy_(state[name].to(device=buffer.device, dtype=buffer.dtype))
    return _IncompatibleKeys(missing, unexpected)


def _slots(engine: DeepSpeedEngine, basic: torch.optim.Optimizer) -> list[tuple[int, torch.Tensor]]:
    """(parameter group, tensor) for each tensor the optimizer keeps state for: the flat fp32
    partitions under ZeRO (ZeRO-3 lists them in its param groups only while it steps)."""
    flats = getattr(engine.optimizer, "fp32_partitioned_groups_flat", None)
    if flats is not None:  # ZeRO-3: one flat fp32 partition per sub-group
        owner = cast(_Zero3Optimizer, engine.optimizer).sub_group_to_group_id
        return [(owner[i], flat) for i, flat in enumerate(flats)]
    return [(i, q) for i, group in enumerate(basic.param_groups) for q in group["params"]]


def _state_keys(engine: DeepSpeedEngine, basic: torch.optim.Optimizer) -> list[str]:
    """The optimizer-state entries shaped like their parameter (``exp_avg``...)."""
    keys: list[str] = []
    for _, q in _slots(engine, basic):
        for key, value in basic.state.get(q, {}).items():
            if torch.is_tensor(value) and value.shape == q.shape and key not in keys:
                keys.append(key)
    return keys


def _step_of(value: object) -> StepCount:
    if torch.is_tensor(value):
        return {"value": float(value.item()), "tensor": True}
    return {"value": value, "tensor": False}


def _relink(engine: DeepSpeedEngine) -> None:
    """Map every parameter to its optimizer-state fragments again. ZeRO 1/2 map them once,
    right after the first parameter group's first step, before the later groups have any
    state: with two groups (decay and no decay) the second stays mapped to nothing, and
    reading its ``exp_avg`` fails. Only where DeepSpeed has mapped them already."""
    optimizer = engine.optimizer
    link = getattr(optimizer, "_lazy_init_hp_params_optimizer_state", None)
    if callable(link) and getattr(optimizer, "_hp_optimizer_states_linked", False):
        cast(_LinkedOptimizer, optimizer)._hp_optimizer_states_linked = False
        link()


def optimizer_state_dict(
    engine: DeepSpeedEngine, basic: torch.optim.Optimizer
) -> dict[str, object]:
    """Full fp32 masters, optimizer state per parameter name, step counts, hyper-parameters,
    the engine's counters and loss scale: everything an exact resume needs (an
    ``OptimizerState``)."""
    from deepspeed.utils import safe_get_full_fp32_param, safe_get_full_optimizer_state

    keys = _state_keys(engine, basic)
    _relink(engine)
    masters: dict[str, torch.Tensor] = {}
    states: dict[str, dict[str, torch.Tensor]] = {}
    for name, p in trainable(engine.module):
        if _partitioned(p):
            masters[name] = safe_get_full_fp32_param(p).detach().cpu()
            states[name] = {k: safe_get_full_optimizer_state(p, k).detach().cpu() for k in keys}
        else:  # ZeRO stage 0 in fp32: the torch optimizer steps the model's parameters
            masters[name] = p.detach().float().cpu()
            own = basic.state.get(p, {})
            states[name] = {k: own[k].detach().cpu() for k in keys if k in own}
    steps: list[StepCount | None] = [None] * len(basic.param_groups)
    for index, q in _slots(engine, basic):
        own = basic.state.get(q, {})
        if "step" in own and steps[index] is None:
            steps[index] = _step_of(own["step"])
    groups = [{k: v for k, v in g.items() if k != "params"} for g in basic.param_groups]
    scaler = getattr(engine.optimizer, "loss_scaler", None)
    saved: OptimizerState = {
        "masters": masters,
        "state": states,
        "steps": steps,
        "param_groups": groups,
        "engine": {name: int(getattr(engine, name, 0)) for name in _COUNTERS},
        "loss_scaler": {k: v for k, v in vars(scaler).items() if isinstance(v, (bool, int, float))}
        if scaler is not None
        else {},
    }
    return dict(saved)


def _ensure_state(engine: DeepSpeedEngine, basic: torch.optim.Optimizer, keys: list[str]) -> None:
    """Create the optimizer state a resumed run has not made yet (optimizers make it in their
    first step), then let DeepSpeed link each parameter's fragments to it, as its own
    universal-checkpoint loader does."""
    for _, q in _slots(engine, basic):
        own = basic.state.setdefault(q, {})
        for key in keys:
            if key not in own:
                own[key] = torch.zeros_like(q, dtype=torch.float32)
    link = getattr(engine.optimizer, "_lazy_init_hp_params_optimizer_state", None)
    if callable(link):  # ZeRO 1/2 and the bf16 optimizer map fragments after the first step
        link()


def load_optimizer_state_dict(
    engine: DeepSpeedEngine, basic: torch.optim.Optimizer, state_dict: Mapping[str, object]
) -> None:
    """Write a state from ``optimizer_state_dict`` back into every process's partitions."""
    saved = cast(OptimizerState, state_dict)
    params = trainable(engine.module)
    names = [n for n, _ in params]
    if sorted(names) != sorted(saved["masters"]):
        raise ValueError(
            f"the checkpoint holds optimizer state for {len(saved['masters'])} parameters, "
            f"this model trains {len(names)} (different names)"
        )
    if len(saved["param_groups"]) != len(basic.param_groups):
        raise ValueError(
            f"the checkpoint has {len(saved['param_groups'])} parameter groups, this optimizer "
            f"{len(basic.param_groups)}"
        )
    keys = sorted({key for state in saved["state"].values() for key in state})
    if any(_partitioned(p) for _, p in params):
        _ensure_state(engine, basic, keys)
    with torch.no_grad():
        for name, p in params:
            master, state = saved["masters"][name], saved["state"][name]
            if _partitioned(p):
                _set_hp(p, master)
                for key, value in state.items():
                    _set_hp(p, value, key)
            else:
                p.data.copy_(master.to(device=p.device, dtype=p.dtype))
                own = basic.state.setdefault(p, {})
                for key, value in state.items():
                    own[key] = value.to(device=p.device, dtype=p.dtype).clone()
    for group, hyper in zip(basic.param_groups, saved["param_groups"]):
        group.update({k: v for k, v in hyper.items() if k in group})
    for index, q in _slots(engine, basic):
        step = saved["steps"][index]
        if step is not None:
            own = basic.state.setdefault(q, {})
            tensor = torch.tensor(step["value"], dtype=torch.float32)
            own["step"] = tensor if step["tensor"] else step["value"]
    for name, count in saved["engine"].items():
        setattr(engine, name, count)
    scaler = getattr(engine.optimizer, "loss_scaler", None)
    for key, setting in saved.get("loss_scaler", {}).items():
        if scaler is not None and hasattr(scaler, key):
            setattr(scaler, key, setting)
