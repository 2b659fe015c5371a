"""The model bench/fsdp_memory measures, importable as ``bench/fsdp_memory/model.py:Stack``
so `overdrive estimate-memory` can estimate the same thing."""

from __future__ import annotations

from torch import nn


class Stack(nn.Sequential):
    """``layers`` Linear(width, width) layers (defaults: 12 x 2048, 50M parameters)."""

    def __init__(self, layers: int = 12, width: int = 2048) -> None:
        super().__init__(*[nn.Linear(width, width) for _ in range(layers)])
