"""``prepare_data_loader``: a user's DataLoader sharded across processes, resumable exactly."""

from __future__ import annotations

import copy
import warnings
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sized
from typing import TYPE_CHECKING, Any, cast

import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    IterableDataset,
    SequentialSampler,
)

from overdrive.data.batches import to_device
from overdrive.data.loader_parts import (
    EpochPosition,
    InnerState,
    LoaderState,
    loader_kwargs,
    rounds_per_epoch,
)
from overdrive.data.lookahead import Share, mark_last, skipped_twice
from overdrive.data.rounds import RoundMemo, dispatched_shares, global_rounds, local_shares
from overdrive.data.samplers import RecordedOrder, SeedableRandomSampler, ShardedBatchSampler
from overdrive.data.shards_by_hand import IterableDatasetShard
from overdrive.data.skip_sampler import SkipBatchSampler
from overdrive.data.stateful import Pulls, StatefulReader, stateful_loader_class
from overdrive.errors import ConfigError
from overdrive.processes.random_state import synchronize_rng_states
from overdrive.training.loop_state import LoaderProgress, LoopState

if TYPE_CHECKING:
    from overdrive.processes.process_state import PartialState


if TYPE_CHECKING:
    # Typed as its own class: it overrides DataLoader's attributes with read-only properties
    # and its iterator is a generator, which DataLoader's annotations do not allow.
    _LoaderBase = object
else:
    _LoaderBase = DataLoader


