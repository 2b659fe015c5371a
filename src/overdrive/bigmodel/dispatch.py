"""Run a model whose weights live elsewhere: all of it on the CPU or the disk with one
execution device (``cpu_offload``, ``disk_offload``), or spread by a device map over GPUs,
the CPU and the disk (``dispatch_model``)."""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

from overdrive.bigmodel.align import AlignDevicesHook
from overdrive.bigmodel.attach import attach_align_device_hook, attach_align_device_hook_on_blocks
from overdrive.bigmodel.device_map import (
    Device,
    DeviceMap,
    check_device_map,
    execution_device_of,
    main_device_of,
)
from overdrive.bigmodel.hooks import add_hook_to_module
from overdrive.bigmodel.offload_hooks import CpuOffload, UserCpuOffloadHook
from overdrive.bigmodel.store import (
    INDEX,
    IndexEntry,
    OffloadedWeightsLoader,
    extract_submodules_state_dict,
    offload_state_dict,
)
from overdrive.bigmodel.tensors import TiedMap
from overdrive.bigmodel.ties import find_tied_parameters, resolve, retie_parameters
from overdrive.errors import ConfigError

logger = logging.getLogger("overdrive.bigmodel")
PathLike = str | os.PathLike[str]


def _first_parameter_device(model: nn.Module) -> torch.device:
    return next(iter(model.parameters())).device


def cpu_offload(
    model: nn.Module,
    execution_device: torch.device | None = None,
    offload_buffers: bool = False,
    state_dict: dict[str, torch.Tensor] | None = None,
    preload_module_classes: list[str] | None = None,
) -> nn.Module:
    """Keep one copy of ``model``'s weights on the CPU (``state_dict``, default: its own);
    each module's weights visit ``execution_device`` (default: where its first parameter is)
    for its forward only."""
    weights = state_dict
    if weights is None:
        weights = {name: t.to("cpu") for name, t in model.state_dict().items()}
    return _offload_all(model, execution_device, offload_buffers, weights, preload_module_classes)


def _offload_all(
    model: nn.Module,
    execution_device: Device | None,
    offload_buffers: bool,
    weights: Mapping[str, torch.Tensor] | None,
    preload_module_classes: list[str] | None,
) -> nn.Module:
    """Every module's weights from ``weights``, onto the execution device for its forward;
    the output back where the input came from."""
    device = _first_parameter_device(model) if execution_device is None else execution_device
    add_hook_to_module(model, AlignDevicesHook(io_same_device=True), append=True)
    attach_align_device_hook(
        model,
        execution_device=device,
        offload=True,
        offload_buffers=offload_buffers,
        weights_map=weights,
        preload_module_classes=preload_module_classes,
    )
    return model


def cpu_offload_with_hook(
    model: nn.Module,
    execution_device: int | str | torch.device | None = None,
    prev_module_hook: UserCpuOffloadHook | None = None,
) -> tuple[nn.Module, UserCpuOffloadHook]:
    """Put ``model`` on the CPU; its first forward moves it whole to ``execution_device``,
    where it stays until the returned handle's ``offload()``. Chain models with
    ``prev_module_hook``: the previous model goes back to the CPU before this one runs."""
    hook = CpuOffload(execution_device=execution_device, prev_module_hook=prev_module_hook)
    add_hook_to_module(model, hook, append=True)
    return model, UserCpuOffloadHook(model, hook)


def _has_index(folder: PathLike | None) -> bool:
    return folder is not None and (Path(folder) / INDEX).is_file()


def disk_offload(
    model: nn.Module,
    offload_dir: PathLike,
    execution_device: torch.device | None = None,
    offload_buffers: bool = False,
    preload_module_classes: list[str] | None = None,
) -> nn.Module:
    """Keep ``model``'s weights in the folder ``offload_dir`` (written now unless it already
    holds an offload index); each module's weights are read, memory-mapped, onto
    ``execution_device`` for its forward only."""
    if not _has_index(offload_dir):
        offload_state_dict(offload_dir, model.state_dict())
    weights = OffloadedWeightsLoader(save_folder=offload_dir)
    return _offload_all(model, execution_device, offload_buffers, weights, preload_module_classes)


def _warn_on_move(method: Callable[..., object], model: nn.Module) -> Any:
    """``model.to`` / ``model.cuda`` that warn (a dispatched model's hooks place it) and refuse
    when weights are offloaded (they are on the meta device)."""

    @functools.wraps(method)
    def moved(*args: object, **kwargs: object) -> object:
        message = "You shouldn't move a model that is dispatched using accelerate hooks."
        if method.__name__ == "to":
            parse_to: Callable[..., tuple[object, ...]] = torch._C._nn._parse_to
            target = parse_to(*args, **kwargs)[0]
            if target is not None:
                logger.warning(message)
        else:
            logger.warning(message)
        if any(p.device == torch.device("meta") for p in model.parameters()):
            raise RuntimeError(
                "You can't move a model that has some modules offloaded to cpu or disk."
            )
        return method(*args, **kwargs)

    return moved


