"""Where the training loop is in the active prepared dataloader.

One ``LoopState`` belongs to one Accelerator. Prepared dataloaders register themselves
while they are being iterated (a stack, so an eval loop nested in a training loop works);
the properties describe the innermost active loader.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any


@dataclass
class LoaderProgress:
    """What one prepared dataloader reports about the batch the loop is processing.

    The loader reporting is held weakly (``loader`` reads it): a loader owns its progress,
    and a loader nobody holds any more is freed at once, not left to the cycle collector."""

    batch_index: int = 0
    end_of_dataloader: bool = False
    remainder: int = -1
    _loader_ref: Any = field(default=None, repr=False, compare=False)

    def __init__(
        self,
        batch_index: int = 0,
        end_of_dataloader: bool = False,
        remainder: int = -1,
        loader: Any = None,
    ) -> None:
        self.batch_index = batch_index
        self.end_of_dataloader = end_of_dataloader
        self.remainder = remainder
        self._loader_ref = None if loader is None else weakref.ref(loader)

    @property
    def loader(self) -> Any:
        """The loader reporting (None once it is gone, or for a progress made without one)."""
        return None if self._loader_ref is None else self._loader_ref()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_loader_ref"] = self.loader  # pickled with the loader that holds it
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        loader = state.pop("_loader_ref")
        self.__dict__.update(state)
        self._loader_ref = None if loader is None else weakref.ref(loader)


@dataclass
class LoopState:
    """The innermost active loader's progress; defaults when no prepared loader is active."""

    _stack: list[LoaderProgress] = field(default_factory=list)
    work: int = 0  # backward passes and accumulate() windows so far (the loop trained)

    def begin(self, progress: LoaderProgress) -> None:
        """A prepared loader starts an iteration."""
        self._stack.append(progress)

    def end(self, progress: LoaderProgress) -> None:
        """A prepared loader finished (or was abandoned); removes it wherever it sits."""
        for i in range(len(self._stack) - 1, -1, -1):
            if self._stack[i] is progress:
                del self._stack[i]
                return

    @property
    def active(self) -> LoaderProgress | None:
        return self._stack[-1] if self._stack else None

    @property
    def in_dataloader(self) -> bool:
        return bool(self._stack)

    @property
    def end_of_dataloader(self) -> bool:
        """True while the last batch of the active loader is being processed."""
        top = self.active
        return top.end_of_dataloader if top is not None else False

    @property
    def remainder(self) -> int:
        """Real (non-duplicated) samples in the final global batch; -1 when unknown."""
        top = self.active
        return top.remainder if top is not None else -1

    @property
    def batch_index(self) -> int:
        """Index of the batch being processed in the active loader's current epoch."""
        top = self.active
        return top.batch_index if top is not None else 0
