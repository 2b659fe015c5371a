"""Destroying the process groups so that they are really gone, gloo threads included, and
in an order that cannot deadlock.

``torch.distributed.destroy_process_group()`` only drops torch's registry of the groups; a
group itself (and, under gloo, its worker threads) lives on while anything else refers to it.
One such reference is torch's own: ``torch.distributed.nn.functional`` writes
``group=group.WORLD`` as default arguments, evaluated when it is first imported. Creating an
optimizer imports ``torch._dynamo``, which imports that module, so in most training scripts
it is imported after the group exists and keeps the group for the life of the process.
DTensor (FSDP2, tensor and context parallelism) keeps others: its sharding and redistribution
caches hold tensor specs, whose device mesh holds the group.

A group that outlives the script is torn down by interpreter finalization with its threads
still running, which sometimes aborts a process that finished its work (SIGABRT, "terminate
called without an active exception"): a gloo worker drops a finished collective a moment
after signalling it done, and dropping a tensor that has a Python object takes the GIL.

Who drops a group's last reference matters for the same reason. Its destructor joins the
worker threads; DDP's reducer drops its reference holding the GIL, so a worker still dropping
a collective waits for the GIL and the join waits for the worker: a deadlock (seen after
``PartialState.destroy_process_group()`` when the DDP model was freed next). A Python
reference to a group releases the GIL in its destructor. So the groups destroyed here are
held until exit, where everything else that holds them has been collected first and these
references are the last: each destructor then joins its threads without the GIL.
"""

from __future__ import annotations

import gc
import importlib
import sys
import types
from typing import Any

import torch.distributed as dist

# Modules torch defines with ``group=group.WORLD`` default arguments.
_MODULES_WITH_GROUP_DEFAULTS = ("torch.distributed.nn.functional",)
# DTensor's caches whose entries hold a device mesh: (module, attribute path to an
# ``lru_cache`` or to a function that empties one).
_DTENSOR_CACHES = (
    ("torch.distributed.tensor.debug", "_clear_sharding_prop_cache"),
    ("torch.distributed.tensor._redistribute", "_gen_transform_infos"),
    ("torch.distributed.tensor._redistribute", "clear_redistribute_planner_cache"),
    ("torch.distributed.tensor._collective_utils", "MeshTopoInfo.build_from_mesh"),
)


_kept: list[Any] = []
"""The groups destroyed here, held until exit (see the module's docstring)."""


def destroy_all_groups() -> None:
    """Destroy every process group (as ``destroy_process_group()`` does) and release the
    references torch keeps to them; the groups end at exit (``destroy_at_exit``)."""
    groups = list(getattr(dist.distributed_c10d._world, "pg_map", {})) or [dist.group.WORLD]
    dist.destroy_process_group()
    _kept.extend(group for group in groups if group is not None)
    for group in _kept:
        release_group_defaults(group)


def destroy_at_exit() -> None:
    """At exit, while the interpreter is whole: empty DTensor's caches, collect (unreachable
    DDP wrappers hold the groups too), destroy the groups still open, then drop the last
    references, so that each group joins its threads now rather than in finalization."""
    if not (dist.is_available() and (dist.is_initialized() or _kept)):
        return
    clear_dtensor_caches()
    gc.collect()
    if dist.is_initialized():
        destroy_all_groups()
    _kept.clear()


def clear_dtensor_caches() -> None:
    """Empty DTensor's caches of sharding decisions (each entry holds a device mesh, and so
    its groups). Only caches: the next DTensor operation fills them again. Names a torch
    release lacks are skipped."""
    if "torch.distributed.tensor" not in sys.modules:
        return  # no DTensor was made
    for module_name, path in _DTENSOR_CACHES:
        try:
            cached: object = importlib.import_module(module_name)
        except ImportError:
            continue
        for name in path.split("."):
            cached = getattr(cached, name, None)
        clear = getattr(cached, "cache_clear", cached)
        if callable(clear):
            clear()


def release_group_defaults(group: object) -> None:
    """Replace ``group`` where torch captured it as a default argument with ``None`` (the
    default group), what those functions hold when imported before any group exists."""
    for name in _MODULES_WITH_GROUP_DEFAULTS:
        module = sys.modules.get(name)
        if module is None:
            continue
        for value in vars(module).values():
            if not isinstance(value, types.FunctionType) or not value.__defaults__:
                continue
            if any(default is group for default in value.__defaults__):
                value.__defaults__ = tuple(
                    None if default is group else default for default in value.__defaults__
                )
