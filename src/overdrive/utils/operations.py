"""The described system's collective functions (``accelerate.utils.operations``).

They act on the default process group, like ``overdrive.ops``, with the described system's
signatures and defaults (``reduce`` averages unless told otherwise). Setting
``state.debug = True`` on a process state makes them check shapes first and raise
``DistributedOperationException`` on every process instead of hanging.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from overdrive import ops
from overdrive.ops import (
    CollectiveMismatchError,
    DistributedOperationException,
    broadcast_object_list,
    gather_object,
    is_namedtuple,
)
from overdrive.utils.nesting import (
    CannotPadNestedTensorWarning,
    concatenate,
    find_device,
    honor_type,
    is_torch_tensor,
    listify,
    recursively_apply,
)

__all__ = [
    "CannotPadNestedTensorWarning",
    "CollectiveMismatchError",
    "DistributedOperationException",
    "broadcast",
    "broadcast_object_list",
    "concatenate",
    "find_device",
    "honor_type",
    "is_namedtuple",
    "is_torch_tensor",
    "listify",
    "recursively_apply",
    "copy_tensor_to_devices",
    "gather",
    "gather_object",
    "pad_across_processes",
    "reduce",
    "send_to_device",
]


def gather(tensor: Any) -> Any:
    """Concatenate ``tensor`` (or a nest of tensors) from every process along dim 0."""
    return ops.gather(tensor)


def reduce(tensor: Any, reduction: str = "mean", scale: float = 1.0) -> Any:
    """Reduce over every process ("mean", "sum", "max", "min", "product"), times ``scale``."""
    out = ops.reduce(tensor, reduction)
    if out is tensor:  # one process: still a new tensor, as with several
        out = ops.map_tensors(lambda t: t.clone(), tensor)
    return out if scale == 1.0 else ops.map_tensors(lambda t: t * scale, out)


def broadcast(tensor: Any, from_process: int = 0) -> Any:
    """Every process gets ``from_process``'s tensors."""
    return ops.broadcast(tensor, from_process)


def pad_across_processes(
    tensor: Any, dim: int = 0, pad_index: int = 0, pad_first: bool = False
) -> Any:
    """Pad along ``dim`` to the largest size any process holds (a nested tensor, which cannot
    be padded, comes back as it is, with a ``CannotPadNestedTensorWarning``)."""
    if getattr(tensor, "is_nested", False):
        warnings.warn(
            "pad_across_processes cannot pad a nested tensor; it is returned as it is",
            CannotPadNestedTensorWarning,
            stacklevel=2,
        )
        return tensor
    return ops.pad_across_processes(tensor, dim, pad_index, pad_first)


def send_to_device(
    tensor: Any,
    device: torch.device | str | int,
    non_blocking: bool = False,
    skip_keys: list[str] | str | None = None,
) -> Any:
    """Move every tensor in a nest of lists/tuples/dicts to ``device``.

    Keys named in ``skip_keys`` (of dicts at any depth) are left where they are.
    """
    skip = {skip_keys} if isinstance(skip_keys, str) else set(skip_keys or ())
    target = torch.device(device) if not isinstance(device, torch.device) else device

    def move(data: Any) -> Any:
        if isinstance(data, torch.Tensor):
            return data.to(target, non_blocking=non_blocking)
        if isinstance(data, dict):
            return type(data)({k: v if k in skip else move(v) for k, v in data.items()})
        if isinstance(data, (list, tuple)):
            return ops.rebuild(data, [move(v) for v in data])
        if hasattr(data, "to") and callable(data.to) and not isinstance(data, type):
            try:
                return data.to(target, non_blocking=non_blocking)
            except TypeError:
                return data.to(target)
        return data

    return move(tensor)


def copy_tensor_to_devices(tensor: torch.Tensor | None = None) -> torch.Tensor:
    """The main process's ``tensor`` on every process (others pass None)."""
    box = [tensor.cpu() if isinstance(tensor, torch.Tensor) else None]
    ops.broadcast_object_list(box, from_process=0)
    if not isinstance(box[0], torch.Tensor):
        raise ValueError("copy_tensor_to_devices needs a tensor on the main process")
    device = tensor.device if isinstance(tensor, torch.Tensor) else _device()
    return box[0].to(device)


def _device() -> torch.device:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
