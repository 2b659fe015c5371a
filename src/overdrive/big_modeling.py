"""``accelerate.big_modeling``: models larger than a device. Build them empty, spread them
over GPUs, the CPU and the disk, and load their checkpoints where each weight belongs. The
engine is ``overdrive.bigmodel``; this face reads Hugging Face Accelerate's one environment
switch and keeps ``check_device_map`` a module global (transformers replaces it to skip the
check for weights it places itself)."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from overdrive.bigmodel import dispatch as _dispatch
from overdrive.bigmodel import empty_init
from overdrive.bigmodel.device_map import check_device_map
from overdrive.bigmodel.dispatch import cpu_offload, cpu_offload_with_hook, disk_offload
from overdrive.bigmodel.loading import load_checkpoint_and_dispatch, load_checkpoint_in_model
from overdrive.bigmodel.offload_hooks import UserCpuOffloadHook, attach_layerwise_casting_hooks
from overdrive.parallel.recurrent_layers import refuse_recurrent_layers_under_sequence_parallelism

logger = logging.getLogger(__name__)
INCLUDE_BUFFERS_ENV = "ACCELERATE_INIT_INCLUDE_BUFFERS"

__all__ = [
    "UserCpuOffloadHook",
    "attach_layerwise_casting_hooks",
    "check_device_map",
    "cpu_offload",
    "cpu_offload_with_hook",
    "disk_offload",
    "dispatch_model",
    "init_empty_weights",
    "init_on_device",
    "load_checkpoint_and_dispatch",
    "load_checkpoint_in_model",
]


def _refuse_recurrent_layers_under_sequence_parallelism(model: nn.Module) -> None:
    # Hugging Face Accelerate's private name for this check; its tests import it from here.
    refuse_recurrent_layers_under_sequence_parallelism(model)


def _include_buffers(include_buffers: bool | None) -> bool:
    if include_buffers is not None:
        return include_buffers
    return os.environ.get(INCLUDE_BUFFERS_ENV, "").strip().lower() in ("1", "true", "yes", "on")


@contextlib.contextmanager
def init_on_device(device: torch.device, include_buffers: bool | None = None) -> Iterator[None]:
    """Modules created inside get their parameters on ``device`` (buffers too with
    ``include_buffers``; default: ``ACCELERATE_INIT_INCLUDE_BUFFERS``)."""
    with empty_init.init_on_device(device, _include_buffers(include_buffers)):
        yield


@contextlib.contextmanager
def init_empty_weights(include_buffers: bool | None = None) -> Iterator[None]:
    """Modules created inside hold no memory: parameters on the meta device, buffers real
    unless ``include_buffers`` (default: ``ACCELERATE_INIT_INCLUDE_BUFFERS``)."""
    with empty_init.init_on_device(torch.device("meta"), _include_buffers(include_buffers)):
        yield


def dispatch_model(
    model: nn.Module,
    device_map: dict[str, Any],
    main_device: Any = None,
    state_dict: dict[str, torch.Tensor] | None = None,
    offload_dir: str | os.PathLike[str] | None = None,
    offload_index: dict[str, Any] | None = None,
    offload_buffers: bool = False,
    skip_keys: str | list[str] | None = None,
    preload_module_classes: list[str] | None = None,
    force_hooks: bool = False,
) -> nn.Module:
    """Place ``model`` as ``device_map`` says (see ``overdrive.bigmodel.dispatch``)."""
    check_device_map(model, device_map)  # looked up here at call time: see the module docstring
    return _dispatch.dispatch_model(
        model,
        device_map,
        main_device=main_device,
        state_dict=state_dict,
        offload_dir=offload_dir,
        offload_index=offload_index,
        offload_buffers=offload_buffers,
        skip_keys=skip_keys,
        preload_module_classes=preload_module_classes,
        force_hooks=force_hooks,
        checked=True,
    )
