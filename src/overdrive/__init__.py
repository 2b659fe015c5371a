"""overdrive: one plain PyTorch training loop on a CPU, one GPU, many GPUs or many machines."""

from overdrive.errors import ConfigError, LaunchError, OverdriveError
from overdrive.kwargs_handlers import (
    AutocastKwargs,
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
)
from overdrive.plugins import (
    DataLoaderConfiguration,
    DeepSpeedPlugin,
    FullyShardedDataParallelPlugin,
    GradientAccumulationPlugin,
    MegatronLMPlugin,
    ProjectConfiguration,
)
from overdrive.types import ComputeEnvironment, DistributedType

__version__ = "0.1.0"

__all__ = [
    "AutocastKwargs",
    "ComputeEnvironment",
    "ConfigError",
    "DataLoaderConfiguration",
    "DeepSpeedPlugin",
    "DistributedDataParallelKwargs",
    "DistributedType",
    "FullyShardedDataParallelPlugin",
    "GradScalerKwargs",
    "GradientAccumulationPlugin",
    "InitProcessGroupKwargs",
    "LaunchError",
    "MegatronLMPlugin",
    "OverdriveError",
    "ProjectConfiguration",
    "__version__",
]
