"""AcceleratedOptimizer: the user's optimizer, stepping only when a window closes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from overdrive.precision import Precision
from overdrive.processes.process_state import current_accelerator, current_partial_state
from overdrive.training.accumulation import GradientState
from overdrive.training.optimizer_steps import OptimizerSteps, PlainSteps


def move_to_device(state: Any, device: torch.device | str) -> Any:
    """``state`` (an optimizer state dict, or any nest of lists, tuples and dicts) with every
    tensor moved to ``device``; containers keep their type (named tuples included)."""
    if isinstance(state, torch.Tensor):
        return state.to(device)
    if isinstance(state, dict):
        return type(state)({key: move_to_device(value, device) for key, value in state.items()})
    if isinstance(state, (list, tuple)):
        moved = [move_to_device(item, device) for item in state]
        if hasattr(state, "_fields"):  # a named tuple takes its fields positionally
            return type(state)(*moved)
        return type(state)(moved)
    return state


def patch_optimizer_step(accelerated_optimizer: Any, method: Callable[..., Any]) -> Any:
    """``method`` (an optimizer's ``step``) that first records, as
    ``accelerated_optimizer._accelerate_step_called``, that it ran: a GradScaler skips the
    call when the gradients overflowed, so the flag tells a step that ran from a skipped one."""

    def patched_step(*args: Any, **kwargs: Any) -> Any:
        accelerated_optimizer._accelerate_step_called = True
        return method(*args, **kwargs)

    return patched_step


class _GivenScaler(Precision):
    """Loss scaling with a ``GradScaler`` handed to ``AcceleratedOptimizer(scaler=...)``."""

    name = "fp16"

    def __init__(self, scaler: Any) -> None:
        self._scaler = scaler
        self._unscaled: set[int] = set()
        self._accelerate_step_called = False

    @property
    def scaler(self) -> Any:
        return self._scaler

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        return self._scaler.scale(loss)

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        if id(optimizer) not in self._unscaled:
            self._scaler.unscale_(optimizer)
            self._unscaled.add(id(optimizer))

    def optimizer_step(self, optimizer: torch.optim.Optimizer, **kwargs: Any) -> bool:
        if getattr(self._scaler, "_scale", None) is None:  # no loss scaled yet: nothing to check
            optimizer.step(**kwargs)
            return True
        original = optimizer.step
        optimizer.step = patch_optimizer_step(self, original)  # type: ignore[method-assign]
        self._accelerate_step_called = False
        try:
            self._scaler.step(optimizer, **kwargs)
            self._scaler.update()
        finally:
            optimizer.step = original  # type: ignore[method-assign]
            self._unscaled.discard(id(optimizer))
        return self._accelerate_step_called


class AcceleratedOptimizer(torch.optim.Optimizer):
    """Wraps ``optimizer`` (kept as ``.optimizer``) for accumulation and loss scaling.

    ``step()`` and ``zero_grad()`` do nothing on micro-batches that do not close an
    accumulation window. ``step()`` asks the precision policy to step; under fp16 it may
    skip the step (inf/NaN gradients), which ``step_was_skipped`` reports. Everything else
    (``param_groups``, ``state``, ``state_dict`` ...) is the wrapped optimizer's.

    The step, ``zero_grad`` and a partial window's rescale go through ``strategy`` (plain
    PyTorch by default), so a backend whose engine owns the step (DeepSpeed) runs it there.

    Built by hand as in Hugging Face Accelerate, ``AcceleratedOptimizer(opt,
    device_placement=True, scaler=None)`` follows the current Accelerator's accumulation
    windows (every step, when there is none), moves the optimizer's state to the current
    device, and scales with ``scaler`` when given. ``gradient_state``, ``precision`` and
    ``strategy`` (overdrive's, keyword-only) are what ``accelerator.prepare`` passes.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        device_placement: bool = True,
        scaler: Any = None,
        *,
        gradient_state: GradientState | None = None,
        precision: Precision | None = None,
        strategy: OptimizerSteps | None = None,
    ) -> None:
        # Deliberately no super().__init__: the wrapped optimizer owns params and hooks.
        self.optimizer = optimizer
        self.device_placement = device_placement
        if gradient_state is None:
            gradient_state = getattr(current_accelerator(), "gradient_state", None)
            if gradient_state is None:  # no Accelerator: every step closes a window
                gradient_state = GradientState(1)
        if precision is None:
            precision = _GivenScaler(scaler) if scaler is not None else Precision()
        self._gradient_state = gradient_state
        self._precision = precision
        self._strategy: OptimizerSteps = strategy if strategy is not None else PlainSteps()
        self.step_was_skipped = False
        self.steps_taken = 0  # optimizer steps that really ran; schedulers follow this
        self.steps_tried = 0  # step() calls at the end of a window, run or skipped
        self._pending_rescale = 1.0
        self._unscaled = False
        if device_placement and optimizer.state:
            device = current_partial_state().device
            optimizer.load_state_dict(move_to_device(optimizer.state_dict(), device))

    @classmethod
    def wrapping(
        cls,
        optimizer: torch.optim.Optimizer,
        gradient_state: GradientState,
        precision: Precision,
        strategy: OptimizerSteps | None = None,
    ) -> AcceleratedOptimizer:
        """The wrapper ``accelerator.prepare`` makes: the loop's gradient state, precision
        policy and strategy; the optimizer's state is where the strategy put it."""
        return cls(
            optimizer,
            False,
            gradient_state=gradient_state,
            precision=precision,
            strategy=strategy,
        )

    @property
    def gradient_state(self) -> GradientState:
        """The accumulation state whose windows ``step`` follows."""
        return self._gradient_state

    @property
    def scaler(self) -> Any:
        """The loss scaler the step goes through (fp16), or None."""
        return self._precision.scaler

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
        """Hugging Face Accelerate's name for ``step_was_skipped`` (its tests set it)."""
        return self.step_was_skipped

    @_is_overflow.setter
    def _is_overflow(self, value: bool) -> None:
        self.step_was_skipped = bool(value)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear gradients, except inside an accumulation window (they are being summed)."""
        if self._gradient_state.sync_gradients:
            self._strategy.zero_grad(self.optimizer, set_to_none)
