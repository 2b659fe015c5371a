"""Load a saved model into a model (often an empty one), each weight straight to the device a
device map gives it: a GPU, the CPU, or the offload folder on disk."""

from __future__ import annotations

import gc
import logging
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

from overdrive.bigmodel.auto_map import infer_auto_device_map
from overdrive.bigmodel.checkpoint_files import checkpoint_files, load_state_dict
from overdrive.bigmodel.device_map import Device, DeviceMap
from overdrive.bigmodel.dispatch import dispatch_model
from overdrive.bigmodel.memory import MaxMemory, get_balanced_memory
from overdrive.bigmodel.sizes import as_dtype
from overdrive.bigmodel.store import (
    IndexEntry,
    load_offloaded_weight,
    offload_weight,
    save_offload_index,
)
from overdrive.bigmodel.tensors import set_module_tensor_to_device
from overdrive.bigmodel.ties import (
    check_tied_parameters_on_same_device,
    device_of,
    find_tied_parameters,
    retie_parameters,
    warn_if_untied,
)
from overdrive.errors import ConfigError

logger = logging.getLogger("overdrive.bigmodel")
PathLike = str | os.PathLike[str]


def load_offloaded_weights(
    model: nn.Module, index: Mapping[str, Mapping[str, object]] | None, offload_folder: PathLike
) -> None:
    """Read every weight of the offload ``index`` back from ``offload_folder`` onto the CPU,
    into ``model``."""
    for name, info in (index or {}).items():
        if "SCB" in name:
            continue
        statistics = None
        scales = name.replace("weight", "SCB")
        if "weight" in name and scales in index:  # type: ignore[operator]
            statistics = load_offloaded_weight(
                Path(offload_folder) / f"{scales}.dat",
                index[scales],  # type: ignore[index]
            )
        weight = load_offloaded_weight(Path(offload_folder) / f"{name}.dat", info)
        set_module_tensor_to_device(model, name, "cpu", value=weight, fp16_statistics=statistics)


def _target_dtype(
    name: str, tensor: torch.Tensor, dtype: torch.dtype | None, keep_fp32: list[str] | None
) -> torch.dtype | None:
    if dtype is None or not torch.is_floating_point(tensor):
        return dtype
    if keep_fp32 and dtype == torch.float16:
        for key in keep_fp32:
            if (key in name and key + "." in name) or key == name:
                return torch.float32
    return dtype


def _load_whole(
    model: nn.Module, state: dict[str, torch.Tensor], full_state_dict: bool, broadcast: bool
) -> None:
    """One file's tensors into a model with no device map."""
    is_distributed = any(
        type(t).__name__ == "DTensor" for t in [*model.parameters(), *model.buffers()]
    )
    if broadcast or is_distributed or not full_state_dict:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
        )

        options = StateDictOptions(
            full_state_dict=full_state_dict, strict=False, broadcast_from_rank0=broadcast
        )
        set_model_state_dict(model, dict(state), options=options)
        return
    empty = any(t.is_meta for t in [*model.parameters(), *model.buffers()])
    model.load_state_dict(state, strict=False, assign=empty)