class PreparedDataLoader(_LoaderBase):
    """This process's share of a DataLoader; reports progress to a ``LoopState``.

    A ``DataLoader`` for ``isinstance`` checks (as Hugging Face Accelerate's loaders are); it
    reads through its own inner loader and never runs ``DataLoader.__init__``.

    Every process yields the same number of batches per epoch. ``len()`` is batches per
    process; ``batch_size`` is this process's batch size and ``total_batch_size`` the
    global one. Iterating again starts the next epoch (reshuffled); ``set_epoch`` picks one.
    """

    def __init__(
        self,
        base: DataLoader[object],
        *,
        state: PartialState,
        loop_state: LoopState,
        mode: str,
        split: bool,
        even: bool,
        per_rank: int | None,
        sampler: SeedableRandomSampler | None,
        batch_sampler: Iterable[list[int]] | None,
        device: torch.device | None,
        non_blocking: bool,
        pin_memory: bool,
        rng_types: list[str] | None = None,
        data_parallel: tuple[int, int] | None = None,
        stateful: bool = False,
    ) -> None:
        self.base_dataloader = base
        self.state = state
        self.loop_state = loop_state
        self.gradient_state: object = None  # the Accelerator's, set by Accelerator.prepare
        self.mode = mode  # "shard" | "dispatch" | "iterable"
        self.split_batches = split
        self.even_batches = even
        self.dispatch_batches = mode == "dispatch"
        self._per_rank = per_rank
        self._seedable = sampler  # the seedable sampler prepare made, if any
        self._batch_sampler = batch_sampler
        self.device = device
        self.non_blocking = non_blocking
        self._pin_memory = pin_memory
        self.rng_types = rng_types or []
        self._rank, self._world = data_parallel or (state.process_index, state.num_processes)
        self._drop_last = bool(getattr(batch_sampler, "drop_last", base.drop_last))
        self._progress = EpochPosition()
        self._skip_once: int | None = None
        self._view: weakref.ref[PreparedDataLoader] | None = None  # skip_first_batches's
        self._view_of_shards = False  # this is such a view of a sharded loader
        self.reads_after_step = False  # exact_resume: the next batch is read after the step
        # use_stateful_dataloader: this process reads through torchdata's StatefulDataLoader,
        # whose state is part of this loader's; _restored is the sampler skip of a resumed one.
        self.use_stateful_dataloader = stateful
        self._restored: int | None = None
        self._restored_first: RoundMemo = {}  # its epoch's first round (padding source)
        make = stateful_loader_class() if stateful else DataLoader
        self.progress = LoaderProgress(loader=self)
        # The DataLoader this process reads (None on dispatch ranks other than 0). It draws
        # its workers' base seed from this private generator, which each epoch start seeds
        # with one draw from the user's stream (as a plain DataLoader draws), so a resumed
        # iteration can reuse the saved epoch's seed without drawing from the user's RNG.
        self._seed_gen = torch.Generator()
        kwargs = loader_kwargs(base, pin_memory, generator=self._seed_gen)
        # An order drawn from random streams is recorded, so a resume can draw it again.
        self._order: RecordedOrder | None = None
        ordered = batch_sampler
        if batch_sampler is not None and _needs_index_sync(batch_sampler):
            self._order = ordered = RecordedOrder(batch_sampler)
        # a DataLoader (a StatefulDataLoader with stateful)
        self._inner: DataLoader[object] | None = None
        self._item_shards: IterableDatasetShard | None = None  # an iterable dataset's
        if mode == "shard":
            self._sharded = ShardedBatchSampler(
                cast("Iterable[list[int]]", ordered),  # map-style: it has one
                world=self._world,
                rank=self._rank,
                per_rank=per_rank,
                split=split,
                even=even,
                drop_last=self._drop_last,
                sync_indices=self._order is not None and state.num_processes > 1,
            )
            self._inner = make(base.dataset, batch_sampler=self._sharded, **kwargs)
        elif mode == "iterable" and self._world > 1 and base.batch_size is not None:
            # As Hugging Face Accelerate shards an iterable dataset without dispatch_batches:
            # every process reads the stream, keeps its samples of each global batch (the
            # last one completed from the first) and collates only those.
            self._item_shards = IterableDatasetShard(
                cast("IterableDataset[object]", base.dataset),
                batch_size=base.batch_size,
                drop_last=base.drop_last,
                num_processes=self._world,
                process_index=self._rank,
                split_batches=split,
            )
            self._inner = make(
                self._item_shards, batch_size=per_rank, drop_last=base.drop_last, **kwargs
            )
        elif reads_the_data(mode, self._rank):
            if batch_sampler is None:  # an iterable dataset
                self._inner = make(
                    base.dataset, batch_size=base.batch_size, drop_last=base.drop_last, **kwargs
                )
            else:
                self._inner = make(base.dataset, batch_sampler=ordered, **kwargs)

    # ------------------------------------------------------------------ facts
    @property
    def dataset(self) -> Dataset[object]:
        return self.base_dataloader.dataset

    @property
    def batch_size(self) -> int | None:
        """Samples per process per batch (the last batch of an epoch may differ)."""
        return self._per_rank

    @property
    def total_batch_size(self) -> int | None:
        return None if self._per_rank is None else self._per_rank * self._world

    @property
    def epoch(self) -> int:
        return self._progress.epoch

    @property
    def batch_sampler(self) -> Iterable[list[int]] | None:
        """This process's batch sampler (sharded: it wraps the user's as ``.batch_sampler``)."""
        return self._sharded if self.mode == "shard" else self._batch_sampler

    @property
    def sampler(self) -> object:
        """The seedable sampler, else the sampler of the loader this process reads (an
        iterable dataset's is torch's ``_InfiniteConstantSampler``), as a DataLoader has."""
        if self._seedable is not None:
            return self._seedable
        return (self.base_dataloader if self._inner is None else self._inner).sampler

    @property
    def seed(self) -> int | None:
        return None if self._seedable is None else self._seedable.seed

    def _full_len(self) -> int:
        if self.mode == "iterable" or self._batch_sampler is None:
            # Hugging Face Accelerate's: the length of the DataLoader over the process's shard
            # (by sample), or of the whole one divided by processes (one process, dispatched)
            try:
                if self._item_shards is not None:
                    return len(cast("DataLoader[object]", self._inner))
                whole = len(self.base_dataloader)
            except TypeError:
                raise TypeError(
                    "this prepared dataloader reads an iterable dataset without a length: no len()"
                ) from None
            return rounds_per_epoch(whole, self._world, self.split_batches, self._drop_last)
        return rounds_per_epoch(
            len(cast(Sized, self._batch_sampler)), self._world, self.split_batches, self._drop_last
        )

    def __len__(self) -> int:
        fewer = 1 if self._short_here() else 0
        return max(0, self._full_len() - (self._skip_once or 0) - fewer)

    # ------------------------------------------------------------------ epochs and resume
    def set_epoch(self, epoch: int) -> None:
        """Use epoch ``epoch``'s shuffle for the next iteration (keeps a pending resume)."""
        p = self._progress
        if epoch != p.epoch or not p.resume_skip:
            p.resume_skip = 0
            p.yielded = 0
            p.resume_inner = None
        p.epoch, p.in_epoch = int(epoch), False
        self._tell_epoch(p.epoch)

    def state_dict(self) -> dict[str, object]:  # a LoaderState
        """JSON-able position: epoch, batches handed out in it, and the shuffle seed."""
        p = self._progress
        view = self._view() if self._view is not None else None
        if view is not None and view._progress.in_epoch:
            p = view._progress  # a skip_first_batches view of this loader is being iterated
        epoch, yielded = p.epoch, p.yielded if p.in_epoch else p.resume_skip
        try:
            if yielded and yielded >= self._full_len():
                epoch, yielded = epoch + 1, 0
        except TypeError:
            pass
        generator = self.base_dataloader.generator
        own = self._sampler_generator()
        state: LoaderState = {
            "epoch": epoch,
            "batches_yielded": yielded,
            "seed": self.seed,
            "num_processes": self._world,
            "total_batch_size": self.total_batch_size,
            # Mid-epoch: the seed this epoch's reader (and its workers) started from.
            "worker_seed": (p.worker_seed if p.in_epoch else p.resume_seed) if yielded else None,
            # The DataLoader's own generator, drawn from at every epoch start.
            "generator": None if generator is None else generator.get_state().tolist(),
            # The sampler's generator when it is not the DataLoader's (prepare gave it one).
            "sampler_generator": None if own is None else own.get_state().tolist(),
            # Mid-epoch, for a sampler that draws its order: the streams it drew it from.
            "order_rng": self._order_record() if yielded else None,
        }
        if self.use_stateful_dataloader:
            # Mid-epoch: the StatefulDataLoader's own state, which the resumed one continues.
            inner = p.inner_state if p.in_epoch else p.resume_inner
            state["stateful_dataloader"] = inner if yielded else None
        return dict(state)

    def _sampler_generator(self) -> torch.Generator | None:
        """The shuffling sampler's generator, unless it is the DataLoader's own."""
        sampler = getattr(self._batch_sampler, "sampler", None)
        gen = getattr(sampler, "generator", None)
        if isinstance(gen, torch.Generator) and gen is not self.base_dataloader.generator:
            return gen
        return None

    def _adopt_sampler_generator(self) -> torch.Generator | None:
        """A generator for a shuffling sampler that draws from torch's global RNG (one process
        leaves it so), when the checkpoint's processes shuffled with one of their own: the
        resumed epoch, and the ones after it, then draw the saving run's orders."""
        sampler = getattr(self._batch_sampler, "sampler", None)
        if sampler is None or not hasattr(sampler, "generator") or sampler.generator is not None:
            return None
        generator = sampler.generator = torch.Generator()
        return generator

    def _order_record(self) -> dict[str, object] | None:
        if self._order is None:
            return None
        return self._order.recorded if self._progress.in_epoch else self._order.replay

    def check_resume(self, state: Mapping[str, object]) -> None:
        """Refuse a mid-epoch position saved with another global batch (``load_state`` asks
        before it reads or says anything else)."""
        saved = cast(LoaderState, state)
        yielded = int(saved.get("batches_yielded", 0))
        saved_total = saved.get("total_batch_size")
        if yielded and saved_total is not None and saved_total != self.total_batch_size:
            raise ConfigError(
                f"the checkpoint stopped after {yielded} batches of {saved_total} samples "
                f"({saved.get('num_processes')} processes) but this run's global batch is "
                f"{self.total_batch_size} samples ({self._world} processes)",
                key="num_processes",
                fix="resume with the same number of processes and batch size, or resume from "
                "a checkpoint taken at the end of an epoch",
            )

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        """Continue at the saved position: the next iteration resumes mid-epoch, in the saved
        order (``load_state`` calls it with exact_resume or use_stateful_dataloader on)."""
        saved = cast(LoaderState, state)
        self.check_resume(state)
        yielded = int(saved.get("batches_yielded", 0))
        if self._seedable is not None and saved.get("seed") is not None:
            self._seedable.seed = int(cast(int, saved["seed"]))
        generator = self.base_dataloader.generator
        if generator is not None and saved.get("generator") is not None:
            generator.set_state(torch.tensor(saved["generator"], dtype=torch.uint8))
        own = self._sampler_generator()
        if own is None and saved.get("sampler_generator") is not None:
            own = self._adopt_sampler_generator()
        if own is not None and saved.get("sampler_generator") is not None:
            own.set_state(torch.tensor(saved["sampler_generator"], dtype=torch.uint8))
        p = self._progress
        p.epoch, p.resume_skip, p.yielded, p.in_epoch = int(saved["epoch"]), yielded, 0, False
        seed = saved.get("worker_seed")
        p.resume_seed = None if seed is None or not yielded else int(seed)
        inner = saved.get("stateful_dataloader") if self.use_stateful_dataloader else None
        p.resume_inner = inner if yielded and self._inner is not None else None
        if self._order is not None:
            self._order.replay = saved.get("order_rng") if yielded else None

    def resumed_exactly(self) -> None:
        """Called by ``load_state`` with exact_resume on, after ``load_state_dict``: a skip of
        the script's own (``skip_first_batches``, or a first resumed batch the loop does no
        backward on) would skip the batches trained on a second time, and is refused."""
        self._progress.exact = bool(self._progress.resume_skip)

    def skipping(self, num_batches: int) -> PreparedDataLoader:
        """A view whose next iteration starts ``num_batches`` into the current epoch.

        As in Hugging Face Accelerate, the view counts its own epochs from this loader's:
        iterating it to the end does not move this loader to the next epoch. While it is
        being iterated, this loader's ``state_dict`` reports the view's position."""
        view = object.__new__(type(self))
        view.__dict__.update(self.__dict__)
        view._skip_once = int(num_batches)
        # Hugging Face Accelerate's view of a sharded loader knows no global batch size, so
        # gather_for_metrics keeps the padding duplicates of its last batch: the same here.
        view._view_of_shards = self.mode == "shard"
        view._progress = copy.copy(self._progress)
        view.progress = LoaderProgress(loader=view)
        self._view = weakref.ref(view)
        return view

    def _start_epoch(self) -> tuple[int, bool]:
        """(batches to skip, is this the resumed iteration of a loaded checkpoint)."""
        p = self._progress
        resumed = False
        if self._skip_once is not None:
            if p.exact:
                raise skipped_twice(p.resume_skip, f"skip_first_batches(..., {self._skip_once})")
            # As in Hugging Face Accelerate, the view of a resumed StatefulDataLoader starts
            # its epoch afresh and skips from there.
            skip, self._skip_once, p.resume_skip, p.resume_inner = self._skip_once, None, 0, None
        elif p.resume_skip:
            skip, resumed = p.resume_skip, True
        else:
            # (an abandoned iteration does not count as an epoch: as in Hugging Face
            # Accelerate, only one that ran to its end moves the loader to the next)
            skip = 0
        seed = p.resume_seed if resumed else None
        self._restored, self._restored_first = None, {}
        inner = p.resume_inner if resumed and skip == p.resume_skip else None
        if inner is not None and self._inner is not None:
            # The StatefulDataLoader continues from its own saved state (its dataset's, its
            # workers'); only the batches its sampler skipped before it are skipped here.
            cast(StatefulReader, self._inner).load_state_dict(inner["state"])
            self._restored = int(inner.get("sampler_skip", 0))
            if inner.get("first") is not None:
                self._restored_first = {"first": inner["first"]}
        p.inner_state, p.resume_inner = inner, None
        p.resume_skip, p.resume_seed, p.in_epoch, p.yielded = 0, None, True, skip
        # A resumed iteration continues an epoch whose start already happened before the
        # save: every process's RNG streams were restored as they were then, so neither the
        # rank-0 copy nor the seed draw of an epoch start may happen again.
        if not resumed and self.rng_types and self.state.num_processes > 1:
            sampler = getattr(self._batch_sampler, "sampler", None)
            generator = getattr(sampler, "generator", None) or self.base_dataloader.generator
            synchronize_rng_states(self.rng_types, generator)
        if not resumed and self._order is not None:
            self._order.replay = None
        if self._inner is None and not resumed:
            # A rank that does not read (dispatch_batches) still makes the draw its own
            # iterator makes, as every rank's does under Hugging Face Accelerate.
            torch.empty((), dtype=torch.int64).random_(generator=self.base_dataloader.generator)
        if self._inner is not None:
            if seed is None:
                # What a plain DataLoader draws at each iteration: one value of its
                # generator, or of torch's global RNG.
                draw = torch.empty((), dtype=torch.int64)
                seed = int(draw.random_(generator=self.base_dataloader.generator).item())
            self._seed_gen.manual_seed(seed)
        p.worker_seed = seed
        self._tell_epoch(p.epoch)
        return skip, resumed

    def _tell_epoch(self, epoch: int) -> None:
        """Pass ``epoch`` to every sampler, batch sampler and dataset that takes one."""
        told: list[object] = []
        batch_sampler = self._batch_sampler
        candidates = (
            self._seedable,
            batch_sampler,
            getattr(batch_sampler, "sampler", None),
            self.dataset if self._item_shards is None else self._item_shards,
        )
        for obj in candidates:
            if obj is not None and hasattr(obj, "set_epoch") and not any(obj is t for t in told):
                obj.set_epoch(epoch)
                told.append(obj)

    # ------------------------------------------------------------------ iteration
    def _shares(self, skip: int, resumed: bool) -> Iterator[Share]:
        """(batch, real samples of its round, is this rank's share empty, is it the epoch's
        last batch, or None where only reading the next one can tell, the StatefulDataLoader's
        state after it or None)."""
        restored = self._restored  # the StatefulDataLoader resumes by itself
        if self.mode == "shard":
            assert self._inner is not None
            workers = self._inner.num_workers
            # Workers draw random numbers as they read (augmentation). After a resume they
            # must re-read the epoch's first batches, in the same order, for their streams
            # to continue exactly; the batches are dropped here. (Persistent workers carry
            # their streams across epochs, which no resume can replay.)
            replay = skip if resumed and workers and not self._inner.persistent_workers else 0
            if restored is not None:
                replay = 0
            self._sharded.skip_rounds = skip - replay if restored is None else restored
            sampler = self._sharded
            for index, batch in enumerate(self._inner):
                if index < replay:
                    continue
                # Whether it is the last one is found by reading the next batch before this
                # one is handed out (mark_last), as Hugging Face Accelerate's loader does: a
                # dataset or collate_fn that draws random numbers draws them at its moment.
                # With exact_resume and no workers the sampler tells instead, so the next
                # batch is read after the step: a checkpoint's random streams are then those
                # the resumed read draws from, and the resume is exact.
                last = sampler.yielded_final if workers == 0 and self.reads_after_step else None
                snap: InnerState | None = None
                if self.use_stateful_dataloader:
                    reader = cast(StatefulReader, self._inner)
                    snap = {"state": copy.deepcopy(reader.state_dict())}
                    snap["sampler_skip"] = sampler.skip_rounds
                # (the sampler leaves out a final share that is empty for this rank)
                yield batch, sampler.final_real, False, last, snap
            return
        if self._item_shards is not None:
            yield from self._own_batches(skip if restored is None else 0)
            return
        rounds = None
        pulls, memo = None, self._restored_first.copy()
        if restored is not None:
            skip = 0  # the StatefulDataLoader's state holds the rounds read before
        if self._inner is not None:
            source: Iterable[object] = self._inner
            if self.use_stateful_dataloader:
                source = pulls = Pulls(cast(StatefulReader, self._inner))
            elif self.mode == "dispatch" and skip and not resumed and self._batch_sampler:
                # skip_first_batches on a dispatching loader skips the user's batches, drawn
                # but never loaded, before rounds are formed, as Hugging Face Accelerate does
                source, skip = self._skipping_source(skip), 0
            rounds = global_rounds(
                source,
                memo=memo,
                world=self._world,
                per_rank=self._per_rank,
                split=self.split_batches,
                even=self.even_batches,
                drop_last=self._drop_last,
                dispatch=self.mode == "dispatch",
            )
        if self.mode == "dispatch" and self._world > 1:
            backend = self.state.backend
            comm = self.state.device if backend == "nccl" else torch.device("cpu")
            shares = dispatched_shares(rounds, rank=self._rank, skip=skip, comm_device=comm)
        else:
            assert rounds is not None
            shares = local_shares(rounds, self._rank, skip)
        # Rounds are read one batch ahead, so each knows if it is the epoch's last, as in
        # Hugging Face Accelerate's loaders; only an empty share (even_batches off) or a
        # dropped last round needs the next round read before this one is handed out (the
        # dispatcher's read-ahead of a whole round already sees a dropped one).
        dispatching = self.mode == "dispatch"
        known = (self.even_batches or self._world == 1 or dispatching) and (
            dispatching or not self._drop_last
        )
        for batch, lay in shares:
            start, stop = lay.slice_for(self._rank)
            # (rounds are read ahead: the state after this round is an earlier one)
            snap = None
            if pulls is not None:
                # a round was read, so Pulls holds a state from before a read
                state = cast("dict[str, object]", pulls.after(memo.get("consumed", 0)))
                snap = {"state": copy.deepcopy(state), "first": memo.get("first")}
            yield batch, lay.real, stop == start, lay.last if known else None, snap

    def _own_batches(self, skip: int) -> Iterator[Share]:
        """An item-sharded iterable dataset's batches: each process collates its own. As
        under Hugging Face Accelerate, gather_for_metrics keeps every gathered sample (the
        last global batch is completed from the first, and the completion is not dropped)."""
        inner = cast("DataLoader[object]", self._inner)  # an item-sharded loader reads
        for index, batch in enumerate(inner):
            if index < skip:
                continue  # read, as the stream cannot be skipped without reading
            snap: InnerState | None = None
            if self.use_stateful_dataloader:
                snap = {"state": copy.deepcopy(cast(StatefulReader, inner).state_dict())}
            yield batch, -1, False, None, snap

    def _skipping_source(self, skip: int) -> DataLoader[object]:
        """This process's reader without the first ``skip`` batches of its batch sampler."""
        kwargs = loader_kwargs(self.base_dataloader, self._pin_memory, generator=self._seed_gen)
        reader = cast("DataLoader[object]", self._inner)  # rank 0 of a dispatching loader
        batches = SkipBatchSampler(cast("Iterable[list[int]]", reader.batch_sampler), skip)
        return DataLoader(self.base_dataloader.dataset, batch_sampler=batches, **kwargs)

    def __iter__(self) -> Iterator[Any]:  # the user's batches
        skip, resumed = self._start_epoch()
        p, lp = self._progress, self.progress
        self.loop_state.begin(lp)
        # After continuing mid-epoch by itself, a first batch the loop does no work on is the
        # script's own skip code (`if i < resume_step: continue`) skipping a second time.
        watch = self.loop_state.work if resumed and skip and p.exact else None
        p.exact = False
        try:
            index = skip
            fewer = False
            for batch, real, short, last, snap in mark_last(self._shares(skip, resumed)):
                if watch is not None and index > skip:
                    if self.loop_state.work == watch:
                        raise skipped_twice(skip, "the loop's own skip (no backward on a batch)")
                    watch = None
                fewer = fewer or short
                if self.device is not None:
                    batch = to_device(batch, self.device, self.non_blocking)
                lp.batch_index, lp.end_of_dataloader = index, last
                lp.remainder = real if last and not self._view_of_shards else -1
                index += 1
                p.yielded, p.inner_state = index, snap
                yield batch
            if fewer or (self.mode == "shard" and self._sharded.fewer):
                self._warn_fewer()  # the epoch's last round held nothing for this rank
            p.epoch, p.yielded, p.in_epoch = p.epoch + 1, 0, False
        finally:
            lp.end_of_dataloader = False
            self.loop_state.end(lp)

    def _warn_fewer(self) -> None:
        warnings.warn(
            f"process {self._rank} gets one batch fewer than others this epoch: with "
            "even_batches=False the epoch's last samples do not reach every process "
            "(wrap the loop in accelerator.join_uneven_inputs for DDP, or use even_batches=True)",
            UserWarning,
            stacklevel=3,
        )

    def _short_here(self) -> bool:
        """True when this rank's share of the epoch's last round is empty (even_batches off)."""
        if self.even_batches or self._world == 1 or self._drop_last or self._per_rank is None:
            return False
        if self.mode == "dispatch":  # the dispatcher pads its last round whatever even_batches says
            return False
        sampler = getattr(self._batch_sampler, "sampler", None)
        try:
            total, rounds = len(sampler), self._full_len()  # type: ignore[arg-type]
        except TypeError:
            return False
        full = self._per_rank * self._world
        last = total - (rounds - 1) * full
        return 0 < last < self._world and self._rank >= last

    def __repr__(self) -> str:
        return (
            f"PreparedDataLoader(mode={self.mode}, rank={self._rank}/{self._world}, "
            f"batch_size={self.batch_size}, split_batches={self.split_batches}, "
            f"even_batches={self.even_batches}, epoch={self.epoch})"
        )


def reads_the_data(mode: str, rank: int) -> bool:
    """Whether this process reads the dataset itself: an iterable loader's every process, a
    dispatching loader's process 0 only (it sends the others their shares)."""
    return mode == "iterable" or rank == 0


def _needs_index_sync(batch_sampler: Iterable[list[int]]) -> bool:
    """True unless every rank is sure to draw the same index order by itself."""
    if type(batch_sampler) is BatchSampler:
        return type(cast(BatchSampler, batch_sampler).sampler) not in (
            SequentialSampler,
            SeedableRandomSampler,
        )
    return True
