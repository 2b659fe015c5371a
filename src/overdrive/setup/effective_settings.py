"""The settings in force once the Accelerator exists, said once by rank 0, given to trackers.

The launcher's banner can only know the config file, the environment and the flags; the
script's code may change any of them (``Accelerator(mixed_precision="bf16")``). At the end of
``Accelerator.__init__`` the main process reports every setting that differs from its
default, each with its source (one line, or a few lines of whole settings when there are many,
as under transformers' Trainer); nothing when nothing is set. Trackers record, besides, the
settings code set to their default values.

The summary is said only with the ``verbose`` setting (``--verbose``, ``OVERDRIVE_VERBOSE=1``),
as an INFO record of the ``overdrive.settings`` logger (see ``overdrive.setup.notes``); a section
that cannot take effect is a warning, said always.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from overdrive.config import HANDOVER_VARIABLE, Settings, schema
from overdrive.config.inert import inert_sections, no_effect_notes
from overdrive.config.provenance import Source
from overdrive.config.settings import display_value
from overdrive.setup.notes import emit, is_verbose

LOGGER = "overdrive.settings"
TRACKER_KEY = "overdrive_settings"


def effective(settings: Settings) -> list[tuple[str, Any, Source]]:
    """(key, value, source) of every setting that differs from its default or came from code,
    except those that cannot take effect under overdrive (each is warned about instead)."""
    rows = []
    for setting in schema.SETTINGS:
        if setting.no_effect is not None:
            continue
        resolved = settings.resolved(setting.key)
        if resolved.source.kind == "default":
            continue
        if resolved.source.kind == "code" or resolved.value != setting.default:
            rows.append((setting.key, resolved.value, resolved.source))
    return rows


ONE_LINE = 200
"""Longest summary kept on one line; a longer one lists its settings on lines of ``WIDTH``."""
WIDTH = 100


def _pack(items: list[str]) -> list[str]:
    """Whole items, comma-separated, on indented lines of at most ``WIDTH`` characters."""
    lines: list[str] = []
    for item in items:
        if lines and len(lines[-1]) + len(item) + 2 <= WIDTH:
            lines[-1] += f" {item}"
        else:
            lines.append(f"  {item}")
        lines[-1] += ","
    lines[-1] = lines[-1][:-1]
    return lines


def summary(settings: Settings, world_size: int = 1) -> str | None:
    """``effective settings (rank 0 of 2): key=value (source), ...`` for the settings not at
    their default (a count of those code set to their default), or None if there are none.
    Past ``ONE_LINE`` characters the settings go on lines of their own."""
    rows = effective(settings)
    changed = [row for row in rows if row[1] != schema.get(row[0]).default]
    if not changed:
        return None
    items = [f"{key}={display_value(value)} ({source})" for key, value, source in changed]
    head = f"effective settings (rank 0 of {world_size})"
    same = len(rows) - len(changed)
    tail = f"; {same} more set in code to their default values" if same else ""
    line = f"{head}: {', '.join(items)}{tail}"
    if len(line) <= ONE_LINE:
        return line
    return "\n".join([f"{head}, {len(changed)} not at their default{tail}:", *_pack(items)])


def tracker_config(settings: Settings | None, config: dict[str, Any] | None) -> Any:
    """The run configuration a tracker stores: the user's, plus the effective settings."""
    rows = effective(settings) if isinstance(settings, Settings) else []
    if not rows:
        return config
    recorded = {key: {"value": value, "source": str(source)} for key, value, source in rows}
    merged = dict(config or {})
    merged.setdefault(TRACKER_KEY, recorded)  # a user's own key of that name is kept
    return merged


def report(accelerator: Any) -> None:
    """On the main process: the effective settings, and sections that cannot take effect."""
    if not accelerator.is_main_process:
        return
    settings: Settings = accelerator.settings
    text = summary(settings, accelerator.num_processes) if is_verbose(settings) else None
    if text is not None:
        emit(logging.INFO, text, LOGGER)
    launched = HANDOVER_VARIABLE in os.environ  # the launcher already warned about the rest
    notes = inert_sections(settings, from_code_only=launched)
    for note in [*notes, *no_effect_notes(settings, from_code_only=launched)]:
        emit(logging.WARNING, note, LOGGER)
