"""Stop the script after a number of optimizer steps, and mark where each step ends."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.optim.optimizer import register_optimizer_step_post_hook


class StepsDone(BaseException):
    """Raised out of the script's optimizer step once the simulated steps are done; a
    ``BaseException``, as ``KeyboardInterrupt`` is, so a script's ``except Exception`` around
    its loop lets it through."""


class Stepper:
    """Calls ``on_step(optimizer, n)`` after every optimizer step (n from 1), and stops the
    script (``StepsDone``) after ``steps`` of them. Several optimizers stepping in the same
    iteration each count: a step here is one optimizer's step."""

    def __init__(self, steps: int, on_step: Callable[[Any, int], None]) -> None:
        self.steps = steps
        self.done = 0
        self.optimizers: list[Any] = []
        self._on_step = on_step
        self._handle = register_optimizer_step_post_hook(self._after_step)

    def _after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if all(o is not optimizer for o in self.optimizers):
            self.optimizers.append(optimizer)
        self.done += 1
        self._on_step(optimizer, self.done)
        if self.done >= self.steps:
            raise StepsDone

    def close(self) -> None:
        self._handle.remove()
