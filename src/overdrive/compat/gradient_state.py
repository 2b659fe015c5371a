"""Hugging Face Accelerate's ``GradientState`` attributes about the active dataloader."""

from __future__ import annotations

from typing import Any


class GradientStateCompat:
    """Read the accelerator's loop state through the gradient state, as scripts expect."""

    __slots__ = ("_loop",)

    def _loop_state(self) -> Any:
        try:
            return self._loop  # type: ignore[attr-defined]
        except AttributeError:
            return None

    def _set_sync_gradients(self, sync_gradients: bool) -> None:
        """Trainer accumulates by itself and says here whether this micro-batch ends its window."""
        setattr(self, "sync_gradients", sync_gradients)  # noqa: B010 - the slot is the subclass's

    @property
    def plugin_kwargs(self) -> dict[str, Any]:
        """The accumulation settings as Hugging Face Accelerate's ``GradientAccumulationPlugin``
        keywords: like its ``to_kwargs()``, only what differs from the plugin's defaults."""
        kwargs: dict[str, Any] = {"num_steps": self.num_steps}  # type: ignore[attr-defined]
        if self.sync_each_batch:  # type: ignore[attr-defined]
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
