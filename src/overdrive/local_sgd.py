"""``LocalSGD``: each process trains on its own for ``local_sgd_steps`` optimizer steps, then
all processes average their parameters (Hugging Face Accelerate's ``accelerate.local_sgd``).

    with LocalSGD(accelerator, model, local_sgd_steps=8) as local_sgd:
        for batch in loader:
            ...
            optimizer.step()
            local_sgd.step()

Inside the block gradients are not synchronised (``accelerator.no_sync``); leaving it
averages once more, so every process ends with the same parameters. On one process, or with
``enabled=False``, it does nothing.
"""

from __future__ import annotations

import contextlib
from types import TracebackType
from typing import Any

import torch
from torch import nn

from overdrive.config.types import DistributedType
from overdrive.errors import ConfigError

_REPLICAS = (DistributedType.NO, DistributedType.MULTI_CPU, DistributedType.MULTI_GPU)


class LocalSGD:
    """Average the parameters of ``model`` across processes every ``local_sgd_steps`` calls
    of :meth:`step`."""

    def __init__(
        self, accelerator: Any, model: nn.Module, local_sgd_steps: int, enabled: bool = True
    ) -> None:
        if local_sgd_steps < 1:
            raise ConfigError(
                f"LocalSGD(local_sgd_steps={local_sgd_steps}) must be at least 1",
                key="local_sgd_steps",
                fix="pass the number of optimizer steps between averages, e.g. 8",
            )
        name = str(accelerator.distributed_type)
        if enabled and accelerator.distributed_type not in _REPLICAS:
            raise ConfigError(
                f"LocalSGD under distributed_type = {name}: it averages whole parameters, "
                "which a sharded or engine-managed model does not hold on each process",
                key="distributed_type",
                fix="use LocalSGD with DDP (MULTI_CPU / MULTI_GPU) or one process",
            )
        self.accelerator, self.model = accelerator, model
        self.local_sgd_steps = local_sgd_steps
        self.enabled = enabled and accelerator.num_processes > 1
        self.num_steps = 0
        self._no_sync: contextlib.AbstractContextManager[None] = contextlib.nullcontext()

    def __enter__(self) -> LocalSGD:
        if self.enabled:
            self._no_sync = self.accelerator.no_sync(self.model)
            self._no_sync.__enter__()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> bool | None:
        if self.enabled:
            if kind is None:
                self._average()  # every process leaves with the same parameters
            return self._no_sync.__exit__(kind, error, trace)
        return None

    def step(self) -> None:
        """Count one optimizer step; average the parameters every ``local_sgd_steps``."""
        self.num_steps += 1
        if self.enabled and self.num_steps % self.local_sgd_steps == 0:
            self._average()

    @torch.no_grad()
    def _average(self) -> None:
        self.accelerator.wait_for_everyone()
        for param in self.model.parameters():
            param.data.copy_(self.accelerator.reduce(param.data, reduction="mean"))
