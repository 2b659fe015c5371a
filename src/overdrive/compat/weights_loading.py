"""Loading saved weights into a model, the described system's ``load_checkpoint_in_model`` and
``load_checkpoint_and_dispatch``, for a model on one device (overdrive does not offload).

A checkpoint is a weights file (safetensors, or a torch file read with ``weights_only=True``,
which unpickles no code), or a folder holding one, or a sharded save's index
(``model.safetensors.index.json`` / ``pytorch_model.bin.index.json``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from overdrive.errors import ConfigError

_SINGLE = ("model.safetensors", "pytorch_model.bin")
_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


def _files(checkpoint: str | os.PathLike[str]) -> list[Path]:
    path = Path(checkpoint)
    if path.is_file():
        if path.name.endswith(".index.json"):
            index = json.loads(path.read_text())
            return [path.parent / name for name in dict.fromkeys(index["weight_map"].values())]
        return [path]
    for name in _INDEXES:
        if (path / name).is_file():
            return _files(path / name)
    for name in _SINGLE:
        if (path / name).is_file():
            return [path / name]
    raise ConfigError(
        f"checkpoint {str(path)!r} is neither a weights file nor a folder holding "
        f"{' or '.join(_SINGLE + _INDEXES)}",
        key="checkpoint",
        fix="pass the file or the folder save_model / save_pretrained wrote",
    )


def _read(path: Path) -> dict[str, torch.Tensor]:
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path))
    return torch.load(path, map_location="cpu", weights_only=True)


def load_checkpoint_in_model(
    model: nn.Module,
    checkpoint: str | os.PathLike[str],
    device_map: dict[str, Any] | None = None,
    offload_folder: str | os.PathLike[str] | None = None,
    dtype: str | torch.dtype | None = None,
    strict: bool = False,
    **_: Any,
) -> None:
    """Load ``checkpoint`` into ``model`` in place, one file at a time; with ``device_map``
    (one device), onto that device. ``strict``: every key must match."""
    from overdrive.utils.modeling import single_device

    device = single_device(device_map) if device_map else None
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype.replace("torch.", ""))
    expected = set(model.state_dict())
    seen: set[str] = set()
    for path in _files(checkpoint):
        state = _read(path)
        if dtype is not None:
            state = {k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}
        unexpected = set(state) - expected
        if strict and unexpected:
            raise ConfigError(
                f"{path} holds weights the model does not have: {sorted(unexpected)[:3]}",
                key="checkpoint",
                fix="load it into the model it was saved from, or pass strict=False",
            )
        model.load_state_dict(state, strict=False)
        seen |= set(state)
    missing = expected - seen
    if strict and missing:
        raise ConfigError(
            f"{checkpoint} lacks weights the model has: {sorted(missing)[:3]}",
            key="checkpoint",
            fix="load the checkpoint saved from this model, or pass strict=False",
        )
    if device is not None:
        model.to(device)


def load_checkpoint_and_dispatch(
    model: nn.Module,
    checkpoint: str | os.PathLike[str],
    device_map: str | dict[str, Any] | None = None,
    max_memory: dict[Any, Any] | None = None,
    no_split_module_classes: list[str] | None = None,
    offload_folder: str | os.PathLike[str] | None = None,
    dtype: str | torch.dtype | None = None,
    strict: bool = False,
    **_: Any,
) -> nn.Module:
    """Load ``checkpoint`` into ``model`` and put it on the one device ``device_map`` names
    (``"auto"`` and the other strategies: this process's device)."""
    from overdrive.big_modeling import dispatch_model
    from overdrive.utils.modeling import infer_auto_device_map

    if isinstance(device_map, str):
        device_map = infer_auto_device_map(model, max_memory=max_memory)
    load_checkpoint_in_model(model, checkpoint, device_map, offload_folder, dtype, strict)
    return dispatch_model(model, device_map) if device_map else model


def get_state_dict_from_offload(
    module: nn.Module,
    module_name: str,
    state_dict: dict[str, Any],
    device_to_put_offload: int | str | torch.device = "cpu",
) -> dict[str, Any]:
    """``state_dict[module_name]``: the tensor ``module`` holds under the name's last part, on
    ``device_to_put_offload`` (overdrive does not offload, so it is read from the module)."""
    own = module.state_dict()
    name = module_name.rsplit(".", 1)[-1]
    device = (
        f"cuda:{device_to_put_offload}"
        if isinstance(device_to_put_offload, int)
        else device_to_put_offload
    )
    state_dict[module_name] = own[name].detach().to(device)
    return state_dict
