"""Samplers for prepared dataloaders: a seedable shuffle and an index-level shard."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sized
from typing import cast

import torch

from overdrive.data.layout import layout_round
from overdrive.processes import ops
from overdrive.processes.random_state import snapshot_streams, streams_at


class SeedableRandomSampler(torch.utils.data.Sampler[int]):
    """A random permutation drawn from ``seed + epoch``: the same on every rank and run.

    ``seed`` defaults to ``data_seed``, else torch's initial seed (what ``set_seed`` set).
    A full pass moves to the next epoch by itself, so an unprepared loader reshuffles each
    epoch; a prepared loader sets the epoch explicitly. ``generator`` (Hugging Face
    Accelerate's form) is the generator re-seeded for each pass; by default a private one.

    Takes torch's ``RandomSampler`` arguments as Hugging Face Accelerate's does
    (``data_source, replacement, num_samples, generator`` and ``data_seed=``), and
    overdrive's ``seed=``.
    """

    def __init__(self, *args: object, **kwargs: object) -> None:
        names = ("data_source", "replacement", "num_samples", "generator")
        if len(args) > len(names):
            raise TypeError(
                f"SeedableRandomSampler takes at most {len(names)} positional arguments"
            )
        given = dict(zip(names, args, strict=False))
        twice = sorted(set(given) & set(kwargs))
        if twice:
            raise TypeError(f"SeedableRandomSampler got {twice[0]!r} twice")
        setup: Callable[..., None] = self._setup  # its signature checks the arguments
        setup(**given, **kwargs)

    def _setup(
        self,
        data_source: Sized,
        replacement: bool = False,
        num_samples: int | None = None,
        generator: torch.Generator | None = None,
        *,
        seed: int | None = None,
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


class RecordedOrder:
    """A user's batch sampler whose order is drawn from random streams when it is iterated
    (``WeightedRandomSampler``, ``SubsetRandomSampler``, a custom one). Records the streams
    just before an epoch's order is drawn; ``replay`` set to such a record makes the next
    iteration draw that same order again, without moving the streams (a resumed epoch)."""

    def __init__(self, batch_sampler: Iterable[list[int]]) -> None:
        self.batch_sampler = batch_sampler
        self.recorded: dict[str, object] | None = None
        self.replay: dict[str, object] | None = None

    def _generator(self) -> torch.Generator | None:
        for obj in (self.batch_sampler, getattr(self.batch_sampler, "sampler", None)):
            gen = getattr(obj, "generator", None)
            if isinstance(gen, torch.Generator):
                return gen
        return None

    def __len__(self) -> int:
        return len(cast(Sized, self.batch_sampler))

    def __iter__(self) -> Iterator[list[int]]:
        gen = self._generator()
        if self.replay is not None:
            self.recorded, self.replay = self.replay, None
            with streams_at(self.recorded, gen):
                order = [list(b) for b in self.batch_sampler]
            yield from order
            return
        self.recorded = snapshot_streams(gen)
        yield from self.batch_sampler


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
        self._source = batch_sampler  # what an epoch walks (maybe a RecordedOrder)
        self.world, self.rank = world, rank
        self.per_rank = per_rank
        self.split, self.even, self.drop_last = split, even, drop_last
        self.sync_indices = sync_indices
        self.skip_rounds = 0
        # Set while producing the epoch's last round; read when its batch is yielded.
        self.final_real = -1
        # Whether the round just produced is the epoch's final one (read by a loader
        # without workers, which fetches each batch right after its indices).
        self.yielded_final = False
        # This rank's share of the final round is empty (even_batches=False) and skipped:
        # it gets one batch fewer and the round before is its last.
        self.fewer = False

    @property
    def batch_sampler(self) -> Iterable[list[int]]:
        """The user's batch sampler, as Hugging Face Accelerate exposes it."""
        source = self._source
        return source.batch_sampler if isinstance(source, RecordedOrder) else source

    @property
    def even_batches(self) -> bool:
        """Hugging Face Accelerate's name for ``even`` (read by its scripts)."""
        return self.even

    @even_batches.setter
    def even_batches(self, value: bool) -> None:
        self.even = bool(value)

    def __len__(self) -> int:
        batches = len(self._source)  # type: ignore[arg-type]
        if self.split:
            rounds = batches
        else:
            rounds = batches // self.world if self.drop_last else -(-batches // self.world)
        return max(0, rounds - self.skip_rounds)

    def _batches(self) -> Iterator[list[int]]:
        if not self.sync_indices or ops.world_size() == 1:
            return (list(b) for b in self._source)
        box: list[list[list[int]] | None] = [
            [list(b) for b in self._source] if self.rank == 0 else None
        ]
        ops.broadcast_object_list(box, from_process=0)
        return iter(cast("list[list[int]]", box[0]))  # rank 0's, broadcast

    def _rounds(self) -> Iterator[tuple[list[int], int, bool]]:
        """(this rank's share, the round's real samples if it is the epoch's last else -1,
        is the share empty) for every round of the epoch, skipped ones included."""
        group = 1 if self.split else self.world
        it = self._batches()
        pending = next(it, None)
        per_rank = self.per_rank
        first: list[int] = []  # the epoch's first indices, the source of even_batches padding
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
            # An empty share still loads one sample (collate needs one); the loader turns
            # it into an empty batch.
            yield mine or flat[:1], lay.real if is_last else -1, is_last and not mine

    def __iter__(self) -> Iterator[list[int]]:
        self.final_real, self.yielded_final = -1, False
        self.fewer = False
        rounds = self._rounds()
        current = next(rounds, None)
        index = 0
        while current is not None:
            # One round of indices ahead (no data is read) tells whether this one is the
            # epoch's final round, even when a short last round is dropped.
            upcoming = next(rounds, None)
            share, real, empty = current
            if empty:  # this rank's only round is an empty share: it gets no batch
                self.fewer = True
                return
            if upcoming is not None and upcoming[2]:
                # The final round holds nothing for this rank: it gets one batch fewer.
                self.fewer, upcoming = True, None
                real = -1
            if real >= 0 or self.fewer:
                self.final_real = real
            if index >= self.skip_rounds:
                self.yielded_final = upcoming is None
                yield share
            index += 1
            current = upcoming
