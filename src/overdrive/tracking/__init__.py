"""Experiment trackers: TensorBoard, Weights & Biases, MLflow and dependency-free JSON lines.

``log_with`` (code, ``ACCELERATE_LOG_WITH``, config file) names them; ``"all"`` means every
one whose package is installed. Only the main process writes; the others get no-op
trackers with the same API. A tracker module is imported only when it is requested.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Any

from overdrive.environment.rank_logging import get_logger
from overdrive.errors import OverdriveError
from overdrive.setup.effective_settings import tracker_config
from overdrive.tracking.available import filter_trackers, get_available_trackers, on_main_process
from overdrive.tracking.base import GeneralTracker, NoOpTracker, Tracker, TrackerError
from overdrive.tracking.known import AVAILABLE, registered_class, tracker_class
from overdrive.tracking.registry import (
    LOGGER_TYPE_TO_CLASS,
    AimTracker,
    ClearMLTracker,
    CometMLTracker,
    DVCLiveTracker,
    MLflowTracker,
    SwanLabTracker,
    TensorBoardTracker,
    TrackioTracker,
    WandBTracker,
    not_driven,
    register_tracker_class,
)

__all__ = [
    "AVAILABLE",
    "LOGGER_TYPE_TO_CLASS",
    "AimTracker",
    "ClearMLTracker",
    "CometMLTracker",
    "DVCLiveTracker",
    "GeneralTracker",
    "MLflowTracker",
    "NoOpTracker",
    "SwanLabTracker",
    "TensorBoardTracker",
    "Tracker",
    "TrackerError",
    "TrackioTracker",
    "WandBTracker",
    "check_logging_dir",
    "check_started",
    "find_tracker",
    "filter_trackers",
    "get_available_trackers",
    "on_main_process",
    "register_tracker_class",
    "start_trackers",
]

logger = get_logger(__name__)


def is_installed(name: str) -> bool:
    package = AVAILABLE[name][2] if name in AVAILABLE else None
    return package is None or importlib.util.find_spec(package) is not None


def requested(log_with: Any) -> list[Any]:
    """Tracker names (or Tracker instances) from a ``log_with`` value, ``"all"`` expanded."""
    if log_with is None:
        return []
    items = [log_with] if isinstance(log_with, (str, Tracker)) else list(log_with)
    out: list[Any] = []
    for item in items:
        if isinstance(item, str) and item.lower() == "all":
            out += [n for n in AVAILABLE if is_installed(n)]
        else:
            out.append(item.lower() if isinstance(item, str) else item)
    unique: list[Any] = []
    for item in out:
        if item not in unique:
            unique.append(item)
    return unique


def _check(names: list[str], source: str) -> None:
    for name in names:
        if name not in AVAILABLE and name not in LOGGER_TYPE_TO_CLASS:
            raise TrackerError(
                f"log_with names {name!r} ({source}), which is not a tracker overdrive knows\n"
                f"  fix: use one or more of {', '.join([*AVAILABLE, 'all'])}, or register your "
                "own with overdrive.tracking.register_tracker_class"
            )
        if getattr(registered_class(name), "not_driven", False):
            raise not_driven(name)
        if registered_class(name) is None and not is_installed(name):
            raise TrackerError(
                f"log_with asks for {name!r} ({source}), but the {AVAILABLE[name][2]} package "
                f"is not installed\n  fix: pip install 'overdrive[{AVAILABLE[name][3]}]', or "
                f"remove {name!r} from log_with"
            )


def _needs_directory(item: Any) -> bool:
    if isinstance(item, str):
        return bool(getattr(tracker_class(item), "requires_logging_directory", False))
    return False  # an instance was built with its own directory


def _logging_dir(accelerator: Any, items: list[Any], source: str) -> Path | None:
    """``logging_dir``, else ``project_dir`` itself (Hugging Face Accelerate's layout: a run
    named ``exp`` under ``project_dir='runs'`` writes to ``runs/exp``)."""
    pc = getattr(accelerator, "project_configuration", None)
    logging_dir = getattr(pc, "logging_dir", None) or getattr(pc, "project_dir", None)
    needing = [i for i in items if _needs_directory(i)]
    if logging_dir is None and needing:
        raise TrackerError(
            f"Logging with `{needing[0]}` requires a `logging_dir`: log_with asks for "
            f"{', '.join(needing)} ({source}), which write(s) under a logging directory, but "
            "neither logging_dir nor project_dir is set\n"
            "  fix: Accelerator(project_dir='runs/exp1') or Accelerator(logging_dir='logs')"
        )
    return Path(logging_dir) if logging_dir is not None else None


def _log_with(accelerator: Any) -> tuple[Any, str]:
    """``log_with`` and where it came from."""
    settings = getattr(accelerator, "settings", None)
    log_with = settings["log_with"] if settings is not None else None
    if log_with is None:
        log_with = getattr(accelerator, "log_with", None)
    try:
        source = str(settings.source("log_with")) if settings is not None else "code"
    except (KeyError, AttributeError):
        source = "code"
    return log_with, source


def check_logging_dir(accelerator: Any) -> None:
    """At ``Accelerator(...)``: the trackers asked for exist, and those that write files have
    a directory (refused now, as Hugging Face Accelerate does, not at ``init_trackers``)."""
    log_with, source = _log_with(accelerator)
    items = requested(log_with)
    _check([i for i in items if isinstance(i, str)], source)
    _logging_dir(accelerator, items, source)


def _build(name: str, project_name: str, logging_dir: Path | None, kwargs: dict[str, Any]) -> Any:
    """A started tracker by name: ours from (project, logging_dir, init kwargs); a registered
    class with Hugging Face Accelerate's (run_name[, logging_dir=...], **kwargs)."""
    cls = registered_class(name)
    if cls is None:
        ours: Any = tracker_class(name)
        requested = getattr(ours, "requested", None)
        tracker = requested(project_name, logging_dir, kwargs) if requested else None
        if tracker is None:
            tracker = ours(project_name, logging_dir, **kwargs)
    else:
        if getattr(cls, "requires_logging_directory", False):
            kwargs = {"logging_dir": str(logging_dir), **kwargs}
        tracker = cls(project_name, **kwargs)
    tracker.start()
    return tracker


