"""Finding and reading the files of a saved model: one weights file, a folder holding one, or a
sharded save with its ``*.index.json``. Torch files are read with ``weights_only=True``, which
unpickles no code."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import torch

from overdrive.bigmodel.checked_files import SafetensorsFile
from overdrive.bigmodel.device_map import Device, DeviceMap
from overdrive.errors import ConfigError

logger = logging.getLogger("overdrive.bigmodel")
WEIGHTS_NAME = "pytorch_model.bin"
SAFE_WEIGHTS_NAME = "model.safetensors"


def checkpoint_files(checkpoint: str | os.PathLike[str]) -> list[Path]:
    """The weight files ``checkpoint`` stands for, each once, shards in name order."""
    path = Path(checkpoint)
    if path.is_file():
        return _from_index(path) if path.suffix == ".json" else [path]
    if not path.is_dir():
        raise ConfigError(
            "`checkpoint` should be the path to a file containing a whole state dict, or the "
            "index of a sharded checkpoint, or a folder containing a sharded checkpoint or the "
            f"whole state dict, but got {checkpoint}.",
            key="checkpoint",
            fix="pass the file or folder that save_model / save_pretrained wrote",
        )
    for name in (WEIGHTS_NAME, SAFE_WEIGHTS_NAME):
        if (path / name).is_file():
            return [path / name]
    indexes = sorted(p for p in path.iterdir() if p.name.endswith(".index.json"))
    if len(indexes) == 1:
        return _from_index(indexes[0])
    problem = (
        f"{checkpoint} containing more than one `.index.json` file, delete the irrelevant ones."
        if indexes
        else f"{checkpoint} is not a folder containing a `.index.json` file or a {WEIGHTS_NAME} "
        f"or a {SAFE_WEIGHTS_NAME} file"
    )
    raise ConfigError(problem, key="checkpoint", fix="point at one saved model's files")


def _from_index(index_file: Path) -> list[Path]:
    index = json.loads(index_file.read_text())
    weight_map = index.get("weight_map", index)
    return [index_file.parent / name for name in sorted(set(weight_map.values()))]


def _safetensors_format(handle: SafetensorsFile) -> None:
    metadata = handle.metadata()
    path = handle.path
    if metadata is None:
        logger.warning(
            f"The safetensors archive passed at {path} does not contain metadata. Make sure to "
            "save your model with the `save_pretrained` method. Defaulting to 'pt' metadata."
        )
        return
    kind = metadata.get("format")
    if kind not in ("pt", "tf", "flax"):
        raise OSError(
            f"The safetensors archive passed at {path} does not contain the valid metadata. "
            "Make sure you save your model with the `save_pretrained` method."
        )
    if kind != "pt":
        raise ValueError(f"The checkpoint passed was saved with {kind}, we need a the pt format.")


def _device_name(device: Device) -> Device:
    return f"cuda:{device}" if isinstance(device, int) else device


def load_state_dict(
    checkpoint_file: str | os.PathLike[str], device_map: DeviceMap | None = None
) -> dict[str, torch.Tensor]:
    """The tensors of one weights file; a safetensors file with a ``device_map`` puts each
    tensor on its device (``"disk"`` entries and unmapped ones on the CPU). Safetensors files
    are read with checked plain reads into memory, never memory-mapped: a model's weights
    never stay backed by a file that may be truncated under them (a SIGBUS)."""
    path = str(checkpoint_file)
    if not path.endswith(".safetensors"):
        loaded: dict[str, torch.Tensor] = torch.load(path, map_location="cpu", weights_only=True)
        return loaded
    handle = SafetensorsFile(path)
    try:
        _safetensors_format(handle)
        return _placed(handle, device_map)
    finally:
        handle.close()


def _placed(handle: SafetensorsFile, device_map: DeviceMap | None) -> dict[str, torch.Tensor]:
    names = handle.keys()
    if device_map is None:
        return {n: handle.get_tensor(n) for n in names}
    devices = [d for d in dict.fromkeys(device_map.values()) if d != "disk"]
    if "cpu" not in devices:
        devices.append("cpu")
    wanted: dict[Device, list[str]] = {d: [] for d in devices}
    for module, device in device_map.items():
        if device in wanted:
            wanted[device] += [n for n in names if n == module or n.startswith(module + ".")]
    placed = {n for group in wanted.values() for n in group}
    wanted["cpu"] += [n for n in names if n not in placed]
    tensors: dict[str, torch.Tensor] = {}
    for device, group in wanted.items():
        for name in group:
            tensor = handle.get_tensor(name)
            tensors[name] = tensor if device == "cpu" else tensor.to(_device_name(device))
    return tensors
