"""Hugging Face Accelerate's enumerations that scripts import by name."""

from __future__ import annotations

from enum import Enum


class _StrEnum(str, Enum):
    def __str__(self) -> str:
        return self.value


class LoggerType(_StrEnum):
    """Tracker names for ``Accelerator(log_with=...)``; unsupported ones are refused there."""

    ALL = "all"
    AIM = "aim"
    TENSORBOARD = "tensorboard"
    WANDB = "wandb"
    TRACKIO = "trackio"
    COMETML = "comet_ml"
    MLFLOW = "mlflow"
    CLEARML = "clearml"
    DVCLIVE = "dvclive"
    SWANLAB = "swanlab"


class PrecisionType(_StrEnum):
    """Values of ``mixed_precision``."""

    NO = "no"
    FP8 = "fp8"
    FP16 = "fp16"
    BF16 = "bf16"


class RNGType(_StrEnum):
    """Names for ``rng_types`` and ``synchronize_rng_states``."""

    TORCH = "torch"
    CUDA = "cuda"
    NUMPY = "numpy"
    PYTHON = "python"
    GENERATOR = "generator"


class DDPCommunicationHookType(_StrEnum):
    """Gradient communication hooks for DDP (``DistributedDataParallelKwargs(comm_hook=)``)."""

    NO = "no"
    FP16 = "fp16"
    BF16 = "bf16"
    POWER_SGD = "power_sgd"
    BATCHED_POWER_SGD = "batched_power_sgd"
