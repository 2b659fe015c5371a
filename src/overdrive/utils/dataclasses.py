"""``accelerate.utils.dataclasses``: Hugging Face Accelerate's settings objects, kwargs
handlers and enumerations, under overdrive's.

Torch-free to import (``import overdrive.utils`` loads this module); the fp8 recipe handlers,
which build on torch, load on first use.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import Any, Literal

from overdrive.arguments.enums import DDPCommunicationHookType, LoggerType, PrecisionType, RNGType
from overdrive.arguments.kwargs_handlers import (
    AutocastKwargs,
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    KwargsHandler,
    ProfileKwargs,
)
from overdrive.arguments.parallel_handlers import (
    DeepSpeedSequenceParallelConfig,
    TorchContextParallelConfig,
    TorchTensorParallelConfig,
    TorchTensorParallelPlugin,
)
from overdrive.arguments.plugins import (
    DataLoaderConfiguration,
    DeepSpeedPlugin,
    FullyShardedDataParallelPlugin,
    GradientAccumulationPlugin,
    MegatronLMPlugin,
    ParallelismConfig,
    ProjectConfiguration,
)
from overdrive.bigmodel.custom_dtype import CustomDtype
from overdrive.compat.dynamo import TorchDynamoPlugin
from overdrive.config.types import ComputeEnvironment, DistributedType
from overdrive.lazy.attributes import lazy_getattr, same_names
from overdrive.quantize.bnb_config import BnbQuantizationConfig

logger = logging.getLogger(__name__)

# The value sets Hugging Face Accelerate's fp8 and profiler settings accept.
Backend = Literal["MSAMP", "TE"]
OptLevel = Literal["O1", "O2"]
FP8Format = Literal["HYBRID", "E4M3", "E5M2"]
AmaxComputeAlgorithm = Literal["max", "most_recent"]
ProfilerActivity = Literal["cpu", "xpu", "mtia", "cuda", "hpu"]


class EnumWithContains(enum.EnumMeta):
    """An enum metaclass for which ``value in TheEnum`` asks whether a member has that value."""

    def __contains__(cls, item: object) -> bool:
        try:
            cls(item)
        except ValueError:
            return False
        return True


class BaseEnum(enum.Enum, metaclass=EnumWithContains):
    """An enum whose members print as their value, with ``list()`` of every value."""

    def __str__(self) -> str:
        return str(self.value)

    @classmethod
    def list(cls) -> list[str]:
        """Every member's value, as a string."""
        return [str(member) for member in cls]


class SageMakerDistributedType(str, enum.Enum):
    """SageMaker's distribution modes (named in config files; overdrive does not launch there)."""

    NO = "NO"
    DATA_PARALLEL = "DATA_PARALLEL"
    MODEL_PARALLEL = "MODEL_PARALLEL"


class FP8BackendType(str, enum.Enum):
    """The libraries Hugging Face Accelerate trains fp8 with; overdrive's is torchao (AO)."""

    NO = "NO"
    TE = "TE"
    MSAMP = "MSAMP"
    AO = "AO"


class DynamoBackend(str, BaseEnum):
    """``torch.compile`` backends by their config-file names (``dynamo_config.dynamo_backend``
    takes them lower-cased)."""

    NO = "NO"
    EAGER = "EAGER"
    AOT_EAGER = "AOT_EAGER"
    INDUCTOR = "INDUCTOR"
    AOT_TS_NVFUSER = "AOT_TS_NVFUSER"
    NVPRIMS_NVFUSER = "NVPRIMS_NVFUSER"
    CUDAGRAPHS = "CUDAGRAPHS"
    OFI = "OFI"
    FX2TRT = "FX2TRT"
    ONNXRT = "ONNXRT"
    TENSORRT = "TENSORRT"
    AOT_TORCHXLA_TRACE_ONCE = "AOT_TORCHXLA_TRACE_ONCE"
    TORCHXLA_TRACE_ONCE = "TORCHXLA_TRACE_ONCE"
    TVM = "TVM"
    HPU_BACKEND = "HPU_BACKEND"
    NEURON = "NEURON"


@dataclass
class TensorInformation:
    """A tensor's shape and dtype, without its data (what a process sends before a tensor)."""

    shape: Any
    dtype: Any


def get_module_class_from_name(module: Any, name: str) -> type | None:
    """The class named ``name`` of ``module`` or of one of its submodules (depth first), or
    None."""
    if type(module).__name__ == name:
        return type(module)
    for child in module.children():
        found = get_module_class_from_name(child, name)
        if found is not None:
            return found
    return None


# Names that build on torch: loaded on first use.
_LAZY = {
    "AORecipeKwargs": "overdrive.compat.fp8_recipes",
    "FP8RecipeKwargs": "overdrive.compat.fp8_recipes",
    "MSAMPRecipeKwargs": "overdrive.compat.fp8_recipes",
    "TERecipeKwargs": "overdrive.compat.fp8_recipes",
}


__getattr__ = lazy_getattr(__name__, same_names(_LAZY))


__all__ = [
    "AmaxComputeAlgorithm",
    "AutocastKwargs",
    "Backend",
    "BaseEnum",
    "BnbQuantizationConfig",
    "ComputeEnvironment",
    "CustomDtype",
    "DDPCommunicationHookType",
    "DataLoaderConfiguration",
    "DeepSpeedPlugin",
    "DeepSpeedSequenceParallelConfig",
    "DistributedDataParallelKwargs",
    "DistributedType",
    "DynamoBackend",
    "EnumWithContains",
    "FP8BackendType",
    "FP8Format",
    "FullyShardedDataParallelPlugin",
    "GradScalerKwargs",
    "GradientAccumulationPlugin",
    "InitProcessGroupKwargs",
    "KwargsHandler",
    "LoggerType",
    "MegatronLMPlugin",
    "OptLevel",
    "ParallelismConfig",
    "PrecisionType",
    "ProfileKwargs",
    "ProfilerActivity",
    "ProjectConfiguration",
    "RNGType",
    "SageMakerDistributedType",
    "TensorInformation",
    "TorchContextParallelConfig",
    "TorchDynamoPlugin",
    "TorchTensorParallelConfig",
    "TorchTensorParallelPlugin",
    "get_module_class_from_name",
]
