"""Hugging Face Accelerate's ``GradientState`` attributes about the active dataloader, on
the engine's accumulation window (``accumulation.GradientState``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from overdrive.training.accumulation import GradientState

if TYPE_CHECKING:
    from overdrive.training.loop_state import LoopState


class GradientStateCompat(GradientState):
    """The Accelerator's gradient state: the engine's window, and the loop state read through
    it as scripts expect."""

    __slots__ = ("_loop",)
    _loop: LoopState  # the Accelerator's, set when it is created

    def _loop_state(self) -> Any:
        try:
            return self._loop
        except AttributeError:
            return None

    def _set_sync_gradients(self, sync_gradients: bool) -> None:
        """Trainer accumulates by itself and says here whether this micro-batch ends its window."""
        self.sync_gradients = sync_gradients

    @property
    def plugin_kwargs(self) -> dict[str, Any]:
        """The accumulation settings as Hugging Face Accelerate's ``GradientAccumulationPlugin``
        keywords: like its ``to_kwargs()``, only what differs from the plugin's defaults."""
        kwargs: dict[str, Any] = {"num_steps": self.num_steps}
        if self.sync_each_batch:
            kwargs["sync_each_batch"] = True
        return kwargs

    @property
    def end_of_dataloader(self) -> bool:
        """True while the active prepared loader yields its last batch."""
        loop = self._loop_state()
        return bool(loop is not None and loop.end_of_dataloader)

    @property
    def remainder(self) -> int:
        """Real samples in the last global batch (-1 when unknown or not there yet)."""
        loop = self._loop_state()
        return -1 if loop is None else int(loop.remainder)

    @property
    def in_dataloader(self) -> bool:
        loop = self._loop_state()
        return bool(loop is not None and loop.in_dataloader)

    @property
    def active_dataloader(self) -> Any:
        """The prepared loader being iterated (innermost), or None."""
        loop = self._loop_state()
        top = None if loop is None else loop.active
        return None if top is None else top.loader

    @property
    def dataloader_references(self) -> list[Any]:
        """The loaders being iterated, outermost first, after a leading None."""
        loop = self._loop_state()
        stack = [] if loop is None else [p.loader for p in loop._stack]
        return [None, *stack]
