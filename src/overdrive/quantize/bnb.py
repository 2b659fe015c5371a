"""Quantizing a model with bitsandbytes: swap its ``nn.Linear`` layers for bitsandbytes'
8-bit or 4-bit layers (some kept in higher precision), place it over the devices, and load
its weights, offloading 8-bit weights with their scale statistics.

bitsandbytes initialises the GPU when imported, so it is imported only by the calls that
build or inspect its layers; without it they raise ImportError naming it.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch
from torch import nn

from overdrive.bigmodel.auto_map import infer_auto_device_map
from overdrive.bigmodel.dispatch import dispatch_model
from overdrive.bigmodel.empty_init import init_empty_weights
from overdrive.bigmodel.loading import load_checkpoint_in_model
from overdrive.bigmodel.memory import get_balanced_memory
from overdrive.bigmodel.store import offload_weight
from overdrive.bigmodel.tensors import set_module_tensor_to_device
from overdrive.bigmodel.ties import find_tied_parameters
from overdrive.quantize.bnb_config import BnbQuantizationConfig

logger = logging.getLogger("overdrive.utils.bnb")

_INSTALL = "pip install bitsandbytes"


def import_bitsandbytes() -> Any:
    """``bitsandbytes``, or ImportError with the install command."""
    try:
        import bitsandbytes
    except ImportError as exc:
        raise ImportError(
            f"Quantizing with bitsandbytes needs the `bitsandbytes` package ({exc}); "
            f"install it with `{_INSTALL}`."
        ) from None
    return bitsandbytes


def get_parameter_device(parameter: nn.Module) -> torch.device:
    """The device of ``parameter``'s (a module's) first parameter."""
    return next(parameter.parameters()).device


def has_4bit_bnb_layers(model: nn.Module) -> bool:
    """Whether ``model`` holds a bitsandbytes ``Linear4bit``."""
    bnb = import_bitsandbytes()
    return any(isinstance(m, bnb.nn.Linear4bit) for m in model.modules())


def get_keys_to_not_convert(model: nn.Module) -> list[str]:
    """The modules to keep in full precision: tied weights and the model's last child (its
    head, e.g. ``lm_head``), without ``.weight``/``.bias``; none for a transformers base
    model without tied weights."""

    tied: Any = find_tied_parameters(model)
    if isinstance(tied, dict):  # the mapping form older versions returned
        tied_keys: list[str] = [*sum(tied.values(), []), *tied.keys()]
    else:
        tied_keys = sum(tied, [])
    prefix = getattr(model, "base_model_prefix", None)
    is_base_model = prefix is not None and not hasattr(model, prefix)
    if not tied_keys and is_base_model:
        return []
    children = list(model.named_children())
    last = [children[-1][0]] if children else []
    untouched = list(set(tied_keys)) + list(set(last) - set(tied_keys))
    return [name.replace(".weight", "").replace(".bias", "") for name in untouched]


def _skipped(key: str, modules_to_not_convert: list[str]) -> bool:
    return any((k in key and f"{k}." in key) or k == key for k in modules_to_not_convert)


def _quantized_linear(bnb: Any, linear: nn.Linear, config: BnbQuantizationConfig) -> nn.Module:
    has_bias = linear.bias is not None
    if config.load_in_8bit:
        layer = bnb.nn.Linear8bitLt(
            linear.in_features,
            linear.out_features,
            has_bias,
            has_fp16_weights=False,
            threshold=config.llm_int8_threshold,
        )
    elif config.load_in_4bit:
        layer = bnb.nn.Linear4bit(
            linear.in_features,
            linear.out_features,
            has_bias,
            config.bnb_4bit_compute_dtype,
            compress_statistics=config.bnb_4bit_use_double_quant,
            quant_type=config.bnb_4bit_quant_type,
        )
    else:
        raise ValueError("load_in_8bit and load_in_4bit can't be both False")
    layer.weight.data = linear.weight.data
    if has_bias:
        layer.bias.data = linear.bias.data
    layer.requires_grad_(False)
    return layer


def _replace(
    bnb: Any, model: nn.Module, config: BnbQuantizationConfig, skip: list[str], path: list[str]
) -> bool:
    replaced = False
    for name, module in model.named_children():
        path.append(name)
        if (
            isinstance(module, nn.Linear)
            and name not in skip
            and not _skipped(".".join(path), skip)
        ):
            setattr(model, name, _quantized_linear(bnb, module, config))
            replaced = True
        if next(module.children(), None) is not None:
            replaced = _replace(bnb, module, config, skip, path) or replaced
        path.pop()
    return replaced


def replace_with_bnb_layers(
    model: nn.Module,
    bnb_quantization_config: BnbQuantizationConfig,
    modules_to_not_convert: list[str] | None = None,
    current_key_name: list[str] | None = None,
) -> nn.Module:
    """``model`` with every ``nn.Linear`` not named in ``modules_to_not_convert`` replaced by
    bitsandbytes' ``Linear8bitLt`` or ``Linear4bit`` (the weights carried over, frozen)."""
    bnb = import_bitsandbytes()
    skip = list(modules_to_not_convert or [])
    if not _replace(bnb, model, bnb_quantization_config, skip, list(current_key_name or [])):
        logger.warning(
            "You are loading your model in 8bit or 4bit but no linear modules were found in "
            "your model. This can happen for some architectures such as gpt2 that uses Conv1D "
            "instead of Linear layers. Please double check your model architecture."
        )
    return model


