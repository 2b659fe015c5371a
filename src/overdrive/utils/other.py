"""``accelerate.utils.other``: unwrapping prepared models (``transformers.unwrap_model`` calls
``extract_model_from_parallel``), regional compilation, safe save/load, ports, and small
helpers."""

from __future__ import annotations

import functools
import logging
import socket
from typing import Any

import numpy as np
from torch import nn

from overdrive.bigmodel.tensor_files import clean_state_dict_for_safetensors
from overdrive.bigmodel.write_once import save
from overdrive.checkpoint.serialization import WEIGHTS_ONLY_GLOBALS, load_weights_only
from overdrive.cli.basic_config import write_basic_config
from overdrive.compile.regions import (
    compile_regions,
    compile_regions_deepspeed,
    compile_regions_fsdp2,
    has_compiled_regions,
    has_repeated_blocks,
    is_compiled_module,
    is_repeated_blocks,
)
from overdrive.environment.kernel import check_os_kernel
from overdrive.launch.ports import free_port
from overdrive.processes.process_state import current_partial_state
from overdrive.strategies.unwrap import (
    extract_model_from_parallel,
    get_model_tp_size,
    model_has_dtensor,
)

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


def wait_for_everyone() -> None:
    """Block until every process reaches this call (all of them must reach it)."""
    current_partial_state().wait_for_everyone()


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
