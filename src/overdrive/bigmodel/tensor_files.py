"""Tensors made ready for a file, and the file written whole: each shared storage kept once
(safetensors refuses shared memory), and a temporary renamed into place.

Light on purpose (torch and ``bigmodel.sizes`` only): ``accelerate.utils.save`` and the
Accelerator's ``save`` use it without loading the checkpoint package.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Hashable, Mapping
from pathlib import Path

import torch

from overdrive.bigmodel.sizes import id_tensor_storage

logger = logging.getLogger(__name__)


def shared_storage_ties(
    state: Mapping[str, object], *, whole_storage: bool = False
) -> dict[str, str]:
    """For each tensor of ``state`` that aliases an earlier one: its name -> the earlier name
    (non-tensor values are skipped).

    By default a tensor aliases an earlier one when it is the same view of the same memory
    (device, storage, offset and shape; empty tensors alias nothing): a model's tied weights.
    ``whole_storage``: any two tensors on one storage, empty ones included, by
    ``id_tensor_storage`` (Hugging Face's ``clean_state_dict_for_safetensors`` rule)."""
    ties: dict[str, str] = {}
    seen: dict[Hashable, str] = {}
    for name, value in state.items():
        if not isinstance(value, torch.Tensor):
            continue
        key: Hashable
        if whole_storage:
            key = id_tensor_storage(value)
        elif value.numel():
            key = (
                value.device,
                value.untyped_storage().data_ptr(),
                value.storage_offset(),
                tuple(value.shape),
            )
        else:
            continue
        if key in seen:
            ties[name] = seen[key]
        else:
            seen[key] = name
    return ties


def untied_tensors(state: Mapping[str, object]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors of ``state`` with each tied group kept once (safetensors refuses shared
    memory), on the CPU and contiguous, each with memory of its own (a view of a larger or
    already-kept storage is copied); and the ties (``shared_storage_ties``), as Hugging Face
    models expect them."""
    ties = shared_storage_ties(state)
    kept: dict[str, torch.Tensor] = {}
    storages: set[int] = set()
    for name, value in state.items():
        if not isinstance(value, torch.Tensor) or name in ties:
            continue
        t = value.detach().cpu().contiguous()
        storage = t.untyped_storage()
        if storage.nbytes() != t.numel() * t.element_size() or (
            t.numel() and storage.data_ptr() in storages
        ):
            t = t.clone()
        storages.add(t.untyped_storage().data_ptr())
        kept[name] = t
    return kept, ties


def replace_atomically(path: Path, write: Callable[[Path], object]) -> None:
    """``write`` a hidden temporary beside ``path``, then rename it over ``path``: the file
    appears whole or not at all, and a failed write leaves no temporary behind."""
    temp = path.with_name(f".{path.name}.tmp")
    try:
        write(temp)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def clean_state_dict_for_safetensors(state_dict: dict[str, object]) -> dict[str, object]:
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
