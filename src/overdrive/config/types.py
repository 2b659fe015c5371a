"""Enumerations shared across overdrive."""

from __future__ import annotations

from enum import Enum


class DistributedType(str, Enum):
    """Which backend runs the training (Hugging Face Accelerate's names).

    Every member Hugging Face Accelerate has exists; asking for one that this version cannot
    run (the other vendors' accelerators, XLA, ...) is refused before any process starts,
    naming the setting (``overdrive.preflight.backends.check_available``).
    """

    NO = "NO"
    MULTI_CPU = "MULTI_CPU"
    MULTI_GPU = "MULTI_GPU"
    DEEPSPEED = "DEEPSPEED"
    FSDP = "FSDP"
    MEGATRON_LM = "MEGATRON_LM"
    XLA = "XLA"
    MULTI_NPU = "MULTI_NPU"
    MULTI_MLU = "MULTI_MLU"
    MULTI_SDAA = "MULTI_SDAA"
    MULTI_MUSA = "MULTI_MUSA"
    MULTI_XPU = "MULTI_XPU"
    MULTI_HPU = "MULTI_HPU"
    MULTI_NEURON = "MULTI_NEURON"

    def __str__(self) -> str:
        return self.value


class ComputeEnvironment(str, Enum):
    """Where training runs."""

    LOCAL_MACHINE = "LOCAL_MACHINE"
    AMAZON_SAGEMAKER = "AMAZON_SAGEMAKER"

    def __str__(self) -> str:
        return self.value
