"""``accelerate.utils.other``: unwrapping prepared models (``transformers.unwrap_model`` calls
``extract_model_from_parallel``), regional compilation, safe save/load, ports, and small
helpers."""

from __future__ import annotations

import functools
import logging
import socket
from typing import Any

import numpy as np
import torch
from torch import nn

from overdrive.bigmodel.tensor_files import shared_storage_ties
from overdrive.checkpoint.serialization import WEIGHTS_ONLY_GLOBALS, load_weights_only
from overdrive.compile.regions import (
    compile_regions,
    compile_regions_deepspeed,
    compile_regions_fsdp2,
    has_compiled_regions,
    has_repeated_blocks,
    is_compiled_module,
    is_repeated_blocks,
)
from overdrive.launch.ports import free_port
from overdrive.precision.autocast import AutocastForward
from overdrive.processes.process_state import current_partial_state
from overdrive.utils.environment import write_basic_config
from overdrive.utils.saving import save
from overdrive.utils.system import check_os_kernel

logger = logging.getLogger(__name__)

__all__ = [
    "TORCH_SAFE_GLOBALS",
    "check_os_kernel",
    "clean_state_dict_for_safetensors",
    "compile_regions",
    "compile_regions_deepspeed",
    "compile_regions_fsdp2",
    "convert_bytes",
    "extract_model_from_parallel",
    "get_free_port",
    "get_model_tp_size",
    "get_module_children_bottom_up",
    "get_pretty_name",
    "has_compiled_regions",
    "has_repeated_blocks",
    "is_compiled_module",
    "is_port_in_use",
    "is_repeated_blocks",
    "load",
    "logger",
    "merge_dicts",
    "model_has_dtensor",
    "np_core",
    "recursive_getattr",
    "save",
    "wait_for_everyone",
    "write_basic_config",
]


def _wrappers() -> tuple[type, ...]:
    """The distributed containers that hold the user's module as ``.module``."""
    kinds: list[type] = [nn.parallel.DistributedDataParallel, nn.DataParallel]
    try:
        from deepspeed import DeepSpeedEngine

        kinds.append(DeepSpeedEngine)
    except ImportError:
        pass
    if torch.distributed.is_available():
        from torch.distributed.fsdp import FullyShardedDataParallel

        kinds.append(FullyShardedDataParallel)
    return tuple(kinds)


def extract_model_from_parallel(
    model: nn.Module,
    keep_fp32_wrapper: bool = True,
    keep_torch_compile: bool = True,
    recursive: bool = False,
) -> nn.Module:
    """The user's module from under DDP / DataParallel / DeepSpeed / FSDP and (unless kept)
    torch.compile wrappers, whole-model or regional.

    ``keep_fp32_wrapper=False`` also removes overdrive's autocast forward; ``recursive`` also
    unwraps wrapped submodules.
    """
    compiled = None
    if is_compiled_module(model) or "_orig_mod" in model.__dict__:
        compiled = model
        inner = model._orig_mod if is_compiled_module(model) else model.__dict__["_orig_mod"]
        assert isinstance(inner, nn.Module)
        model = inner
    wrappers = _wrappers()
    while isinstance(model, wrappers):
        model = model.module  # type: ignore[assignment]
    if not keep_fp32_wrapper:
        _drop_fp32_forward(model)
    if recursive:
        for name, child in list(model.named_children()):
            unwrapped = extract_model_from_parallel(
                child, keep_fp32_wrapper, keep_torch_compile, recursive=True
            )
            if unwrapped is not child:
                setattr(model, name, unwrapped)
    if keep_torch_compile and compiled is not None:
        if is_compiled_module(compiled):
            compiled._orig_mod = model  # the compiled wrapper, now around the unwrapped module
        else:  # regional compilation keeps the original outside its submodules
            compiled.__dict__["_orig_mod"] = model
        return compiled
    return model


def _drop_fp32_forward(model: nn.Module) -> None:
    """Take off overdrive's autocast forward, or a ``convert_outputs_to_fp32`` wrapper whose
    original forward the model kept in ``_original_forward``."""
    forward: Any = model.__dict__.get("forward")
    if isinstance(forward, AutocastForward):
        del model.forward
        return
    original = model.__dict__.pop("_original_forward", None)
    if original is None or forward is None:
        return
    # `==`: two reads of a bound method are equal but not the same object
    while forward != original and hasattr(forward, "__wrapped__"):
        forward = forward.__wrapped__
    if forward == original:
        model.forward = original


