"""AcceleratedOptimizer: the user's optimizer, stepping only when a window closes."""

from __future__ import annotations

from typing import Any

import torch

from overdrive.accumulation import GradientState
from overdrive.precision import Precision


class AcceleratedOptimizer(torch.optim.Optimizer):
    """Wraps ``optimizer`` (kept as ``.optimizer``) for accumulation and loss scaling.

    ``step()`` and ``zero_grad()`` do nothing on micro-batches that do not close an
    accumulation window. ``step()`` asks the precision policy to step; under fp16 it may
    skip the step (inf/NaN gradients), which ``step_was_skipped`` reports. Everything else
    (``param_groups``, ``state``, ``state_dict`` ...) is the wrapped optimizer's.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_state: GradientState,
        precision: Precision,
    ) -> None:
        # Deliberately no super().__init__: the wrapped optimizer owns params and hooks.
        self.optimizer = optimizer
        self._gradient_state = gradient_state
        self._precision = precision
        self.step_was_skipped = False
        self.steps_taken = 0  # optimizer steps that really ran; schedulers follow this
        self._pending_rescale = 1.0
        self._unscaled = False

    # --- the wrapped optimizer's data -----------------------------------------------------
    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    @param_groups.setter
    def param_groups(self, value: list[dict[str, Any]]) -> None:
        self.optimizer.param_groups = value

    @property
    def state(self) -> Any:
        return self.optimizer.state

    @state.setter
    def state(self, value: Any) -> None:
        self.optimizer.state = value

    @property
    def defaults(self) -> dict[str, Any]:
        return self.optimizer.defaults

    @defaults.setter
    def defaults(self, value: dict[str, Any]) -> None:
        self.optimizer.defaults = value

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        self.optimizer.add_param_group(param_group)

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state_dict)

    def __repr__(self) -> str:
        return f"AcceleratedOptimizer({self.optimizer!r})"

    def __getattr__(self, name: str) -> Any:
        # Only reached for names this class lacks (e.g. a schedule-free optimizer's train()).
        if name == "optimizer":
            raise AttributeError(name)
        return getattr(self.optimizer, name)

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__.copy()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    # --- the step -----------------------------------------------------------------------
    def prepare_grads(self) -> None:
        """Unscale (precision) and apply a partial window's k/m rescale, once per step."""
        if self._unscaled:
            return
        self._unscaled = True
        self._precision.unscale_(self.optimizer)
        if self._pending_rescale != 1.0:
            factor, self._pending_rescale = self._pending_rescale, 1.0
            grads = [
                p.grad
                for g in self.optimizer.param_groups
                for p in g["params"]
                if p.grad is not None
            ]
            if grads:
                torch._foreach_mul_(grads, factor)

    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        """Step when the accumulation window closes; no-op on the other micro-batches."""
        if not self._gradient_state.sync_gradients:
            return
        if self._pending_rescale != 1.0:
            self.prepare_grads()
        if closure is None:
            ran = self._precision.optimizer_step(self.optimizer)
        else:
            ran = self._precision.optimizer_step(self.optimizer, closure=closure)
        self._precision.after_step()
        self._unscaled = False
        self.step_was_skipped = not ran
        if ran:
            self.steps_taken += 1

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear gradients, except inside an accumulation window (they are being summed)."""
        if self._gradient_state.sync_gradients:
            self.optimizer.zero_grad(set_to_none=set_to_none)
