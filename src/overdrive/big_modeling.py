"""``accelerate.big_modeling``: ``dispatch_model`` for a model on one device,
``cpu_offload_with_hook``."""

from __future__ import annotations

from typing import Any

from torch import nn

from overdrive.compat.big_modeling import init_empty_weights
from overdrive.compat.offload_hooks import UserCpuOffloadHook, cpu_offload_with_hook
from overdrive.compat.weights_loading import load_checkpoint_and_dispatch, load_checkpoint_in_model
from overdrive.utils.modeling import check_device_map, single_device

__all__ = [
    "UserCpuOffloadHook",
    "check_device_map",
    "cpu_offload_with_hook",
    "dispatch_model",
    "init_empty_weights",
    "load_checkpoint_and_dispatch",
    "load_checkpoint_in_model",
]


def dispatch_model(model: nn.Module, device_map: dict[str, Any], **_: Any) -> nn.Module:
    """Move ``model`` to the one device ``device_map`` names (several devices are refused)."""
    device = single_device(device_map)
    model.hf_device_map = dict(device_map)  # type: ignore[assignment]
    return model.to(device)
