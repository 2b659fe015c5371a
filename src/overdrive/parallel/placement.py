"""The parallelize chain's placement step: the module this process runs moves to a device
before the chain splits or shards it (``parallel/chain.py``)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class Placement:
    """Move the module to ``device``: the process's device, or the meta device for a model
    that FSDP1 fills unit by unit from the main process as it wraps it."""

    device: torch.device

    def apply(self, module: nn.Module) -> None:
        """Move ``module``'s parameters and buffers to the device, in place."""
        module.to(self.device)
