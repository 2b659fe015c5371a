"""The trackers overdrive knows by name, and the class behind a name (the user's
registered one first)."""

from __future__ import annotations

import importlib

from overdrive.tracking.base import GeneralTracker, Tracker
from overdrive.tracking.registry import LOGGER_TYPE_TO_CLASS

# name -> (module, class, package that must be importable, extra to install)
AVAILABLE: dict[str, tuple[str, str, str | None, str | None]] = {
    "jsonl": ("overdrive.tracking.jsonl", "JSONLTracker", None, None),
    "tensorboard": (
        "overdrive.tracking.tensorboard",
        "TensorBoardTracker",
        "tensorboard",
        "tensorboard",
    ),
    "wandb": ("overdrive.tracking.wandb", "WandBTracker", "wandb", "wandb"),
    "mlflow": ("overdrive.tracking.mlflow", "MLflowTracker", "mlflow", "mlflow"),
}


def registered_class(name: str) -> type[Tracker] | None:
    """A class registered under ``name`` by the user (or a name overdrive does not drive)."""
    cls = LOGGER_TYPE_TO_CLASS.get(name)
    return cls if cls is not None and issubclass(cls, GeneralTracker) else None


def tracker_class(name: str) -> type[Tracker]:
    registered = registered_class(name)
    if registered is not None:
        return registered
    module, cls, _, _ = AVAILABLE[name]
    found: type[Tracker] = getattr(importlib.import_module(module), cls)
    return found
