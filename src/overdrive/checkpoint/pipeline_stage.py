"""Pipeline-parallel state in the sharded checkpoint format: each stage writes its own part.

Every process of a pipeline builds the same tree for the whole model (or optimizer), keyed
by the unsplit model's names exactly as FSDP's and tensor parallelism's sharded state dicts
are (``model.layers.3.mlp.up_proj.weight``; an optimizer's ``{"state": {name: ...},
"param_groups": [{..., "params": [names]}]}``, the form of
``torch.distributed.checkpoint.state_dict``). Its own stage's tensors are boxes covering the
whole tensor, written by the stage's first data-parallel replica only; every other stage's
are placeholders on the meta device that carry a shape and a dtype and are written by no
one. Only that skeleton (names, shapes, dtypes, plain values) crosses the pipeline, never a
tensor, so no process holds more than its stage. The main process writes the tree, so the
files read as any sharded checkpoint: under FSDP, tensor parallelism, another pipeline.

On load the same tree is the template: ``checkpoint.shards.read_as`` reads this stage's
boxes and nothing for the placeholders (they come back as None).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar, cast

import torch

from overdrive.checkpoint.errors import CheckpointError
from overdrive.checkpoint.records import StateDict
from overdrive.checkpoint.serialization import is_dtensor
from overdrive.checkpoint.shards import LocalShard

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

T = TypeVar("T")

_FIX = "  fix: build the model and optimizer exactly as in the run that saved the checkpoint"


@dataclass(frozen=True)
class _Held:
    """A tensor another stage holds: what its placeholder needs."""

    shape: tuple[int, ...]
    dtype: torch.dtype

    @classmethod
    def of(cls, tensor: torch.Tensor) -> _Held:
        return cls(tuple(tensor.shape), tensor.dtype)

    def placeholder(self) -> LocalShard:
        data = torch.empty(0, dtype=self.dtype, device="meta")
        return LocalShard(data, self.shape, (0,) * len(self.shape), write=False)


def _box(tensor: torch.Tensor, write: bool) -> LocalShard:
    """The whole of a tensor this stage holds, as the one box of its global tensor."""
    return LocalShard(tensor.detach(), tuple(tensor.shape), (0,) * tensor.dim(), write=write)


def _skeleton(value: object) -> object:
    return _Held.of(value) if isinstance(value, torch.Tensor) else value


def _gather(obj: T, group: ProcessGroup | None) -> list[T]:
    """Every stage's ``obj``, in stage order (small: names, shapes, dtypes, plain values)."""
    import torch.distributed as dist

    if group is None or not dist.is_initialized():
        return [obj]
    out: list[object] = [None] * dist.get_world_size(group)
    dist.all_gather_object(out, obj, group=group)
    return cast("list[T]", out)  # every stage sends the same kind of object


def _entry(name: str, own: Mapping[str, object], held: object, write: bool) -> object:
    """A leaf of the whole tree: this stage's tensor as a box (a DTensor, split by the
    chain, as it is: it writes and reads its own boxes), another's as a placeholder."""
    if name in own:
        value = own[name]
        if is_dtensor(value):
            return value.detach()
        return _box(value, write) if isinstance(value, torch.Tensor) else value
    return held.placeholder() if isinstance(held, _Held) else held


# --- the model ----------------------------------------------------------------------------
def stage_model_state(
    module: torch.nn.Module, names: Mapping[str, str], group: ProcessGroup | None, *, write: bool
) -> StateDict:
    """The whole model's state dict: this stage's tensors as boxes, the others' as
    placeholders; collective over the pipeline ``group``."""
    own: dict[str, object] = {
        names[name]: t for name, t in module.state_dict(keep_vars=True).items() if name in names
    }
    tree: StateDict = {}
    for skeleton in _gather({k: _skeleton(t) for k, t in own.items()}, group):
        for name, held in skeleton.items():
            tree[name] = _entry(name, own, held, write)
    return tree


# --- the optimizer ------------------------------------------------------------------------
def init_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """Create the optimizer's state if it has none, as FSDP's sharded state dict does (one
    step with zero gradients and lr 0), so that every parameter has entries to save or
    to load into."""
    from torch.distributed.checkpoint.state_dict import _init_optim_state

    _init_optim_state(optimizer)


def stage_optimizer_state(
    optimizer: torch.optim.Optimizer,
    names: Mapping[int, str],
    group: ProcessGroup | None,
    *,
    write: bool,
) -> StateDict:
    """The whole optimizer's state keyed by parameter name (``torch.distributed.checkpoint``'s
    form): this stage's tensors as boxes, the others' as placeholders, every stage's
    parameters listed in ``param_groups``; collective over the pipeline ``group``."""
    init_optimizer_state(optimizer)
    saved = optimizer.state_dict()
    params = [p for g in optimizer.param_groups for p in g["params"]]
    state = {names[id(params[i])]: entries for i, entries in saved["state"].items()}
    groups = [
        {
            **{k: v for k, v in g.items() if k != "params"},
            "params": [names[id(params[i])] for i in g["params"]],
        }
        for g in saved["param_groups"]
    ]
    skeleton: StateDict = {
        "state": {n: {k: _skeleton(v) for k, v in e.items()} for n, e in state.items()},
        "param_groups": groups,
    }
    stages = _gather(skeleton, group)
    tree_state: StateDict = {}
    for part in stages:
        for name, entries in part["state"].items():
            own = state.get(name, {})
            tree_state[name] = {k: _entry(k, own, held, write) for k, held in entries.items()}
    tree_groups = [
        {**first, "params": [n for part in stages for n in part["param_groups"][i]["params"]]}
        for i, first in enumerate(stages[0]["param_groups"])
    ]
    return {"state": tree_state, "param_groups": tree_groups}


