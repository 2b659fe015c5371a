"""Put one named parameter or buffer of a module on a device, optionally with a new value,
keeping its parameter class and ``requires_grad`` (``param.to(device)`` would make a new
tensor the module does not hold)."""

from __future__ import annotations

import gc
from typing import Any, cast

import torch
from torch import nn

from overdrive.bigmodel.device_map import Device
from overdrive.bigmodel.sizes import as_dtype, is_integer_dtype
from overdrive.bigmodel.ties import owner_and_name

# Quantized parameter classes (bitsandbytes) take their own constructor arguments.
_QUANTIZED = ("Int8Params", "FP4Params", "Params4bit")
TiedMap = dict[int, dict[Device, torch.Tensor]]


def check_device_same(first_device: torch.device, second_device: torch.device) -> bool:
    """Whether two devices are the same, counting ``cuda`` and ``cuda:0`` as one."""
    if first_device.type != second_device.type:
        return False

    def indexed(device: torch.device) -> torch.device:
        if device.type != "cpu" and device.index is None:
            return torch.device(device.type, 0)
        return device

    return indexed(first_device) == indexed(second_device)


def release_cached_memory(garbage_collection: bool = False) -> None:
    """Hand the accelerator's cached blocks back (nothing to do on a CPU), after a
    ``gc.collect()`` with ``garbage_collection``."""
    if garbage_collection:
        gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    elif hasattr(torch, "xpu") and torch.xpu.is_available():
        torch.xpu.empty_cache()
    elif torch.backends.mps.is_available():
        torch.mps.empty_cache()


def _is_meta(device: object) -> bool:
    return device == "meta" or device == torch.device("meta")


def _shared_copy(
    tied_params_map: TiedMap | None, tensor: torch.Tensor | None, device: Device
) -> torch.Tensor | None:
    if tied_params_map is None or tensor is None:
        return None
    return tied_params_map.get(tensor.data_ptr(), {}).get(device)


def _as_parameter(old: nn.Parameter, value: torch.Tensor, device: Device) -> nn.Parameter:
    cls = type(old)
    extras = dict(old.__dict__)
    initialized = extras.pop("_is_hf_initialized", None)
    result: Any  # a parameter of old's class: bitsandbytes' and torchao's take their own fields
    if "torchao" in getattr(cls, "__module__", "") or cls.__name__ == "AffineQuantizedTensor":
        result = value.to(device)
    elif cls.__name__ in _QUANTIZED:
        result = cls(value, requires_grad=old.requires_grad, **extras).to(device)
    elif cls.__name__ in ("QTensor", "QBitsTensor"):
        result = nn.Parameter(value, requires_grad=old.requires_grad).to(device)
    else:
        result = cls(value, requires_grad=old.requires_grad).to(device)
    if initialized is not None:
        result._is_hf_initialized = initialized  # transformers' mark: keep it
    return cast(nn.Parameter, result)


def set_module_tensor_to_device(
    module: nn.Module,
    tensor_name: str,
    device: int | str | torch.device,
    value: torch.Tensor | None = None,
    dtype: str | torch.dtype | None = None,
    fp16_statistics: torch.Tensor | None = None,
    tied_params_map: TiedMap | None = None,
    non_blocking: bool = False,
    clear_cache: bool = True,
) -> None:
    """Put ``module``'s tensor ``tensor_name`` (dotted) on ``device``, holding ``value`` if
    given (cast to the old tensor's dtype, or to ``dtype``; integer tensors keep theirs). A
    tied weight already on ``device`` (``tied_params_map``) is shared instead of copied."""
    owner, name = owner_and_name(module, tensor_name)
    if name not in owner._parameters and name not in owner._buffers:
        raise ValueError(f"{owner} does not have a parameter or a buffer named {name}.")
    is_buffer = name in owner._buffers
    old = getattr(owner, name)
    shared = _shared_copy(tied_params_map, value, device)
    if shared is None and value is None:
        shared = _shared_copy(tied_params_map, old, device)
    if shared is not None:
        # the tied copy _remember_tied_copy kept: the moved tensor, not its Parameter
        owner._parameters[name] = cast(nn.Parameter, shared)
        return
    if old.device == torch.device("meta") and not _is_meta(device) and value is None:
        raise ValueError(f"{name} is on the meta device, we need a `value` to put in on {device}.")
    param = owner._parameters.get(name)
    if value is not None:
        if old.shape != value.shape and type(param).__name__ != "Params4bit":
            raise ValueError(
                f'Trying to set a tensor of shape {value.shape} in "{name}" (which has shape '
                f"{old.shape}), this looks incorrect."
            )
        if dtype is None:
            value = value.to(old.dtype, non_blocking=non_blocking)
        elif not is_integer_dtype(value.dtype):
            value = value.to(as_dtype(dtype), non_blocking=non_blocking)
    with torch.no_grad():
        if value is None:
            new = old.to(device, non_blocking=non_blocking)
            if dtype is not None and _is_meta(device):
                if not is_integer_dtype(old.dtype):
                    new = new.to(as_dtype(dtype), non_blocking=non_blocking)
                if not is_buffer:
                    kind = type(cast(nn.Parameter, param))  # a parameter: not a buffer
                    owner._parameters[name] = kind(new, requires_grad=old.requires_grad)
        elif isinstance(value, torch.Tensor):
            new = value.to(device, non_blocking=non_blocking)
        else:
            new = torch.tensor(value, device=device)
        if is_buffer:
            owner._buffers[name] = new
        else:
            current = cast(nn.Parameter, owner._parameters[name])  # not a buffer
            if value is not None or not check_device_same(torch.device(device), current.device):
                replaced: Any = _as_parameter(current, new, device)  # maybe bitsandbytes'
                if fp16_statistics is not None:
                    replaced.SCB = fp16_statistics.to(device)
                owner._parameters[name] = replaced
    if clear_cache and str(device) not in ("cpu", "meta"):
        release_cached_memory()
    _remember_tied_copy(tied_params_map, old, value, device, new)


def _remember_tied_copy(
    tied_params_map: TiedMap | None,
    old: torch.Tensor,
    value: torch.Tensor | None,
    device: Device,
    new: torch.Tensor,
) -> None:
    if tied_params_map is None:
        return
    for tensor in (old, value):
        if tensor is None:
            continue
        copies = tied_params_map.get(tensor.data_ptr())
        if copies is not None and device not in copies:
            copies[device] = new
            return