def load_checkpoint_in_model(
    model: nn.Module,
    checkpoint: PathLike,
    device_map: DeviceMap | None = None,
    offload_folder: PathLike | None = None,
    dtype: str | torch.dtype | None = None,
    offload_state_dict: bool = False,
    offload_buffers: bool = False,
    keep_in_fp32_modules: list[str] | None = None,
    offload_8bit_bnb: bool = False,
    strict: bool = False,
    full_state_dict: bool = True,
    broadcast_from_rank0: bool = False,
) -> None:
    """Load ``checkpoint`` (a weights file, a folder, or a sharded save's index) into
    ``model`` in place, one file at a time. With ``device_map`` each weight goes to its
    device; ``"disk"`` weights to ``offload_folder``; ``offload_state_dict`` parks the CPU
    weights on disk until every file is read (less peak RAM). ``dtype`` casts floating
    weights (``keep_in_fp32_modules`` stay float32 under float16). ``strict``: every key must
    match."""
    if offload_8bit_bnb:
        raise ConfigError(
            "load_checkpoint_in_model(offload_8bit_bnb=True) needs bitsandbytes' 8-bit layers",
            key="offload_8bit_bnb",
            fix="load 8-bit models with transformers' own quantizer (BitsAndBytesConfig)",
        )
    tied = find_tied_parameters(model)
    warn_if_untied(model, tied)
    on_disk = device_map is not None and "disk" in device_map.values()
    if device_map is not None:
        check_tied_parameters_on_same_device(tied, device_map)
    if on_disk and offload_folder is None:
        raise ConfigError(
            "At least one of the model submodule will be offloaded to disk, please pass along "
            "an `offload_folder`.",
            key="offload_folder",
            fix="pass offload_folder=<a folder with room for the disk weights>",
        )
    if on_disk:
        os.makedirs(offload_folder, exist_ok=True)  # type: ignore[arg-type]
    cast = None if dtype is None else as_dtype(dtype)
    expected = set(model.state_dict())
    buffer_names = {name for name, _ in model.named_buffers()}
    parked = tempfile.mkdtemp() if offload_state_dict else None
    parked_index: dict[str, IndexEntry] = {}
    disk_index: dict[str, IndexEntry] = {}
    seen: set[str] = set()
    unexpected: set[str] = set()
    for path in checkpoint_files(checkpoint):
        state = load_state_dict(str(path), device_map=device_map)
        seen |= set(state)
        unexpected |= set(state) - expected
        if device_map is None:
            _load_whole(model, state, full_state_dict, broadcast_from_rank0)
        else:
            for name, tensor in state.items():
                if "SCB" in name or name not in expected:
                    continue
                device = _device_for(name, device_map)
                target = _target_dtype(name, tensor, cast, keep_in_fp32_modules)
                if device == "disk" and (offload_buffers or name not in buffer_names):
                    set_module_tensor_to_device(model, name, "meta", dtype=target or tensor.dtype)
                    offload_weight(tensor, name, offload_folder, index=disk_index)  # type: ignore[arg-type]
                elif device == "disk":
                    # A disk block's buffer stays in memory (offload_buffers=False): it still
                    # takes the checkpoint's value (Hugging Face Accelerate leaves the value
                    # the model was built with).
                    set_module_tensor_to_device(model, name, "cpu", value=tensor, dtype=target)
                elif device == "cpu" and parked is not None:
                    set_module_tensor_to_device(model, name, "meta", dtype=target or tensor.dtype)
                    offload_weight(tensor, name, parked, index=parked_index)
                else:
                    set_module_tensor_to_device(model, name, device, value=tensor, dtype=target)
        del state
        gc.collect()
    _report_keys(model, checkpoint, expected, seen, unexpected, strict)
    save_offload_index(disk_index, offload_folder) if offload_folder is not None else None
    if parked is not None:
        load_offloaded_weights(model, parked_index, parked)
        shutil.rmtree(parked)
    retie_parameters(model, tied)
    _refuse_empty_missing(model, checkpoint, expected - seen)


def _device_for(name: str, device_map: DeviceMap) -> Device:
    try:
        return device_of(name, device_map)
    except ValueError:
        raise ConfigError(
            f"{name} doesn't have any device set.",
            key="device_map",
            fix="give every module a device, or add an entry for '' (the whole model)",
        ) from None


def _report_keys(
    model: nn.Module,
    checkpoint: PathLike,
    expected: set[str],
    seen: set[str],
    unexpected: set[str],
    strict: bool,
) -> None:
    missing = expected - seen
    if strict and (unexpected or missing):
        raise ConfigError(
            f"{checkpoint} does not match {type(model).__name__}: weights the model does not "
            f"have {sorted(unexpected)[:5]}, weights it lacks {sorted(missing)[:5]}",
            key="checkpoint",
            fix="load the checkpoint saved from this model, or pass strict=False",
        )
    if unexpected:
        logger.warning(
            f"Some weights of the model checkpoint at {checkpoint} were not used when "
            f"initializing {type(model).__name__}: {unexpected}. This may or may not be an "
            "issue: check the checkpoint holds no extra weights, or that the model definition "
            "matches it."
        )


