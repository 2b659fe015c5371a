"""Batch-structure helpers: length, concatenation, row selection and device placement.

A batch is a tensor, a per-sample list of plain values (strings, numbers), or a
dict/list/tuple of batches (as ``default_collate`` builds them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from overdrive.ops import map_tensors, rebuild


def _is_structure(data: Any) -> bool:
    """A list/tuple of sub-batches (not a per-sample list of plain values)."""
    return isinstance(data, (list, tuple)) and all(
        isinstance(v, (torch.Tensor, Mapping, list, tuple)) for v in data
    )


def batch_length(batch: Any) -> int:
    """Samples in ``batch`` (the first dim of its first tensor or per-sample list)."""
    if isinstance(batch, torch.Tensor):
        return batch.shape[0] if batch.dim() else 1
    if isinstance(batch, Mapping):
        for v in batch.values():
            return batch_length(v)
        return 0
    if _is_structure(batch) and len(batch):
        return batch_length(batch[0])
    if isinstance(batch, Sequence) and not isinstance(batch, (str, bytes)):
        return len(batch)
    raise TypeError(f"cannot tell how many samples a batch of type {type(batch).__name__} holds")


def concat_batches(batches: list[Any]) -> Any:
    """Join batches of one structure along the sample dimension."""
    head = batches[0]
    if len(batches) == 1:
        return head
    if isinstance(head, torch.Tensor):
        return torch.cat(batches)
    if isinstance(head, Mapping):
        return rebuild(head, {k: concat_batches([b[k] for b in batches]) for k in head})
    if _is_structure(head):
        return rebuild(head, [concat_batches([b[i] for b in batches]) for i in range(len(head))])
    return [item for b in batches for item in b]


def take_rows(batch: Any, rows: list[int] | slice) -> Any:
    """The samples ``rows`` (indices or a slice) of ``batch``, same structure."""
    if isinstance(batch, torch.Tensor):
        if isinstance(rows, slice):
            return batch[rows]
        return batch[torch.as_tensor(rows, dtype=torch.long)]
    if isinstance(batch, Mapping):
        return rebuild(batch, {k: take_rows(v, rows) for k, v in batch.items()})
    if _is_structure(batch):
        return rebuild(batch, [take_rows(v, rows) for v in batch])
    if isinstance(rows, slice):
        return list(batch[rows])
    return [batch[i] for i in rows]


def pad_rows(batch: Any, source: Any, count: int) -> Any:
    """``batch`` followed by ``count`` samples taken cyclically from ``source``."""
    if count == 0:
        return batch
    available = batch_length(source)
    filler = take_rows(source, [i % available for i in range(count)])
    return concat_batches([batch, filler])


def to_device(batch: Any, device: torch.device, non_blocking: bool = False) -> Any:
    """Move every tensor (and objects with a ``to`` method such as BatchEncoding)."""
    if device.type == "cpu" and not non_blocking:
        return map_tensors(lambda t: t if t.device.type == "cpu" else t.to(device), batch)
    if not isinstance(batch, (torch.Tensor, Mapping, list, tuple)) and hasattr(batch, "to"):
        return batch.to(device, non_blocking=non_blocking)
    return map_tensors(lambda t: t.to(device, non_blocking=non_blocking), batch)
