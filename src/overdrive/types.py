"""Enumerations shared across overdrive."""

from __future__ import annotations

from enum import Enum


class DistributedType(str, Enum):
    """Which backend runs the training (seed 000, table 1)."""

    NO = "NO"
    MULTI_CPU = "MULTI_CPU"
    MULTI_GPU = "MULTI_GPU"
    DEEPSPEED = "DEEPSPEED"
    FSDP = "FSDP"
    MEGATRON_LM = "MEGATRON_LM"
    XLA = "XLA"

    def __str__(self) -> str:
        return self.value


class ComputeEnvironment(str, Enum):
    """Where training runs."""

    LOCAL_MACHINE = "LOCAL_MACHINE"
    AMAZON_SAGEMAKER = "AMAZON_SAGEMAKER"

    def __str__(self) -> str:
        return self.value
