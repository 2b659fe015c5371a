"""``accelerate.utils.save``: write an object once per job (or per machine), atomically."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import torch

from overdrive.errors import ConfigError
from overdrive.process_state import current_partial_state


def without_shared_storage(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` with one entry kept per storage (tied weights are one tensor on disk, as
    safetensors requires), each made contiguous."""
    kept: dict[str, torch.Tensor] = {}
    first: dict[tuple[Any, ...], str] = {}
    removed: list[str] = []
    for name, tensor in state.items():
        key = (tensor.device, tensor.untyped_storage().data_ptr(), tensor.storage_offset())
        if tensor.numel() and key in first:
            removed.append(f"{name} (shares {first[key]})")
            continue
        first.setdefault(key, name)
        kept[name] = tensor.contiguous()
    if removed:
        logging.getLogger(__name__).warning(
            f"Removed shared tensor {removed} while saving. This should be OK, but check by "
            "verifying that you don't receive any warning while reloading"
        )
    return kept


def write_once(obj: Any, f: str | os.PathLike[str], safe_serialization: bool = False) -> None:
    """Write ``obj`` to ``f``: safetensors for a dict of tensors with ``safe_serialization``,
    else ``torch.save``; the file appears whole or not at all."""
    path = Path(f)
    tmp = path.with_name(path.name + ".tmp")
    if safe_serialization:
        from safetensors.torch import save_file

        if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
            raise ConfigError(
                "save(..., safe_serialization=True) needs a dict of tensors",
                key="safe_serialization",
                fix="pass a state dict, or safe_serialization=False for other objects",
            )
        save_file(without_shared_storage(obj), str(tmp), metadata={"format": "pt"})
    else:
        torch.save(obj, tmp)
    tmp.replace(path)


def save(
    obj: Any,
    f: str | os.PathLike[str],
    save_on_each_node: bool = False,
    safe_serialization: bool = False,
) -> None:
    """Save ``obj`` from the main process (each machine's with ``save_on_each_node``)."""
    state = current_partial_state()
    writer = state.is_local_main_process if save_on_each_node else state.is_main_process
    if writer:
        write_once(obj, f, safe_serialization)
