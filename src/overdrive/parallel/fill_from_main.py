"""Fill a split or sharded model that some processes built empty (on the meta device) with
the main process's weights, one tensor at a time: a chain step (``parallel/chain.py``); or
give every process the main process's weights when all of them built the model."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from overdrive.parallel.meta_init import broadcast_buffers, is_empty
from overdrive.parallel.rebind import named_params


def fill_from_main(
    model: nn.Module, full_state: Mapping[str, torch.Tensor], device: torch.device
) -> None:
    """Allocate this process's part of ``model`` and copy the main process's weights in.

    ``full_state`` is the whole model's state dict on the main process (empty elsewhere). A
    process other than the main one holds its part plus, for a moment, one full tensor
    (PyTorch's own broadcast_from_rank0 keeps them all). Collective.
    """
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor, distribute_tensor

    if is_empty(model):
        model.to_empty(device=device)  # split or sharded by now: only this process's part
    main = not dist.is_initialized() or dist.get_rank() == 0
    with torch.no_grad():
        for name, param in named_params(model).items():
            local = param.to_local() if isinstance(param, DTensor) else param
            full = full_state[name] if main else None
            if full is None:
                full = torch.empty(param.shape, dtype=param.dtype, device=local.device)
            full = full.to(device=local.device, dtype=param.dtype)
            # From the main process to all: the first process of a DTensor's own mesh
            # (which distribute_tensor would scatter from) may be an empty one.
            dist.broadcast(full, src=0)
            if isinstance(param, DTensor):
                mesh, placements = param.device_mesh, param.placements
                part = distribute_tensor(full, mesh, placements, src_data_rank=None)
                local.copy_(part.to_local())
            else:
                local.copy_(full)
            del full
    broadcast_buffers(model, device)


def broadcast_from_main(model: nn.Module, device: torch.device) -> None:
    """Give every process the main process's parameters and buffers, one tensor at a time
    through ``device`` (FSDP2 and pipeline stages have no ``sync_module_states``). Collective."""
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            on_device = tensor.data.to(device)  # nccl sends device tensors only
            dist.broadcast(on_device, src=0)
            if on_device is not tensor.data:
                tensor.data.copy_(on_device)
