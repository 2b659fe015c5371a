"""``accelerate.hooks``: hooks around a module's forward that see its keyword arguments, and
the ones that place weights (``AlignDevicesHook``) or whole models (``CpuOffload``) on their
execution device. The engine is ``overdrive.bigmodel``."""

from __future__ import annotations

from overdrive.bigmodel.align import AlignDevicesHook
from overdrive.bigmodel.attach import (
    attach_align_device_hook,
    attach_align_device_hook_on_blocks,
    attach_execution_device_hook,
)
from overdrive.bigmodel.hooks import (
    ModelHook,
    SequentialHook,
    add_hook_to_module,
    remove_hook_from_module,
    remove_hook_from_submodules,
)
from overdrive.bigmodel.offload_hooks import CpuOffload, LayerwiseCastingHook, UserCpuOffloadHook

__all__ = [
    "AlignDevicesHook",
    "CpuOffload",
    "LayerwiseCastingHook",
    "ModelHook",
    "SequentialHook",
    "UserCpuOffloadHook",
    "add_hook_to_module",
    "attach_align_device_hook",
    "attach_align_device_hook_on_blocks",
    "attach_execution_device_hook",
    "remove_hook_from_module",
    "remove_hook_from_submodules",
]
