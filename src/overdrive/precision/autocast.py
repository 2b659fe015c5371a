"""bf16 (and the autocast half of fp16/fp8): forward under ``torch.autocast``, fp32 outputs."""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from overdrive.arguments.kwargs_handlers import AutocastKwargs
from overdrive.precision.base import Precision
from overdrive.precision.outputs import outputs_to_fp32


class AutocastForward:
    """A module's forward run under autocast, returning fp32 outputs.

    Installed as the module's instance attribute ``forward`` so ``module(...)``, DDP and
    ``torch.compile`` all go through it while parameter names stay unchanged. A class rather
    than a closure so that a whole pickled model still loads.
    """

    def __init__(self, forward: Any, autocast_args: dict[str, Any]) -> None:
        self.__wrapped__ = forward  # inspect.signature(model.forward) follows this
        self._args = autocast_args

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with torch.autocast(**self._args):
            out = self.__wrapped__(*args, **kwargs)
        return outputs_to_fp32(out)


def _autocast_args(device_type: str, dtype: torch.dtype, kw: AutocastKwargs) -> dict[str, Any]:
    args: dict[str, Any] = {"device_type": device_type, "dtype": dtype, "enabled": kw.enabled}
    if kw.cache_enabled is not None:
        args["cache_enabled"] = kw.cache_enabled
    return args


class AutocastPrecision(Precision):
    """Forward under ``torch.autocast(device_type, dtype)``; no loss scaling (bf16)."""

    def __init__(
        self,
        name: str,
        device: torch.device,
        dtype: torch.dtype,
        autocast_kwargs: AutocastKwargs | None = None,
    ) -> None:
        self.name = name
        self.device_type = device.type
        self.autocast_dtype = dtype
        self.autocast_kwargs = autocast_kwargs or AutocastKwargs()
        self._args = _autocast_args(self.device_type, dtype, self.autocast_kwargs)

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        if not self.autocast_kwargs.enabled or isinstance(
            module.__dict__.get("forward"), AutocastForward
        ):
            return module
        module.forward = AutocastForward(module.forward, self._args)
        return module

    def revert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        if isinstance(module.__dict__.get("forward"), AutocastForward):
            del module.forward
        return module

    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        return torch.autocast(**self._args)

    def autocast(
        self, autocast_kwargs: AutocastKwargs | None = None
    ) -> contextlib.AbstractContextManager[Any]:
        if autocast_kwargs is None:
            return torch.autocast(**self._args)
        assert self.autocast_dtype is not None
        return torch.autocast(
            **_autocast_args(self.device_type, self.autocast_dtype, autocast_kwargs)
        )