def _gpu_index() -> int:
    if not torch.cuda.is_available():
        raise RuntimeError("No GPU found. A GPU is needed for quantization.")
    return torch.cuda.current_device()


def get_quantized_model_device_map(
    model: nn.Module,
    bnb_quantization_config: BnbQuantizationConfig,
    device_map: Any = None,
    max_memory: dict[Any, Any] | None = None,
    no_split_module_classes: list[str] | None = None,
) -> Any:
    """The device map of a quantized ``model``: the current GPU for None; computed for
    "auto", "balanced", "balanced_low_0" and "sequential" (quantized weights counted at their
    quantized size). A 4-bit model with quantized layers on the CPU or disk is refused."""
    config = bnb_quantization_config
    if device_map is None:
        device_map = {"": _gpu_index()}
        logger.info(f"The device_map was not initialized. Setting device_map to {device_map}.")
    if isinstance(device_map, str):
        if device_map not in ("auto", "balanced", "balanced_low_0", "sequential"):
            raise ValueError(
                "If passing a string for `device_map`, please choose 'auto', 'balanced', "
                "'balanced_low_0' or 'sequential'."
            )

        names = [name for name, _ in model.named_parameters()]
        special: dict[str, Any] = {
            n: config.torch_dtype for n in names if any(m in n for m in config.skip_modules or [])
        }
        special.update(
            {
                n: torch.float32
                for n in names
                if any(m in n for m in config.keep_in_fp32_modules or [])
            }
        )
        kwargs: dict[str, Any] = {
            "special_dtypes": special,
            "no_split_module_classes": no_split_module_classes,
            "dtype": config.target_dtype,
        }
        if device_map != "sequential":
            max_memory = get_balanced_memory(
                model, low_zero=device_map == "balanced_low_0", max_memory=max_memory, **kwargs
            )
        device_map = infer_auto_device_map(model, max_memory=max_memory, **kwargs)
    if isinstance(device_map, dict):
        kept = set((config.skip_modules or []) + (config.keep_in_fp32_modules or []))
        quantized_places = {v for k, v in device_map.items() if k not in kept}
        if quantized_places & {"cpu", "disk"}:
            if config.load_in_4bit:
                raise ValueError(
                    "Some modules are dispatched on the CPU or the disk. Make sure you have "
                    "enough GPU RAM to fit the quantized model. To dispatch the model on the CPU "
                    "or the disk while keeping these modules in `torch_dtype`, pass a custom "
                    "`device_map` to `load_and_quantize_model`."
                )
            logger.info(
                "Some modules are offloaded to the CPU or the disk. Note that these modules will "
                "be converted to 8-bit"
            )
    return device_map


def _bnb_at_least(floor: str) -> bool:
    import importlib.metadata

    from torch.torch_version import TorchVersion

    return TorchVersion(importlib.metadata.version("bitsandbytes")) >= floor


def _check_bnb_version(config: BnbQuantizationConfig) -> None:
    import_bitsandbytes()
    if config.load_in_8bit and not _bnb_at_least("0.37.2"):
        raise ImportError(
            "You have a version of `bitsandbytes` that is not compatible with 8bit quantization "
            f"(0.37.2 or newer is needed): `{_INSTALL} --upgrade`."
        )
    if config.load_in_4bit and not _bnb_at_least("0.39.0"):
        raise ValueError(
            "You have a version of `bitsandbytes` that is not compatible with 4bit quantization "
            f"(0.39.0 or newer is needed): `{_INSTALL} --upgrade`."
        )


def _quantize_loaded(model: nn.Module, config: BnbQuantizationConfig, skip: list[str]) -> nn.Module:
    """Quantize a model whose weights are already loaded, and move it to the GPU."""
    logger.warning(
        "It is not recommended to quantize a loaded model. The model should be instantiated "
        "under the `init_empty_weights` context manager."
    )
    device = get_parameter_device(model)
    model = replace_with_bnb_layers(model, config, modules_to_not_convert=skip)
    keep_fp32 = config.keep_in_fp32_modules or []
    # Every alias of a tied weight is visited, so a weight kept in fp32 under one name is not
    # cast under another.
    for name, param in model.named_parameters(remove_duplicate=False):
        if any(kept in name for kept in keep_fp32):
            param.data = param.data.to(torch.float32)
        elif torch.is_floating_point(param):
            param.data = param.data.to(config.torch_dtype)
    for name, module in model.named_modules():
        if any(kept in name for kept in keep_fp32):
            for param in module.parameters(recurse=False):
                param.data = param.data.to(torch.float32)
    gpu = _gpu_index() if device.type != "cuda" else torch.cuda.current_device()
    model.to(gpu)
    logger.info(
        f"The model was on {device.type}; it is moved to the GPU, which quantization needs."
    )
    return model


