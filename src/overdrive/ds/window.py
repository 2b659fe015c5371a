"""Loss scaling for accumulation windows when DeepSpeed sums the gradients.

The Accelerator divides each micro-batch's loss by k (gradient_accumulation_steps). Under DDP
a window closed early after m < k micro-batches (the end of an epoch) is rescaled by k/m
before the step; DeepSpeed sums the gradients inside its engine, where they cannot be
rescaled, so the factor k/m goes on the losses instead, from the window's first micro-batch:
the prepared dataloader's length says there how many batches are left. A loader without a
length cannot say it ahead; that window keeps DeepSpeed's 1/k and a warning says so once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol


class LoopView(Protocol):
    """What the window reads of the loop at one backward (``accumulation.StepWindow`` is one)."""

    @property
    def sync_gradients(self) -> bool: ...

    @property
    def num_steps(self) -> int: ...

    @property
    def rescale(self) -> float: ...

    def batches_left(self) -> int | None: ...


class WindowScale:
    """The factor each micro-batch's loss (already divided by k) is multiplied by."""

    def __init__(self, say: Callable[[str, int], None]) -> None:
        self._say = say
        self._factor = 1.0
        self._open = False  # a window has begun and not closed
        self._expected: int | None = None  # its length, as known at its first micro-batch
        self._warned = False

    def factor(self, window: LoopView) -> float:
        """Call once per backward, before it (the gradient state has advanced)."""
        k = window.num_steps
        if not self._open:  # this micro-batch opens a window
            if window.sync_gradients:  # ... and closes it: window.rescale is k/m, known
                self._factor, self._expected = window.rescale, None
            else:
                left = window.batches_left()
                self._expected = left if left is not None and 0 < left < k else k
                self._factor = k / self._expected
        self._open = not window.sync_gradients
        if window.sync_gradients and self._expected is not None:
            self._check(round(k / window.rescale), k)
        return self._factor

    def _check(self, seen: int, k: int) -> None:
        if seen == self._expected or self._warned:
            return
        self._warned = True
        self._say(
            f"an accumulation window closed after {seen} micro-batch(es) where "
            f"{self._expected} were expected (gradient_accumulation_steps {k}); its gradients "
            f"are scaled by 1/{self._expected} instead of 1/{seen}, since DeepSpeed sums them "
            "inside the engine and the dataloader's length was not known ahead (said once)",
            logging.WARNING,
        )
