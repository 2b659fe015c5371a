"""fp16: autocast plus dynamic loss scaling with ``torch.amp.GradScaler`` (CPU included)."""

from __future__ import annotations

from typing import Any

import torch

from overdrive.arguments.kwargs_handlers import AutocastKwargs, GradScalerKwargs
from overdrive.precision.autocast import AutocastPrecision


def make_scaler(
    device: torch.device, kwargs: GradScalerKwargs, *, sharded: bool = False
) -> torch.amp.GradScaler:
    """A GradScaler on ``device``'s type; ``sharded`` (FSDP) all-reduces the inf check."""
    args: dict[str, Any] = {
        "init_scale": kwargs.init_scale,
        "growth_factor": kwargs.growth_factor,
        "backoff_factor": kwargs.backoff_factor,
        "growth_interval": kwargs.growth_interval,
        "enabled": kwargs.enabled,
    }
    if sharded:
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        return ShardedGradScaler(device.type, **args)
    return torch.amp.GradScaler(device.type, **args)


class ScaledPrecision(AutocastPrecision):
    """fp16: the loss is scaled before backward, gradients unscaled once per step, and the
    optimizer step skipped (scale backed off) when they hold inf/NaN.

    The scale is updated once every registered optimizer has stepped (right after the step
    with one optimizer), else before the next backward, so that every optimizer of a step
    unscales by the same scale it was scaled with.
    """

    def __init__(
        self,
        device: torch.device,
        *,
        autocast_kwargs: AutocastKwargs | None = None,
        scaler_kwargs: GradScalerKwargs | None = None,
        sharded: bool = False,
    ) -> None:
        super().__init__("fp16", device, torch.float16, autocast_kwargs)
        self.scaler_kwargs = scaler_kwargs or GradScalerKwargs()
        self._scaler = make_scaler(device, self.scaler_kwargs, sharded=sharded)
        self._enabled = self._scaler.is_enabled()
        self._registered: set[int] = set()
        self._unscaled: set[int] = set()
        self._stepped: set[int] = set()
        self._scaled_a_loss = False

    @property
    def scaler(self) -> torch.amp.GradScaler:
        self._flush_update()
        return self._scaler

    def register_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        self._registered.add(id(optimizer))

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        if self._unscaled or self._stepped:
            # a new backward after unscale_/step: that step is over, update the scale now
            self._update()
        self._scaled_a_loss = True
        return self._scaler.scale(loss)

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        if not self._enabled or id(optimizer) in self._unscaled:
            return
        self._scaler.unscale_(optimizer)
        self._unscaled.add(id(optimizer))

    def optimizer_step(self, optimizer: torch.optim.Optimizer, **kwargs: Any) -> bool:
        if not self._enabled or not self._scaled_a_loss:
            optimizer.step(**kwargs)  # nothing scaled yet: no gradients of ours to check
            return True
        self.unscale_(optimizer)
        # GradScaler keeps its inf check private. Reading it before the step costs the one
        # device sync GradScaler.step makes anyway; comparing scales after update() would
        # add a second sync behind the optimizer's kernels.
        found = self._scaler._per_optimizer_states[id(optimizer)]["found_inf_per_device"]
        if not found:  # no gradients at all: step like fp32 (GradScaler would assert)
            self._scaler._per_optimizer_states.pop(id(optimizer))
            self._unscaled.discard(id(optimizer))
            optimizer.step(**kwargs)
            return True
        skipped = bool(sum(v.item() for v in found.values()))
        self._scaler.step(optimizer, **kwargs)
        self._stepped.add(id(optimizer))
        if self._stepped >= self._registered:
            self._update()
        return not skipped

    def _flush_update(self) -> None:
        """Apply an update still pending from steps already taken (not mid-step)."""
        if self._stepped:
            self._update()

    def _update(self) -> None:
        states = self._scaler._per_optimizer_states
        if any(state["found_inf_per_device"] for state in states.values()):
            self._scaler.update()
        else:  # only gradient-less optimizers were unscaled: nothing to learn the scale from
            states.clear()
        self._stepped.clear()
        self._unscaled.clear()

    def state_dict(self) -> dict[str, Any]:
        self._flush_update()
        return dict(self._scaler.state_dict())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the scaler; an empty state (a run without fp16) keeps the fresh scaler."""
        if state and self._enabled:
            self._scaler.load_state_dict(state)
