"""What overdrive says about a run that works: only when asked, each note once per folder.

A run that works prints nothing from overdrive by default; what changes a result (a refusal, a
setting that cannot take effect, behaviour that differs silently) is a warning and always
said. With the ``verbose`` setting (``--verbose`` to ``overdrive launch`` or
``python -m overdrive.run``, ``OVERDRIVE_VERBOSE=1``, or ``verbose: true`` in the config file)
the effective settings and the notes appear too. A note shown for an output folder
(``project_dir``, else ``logging_dir``) is remembered in ``<folder>/.overdrive_notes`` and not
shown there again; without a folder, a note is shown once per process.

Text goes to the application's logging where it handles the ``overdrive.*`` logger's records,
else to standard error.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from typing import Any

NOTES_FILE = ".overdrive_notes"
_SHOWN: set[tuple[str | None, str]] = set()


def is_verbose(settings: Any) -> bool:
    """Whether the settings ask for the notes (the ``verbose`` setting)."""
    try:
        return bool(settings["verbose"])
    except (KeyError, TypeError):
        return False


def _threshold(logger: str) -> int:
    """The level set on ``logger`` or ``overdrive``; INFO when neither is set."""
    for name in (logger, "overdrive"):
        level = logging.getLogger(name).level
        if level != logging.NOTSET:
            return level
    return logging.INFO


def emit(level: int, text: str, logger: str = "overdrive.setup.notes") -> None:
    """Give ``text`` to the application's logging if it takes the record, else to stderr."""
    log = logging.getLogger(logger)
    if log.hasHandlers() and log.isEnabledFor(level):
        log.log(level, text)
    elif level >= _threshold(logger):
        prefix = "overdrive: warning: " if level >= logging.WARNING else "overdrive: "
        sys.stderr.write(prefix + text + "\n")
        sys.stderr.flush()


def first_time(key: str, folder: str | None) -> bool:
    """True the first time ``key`` is asked about for ``folder`` (recorded there if it exists)."""
    path = os.path.join(folder, NOTES_FILE) if folder and os.path.isdir(folder) else None
    if (path, key) in _SHOWN:
        return False
    _SHOWN.add((path, key))
    if path is None:
        return True
    shown: list[str] = []
    with contextlib.suppress(OSError, ValueError):
        with open(path, encoding="utf-8") as handle:
            loaded = json.load(handle)
        shown = [str(k) for k in loaded] if isinstance(loaded, list) else []
    if key in shown:
        return False
    with contextlib.suppress(OSError):  # an unwritable folder: said once per process instead
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump([*shown, key], handle)
        os.replace(tmp, path)
    return True


def note(settings: Any, key: str, text: str, folder: str | None = None) -> None:
    """Say ``text`` when verbose, once per output folder (or per process without one)."""
    if is_verbose(settings) and first_time(key, folder):
        emit(logging.INFO, text)


def output_folder(accelerator: Any) -> str | None:
    """Where a run writes: ``project_dir``, else ``logging_dir``; None when neither is set."""
    for name in ("project_dir", "logging_dir"):
        with contextlib.suppress(Exception):
            value = getattr(accelerator, name)
            if value:
                return str(value)
    return None
