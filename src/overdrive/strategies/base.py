"""The Strategy interface: everything a backend does differently, behind one small class.

The Accelerator holds one Strategy and delegates to it; it never asks which backend runs.
A new backend is a new file implementing these methods.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

Params = Iterable[torch.Tensor] | torch.Tensor


class Strategy:
    """The interface, with the plain behaviour (no wrapping, local gradients) as defaults."""

    name = "base"

    def __init__(self, device: torch.device) -> None:
        self.device = device

    # --- models and optimizers -------------------------------------------------------
    def setup_model(self, model: nn.Module, *, device_placement: bool) -> nn.Module:
        """Move ``model`` to the device (when asked) and wrap it for this backend."""
        if device_placement:
            model = model.to(self.device)
        return model

    def setup_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """Backend work on the raw optimizer (sharding, offload); identity by default."""
        return optimizer

    def unwrap(self, model: nn.Module) -> nn.Module:
        """The user's module under this backend's and torch.compile's wrappers."""
        while True:
            inner = getattr(model, "module", None) if _is_wrapper(model) else None
            if inner is None:
                inner = getattr(model, "_orig_mod", None)
            if not isinstance(inner, nn.Module):
                return model
            model = inner

    # --- the step ------------------------------------------------------------------
    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        loss.backward(**kwargs)

    def no_sync(self, model: nn.Module) -> contextlib.AbstractContextManager[None]:
        """Skip gradient synchronisation inside the block (nothing to skip on one process)."""
        return contextlib.nullcontext()

    def clip_grad_norm_(
        self, parameters: Params, max_norm: float, norm_type: float = 2.0
    ) -> torch.Tensor:
        """Clip the gradients' total norm; return the norm before clipping."""
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=norm_type)

    def clip_grad_value_(self, parameters: Params, clip_value: float) -> None:
        torch.nn.utils.clip_grad_value_(parameters, clip_value)

    # --- state dicts (used by overdrive.checkpoint) -------------------------------------
    def model_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """The full, unwrapped state dict of ``model`` (keys as the user's module names them)."""
        return self.unwrap(model).state_dict()

    def load_model_state_dict(
        self, model: nn.Module, state_dict: dict[str, torch.Tensor], strict: bool = True
    ) -> Any:
        return self.unwrap(model).load_state_dict(state_dict, strict=strict)

    def optimizer_state_dict(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        return _raw(optimizer).state_dict()

    def load_optimizer_state_dict(
        self, optimizer: torch.optim.Optimizer, state: dict[str, Any]
    ) -> None:
        _raw(optimizer).load_state_dict(state)

    # --- sharded state (backends whose processes each hold part of the model) ----------
    @property
    def sharded_checkpoints(self) -> bool:
        """True when ``save_state`` should have every process write its own shards."""
        return False

    def sharded_model_state_dict(self, model: nn.Module) -> dict[str, Any]:
        """This process's shards of ``model`` (DTensors keyed by the user's names)."""
        raise NotImplementedError(f"{type(self).__name__} does not shard models")

    def sharded_optimizer_state_dict(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        raise NotImplementedError(f"{type(self).__name__} does not shard optimizer state")

    def load_sharded_model_state_dict(self, model: nn.Module, state: dict[str, Any]) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not shard models")

    def load_sharded_optimizer_state_dict(
        self, optimizer: torch.optim.Optimizer, state: dict[str, Any]
    ) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not shard optimizer state")

    def teardown(self) -> None:
        """Release backend resources; the process group belongs to the process state."""
        return None


def _raw(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    return getattr(optimizer, "optimizer", optimizer)


def _is_wrapper(model: nn.Module) -> bool:
    return isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel))
