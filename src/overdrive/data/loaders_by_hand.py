"""The described system's loader classes, for code that builds one directly:
``DataLoaderShard(dataset, batch_size=4)``, ``SkipDataLoader(dataset, skip_batches=2)``.

``accelerator.prepare`` returns overdrive's own prepared loader, which also counts as a
``DataLoaderShard`` / ``DataLoaderDispatcher`` for ``isinstance`` (code written for the
described system checks that).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader

from overdrive.data.loader import PreparedDataLoader


class DataLoaderStateMixin:
    """``end_of_dataloader`` (True while the last batch is out) and ``remainder``."""

    end_of_dataloader: bool = False
    remainder: int = -1

    def reset(self) -> None:
        self.end_of_dataloader = False
        self.remainder = -1

    def begin(self) -> None:
        self.reset()

    def end(self) -> None:
        self.end_of_dataloader = True


class _CountsPrepared(type):
    """``isinstance(prepared_loader, DataLoaderShard)`` holds for overdrive's prepared loaders."""

    def __instancecheck__(cls, obj: Any) -> bool:
        return type.__instancecheck__(cls, obj) or isinstance(obj, PreparedDataLoader)


class DataLoaderShard(DataLoader[Any], DataLoaderStateMixin, metaclass=_CountsPrepared):
    """A DataLoader that moves batches to ``device``, skips the first ``skip_batches`` and
    knows its last batch (``end_of_dataloader``). It shards nothing by itself: pass a sharded
    sampler (``BatchSamplerShard``) or use ``accelerator.prepare``."""

    def __init__(
        self,
        dataset: Any,
        device: torch.device | str | None = None,
        rng_types: Any = None,
        synchronized_generator: Any = None,
        skip_batches: int = 0,
        use_stateful_dataloader: bool = False,
        _drop_last: bool = False,
        _non_blocking: bool = False,
        **kwargs: Any,
    ) -> None:
        if use_stateful_dataloader:
            raise ValueError(
                "DataLoaderShard(use_stateful_dataloader=True) built by hand is not available; "
                "loaders from accelerator.prepare are resumable (state_dict / load_state_dict)"
            )
        super().__init__(dataset, **kwargs)
        self.device = torch.device(device) if device is not None else None
        self.skip_batches = skip_batches
        self.use_stateful_dataloader = False
        self._non_blocking = _non_blocking
        self.base_dataloader: DataLoader[Any] = self  # the described system wraps one; this is it
        self.iteration = 0  # the epoch set_epoch last gave

    def set_epoch(self, epoch: int) -> None:
        """Tell the batch sampler and the sampler which epoch starts (their shuffle)."""
        self.iteration = epoch
        targets: list[Any] = [self.batch_sampler, getattr(self.batch_sampler, "sampler", None)]
        for target in targets:
            if hasattr(target, "set_epoch"):
                target.set_epoch(epoch)

    def skipping(self, num_batches: int) -> DataLoaderShard:
        """The same loader (same sampler, same epoch) without its first ``num_batches``."""
        twin = copy.copy(self)
        twin.skip_batches = num_batches
        twin.base_dataloader = twin
        return twin

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        from overdrive.utils.operations import send_to_device

        self.begin()
        batches = super().__iter__()
        try:
            current = next(batches)
        except StopIteration:
            self.end()
            return
        index = 0
        while True:
            try:
                following = next(batches)
            except StopIteration:
                self.end()
                following = None
            if index >= self.skip_batches:
                moved = current
                if self.device is not None:
                    moved = send_to_device(current, self.device, non_blocking=self._non_blocking)
                yield moved
            if self.end_of_dataloader:
                return
            current, index = following, index + 1


class DataLoaderDispatcher(DataLoaderShard):
    """The described system's dispatching loader, built by hand: here the same as
    ``DataLoaderShard`` (one process reads; overdrive's prepare chooses dispatching itself)."""


class SkipDataLoader(DataLoaderShard):
    """A DataLoader without its first ``skip_batches`` batches (every epoch)."""

    def __init__(self, dataset: Any, skip_batches: int = 0, **kwargs: Any) -> None:
        super().__init__(dataset, skip_batches=skip_batches, **kwargs)
