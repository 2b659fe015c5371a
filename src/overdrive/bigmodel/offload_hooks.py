"""Whole-model hooks: a model that waits on the CPU and moves to its execution device when
called (pipelines of several models hand the device on), and layers stored in a narrow
dtype that compute in a wider one."""

from __future__ import annotations

import logging
import re

import torch
from torch import nn

from overdrive.bigmodel.hooks import ModelHook, add_hook_to_module, remove_hook_from_module
from overdrive.bigmodel.moves import default_execution_device, send_to_device
from overdrive.bigmodel.tensors import check_device_same, release_cached_memory

logger = logging.getLogger("overdrive.bigmodel")

# The layers whose weights layerwise casting stores narrow.
UPCASTING_LAYERS: tuple[type[nn.Module], ...] = (
    nn.Conv1d,
    nn.Conv2d,
    nn.Conv3d,
    nn.ConvTranspose1d,
    nn.ConvTranspose2d,
    nn.ConvTranspose3d,
    nn.Linear,
)


def _device_of(module: nn.Module) -> torch.device | None:
    first = next(module.parameters(), None)
    return None if first is None else first.device


class CpuOffload(ModelHook):
    """Keeps its model on the CPU until a forward needs it on ``execution_device`` (default:
    the first GPU, else MPS, else the CPU); it stays there until offloaded again. The model
    of ``prev_module_hook`` goes back to the CPU first."""

    def __init__(
        self,
        execution_device: str | int | torch.device | None = None,
        prev_module_hook: UserCpuOffloadHook | None = None,
    ) -> None:
        self.prev_module_hook = prev_module_hook
        self.execution_device = (
            default_execution_device() if execution_device is None else execution_device
        )

    def init_hook(self, module: nn.Module) -> nn.Module:
        return module.to("cpu")

    def pre_forward(
        self, module: nn.Module, *args: object, **kwargs: object
    ) -> tuple[tuple[object, ...], dict[str, object]]:
        previous = self.prev_module_hook
        if isinstance(previous, UserCpuOffloadHook):
            where = _device_of(previous.model)
            if where is not None and where != torch.device("cpu"):
                previous.offload()
                release_cached_memory()
        target = torch.device(self.execution_device)
        here = _device_of(module)
        if here is not None and check_device_same(here, target):
            return args, kwargs
        module.to(target)
        return send_to_device(args, target), send_to_device(kwargs, target)


class UserCpuOffloadHook:
    """The handle ``cpu_offload_with_hook`` gives back: ``offload()`` returns the model to the
    CPU, ``remove()`` takes the hook off."""

    def __init__(self, model: nn.Module, hook: ModelHook) -> None:
        self.model = model
        self.hook = hook

    def offload(self) -> None:
        self.hook.init_hook(self.model)

    def remove(self) -> None:
        remove_hook_from_module(self.model)


class LayerwiseCastingHook(ModelHook):
    """Stores a layer's weights in ``storage_dtype`` and casts them to ``compute_dtype`` for
    its forward only (less memory, some precision lost)."""

    _is_stateful = False

    def __init__(
        self, storage_dtype: torch.dtype, compute_dtype: torch.dtype, non_blocking: bool
    ) -> None:
        self.storage_dtype = storage_dtype
        self.compute_dtype = compute_dtype
        self.non_blocking = non_blocking

    def init_hook(self, module: nn.Module) -> nn.Module:
        module.to(dtype=self.storage_dtype, non_blocking=self.non_blocking)
        return module

    def pre_forward(
        self, module: nn.Module, *args: object, **kwargs: object
    ) -> tuple[tuple[object, ...], dict[str, object]]:
        module.to(dtype=self.compute_dtype, non_blocking=self.non_blocking)
        return args, kwargs

    def post_forward(self, module: nn.Module, output: object) -> object:
        module.to(dtype=self.storage_dtype, non_blocking=self.non_blocking)
        return output


def attach_layerwise_casting_hooks(
    module: nn.Module,
    storage_dtype: torch.dtype,
    compute_dtype: torch.dtype,
    skip_modules_pattern: str | tuple[str, ...] | None = None,
    skip_modules_classes: tuple[type[nn.Module], ...] | None = None,
    non_blocking: bool = False,
    _prefix: str = "",
) -> None:
    """A ``LayerwiseCastingHook`` on every linear and convolution layer under ``module``,
    except those whose name matches a regex of ``skip_modules_pattern`` or whose class is in
    ``skip_modules_classes`` (and everything under them)."""
    patterns = (
        (skip_modules_pattern,) if isinstance(skip_modules_pattern, str) else skip_modules_pattern
    )
    skipped = (skip_modules_classes is not None and isinstance(module, skip_modules_classes)) or (
        patterns is not None and any(re.search(p, _prefix) for p in patterns)
    )
    if skipped:
        logger.debug(f'Skipping layerwise casting for layer "{_prefix}"')
        return
    if isinstance(module, UPCASTING_LAYERS):
        hook = LayerwiseCastingHook(storage_dtype, compute_dtype, non_blocking)
        add_hook_to_module(module, hook, append=True)
        return
    for name, child in module.named_children():
        attach_layerwise_casting_hooks(
            child,
            storage_dtype,
            compute_dtype,
            patterns,
            skip_modules_classes,
            non_blocking,
            _prefix=f"{_prefix}.{name}" if _prefix else name,
        )