def _refuse_empty_missing(model: nn.Module, checkpoint: PathLike, missing: set[str]) -> None:
    """``strict=False`` lets the checkpoint lack weights the model keeps its own values for;
    a lacking weight the model holds on the meta device (built empty) has no value at all, and
    would fail later, unnamed ("Cannot copy out of meta tensor")."""
    if not missing:
        return
    tensors = model.state_dict(keep_vars=True)
    empty = sorted(n for n in missing if n in tensors and tensors[n].is_meta)
    if empty:
        shown = ", ".join(empty[:10]) + (f" and {len(empty) - 10} more" if len(empty) > 10 else "")
        raise ConfigError(
            f"{checkpoint} holds no value for {shown} of {type(model).__name__}, and the model "
            "holds it on the meta device (built empty, e.g. under init_empty_weights), so it "
            "would have no data",
            key="checkpoint",
            fix="load a checkpoint that holds every weight of the model, or build the model "
            "with real weights (not empty) so the weights the checkpoint lacks keep their "
            "initial values",
        )


def load_checkpoint_and_dispatch(
    model: nn.Module,
    checkpoint: PathLike,
    device_map: str | DeviceMap | None = None,
    max_memory: MaxMemory | None = None,
    no_split_module_classes: list[str] | None = None,
    offload_folder: PathLike | None = None,
    offload_buffers: bool = False,
    dtype: str | torch.dtype | None = None,
    offload_state_dict: bool | None = None,
    skip_keys: str | list[str] | None = None,
    preload_module_classes: list[str] | None = None,
    force_hooks: bool = False,
    strict: bool = False,
    full_state_dict: bool = True,
    broadcast_from_rank0: bool = False,
) -> nn.Module:
    """Load ``checkpoint`` into ``model`` and dispatch it. ``device_map`` may be a map, or
    ``"auto"`` / ``"balanced"`` / ``"balanced_low_0"`` (spread evenly over the GPUs, then the
    CPU and disk) or ``"sequential"`` (fill each GPU in turn) within ``max_memory``; None
    loads without dispatching. The CPU weights are parked on disk while loading when the
    map uses the disk (unless ``offload_state_dict=False``)."""

    strategies = ("auto", "balanced", "balanced_low_0", "sequential")
    if isinstance(device_map, str) and device_map not in strategies:
        raise ConfigError(
            f"device_map={device_map!r} is not a placement strategy",
            key="device_map",
            fix="pass a dict, or one of 'auto', 'balanced', 'balanced_low_0', 'sequential'",
        )
    if isinstance(device_map, str):
        if device_map != "sequential":
            max_memory = get_balanced_memory(
                model,
                max_memory=max_memory,
                no_split_module_classes=no_split_module_classes,
                dtype=dtype,
                low_zero=device_map == "balanced_low_0",
            )
        device_map = infer_auto_device_map(
            model,
            max_memory=max_memory,
            no_split_module_classes=no_split_module_classes,
            dtype=dtype,
            offload_buffers=offload_buffers,
        )
    if offload_state_dict is None:
        offload_state_dict = device_map is not None and "disk" in device_map.values()
    load_checkpoint_in_model(
        model,
        checkpoint,
        device_map=device_map,
        offload_folder=offload_folder,
        dtype=dtype,
        offload_state_dict=offload_state_dict,
        offload_buffers=offload_buffers,
        strict=strict,
        full_state_dict=full_state_dict,
        broadcast_from_rank0=broadcast_from_rank0,
    )
    if device_map is None:
        return model
    return dispatch_model(
        model,
        device_map=device_map,
        offload_dir=offload_folder,
        offload_buffers=offload_buffers,
        skip_keys=skip_keys,
        preload_module_classes=preload_module_classes,
        force_hooks=force_hooks,
    )
