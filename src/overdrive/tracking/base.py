"""The Tracker interface, and the no-op tracker every non-main process gets."""

from __future__ import annotations

import math
import numbers
from pathlib import Path
from typing import Any

from overdrive.errors import OverdriveError


class TrackerError(OverdriveError, ValueError):
    """A tracker cannot start or log as asked (unknown, not installed, no logging directory,
    already finished). A ValueError too, as Hugging Face Accelerate raises for these."""


class Tracker:
    """One experiment tracker run. Subclasses set ``name`` and implement the hooks.

    ``tracker`` is the underlying run object (``SummaryWriter``, wandb ``Run``, mlflow
    ``ActiveRun``...), returned by ``accelerator.get_tracker(name, unwrap=True)``.
    """

    name: str = "base"
    requires_logging_directory: bool = False
    """True when the tracker writes under ``logging_dir`` (an error names it when unset)."""

    def __init__(self, project_name: str, logging_dir: Path | None, **init_kwargs: Any) -> None:
        self.project_name = project_name
        self.logging_dir = logging_dir
        self.finished = False

    def check_open(self, what: str) -> None:
        """Raise a TrackerError when ``what`` comes after ``finish`` (``end_training``)."""
        if getattr(self, "finished", False):
            raise TrackerError(
                f"{what} on the {self.name} tracker after end_training() finished it; "
                "nothing would be recorded\n  fix: log before end_training(), or call "
                "init_trackers() again to start a new run"
            )

    def mark_finished(self) -> bool:
        """Record that the run is finished; False when it already was (finish is idempotent)."""
        if getattr(self, "finished", False):
            return False
        self.finished = True
        return True

    @property
    def tracker(self) -> Any:
        return self

    def start(self) -> None:
        """Open the run; ``init_trackers`` calls it on the process(es) that log."""

    def store_init_configuration(self, config: dict[str, Any]) -> None:
        """Record the run's hyperparameters once, at start."""

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Record ``values`` (name -> number, text...) at ``step``."""

    def finish(self) -> None:
        """Flush and close; called by ``end_training``."""


class GeneralTracker(Tracker):
    """The base class of your own tracker, as in Hugging Face Accelerate: set ``name`` and
    ``requires_logging_directory`` on the class, override ``start``, ``tracker``,
    ``store_init_configuration``, ``log`` and ``finish``, then pass an instance in
    ``log_with`` or register the class by name with ``register_tracker_class``."""

    main_process_only = True

    def __init__(self, _blank: bool = False) -> None:
        Tracker.__init__(self, "", None)


class _NoOpRun:
    """Stands in for a tracker's run object on non-main processes: every call does nothing."""

    def __getattr__(self, name: str) -> Any:
        return _NoOpRun()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _NoOpRun()

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "<no-op tracker run (not the main process)>"


class NoOpTracker(Tracker):
    """Same name and API as the real tracker; writes nothing (non-main processes)."""

    def __init__(self, name: str) -> None:
        super().__init__("", None)
        self.name = name

    @property
    def tracker(self) -> Any:
        return _NoOpRun()

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        self.check_open("log")  # the same error as the main process's tracker

    def finish(self) -> None:
        self.mark_finished()

    def __repr__(self) -> str:
        return f"NoOpTracker({self.name!r})"


def scalar(value: Any) -> float | int | None:
    """``value`` as a plain number (one-element tensors and numpy scalars included), else
    None."""
    if hasattr(value, "numel") and hasattr(value, "item"):
        if value.numel() != 1:
            return None
        value = value.item()
    elif hasattr(value, "item") and getattr(value, "shape", None) == ():
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    return value if isinstance(value, int) else float(value)


def plain(value: Any) -> Any:
    """A JSON-able version of a config or logged value (numbers stay numbers)."""
    number = scalar(value)
    if number is not None:
        return number if not isinstance(number, float) or math.isfinite(number) else str(number)
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return str(value)