def load_and_quantize_model(
    model: nn.Module,
    bnb_quantization_config: BnbQuantizationConfig,
    weights_location: str | os.PathLike[str] | None = None,
    device_map: Any = None,
    no_split_module_classes: list[str] | None = None,
    max_memory: dict[Any, Any] | None = None,
    offload_folder: str | os.PathLike[str] | None = None,
    offload_state_dict: bool = False,
) -> nn.Module:
    """``model`` quantized as ``bnb_quantization_config`` says.

    A model built under ``init_empty_weights`` (on the meta device) gets bitsandbytes layers,
    a device map (``device_map``, ``max_memory``, ``no_split_module_classes`` as for
    ``infer_auto_device_map``) and its weights from ``weights_location``, then is dispatched;
    a loaded model is quantized where it is and moved to the GPU. The model's head and tied
    weights stay unquantized unless ``skip_modules`` says otherwise.
    """
    config = bnb_quantization_config
    _check_bnb_version(config)
    on_cpu_or_disk: list[str] = []
    if isinstance(device_map, dict) and len(device_map) > 1:
        on_cpu_or_disk = [k for k, v in device_map.items() if v in ("disk", "cpu")]
    if config.skip_modules is None:
        config.skip_modules = get_keys_to_not_convert(model)
    if config.load_in_4bit:
        config.skip_modules.extend(on_cpu_or_disk)
    if config.keep_in_fp32_modules is None:
        config.keep_in_fp32_modules = []
    skip = [*config.skip_modules, *config.keep_in_fp32_modules]
    # PEFT reads these
    model.__dict__["is_loaded_in_4bit"] = config.load_in_4bit
    model.__dict__["is_loaded_in_8bit"] = config.load_in_8bit
    if get_parameter_device(model).type != "meta":
        return _quantize_loaded(model, config, skip)
    if weights_location is None:
        raise RuntimeError(
            "`weights_location` needs to be the folder path containing the weights of the "
            f"model, but we found {weights_location}"
        )

    with init_empty_weights():
        model = replace_with_bnb_layers(model, config, modules_to_not_convert=skip)
    device_map = get_quantized_model_device_map(
        model,
        config,
        device_map,
        max_memory=max_memory,
        no_split_module_classes=no_split_module_classes,
    )
    offload = any(place in ("cpu", "disk") for place in device_map.values())
    load_checkpoint_in_model(
        model,
        weights_location,
        device_map,
        dtype=config.torch_dtype,
        offload_folder=offload_folder,
        offload_state_dict=offload_state_dict,
        keep_in_fp32_modules=config.keep_in_fp32_modules,
        offload_8bit_bnb=config.load_in_8bit and offload,
    )
    return dispatch_model(model, device_map=device_map, offload_dir=offload_folder)


def quantize_and_offload_8bit(
    model: nn.Module,
    param: torch.Tensor,
    param_name: str,
    new_dtype: Any,
    offload_folder: str | os.PathLike[str],
    offload_index: dict[str, Any],
    fp16_statistics: torch.Tensor | None,
) -> None:
    """Write the 8-bit weight ``param_name`` (quantizing ``param`` on GPU 0 first when
    ``fp16_statistics`` is None) and its ``SCB`` scale statistics to ``offload_folder``,
    recorded in ``offload_index``; the model keeps a meta tensor in its place."""

    scb_name = param_name.replace("weight", "SCB")
    if fp16_statistics is None:
        set_module_tensor_to_device(model, param_name, 0, dtype=new_dtype, value=param)
        *path, tensor_name = param_name.split(".")
        module = model
        for part in path:
            child = getattr(module, part)
            if child is None:
                raise ValueError(f"{module} has no attribute {part}.")
            module = child
        quantized = module._parameters[tensor_name]
        assert quantized is not None
        quantized.requires_grad = False
        offload_weight(quantized, param_name, offload_folder, index=offload_index)
        if hasattr(quantized, "SCB"):
            offload_weight(quantized.SCB, scb_name, offload_folder, index=offload_index)
    else:
        offload_weight(param, param_name, offload_folder, index=offload_index)
        offload_weight(fp16_statistics, scb_name, offload_folder, index=offload_index)
    set_module_tensor_to_device(
        model, param_name, "meta", dtype=new_dtype, value=torch.empty(*param.size())
    )
