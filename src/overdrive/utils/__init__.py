"""What scripts import from the described system's ``accelerate.utils``, under overdrive.

Names that need torch load on first use (``import overdrive.utils`` stays cheap).
"""

from __future__ import annotations

import importlib
from typing import Any

from overdrive.kwargs_handlers import SchedulerKwargs
from overdrive.utils.dataclasses import *  # noqa: F403  (plugins, kwargs handlers, enums)
from overdrive.utils.dataclasses import __all__ as _DATACLASSES
from overdrive.utils.environment import (
    clear_environment,
    convert_dict_to_env_variables,
    patch_environment,
    purge_accelerate_environment,
    write_basic_config,
)
from overdrive.utils.imports import *  # noqa: F403  (the is_*_available checks)
from overdrive.utils.imports import __all__ as _IMPORT_CHECKS

_LAZY = {
    # collectives
    "gather": "overdrive.utils.operations",
    "gather_object": "overdrive.utils.operations",
    "broadcast": "overdrive.utils.operations",
    "broadcast_object_list": "overdrive.utils.operations",
    "reduce": "overdrive.utils.operations",
    "pad_across_processes": "overdrive.utils.operations",
    "send_to_device": "overdrive.utils.operations",
    "copy_tensor_to_devices": "overdrive.utils.operations",
    "DistributedOperationException": "overdrive.utils.operations",
    # nested data
    "recursively_apply": "overdrive.utils.nesting",
    "honor_type": "overdrive.utils.nesting",
    "is_torch_tensor": "overdrive.utils.nesting",
    "listify": "overdrive.utils.nesting",
    "concatenate": "overdrive.utils.nesting",
    "find_device": "overdrive.utils.nesting",
    "CannotPadNestedTensorWarning": "overdrive.utils.nesting",
    "pad_input_tensors": "overdrive.utils.nesting",
    "convert_to_fp32": "overdrive.utils.nesting",
    "convert_outputs_to_fp32": "overdrive.utils.nesting",
    "ConvertOutputsToFp32": "overdrive.utils.nesting",
    "save": "overdrive.utils.saving",
    "is_namedtuple": "overdrive.ops",
    # the host
    "check_os_kernel": "overdrive.utils.system",
    # randomness
    "set_seed": "overdrive.random_state",
    "synchronize_rng_states": "overdrive.random_state",
    # memory
    "release_memory": "overdrive.utils.memory",
    "find_executable_batch_size": "overdrive.utils.memory",
    "should_reduce_batch_size": "overdrive.utils.memory",
    # data
    "skip_first_batches": "overdrive.data_loader",
    # DeepSpeed placeholders for an optimizer / scheduler defined in its JSON
    "DummyOptim": "overdrive.ds.dummies",
    "DummyScheduler": "overdrive.ds.dummies",
    "MegatronLMDummyScheduler": "overdrive.compat.megatron_dummies",
    # models
    "init_empty_weights": "overdrive.compat.big_modeling",
    "merge_fsdp_weights": "overdrive.compat.fsdp_files",
    "save_fsdp_model": "overdrive.compat.fsdp_files",
    # launching
    "notebook_launcher": "overdrive.compat.launchers",
    "debug_launcher": "overdrive.compat.launchers",
    "load_fsdp_model": "overdrive.compat.fsdp_state_files",
    "save_fsdp_optimizer": "overdrive.compat.fsdp_state_files",
    "load_fsdp_optimizer": "overdrive.compat.fsdp_state_files",
    # device maps and unwrapping (transformers imports these)
    "get_max_memory": "overdrive.utils.modeling",
    "get_balanced_memory": "overdrive.utils.modeling",
    "infer_auto_device_map": "overdrive.utils.modeling",
    "check_device_map": "overdrive.utils.modeling",
    "extract_model_from_parallel": "overdrive.utils.other",
    "get_model_tp_size": "overdrive.utils.other",
    "has_offloaded_params": "overdrive.utils.modeling",
    "clear_device_cache": "overdrive.utils.memory",
    "HfDeepSpeedConfig": "overdrive.utils.deepspeed",
    "DeepSpeedSchedulerWrapper": "overdrive.utils.deepspeed",
    "DeepSpeedOptimizerWrapper": "overdrive.utils.deepspeed",
    "TorchDynamoPlugin": "overdrive.compat.dynamo",
    "FP8RecipeKwargs": "overdrive.precision.fp8",
    "load_checkpoint_in_model": "overdrive.compat.weights_loading",
    "load_checkpoint_and_dispatch": "overdrive.compat.weights_loading",
    # progress bars
    "tqdm": "overdrive.utils.tqdm",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'overdrive.utils' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    *_DATACLASSES,
    "SchedulerKwargs",
    "clear_environment",
    "convert_dict_to_env_variables",
    "patch_environment",
    "purge_accelerate_environment",
    "write_basic_config",
    *_IMPORT_CHECKS,
    *_LAZY,
]
