"""The precision policy interface: composed with any strategy by the Accelerator."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch


class Precision:
    """fp32: nothing changes. Subclasses add autocast, loss scaling, fp8 conversion.

    The Accelerator calls, in order per step: ``convert_module`` once at prepare time,
    ``forward_context`` around the model's forward, ``scale_loss`` before backward,
    ``unscale_`` before clipping (idempotent within one step), ``optimizer_step`` which
    returns False when the step was skipped (inf/NaN under fp16), then ``after_step``.
    """

    name = "no"

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return module

    @contextlib.contextmanager
    def forward_context(self) -> Iterator[None]:
        yield

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
