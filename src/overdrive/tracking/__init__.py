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

from overdrive.effective_settings import tracker_config
from overdrive.tracking.base import NoOpTracker, Tracker, TrackerError

__all__ = [
    "AVAILABLE",
    "NoOpTracker",
    "Tracker",
    "TrackerError",
    "check_started",
    "start_trackers",
]

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


def is_installed(name: str) -> bool:
    package = AVAILABLE[name][2]
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
        if name not in AVAILABLE:
            raise TrackerError(
                f"log_with names {name!r} ({source}), which is not a tracker overdrive knows\n"
                f"  fix: use one or more of {', '.join([*AVAILABLE, 'all'])}"
            )
        if not is_installed(name):
            raise TrackerError(
                f"log_with asks for {name!r} ({source}), but the {AVAILABLE[name][2]} package "
                f"is not installed\n  fix: pip install 'overdrive[{AVAILABLE[name][3]}]', or "
                f"remove {name!r} from log_with"
            )


def _logging_dir(accelerator: Any, names: list[str], source: str) -> Path | None:
    pc = getattr(accelerator, "project_configuration", None)
    logging_dir = getattr(pc, "logging_dir", None)
    project_dir = getattr(pc, "project_dir", None)
    if logging_dir is None and project_dir:
        logging_dir = str(Path(project_dir) / "logs")
    needing = [n for n in names if getattr(_class(n), "requires_logging_directory", False)]
    if logging_dir is None and needing:
        raise TrackerError(
            f"log_with asks for {', '.join(needing)} ({source}), which write(s) under a "
            "logging directory, but neither logging_dir nor project_dir is set\n"
            "  fix: Accelerator(project_dir='runs/exp1') or Accelerator(logging_dir='logs')"
        )
    return Path(logging_dir) if logging_dir is not None else None


def _class(name: str) -> type[Tracker]:
    module, cls, _, _ = AVAILABLE[name]
    tracker_class: type[Tracker] = getattr(importlib.import_module(module), cls)
    return tracker_class


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
    settings = getattr(accelerator, "settings", None)
    log_with = settings["log_with"] if settings is not None else None
    if log_with is None:
        log_with = getattr(accelerator, "log_with", None)
    try:
        source = str(settings.source("log_with")) if settings is not None else "code"
    except (KeyError, AttributeError):
        source = "code"
    items = requested(log_with)
    names = [i for i in items if isinstance(i, str)]
    _check(names, source)
    init_kwargs = dict(init_kwargs or {})
    unknown = sorted(set(init_kwargs) - set(AVAILABLE))
    if unknown:
        raise TrackerError(
            f"init_trackers(init_kwargs=...) has entries for {unknown}, which are not "
            f"trackers\n  fix: key init_kwargs by tracker name: {', '.join(AVAILABLE)}"
        )
    logging_dir = _logging_dir(accelerator, names, source)
    for previous in getattr(accelerator, "trackers", None) or []:
        previous.finish()  # init_trackers again: the earlier runs end, none is left open
    if not accelerator.state.is_main_process:
        return [NoOpTracker(i if isinstance(i, str) else i.name) for i in items]
    config = tracker_config(settings, config)  # the effective settings, with their sources
    trackers: list[Tracker] = []
    for item in items:
        if isinstance(item, Tracker):
            tracker = item
        else:
            tracker = _class(item)(project_name, logging_dir, **dict(init_kwargs.get(item, {})))
        if config is not None:
            tracker.store_init_configuration(config)
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
