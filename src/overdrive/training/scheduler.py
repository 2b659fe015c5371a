"""AcceleratedScheduler: a learning-rate schedule that follows optimizer steps that really ran."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from overdrive.processes.process_state import current_partial_state
from overdrive.training.optimizer import AcceleratedOptimizer


def is_scheduler(obj: Any) -> bool:
    """A learning-rate scheduler (torch's, a prepared one, or anything shaped like one)."""
    return isinstance(obj, (torch.optim.lr_scheduler.LRScheduler, AcceleratedScheduler)) or (
        hasattr(obj, "optimizer")
        and callable(getattr(obj, "step", None))
        and hasattr(obj, "state_dict")
        and not isinstance(obj, (torch.optim.Optimizer, nn.Module))
    )


def _processes() -> int:
    """The number of running processes (the current Accelerator's, else the launcher's)."""
    return int(current_partial_state().num_processes)


class AcceleratedScheduler:
    """Wraps an LR scheduler (kept as ``.scheduler``).

    With ``step_with_optimizer=True`` (the default), ``step()`` advances the schedule
    ``steps_per_advance`` times per optimizer step that really ran: not on micro-batches
    inside an accumulation window, not when fp16 loss scaling skipped the step, and never
    for the same optimizer step twice. Before any optimizer step was tried, ``step()``
    advances by itself, as Hugging Face Accelerate's does. The Accelerator sets ``steps_per_advance`` to the
    number of processes unless batches are split, as Hugging Face Accelerate does (a schedule
    sized from the unprepared loader then ends when training ends), or to 1 with
    ``SchedulerKwargs(once_per_optimizer_step=True)``. A schedule with ``total_steps``
    (OneCycleLR) is never advanced past it. With ``step_with_optimizer=False`` every
    ``step()`` call goes straight to the scheduler.

    Built by hand as in Hugging Face Accelerate, ``optimizers`` may be one optimizer, and
    ``split_batches`` picks ``steps_per_advance`` when it is not given: 1 with split
    batches, else the number of running processes.
    """

    def __init__(
        self,
        scheduler: Any,
        optimizers: AcceleratedOptimizer | Sequence[AcceleratedOptimizer],
        step_with_optimizer: bool = True,
        split_batches: bool = False,
        *,
        steps_per_advance: int | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.step_with_optimizer = step_with_optimizer
        self.split_batches = split_batches
        if steps_per_advance is None:
            steps_per_advance = 1 if split_batches else _processes()
        self.steps_per_advance = int(steps_per_advance)
        if not isinstance(optimizers, (list, tuple)):
            optimizers = [optimizers]  # type: ignore[list-item]
        self._optimizers = list(optimizers)
        self._seen = [opt.steps_taken for opt in self._optimizers]

    def step(self, *args: Any, **kwargs: Any) -> None:
        """Advance once if any of the scheduler's optimizers stepped since the last advance."""
        if not self.step_with_optimizer or not self._optimizers:
            self.scheduler.step(*args, **kwargs)
            return
        stepped = False
        for i, opt in enumerate(self._optimizers):
            if opt.steps_taken != self._seen[i]:
                self._seen[i] = opt.steps_taken
                stepped = True
        if not stepped and not self._drives_alone():
            return
        for _ in range(self.steps_per_advance):
            total = getattr(self.scheduler, "total_steps", None)
            if total is not None and self.scheduler._step_count > total:
                break  # OneCycleLR raises past its end (a last short window can get there)
            self.scheduler.step(*args, **kwargs)

    def _drives_alone(self) -> bool:
        """True when no optimizer step was ever tried, the window is closed and no optimizer
        reports a skipped step: then, as in Hugging Face Accelerate, ``step()`` advances the
        schedule by itself (a loop that schedules before it steps)."""
        return all(
            opt.steps_tried == 0 and not opt.step_was_skipped and opt._gradient_state.sync_gradients
            for opt in self._optimizers
        )

    def get_last_lr(self) -> list[float]:
        return self.scheduler.get_last_lr()

    def state_dict(self) -> dict[str, Any]:
        return self.scheduler.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state_dict)

    def __getattr__(self, name: str) -> Any:
        if name == "scheduler":
            raise AttributeError(name)
        return getattr(self.scheduler, name)
