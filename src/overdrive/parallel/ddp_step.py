"""The parallelize chain's DistributedDataParallel step: each process keeps a whole replica
and DDP averages the gradients during backward (gloo on CPU, nccl on CUDA)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypedDict

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel


class DDPOptions(TypedDict, total=False):
    """What ``DistributedDataParallelKwargs.ddp_kwargs`` hands DDP: the fields set of these."""

    dim: int
    broadcast_buffers: bool
    bucket_cap_mb: int
    find_unused_parameters: bool
    check_reduction: bool
    gradient_as_bucket_view: bool
    static_graph: bool


@dataclass(frozen=True)
class DDPStep:
    """Wrap a model that trains in DDP on ``device``, with ``options`` (the fields of
    ``DistributedDataParallelKwargs`` that were set), then ``comm_hook`` on the wrapper."""

    device: torch.device
    options: DDPOptions = field(default_factory=lambda: DDPOptions())
    comm_hook: Callable[[DistributedDataParallel], None] | None = None

    def apply(self, module: nn.Module) -> nn.Module:
        """``module`` in DDP; unchanged when already wrapped or when nothing in it trains
        (DDP refuses a module without parameters that need gradients)."""
        if isinstance(module, DistributedDataParallel):
            return module
        if not any(p.requires_grad for p in module.parameters()):
            return module
        device_ids = [self.device.index] if self.device.type == "cuda" else None
        wrapped = DistributedDataParallel(module, device_ids=device_ids, **self.options)
        if self.comm_hook is not None:
            self.comm_hook(wrapped)
        return wrapped
