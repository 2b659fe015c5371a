"""DistributedDataParallel on gloo (CPU) or nccl (CUDA)."""

from __future__ import annotations

import contextlib
from typing import TypedDict, cast

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from overdrive.kwargs_handlers import DistributedDataParallelKwargs
from overdrive.parallel.topology import Topology
from overdrive.strategies.base import Strategy
from overdrive.strategies.rules import NO_RULES, LoopRules


class DDPOptions(TypedDict, total=False):
    """What ``DistributedDataParallelKwargs.ddp_kwargs`` hands DDP: the fields set of these."""

    dim: int
    broadcast_buffers: bool
    bucket_cap_mb: int
    find_unused_parameters: bool
    check_reduction: bool
    gradient_as_bucket_view: bool
    static_graph: bool


class DDPStrategy(Strategy):
    """Each process holds a full replica; DDP averages gradients during backward.

    ``DistributedDataParallelKwargs`` (bucket_cap_mb, find_unused_parameters,
    gradient_as_bucket_view, static_graph, ...) are passed to DDP unchanged.
    """

    name = "ddp"
    state_whole_on_every_process = True

    def __init__(
        self,
        device: torch.device,
        ddp_kwargs: DistributedDataParallelKwargs | None = None,
        topology: Topology | None = None,
        *,
        rules: LoopRules = NO_RULES,
    ) -> None:
        super().__init__(device, topology, rules=rules)
        given = ddp_kwargs.ddp_kwargs() if ddp_kwargs else {}
        self.ddp_kwargs = cast(DDPOptions, given)
        self._handler = ddp_kwargs

    def setup_model(self, model: nn.Module, *, device_placement: bool) -> nn.Module:
        model = super().setup_model(model, device_placement=device_placement)
        if isinstance(model, DistributedDataParallel):
            return model
        if not any(p.requires_grad for p in model.parameters()):
            return model  # DDP refuses modules with nothing to train; evaluation-only models
        device_ids = [self.device.index] if self.device.type == "cuda" else None
        wrapped = DistributedDataParallel(model, device_ids=device_ids, **self.ddp_kwargs)
        if self._handler is not None:
            from overdrive.strategies.ddp_comm_hooks import register_comm_hook

            register_comm_hook(wrapped, self._handler)
        return wrapped

    def no_sync(self, model: nn.Module) -> contextlib.AbstractContextManager[None]:
        if isinstance(model, DistributedDataParallel):
            return model.no_sync()
        return contextlib.nullcontext()
