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
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from overdrive.accumulation import GradientState
    from overdrive.data.loader import PreparedDataLoader
    from overdrive.loop_state import LoopState


class LoopView(Protocol):
    """What the window reads of the loop (the strategies' ``TrainingLoop`` is one)."""

    @property
    def gradient_state(self) -> GradientState: ...

    @property
    def loop_state(self) -> LoopState: ...

    @property
    def dataloaders(self) -> Sequence[PreparedDataLoader]: ...


class WindowScale:
    """The factor each micro-batch's loss (already divided by k) is multiplied by."""

    def __init__(self, say: Callable[[str, int], None]) -> None:
        self._say = say
        self._factor = 1.0
        self._open = False  # a window has begun and not closed
        self._expected: int | None = None  # its length, as known at its first micro-batch
        self._warned = False

    def factor(self, loop: LoopView) -> float:
        """Call once per backward, before it (the gradient state has advanced)."""
        gs = loop.gradient_state
        k = gs.num_steps
        if not self._open:  # this micro-batch opens a window
            if gs.sync_gradients:  # ... and closes it: gs.rescale is k/m, known
                self._factor, self._expected = gs.rescale, None
            else:
                left = batches_left(loop)
                self._expected = left if left is not None and 0 < left < k else k
                self._factor = k / self._expected
        self._open = not gs.sync_gradients
        if gs.sync_gradients and self._expected is not None:
            self._check(round(k / gs.rescale), k)
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


def batches_left(loop: LoopView) -> int | None:
    """Batches of the active prepared loader from the current one on (None: unknown)."""
    active = loop.loop_state.active
    if active is None:
        return None
    index = active.batch_index
    for loader in loop.dataloaders:
        if getattr(loader, "progress", None) is active:
            try:
                return len(loader) - index
            except TypeError:  # an iterable dataset: no length
                return None
    return None
