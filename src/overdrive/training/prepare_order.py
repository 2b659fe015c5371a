"""The order in which ``accelerator.prepare`` prepares one call's objects."""

from __future__ import annotations

from collections.abc import Sequence

from torch.utils.data import DataLoader

from overdrive.errors import OverdriveError
from overdrive.training.scheduler import is_scheduler


def prepare_order(objects: Sequence[object]) -> tuple[list[int], list[int]]:
    """Positions of ``objects`` in two rounds: dataloaders (an engine reads its micro-batch
    size from them), then the rest in the given order with schedulers last (they find their
    optimizer prepared)."""
    loaders = [i for i, obj in enumerate(objects) if isinstance(obj, DataLoader)]
    rest = [i for i in range(len(objects)) if i not in loaders]
    return loaders, [i for i in rest if not is_scheduler(objects[i])] + [
        i for i in rest if is_scheduler(objects[i])
    ]


def placements_for(
    objects: Sequence[object], given: Sequence[bool] | None, default: bool
) -> Sequence[bool]:
    """``prepare(device_placement=...)``: one value per object, ``default`` for each when
    none are given."""
    if given is None:
        return [default] * len(objects)
    if len(given) != len(objects):
        raise OverdriveError(
            f"prepare() got {len(objects)} objects but {len(given)} device_placement values; "
            "pass one per object"
        )
    return given
