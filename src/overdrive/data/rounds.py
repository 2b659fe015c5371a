"""Batch-level sharding: rounds built from user batches, read locally or dispatched by rank 0.

Used for iterable datasets (every rank reads the stream and keeps its share of each round)
and for ``dispatch_batches`` (rank 0 reads, then broadcasts each padded round). Both share
rounds with ``layout_round``, exactly as index-level sharding does, so all three modes give
a rank the same batches.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TypedDict

import torch

from overdrive.data.batches import batch_length, concat_batches, pad_rows, take_rows
from overdrive.data.layout import RoundLayout, layout_round
from overdrive.processes import ops

_END = object()


class RoundMemo(TypedDict, total=False):
    """What ``global_rounds`` remembers across a resume."""

    first: object  # the epoch's first round, the source of even_batches padding
    consumed: int  # user batches in the rounds handed out so far


@dataclass(frozen=True)
class _Spec:
    shape: tuple[int, ...]
    dtype: torch.dtype


def global_rounds(
    batches: Iterable[object],
    *,
    world: int,
    per_rank: int | None,
    split: bool,
    even: bool,
    drop_last: bool,
    memo: RoundMemo | None = None,
    dispatch: bool = False,
) -> Iterator[tuple[object, RoundLayout, bool]]:
    """(round padded for even_batches, its layout, is it the last) from user batches.

    ``memo["first"]`` holds the epoch's first round (the padding source): given, a resumed
    epoch whose first rounds are not read again pads as the whole epoch would."""
    group = 1 if split else world
    it = iter(batches)
    # Read ahead of the round handed out: one batch (enough to know if it is the last), or,
    # dispatching, the whole next round, as Hugging Face Accelerate's dispatcher reads.
    ahead = group if dispatch else 1
    queue: list[object] = []
    ended = False
    # the epoch's first round, the source of even_batches padding
    first: object = None if memo is None else memo.get("first")
    while True:
        while not ended and len(queue) < group + ahead:
            item = next(it, _END)
            ended = item is _END
            if not ended:
                queue.append(item)
        if not queue:
            return
        parts, queue = queue[:group], queue[group:]
        if memo is not None:  # batches in the rounds handed out so far (a resume's position)
            memo["consumed"] = memo.get("consumed", 0) + len(parts)
        sizes = [batch_length(b) for b in parts]
        if per_rank is None:
            per_rank = max(1, sizes[0] // (world if split else 1))
        is_last = not queue
        if dispatch and drop_last and ended and 0 < len(queue) <= group:
            # the round read ahead is the short one drop_last drops: this one is the last
            rest = [batch_length(b) for b in queue]
            is_last = None is layout_round(
                rest,
                world=world,
                per_rank=per_rank,
                split=split,
                is_last=True,
                even=even,
                drop_last=True,
                dispatch=True,
            )
        lay = layout_round(
            sizes,
            world=world,
            per_rank=per_rank,
            split=split,
            is_last=is_last,
            even=even,
            drop_last=drop_last,
            dispatch=dispatch,
        )
        if lay is None:
            return
        joined = concat_batches(parts)
        if first is None:
            first = joined
            if memo is not None:
                memo["first"] = first
        yield pad_rows(joined, first, lay.padding), lay, is_last


def local_shares(
    rounds: Iterator[tuple[object, RoundLayout, bool]], rank: int, skip: int
) -> Iterator[tuple[object, RoundLayout]]:
    """This rank's share of every round after the first ``skip`` rounds."""
    for index, (padded, lay, _) in enumerate(rounds):
        if index >= skip:
            start, stop = lay.slice_for(rank)
            yield take_rows(padded, slice(start, stop)), lay


def _skeleton(data: object) -> object:
    if isinstance(data, torch.Tensor):
        return _Spec(tuple(data.shape), data.dtype)
    if isinstance(data, Mapping):
        return ops.rebuild(data, {k: _skeleton(v) for k, v in data.items()})
    if isinstance(data, (list, tuple)):
        return ops.rebuild(data, [_skeleton(v) for v in data])
    return data


def _materialize(skeleton: object, device: torch.device) -> object:
    if isinstance(skeleton, _Spec):
        return torch.empty(skeleton.shape, dtype=skeleton.dtype, device=device)
    if isinstance(skeleton, Mapping):
        return ops.rebuild(skeleton, {k: _materialize(v, device) for k, v in skeleton.items()})
    if isinstance(skeleton, (list, tuple)):
        return ops.rebuild(skeleton, [_materialize(v, device) for v in skeleton])
    return skeleton


def dispatched_shares(
    rounds: Iterator[tuple[object, RoundLayout, bool]] | None,
    *,
    rank: int,
    skip: int,
    comm_device: torch.device,
) -> Iterator[tuple[object, RoundLayout]]:
    """Rank 0 reads ``rounds`` and broadcasts each; every rank keeps its share.

    Other ranks pass ``rounds=None``. Skipped rounds are read by rank 0 and never sent. (A
    simulated rank reads its own rounds whatever its rank, ``overdrive.simulate``: what it
    receives is then its own read.)
    """
    index = 0
    while True:
        header: list[tuple[object, RoundLayout] | None] = [None]
        padded: object = None
        if rounds is not None:
            item = next(rounds, None)
            while item is not None and index < skip:
                index += 1
                item = next(rounds, None)
            if item is not None:
                padded = ops.map_tensors(lambda t: t.to(comm_device), item[0])
                header[0] = (_skeleton(padded), item[1])
        ops.broadcast_object_list(header, from_process=0)
        if header[0] is None:
            return
        skeleton, lay = header[0]
        if rounds is None:
            padded = _materialize(skeleton, comm_device)
        padded = ops.broadcast(padded, from_process=0)
        start, stop = lay.slice_for(rank)
        yield take_rows(padded, slice(start, stop)), lay
        index += 1
