"""Batch-structure helpers: length, concatenation, row selection and device placement.

A batch is a tensor, a per-sample list of plain values (strings, numbers), or a
dict/list/tuple of batches (as ``default_collate`` builds them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeGuard, cast

import torch

from overdrive.processes.ops import map_tensors, rebuild


class SampleList(list[object]):
    """Whole samples (strings, numbers) read one per item and joined into a round; a share
    of one sample is that sample itself, never a list of its characters."""


def _is_sample(data: object) -> bool:
    """An item that is one sample as a whole (``batch_size=None`` yielding str/int/...)."""
    return not isinstance(data, (torch.Tensor, Mapping, list, tuple)) and not hasattr(data, "to")


def _is_structure(data: object) -> TypeGuard[list[object] | tuple[object, ...]]:
    """A list/tuple of sub-batches (not a per-sample list of plain values)."""
    return isinstance(data, (list, tuple)) and all(
        isinstance(v, (torch.Tensor, Mapping, list, tuple)) for v in data
    )


def batch_length(batch: object) -> int:
    """Samples in ``batch`` (the first dim of its first tensor or per-sample list)."""
    if isinstance(batch, torch.Tensor):
        return batch.shape[0] if batch.dim() else 1
    if _is_sample(batch):
        return 1
    if isinstance(batch, Mapping):
        for v in batch.values():
            return batch_length(v)
        return 0
    if _is_structure(batch) and len(batch):
        return batch_length(batch[0])
    if isinstance(batch, Sequence) and not isinstance(batch, (str, bytes)):
        return len(batch)
    raise TypeError(f"cannot tell how many samples a batch of type {type(batch).__name__} holds")


def concat_batches(batches: Sequence[object]) -> object:
    """Join batches of one structure along the sample dimension."""
    head = batches[0]
    if len(batches) == 1:
        return head
    if isinstance(head, SampleList) or _is_sample(head):
        joined = SampleList()
        for b in batches:
            joined.extend(b) if isinstance(b, SampleList) else joined.append(b)
        return joined
    if isinstance(head, torch.Tensor):
        return torch.cat(cast("list[torch.Tensor]", batches))  # one structure: all tensors
    if isinstance(head, Mapping):
        maps = cast("list[Mapping[object, object]]", batches)
        return rebuild(head, {k: concat_batches([b[k] for b in maps]) for k in head})
    if _is_structure(head):
        rows = cast("list[Sequence[object]]", batches)
        return rebuild(head, [concat_batches([b[i] for b in rows]) for i in range(len(head))])
    return [item for b in cast("list[Sequence[object]]", batches) for item in b]


def take_rows(batch: object, rows: list[int] | slice) -> object:
    """The samples ``rows`` (indices or a slice) of ``batch``, same structure."""
    if _is_sample(batch):
        count = len(range(*rows.indices(1))) if isinstance(rows, slice) else len(rows)
        return batch if count else SampleList()
    if isinstance(batch, SampleList):
        picked = batch[rows] if isinstance(rows, slice) else [batch[i] for i in rows]
        return picked[0] if len(picked) == 1 else SampleList(picked)
    if isinstance(batch, torch.Tensor):
        if isinstance(rows, slice):
            return batch[rows]
        return batch[torch.as_tensor(rows, dtype=torch.long)]
    if isinstance(batch, Mapping):
        return rebuild(batch, {k: take_rows(v, rows) for k, v in batch.items()})
    if _is_structure(batch):
        return rebuild(batch, [take_rows(v, rows) for v in batch])
    samples = cast("Sequence[object]", batch)  # a per-sample list
    if isinstance(rows, slice):
        return list(samples[rows])
    return [samples[i] for i in rows]


def pad_rows(batch: object, source: object, count: int) -> object:
    """``batch`` followed by ``count`` samples taken cyclically from ``source``."""
    if count == 0:
        return batch
    available = batch_length(source)
    filler = take_rows(source, [i % available for i in range(count)])
    return concat_batches([batch, filler])


def to_device(batch: object, device: torch.device, non_blocking: bool = False) -> object:
    """Move every tensor (and objects with a ``to`` method such as BatchEncoding)."""
    if device.type == "cpu" and not non_blocking:
        return map_tensors(lambda t: t if t.device.type == "cpu" else t.to(device), batch)
    if not isinstance(batch, (torch.Tensor, Mapping, list, tuple)) and hasattr(batch, "to"):
        return batch.to(device, non_blocking=non_blocking)
    return map_tensors(lambda t: t.to(device, non_blocking=non_blocking), batch)
