"""What one rank holds for training: its share of the parameters, gradients and optimizer
state, counted from the optimizer the script steps (local shards of sharded tensors)."""

from __future__ import annotations

from typing import Any

import torch


def local_bytes(tensor: torch.Tensor) -> int:
    """Bytes this rank stores for ``tensor``: a DTensor's local shard, else the tensor."""
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return int(local.numel() * local.element_size())


def training_state_bytes(optimizers: list[Any]) -> dict[str, int]:
    """{"parameters", "gradients", "optimizer_state"}: bytes of the parameters the optimizers
    step, their gradients as held now, and the optimizers' state tensors (each tensor once)."""
    seen: set[int] = set()
    totals = {"parameters": 0, "gradients": 0, "optimizer_state": 0}

    def add(key: str, tensor: Any) -> None:
        if isinstance(tensor, torch.Tensor) and id(tensor) not in seen:
            seen.add(id(tensor))
            totals[key] += local_bytes(tensor)

    for optimizer in optimizers:
        for group in optimizer.param_groups:
            for param in group["params"]:
                add("parameters", param)
                add("gradients", param.grad)
        for state in optimizer.state.values():
            for value in state.values():
                if isinstance(value, torch.Tensor) and value.dim() > 0:
                    add("optimizer_state", value)
    return totals
