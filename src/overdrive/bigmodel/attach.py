"""Putting ``AlignDevicesHook``s on a model: on every module that holds weights (offload), or
on the blocks of a device map (one hook per block, offloaded or not)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

import torch
from torch import nn

from overdrive.bigmodel.align import AlignDevicesHook
from overdrive.bigmodel.device_map import Device
from overdrive.bigmodel.hooks import add_hook_to_module
from overdrive.bigmodel.sizes import named_module_tensors
from overdrive.bigmodel.store import PrefixedDataset
from overdrive.bigmodel.tensors import TiedMap

SkipKeys = str | list[str] | None


def attach_execution_device_hook(
    module: nn.Module,
    execution_device: int | str | torch.device,
    skip_keys: SkipKeys = None,
    preload_module_classes: list[str] | None = None,
    tied_params_map: TiedMap | None = None,
) -> None:
    """An input-moving hook on every module under ``module`` that holds state and has no hook
    yet (down to, not into, the ``preload_module_classes``)."""
    if not hasattr(module, "_hf_hook") and len(module.state_dict()) > 0:
        hook = AlignDevicesHook(
            execution_device, skip_keys=skip_keys, tied_params_map=tied_params_map
        )
        add_hook_to_module(module, hook)
    if preload_module_classes is not None and type(module).__name__ in preload_module_classes:
        return
    for child in module.children():
        attach_execution_device_hook(
            child, execution_device, skip_keys, preload_module_classes, tied_params_map
        )


def attach_align_device_hook(
    module: nn.Module,
    execution_device: Device | None = None,
    offload: bool = False,
    weights_map: Mapping[str, torch.Tensor] | None = None,
    offload_buffers: bool = False,
    module_name: str = "",
    skip_keys: SkipKeys = None,
    preload_module_classes: list[str] | None = None,
    tied_params_map: TiedMap | None = None,
) -> None:
    """An ``AlignDevicesHook`` on every module under ``module`` that holds tensors of its own;
    an instance of one of ``preload_module_classes`` takes one hook for all its submodules'
    weights (when offloading)."""
    whole = (
        offload
        and preload_module_classes is not None
        and type(module).__name__ in preload_module_classes
    )
    if whole or any(True for _ in named_module_tensors(module)):
        prefix = f"{module_name}." if module_name else ""
        hook = AlignDevicesHook(
            execution_device=execution_device,
            offload=offload,
            weights_map=None if weights_map is None else PrefixedDataset(weights_map, prefix),
            offload_buffers=offload_buffers,
            place_submodules=whole,
            skip_keys=skip_keys,
            tied_params_map=tied_params_map,
        )
        add_hook_to_module(module, hook, append=True)
    if whole:
        return
    for name, child in module.named_children():
        attach_align_device_hook(
            child,
            execution_device=execution_device,
            offload=offload,
            weights_map=weights_map,
            offload_buffers=offload_buffers,
            module_name=f"{module_name}.{name}" if module_name else name,
            skip_keys=skip_keys,
            preload_module_classes=preload_module_classes,
            tied_params_map=tied_params_map,
        )


def attach_align_device_hook_on_blocks(
    module: nn.Module,
    execution_device: Device | Mapping[str, Device] | None = None,
    offload: bool | dict[str, bool] = False,
    weights_map: Mapping[str, torch.Tensor] | None = None,
    offload_buffers: bool = False,
    module_name: str = "",
    skip_keys: SkipKeys = None,
    preload_module_classes: list[str] | None = None,
    tied_params_map: TiedMap | None = None,
) -> None:
    """Hooks for a model placed block by block: ``execution_device`` and ``offload`` are one
    value for the whole model or a dict from block name to value (a device map's shape).
    A block kept on its device gets one hook that places it; an offloaded block gets one per
    module holding weights; the model itself returns outputs where its inputs came from."""
    if not isinstance(execution_device, Mapping) and not isinstance(offload, dict):
        if offload:
            attach_align_device_hook(
                module,
                execution_device=execution_device,
                offload=True,
                weights_map=weights_map,
                offload_buffers=offload_buffers,
                module_name=module_name,
                skip_keys=skip_keys,
                tied_params_map=tied_params_map,
            )
        else:
            hook = AlignDevicesHook(
                execution_device=execution_device,
                io_same_device=True,
                skip_keys=skip_keys,
                place_submodules=True,
                tied_params_map=tied_params_map,
            )
            add_hook_to_module(module, hook)
        return
    # offload is a dict here; a device of None stays None, as the hooks take it
    devices: Mapping[str, Device] = (
        execution_device
        if isinstance(execution_device, Mapping)
        else dict.fromkeys(cast("dict[str, bool]", offload), cast(Device, execution_device))
    )
    offloads = offload if isinstance(offload, Mapping) else dict.fromkeys(devices, offload)
    _attach_block(
        module, module_name, devices, offloads, weights_map, offload_buffers, skip_keys,
        preload_module_classes, tied_params_map,
    )  # fmt: skip
    for name, child in module.named_children():
        attach_align_device_hook_on_blocks(
            child,
            execution_device=devices,
            offload=dict(offloads),
            weights_map=weights_map,
            offload_buffers=offload_buffers,
            module_name=f"{module_name}.{name}" if module_name else name,
            preload_module_classes=preload_module_classes,
            skip_keys=skip_keys,
            tied_params_map=tied_params_map,
        )


def _attach_block(
    module: nn.Module,
    name: str,
    devices: Mapping[str, Device],
    offloads: Mapping[str, bool],
    weights_map: Mapping[str, torch.Tensor] | None,
    offload_buffers: bool,
    skip_keys: SkipKeys,
    preload_module_classes: list[str] | None,
    tied_params_map: TiedMap | None,
) -> None:
    is_block = name in devices and name in offloads
    if is_block and not offloads[name]:
        hook = AlignDevicesHook(
            execution_device=devices[name],
            offload_buffers=offload_buffers,
            io_same_device=name == "",
            place_submodules=True,
            skip_keys=skip_keys,
            tied_params_map=tied_params_map,
        )
        add_hook_to_module(module, hook)
        attach_execution_device_hook(
            module, devices[name], skip_keys=skip_keys, tied_params_map=tied_params_map
        )
    elif is_block:
        attach_align_device_hook(
            module,
            execution_device=devices[name],
            offload=True,
            weights_map=weights_map,
            offload_buffers=offload_buffers,
            module_name=name,
            skip_keys=skip_keys,
            preload_module_classes=preload_module_classes,
            tied_params_map=tied_params_map,
        )
        if not hasattr(module, "_hf_hook"):
            hook = AlignDevicesHook(
                execution_device=devices[name],
                io_same_device=name == "",
                skip_keys=skip_keys,
                tied_params_map=tied_params_map,
            )
            add_hook_to_module(module, hook)
        attach_execution_device_hook(
            module,
            devices[name],
            preload_module_classes=preload_module_classes,
            skip_keys=skip_keys,
            tied_params_map=tied_params_map,
        )
    elif name == "":
        hook = AlignDevicesHook(
            execution_device=devices.get(""),
            io_same_device=True,
            skip_keys=skip_keys,
            tied_params_map=tied_params_map,
        )
        add_hook_to_module(module, hook)
