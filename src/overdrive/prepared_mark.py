"""The ``_is_accelerate_prepared`` mark the described system puts on what ``prepare`` returns."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from overdrive.scheduler import is_scheduler


def is_preparable(obj: Any) -> bool:
    """A model, optimizer, scheduler or dataloader (what ``prepare`` changes)."""
    return isinstance(obj, (nn.Module, torch.optim.Optimizer, DataLoader)) or is_scheduler(obj)


def mark_prepared(given: Sequence[Any], prepared: Sequence[Any]) -> None:
    """Set ``_is_accelerate_prepared = True`` on what ``prepare`` made of each preparable
    object (libraries check it to avoid preparing twice)."""
    for before, after in zip(given, prepared):
        if is_preparable(before):
            # an object with __slots__ keeps no mark; prepare still knows it
            with contextlib.suppress(AttributeError):
                after._is_accelerate_prepared = True
