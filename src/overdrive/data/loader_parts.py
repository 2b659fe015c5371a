"""The pieces of a prepared loader that hold no loader: its epoch position, the DataLoader
arguments it copies, the shuffle seed every rank shares, the rounds an epoch holds."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NotRequired, TypedDict

import torch
from torch.utils.data import DataLoader

from overdrive.processes import ops

if TYPE_CHECKING:
    from overdrive.processes.process_state import PartialState


class InnerState(TypedDict):
    """A ``StatefulDataLoader``'s position after a batch handed out."""

    state: dict[str, object]  # its own state_dict()
    sampler_skip: NotRequired[int]  # the rounds its (sharded) sampler skipped before it
    first: NotRequired[object]  # the epoch's first round (the padding source)


class LoaderState(TypedDict, total=False):
    """A prepared loader's ``state_dict``: JSON-able, read back by ``load_state_dict``."""

    epoch: int
    batches_yielded: int
    seed: int | None
    num_processes: int
    total_batch_size: int | None
    worker_seed: int | None
    generator: list[int] | None
    sampler_generator: list[int] | None
    order_rng: dict[str, object] | None
    stateful_dataloader: InnerState | None


class LoaderKwargs(TypedDict, total=False):
    """The DataLoader arguments a prepared loader copies from the user's."""

    num_workers: int
    collate_fn: Callable[..., object] | None
    pin_memory: bool
    timeout: float
    worker_init_fn: Callable[[int], None] | None
    multiprocessing_context: object
    generator: torch.Generator | None
    persistent_workers: bool
    prefetch_factor: int | None
    in_order: bool


@dataclass
class EpochPosition:
    """Position shared by a prepared loader and its ``skip_first_batches`` views."""

    epoch: int = 0
    yielded: int = 0  # batches handed out in the current epoch
    in_epoch: bool = False
    resume_skip: int = 0  # batches the next iteration skips (set by load_state_dict)
    # load_state resumed it with exact_resume: a script's own skip would skip twice
    exact: bool = False
    explicit_epoch: bool = False
    worker_seed: int | None = None  # what this epoch's reader was seeded with
    resume_seed: int | None = None  # the saved epoch's worker_seed, for the resumed iteration
    # use_stateful_dataloader: the StatefulDataLoader's position after the last batch handed
    # out ({"state", "sampler_skip"}), and the one a loaded checkpoint resumes from.
    inner_state: InnerState | None = None
    resume_inner: InnerState | None = None


def rounds_per_epoch(batches: int, world: int, split: bool, drop_last: bool) -> int:
    if split:
        return batches
    return batches // world if drop_last else -(-batches // world)


def loader_kwargs(
    base: DataLoader[object], pin_memory: bool, generator: torch.Generator | None = None
) -> LoaderKwargs:
    """``base``'s settings for a new DataLoader; ``generator`` replaces its generator."""
    kwargs: LoaderKwargs = {
        "num_workers": base.num_workers,
        "collate_fn": base.collate_fn,
        "pin_memory": pin_memory,
        "timeout": base.timeout,
        "worker_init_fn": base.worker_init_fn,
        "multiprocessing_context": base.multiprocessing_context,
        "generator": base.generator if generator is None else generator,
        "persistent_workers": base.persistent_workers,
    }
    if base.num_workers > 0:
        kwargs["prefetch_factor"] = base.prefetch_factor
    if getattr(base, "in_order", True) is not True:
        kwargs["in_order"] = base.in_order
    return kwargs


def draw_seed(state: PartialState, generator: torch.Generator | None, seedable: bool) -> int:
    """One shuffle seed for all ranks, rank 0's (so set_seed there decides it).

    Every rank makes the draw, as Hugging Face Accelerate does at prepare: the stream it comes
    from (torch's global RNG when the sampler has no generator) then moves the same way on
    every rank, and what the script draws next (dropout) matches a run under it.
    """
    if seedable:
        drawn = generator.initial_seed() if generator is not None else torch.initial_seed()
    else:
        drawn = int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())
    box: list[int] = [drawn]
    if state.use_distributed and state.num_processes > 1:
        ops.broadcast_object_list(box, from_process=0)
    return int(box[0])
