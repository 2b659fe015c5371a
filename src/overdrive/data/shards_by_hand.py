"""Hugging Face Accelerate's shard classes, for code that builds a shard by hand for a world it
names (``BatchSamplerShard(sampler, num_processes, process_index)``). ``prepare`` shards
map-style datasets its own way, for the processes that really run (``samplers.py``), and
iterable datasets without ``dispatch_batches`` with ``IterableDatasetShard``.

Both deal the data Hugging Face Accelerate's way. Without ``split_batches``, process ``i`` gets
batches ``i, i + n, i + 2n...``; with it, slice ``i`` of every batch. With
``even_batches`` (the default) the last round is completed from the start of the data so
every process gets as many batches, full ones where the batch size is known. With
``drop_last`` an incomplete last round is dropped.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Mapping
from typing import TypedDict, cast

import torch
from torch.utils.data import BatchSampler, IterableDataset


class BatchSamplerShard(BatchSampler):
    """The batches of ``batch_sampler`` that process ``process_index`` of ``num_processes``
    gets (see the module docstring)."""

    def __init__(
        self,
        batch_sampler: Iterable[list[int]],
        num_processes: int = 1,
        process_index: int = 0,
        split_batches: bool = False,
        even_batches: bool = True,
    ) -> None:
        self.batch_sampler = batch_sampler
        self.num_processes, self.process_index = num_processes, process_index
        self.split_batches, self.even_batches = split_batches, even_batches
        self.batch_size: int | None = getattr(batch_sampler, "batch_size", None)  # type: ignore[assignment]
        self.drop_last = bool(getattr(batch_sampler, "drop_last", False))
        if split_batches and self.batch_size is None:
            raise ValueError(
                "split_batches=True needs a batch sampler with a fixed batch_size to split"
            )
        if split_batches and self.batch_size is not None and self.batch_size % num_processes:
            raise ValueError(
                f"split_batches=True: the batch size ({self.batch_size}) must be a round "
                f"multiple of the number of processes ({num_processes})"
            )

    @property
    def sampler(self) -> object:  # type: ignore[override]
        return getattr(self.batch_sampler, "sampler", None)

    @property
    def total_length(self) -> int:
        return len(self.batch_sampler)  # type: ignore[arg-type]

    def set_epoch(self, epoch: int) -> None:
        for target in (self.batch_sampler, self.sampler):
            if hasattr(target, "set_epoch"):
                target.set_epoch(epoch)
                return

    def __len__(self) -> int:
        total, n = self.total_length, self.num_processes
        if self.split_batches:
            return total
        if total % n == 0 or self.drop_last:
            return total // n
        if self.even_batches:
            return math.ceil(total / n)
        return total // n + (1 if self.process_index < total % n else 0)

    def __iter__(self) -> Iterator[list[int]]:
        batches = [list(b) for b in self.batch_sampler]
        if self.split_batches:
            return self._split(batches)
        return self._dealt(batches)

    def _dealt(self, batches: list[list[int]]) -> Iterator[list[int]]:
        n, me, size = self.num_processes, self.process_index, self.batch_size
        if not batches:
            return
        if self.drop_last:
            batches = batches[: len(batches) // n * n]
        if not self.even_batches or self.drop_last:
            yield from batches[me::n]
            return
        last_round = (len(batches) - 1) // n * n
        yield from batches[me:last_round:n]
        tail = batches[last_round:]
        if size is None:  # batches of varying size: the round is completed by whole batches
            filler = itertools.cycle(batches[:n])
            tail += [next(filler) for _ in range(n - len(tail))]
        else:  # whole batches, the short one and the missing ones filled from the start
            samples = itertools.cycle([s for b in batches[:n] for s in b])
            tail[-1] = tail[-1] + [next(samples) for _ in range(size - len(tail[-1]))]
            tail += [[next(samples) for _ in range(size)] for _ in range(n - len(tail))]
        yield tail[me]

    def _split(self, batches: list[list[int]]) -> Iterator[list[int]]:
        size = self.batch_size
        assert size is not None
        part = size // self.num_processes
        start = self.process_index * part
        first = itertools.cycle(batches[0]) if batches else None
        for batch in batches:
            if len(batch) < size and self.even_batches and first is not None:
                batch = batch + [next(first) for _ in range(size - len(batch))]
            mine = batch[start : start + part]
            if mine:
                yield mine


class _ShardState(TypedDict, total=False):
    """What ``IterableDatasetShard.state_dict`` holds."""

    groups: int
    first: list[object] | None
    dataset: object


class IterableDatasetShard(IterableDataset[object]):
    """The samples of ``dataset`` that process ``process_index`` gets: of every
    ``batch_size * num_processes`` samples (``batch_size`` with ``split_batches``), its slice.
    Without ``drop_last`` the last, short group is completed from the first one."""

    def __init__(
        self,
        dataset: Iterable[object],
        batch_size: int = 1,
        drop_last: bool = False,
        num_processes: int = 1,
        process_index: int = 0,
        split_batches: bool = False,
    ) -> None:
        if split_batches and batch_size > 1 and batch_size % num_processes:
            raise ValueError(
                f"split_batches=True: the batch size ({batch_size}) must be a round multiple "
                f"of the number of processes ({num_processes})"
            )
        self.dataset, self.batch_size, self.drop_last = dataset, batch_size, drop_last
        self.num_processes, self.process_index = num_processes, process_index
        self.split_batches = split_batches
        self._groups = 0  # global batches read in the running iteration
        self._first: list[object] | None = None  # its first one, the source of the completion
        self._resume: _ShardState | None = None

    def state_dict(self) -> dict[str, object]:
        """Where the running iteration is: global batches read, the first of them, and the
        dataset's own state where it keeps one (a StatefulDataLoader saves this)."""
        state: dict[str, object] = {"groups": self._groups, "first": self._first}
        if hasattr(self.dataset, "state_dict"):
            state["dataset"] = self.dataset.state_dict()
        return state

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        """Continue from ``state`` at the next iteration: a dataset with its own state
        continues from it; any other is read again up to the saved position."""
        self._resume = cast(_ShardState, dict(state))

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(epoch)

    def __len__(self) -> int:
        # Hugging Face Accelerate's count, which groups batch_size x num_processes samples
        # even with split_batches
        total = len(self.dataset)  # type: ignore[arg-type]
        group = self.batch_size * self.num_processes
        rounds = total // group if self.drop_last else math.ceil(total / group)
        return rounds * self.batch_size

    def __iter__(self) -> Iterator[object]:
        generator = getattr(self.dataset, "generator", None)
        if not hasattr(self.dataset, "set_epoch") and isinstance(generator, torch.Generator):
            # a dataset that shuffles with its own generator reshuffles per epoch, the same
            # way on every process (Hugging Face Accelerate seeds it with the epoch)
            generator.manual_seed(getattr(self, "epoch", 0))
        group = self.batch_size * (1 if self.split_batches else self.num_processes)
        part = group // self.num_processes
        mine = slice(self.process_index * part, (self.process_index + 1) * part)
        resume, self._resume = self._resume, None
        self._groups, self._first, skip = 0, None, 0
        if resume is not None:
            self._groups, self._first = int(resume["groups"]), resume["first"]
            if "dataset" in resume and hasattr(self.dataset, "load_state_dict"):
                self.dataset.load_state_dict(resume["dataset"])
            else:
                skip = self._groups
        buffer: list[object] = []
        for sample in self.dataset:
            buffer.append(sample)
            if len(buffer) == group:
                if skip:
                    skip -= 1
                else:
                    self._groups += 1
                    self._first = self._first if self._first is not None else buffer
                    yield from buffer[mine]
                buffer = []
        if buffer and not self.drop_last:
            source = itertools.cycle(self._first if self._first is not None else list(buffer))
            while len(buffer) < group:
                buffer.append(next(source))
            yield from buffer[mine]
