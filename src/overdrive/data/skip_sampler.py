"""``SkipBatchSampler``: another batch sampler without its first batches."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sized
from typing import cast

from torch.utils.data import BatchSampler


class SkipBatchSampler(BatchSampler):
    """Yields ``batch_sampler``'s batches from index ``skip_batches`` on (the skipped index
    lists are drawn, but no sample is loaded for them)."""

    def __init__(self, batch_sampler: Iterable[list[int]], skip_batches: int = 0) -> None:
        # BatchSampler.__init__ wants (sampler, batch_size, drop_last); this wraps a whole one.
        self.batch_sampler = batch_sampler
        self.skip_batches = skip_batches

    def __iter__(self) -> Iterator[list[int]]:
        for index, batch in enumerate(self.batch_sampler):
            if index >= self.skip_batches:
                yield batch

    @property
    def total_length(self) -> int:
        """Batches in the wrapped sampler, skipped ones included."""
        return len(cast(Sized, self.batch_sampler))

    def __len__(self) -> int:
        return len(cast(Sized, self.batch_sampler)) - self.skip_batches
