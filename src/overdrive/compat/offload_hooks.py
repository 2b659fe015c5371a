"""``cpu_offload_with_hook``: a model that waits on the CPU and moves to its execution device
for a forward (the described system's ``accelerate.big_modeling``)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from overdrive.hooks import ModelHook, add_hook_to_module, remove_hook_from_module


def _default_device() -> torch.device:
    return (
        torch.device("cuda", torch.cuda.current_device())
        if torch.cuda.is_available()
        else torch.device("cpu")
    )


class CpuOffload(ModelHook):
    """Keeps its module on the CPU until a forward needs it on ``execution_device``; the
    previous model's hook (``prev_module_hook``) is offloaded first."""

    def __init__(
        self, execution_device: Any = None, prev_module_hook: UserCpuOffloadHook | None = None
    ) -> None:
        self.execution_device = torch.device(execution_device or _default_device())
        self.prev_module_hook = prev_module_hook

    def init_hook(self, module: nn.Module) -> nn.Module:
        return module.to("cpu")

    def pre_forward(
        self, module: nn.Module, *args: Any, **kwargs: Any
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        from overdrive.utils.operations import send_to_device

        if self.prev_module_hook is not None:
            self.prev_module_hook.offload()
        module.to(self.execution_device)
        return send_to_device(args, self.execution_device), send_to_device(
            kwargs, self.execution_device
        )


class UserCpuOffloadHook:
    """The handle ``cpu_offload_with_hook`` returns: ``offload()`` sends the model back to the
    CPU, ``remove()`` takes the hook off."""

    def __init__(self, model: nn.Module, hook: CpuOffload) -> None:
        self.model = model
        self.hook = hook

    def offload(self) -> None:
        self.hook.init_hook(self.model)

    def remove(self) -> None:
        remove_hook_from_module(self.model)


def cpu_offload_with_hook(
    model: nn.Module,
    execution_device: int | str | torch.device | None = None,
    prev_module_hook: UserCpuOffloadHook | None = None,
) -> tuple[nn.Module, UserCpuOffloadHook]:
    """Put ``model`` on the CPU; each forward moves it (and its inputs) to
    ``execution_device`` and it stays there until its handle's ``offload()``."""
    hook = CpuOffload(execution_device, prev_module_hook)
    add_hook_to_module(model, hook, append=True)
    return model, UserCpuOffloadHook(model, hook)