def start_trackers(
    accelerator: Any,
    project_name: str,
    config: dict[str, Any] | None = None,
    init_kwargs: dict[str, dict[str, Any]] | None = None,
) -> list[Tracker]:
    """Start every tracker in ``log_with``: real ones on the main process, no-ops elsewhere.

    ``init_kwargs`` maps a tracker name to keyword arguments for its run (for example
    ``{"wandb": {"mode": "offline"}}``). Trackers an earlier call started are finished first.
    """
    log_with, source = _log_with(accelerator)
    items = requested(log_with)
    _check([i for i in items if isinstance(i, str)], source)
    init_kwargs = dict(init_kwargs or {})
    names = {*AVAILABLE, *LOGGER_TYPE_TO_CLASS, *(getattr(i, "name", "") for i in items)}
    unknown = sorted(set(init_kwargs) - names)
    if unknown:
        raise TrackerError(
            f"init_trackers(init_kwargs=...) has entries for {unknown}, which are not "
            f"trackers\n  fix: key init_kwargs by tracker name: {', '.join(AVAILABLE)}"
        )
    logging_dir = _logging_dir(accelerator, items, source)
    for previous in getattr(accelerator, "trackers", None) or []:
        previous.finish()  # init_trackers again: the earlier runs end, none is left open
    if not accelerator.state.is_main_process:
        return [NoOpTracker(i if isinstance(i, str) else i.name) for i in items]
    # Our trackers also record the effective settings; one written for Hugging Face
    # Accelerate gets the user's configuration as given (its writer may know only those keys).
    ours = tracker_config(getattr(accelerator, "settings", None), config)
    trackers: list[Tracker] = []
    for item in items:
        if isinstance(item, Tracker):
            tracker = item
            tracker.start()
        else:
            tracker = _build(item, project_name, logging_dir, dict(init_kwargs.get(item, {})))
        stored = config if isinstance(tracker, GeneralTracker) else ours
        if stored is not None:
            tracker.store_init_configuration(stored)
        trackers.append(tracker)
    return trackers


def check_started(log_with: Any, trackers: list[Tracker]) -> None:
    """Raise when ``log_with`` names trackers but ``init_trackers`` has not started them
    (``accelerator.log`` would otherwise drop the values without a word)."""
    if trackers or not requested(log_with):
        return
    names = [i if isinstance(i, str) else i.name for i in requested(log_with)]
    raise TrackerError(
        f"log() was called before init_trackers(): log_with names {', '.join(names)}, but "
        "no tracker is running, so these values would be lost\n"
        "  fix: call accelerator.init_trackers('project_name') once before logging"
    )


def find_tracker(trackers: list[Tracker], name: str, unwrap: bool = False) -> Any:
    """The running tracker called ``name`` (its own object with ``unwrap``), or an error
    naming the running ones."""
    for tracker in trackers:
        if tracker.name == name:
            return tracker.tracker if unwrap else tracker
    raise OverdriveError(
        f"no tracker named {name!r} is running (running: "
        f"{[t.name for t in trackers] or 'none'}); start it with init_trackers() and log_with"
    )
