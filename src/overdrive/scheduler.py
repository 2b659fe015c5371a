"""AcceleratedScheduler: a learning-rate schedule that follows optimizer steps that really ran."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from overdrive.optimizer import AcceleratedOptimizer


def is_scheduler(obj: Any) -> bool:
    """A learning-rate scheduler (torch's, a prepared one, or anything shaped like one)."""
    return isinstance(obj, (torch.optim.lr_scheduler.LRScheduler, AcceleratedScheduler)) or (
        hasattr(obj, "optimizer")
        and callable(getattr(obj, "step", None))
        and hasattr(obj, "state_dict")
        and not isinstance(obj, (torch.optim.Optimizer, nn.Module))
    )


class AcceleratedScheduler:
    """Wraps an LR scheduler (kept as ``.scheduler``).

    With ``step_with_optimizer=True`` (the default), ``step()`` advances the schedule exactly
    once per optimizer step that really ran: not on micro-batches inside an accumulation
    window, not when fp16 loss scaling skipped the step, and never more than once for one
    optimizer step, whatever the number of processes. (The described system advances it
    ``num_processes`` times per step unless batches are split; here a schedule written for
    N optimizer steps lasts N optimizer steps.) With ``step_with_optimizer=False`` every
    ``step()`` call goes straight to the scheduler.
    """

    def __init__(
        self,
        scheduler: Any,
        optimizers: Sequence[AcceleratedOptimizer],
        *,
        step_with_optimizer: bool = True,
    ) -> None:
        self.scheduler = scheduler
        self.step_with_optimizer = step_with_optimizer
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
        if stepped:
            self.scheduler.step(*args, **kwargs)

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
