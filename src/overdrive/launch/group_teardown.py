"""Destroying the default process group so that it is really gone, gloo threads included.

``torch.distributed.destroy_process_group()`` only drops torch's registry of the group; the
group itself (and, under gloo, its worker threads) lives on while anything else refers to it.
One such reference is torch's own: ``torch.distributed.nn.functional`` writes
``group=group.WORLD`` as default arguments, evaluated when it is first imported. Creating an
optimizer imports ``torch._dynamo``, which imports that module, so in most training scripts
it is imported after the group exists and keeps the group for the life of the process.

DTensor (FSDP2, tensor and context parallelism) keeps others: its sharding and
redistribution caches hold tensor specs, whose device mesh holds the group.

A group that outlives the script is torn down by interpreter finalization with its threads
still running, which sometimes aborts a process that finished its work (SIGABRT, "terminate
called without an active exception"). Releasing those defaults as well lets the group be
destroyed while the interpreter is whole, its threads joined.
"""

from __future__ import annotations

import gc
import importlib
import sys
import types

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


def destroy_default_group() -> None:
    """Destroy the default process group and release the references torch keeps to it."""
    group = dist.group.WORLD
    dist.destroy_process_group()
    if group is not None:
        release_group_defaults(group)


def destroy_at_exit() -> None:
    """At interpreter exit: collect first (unreachable DDP wrappers hold the group too), then
    destroy the default group while the interpreter is whole."""
    if dist.is_available() and dist.is_initialized():
        clear_dtensor_caches()
        gc.collect()
        destroy_default_group()


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
