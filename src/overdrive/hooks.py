"""``accelerate.hooks``: forward hooks attached to a module (the part transformers imports).

overdrive places whole models on one device, so the hooks here exist for code that attaches
its own (``add_hook_to_module``) and for ``AlignDevicesHook`` moving inputs to a module's device.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn


class ModelHook:
    """Callbacks around a module's forward; subclass and override what you need."""

    no_grad = False

    def init_hook(self, module: nn.Module) -> nn.Module:
        return module

    def pre_forward(
        self, module: nn.Module, *args: Any, **kwargs: Any
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return args, kwargs

    def post_forward(self, module: nn.Module, output: Any) -> Any:
        return output

    def detach_hook(self, module: nn.Module) -> nn.Module:
        return module


class SequentialHook(ModelHook):
    """Several hooks run in order."""

    def __init__(self, *hooks: ModelHook) -> None:
        self.hooks = hooks

    def init_hook(self, module: nn.Module) -> nn.Module:
        for hook in self.hooks:
            module = hook.init_hook(module)
        return module

    def pre_forward(
        self, module: nn.Module, *args: Any, **kwargs: Any
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        for hook in self.hooks:
            args, kwargs = hook.pre_forward(module, *args, **kwargs)
        return args, kwargs

    def post_forward(self, module: nn.Module, output: Any) -> Any:
        for hook in self.hooks:
            output = hook.post_forward(module, output)
        return output

    def detach_hook(self, module: nn.Module) -> nn.Module:
        for hook in self.hooks:
            module = hook.detach_hook(module)
        return module


class AlignDevicesHook(ModelHook):
    """Moves a forward's inputs to ``execution_device`` (offload is not supported)."""

    def __init__(
        self,
        execution_device: Any = None,
        offload: bool = False,
        io_same_device: bool = False,
        **_: Any,
    ) -> None:
        if offload:
            raise NotImplementedError(
                "AlignDevicesHook(offload=True): overdrive does not offload weights"
            )
        self.execution_device = execution_device
        self.io_same_device = io_same_device
        self.input_device: torch.device | None = None

    def pre_forward(
        self, module: nn.Module, *args: Any, **kwargs: Any
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        from overdrive.utils.operations import send_to_device

        if self.io_same_device:
            first = next(
                (a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None
            )
            self.input_device = first.device if first is not None else None
        if self.execution_device is None:
            return args, kwargs
        return send_to_device(args, self.execution_device), send_to_device(
            kwargs, self.execution_device
        )

    def post_forward(self, module: nn.Module, output: Any) -> Any:
        from overdrive.utils.operations import send_to_device

        if self.io_same_device and self.input_device is not None:
            return send_to_device(output, self.input_device)
        return output


def add_hook_to_module(module: nn.Module, hook: ModelHook, append: bool = False) -> nn.Module:
    """Wrap ``module.forward`` so ``hook`` runs around it; ``append`` chains after an existing hook."""
    old = getattr(module, "_hf_hook", None)
    if append and old is not None:
        remove_hook_from_module(module)
        hook = SequentialHook(old, hook)
    elif old is not None:
        remove_hook_from_module(module)
    original = module.forward
    module._old_forward = original  # type: ignore[assignment]
    module = hook.init_hook(module)
    module._hf_hook = hook  # type: ignore[assignment]

    @functools.wraps(original)
    def forward(*args: Any, **kwargs: Any) -> Any:
        active: Any = module.__dict__["_hf_hook"]
        old: Any = module.__dict__["_old_forward"]
        args, kwargs = active.pre_forward(module, *args, **kwargs)
        if active.no_grad:
            with torch.no_grad():
                output = old(*args, **kwargs)
        else:
            output = old(*args, **kwargs)
        return active.post_forward(module, output)

    module.forward = forward
    return module


def remove_hook_from_module(module: nn.Module, recurse: bool = False) -> nn.Module:
    """Undo :func:`add_hook_to_module` (on every submodule too when ``recurse``)."""
    hook = module.__dict__.pop("_hf_hook", None)
    if hook is not None:
        hook.detach_hook(module)
        module.forward = module.__dict__.pop("_old_forward")
        module.__dict__.pop("forward", None) if module.forward is type(module).forward else None
    if recurse:
        for child in module.children():
            remove_hook_from_module(child, recurse=True)
    return module


def attach_align_device_hook(
    module: nn.Module,
    execution_device: torch.device | None = None,
    offload: bool = False,
    weights_map: Any = None,
    offload_buffers: bool = False,
    module_name: str = "",
    skip_keys: Any = None,
    preload_module_classes: list[str] | None = None,
    tied_params_map: Any = None,
) -> None:
    """An ``AlignDevicesHook`` on ``module`` and every submodule holding its own parameters
    (offloading weights is refused by the hook, naming it)."""
    del weights_map, offload_buffers, skip_keys, preload_module_classes, tied_params_map
    own = any(True for _ in module.parameters(recurse=False))
    if own or offload:
        hook = AlignDevicesHook(execution_device, offload=offload, io_same_device=module_name == "")
        add_hook_to_module(module, hook, append=True)
    for name, child in module.named_children():
        child_name = f"{module_name}.{name}" if module_name else name
        attach_align_device_hook(child, execution_device, offload, module_name=child_name)
