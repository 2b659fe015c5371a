"""``gather_for_metrics``: every sample of an evaluation epoch exactly once, in order."""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.distributed as dist

from overdrive.data.batches import batch_length, concat_batches, take_rows
from overdrive.processes import ops
from overdrive.training.loop_state import LoopState


def _merge(per_rank: list[object]) -> object:
    """Join per-rank objects sample-wise; plain values stay a list with one per rank."""
    head = per_rank[0]
    if isinstance(head, (torch.Tensor, Mapping, list, tuple)):
        if isinstance(head, torch.Tensor):
            return torch.cat(
                [
                    ops.map_tensors(lambda t: t.reshape(1) if t.dim() == 0 else t, x)
                    for x in per_rank
                ]
            )
        return concat_batches(per_rank)
    return per_rank


def gather_for_metrics(
    data: object,
    loop_state: LoopState,
    *,
    use_gather_object: bool = False,
    debug: bool = False,
    ranks: list[int] | None = None,
) -> object:
    """Gather ``data`` from every process and drop the even_batches padding.

    Over an epoch of a prepared loader the results concatenate to exactly ``len(dataset)``
    samples in dataset order. Non-tensor data (or ``use_gather_object=True``) travels
    pickled. ``ranks``: one process per data-parallel rank, in order (the others hold
    copies, as under tensor parallelism); None keeps every process's data.
    """
    world = ops.world_size()
    if world == 1:
        gathered = data
    elif use_gather_object or ops.has_non_tensor_leaves(data):
        per_rank: list[object] = [None] * world
        dist.all_gather_object(per_rank, data)
        gathered = _merge(per_rank if ranks is None else [per_rank[r] for r in ranks])
    else:
        gathered = ops.gather(data, debug=debug, ranks=ranks)
    remainder = loop_state.remainder
    if not loop_state.end_of_dataloader or remainder < 0:
        return gathered
    try:
        if batch_length(gathered) <= remainder:
            return gathered
    except TypeError:
        return gathered
    return take_rows(gathered, slice(0, remainder))
