"""What ``prepare`` made: the registry of prepared objects, and the mark it puts on them.

``Prepared`` lists the prepared objects in preparation order (what a checkpoint's parts are
numbered by); ``PreparedRegistry`` gives the Accelerator that view, which checkpoint code
reads (``checkpoint/host.py``) instead of the Accelerator's own fields. ``mark_prepared``
sets the ``_is_accelerate_prepared`` mark Hugging Face Accelerate puts on what ``prepare``
returns.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from overdrive.training.scheduler import is_scheduler


@dataclass(frozen=True)
class Prepared:
    """The prepared objects, each list in preparation order (the lists themselves: later
    ``prepare`` calls show here)."""

    models: list[nn.Module]
    optimizers: list[Any]
    schedulers: list[Any]
    dataloaders: list[Any]
    custom_objects: list[Any]


class PreparedRegistry:
    """The Accelerator's registry view over its lists (its side of ``CheckpointHost``)."""

    _models: list[nn.Module]
    _optimizers: list[Any]
    _schedulers: list[Any]
    _dataloaders: list[Any]
    _custom_objects: list[Any]
    pending_save: Future[Any] | None = None  # an asynchronous save still being written

    @property
    def prepared(self) -> Prepared:
        return Prepared(
            self._models,
            self._optimizers,
            self._schedulers,
            self._dataloaders,
            self._custom_objects,
        )

    def scheduler_advances_per_process(self) -> bool:
        """Whether a prepared scheduler advances once per process per optimizer step."""
        return bool(self._schedulers) and bool(self._scheduler_per_process())  # type: ignore[attr-defined]


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
