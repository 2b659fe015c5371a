"""Device maps: which device each part of a model lives on (GPU indices, ``"cpu"``,
``"disk"``), checked, tidied, and worked out from the memory each device offers."""

from __future__ import annotations

import warnings
from typing import TypeAlias

import torch
from torch import nn

from overdrive.errors import ConfigError

# Where a part of a model lives: a GPU index, "cpu", "disk", "mps"... or a torch device.
Device: TypeAlias = int | str | torch.device
DeviceMap: TypeAlias = dict[str, Device]


def clean_device_map(device_map: DeviceMap, module_name: str = "") -> DeviceMap:
    """Merge entries: wherever every entry under a module shares one device, the module gets
    one entry (in place; returns the map)."""
    prefix = f"{module_name}." if module_name else ""
    under = [k for k in device_map if k.startswith(prefix)]
    values = [device_map[k] for k in under]
    if len(values) > 1 and len(set(values)) == 1:
        for key in under:
            del device_map[key]
        device_map[module_name] = values[0]
    depth = len(module_name.split(".")) + 1 if module_name else 1
    children = {
        ".".join(k.split(".")[:depth])
        for k in device_map
        if k.startswith(prefix) and len(k) > len(module_name)
    }
    for child in children:
        clean_device_map(device_map, module_name=child)
    return device_map


def check_device_map(model: nn.Module, device_map: DeviceMap) -> None:
    """Refuse a map that leaves a weight of ``model`` without a device; warn for keys that
    name no submodule."""
    modules = dict(model.named_modules())
    strangers = [k for k in device_map if k and k not in modules]
    if strangers:
        warnings.warn(
            f"The following device_map keys do not match any submodules in the model: {strangers}",
            UserWarning,
            stacklevel=2,
        )
    if "" in device_map:
        return
    uncovered = [
        name
        for name in model.state_dict()
        if not any(name == k or name.startswith(k + ".") for k in device_map)
    ]
    if uncovered:
        raise ConfigError(
            "The device_map provided does not give any device for the following parameters: "
            + ", ".join(uncovered),
            key="device_map",
            fix="give every module a device, or add an entry for '' (the whole model)",
        )


def execution_device_of(device: Device, main_device: Device) -> Device:
    """Where a part placed on ``device`` computes: offloaded parts run on the main device."""
    return main_device if device in ("cpu", "disk") else device


def main_device_of(device_map: DeviceMap) -> Device:
    """The device offloaded parts compute on: the first one that is not the CPU or the disk."""
    accelerators = set(device_map.values()) - {"cpu", "disk"}
    return next(iter(accelerators)) if accelerators else "cpu"
