"""Hugging Face Accelerate's tracker classes by name (``LOGGER_TYPE_TO_CLASS``), and
``register_tracker_class`` for your own.

TensorBoard, Weights & Biases and MLflow are overdrive's own trackers. The others the
Hugging Face Accelerate names (Comet ML, Aim, ClearML, DVCLive, SwanLab, Trackio) exist under their
names so imports work, and say so when used: overdrive does not drive them.
"""

from __future__ import annotations

import warnings
from typing import Any

from overdrive.tracking.base import GeneralTracker, Tracker, TrackerError
from overdrive.tracking.mlflow import MLflowTracker
from overdrive.tracking.tensorboard import TensorBoardTracker
from overdrive.tracking.wandb import WandBTracker


class _NotDriven(GeneralTracker):
    """A tracker Hugging Face Accelerate has and overdrive does not drive."""

    requires_logging_directory = False
    not_driven = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise not_driven(self.name)


def not_driven(name: str) -> TrackerError:
    """The error for a tracker Hugging Face Accelerate has and overdrive does not drive."""
    return TrackerError(
        f"the {name} tracker is not available in overdrive\n  fix: log with tensorboard, "
        "wandb, mlflow or jsonl, or subclass overdrive.tracking.GeneralTracker and pass an "
        "instance in log_with"
    )


class CometMLTracker(_NotDriven):
    name = "comet_ml"


class AimTracker(_NotDriven):
    name = "aim"


class ClearMLTracker(_NotDriven):
    name = "clearml"


class DVCLiveTracker(_NotDriven):
    name = "dvclive"


class SwanLabTracker(_NotDriven):
    name = "swanlab"


class TrackioTracker(_NotDriven):
    name = "trackio"


LOGGER_TYPE_TO_CLASS: dict[str, type[Tracker]] = {
    cls.name: cls
    for cls in (
        AimTracker,
        CometMLTracker,
        MLflowTracker,
        TensorBoardTracker,
        WandBTracker,
        ClearMLTracker,
        DVCLiveTracker,
        SwanLabTracker,
        TrackioTracker,
    )
}


def register_tracker_class(tracker_class: type) -> None:
    """Make ``log_with="<tracker_class.name>"`` build ``tracker_class(run_name, **kwargs)``
    (with ``logging_dir=`` when it sets ``requires_logging_directory``)."""
    if not (isinstance(tracker_class, type) and issubclass(tracker_class, GeneralTracker)):
        raise TrackerError(
            f"register_tracker_class({tracker_class!r}): a tracker class subclasses "
            "overdrive.tracking.GeneralTracker\n  fix: subclass GeneralTracker"
        )
    name = tracker_class.__dict__.get("name")
    if not isinstance(name, str) or not name:
        raise TrackerError(
            f"register_tracker_class({tracker_class.__name__}): the class sets no `name`\n"
            "  fix: set name = 'my_tracker' on the class"
        )
    declared = any(
        "requires_logging_directory" in vars(k)
        for k in tracker_class.__mro__
        if k not in (GeneralTracker, Tracker, object)
    )
    if not declared:
        raise TrackerError(
            f"register_tracker_class({tracker_class.__name__}): the class does not say whether "
            "it writes under a logging directory\n  fix: set requires_logging_directory = "
            "True or False on the class"
        )
    if name in LOGGER_TYPE_TO_CLASS:
        warnings.warn(
            f"register_tracker_class: {name!r} was {LOGGER_TYPE_TO_CLASS[name].__name__}, "
            f"now {tracker_class.__name__}",
            UserWarning,
            stacklevel=2,
        )
    LOGGER_TYPE_TO_CLASS[name] = tracker_class
