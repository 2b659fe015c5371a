"""AcceleratedOptimizer: the user's optimizer, stepping only when a window closes."""

from __future__ import annotations

from typing import Any

import torch

from overdrive.accumulation import GradientState
from overdrive.precision import Precision
from overdrive.strategies.base import Strategy


class AcceleratedOptimizer(torch.optim.Optimizer):
    """Wraps ``optimizer`` (kept as ``.optimizer``) for accumulation and loss scaling.

    ``step()`` and ``zero_grad()`` do nothing on micro-batches that do not close an
    accumulation window. ``step()`` asks the precision policy to step; under fp16 it may
    skip the step (inf/NaN gradients), which ``step_was_skipped`` reports. Everything else
    (``param_groups``, ``state``, ``state_dict`` ...) is the wrapped optimizer's.

    The step, ``zero_grad`` and a partial window's rescale go through ``strategy`` (plain
    PyTorch by default), so a backend whose engine owns the step (DeepSpeed) runs it there.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_state: GradientState,
        precision: Precision,
        strategy: Strategy | None = None,
    ) -> None:
        # Deliberately no super().__init__: the wrapped optimizer owns params and hooks.
        self.optimizer = optimizer
        self._gradient_state = gradient_state
        self._precision = precision
        self._strategy = strategy if strategy is not None else Strategy(torch.device("cpu"))
        self.step_was_skipped = False
        self.steps_taken = 0  # optimizer steps that really ran; schedulers follow this
        self.steps_tried = 0  # step() calls at the end of a window, run or skipped
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
            self._strategy.rescale_grads(self.optimizer, factor)

    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        """Step when the accumulation window closes; no-op on the other micro-batches."""
        if not self._gradient_state.sync_gradients:
            return
        if self._pending_rescale != 1.0:
            self.prepare_grads()
        self.steps_tried += 1
        ran = self._strategy.optimizer_step(self.optimizer, self._precision, closure)
        self._precision.after_step()
        self._unscaled = False
        self.step_was_skipped = not ran
        if ran:
            self.steps_taken += 1

    @property
    def _is_overflow(self) -> bool:
        """The described system's name for ``step_was_skipped`` (its tests set it)."""
        return self.step_was_skipped

    @_is_overflow.setter
    def _is_overflow(self, value: bool) -> None:
        self.step_was_skipped = bool(value)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear gradients, except inside an accumulation window (they are being summed)."""
        if self._gradient_state.sync_gradients:
            self._strategy.zero_grad(self.optimizer, set_to_none)
