"""``accelerate.utils.modeling``: device maps, restricted to what overdrive runs (one device per model).

A ``device_map`` naming one device works; one spreading a model over several devices or
offloading to CPU/disk is refused, naming ``device_map``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from overdrive.errors import ConfigError

_FIX = "load the model with device_map set to one device (e.g. device_map='cuda:0' or 'cpu'), or without device_map"


def _as_device(value: Any) -> str:
    if isinstance(value, int):
        return f"cuda:{value}"
    return (
        str(torch.device(value)) if not isinstance(value, str) or value not in ("disk",) else value
    )


def single_device(device_map: dict[str, Any]) -> str:
    """The one device a map uses, or a ConfigError naming ``device_map`` when it uses several."""
    devices = {_as_device(v) for v in device_map.values()}
    if len(devices) != 1 or "disk" in devices:
        raise ConfigError(
            f"device_map={dict(device_map)!r} (code, from_pretrained/dispatch_model) spreads the model over "
            f"{sorted(devices)}; overdrive keeps a model on one device and does not offload.",
            key="device_map",
            fix=_FIX,
        )
    return devices.pop()


def clean_device_map(device_map: dict[str, Any], module_name: str = "") -> dict[str, Any]:
    """Collapse a map whose entries under ``module_name`` all share one device into one entry."""
    prefix = "" if module_name == "" else f"{module_name}."
    values = [v for k, v in device_map.items() if k.startswith(prefix)]
    if module_name != "" and len(set(map(str, values))) == 1 and len(values) > 1:
        for k in [k for k in device_map if k.startswith(prefix)]:
            del device_map[k]
        device_map[module_name] = values[0]
    children = {
        k[len(prefix) :].split(".")[0]
        for k in list(device_map)
        if k.startswith(prefix) and k != module_name
    }
    for child in children:
        clean_device_map(device_map, prefix + child)
    return device_map


def get_max_memory(max_memory: dict[Any, Any] | None = None) -> dict[Any, int]:
    """Bytes available per device (GPUs by index, then ``cpu``); a given dict is returned with sizes as ints."""
    if max_memory is not None:
        return {k: _bytes(v) for k, v in max_memory.items()}
    found: dict[Any, int] = {}
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            found[i] = torch.cuda.mem_get_info(i)[0]
    import psutil

    found["cpu"] = psutil.virtual_memory().available
    return found


def _bytes(value: Any) -> int:
    if isinstance(value, int):
        return value
    text = str(value).upper().strip()
    units = {
        "KIB": 2**10,
        "MIB": 2**20,
        "GIB": 2**30,
        "TIB": 2**40,
        "KB": 10**3,
        "MB": 10**6,
        "GB": 10**9,
        "TB": 10**12,
    }
    for unit, scale in units.items():
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * scale)
    return int(text)


def get_balanced_memory(
    model: nn.Module, max_memory: dict[Any, Any] | None = None, **_: Any
) -> dict[Any, int]:
    """overdrive does not balance a model over devices: the memory per device as it is."""
    return get_max_memory(max_memory)


def _module_size(module: nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in (*module.parameters(), *module.buffers()))


def get_max_layer_size(
    modules: list[tuple[str, nn.Module]],
    module_sizes: dict[str, int],
    no_split_module_classes: list[str],
) -> tuple[int, list[str]]:
    """The biggest unsplittable layer among ``modules`` and its names."""
    best, names = 0, []
    todo = list(modules)
    while todo:
        name, module = todo.pop(0)
        children = list(module.named_children())
        if not children or type(module).__name__ in no_split_module_classes:
            size = module_sizes.get(name, _module_size(module))
            if size > best:
                best, names = size, [name]
            elif size == best:
                names.append(name)
        else:
            todo = [(f"{name}.{n}" if name else n, m) for n, m in children] + todo
    return best, names


def infer_auto_device_map(
    model: nn.Module, max_memory: dict[Any, Any] | None = None, **_: Any
) -> dict[str, Any]:
    """The whole model on the first device with room (overdrive never splits a model)."""
    memory = get_max_memory(max_memory)
    need = _module_size(model)
    for device, free in memory.items():
        if free >= need:
            return {"": device}
    raise ConfigError(
        f"device_map='auto': the model needs {need} bytes and no single device has that much ({memory}); "
        "overdrive does not split or offload a model.",
        key="device_map",
        fix=_FIX,
    )


def check_device_map(model: nn.Module, device_map: dict[str, Any]) -> None:
    """Refuse a map that leaves some of the model's parameters unplaced or uses several devices."""
    single_device(device_map)


def has_offloaded_params(module: nn.Module) -> bool:
    """True when ``module`` carries an ``AlignDevicesHook`` that offloads its weights (never
    here: overdrive's hook refuses to offload)."""
    from overdrive.hooks import AlignDevicesHook

    hook = getattr(module, "_hf_hook", None)
    return isinstance(hook, AlignDevicesHook) and bool(getattr(hook, "offload", False))


def __getattr__(name: str) -> Any:
    # Loading weights lives in its own module (it needs safetensors); imported when asked for.
    if name in ("load_checkpoint_in_model", "get_state_dict_from_offload"):
        from overdrive.compat import weights_loading

        return getattr(weights_loading, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
