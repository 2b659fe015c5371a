"""What scripts import from Hugging Face Accelerate's ``accelerate.utils``, under overdrive.

Names that need torch load on first use (``import overdrive.utils`` stays cheap).
"""

from __future__ import annotations

from overdrive.arguments.kwargs_handlers import SchedulerKwargs
from overdrive.lazy.attributes import lazy_getattr, same_names
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
    "recursively_apply": "overdrive.utils.operations",
    "honor_type": "overdrive.utils.operations",
    "is_torch_tensor": "overdrive.utils.operations",
    "listify": "overdrive.utils.operations",
    "concatenate": "overdrive.utils.operations",
    "find_device": "overdrive.utils.operations",
    "CannotPadNestedTensorWarning": "overdrive.utils.operations",
    "pad_input_tensors": "overdrive.utils.operations",
    "convert_to_fp32": "overdrive.utils.operations",
    "convert_outputs_to_fp32": "overdrive.utils.operations",
    "ConvertOutputsToFp32": "overdrive.utils.operations",
    "save": "overdrive.utils.other",
    "is_namedtuple": "overdrive.processes.ops",
    # the host
    "check_os_kernel": "overdrive.utils.other",
    # randomness
    "set_seed": "overdrive.processes.random_state",
    "synchronize_rng_states": "overdrive.processes.random_state",
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
    "init_empty_weights": "overdrive.big_modeling",
    "merge_fsdp_weights": "overdrive.utils.fsdp_utils",
    "save_fsdp_model": "overdrive.utils.fsdp_utils",
    # launching
    "notebook_launcher": "overdrive.launchers",
    "debug_launcher": "overdrive.launchers",
    "load_fsdp_model": "overdrive.utils.fsdp_utils",
    "save_fsdp_optimizer": "overdrive.utils.fsdp_utils",
    "load_fsdp_optimizer": "overdrive.utils.fsdp_utils",
    # FSDP helpers (accelerate.utils.fsdp_utils)
    "disable_fsdp_ram_efficient_loading": "overdrive.utils.fsdp_utils",
    "enable_fsdp_ram_efficient_loading": "overdrive.utils.fsdp_utils",
    "ensure_weights_retied": "overdrive.utils.fsdp_utils",
    "fsdp2_apply_ac": "overdrive.utils.fsdp_utils",
    "fsdp2_canonicalize_names": "overdrive.utils.fsdp_utils",
    "fsdp2_load_full_state_dict": "overdrive.utils.fsdp_utils",
    "fsdp2_prepare_model": "overdrive.utils.fsdp_utils",
    "fsdp2_switch_optimizer_parameters": "overdrive.utils.fsdp_utils",
    "get_fsdp2_grad_scaler": "overdrive.utils.fsdp_utils",
    "compile_regions_fsdp2": "overdrive.compile.regions",
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
    "FP8RecipeKwargs": "overdrive.compat.fp8_recipes",
    "load_checkpoint_and_dispatch": "overdrive.big_modeling",
    # big-model inference: sizes, device maps, ties, loading (overdrive.bigmodel)
    "align_module_device": "overdrive.utils.modeling",
    "calculate_maximum_sizes": "overdrive.utils.modeling",
    "check_tied_parameters_in_config": "overdrive.utils.modeling",
    "check_tied_parameters_on_same_device": "overdrive.utils.modeling",
    "compute_module_sizes": "overdrive.utils.modeling",
    "convert_file_size_to_int": "overdrive.utils.modeling",
    "dtype_byte_size": "overdrive.utils.modeling",
    "find_tied_parameters": "overdrive.utils.modeling",
    "get_max_layer_size": "overdrive.utils.modeling",
    "id_tensor_storage": "overdrive.utils.modeling",
    "is_peft_model": "overdrive.utils.modeling",
    "load_offloaded_weights": "overdrive.utils.modeling",
    "load_state_dict": "overdrive.utils.modeling",
    "named_module_tensors": "overdrive.utils.modeling",
    "retie_parameters": "overdrive.utils.modeling",
    "set_module_tensor_to_device": "overdrive.utils.modeling",
    "get_grad_scaler": "overdrive.utils.modeling",
    "get_mixed_precision_context_manager": "overdrive.utils.modeling",
    "load_checkpoint_in_model": "overdrive.utils.modeling",
    # the offload folder
    "OffloadedWeightsLoader": "overdrive.utils.offload",
    "PrefixedDataset": "overdrive.utils.offload",
    "extract_submodules_state_dict": "overdrive.utils.offload",
    "load_offloaded_weight": "overdrive.utils.offload",
    "offload_state_dict": "overdrive.utils.offload",
    "offload_weight": "overdrive.utils.offload",
    "save_offload_index": "overdrive.utils.offload",
    # progress bars
    "tqdm": "overdrive.utils.tqdm",
    # fp8 recipe handlers (torchao; TransformerEngine / MS-AMP ones validate, then are refused)
    "AORecipeKwargs": "overdrive.compat.fp8_recipes",
    "MSAMPRecipeKwargs": "overdrive.compat.fp8_recipes",
    "TERecipeKwargs": "overdrive.compat.fp8_recipes",
    # tensors and collectives (accelerate.utils.operations)
    "GatheredParameters": "overdrive.utils.operations",
    "find_batch_size": "overdrive.utils.operations",
    "get_data_structure": "overdrive.utils.operations",
    "ignorant_find_batch_size": "overdrive.utils.operations",
    "initialize_tensors": "overdrive.utils.operations",
    "is_tensor_information": "overdrive.utils.operations",
    "slice_tensors": "overdrive.utils.operations",
    # file names and version floors (accelerate.utils.constants)
    **{
        name: "overdrive.utils.constants"
        for name in (
            "MITA_PROFILING_AVAILABLE_PYTORCH_VERSION",
            "MODEL_NAME",
            "OPTIMIZER_NAME",
            "PROFILE_PATTERN_NAME",
            "RNG_STATE_NAME",
            "SAFE_MODEL_NAME",
            "SAFE_WEIGHTS_INDEX_NAME",
            "SAFE_WEIGHTS_NAME",
            "SAFE_WEIGHTS_PATTERN_NAME",
            "SAMPLER_NAME",
            "SCALER_NAME",
            "SCHEDULER_NAME",
            "TORCH_DISTRIBUTED_OPERATION_TYPES",
            "TORCH_LAUNCH_PARAMS",
            "WEIGHTS_INDEX_NAME",
            "WEIGHTS_NAME",
            "WEIGHTS_PATTERN_NAME",
            "XPU_PROFILING_AVAILABLE_PYTORCH_VERSION",
        )
    },
    # environment variables and the host (accelerate.utils.environment)
    **{
        name: "overdrive.utils.environment"
        for name in (
            "are_libraries_initialized",
            "check_cuda_fp8_capability",
            "check_cuda_p2p_ib_support",
            "get_cpu_distributed_information",
            "get_current_device_type",
            "get_gpu_info",
            "get_int_from_env",
            "parse_choice_from_env",
            "parse_flag_from_env",
            "set_numa_affinity",
            "str_to_bool",
        )
    },
    # accelerate.utils.other
    **{
        name: "overdrive.utils.other"
        for name in (
            "clean_state_dict_for_safetensors",
            "compile_regions",
            "compile_regions_deepspeed",
            "convert_bytes",
            "get_module_children_bottom_up",
            "get_pretty_name",
            "has_compiled_regions",
            "is_compiled_module",
            "is_port_in_use",
            "load",
            "merge_dicts",
            "model_has_dtensor",
            "recursive_getattr",
            "wait_for_everyone",
        )
    },
    "compare_versions": "overdrive.utils.versions",
    "is_torch_version": "overdrive.utils.versions",
    "synchronize_rng_state": "overdrive.utils.random",
    "PrepareForLaunch": "overdrive.utils.launch",
    "prepare_deepspeed_cmd_env": "overdrive.utils.launch",
    "prepare_multi_gpu_env": "overdrive.utils.launch",
    "prepare_simple_launcher_cmd_env": "overdrive.utils.launch",
    "DeepSpeedEngineWrapper": "overdrive.utils.deepspeed",
    "get_active_deepspeed_plugin": "overdrive.utils.deepspeed",
    "map_pytorch_optim_to_deepspeed": "overdrive.utils.deepspeed",
    # torchao fp8 and bitsandbytes quantization
    "convert_model_to_fp8_ao": "overdrive.utils.ao",
    "filter_first_and_last_linear_layers": "overdrive.utils.ao",
    "has_ao_layers": "overdrive.utils.ao",
    "has_4bit_bnb_layers": "overdrive.utils.bnb",
    "load_and_quantize_model": "overdrive.utils.bnb",
}

# Submodules Hugging Face Accelerate's package exposes as attributes.
_SUBMODULES = ("bnb",)


__getattr__ = lazy_getattr(
    __name__, {**same_names(_LAZY), **{name: f"{__name__}.{name}" for name in _SUBMODULES}}
)


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
