"""Gradient accumulation windows: when gradients synchronise and the optimizer really steps.

A window is ``k = gradient_accumulation_steps`` micro-batches. ``Accelerator.backward``
divides each micro-batch's loss by ``k``; the window's last micro-batch synchronises
gradients (DDP all-reduce) and lets the optimizer step.

A dataloader that ends inside a window closes it early: with ``m < k`` micro-batches left,
``sync_gradients`` turns true on the m-th, and the optimizer steps on the summed gradients,
each scaled by 1/k, as Hugging Face Accelerate does. With the ``exact_accumulation`` setting
they are multiplied by ``k/m`` before clipping or stepping, so the step equals one step on
the mean loss of those ``m`` batches. The end is known from the prepared loader's one-batch
lookahead, so loaders without ``len()`` (iterable datasets) close their last window the same
way. An unprepared loader gives no end signal; its trailing partial window then stays open
and carries into the next epoch, as in plain PyTorch.
"""

from __future__ import annotations

from collections.abc import Sequence, Sized
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from overdrive.training.loop_state import LoopState


class GradientState:
    """Shared by the Accelerator and its optimizers: is this micro-batch the window's last?"""

    __slots__ = (
        "__weakref__",
        "exact",
        "micro_batches",
        "num_steps",
        "rescale",
        "sync_each_batch",
        "sync_gradients",
    )

    def __init__(
        self, num_steps: int, *, sync_each_batch: bool = False, exact: bool = False
    ) -> None:
        self.num_steps = num_steps
        self.sync_each_batch = sync_each_batch
        self.exact = exact  # the exact_accumulation setting: rescale a short window by k/m
        self.sync_gradients = True
        self.micro_batches = 0  # micro-batches seen in the open window
        self.rescale = 1.0  # k/m for a window closed early by the end of a dataloader (exact)

    def advance(self, end_of_dataloader: bool) -> bool:
        """Count one micro-batch; return whether it closes the window."""
        self.micro_batches += 1
        m = self.micro_batches
        sync = m >= self.num_steps or end_of_dataloader
        self.sync_gradients = sync
        if sync:
            self.rescale = self.num_steps / m if self.exact and m < self.num_steps else 1.0
            self.micro_batches = 0
        return sync

    def reset(self) -> None:
        self.sync_gradients = True
        self.micro_batches = 0
        self.rescale = 1.0

    def state_dict(self) -> dict[str, Any]:
        return {"micro_batches": self.micro_batches}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.micro_batches = int(state.get("micro_batches", 0))


class StepWindow:
    """A read-only view of the window at one backward or clip, for a strategy that scales
    losses or steps itself (DeepSpeed): handed over at the call, kept by no one."""

    __slots__ = ("_gs", "_loaders", "_loop")

    def __init__(
        self, gradient_state: GradientState, loop_state: LoopState, loaders: Sequence[Sized]
    ) -> None:
        self._gs = gradient_state
        self._loop = loop_state
        self._loaders = tuple(loaders)  # the loaders prepared so far, not the live list

    @property
    def sync_gradients(self) -> bool:
        return self._gs.sync_gradients

    @property
    def num_steps(self) -> int:
        return self._gs.num_steps

    @property
    def rescale(self) -> float:
        return self._gs.rescale

    @property
    def exact(self) -> bool:
        return self._gs.exact

    def batches_left(self) -> int | None:
        """Batches of the active prepared loader from the current one on (None: unknown)."""
        active = self._loop.active
        if active is None:
            return None
        index = active.batch_index
        for loader in self._loaders:
            if getattr(loader, "progress", None) is active:
                try:
                    return len(loader) - index
                except TypeError:  # an iterable dataset: no length
                    return None
        return None
