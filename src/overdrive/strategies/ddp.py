"""DistributedDataParallel on gloo (CPU) or nccl (CUDA)."""

from __future__ import annotations

import contextlib
from dataclasses import replace
from functools import partial
from typing import cast

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from overdrive.arguments.kwargs_handlers import DistributedDataParallelKwargs
from overdrive.parallel.chain import Chain
from overdrive.parallel.ddp_step import DDPOptions, DDPStep
from overdrive.parallel.topology import Topology
from overdrive.strategies.base import Strategy
from overdrive.strategies.ddp_comm_hooks import register_comm_hook
from overdrive.strategies.rules import NO_RULES, LoopRules


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
        hook = partial(register_comm_hook, kwargs=ddp_kwargs) if ddp_kwargs else None
        self._ddp_step = DDPStep(device, self.ddp_kwargs, hook)

    def setup_model(self, model: nn.Module, *, device_placement: bool) -> nn.Module:
        if isinstance(model, DistributedDataParallel):
            return model
        return super().setup_model(model, device_placement=device_placement)

    def model_chain(self) -> Chain:
        """The loop's recomputation, then DDP, then the compile step."""
        return replace(super().model_chain(), ddp=self._ddp_step)

    def no_sync(self, model: nn.Module) -> contextlib.AbstractContextManager[None]:
        if isinstance(model, DistributedDataParallel):
            return model.no_sync()
        return contextlib.nullcontext()
