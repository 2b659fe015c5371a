"""overdrive: one plain PyTorch training loop on a CPU, one GPU, many GPUs or many machines.

Names that need torch load on first use, so the CLI answers `overdrive config show` or a bad
setting without paying for ``import torch``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from overdrive.accelerator import Accelerator
    from overdrive.logging import get_logger
    from overdrive.precision.fp8 import FP8RecipeKwargs
    from overdrive.random_state import set_seed
    from overdrive.state import PartialState

__version__ = "0.1.0"

_LAZY = {
    "Accelerator": "overdrive.accelerator",
    "PartialState": "overdrive.state",
    "FP8RecipeKwargs": "overdrive.precision.fp8",
    "get_logger": "overdrive.logging",
    "set_seed": "overdrive.random_state",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'overdrive' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "Accelerator",
    "AutocastKwargs",
    "ComputeEnvironment",
    "ConfigError",
    "DataLoaderConfiguration",
    "DeepSpeedPlugin",
    "DistributedDataParallelKwargs",
    "DistributedType",
    "FP8RecipeKwargs",
    "FullyShardedDataParallelPlugin",
    "GradScalerKwargs",
    "GradientAccumulationPlugin",
    "InitProcessGroupKwargs",
    "LaunchError",
    "MegatronLMPlugin",
    "OverdriveError",
    "PartialState",
    "ProjectConfiguration",
    "__version__",
    "get_logger",
    "set_seed",
]
