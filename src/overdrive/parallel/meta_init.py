"""Build a large model once: real weights on the main process, empty (meta) ones elsewhere.

With ``fsdp_cpu_ram_efficient_loading`` the processes other than the main one build their
model inside ``init_empty_weights()`` (``Accelerator.cpu_ram_efficient_init()`` does this for
them); ``prepare`` then shards the empty model, allocates only this process's shards, and
fills them from the main process's weights.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch import nn

from overdrive.errors import OverdriveError


@contextlib.contextmanager
def init_empty_weights() -> Iterator[None]:
    """Modules created inside hold no memory: their tensors live on the meta device."""
    with torch.device("meta"):
        yield


def is_empty(model: nn.Module) -> bool:
    return any(t.is_meta for t in [*model.parameters(), *model.buffers()])


def empty_ranks(model: nn.Module) -> list[int]:
    """The processes whose copy of ``model`` is empty (meta); collective."""
    mine = torch.tensor([1 if is_empty(model) else 0])
    if not dist.is_initialized() or dist.get_world_size() == 1:
        flags = [mine]
    else:
        flags = [torch.zeros(1, dtype=mine.dtype) for _ in range(dist.get_world_size())]
        dist.all_gather(flags, mine)
    empty = [rank for rank, flag in enumerate(flags) if int(flag.item())]
    if 0 in empty:
        raise OverdriveError(
            f"prepare(): the main process's model is empty (meta device) on processes {empty}; "
            "the main process must hold the real weights that the others receive\n"
            "  fix: build the model with accelerator.cpu_ram_efficient_init(), which leaves "
            "the main process's weights real"
        )
    return empty


def broadcast_buffers(model: nn.Module, device: torch.device) -> None:
    """Give every process the main process's buffers (including non-persistent ones)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return
    with torch.no_grad():
        for buffer in model.buffers():
            on_device = buffer.data.to(device)
            dist.broadcast(on_device, src=0)
            if on_device is not buffer.data:
                buffer.data.copy_(on_device)
