"""Turn a user's DataLoader into this process's share of it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence, Sized
from typing import TYPE_CHECKING, cast

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, RandomSampler

from overdrive.data.loader import PreparedDataLoader
from overdrive.data.loader_parts import draw_seed, loader_kwargs
from overdrive.data.loaders_by_hand import DataLoaderShard
from overdrive.data.samplers import SeedableRandomSampler
from overdrive.data.stateful import stateful_variant
from overdrive.errors import ConfigError
from overdrive.processes.random_state import check_rng_types
from overdrive.training.loop_state import LoopState

if TYPE_CHECKING:
    from overdrive.processes.process_state import PartialState


def _source(state: PartialState, key: str) -> str:
    try:
        return str(state.settings.source(key))
    except KeyError:
        return "code"


def prepare_data_loader(
    dataloader: DataLoader[object],
    *,
    state: PartialState,
    loop_state: LoopState,
    split_batches: bool = False,
    dispatch_batches: bool | None = None,
    even_batches: bool = True,
    use_seedable_sampler: bool = False,
    non_blocking: bool = False,
    data_seed: int | None = None,
    device: torch.device | None = None,
    put_on_device: bool = True,
    rng_types: Sequence[str] = (),
    data_parallel: tuple[int, int] | None = None,
    use_stateful_dataloader: bool = False,
) -> PreparedDataLoader:
    """Shard ``dataloader`` so each process sees its own part of every global batch.

    Without ``split_batches`` each process gets ``batch_size`` samples per step (global
    batch ``batch_size * num_processes``); with it the user's batch is divided between the
    processes. ``dispatch_batches`` (default: on for iterable datasets) makes rank 0 read
    and send. A ``shuffle=True`` loader is reshuffled per epoch from one seed shared by
    all ranks (``data_seed``, else drawn on rank 0). Batches are moved to ``device``
    (None, or ``put_on_device=False``: left where the DataLoader put them). ``rng_types``
    names RNGs ("torch", "cuda", "generator", "python", "numpy") copied from rank 0 to every
    process at the start of each epoch (see ``overdrive.processes.random_state``).
    ``data_parallel`` is (rank, size) among the processes that read different data (the
    strategy's; under tensor parallelism the processes of one tp group read the same
    batches); None: every process reads its own. ``use_stateful_dataloader`` reads through
    torchdata's ``StatefulDataLoader`` (the result is one), whose state the loader's
    ``state_dict`` carries and a resume continues from.
    """
    if not isinstance(dataloader, DataLoader):
        raise TypeError(f"prepare_data_loader needs a torch DataLoader, not {type(dataloader)}")
    world = state.num_processes if data_parallel is None else data_parallel[1]
    iterable = isinstance(dataloader.dataset, IterableDataset)
    dispatch = iterable if dispatch_batches is None else bool(dispatch_batches)
    user_batch = dataloader.batch_size
    given_batches = dataloader.batch_sampler
    if given_batches is None and isinstance(dataloader.sampler, BatchSampler):
        given_batches = dataloader.sampler  # DataLoader(sampler=BatchSampler(...), batch_size=None)
    if user_batch is None:
        user_batch = getattr(given_batches, "batch_size", None)
    if given_batches is None and not iterable:
        raise ConfigError(
            "prepare() got a DataLoader with batch_size=None (no batching), which cannot be "
            "sharded by batch",
            key="batch_size",
            fix="give the DataLoader a batch_size (or a batch_sampler)",
        )
    if split_batches and user_batch is not None and user_batch % world:
        raise ConfigError(
            f"`split_batches` is on ({_source(state, 'split_batches')}) so each batch of "
            f"{user_batch} samples is divided between {world} processes, which does not go",
            key="split_batches",
            fix=f"use a batch_size divisible by {world} (e.g. {user_batch + world - user_batch % world}"
            f"), or turn split_batches off so every process loads batch_size samples",
        )
    per_rank = (
        None if user_batch is None else (user_batch // world if split_batches else user_batch)
    )

    sampler: SeedableRandomSampler | None = None
    batch_sampler: Iterable[list[int]] | None = None if iterable else given_batches
    # Exact types only: a subclass may order batches its own way (then rank 0's order is sent).
    rng_types = list(rng_types)
    shuffled = type(batch_sampler) is BatchSampler and type(batch_sampler.sampler) is RandomSampler
    if shuffled and not use_seedable_sampler and data_seed is None:
        # The order comes from the sampler's generator, as in plain PyTorch and Hugging Face
        # Accelerate: without one, every rank draws a seed from torch's RNG (as it does at
        # prepare) and rank 0's seeds a generator the sampler keeps across epochs; rank 0's
        # generator state is copied to every rank at each epoch start. One process is left
        # as it is: the sampler draws from torch's RNG each epoch, as a plain loader does.
        # With dispatch_batches only rank 0's order counts, drawn from its own streams.
        user_sampler = cast(RandomSampler, cast(BatchSampler, batch_sampler).sampler)
        if user_sampler.generator is None and world > 1 and not dispatch:
            user_sampler.generator = torch.Generator()
            user_sampler.generator.manual_seed(draw_seed(state, None, False))
        synced = user_sampler.generator is not None and not dispatch
        if synced and "generator" not in rng_types:
            rng_types.append("generator")
    elif shuffled:
        batches = cast(BatchSampler, batch_sampler)
        user_sampler = cast(RandomSampler, batches.sampler)
        seed = data_seed
        if seed is None:
            seed = draw_seed(state, user_sampler.generator, use_seedable_sampler)
        sampler = SeedableRandomSampler(
            user_sampler.data_source,
            seed=seed,
            replacement=user_sampler.replacement,
            num_samples=user_sampler._num_samples,
        )
        batch_sampler = BatchSampler(sampler, batches.batch_size, batches.drop_last)

    if not put_on_device:
        device = None
    on_cuda = device is not None and device.type == "cuda"
    pin = bool(dataloader.pin_memory) or (non_blocking and on_cuda)
    if iterable:
        mode = "dispatch" if dispatch and world > 1 else "iterable"
    else:
        mode = "dispatch" if dispatch and world > 1 else "shard"
    if mode == "dispatch" and world != state.num_processes:
        raise ConfigError(
            f"dispatch_batches ({_source(state, 'dispatch_batches')}, on by default for "
            f"iterable datasets) sends every process its own batch, but only {world} of the "
            f"{state.num_processes} processes read different data here (tensor parallelism)",
            key="dispatch_batches",
            fix="use a map-style dataset, or set dispatch_batches to false",
        )
    cls = stateful_variant(PreparedDataLoader) if use_stateful_dataloader else PreparedDataLoader
    prepared: PreparedDataLoader = cls(
        dataloader,
        state=state,
        loop_state=loop_state,
        mode=mode,
        split=split_batches,
        even=even_batches,
        per_rank=per_rank,
        sampler=sampler,
        batch_sampler=batch_sampler,
        device=device,
        non_blocking=non_blocking and on_cuda,
        pin_memory=pin,
        rng_types=check_rng_types(rng_types),
        data_parallel=data_parallel,
        stateful=use_stateful_dataloader,
    )
    return prepared


class _SkipBatchSampler:
    """A batch sampler without its first ``skip`` batches."""

    def __init__(self, batch_sampler: Iterable[list[int]], skip: int) -> None:
        self.batch_sampler, self.skip = batch_sampler, skip

    def __len__(self) -> int:
        return max(0, len(cast(Sized, self.batch_sampler)) - self.skip)

    def __iter__(self) -> Iterator[list[int]]:
        for index, batch in enumerate(self.batch_sampler):
            if index >= self.skip:
                yield batch


class _SkipIterable:
    """An iterable loader without its first ``skip`` batches (they are still read)."""

    def __init__(self, loader: Iterable[object], skip: int) -> None:
        self.loader, self.skip = loader, skip
        self.dataset = getattr(loader, "dataset", None)
        self.batch_size = getattr(loader, "batch_size", None)

    def __iter__(self) -> Iterator[object]:
        for index, batch in enumerate(self.loader):
            if index >= self.skip:
                yield batch


def skip_first_batches(dataloader: object, num_batches: int = 0) -> object:
    """``dataloader`` starting ``num_batches`` batches into its current epoch.

    For a prepared loader the skip applies to the next iteration only and positions are
    counted from the epoch's start (so it agrees with a resumed ``load_state_dict``); the
    epoch and shuffle stay shared with the original, which continues with the next epoch.
    Map-style batches are skipped by index without loading them.
    """
    if num_batches < 0:
        raise ValueError(f"skip_first_batches(num_batches={num_batches}) must be >= 0")
    if isinstance(dataloader, PreparedDataLoader):
        return dataloader.skipping(num_batches)

    if type.__instancecheck__(DataLoaderShard, dataloader):  # built by hand, not prepared
        return cast(DataLoaderShard, dataloader).skipping(num_batches)
    if (
        isinstance(dataloader, DataLoader)
        and not isinstance(dataloader.dataset, IterableDataset)
        and dataloader.batch_sampler is not None
    ):
        return DataLoader(
            dataloader.dataset,
            batch_sampler=_SkipBatchSampler(dataloader.batch_sampler, num_batches),
            **loader_kwargs(dataloader, bool(dataloader.pin_memory)),
        )
    return _SkipIterable(cast("Iterable[object]", dataloader), num_batches)  # iterable
