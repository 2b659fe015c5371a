"""Count the collectives a process issues, with their bytes, at the dispatcher.

Every ``torch.distributed`` collective, DDP's C++ reducer and FSDP2's included, reaches the
dispatcher as a ``c10d`` operator (``c10d.allreduce_``, ``c10d._allgather_base_``, ...), and
the functional collectives as ``_c10d_functional`` ones; so one mode counts the same calls on
a real process group and on a fake one.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

KINDS = {
    "allreduce_": "all_reduce",
    "all_reduce": "all_reduce",
    "allreduce_coalesced_": "all_reduce",
    "_allgather_base_": "all_gather",
    "allgather_": "all_gather",
    "allgather_into_tensor_coalesced_": "all_gather",
    "all_gather_into_tensor": "all_gather",
    "all_gather_into_tensor_coalesced": "all_gather",
    "allgather_coalesced_": "all_gather",
    "_reduce_scatter_base_": "reduce_scatter",
    "reduce_scatter_": "reduce_scatter",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "broadcast_": "broadcast",
    "broadcast": "broadcast",
    "alltoall_": "all_to_all",
    "alltoall_base_": "all_to_all",
    "all_to_all_single": "all_to_all",
    "reduce_": "reduce",
    "gather_": "gather",
    "scatter_": "scatter",
    "send": "send",
    "recv_": "recv",
    "recv_any_source_": "recv",
    "barrier": "barrier",
}
"""Operator name (``c10d`` or ``_c10d_functional`` namespace) -> the kind it is reported as."""


OUTPUT_FIRST = {
    "_allgather_base_",
    "allgather_",
    "allgather_coalesced_",
    "allgather_into_tensor_coalesced_",
    "_reduce_scatter_base_",
    "reduce_scatter_",
    "reduce_scatter_tensor_coalesced_",
}
"""The ``c10d`` operators whose first argument is the output (the input comes second)."""


def operator_name(func: Any) -> str | None:
    """A ``c10d`` or ``_c10d_functional`` operator's name without its namespace (the keys of
    ``KINDS``); None for any other operator."""
    if getattr(func, "namespace", "") not in ("c10d", "_c10d_functional"):
        return None
    return str(func._schema.name.split("::", 1)[-1])


def _input_bytes(name: str, args: tuple[Any, ...]) -> int:
    """The bytes one rank puts in: the input's tensors (for an all-reduce or a broadcast, the
    buffer it works in place)."""
    source = args[1] if name in OUTPUT_FIRST else args[0]
    return sum(t.numel() * t.element_size() for t in tree_leaves(source) if _is_tensor(t))


def _is_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor)


_WRAPPERS: dict[type, bool] = {torch.Tensor: False}


def _is_wrapper(kind: type) -> bool:
    """A tensor subclass that dispatches its operators to inner tensors (a DTensor), as
    opposed to a plain or fake tensor, whose operators this mode handles itself (asked for
    every operator: the answer is kept per type)."""
    known = _WRAPPERS.get(kind)
    if known is None:
        from torch._subclasses.fake_tensor import FakeTensor

        known = _WRAPPERS[kind] = not issubclass(kind, (FakeTensor, torch.nn.Parameter))
    return known


def _group(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, Any]:
    """The group a collective runs on, by the mesh dimension it belongs to (``dp_shard``,
    ``tp`` ...), ``world`` for the default group, else the group's own description; and the
    group itself (None where the operator names none)."""
    import torch.distributed as dist

    for value, argument in zip(args, func._schema.arguments, strict=False):
        if argument.name == "process_group":
            group = dist.ProcessGroup.unbox(value)
            break
        if argument.name == "group_name":
            group = dist.distributed_c10d._resolve_process_group(value)
            break
    else:
        return "?", None
    description = str(group.group_desc)
    if description == "default_pg":
        return "world", group
    return description.removeprefix("mesh_"), group


def _members(group: Any) -> list[int]:
    """The global ranks of ``group`` (empty where PyTorch does not know them)."""
    import torch.distributed as dist

    try:
        return list(dist.get_process_group_ranks(group))
    except (ValueError, RuntimeError):
        return []


Snapshot = dict[str, dict[str, Any]]
"""Kind -> {"count", "bytes", "groups": {group: {"count", "bytes"}}}."""


class CollectiveCounter(TorchDispatchMode):
    """While active, counts each collective by kind and group: calls, and the bytes this rank
    put into them."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[tuple[str, str]] = Counter()
        self.sizes: Counter[tuple[str, str]] = Counter()
        self.members: dict[str, list[int]] = {}
        """Group -> its global ranks, for each group a collective ran on."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if any(_is_wrapper(t) for t in types):
            # A DTensor's operator runs its own code (sharding, redistribution, context
            # parallelism's ring) on local tensors: let it, so that the collectives it issues
            # come back here, as they would not from inside this mode's own call.
            return NotImplemented
        name = operator_name(func)
        if name is not None:
            kind = KINDS.get(name)
            if kind is not None:
                name_of_group, group = _group(func, args, kwargs or {})
                if name_of_group not in self.members and group is not None:
                    self.members[name_of_group] = _members(group)
                key = (kind, name_of_group)
                self.counts[key] += 1
                self.sizes[key] += _input_bytes(name, args)
        return self.call(func, args, kwargs or {})

    def call(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        """Run the operator (below this mode)."""
        return func(*args, **kwargs)

    def snapshot(self) -> Snapshot:
        """Every collective so far."""
        out: Snapshot = {}
        for kind, group in sorted(self.counts):
            count, size = self.counts[kind, group], self.sizes[kind, group]
            entry = out.setdefault(kind, {"count": 0, "bytes": 0, "groups": {}})
            entry["count"] += count
            entry["bytes"] += size
            entry["groups"][group] = {"count": count, "bytes": size}
        return out


def difference(later: Snapshot, earlier: Snapshot) -> Snapshot:
    """The collectives between two snapshots (kinds and groups with none left out)."""
    out: Snapshot = {}
    for kind, now in later.items():
        before = earlier.get(kind, {"groups": {}})["groups"]
        for group, counted in now["groups"].items():
            old = before.get(group, {"count": 0, "bytes": 0})
            count, size = counted["count"] - old["count"], counted["bytes"] - old["bytes"]
            if count:
                entry = out.setdefault(kind, {"count": 0, "bytes": 0, "groups": {}})
                entry["count"] += count
                entry["bytes"] += size
                entry["groups"][group] = {"count": count, "bytes": size}
    return out
