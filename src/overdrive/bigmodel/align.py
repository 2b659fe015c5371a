"""``AlignDevicesHook``: before a module's forward, its inputs (and, when offloaded, its
weights) go to the execution device; after it, offloaded weights go back to the meta device
and the output back to where the input was."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import cast

import torch
from torch import nn

from overdrive.bigmodel.device_map import Device
from overdrive.bigmodel.hooks import ModelHook, module_lock
from overdrive.bigmodel.moves import find_device, send_to_device
from overdrive.bigmodel.sizes import get_non_persistent_buffers, named_module_tensors
from overdrive.bigmodel.tensors import TiedMap, set_module_tensor_to_device
from overdrive.bigmodel.ties import resolve


def _is_meta(device: object) -> bool:
    return device == "meta" or device == torch.device("meta")


class AlignDevicesHook(ModelHook):
    """Keeps a module's inputs and weights on one ``execution_device`` for its forward.

    With ``offload`` the weights live in ``weights_map`` (a dict, or a lazy map over an
    offload folder) and only visit the execution device for the forward; ``offload_buffers``
    offloads the buffers too. ``io_same_device`` returns the output where the input was;
    ``place_submodules`` treats every submodule's tensors as this module's; ``skip_keys``
    names input keys never moved; ``tied_params_map`` lets tied weights share one copy per
    device.
    """

    def __init__(
        self,
        execution_device: int | str | torch.device | None = None,
        offload: bool = False,
        io_same_device: bool = False,
        weights_map: Mapping[str, torch.Tensor] | None = None,
        offload_buffers: bool = False,
        place_submodules: bool = False,
        skip_keys: str | list[str] | None = None,
        tied_params_map: TiedMap | None = None,
    ) -> None:
        self.execution_device = execution_device
        self.offload = offload
        self.io_same_device = io_same_device
        self.weights_map = weights_map
        self.offload_buffers = offload_buffers
        self.place_submodules = place_submodules
        self.skip_keys = skip_keys
        self.tied_params_map = tied_params_map
        self.input_device: torch.device | None = None
        self.param_original_devices: dict[str, torch.device] = {}
        self.buffer_original_devices: dict[str, torch.device] = {}
        self.original_devices: dict[str, torch.device] = {}
        self.tied_params_names: set[str] = set()
        self.tied_pointers_to_remove: set[tuple[int, Device]] = set()

    def __repr__(self) -> str:
        return (
            f"AlignDevicesHook(execution_device={self.execution_device}, offload={self.offload}, "
            f"io_same_device={self.io_same_device}, offload_buffers={self.offload_buffers}, "
            f"place_submodules={self.place_submodules}, skip_keys={self.skip_keys!r})"
        )

    def _offloaded(self, module: nn.Module) -> list[str]:
        """The names of the tensors this hook moves in and out (fixed once attached: looked
        up once, not at every forward)."""
        names = self.__dict__.get("_offloaded_names")
        if names is None:
            names = [
                name
                for name, _ in named_module_tensors(
                    module,
                    include_buffers=self.offload_buffers,
                    recurse=self.place_submodules,
                    remove_non_persistent=True,
                )
            ]
            self._offloaded_names = names
        return names

    def init_hook(self, module: nn.Module) -> nn.Module:
        if _is_meta(self.execution_device):
            self.tied_params_map = None  # meta tensors all share one (null) address
        device = self.execution_device
        if not self.offload:
            if device is not None:
                for name, _ in named_module_tensors(module, recurse=self.place_submodules):
                    set_module_tensor_to_device(
                        module, name, device, tied_params_map=self.tied_params_map
                    )
            return module
        self.original_devices = {
            name: t.device
            for name, t in named_module_tensors(module, recurse=self.place_submodules)
        }
        if self.weights_map is None:
            self.weights_map = {
                name: t.to("cpu")
                for name, t in named_module_tensors(
                    module, include_buffers=self.offload_buffers, recurse=self.place_submodules
                )
            }
        for name in self._offloaded(module):
            # A tied weight read from disk has no stable address: remember it by name, and
            # register its address when it is loaded for a forward.
            tied = self.tied_params_map
            if tied is not None and cast(torch.Tensor, resolve(module, name)).data_ptr() in tied:
                self.tied_params_names.add(name)
            set_module_tensor_to_device(module, name, "meta")
        if device is not None:
            if self.offload_buffers:
                buffers = list(get_non_persistent_buffers(module, recurse=self.place_submodules))
            else:
                buffers = [n for n, _ in module.named_buffers(recurse=self.place_submodules)]
            for name in buffers:
                set_module_tensor_to_device(
                    module, name, device, tied_params_map=self.tied_params_map
                )
        return module

    def _statistics(self, name: str, value: torch.Tensor | None) -> torch.Tensor | None:
        # An int8 weight's scales (bitsandbytes) travel as a separate "SCB" entry.
        if value is None or value.dtype != torch.int8 or "weight" not in name:
            return None
        key = name.replace("weight", "SCB")
        assert self.weights_map is not None
        return self.weights_map.get(key)

    def pre_forward(
        self, module: nn.Module, *args: object, **kwargs: object
    ) -> tuple[tuple[object, ...], dict[str, object]]:
        if self.io_same_device:
            self.input_device = find_device([args, kwargs])
        if self.offload:
            self._load_weights(module)
        device = self.execution_device
        return (
            send_to_device(args, device),
            send_to_device(kwargs, device, skip_keys=self.skip_keys),
        )

    def _load_weights(self, module: nn.Module) -> None:
        assert self.weights_map is not None
        self.tied_pointers_to_remove = set()
        tied = self.tied_params_map
        device = cast(Device, self.execution_device)  # an offloading hook has one
        for name in self._offloaded(module):
            value = self.weights_map[name]
            if tied is not None:
                if name in self.tied_params_names and value.data_ptr() not in tied:
                    tied[value.data_ptr()] = {}
                copies = tied.get(value.data_ptr())
                if copies is not None and device not in copies:
                    self.tied_pointers_to_remove.add((value.data_ptr(), device))
            set_module_tensor_to_device(
                module,
                name,
                device,
                value=value,
                fp16_statistics=self._statistics(name, value),
                tied_params_map=tied,
                clear_cache=False,  # emptying the allocator's cache per weight only costs time
            )

    def post_forward(self, module: nn.Module, output: object) -> object:
        if self.offload:
            for name in self._offloaded(module):
                set_module_tensor_to_device(module, name, "meta", clear_cache=False)
                if type(module).__name__ == "Linear8bitLt":
                    module.state.SCB = None  # type: ignore[union-attr]
                    module.state.CxB = None  # type: ignore[union-attr]
            # Forget the copies of tied weights made for this forward so they can be freed.
            tied = self.tied_params_map
            for pointer, device in self.tied_pointers_to_remove:
                if tied is not None:
                    tied.get(pointer, {}).pop(device, None)
            self.tied_pointers_to_remove = set()
        if self.io_same_device and self.input_device is not None:
            output = send_to_device(output, self.input_device, skip_keys=self.skip_keys)
        return output

    def detach_hook(self, module: nn.Module) -> nn.Module:
        if self.offload:
            assert self.weights_map is not None
            for name, device in self.original_devices.items():
                if device != torch.device("meta"):
                    value = self.weights_map.get(name, None)
                    set_module_tensor_to_device(
                        module,
                        name,
                        device,
                        value=value,
                        fp16_statistics=self._statistics(name, value),
                    )
        return module


def has_offloaded_params(module: nn.Module) -> bool:
    """Whether ``module`` carries an ``AlignDevicesHook`` that offloads its weights."""
    hook = getattr(module, "_hf_hook", None)
    return isinstance(hook, AlignDevicesHook) and bool(hook.offload)


@contextlib.contextmanager
def align_module_device(
    module: nn.Module, execution_device: torch.device | None = None
) -> Iterator[None]:
    """Inside, ``module``'s own weights are real and on one device: an offloaded module's
    are loaded (onto ``execution_device`` when given, else its hook's), another module's are
    moved to ``execution_device`` when given; all go back on leaving."""
    if has_offloaded_params(module):
        hook: AlignDevicesHook = module._hf_hook  # type: ignore[assignment]
        with module_lock(module):  # not while another thread's forward has them loaded
            saved = hook.execution_device
            if execution_device is not None:
                hook.execution_device = execution_device
            try:
                hook.pre_forward(module)
                yield
            finally:
                hook.post_forward(module, None)
                hook.execution_device = saved
    elif execution_device is not None:
        devices = {name: p.device for name, p in module.named_parameters(recurse=False)}
        try:
            for name in devices:
                set_module_tensor_to_device(module, name, execution_device)
            yield
        finally:
            for name, device in devices.items():
                set_module_tensor_to_device(module, name, device)
    else:
        yield
