"""Hugging Face Accelerate's tracker helpers: which trackers this environment can run
(``get_available_trackers``), ``log_with`` checked and de-duplicated (``filter_trackers``),
and ``on_main_process`` for the methods of a tracker of your own."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from overdrive.environment.process_env import detect_process_env
from overdrive.tracking.base import Tracker, TrackerError
from overdrive.tracking.known import AVAILABLE, registered_class, tracker_class
from overdrive.tracking.registry import LOGGER_TYPE_TO_CLASS, not_driven

F = TypeVar("F", bound=Callable[..., Any])

DRIVEN = ("tensorboard", "wandb", "mlflow")
"""The trackers of Hugging Face Accelerate's list that overdrive runs itself."""


def get_available_trackers() -> list[str]:
    """The name of each tracker overdrive runs whose package is installed. Hugging Face
    Accelerate lists ``LoggerType`` members; ``LoggerType`` is a ``str`` enum, so the names
    compare equal to them (``LoggerType.TENSORBOARD in get_available_trackers()``).
    ``"jsonl"``, overdrive's own, needs no package and is not in Accelerate's list."""
    return [name for name in DRIVEN if importlib.util.find_spec(name) is not None]


def _needs_directory(name: str) -> bool:
    if name not in AVAILABLE and name not in LOGGER_TYPE_TO_CLASS:
        return False
    return bool(getattr(tracker_class(name), "requires_logging_directory", False))


def filter_trackers(log_with: Any, logging_dir: Any = None) -> list[Any]:
    """``log_with`` as the trackers to start: tracker objects as they are, names (lower
    case, ``LoggerType`` members as their values) once each, ``"all"`` as every available one; a tracker that writes under a directory needs
    ``logging_dir``. An unknown name, or one overdrive does not run, is an error (a
    ``ValueError``), as at ``Accelerator(log_with=...)``; a known tracker whose package is
    missing is left out."""
    if log_with is None:
        return []
    items = list(log_with) if isinstance(log_with, (list, tuple)) else [log_with]
    if any(isinstance(i, str) and str(i).lower() == "all" for i in items):
        return [i for i in items if isinstance(i, Tracker)] + get_available_trackers()
    chosen: list[Any] = []
    for item in items:
        if isinstance(item, Tracker):
            chosen.append(item)
            continue
        name = str(getattr(item, "value", item)).lower()
        if name not in AVAILABLE and name not in LOGGER_TYPE_TO_CLASS:
            raise TrackerError(
                f"Unsupported logging capability: {item}. Choose between "
                f"{', '.join([*AVAILABLE, 'all'])}, or a name registered with "
                "register_tracker_class"
            )
        registered = registered_class(name)
        if getattr(registered, "not_driven", False):
            raise not_driven(name)
        if registered is None and name in DRIVEN and importlib.util.find_spec(name) is None:
            continue  # as in Hugging Face Accelerate: a tracker not installed is skipped
        if _needs_directory(name) and logging_dir is None:
            raise TrackerError(f"Logging with `{name}` requires a `logging_dir` to be passed in.")
        if name not in chosen:
            chosen.append(name)
    return chosen


def _rank() -> int:
    """This process's rank: the process group's, else the launcher's (0 alone)."""
    import os

    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return int(dist.get_rank())
    return detect_process_env(os.environ).rank


def on_main_process(function: F) -> F:
    """Decorator for a tracker's methods: when the tracker sets ``main_process_only``, the
    method runs on the main process only (None elsewhere). Which process is main is asked
    when the method runs, not when the tracker is made."""

    @wraps(function)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not getattr(self, "main_process_only", False) or _rank() == 0:
            return function(self, *args, **kwargs)
        return None

    return run  # type: ignore[return-value]
