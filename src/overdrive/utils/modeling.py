"""``accelerate.utils.modeling``: sizes, device maps, tied weights and checkpoint loading for
models larger than a device. The engine is ``overdrive.bigmodel``; the two names here that
read the running Accelerator's settings (autocast, grad scaler) are adapted in this face."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import torch

from overdrive.bigmodel.align import align_module_device, has_offloaded_params
from overdrive.bigmodel.auto_map import infer_auto_device_map
from overdrive.bigmodel.checkpoint_files import load_state_dict
from overdrive.bigmodel.device_map import check_device_map, clean_device_map
from overdrive.bigmodel.loading import load_checkpoint_in_model, load_offloaded_weights
from overdrive.bigmodel.memory import get_balanced_memory, get_max_memory
from overdrive.bigmodel.offloaded_state import (
    get_state_dict_from_offload,
    get_state_dict_offloaded_model,
)
from overdrive.bigmodel.sizes import (
    calculate_maximum_sizes,
    compute_module_sizes,
    compute_module_total_buffer_size,
    convert_file_size_to_int,
    dtype_byte_size,
    get_max_layer_size,
    get_module_leaves,
    get_non_persistent_buffers,
    id_tensor_storage,
    named_module_tensors,
)
from overdrive.bigmodel.tensors import check_device_same, set_module_tensor_to_device
from overdrive.bigmodel.tied_sizes import fallback_allocate, get_module_size_with_ties
from overdrive.bigmodel.ties import (
    check_tied_parameters_in_config,
    check_tied_parameters_on_same_device,
    find_tied_parameters,
    retie_parameters,
)
from overdrive.config.types import DistributedType
from overdrive.state import AcceleratorState
from overdrive.strategies.unwrap import extract_model_from_parallel

WEIGHTS_INDEX_NAME = "pytorch_model.bin.index.json"
logger = logging.getLogger(__name__)

__all__ = [
    "WEIGHTS_INDEX_NAME",
    "align_module_device",
    "calculate_maximum_sizes",
    "check_device_map",
    "check_device_same",
    "check_tied_parameters_in_config",
    "check_tied_parameters_on_same_device",
    "clean_device_map",
    "compute_module_sizes",
    "compute_module_total_buffer_size",
    "convert_file_size_to_int",
    "dtype_byte_size",
    "fallback_allocate",
    "find_tied_parameters",
    "get_balanced_memory",
    "get_grad_scaler",
    "get_max_layer_size",
    "get_max_memory",
    "get_mixed_precision_context_manager",
    "get_module_leaves",
    "get_module_size_with_ties",
    "get_non_persistent_buffers",
    "get_state_dict_from_offload",
    "get_state_dict_offloaded_model",
    "has_offloaded_params",
    "id_tensor_storage",
    "infer_auto_device_map",
    "is_peft_model",
    "load_checkpoint_in_model",
    "load_offloaded_weights",
    "load_state_dict",
    "named_module_tensors",
    "retie_parameters",
    "set_module_tensor_to_device",
]


def is_peft_model(model: Any) -> bool:
    """Whether ``model`` (unwrapped from DDP, FSDP, ``torch.compile``) is a PEFT model."""
    import importlib.util

    if importlib.util.find_spec("peft") is None:
        return False
    from peft import PeftModel

    return isinstance(extract_model_from_parallel(model), PeftModel)


def get_mixed_precision_context_manager(
    native_amp: bool = False, autocast_kwargs: Any = None
) -> contextlib.AbstractContextManager[Any]:
    """Autocast for the running Accelerator's ``mixed_precision`` (float16 for fp16, bfloat16
    for bf16 and fp8) when ``native_amp``, else a context that does nothing."""
    if not native_amp:
        return contextlib.nullcontext()

    state = AcceleratorState()
    extra = {} if autocast_kwargs is None else autocast_kwargs.to_kwargs()
    device_type = state.device.type
    if state.mixed_precision == "fp16":
        return torch.autocast(device_type=device_type, dtype=torch.float16, **extra)
    if state.mixed_precision in ("bf16", "fp8"):
        return torch.autocast(device_type=device_type, dtype=torch.bfloat16, **extra)
    return torch.autocast(device_type=device_type, **extra)


def get_grad_scaler(distributed_type: Any = None, **kwargs: Any) -> Any:
    """The gradient scaler for fp16: FSDP's sharded one under FSDP, else torch's for the
    GPU here (the CPU one where there is none; overdrive trains fp16 on CPUs too)."""
    if str(distributed_type).rpartition(".")[2] == DistributedType.FSDP:  # member or its name
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        return ShardedGradScaler(**kwargs)
    return torch.amp.GradScaler("cuda" if torch.cuda.is_available() else "cpu", **kwargs)
