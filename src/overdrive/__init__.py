"""overdrive: one plain PyTorch training loop on a CPU, one GPU, many GPUs or many machines.

Names that need torch load on first use, so the CLI answers `overdrive config show` or a bad
setting without paying for ``import torch``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from overdrive.arguments.kwargs_handlers import (
    AutocastKwargs,
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
)
from overdrive.arguments.plugins import (
    DataLoaderConfiguration,
    DeepSpeedPlugin,
    FullyShardedDataParallelPlugin,
    GradientAccumulationPlugin,
    MegatronLMPlugin,
    ProjectConfiguration,
)
from overdrive.config.types import ComputeEnvironment, DistributedType
from overdrive.errors import ConfigError, LaunchError, OverdriveError
from overdrive.lazy import attributes as _lazy
from overdrive.version import __version__ as __version__

if TYPE_CHECKING:
    from overdrive.accelerator import Accelerator
    from overdrive.logging import get_logger
    from overdrive.precision.fp8 import FP8RecipeKwargs
    from overdrive.processes.random_state import set_seed
    from overdrive.state import PartialState


_LAZY = {
    "Accelerator": "overdrive.accelerator",
    "PartialState": "overdrive.state",
    "FP8RecipeKwargs": "overdrive.precision.fp8",
    "get_logger": "overdrive.logging",
    "set_seed": "overdrive.processes.random_state",
    # Hugging Face Accelerate's top-level names (``from accelerate import ...``).
    "AcceleratorState": "overdrive.state",
    "GradientState": "overdrive.state",
    "DDPCommunicationHookType": "overdrive.arguments.enums",
    "LoggerType": "overdrive.arguments.enums",
    "PrecisionType": "overdrive.arguments.enums",
    "ProfileKwargs": "overdrive.arguments.kwargs_handlers",
    "SchedulerKwargs": "overdrive.arguments.kwargs_handlers",
    "ParallelismConfig": "overdrive.arguments.plugins",
    "DistributedOperationException": "overdrive.processes.ops",
    "notebook_launcher": "overdrive.launchers",
    "debug_launcher": "overdrive.launchers",
    "init_empty_weights": "overdrive.big_modeling",
    "init_on_device": "overdrive.big_modeling",
    "cpu_offload": "overdrive.big_modeling",
    "cpu_offload_with_hook": "overdrive.big_modeling",
    "disk_offload": "overdrive.big_modeling",
    "dispatch_model": "overdrive.big_modeling",
    "infer_auto_device_map": "overdrive.utils.modeling",
    "load_checkpoint_and_dispatch": "overdrive.big_modeling",
    "load_checkpoint_in_model": "overdrive.big_modeling",
    "find_executable_batch_size": "overdrive.utils.memory",
    "release_memory": "overdrive.utils.memory",
    "skip_first_batches": "overdrive.data_loader",
    "prepare_data_loader": "overdrive.data_loader",
    "synchronize_rng_states": "overdrive.processes.random_state",
    "tqdm": "overdrive.utils.tqdm",
    "is_rich_available": "overdrive.utils.imports",
    "prepare_pippy": "overdrive.inference",
}


# The submodules Hugging Face Accelerate's ``__init__`` imports, so each is an attribute right
# after ``import accelerate`` (``accelerate.utils.set_seed(0)``): here each is imported at its
# first access, which keeps ``import overdrive`` free of torch.
_SUBMODULES = (
    "accelerator",
    "big_modeling",
    "checkpointing",
    "commands",
    "data_loader",
    "hooks",
    "inference",
    "launchers",
    "logging",
    "optimizer",
    "parallelism_config",
    "scheduler",
    "state",
    "tracking",
    "utils",
)
_TARGETS: dict[str, _lazy.Target] = {
    **_lazy.same_names(_LAZY),
    **{name: f"{__name__}.{name}" for name in _SUBMODULES},
}
_lazy_getattr = _lazy.lazy_getattr(__name__, _TARGETS)


def __getattr__(name: str) -> Any:
    if name == "rich":  # Hugging Face Accelerate's rich tracebacks, present with `rich` only
        try:
            return importlib.import_module("overdrive.utils.rich")
        except ImportError:
            raise AttributeError(
                "module 'overdrive' has no attribute 'rich' (install rich)"
            ) from None
    return _lazy_getattr(name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_TARGETS))


__all__ = [
    "Accelerator",
    "AcceleratorState",
    "DDPCommunicationHookType",
    "DistributedOperationException",
    "GradientState",
    "LoggerType",
    "ParallelismConfig",
    "PrecisionType",
    "ProfileKwargs",
    "SchedulerKwargs",
    "debug_launcher",
    "find_executable_batch_size",
    "cpu_offload",
    "cpu_offload_with_hook",
    "disk_offload",
    "dispatch_model",
    "infer_auto_device_map",
    "init_empty_weights",
    "init_on_device",
    "load_checkpoint_and_dispatch",
    "load_checkpoint_in_model",
    "notebook_launcher",
    "prepare_data_loader",
    "release_memory",
    "skip_first_batches",
    "synchronize_rng_states",
    "tqdm",
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