def _tied_addresses(model: nn.Module, tied: list[list[str]]) -> TiedMap:
    addresses: TiedMap = {}
    for group in tied:
        for name in group:
            tensor = cast(torch.Tensor, resolve(model, name))
            if tensor.device.type != "meta":  # a disk-offloaded tie has no stable address
                addresses[tensor.data_ptr()] = {}
    return addresses


def dispatch_model(
    model: nn.Module,
    device_map: DeviceMap,
    main_device: Device | None = None,
    state_dict: dict[str, torch.Tensor] | None = None,
    offload_dir: PathLike | None = None,
    offload_index: dict[str, IndexEntry] | None = None,
    offload_buffers: bool = False,
    skip_keys: str | list[str] | None = None,
    preload_module_classes: list[str] | None = None,
    force_hooks: bool = False,
    *,
    checked: bool = False,
) -> nn.Module:
    """Place ``model`` as ``device_map`` says. On one device it is simply moved there; over
    several (or with ``"disk"``, or ``force_hooks``) each block gets hooks: blocks on a GPU
    stay there, blocks on the CPU or the disk are offloaded and computed on ``main_device``
    (default: the map's first GPU, else the CPU), inputs follow the blocks and the output
    comes back where the input was. Disk blocks are written to ``offload_dir`` unless it
    already holds them (or ``offload_index`` points at them). ``checked``: the caller has
    checked the map already."""
    if not checked:
        check_device_map(model, device_map)
    devices = set(device_map.values())
    if len(devices) > 1 or "disk" in devices or force_hooks:
        _dispatch_with_hooks(
            model, device_map, main_device, state_dict, offload_dir, offload_index,
            offload_buffers, skip_keys, preload_module_classes,
        )  # fmt: skip
    else:
        model.to(next(iter(devices)))
    model.hf_device_map = dict(device_map)  # type: ignore[assignment]
    return model


def _dispatch_with_hooks(
    model: nn.Module,
    device_map: DeviceMap,
    main_device: Device | None,
    state_dict: dict[str, torch.Tensor] | None,
    offload_dir: PathLike | None,
    offload_index: dict[str, IndexEntry] | None,
    offload_buffers: bool,
    skip_keys: str | list[str] | None,
    preload_module_classes: list[str] | None,
) -> None:
    main = main_device_of(device_map) if main_device is None else main_device
    if main != "cpu":
        on_cpu = [name for name, d in device_map.items() if d == "cpu"]
        if state_dict is None and on_cpu:
            state_dict = extract_submodules_state_dict(model.state_dict(), on_cpu)
    on_disk = [name for name, d in device_map.items() if d == "disk"]
    if on_disk and offload_dir is None and offload_index is None:
        parts = ", ".join(name or "the whole model" for name in on_disk)
        raise ConfigError(
            f"device_map sends {parts} to 'disk' but no folder is given for them",
            key="offload_dir",
            fix="pass offload_dir (offload_folder in from_pretrained / load_checkpoint_and_dispatch)",
        )
    if on_disk and offload_index is None and not _has_index(offload_dir):
        assert offload_dir is not None
        offload_state_dict(offload_dir, extract_submodules_state_dict(model.state_dict(), on_disk))
    execution = {name: execution_device_of(d, main) for name, d in device_map.items()}
    execution[""] = main
    offloaded = ("disk",) if main in ("cpu", "mps") else ("cpu", "disk")
    offload = {name: d in offloaded for name, d in device_map.items()}
    folder = offload_dir if on_disk else None
    weights = None
    if state_dict is not None or folder is not None or offload_index is not None:
        weights = OffloadedWeightsLoader(
            state_dict=state_dict,
            save_folder=folder,
            index=offload_index,
            device=main if offload_index is not None else None,
        )
    tied = find_tied_parameters(model)
    attach_align_device_hook_on_blocks(
        model,
        execution_device=execution,
        offload=offload,
        offload_buffers=offload_buffers,
        weights_map=weights,
        skip_keys=skip_keys,
        preload_module_classes=preload_module_classes,
        tied_params_map=_tied_addresses(model, tied),
    )
    places = " and ".join(d for d in set(device_map.values()) if d in ("cpu", "disk"))
    if places:
        logger.warning(
            f"Some parameters are on the meta device because they were offloaded to the {places}."
        )
    retie_parameters(model, tied)  # hooks replaced parameters; keep the ties one tensor
    model.to = _warn_on_move(model.to, model)  # type: ignore[method-assign]
    model.cuda = _warn_on_move(model.cuda, model)  # type: ignore[method-assign]