def get_model_tp_size(model: nn.Module) -> int | None:
    """The tensor-parallel degree a transformers model was sharded with, or None.

    transformers before 5 keeps it on the model (``model.tp_size``); from 5 on it sits in the
    config's ``distributed_config`` and ``model.tp_size`` stays as a None stub.
    """
    size = getattr(model, "tp_size", None)
    if size is not None:
        return int(size)
    config = getattr(getattr(model, "config", None), "distributed_config", None)
    found = config.get("tp_size") if isinstance(config, dict) else getattr(config, "tp_size", None)
    return None if found is None else int(found)


def model_has_dtensor(model: nn.Module) -> bool:
    """Whether any of ``model``'s parameters is a ``DTensor`` (sharded by FSDP2 or TP)."""
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in model.parameters())


def wait_for_everyone() -> None:
    """Block until every process reaches this call (all of them must reach it)."""
    current_partial_state().wait_for_everyone()


def clean_state_dict_for_safetensors(state_dict: dict[str, Any]) -> dict[str, Any]:
    """``state_dict`` with one name kept per shared storage (safetensors refuses aliases; the
    others are deleted from ``state_dict`` too, with a warning) and every tensor contiguous.
    String entries (bitsandbytes metadata) pass through."""
    removed = set(shared_storage_ties(state_dict, whole_storage=True))
    for name in removed:
        del state_dict[name]
    if removed:
        logger.warning(
            f"Removed shared tensor {removed} while saving. This should be OK, but check by "
            "verifying that you don't receive any warning while reloading"
        )
    return {k: v.contiguous() if isinstance(v, torch.Tensor) else v for k, v in state_dict.items()}


# numpy's core module moved in 2.0; its array rebuilder is one of the safe globals.
np_core = np._core if hasattr(np, "_core") else np.core
# What `load` lets torch.load rebuild besides tensors (the engine's list; appending here
# widens `load` only).
TORCH_SAFE_GLOBALS: list[Any] = list(WEIGHTS_ONLY_GLOBALS)


def load(f: Any, map_location: Any = None, **kwargs: Any) -> Any:
    """``torch.load`` with ``weights_only=True`` unless the caller says otherwise: only
    tensors, plain containers and ``TORCH_SAFE_GLOBALS`` are rebuilt, never arbitrary pickled
    objects. The allowed globals apply to this call only."""
    return load_weights_only(f, map_location, allowed=TORCH_SAFE_GLOBALS, **kwargs)


def get_pretty_name(obj: Any) -> str:
    """``obj``'s qualified name, or its class's for an instance."""
    if not hasattr(obj, "__qualname__") and not hasattr(obj, "__name__"):
        obj = getattr(obj, "__class__", obj)
    if hasattr(obj, "__qualname__"):
        return str(obj.__qualname__)
    if hasattr(obj, "__name__"):
        return str(obj.__name__)
    return str(obj)


def merge_dicts(source: dict[Any, Any], destination: dict[Any, Any]) -> dict[Any, Any]:
    """Merge ``source`` into ``destination`` (in place, also returned), nested dicts key by key."""
    for key, value in source.items():
        if isinstance(value, dict):
            merge_dicts(value, destination.setdefault(key, {}))
        else:
            destination[key] = value
    return destination


def is_port_in_use(port: int | None = None) -> bool:
    """Whether something accepts connections on ``localhost:port`` (default 29500)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        return sock.connect_ex(("localhost", 29500 if port is None else port)) == 0


def get_free_port() -> int:
    """A port the operating system reports free right now."""
    return free_port()


def convert_bytes(size: float) -> str:
    """``size`` bytes in the largest unit below 1024 of it ("1.5 KB", "3.0 GB"), up to PB."""
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if size < 1024.0:
            return f"{round(size, 2)} {unit}"
        size /= 1024.0
    return f"{round(size, 2)} PB"


def recursive_getattr(obj: Any, attr: str) -> Any:
    """``getattr`` along a dotted path: ``recursive_getattr(model, "encoder.layer")``."""
    return functools.reduce(getattr, attr.split("."), obj)


def get_module_children_bottom_up(model: nn.Module, return_fqns: bool = False) -> list[Any]:
    """Every module under ``model`` with children before their parents, ``model`` last (as
    ``(qualified name, module)`` pairs with ``return_fqns``)."""
    stack: list[tuple[str, nn.Module]] = [("", model)]
    order: list[tuple[str, nn.Module]] = []
    while stack:
        prefix, module = stack.pop()
        for name, child in module.named_children():
            if isinstance(child, nn.Module):
                stack.append((f"{prefix}.{name}" if prefix else name, child))
        order.append((prefix, module))
    order.reverse()
    return order if return_fqns else [module for _, module in order]
