"""Hugging Face Accelerate's ``accelerate.data_loader`` names, under overdrive.

``prepare_data_loader`` here takes Hugging Face Accelerate's positional form
``(dataloader, device, num_processes, process_index, split_batches, put_on_device, ...)``
and shards for the processes that run (an Accelerator's, else one made from the
environment). ``DataLoaderShard``, ``DataLoaderDispatcher``, ``SkipDataLoader``,
``BatchSamplerShard`` and ``IterableDatasetShard`` can be built by hand as in Hugging Face
Accelerate; a prepared loader counts as a ``DataLoaderShard`` for ``isinstance``.
``DataLoaderAdapter`` holds a DataLoader (or torchdata's ``StatefulDataLoader``) and
``get_sampler`` finds the sampler under a loader's batches.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from overdrive.data import PreparedDataLoader, SeedableRandomSampler, skip_first_batches
from overdrive.data import prepare_data_loader as prepare
from overdrive.data.loaders_by_hand import (
    DataLoaderAdapter,
    DataLoaderShard,
    DataLoaderStateMixin,
    SkipDataLoader,
    get_sampler,
)
from overdrive.data.shards_by_hand import BatchSamplerShard, IterableDatasetShard
from overdrive.data.skip_sampler import SkipBatchSampler
from overdrive.environment.rank_logging import get_logger
from overdrive.errors import ConfigError
from overdrive.processes.process_state import current_accelerator, current_partial_state
from overdrive.state import GradientState
from overdrive.training.loop_state import LoopState

logger = get_logger(__name__)

__all__ = [
    "BatchSamplerShard",
    "IterableDatasetShard",
    "DataLoaderAdapter",
    "DataLoaderDispatcher",
    "DataLoaderShard",
    "DataLoaderStateMixin",
    "SkipDataLoader",
    "SeedableRandomSampler",
    "SkipBatchSampler",
    "get_sampler",
    "prepare_data_loader",
    "skip_first_batches",
]


def prepare_data_loader(
    dataloader: Any,
    device: torch.device | str | None = None,
    num_processes: int | None = None,
    process_index: int | None = None,
    split_batches: bool = False,
    put_on_device: bool = False,
    rng_types: Sequence[str] | None = None,
    dispatch_batches: bool | None = None,
    even_batches: bool = True,
    slice_fn_for_dispatch: Any = None,
    use_seedable_sampler: bool = False,
    data_seed: int | None = None,
    non_blocking: bool = False,
    use_stateful_dataloader: bool = False,
    torch_device_mesh: Any = None,
) -> PreparedDataLoader:
    """Shard ``dataloader`` across the running processes (Hugging Face Accelerate's form).

    ``num_processes`` / ``process_index`` default to the running processes'; given, the data
    is sharded as asked, as process ``process_index`` of ``num_processes`` (a world of one
    can read one process's share of a larger one), except with ``dispatch_batches``, where
    the running processes share the batches. ``dispatch_batches`` defaults to on for an
    iterable dataset with ``put_on_device``, else off. Prepared loaders are always resumable
    (``state_dict``), so ``use_stateful_dataloader`` needs nothing more.
    """
    state = current_partial_state()
    if dispatch_batches is None:
        dispatch_batches = put_on_device and isinstance(dataloader.dataset, IterableDataset)
    asked = (
        num_processes if num_processes is not None else state.num_processes,
        process_index if process_index is not None else state.process_index,
    )
    as_asked = not dispatch_batches and asked != (state.num_processes, state.process_index)
    for name, value in (
        ("slice_fn_for_dispatch", slice_fn_for_dispatch),
        ("torch_device_mesh", torch_device_mesh),
    ):
        if value is not None:
            raise ConfigError(
                f"prepare_data_loader({name}=...) is not supported by overdrive",
                key=name,
                fix=f"drop {name}; see docs/migrating.md",
            )
    accelerator = current_accelerator()
    loop_state = accelerator.loop_state if accelerator is not None else LoopState()
    target = torch.device(device) if device is not None else state.device
    return prepare(
        dataloader,
        state=state,
        loop_state=loop_state,
        split_batches=split_batches,
        dispatch_batches=dispatch_batches,
        even_batches=even_batches,
        use_seedable_sampler=use_seedable_sampler,
        non_blocking=non_blocking,
        data_seed=data_seed,
        device=target,
        put_on_device=put_on_device,
        rng_types=list(rng_types or ()),
        data_parallel=(asked[1], asked[0]) if as_asked else None,
    )


class DataLoaderDispatcher(DataLoaderShard):
    """Hugging Face Accelerate's dispatching loader, built by hand: on several processes
    rank 0 reads ``num_processes`` batches (one with ``split_batches``) and each process
    gets its slice, through overdrive's dispatching loader; on one process it reads as a
    plain loader does. Batches go to the process's device. ``slice_fn`` and
    ``torch_device_mesh`` are refused, as ``prepare_data_loader`` refuses them."""

    def __init__(
        self,
        dataset: Any,
        split_batches: bool = False,
        skip_batches: int = 0,
        use_stateful_dataloader: bool = False,
        _drop_last: bool = False,
        _non_blocking: bool = False,
        slice_fn: Any = None,
        torch_device_mesh: Any = None,
        iteration: int = 0,
        **kwargs: Any,
    ) -> None:
        for name, value in (("slice_fn", slice_fn), ("torch_device_mesh", torch_device_mesh)):
            if value is not None:
                raise ConfigError(
                    f"DataLoaderDispatcher({name}=...) is not supported by overdrive",
                    key=name,
                    fix=f"drop {name}; see docs/migrating.md",
                )
        super().__init__(
            dataset,
            skip_batches=skip_batches,
            use_stateful_dataloader=use_stateful_dataloader,
            _drop_last=_drop_last,
            _non_blocking=_non_blocking,
            iteration=iteration,
            **kwargs,
        )
        self.split_batches = split_batches
        self.slice_fn = slice_fn
        GradientState()  # as in Hugging Face Accelerate, a dispatcher sets up the gradient state

    def __len__(self) -> int:
        """Batches per process: the loader's, shared out over the processes unless each
        batch is split between them."""
        import math

        whole, world = super().__len__(), current_partial_state().num_processes
        if self.split_batches or world == 1:
            return whole
        return whole // world if self._drop_last else math.ceil(whole / world)

    def _batches(self) -> Iterator[Any]:
        state = current_partial_state()
        if state.num_processes == 1:
            return super()._batches()
        if self.use_stateful_dataloader:
            raise ConfigError(
                "DataLoaderDispatcher(use_stateful_dataloader=True) built by hand on "
                f"{state.num_processes} processes: its state would not follow the batches "
                "process 0 reads and sends",
                key="use_stateful_dataloader",
                fix="prepare a DataLoader with accelerator.prepare and "
                "DataLoaderConfiguration(dispatch_batches=True, use_stateful_dataloader=True)",
            )
        self.device = state.device
        plain = DataLoader(self.dataset, **self._loader_kwargs)
        dispatched = prepare(
            plain,
            state=state,
            loop_state=LoopState(),
            split_batches=self.split_batches,
            dispatch_batches=True,
            even_batches=not self._drop_last,
            non_blocking=self._non_blocking,
            device=None,  # placed by __iter__
        )
        dispatched.set_epoch(self.iteration)
        return iter(dispatched)