def load_stage_optimizer(
    optimizer: torch.optim.Optimizer, names: Mapping[int, str], state: StateDict
) -> None:
    """Load this stage's entries of a name-keyed optimizer state (saved by any layout):
    each parameter's state by its name, each group's hyper-parameters from the saved group
    that lists its parameters."""
    saved_groups = list(state.get("param_groups", []))
    saved_state = state.get("state", {})
    groups: list[StateDict] = []
    entries: dict[int, StateDict] = {}
    index = 0
    for i, live in enumerate(optimizer.param_groups):
        fqns = [names[id(p)] for p in live["params"]]
        saved = _saved_group(saved_groups, fqns, i, len(optimizer.param_groups))
        ids = []
        for p, fqn in zip(live["params"], fqns, strict=True):
            entry = saved_state.get(fqn)
            if entry is None and p.requires_grad and saved_state:
                raise CheckpointError(
                    f"the saved optimizer state has no entry for parameter {fqn!r}\n{_FIX}"
                )
            if entry is not None:
                entries[index] = dict(entry)
            ids.append(index)
            index += 1
        groups.append({**{k: v for k, v in saved.items() if k != "params"}, "params": ids})
    optimizer.load_state_dict({"state": entries, "param_groups": groups})


def _saved_group(
    saved_groups: list[StateDict], fqns: list[str], index: int, live_count: int
) -> StateDict:
    """The saved parameter group holding ``fqns`` (by position for a group this stage
    holds no parameter of)."""
    if not fqns:
        if len(saved_groups) != live_count:
            raise CheckpointError(
                f"the saved optimizer has {len(saved_groups)} parameter groups, this one "
                f"{live_count}\n{_FIX}"
            )
        return saved_groups[index]
    matches = [g for g in saved_groups if fqns[0] in g.get("params", [])]
    if not matches:
        raise CheckpointError(
            f"no parameter group of the saved optimizer lists parameter {fqns[0]!r}\n{_FIX}"
        )
    listed = set(matches[0]["params"])
    stray = [n for n in fqns if n not in listed]
    if stray:
        raise CheckpointError(
            f"parameter group {index} holds {fqns[0]!r} and {stray[0]!r}, which the saved "
            f"optimizer put in different groups\n{_FIX}"
        )
    return matches[0]


# --- whole (not sharded): every stage's tensors gathered onto the main process ---------
def _cpu(value: object) -> object:
    """A whole tensor on the CPU (a DTensor's gathered over its mesh: collective)."""
    if not isinstance(value, torch.Tensor):
        return value
    full = getattr(value, "full_tensor", None)
    return (full() if callable(full) else value).detach().cpu()


def _is_main() -> bool:
    import torch.distributed as dist

    return not dist.is_initialized() or dist.get_rank() == 0


def whole_model_state(
    module: torch.nn.Module, names: Mapping[str, str], group: ProcessGroup | None
) -> StateDict:
    """The whole model's weights, by the unsplit model's names, on the main process (an
    empty dict elsewhere); collective over the pipeline ``group``."""
    own = {
        names[name]: _cpu(t)
        for name, t in module.state_dict(keep_vars=True).items()
        if name in names
    }
    full: StateDict = {}
    for part in _gather(own, group):
        full.update(part)
    return full if _is_main() else {}


def whole_optimizer_state(
    optimizer: torch.optim.Optimizer, names: Mapping[int, str], group: ProcessGroup | None
) -> StateDict:
    """Every stage's optimizer state by parameter name, its groups listing every stage's
    parameters, on the main process (an empty dict elsewhere); collective over ``group``."""
    saved = optimizer.state_dict()
    params = [p for g in optimizer.param_groups for p in g["params"]]
    state = {
        names[id(params[i])]: {k: _cpu(v) for k, v in entries.items()}
        for i, entries in saved["state"].items()
    }
    groups = [
        {**{k: v for k, v in g.items() if k != "params"}, "params": [names[id(p)] for p in live]}
        for g, live in zip(
            saved["param_groups"], (g["params"] for g in optimizer.param_groups), strict=True
        )
    ]
    parts = _gather((state, groups), group)
    if not _is_main():
        return {}
    full_state: StateDict = {}
    full_groups: list[StateDict] = [dict(g, params=[]) for g in groups]
    for part_state, part_groups in parts:
        full_state.update(part_state)
        for merged, part in zip(full_groups, part_groups, strict=True):
            merged["params"] += part["params"]
    return {"state": full_state, "param_groups": full_groups}


def load_whole_optimizer(
    optimizer: torch.optim.Optimizer, names: Mapping[int, str], state: StateDict
) -> None:
    """Load this stage's entries of a whole optimizer state (by parameter name; the groups
    by position, their hyper-parameters from the saved ones)."""
    saved_groups = state["param_groups"]
    if len(saved_groups) != len(optimizer.param_groups):
        raise CheckpointError(
            f"the saved optimizer has {len(saved_groups)} parameter groups, this one "
            f"{len(optimizer.param_groups)}\n{_FIX}"
        )
    index: dict[str, int] = {}
    groups = []
    for saved, live in zip(saved_groups, optimizer.param_groups, strict=True):
        ids = []
        for p in live["params"]:
            index[names[id(p)]] = len(index)
            ids.append(index[names[id(p)]])
        groups.append({**{k: v for k, v in saved.items() if k != "params"}, "params": ids})
    entries = {index[name]: s for name, s in state["state"].items() if name in index}
    optimizer.load_state_dict({"state": entries, "param_groups": groups})
