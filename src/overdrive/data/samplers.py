"""Samplers for prepared dataloaders: a seedable shuffle and an index-level shard."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sized
from typing import Any

import torch

from overdrive import ops
from overdrive.data.layout import layout_round


class SeedableRandomSampler(torch.utils.data.Sampler[int]):
    """A random permutation drawn from ``seed + epoch``: the same on every rank and run.

    ``seed`` defaults to ``data_seed``, else torch's initial seed (what ``set_seed`` set).
    A full pass moves to the next epoch by itself, so an unprepared loader reshuffles each
    epoch; a prepared loader sets the epoch explicitly. ``generator`` (the described
    system's form) is the generator re-seeded for each pass; by default a private one.
    """

    def __init__(
        self,
        data_source: Sized,
        *,
        seed: int | None = None,
        replacement: bool = False,
        num_samples: int | None = None,
        generator: torch.Generator | None = None,
        data_seed: int | None = None,
    ) -> None:
        self.data_source = data_source
        if seed is None:
            seed = data_seed if data_seed is not None else torch.initial_seed()
        self.seed = int(seed)
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator
        self.epoch = 0

    @property
    def initial_seed(self) -> int:
        return self.seed

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self) -> Iterator[int]:
        n, want = len(self.data_source), self.num_samples
        gen = self.generator if self.generator is not None else torch.Generator()
        gen.manual_seed(self.seed + self.epoch)
        if self.replacement:
            yield from torch.randint(n, (want,), generator=gen).tolist()
        else:
            produced = 0
            while produced < want:
                perm = torch.randperm(n, generator=gen).tolist()
                take = perm[: want - produced]
                produced += len(take)
                yield from take
        self.epoch += 1


class ShardedBatchSampler:
    """This rank's batches of indices, one per round of the wrapped batch sampler.

    Every rank walks the whole (cheap, index-only) batch sampler and keeps its slice, so
    all ranks must see the same index order: the sampler is deterministic, or
    ``sync_indices`` makes rank 0 broadcast the epoch's batches first.
    """

    def __init__(
        self,
        batch_sampler: Iterable[list[int]],
        *,
        world: int,
        rank: int,
        per_rank: int | None,
        split: bool,
        even: bool,
        drop_last: bool,
        sync_indices: bool = False,
    ) -> None:
        self.batch_sampler = batch_sampler
        self.world, self.rank = world, rank
        self.per_rank = per_rank
        self.split, self.even, self.drop_last = split, even, drop_last
        self.sync_indices = sync_indices
        self.skip_rounds = 0
        # Set while producing the epoch's last round; read when its batch is yielded.
        self.final_real = -1
        self.final_empty = False

    @property
    def even_batches(self) -> bool:
        """The described system's name for ``even`` (read by its scripts)."""
        return self.even

    @even_batches.setter
    def even_batches(self, value: bool) -> None:
        self.even = bool(value)

    def __len__(self) -> int:
        batches = len(self.batch_sampler)  # type: ignore[arg-type]
        if self.split:
            rounds = batches
        else:
            rounds = batches // self.world if self.drop_last else -(-batches // self.world)
        return max(0, rounds - self.skip_rounds)

    def _batches(self) -> Iterator[list[int]]:
        if not self.sync_indices or ops.world_size() == 1:
            return (list(b) for b in self.batch_sampler)
        box: list[Any] = [[list(b) for b in self.batch_sampler] if self.rank == 0 else None]
        ops.broadcast_object_list(box, from_process=0)
        return iter(box[0])

    def __iter__(self) -> Iterator[list[int]]:
        self.final_real, self.final_empty = -1, False
        group = 1 if self.split else self.world
        it = self._batches()
        pending = next(it, None)
        per_rank = self.per_rank
        first: list[int] = []  # the epoch's first indices, the source of even_batches padding
        index = 0
        while pending is not None:
            batches: list[list[int]] = []
            while pending is not None and len(batches) < group:
                batches.append(pending)
                pending = next(it, None)
            flat = [i for b in batches for i in b]
            if per_rank is None:  # custom batch sampler without a batch_size
                per_rank = max(1, len(batches[0]) // (self.world if self.split else 1))
            is_last = pending is None
            lay = layout_round(
                [len(b) for b in batches],
                world=self.world,
                per_rank=per_rank,
                split=self.split,
                is_last=is_last,
                even=self.even,
                drop_last=self.drop_last,
            )
            if lay is None:
                return
            if len(first) < self.world * per_rank:
                first.extend(flat[: self.world * per_rank - len(first)])
            padded = flat + [first[i % len(first)] for i in range(lay.padding)]
            start, stop = lay.slice_for(self.rank)
            mine = padded[start:stop]
            if is_last:
                self.final_real = lay.real
                self.final_empty = not mine
            if index >= self.skip_rounds:
                # An empty share still loads one sample (collate needs one); the loader
                # turns it into an empty batch.
                yield mine or flat[:1]
            index += 1
