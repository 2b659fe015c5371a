"""Moving a forward's inputs and outputs between devices, and the device a model runs on by
default."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar, cast

import torch

from overdrive.bigmodel.device_map import Device
from overdrive.processes.ops import rebuild

T = TypeVar("T")


def default_execution_device() -> torch.device:
    """The first GPU when there is one (the current CUDA device), else MPS, else the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def send_to_device(
    data: T,
    device: Device | None,
    non_blocking: bool = False,
    skip_keys: list[str] | str | None = None,
) -> T:
    """``data`` with every tensor (and every object with a ``.to``) on ``device``; values of
    mappings under a key in ``skip_keys`` stay where they are."""
    skip = {skip_keys} if isinstance(skip_keys, str) else set(skip_keys or ())

    def move(item: object) -> object:
        if isinstance(item, torch.Tensor):
            return item.to(device, non_blocking=non_blocking)
        if hasattr(item, "to") and callable(item.to) and not isinstance(item, type):
            try:  # a container of its own that knows how to move (a BatchEncoding)
                return item.to(device, non_blocking=non_blocking)
            except TypeError:
                return item.to(device)
        if isinstance(item, list | tuple):
            return rebuild(item, [move(v) for v in item])
        if isinstance(item, Mapping):
            return rebuild(item, {k: item[k] if k in skip else move(item[k]) for k in item})
        return item

    return cast(T, move(data))  # the same structure, its tensors moved


def find_device(data: object) -> torch.device | None:
    """The device of the first tensor in ``data`` (depth first), or None."""
    if isinstance(data, torch.Tensor):
        return data.device
    if isinstance(data, Mapping):
        data = list(data.values())
    if isinstance(data, list | tuple):
        for item in data:
            found = find_device(item)
            if found is not None:
                return found
    return None
