"""The precision policy interface: composed with any strategy by the Accelerator."""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from overdrive.arguments.kwargs_handlers import AutocastKwargs

_NO_CONTEXT = contextlib.nullcontext()


class Precision:
    """fp32: nothing changes. Subclasses add autocast, loss scaling, fp8 conversion.

    The Accelerator calls, per model and optimizer:

    - ``convert_module`` once at prepare time, before the strategy wraps the model (the
      converted model runs its forward under autocast and returns fp32 outputs);
      ``revert_module`` undoes the forward wrapping (``unwrap_model(keep_fp32_wrapper=False)``);
    - ``register_optimizer`` once per prepared optimizer.

    Per step: ``scale_loss`` before each backward, ``unscale_`` before clipping (only on
    steps that synchronise gradients; idempotent within one step), ``optimizer_step`` which
    returns False when the step was skipped (inf/NaN under fp16), then ``after_step``.
    ``autocast`` is the context behind ``accelerator.autocast()``.
    """

    name = "no"
    autocast_dtype: torch.dtype | None = None

    @property
    def scaler(self) -> torch.amp.GradScaler | None:
        """The loss scaler (fp16 only), as ``accelerator.scaler``."""
        return None

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return module

    def revert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return module

    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        """The context a forward runs in (autocast with the configured arguments)."""
        return _NO_CONTEXT

    def autocast(
        self, autocast_kwargs: AutocastKwargs | None = None
    ) -> contextlib.AbstractContextManager[Any]:
        """Autocast for code outside the model's forward; ``autocast_kwargs`` overrides."""
        return _NO_CONTEXT

    def register_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        return None

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        return loss

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        return None

    def optimizer_step(self, optimizer: torch.optim.Optimizer, **kwargs: Any) -> bool:
        optimizer.step(**kwargs)
        return True

    def after_step(self) -> None:
        return None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class DelegatedPrecision(Precision):
    """A strategy that runs mixed precision itself (DeepSpeed, Megatron-LM): no autocast here."""

    def __init__(self, name: str) -> None:
        self.name = name
